/**
 * Real time-series servers for the perfdata tests, each started on free ports with its own
 * temporary data directory and stopped by PID: InfluxDB 1.x (`influxd`), Prometheus 2.x (with
 * its remote-write receiver), VictoriaMetrics and Graphite's carbon-cache. They are installed by
 * tools/dev_env.sh (Debian packages influxdb, prometheus, victoria-metrics, graphite-carbon); a
 * test that cannot start one fails, it never skips.
 */
import { freePort } from "./gearmand.ts";

/** A server process owned by a test. */
export interface ServerProcess extends AsyncDisposable {
  /** PID of the process. */
  readonly pid: number;
  /** The temporary directory holding its data (removed by stop). */
  readonly dir: string;
  /** SIGKILL, no goodbye: the server dies mid-stream. Does not remove the data directory. */
  kill(): Promise<void>;
  /** SIGSTOP: the kernel still accepts connections, the server reads nothing. */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /** SIGTERM, then SIGKILL after a grace period; waits for the exit; removes the data. */
  stop(): Promise<void>;
  /** Everything it wrote to stdout and stderr so far. */
  log(): string;
}

interface Spawned {
  child: Deno.ChildProcess;
  output: string[];
  done: Promise<Deno.CommandStatus>;
}

function spawn(command: string, args: string[], install: string): Spawned {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(command, { args, stdin: "null", stdout: "piped", stderr: "piped" })
      .spawn();
  } catch (err: unknown) {
    throw new Error(`Cannot start ${command} (install it: ${install})`, { cause: err });
  }
  const output: string[] = [];
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      output.push(decoder.decode(chunk, { stream: true }));
      // Keep the last lines only: a long test must not grow memory with server chatter.
      if (output.length > 2000) output.splice(0, 1000);
    }
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const done = child.status.then(async (s) => {
    await pumps.catch(() => {});
    return s;
  });
  return { child, output, done };
}

/** Options of {@link startServer}. */
interface ServerSpec {
  readonly name: string;
  readonly command: string;
  readonly args: (dir: string) => string[] | Promise<string[]>;
  readonly install: string;
  /** Resolves true once the server answers. */
  readonly ready: () => Promise<boolean>;
  readonly timeoutMs?: number;
}

async function startServer(spec: ServerSpec): Promise<ServerProcess> {
  const dir = await Deno.makeTempDir({ prefix: `se-${spec.name}-` });
  const s = spawn(spec.command, await spec.args(dir), spec.install);
  let exited = false;
  void s.done.then(() => exited = true);
  const until = performance.now() + (spec.timeoutMs ?? 30_000);
  let ready = false;
  while (!exited && performance.now() < until) {
    if (await spec.ready().catch(() => false)) {
      ready = true;
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const signal = async (sig: Deno.Signal) => {
    try {
      s.child.kill(sig);
    } catch {
      // already exited
    }
    await s.done;
  };
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      const killTimer = setTimeout(() => {
        try {
          s.child.kill("SIGKILL");
        } catch {
          // already exited
        }
      }, 5000);
      try {
        s.child.kill("SIGCONT"); // a paused server cannot act on SIGTERM
      } catch {
        // already exited
      }
      try {
        await signal("SIGTERM");
      } finally {
        clearTimeout(killTimer);
      }
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    })();
    return stopping;
  };
  if (!ready) {
    await stop();
    throw new Error(
      `Cannot start ${spec.name}: ${exited ? "it exited" : "no answer"}:\n${s.output.join("")}`,
    );
  }
  return {
    pid: s.child.pid,
    dir,
    kill: () => signal("SIGKILL"),
    pause: () => s.child.kill("SIGSTOP"),
    resume: () => s.child.kill("SIGCONT"),
    stop,
    log: () => s.output.join(""),
    [Symbol.asyncDispose]: stop,
  };
}

async function answers(url: string, init?: RequestInit): Promise<boolean> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(1000) });
  await res.body?.cancel();
  return res.ok;
}

/** A running InfluxDB 1.x with one database. */
export interface Influxd extends ServerProcess {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly database: string;
  /** The write URL for the worker (`…/write?db=…`). */
  readonly writeUrl: string;
  /** Run an InfluxQL query and return its first series' rows as objects. */
  query(q: string): Promise<Record<string, unknown>[]>;
}

/**
 * Start `influxd` (InfluxDB 1.x) with authentication off and create `database`.
 *
 * @param database Database to create.
 * @returns The server.
 */
