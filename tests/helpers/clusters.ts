/**
 * Real 3-node clusters for one test: MariaDB Galera (tools/galera_cluster.sh) and RabbitMQ
 * (tools/rabbitmq_cluster.sh), started on a free block of ports below 32768 by the scripts
 * (docs/testing.md, "Test clusters"). Starting one takes about a minute, so a test file starts
 * each kind once and runs its cases on it, and never two at once: the machine is shared.
 *
 * A cluster is stopped by the PIDs its script wrote (never by name) when the test disposes of
 * it, and also when the test process gets SIGINT or SIGTERM, so an interrupted run leaves no
 * server behind. A test that cannot start one fails, it never skips.
 */
import { waitFor } from "./wait.ts";

/** One running node of a test cluster. */
interface ClusterNode {
  /** As the script names it: `node1`, or `rabbit1@localhost`. */
  readonly name: string;
  /** The SQL or AMQP port on 127.0.0.1. */
  readonly port: number;
  readonly pid: number;
  /** `mysql://root@127.0.0.1:PORT/` or `amqp://guest:guest@127.0.0.1:PORT/`. */
  readonly url: string;
}

/** A running 3-node cluster. */
export interface TestCluster extends AsyncDisposable {
  /** The cluster's directory (data, logs, pid files). */
  readonly dir: string;
  /** Nodes 1, 2 and 3, in that order. */
  readonly nodes: readonly ClusterNode[];
  /**
   * SIGKILL one node by its PID (a crash: no goodbye to its peers) and wait until it is gone.
   *
   * @param node 1, 2 or 3.
   */
  kill(node: number): Promise<void>;
  /** Stop every node still running (the script's `stop`) and remove the directory. Idempotent. */
  stop(): Promise<void>;
}

/** A running 3-node RabbitMQ cluster. */
export interface RabbitMqTestCluster extends TestCluster {
  /**
   * Run `rabbitmqctl` against one node (a policy, a list), failing with its output.
   *
   * @param node 1, 2 or 3.
   * @param args The command and its arguments.
   * @returns What it printed on stdout.
   */
  ctl(node: number, ...args: string[]): Promise<string>;
}

/** How many ports one cluster's layout spans from its base port (3 nodes, 10 apart). */
const PORT_SPAN = 24;

function script(name: string): string {
  return new URL(`../../tools/${name}`, import.meta.url).pathname;
}

/** A base port whose whole layout is free now, below the ephemeral range (32768 and up). */
function freePortBlock(): number {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + 10 * Math.floor(Math.random() * 1_200);
    const held: Deno.Listener[] = [];
    try {
      for (let port = base; port < base + PORT_SPAN; port++) {
        held.push(Deno.listen({ hostname: "127.0.0.1", port }));
      }
      return base;
    } catch {
      // one of them is taken: try another block
    } finally {
      for (const listener of held) listener.close();
    }
  }
  throw new Error(`No block of ${PORT_SPAN} free ports between 20000 and 32000`);
}

/** Whether the process is gone (or a zombie nobody has reaped yet: it runs no more). */
async function gone(pid: number): Promise<boolean> {
  try {
    return /^State:\s*Z/m.test(await Deno.readTextFile(`/proc/${pid}/status`));
  } catch {
    return true;
  }
}

