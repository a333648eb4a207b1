/**
 * A real Prometheus for one test: its own configuration and data directory, a free port, a
 * scrape interval of 1 s, ready when `/-/ready` answers, stopped by PID.
 *
 * Prometheus must be installed (`apt-get install prometheus`, tools/dev_env.sh does); a test that
 * cannot start it fails, it never skips.
 */
import { freePort } from "./gearmand.ts";

/** One sample of an instant query. */
export interface PromSample {
  readonly metric: Record<string, string>;
  /** The value as Prometheus wrote it (`"NaN"`, `"+Inf"` and numbers). */
  readonly value: string;
}

/** A running Prometheus owned by a test. */
export interface Prometheus extends AsyncDisposable {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly pid: number;
  /**
   * Run an instant query (`/api/v1/query`).
   *
   * @throws {Error} When Prometheus refuses the expression (a syntax error names it).
   */
  query(expr: string): Promise<PromSample[]>;
  /** The alerting rules loaded from the rule files, with their health and state. */
  alertRules(): Promise<PromAlertRule[]>;
  /** Everything Prometheus logged so far. */
  log(): string;
}

/** Options of {@link startPrometheus}. */
export interface PrometheusOptions {
  /** `host:port` targets scraped at `/metrics` under the job name. */
  readonly targets: readonly string[];
  /** Job name of the targets; default `statusengine`. */
  readonly job?: string;
  /** Rule files (absolute paths) evaluated every second. */
  readonly ruleFiles?: readonly string[];
}

/** One alerting rule as `/api/v1/rules` reports it. */
export interface PromAlertRule {
  readonly name: string;
  /** `ok` once evaluated without error, `err` (with {@link lastError}) or `unknown` before. */
  readonly health: string;
  readonly lastError?: string;
  /** `inactive`, `pending` or `firing`. */
  readonly state: string;
}

/**
 * Start a private Prometheus scraping `targets` every second.
 *
 * @example
 * ```ts ignore
 * await using prometheus = await startPrometheus({ targets: [`127.0.0.1:${port}`] });
 * await prometheus.query("up");
 * ```
 */
export async function startPrometheus(options: PrometheusOptions): Promise<Prometheus> {
  const dir = await Deno.makeTempDir({ prefix: "se-prometheus-" });
  const config = [
    "global:",
    "  scrape_interval: 1s",
    "  evaluation_interval: 1s",
    ...(options.ruleFiles === undefined || options.ruleFiles.length === 0
      ? []
      : ["rule_files:", ...options.ruleFiles.map((f) => `  - ${JSON.stringify(f)}`)]),
    "scrape_configs:",
    `  - job_name: ${JSON.stringify(options.job ?? "statusengine")}`,
    "    static_configs:",
    `      - targets: ${JSON.stringify(options.targets)}`,
    "",
  ].join("\n");
  await Deno.writeTextFile(`${dir}/prometheus.yml`, config);
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("prometheus", {
      args: [
        `--config.file=${dir}/prometheus.yml`,
        `--storage.tsdb.path=${dir}/data`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--log.level=warn",
      ],
      cwd: dir,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err: unknown) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw new Error("Cannot start prometheus (install it: apt-get install -y prometheus)", {
      cause: err,
    });
  }
  const output: string[] = [];
  const decoder = new TextDecoder();
  const pump = Promise.all([child.stdout, child.stderr].map(async (stream) => {
    for await (const chunk of stream) output.push(decoder.decode(chunk));
  }));
  let exited = false;
  const done = child.status.then(async (s) => {
    exited = true;
    await pump;
    return s;
  });
  const stop = async () => {
    if (!exited) {
      try {
        child.kill("SIGTERM");
      } catch {
        // already gone
      }
    }
    const kill = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
    }, 5_000);
    try {
      await done;
    } finally {
      clearTimeout(kill);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  };
  const until = performance.now() + 30_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`prometheus exited at start-up: ${output.join("")}`);
    }
    try {
      const res = await fetch(`${url}/-/ready`);
      await res.body?.cancel();
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (performance.now() > until) {
      await stop();
      throw new Error(`prometheus did not become ready within 30 s: ${output.join("")}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    pid: child.pid,
    async query(expr: string): Promise<PromSample[]> {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = await res.json() as {
        status: string;
        error?: string;
        data?: {
          resultType: string;
          result: { metric: Record<string, string>; value: [number, string] }[];
        };
      };
      if (body.status !== "success" || body.data === undefined) {
        throw new Error(`Prometheus refused ${JSON.stringify(expr)}: ${body.error ?? res.status}`);
      }
      if (body.data.resultType !== "vector") {
        throw new Error(`${JSON.stringify(expr)} gave a ${body.data.resultType}, not a vector`);
      }
      return body.data.result.map((r) => ({ metric: r.metric, value: r.value[1] }));
    },
    async alertRules(): Promise<PromAlertRule[]> {
      const res = await fetch(`${url}/api/v1/rules?type=alert`);
      const body = await res.json() as { data: { groups: { rules: PromAlertRule[] }[] } };
      return body.data.groups.flatMap((g) => g.rules);
    },
    log: () => output.join(""),
    [Symbol.asyncDispose]: stop,
  };
}
