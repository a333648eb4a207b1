/**
 * The worker as a separate process (`deno run main.ts run …`), for tests that
 * send it signals: SIGTERM must run the graceful shutdown, SIGKILL must lose
 * nothing (D1).
 */
import { freePort, startGearmand } from "./gearmand.ts";
import { createScratchDatabase } from "./mysql.ts";
import { stoppedTerminal } from "./stopped_terminal.ts";
import { createSchema, publish } from "./worker.ts";
import { waitFor } from "./wait.ts";
import { V8_FLAGS } from "../../tools/compile.ts";
import { NOTIFY_COMMAND } from "../../src/daemon/notify.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** A running worker process. */
export interface WorkerProcess extends AsyncDisposable {
  readonly pid: number;
  /**
   * The process's own working directory, a fresh temporary one: its dead-letter file is
   * `dead-letters.ndjson` in it unless the test passes `--dead-letter-file`. Removed when the
   * worker is disposed.
   */
  readonly dir: string;
  readonly metricsPort: number;
  /** Log lines printed so far (stdout, logfmt). */
  lines(): string[];
  /** stderr text so far. */
  stderr(): string;
  /** Send a signal. */
  kill(signal: Deno.Signal): void;
  /** Resolves with the exit status. */
  readonly status: Promise<Deno.CommandStatus>;
  /** Scrape /metrics once (text). */
  metrics(): Promise<string>;
}

/** Options: extra flags after `run`. */
export interface WorkerProcessOptions {
  /** Job servers; "" leaves the flag out (e.g. with `--consumer rabbitmq` in `args`). */
  readonly gearmanAddr: string;
  readonly mysqlUrl: string;
  readonly args?: readonly string[];
  readonly env?: Record<string, string>;
  /** V8 flags for the worker process; default the ones the compiled binary embeds. */
  readonly v8Flags?: readonly string[];
  /** `/ws` listener address; default a free port on 127.0.0.1. */
  readonly listenAddr?: string;
  /** Entry point of another checkout, to compare versions side by side (benches); default ours. */
  readonly main?: string;
  /**
   * Return once /readyz answers 200 (default), or once it answers at all (`listening`: a start
   * that waits for MySQL or its job servers answers 503).
   */
  readonly waitUntil?: "ready" | "listening";
  /** Every permission, for a test that points a file of the worker at a device (Deno asks --allow-all for /dev). */
  readonly allowAll?: boolean;
}

/**
 * Start the worker process and wait until its metrics port answers /readyz (200, or any answer
 * with `waitUntil: "listening"`).
 *
 * @example
 * ```ts ignore
 * await using w = await startWorkerProcess({ gearmanAddr, mysqlUrl });
 * w.kill("SIGTERM");
 * ```
 */
export async function startWorkerProcess(options: WorkerProcessOptions): Promise<WorkerProcess> {
  const metricsPort = freePort();
  // Parallel test workers must not share a working directory or a dead-letter file.
  const dir = await Deno.makeTempDir({ prefix: "se-worker-" });
  const ownDeadLetterFile = !(options.args ?? []).some((a) =>
    a === "--dead-letter-file" || a.startsWith("--dead-letter-file=")
  );
  try {
    return await spawnWorker(options, metricsPort, dir, ownDeadLetterFile);
  } catch (err: unknown) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
}