export async function startInfluxd(database = "statusengine"): Promise<Influxd> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = await startServer({
    name: "influxd",
    command: "influxd",
    install: "apt-get install -y influxdb",
    args: async (dir) => {
      const conf = `${dir}/influxdb.conf`;
      await Deno.writeTextFile(
        conf,
        [
          "reporting-disabled = true",
          `bind-address = "127.0.0.1:${freePort()}"`,
          "[meta]",
          `  dir = "${dir}/meta"`,
          "[data]",
          `  dir = "${dir}/data"`,
          `  wal-dir = "${dir}/wal"`,
          '  index-version = "inmem"',
          "  query-log-enabled = false",
          "[http]",
          `  bind-address = "127.0.0.1:${port}"`,
          "  log-enabled = false",
          "[monitor]",
          "  store-enabled = false",
          "[continuous_queries]",
          "  enabled = false",
          "",
        ].join("\n"),
      );
      return ["run", "-config", conf];
    },
    ready: () => answers(`${url}/ping`),
  });
  const query = async (q: string): Promise<Record<string, unknown>[]> => {
    const res = await fetch(
      `${url}/query?db=${encodeURIComponent(database)}&epoch=s&q=${encodeURIComponent(q)}`,
      { method: "POST" },
    );
    const body = await res.json() as {
      results?: { series?: { columns: string[]; values: unknown[][] }[]; error?: string }[];
      error?: string;
    };
    const result = body.results?.[0];
    if (!res.ok || body.error || result?.error) {
      throw new Error(`InfluxQL ${q}: ${body.error ?? result?.error ?? res.status}`);
    }
    const out: Record<string, unknown>[] = [];
    for (const series of result?.series ?? []) {
      for (const v of series.values) {
        out.push(Object.fromEntries(series.columns.map((c, i) => [c, v[i]])));
      }
    }
    return out;
  };
  try {
    await query(`CREATE DATABASE "${database}"`);
  } catch (err: unknown) {
    await server.stop();
    throw err;
  }
  return {
    ...server,
    url,
    database,
    writeUrl: `${url}/write?db=${encodeURIComponent(database)}`,
    query,
  };
}

/** A running Prometheus or VictoriaMetrics, read back through the Prometheus query API. */
export interface PromServer extends ServerProcess {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** Its remote-write endpoint. */
  readonly remoteWriteUrl: string;
  /** `GET /api/v1/query_range` of `query` over [start, end] seconds, step 1 s. */
  queryRange(
    query: string,
    start: number,
    end: number,
  ): Promise<{ metric: Record<string, string>; values: [number, string][] }[]>;
}

async function promQueryRange(
  url: string,
  query: string,
  start: number,
  end: number,
): Promise<{ metric: Record<string, string>; values: [number, string][] }[]> {
  const params = new URLSearchParams({
    query,
    start: String(start),
    end: String(end),
    step: "1",
  });
  const res = await fetch(`${url}/api/v1/query_range?${params}`);
  const body = await res.json() as {
    status: string;
    error?: string;
    data?: { result: { metric: Record<string, string>; values: [number, string][] }[] };
  };
  if (body.status !== "success") throw new Error(`query_range ${query}: ${body.error}`);
  return body.data?.result ?? [];
}

/**
 * Start Prometheus 2.x with its remote-write receiver and nothing to scrape.
 *
 * @returns The server.
 */
export async function startPrometheus(): Promise<PromServer> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = await startServer({
    name: "prometheus",
    command: "prometheus",
    install: "apt-get install -y prometheus",
    args: async (dir) => {
      await Deno.writeTextFile(`${dir}/prometheus.yml`, "global:\n  scrape_interval: 1h\n");
      return [
        `--config.file=${dir}/prometheus.yml`,
        `--storage.tsdb.path=${dir}/data`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--web.enable-remote-write-receiver",
        "--log.level=warn",
      ];
    },
    ready: () => answers(`${url}/-/ready`),
  });
  return {
    ...server,
    url,
    remoteWriteUrl: `${url}/api/v1/write`,
    queryRange: (q, s, e) => promQueryRange(url, q, s, e),
  };
}

/** A running VictoriaMetrics (single node). */
export interface VictoriaMetrics extends PromServer {
  /** Its InfluxDB line-protocol endpoint (`…/write?db=…`). */
  readonly influxWriteUrl: string;
  /** Make what was written searchable now (VictoriaMetrics indexes in the background). */
  flush(): Promise<void>;
}

/**
 * Start VictoriaMetrics on a free port with its own storage directory.
 *
 * @returns The server.
 */
