/**
 * A private RabbitMQ virtual host per test, so tests that consume the real
 * queue names (`statusngin_*`) can run in parallel on one broker without
 * seeing each other's messages. Created and removed with `rabbitmqctl`, which
 * runs on the broker's host in this environment; a test that cannot create
 * one fails (it never skips).
 */
import { testRabbitMqUrl } from "./worker.ts";

/** A scratch vhost and the URL that reaches it with the test credentials. */
export interface ScratchVhost extends AsyncDisposable {
  readonly name: string;
  /** The test broker URL with this vhost as its path. */
  readonly url: string;
  /**
   * Close every client connection of the vhost from the broker's side
   * (`rabbitmqctl close_all_connections`): what an operator or a broker
   * restart does to a running worker.
   */
  closeConnections(): Promise<void>;
}

async function rabbitmqctl(...args: string[]): Promise<void> {
  const out = await new Deno.Command("rabbitmqctl", { args, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    throw new Error(`rabbitmqctl ${args.join(" ")} failed (${out.code}): ${text.trim()}`);
  }
}

/**
 * Create a vhost and grant the test user every permission on it.
 *
 * @param prefix Start of the vhost name.
 * @returns The vhost; dispose of it to delete it with everything in it.
 */
export async function createScratchVhost(prefix = "se_test"): Promise<ScratchVhost> {
  const name = `${prefix}_${crypto.randomUUID().slice(0, 8)}`;
  const base = new URL(testRabbitMqUrl());
  const user = decodeURIComponent(base.username);
  await rabbitmqctl("add_vhost", name);
  try {
    await rabbitmqctl("set_permissions", "-p", name, user, ".*", ".*", ".*");
  } catch (err: unknown) {
    await rabbitmqctl("delete_vhost", name).catch(() => {});
    throw err;
  }
  const url = new URL(base.href);
  url.pathname = `/${encodeURIComponent(name)}`;
  return {
    name,
    url: url.href,
    closeConnections: () =>
      rabbitmqctl("close_all_connections", "--vhost", name, "closed by the test"),
    async [Symbol.asyncDispose]() {
      await rabbitmqctl("delete_vhost", name);
    },
  };
}