async function spawnWorker(
  options: WorkerProcessOptions,
  metricsPort: number,
  dir: string,
  ownDeadLetterFile: boolean,
): Promise<WorkerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...(options.allowAll === true ? ["--allow-all"] : [
        "--allow-net",
        "--allow-env",
        "--allow-read",
        "--allow-write",
        `--allow-run=${NOTIFY_COMMAND}`,
      ]),
      ...((options.v8Flags ?? V8_FLAGS).length === 0
        ? []
        : [`--v8-flags=${(options.v8Flags ?? V8_FLAGS).join(",")}`]),
      options.main ?? MAIN,
      "run",
      ...(options.gearmanAddr === "" ? [] : ["--gearman-addr", options.gearmanAddr]),
      "--mysql-url",
      options.mysqlUrl,
      "--metrics-host",
      "127.0.0.1",
      "--metrics-port",
      String(metricsPort),
      // /ws is served only with keys; a free port keeps parallel workers off the default 8080
      // when a test passes some.
      "--listen-addr",
      options.listenAddr ?? `127.0.0.1:${freePort()}`,
      "--status-max-age",
      "0",
      "--node-name",
      "N",
      "--gearman-reconnect-interval",
      "200ms",
      ...(ownDeadLetterFile ? ["--dead-letter-file", `${dir}/dead-letters.ndjson`] : []),
      ...(options.args ?? []),
    ],
    cwd: dir,
    // Hermetic: no STATUSENGINE_* of the caller leaks into the worker.
    clearEnv: true,
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      HOME: Deno.env.get("HOME") ?? "/root",
      ...(Deno.env.get("DENO_DIR") === undefined
        ? {}
        : { DENO_DIR: Deno.env.get("DENO_DIR") ?? "" }),
      NO_COLOR: "1",
      ...options.env,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out: string[] = [];
  const err: string[] = [];
  let partial = "";
  const pumps = Promise.all([
    (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of child.stdout) {
        partial += decoder.decode(chunk, { stream: true });
        const parts = partial.split("\n");
        partial = parts.pop() ?? "";
        out.push(...parts);
      }
    })(),
    (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of child.stderr) err.push(decoder.decode(chunk));
    })(),
  ]);
  const status = child.status.then(async (s) => {
    await pumps;
    return s;
  });
  let exited = false;
  void status.then(() => (exited = true));
  const until = performance.now() + 30_000;
  for (;;) {
    if (exited) {
      await status;
      throw new Error(`worker exited during start-up:\n${out.join("\n")}\n${err.join("")}`);
    }
    try {
      const res = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
      await res.body?.cancel();
      if (res.status === 200 || options.waitUntil === "listening") break;
    } catch {
      // not listening yet
    }
    if (performance.now() > until) {
      child.kill("SIGKILL");
      await status;
      throw new Error(`worker not ready after 30 s:\n${out.join("\n")}\n${err.join("")}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    pid: child.pid,
    dir,
    metricsPort,
    lines: () => [...out],
    stderr: () => err.join(""),
    kill: (signal) => {
      if (!exited) child.kill(signal);
    },
    status,
    async metrics() {
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      return await res.text();
    },
    async [Symbol.asyncDispose]() {
      if (!exited) {
        child.kill("SIGKILL");
      }
      await status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Value of one series in Prometheus text (first match), 0 when absent. */
export function seriesValue(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number {
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== "{" && rest[0] !== " ") continue;
    if (!Object.entries(labels).every(([k, v]) => rest.includes(`${k}="${v}"`))) continue;
    return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return 0;
}

/** 1 while the worker holds the in-order lease of the downtime queue, else 0. */
export async function holdsInOrderLease(w: WorkerProcess): Promise<number> {
  return seriesValue(await w.metrics(), "statusengine_in_order_lock_held");
}

/** Jobs of `queue` the worker took and has not yet acknowledged. */
export async function jobsInFlight(w: WorkerProcess, queue: string): Promise<number> {
  return seriesValue(await w.metrics(), "statusengine_queue_jobs_in_flight", { queue_name: queue });
}

/**
 * A worker process whose dead-letter write never returns, as one to a hung NFS mount, on a
 * gearmand and a scratch database (with the tables) of its own: its dead-letter file is swapped
 * for a stopped terminal after the start, and one job that needs a dead letter ("not a payload")
 * is in flight, waiting for its record. The drain timeout is 1 s. Disposing it disposes the
 * worker, closes the terminal (a write still waiting fails), then drops the database and stops
 * gearmand.
 *
 * @param queue The one queue the worker consumes, and the one the job goes to.
 * @param args Further flags.
 * @returns The worker once the job is in flight, and its job server's address.
 */
export async function startWorkerWithHungDeadLetter(
  queue: string,
  args: readonly string[] = [],
): Promise<WorkerProcess & { readonly gearmanAddr: string }> {
  await using stack = new AsyncDisposableStack();
  const gearmand = stack.use(await startGearmand());
  const db = stack.use(await createScratchDatabase());
  await createSchema(db.url);
  const terminal = stoppedTerminal();
  stack.defer(() => terminal.close());
  const worker = stack.use(
    await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: db.url,
      args: ["--queues", queue, "--drain-timeout", "1s", ...args],
      allowAll: true,
    }),
  );
  await terminal.replace(`${worker.dir}/dead-letters.ndjson`);
  await publish(gearmand.addr, queue, ["not a payload"]);
  await waitFor(async () => (await jobsInFlight(worker, queue)) === 1, {
    message: "the job waiting for its dead-letter record",
  });
  const owned = stack.move();
  return {
    ...worker,
    gearmanAddr: gearmand.addr,
    [Symbol.asyncDispose]: () => owned.disposeAsync(),
  };
}

/** Jobs of the downtime queue the worker completed so far. */
export async function downtimeJobsCompleted(w: WorkerProcess): Promise<number> {
  return seriesValue(await w.metrics(), "statusengine_queue_jobs_total", {
    queue_name: "statusngin_downtimes",
    result: "completed",
  });
}

/** Sum of every series of `name` in Prometheus text, 0 when absent. */
export function seriesSum(text: string, name: string): number {
  let n = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) {
      n += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return n;
}