async function runScript(
  path: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<string> {
  const out = await new Deno.Command(path, {
    args: [...args],
    env,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new Error(`${path} ${args.join(" ")} failed (${out.code}):\n${stderr}${stdout}`);
  }
  return stdout;
}

/**
 * Remove a stopped cluster's directory. Something of a node that has just exited can still add a
 * file there while the directory is being removed (seen once in CI: "Directory not empty" right
 * after `stop`), so a removal that finds the directory not empty is tried again for up to 10 s.
 */
async function removeWhenSettled(dir: string): Promise<void> {
  for (let attempt = 1;; attempt++) {
    try {
      return await Deno.remove(dir, { recursive: true });
    } catch (err: unknown) {
      if (attempt >= 50 || !(err instanceof Error && /not empty/i.test(err.message))) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

async function startCluster(
  scriptName: string,
  url: (port: number) => string,
  env: Record<string, string> = {},
  count = 3,
): Promise<TestCluster> {
  const path = script(scriptName);
  const dir = await Deno.makeTempDir({ prefix: "se-cluster-" });
  // A port taken between the check and the start fails the start: one more try elsewhere.
  let stdout: string | undefined;
  let lastError: unknown;
  for (let attempt = 0; attempt < 2 && stdout === undefined; attempt++) {
    try {
      stdout = await runScript(path, ["start", dir, "--base-port", String(freePortBlock())], env);
    } catch (err: unknown) {
      lastError = err;
    }
  }
  if (stdout === undefined) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw new Error(`Cannot start a test cluster with ${scriptName}`, { cause: lastError });
  }
  const nodes = [...stdout.matchAll(/^(\S+) port=(\d+) .*pid=(\d+)$/gm)].map((m) => ({
    name: m[1] ?? "",
    port: Number(m[2]),
    pid: Number(m[3]),
    url: url(Number(m[2])),
  }));
  // Interrupted (Ctrl-C, a CI timeout): stop the servers before the process ends.
  const onSignal = () => {
    new Deno.Command(path, { args: ["stop", dir], stdout: "null", stderr: "null" }).outputSync();
    Deno.exit(130);
  };
  const signals = ["SIGINT", "SIGTERM"] as const;
  for (const signal of signals) Deno.addSignalListener(signal, onSignal);
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      for (const signal of signals) Deno.removeSignalListener(signal, onSignal);
      await runScript(path, ["stop", dir]);
      await removeWhenSettled(dir);
    })();
    return stopping;
  };
  if (nodes.length !== count) {
    await stop();
    throw new Error(`${scriptName} start printed no ${count} node lines:\n${stdout}`);
  }
  return {
    dir,
    nodes,
    async kill(node: number) {
      const target = nodes[node - 1];
      if (target === undefined) throw new Error(`No node ${node} (nodes are 1 to 3)`);
      Deno.kill(target.pid, "SIGKILL");
      await waitFor(() => gone(target.pid), { message: `${target.name} to exit after SIGKILL` });
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/**
 * Start a 3-node MariaDB Galera cluster (all nodes Synced) on a free block of ports.
 *
 * @example
 * ```ts ignore
 * await using cluster = await startGaleraCluster();
 * const [first, second] = cluster.nodes;
 * await cluster.kill(2);
 * ```
 */
export function startGaleraCluster(): Promise<TestCluster> {
  return startCluster("galera_cluster.sh", (port) => `mysql://root@127.0.0.1:${port}/`);
}

/**
 * Start a 3-node RabbitMQ cluster (every node running, clustered) on a free block of ports, or
 * with `nodes: 1` one node alone: a broker of the test's own, whose state (a resource alarm) the
 * test may change without touching the shared one.
 *
 * @example
 * ```ts ignore
 * await using cluster = await startRabbitMqCluster();
 * await cluster.kill(1);
 * ```
 */
export async function startRabbitMqCluster(
  { nodes = 3 }: { nodes?: 1 | 3 } = {},
): Promise<RabbitMqTestCluster> {
  const cluster = await startCluster(
    "rabbitmq_cluster.sh",
    (port) => `amqp://guest:guest@127.0.0.1:${port}/`,
    { RABBITMQ_CLUSTER_NODES: String(nodes) },
    nodes,
  );
  return {
    ...cluster,
    async ctl(node, ...args) {
      const name = cluster.nodes[node - 1]?.name;
      if (name === undefined) throw new Error(`No node ${node} (nodes are 1 to 3)`);
      // The nodes' own cookie, which the script wrote for them (not the host broker's).
      const cookie = (await Deno.readTextFile(`${cluster.dir}/home/.erlang.cookie`)).trim();
      const out = await new Deno.Command("rabbitmqctl", {
        args: ["--erlang-cookie", cookie, "-n", name, ...args],
        stdout: "piped",
        stderr: "piped",
      }).output();
      if (!out.success) {
        const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
        throw new Error(`rabbitmqctl -n ${name} ${args.join(" ")} failed: ${text.trim()}`);
      }
      return new TextDecoder().decode(out.stdout);
    },
  };
}
