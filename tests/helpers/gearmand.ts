/**
 * A real gearmand for one test, started in the foreground on a free port
 * (docs/gearman-protocol.md#test-gearmand: `-d` exits 0 even when the port is taken), ready when the
 * admin `version` command answers, stopped by PID.
 *
 * gearmand must be installed (`apt-get install gearman-job-server`); a test
 * that cannot start it fails, it never skips.
 */
import { adminCommand, adminVersion } from "../../src/gearman/admin.ts";

/** A running gearmand owned by a test. */
export interface Gearmand extends AsyncDisposable {
  /** `127.0.0.1:<port>`. */
  readonly addr: string;
  readonly port: number;
  /** PID of the current process (changes after a restart). */
  readonly pid: number;
  /** SIGTERM, then SIGKILL after a grace period; waits for the exit. Idempotent. */
  stop(): Promise<void>;
  /** Stop and start again on the same port (in-memory queue lost unless persistent). */
  restart(): Promise<void>;
  /** Everything gearmand wrote to stderr so far. */
  log(): string;
}

/** Options of {@link startGearmand}. */
export interface GearmandOptions {
  /** Use this port instead of a free one. */
  readonly port?: number;
  /** Keep jobs in a sqlite file so a restart replays them (docs/gearman-protocol.md#persistent-queues). */
  readonly sqliteFile?: string;
  /** gearmand `--threads`; default 1 (lowest latency on 2 cores, docs/gearman-protocol.md#throughput). */
  readonly threads?: number;
  readonly extraArgs?: readonly string[];
}

/** Find a port nobody listens on right now (small race; a failed start retries). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

interface Running {
  child: Deno.ChildProcess;
  stderr: string[];
  done: Promise<Deno.CommandStatus>;
  pump: Promise<void>;
}

async function spawn(port: number, options: GearmandOptions): Promise<Running> {
  // Never point --pid-file at /dev/null: gearmand deletes its pid file on a
  // clean exit, and would delete /dev/null with it.
  const pidDir = await Deno.makeTempDir({ prefix: "se-gearmand-" });
  const args = [
    "--config-file=/dev/null",
    "--listen=127.0.0.1",
    `--port=${port}`,
    `--threads=${options.threads ?? 1}`,
    "--log-file=stderr",
    "--verbose=WARNING",
    `--pid-file=${pidDir}/gearmand.pid`,
    ...(options.sqliteFile === undefined
      ? []
      : ["--queue-type=libsqlite3", `--libsqlite3-db=${options.sqliteFile}`]),
    ...(options.extraArgs ?? []),
  ];
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("gearmand", {
      args,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (err: unknown) {
    throw new Error(
      "Cannot start gearmand (install it: apt-get install -y gearman-job-server)",
      { cause: err },
    );
  }
  const stderr: string[] = [];
  const pump = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) stderr.push(decoder.decode(chunk));
  })();
  const done = child.status.finally(() => Deno.remove(pidDir, { recursive: true }).catch(() => {}));
  return { child, stderr, done, pump };
}

async function waitReady(addr: string, running: Running): Promise<boolean> {
  let exited = false;
  void running.done.then(() => {
    exited = true;
  });
  const until = performance.now() + 10_000;
  while (performance.now() < until) {
    if (exited) return false;
    try {
      await adminVersion(addr, { timeoutMs: 500 });
      return true;
    } catch {
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  return false;
}

async function terminate(running: Running): Promise<void> {
  try {
    running.child.kill("SIGTERM");
  } catch {
    // already exited
  }
  const killTimer = setTimeout(() => {
    try {
      running.child.kill("SIGKILL");
    } catch {
      // already exited
    }
  }, 3000);
  try {
    await running.done;
    await running.pump;
  } finally {
    clearTimeout(killTimer);
  }
}

/**
 * Start a private gearmand.
 *
 * @example
 * ```ts ignore
 * await using gearmand = await startGearmand();
 * // … connect to gearmand.addr …
 * ```
 */
export async function startGearmand(options: GearmandOptions = {}): Promise<Gearmand> {
  let lastLog = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = options.port ?? freePort();
    const addr = `127.0.0.1:${port}`;
    const first = await spawn(port, options);
    if (!(await waitReady(addr, first))) {
      await terminate(first);
      lastLog = first.stderr.join("");
      if (options.port !== undefined && attempt < 4) {
        await new Promise((r) => setTimeout(r, 200));
      }
      continue;
    }
    let current: Running | undefined = first;
    let stopping: Promise<void> | undefined;
    const stop = () => {
      stopping ??= (async () => {
        if (current !== undefined) await terminate(current);
        current = undefined;
      })();
      return stopping;
    };
    const logs: string[] = [];
    return {
      addr,
      port,
      get pid() {
        return current?.child.pid ?? -1;
      },
      stop,
      async restart() {
        if (current !== undefined) {
          await terminate(current);
          logs.push(...current.stderr);
        }
        stopping = undefined;
        for (let i = 0; i < 20; i++) {
          const next = await spawn(port, options);
          if (await waitReady(addr, next)) {
            current = next;
            return;
          }
          await terminate(next);
          logs.push(...next.stderr);
          await new Promise((r) => setTimeout(r, 250));
        }
        current = undefined;
        throw new Error(`Cannot restart gearmand on ${addr}:\n${logs.join("")}`);
      },
      log: () => [...logs, ...(current?.stderr ?? [])].join(""),
      [Symbol.asyncDispose]: stop,
    };
  }
  throw new Error(`Cannot start gearmand: not ready after 5 attempts:\n${lastLog}`);
}

/**
 * The functions each connection registered, from the admin `workers` reply
 * (`FD IP CLIENT-ID : FUNC FUNC…`, the admin connection included).
 *
 * @param addr `host:port`.
 * @returns One list per connection.
 */
export async function registeredFunctions(addr: string): Promise<string[][]> {
  const lines = await adminCommand(addr, "workers");
  return lines.filter((l) => l.includes(" :")).map((l) =>
    l.slice(l.indexOf(" :") + 2).trim().split(/\s+/).filter((f) => f !== "")
  );
}