export async function startVictoriaMetrics(): Promise<VictoriaMetrics> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = await startServer({
    name: "victoria-metrics",
    command: "victoria-metrics",
    install: "apt-get install -y victoria-metrics",
    args: (dir) => [
      `-storageDataPath=${dir}/data`,
      `-httpListenAddr=127.0.0.1:${port}`,
      "-retentionPeriod=100y",
      "-search.latencyOffset=0s",
      "-loggerLevel=ERROR",
    ],
    ready: () => answers(`${url}/health`),
  });
  return {
    ...server,
    url,
    remoteWriteUrl: `${url}/api/v1/write`,
    influxWriteUrl: `${url}/write?db=statusengine`,
    queryRange: (q, s, e) => promQueryRange(url, q, s, e),
    async flush() {
      const res = await fetch(`${url}/internal/force_flush`);
      await res.body?.cancel();
    },
  };
}

/** A running carbon-cache. */
export interface CarbonCache extends ServerProcess {
  /** `127.0.0.1:<port>` of its plaintext listener. */
  readonly addr: string;
  /** Where it writes whisper files. */
  readonly storageDir: string;
  /**
   * The points of `path` (dotted metric path) within [from, until] seconds, read from its
   * whisper file with whisper-fetch; `[]` while the file does not exist yet.
   */
  fetch(path: string, from: number, until: number): Promise<[number, number][]>;
}

/**
 * Start carbon-cache in the foreground, storing every metric at 1-second resolution for six
 * hours (the tests write recent check times; whisper preallocates every archive, and a ten-year
 * archive made each metric file 60 MB).
 *
 * @param options A fixed port (a restart on the same address).
 * @returns The server.
 */
export async function startCarbonCache(options: { port?: number } = {}): Promise<CarbonCache> {
  const port = options.port ?? freePort();
  let storageDir = "";
  const server = await startServer({
    name: "carbon-cache",
    command: "carbon-cache",
    install: "apt-get install -y graphite-carbon python3-whisper",
    args: async (dir) => {
      storageDir = `${dir}/whisper`;
      await Deno.writeTextFile(
        `${dir}/storage-schemas.conf`,
        "[everything]\npattern = .*\nretentions = 1s:6h\n",
      );
      await Deno.writeTextFile(
        `${dir}/carbon.conf`,
        [
          "[cache]",
          `STORAGE_DIR = ${dir}/`,
          `LOCAL_DATA_DIR = ${storageDir}/`,
          `WHITELISTS_DIR = ${dir}/lists/`,
          `LOG_DIR = ${dir}/log/`,
          `PID_DIR = ${dir}/`,
          "ENABLE_LOGROTATION = False",
          "MAX_CACHE_SIZE = inf",
          "MAX_UPDATES_PER_SECOND = 100000",
          "MAX_CREATES_PER_MINUTE = inf",
          "LINE_RECEIVER_INTERFACE = 127.0.0.1",
          `LINE_RECEIVER_PORT = ${port}`,
          "ENABLE_UDP_LISTENER = False",
          "PICKLE_RECEIVER_INTERFACE = 127.0.0.1",
          `PICKLE_RECEIVER_PORT = ${freePort()}`,
          "CACHE_QUERY_INTERFACE = 127.0.0.1",
          `CACHE_QUERY_PORT = ${freePort()}`,
          "LOG_UPDATES = False",
          "LOG_CREATES = False",
          "LOG_LISTENER_CONNECTIONS = False",
          "WHISPER_AUTOFLUSH = True",
          "",
        ].join("\n"),
      );
      return [
        `--config=${dir}/carbon.conf`,
        "--nodaemon",
        `--pidfile=${dir}/carbon-cache.pid`,
        "start",
      ];
    },
    ready: async () => {
      try {
        const conn = await Deno.connect({ hostname: "127.0.0.1", port });
        conn.close();
        return true;
      } catch {
        return false;
      }
    },
  });
  return {
    ...server,
    addr: `127.0.0.1:${port}`,
    storageDir,
    async fetch(path, from, until) {
      const file = `${storageDir}/${path.replaceAll(".", "/")}.wsp`;
      try {
        await Deno.stat(file);
      } catch {
        return [];
      }
      const out = await new Deno.Command("whisper-fetch", {
        args: ["--json", `--from=${from}`, `--until=${until}`, file],
        stdout: "piped",
        stderr: "piped",
      }).output();
      if (!out.success) {
        throw new Error(`whisper-fetch ${file}: ${new TextDecoder().decode(out.stderr)}`);
      }
      const body = JSON.parse(new TextDecoder().decode(out.stdout)) as {
        start: number;
        step: number;
        values: (number | null)[];
      };
      const points: [number, number][] = [];
      body.values.forEach((v, i) => {
        if (v !== null) points.push([body.start + i * body.step, v]);
      });
      return points;
    },
  };
}
