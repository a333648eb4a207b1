/**
 * The `status` subcommand: one screen answering "is the pipeline healthy right now?" (queue
 * depths at every job server or the RabbitMQ broker, MySQL, and a running worker's `/metrics`,
 * docs/operations.md#metrics), each source bounded in time.
 *
 * @module
 */
import { adminStatus, adminVersion } from "../../gearman/admin.ts";
import { AmqpPublisher } from "../../amqp/publisher.ts";
import { parseAmqpUrl } from "../../util/amqp_url.ts";
import { QUEUE_NAMES } from "../../events/mod.ts";
import { errorMessage } from "../../log.ts";
import { METRICS } from "../../metrics/catalogue.ts";
import {
  connectMysql,
  describeMysqlConnectFailure,
  endMysql,
  type MysqlConnectProblem,
  mysqlConnectProblem,
  mysqlOptionsFromUrl,
} from "../../mysql/mod.ts";
import { abortable, deadline, delay } from "../../util/async.ts";
import { redactText, redactUrl } from "../../util/redact.ts";
import { parsePrometheusText, type PrometheusSample, sampleValue } from "./parse.ts";

export interface StatusCommandOptions {
  /** Job servers (`host:port`), each asked in parallel. Ignored with `rabbitmqUrl`. */
  readonly gearmanAddr: readonly string[];
  /** Ask this RabbitMQ broker for the queue depths instead (`--consumer rabbitmq`). */
  readonly rabbitmqUrl?: string | undefined;
  readonly mysqlUrl: string;
  /** A running worker's metrics endpoint (a URL without a path gets `/metrics`). */
  readonly metricsUrl?: string | undefined;
  /** A worker on this host's `/metrics`, read without `metricsUrl`; none there is no failure. */
  readonly localMetricsUrl?: string | undefined;
  readonly json: boolean;
  /** Time between the two scrapes the write rates come from; default 1000 ms (tests). */
  readonly rateIntervalMs?: number;
}

/** One job server, or the RabbitMQ broker (`addr` its URL, password masked; no `version`). */
interface JobServerStatus {
  readonly addr: string;
  readonly kind: "gearman" | "rabbitmq";
  readonly ok: boolean;
  readonly version: string | null;
  readonly error: string | null;
}

/** A queue at a server (null: unknown, as `running` at RabbitMQ); `waiting`: total − running. */
interface QueueAtServer {
  readonly addr: string;
  readonly waiting: number | null;
  readonly running: number | null;
  readonly workers: number | null;
}

/**
 * One queue row: `servers` in `gearmanAddr` order; `inFlight`/`connected` are the worker's
 * `statusengine_queue_jobs_in_flight` and `…_connected` (null without metrics).
 */
interface QueueStatus {
  readonly name: string;
  readonly consumed: boolean;
  readonly servers: readonly QueueAtServer[];
  readonly inFlight: number | null;
  readonly connected: number | null;
}

/** Whether MySQL answers; `host` only with several hosts in the URL: the one that answered. */
interface MysqlStatus {
  readonly url: string;
  readonly ok: boolean;
  readonly problem: MysqlConnectProblem | null;
  readonly version: string | null;
  /** Connect plus first query. */
  readonly latencyMs: number | null;
  readonly error: string | null;
  readonly host: string | null;
}

/** The worker, from its `/metrics`; `local`: the local default rather than `--metrics-url`. */
interface WorkerStatus {
  readonly url: string;
  readonly local: boolean;
  readonly ok: boolean;
  readonly error: string | null;
  /** The connection was refused: no worker listens there (a hung one accepts). */
  readonly refused: boolean;
  readonly dbAvailable: number | null;
  /** `statusengine_mysql_host_in_use` 1. */
  readonly mysqlHost: string | null;
  readonly intervalSeconds: number | null;
  /** Writes of each table between the scrapes; the rate is null when the counter went backwards. */
  readonly tables: readonly { table: string; written: number; rowsPerSecond: number | null }[];
}

/**
 * Everything `status` reports, also the `--json` document; `ok` false (exit 1) when a job
 * server, MySQL, the given metrics URL or a worker at the local one is unreachable.
 */
export interface StatusReport {
  readonly ok: boolean;
  readonly jobServers: readonly JobServerStatus[];
  readonly queues: readonly QueueStatus[];
  readonly mysql: MysqlStatus;
  readonly worker: WorkerStatus | null;
}

/** docs/gearman-protocol.md#admin: cap the admin read time. */
const ADMIN_TIMEOUT_MS = 2_000;
/** The worker's start-up ping's bound. */
const MYSQL_TIMEOUT_MS = 5_000;
const SCRAPE_TIMEOUT_MS = 2_000;

interface Probe {
  readonly server: JobServerStatus;
  /** Queues the server knows, by name. */
  readonly queues: ReadonlyMap<string, Omit<QueueAtServer, "addr">>;
}

async function probeJobServer(addr: string): Promise<Probe> {
  try {
    const [functions, version] = await Promise.all([
      adminStatus(addr, { timeoutMs: ADMIN_TIMEOUT_MS }),
      adminVersion(addr, { timeoutMs: ADMIN_TIMEOUT_MS }),
    ]);
    return {
      server: { addr, kind: "gearman", ok: true, version, error: null },
      queues: new Map(functions.map((f) => [f.function, {
        waiting: Math.max(0, f.total - f.running),
        running: f.running,
        workers: f.workers,
      }])),
    };
  } catch (err: unknown) {
    return unreachable(addr, "gearman", err);
  }
}

function unreachable(addr: string, kind: JobServerStatus["kind"], err: unknown): Probe {
  return {
    server: { addr, kind, ok: false, version: null, error: errorMessage(err) },
    queues: new Map(),
  };
}

/**
 * Ready messages and consumers of the consumed queues at the RabbitMQ broker, by passive
 * declaration (unacknowledged ones only the management API has); a queue not declared yet is
 * left empty. A connection lost or silent meanwhile makes the broker a failure.
 */
async function probeRabbitMq(url: string): Promise<Probe> {
  // Masked before parsing: a URL that does not parse is still shown, without its password.
  let addr = redactUrl(url);
  try {
    addr = parseAmqpUrl(url).display;
    // Passive declarations only: the durability flag is not sent. The bound is shared by the
    // brokers of the URL, so a silent first one leaves time for the next.
    const bound = { timeoutMs: ADMIN_TIMEOUT_MS };
    const connecting = AmqpPublisher.connect(url, { durableQueues: false }, bound);
    const publisher = await bounded(connecting).catch((err: unknown) => {
      connecting.then((p) => p.close(), () => {});
      throw err;
    });
    const queues = new Map<string, Omit<QueueAtServer, "addr">>();
    try {
      for (const name of QUEUE_NAMES) {
        try {
          const { ready, consumers } = await bounded(publisher.depth(name));
          queues.set(name, { waiting: ready, running: null, workers: consumers });
        } catch (err: unknown) {
          // Not declared yet: no worker has started and the broker module has published nothing.
          if (!/NOT_FOUND|\(404\)/.test(errorMessage(err))) throw err;
        }
      }
    } finally {
      // Not awaited: a silent broker never answers the close either.
      void publisher.close();
    }
    return { server: { addr, kind: "rabbitmq", ok: true, version: null, error: null }, queues };
  } catch (err: unknown) {
    return unreachable(addr, "rabbitmq", err);
  }
}

/** `promise`, or a failure once {@link ADMIN_TIMEOUT_MS} passed without its answer. */
async function bounded<T>(promise: Promise<T>): Promise<T> {
  using limit = deadline(ADMIN_TIMEOUT_MS);
  try {
    return await abortable(promise, limit.signal);
  } catch (err: unknown) {
    if (limit.signal.aborted) throw new Error(`no answer within ${ADMIN_TIMEOUT_MS} ms`);
    throw err;
  }
}

async function probeMysql(url: string): Promise<MysqlStatus> {
  const shown = redactUrl(url);
  const failed = { url: shown, ok: false, problem: null, version: null, latencyMs: null };
  let password: string | undefined;
  const started = performance.now();
  try {
    const options = mysqlOptionsFromUrl(url);
    password = options.password;
    const { connection, serverVersion, host } = await connectMysql(options, {
      timeoutMs: MYSQL_TIMEOUT_MS,
    });
    const latencyMs = Math.round(performance.now() - started);
    await endMysql(connection);
    const hostShown = options.hosts === undefined ? null : host;
    return { ...failed, ok: true, version: serverVersion, latencyMs, error: null, host: hostShown };
  } catch (err: unknown) {
    const error = redactText(describeMysqlConnectFailure(err, shown), password);
    return { ...failed, problem: mysqlConnectProblem(err), error, host: null };
  }
}

/** `http://host:port` alone means the worker's `/metrics`. */
function normaliseMetricsUrl(url: string): string {
  if (!URL.canParse(url)) return url;
  const parsed = new URL(url);
  if (parsed.pathname === "/" || parsed.pathname === "") parsed.pathname = "/metrics";
  return parsed.href;
}

async function scrape(url: string): Promise<{ samples: PrometheusSample[]; at: number }> {
  // The limit covers the body too: a worker may send its headers and then stall.
  using limit = deadline(SCRAPE_TIMEOUT_MS);
  let text: string;
  try {
    const response = await fetch(url, { signal: limit.signal });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`HTTP ${response.status}`);
    }
    text = await response.text();
  } catch (err: unknown) {
    const why = limit.signal.aborted
      ? `no answer within ${SCRAPE_TIMEOUT_MS} ms`
      : errorMessage(err);
    throw new Error(`Cannot scrape ${url}: ${why}`, { cause: err });
  }
  const at = performance.now();
  const samples = parsePrometheusText(text);
  if (!samples.some((s) => s.name.startsWith("statusengine_"))) {
    throw new Error(`Cannot scrape ${url}: no statusengine_* metrics (not a worker?)`);
  }
  return { samples, at };
}

function wasRefused(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = e.cause) {
    if (/connection refused/i.test(e.message)) return true;
  }
  return false;
}

/**
 * Two scrapes of the worker `intervalMs` apart; `atSecond` runs alongside the second scrape,
 * so what it reads (the job servers' queues) is from the same moment as the worker's
 * in-flight jobs and connections of the second scrape.
 */
async function probeWorker<T>(
  url: string,
  local: boolean,
  intervalMs: number,
  atSecond: () => Promise<T>,
): Promise<{ worker: WorkerStatus; samples: readonly PrometheusSample[]; alongside: T }> {
  const target = normaliseMetricsUrl(url);
  const base = {
    url: target,
    local,
    ok: false,
    error: null,
    refused: false,
    dbAvailable: null,
    mysqlHost: null,
    intervalSeconds: null,
    tables: [],
  };
  let alongside: Promise<T> | undefined;
  try {
    const first = await scrape(target);
    await delay(intervalMs);
    alongside = atSecond();
    const [second] = await Promise.all([scrape(target), alongside]);
    const seconds = (second.at - first.at) / 1000;
    const written = METRICS.dbEventsWritten.name;
    const tables = second.samples.flatMap(({ name, labels: { table }, value }) => {
      if (name !== written || table === undefined) return [];
      const before = sampleValue(first.samples, written, { table });
      const rowsPerSecond = before === null || value < before || seconds <= 0
        ? null
        : (value - before) / seconds;
      return [{ table, written: value, rowsPerSecond }];
    });
    return {
      alongside: await alongside,
      worker: {
        ...base,
        ok: true,
        dbAvailable: sampleValue(second.samples, METRICS.dbAvailable.name),
        mysqlHost: second.samples.find((s) =>
          s.name === METRICS.mysqlHostInUse.name && s.value === 1
        )?.labels.host ?? null,
        intervalSeconds: seconds,
        tables,
      },
      samples: second.samples,
    };
  } catch (err: unknown) {
    return {
      // The job servers are asked even when the worker does not answer.
      alongside: await (alongside ?? atSecond()),
      worker: { ...base, error: errorMessage(err), refused: wasRefused(err) },
      samples: [],
    };
  }
}

/**
 * Gather the report: MySQL alongside the worker's metrics (two scrapes about
 * `rateIntervalMs` apart), and the job servers at the second scrape, so that one queue row
 * shows the broker and the worker at the same moment (admin calls 2 s each, MySQL 5 s).
 * Without a worker URL the job servers are asked at once.
 */
export async function collectStatus(options: StatusCommandOptions): Promise<StatusReport> {
  const probeServers = () =>
    options.rabbitmqUrl === undefined
      ? Promise.all(options.gearmanAddr.map(probeJobServer))
      : Promise.all([probeRabbitMq(options.rabbitmqUrl)]);
  const workerUrl = options.metricsUrl ?? options.localMetricsUrl;
  const interval = options.rateIntervalMs ?? 1_000;
  const [mysql, probed] = await Promise.all([
    probeMysql(options.mysqlUrl),
    workerUrl === undefined
      ? probeServers().then((alongside) => ({ alongside, worker: undefined, samples: [] }))
      : probeWorker(workerUrl, options.metricsUrl === undefined, interval, probeServers),
  ]);
  const { alongside: servers, worker, samples } = probed;
  const consumed: readonly string[] = QUEUE_NAMES;
  const others = [...new Set(servers.flatMap((s) => [...s.queues.keys()]))]
    .filter((name) => !consumed.includes(name)).sort();
  // No worker, or one that did not answer: no samples, so every metric is null.
  const metric = (name: string, queue: string) => sampleValue(samples, name, { queue_name: queue });
  const queues = [...consumed, ...others].map((name): QueueStatus => ({
    name,
    consumed: consumed.includes(name),
    servers: servers.map(({ server, queues }): QueueAtServer => ({
      addr: server.addr,
      ...(queues.get(name) ?? { waiting: null, running: null, workers: null }),
    })),
    inFlight: metric(METRICS.queueJobsInFlight.name, name),
    connected: metric(METRICS.queueConnected.name, name),
  }));
  const jobServers = servers.map((s) => s.server);
  return {
    ok: jobServers.every((s) => s.ok) && mysql.ok &&
      // Only an empty local port means "no worker here"; one that fails otherwise is a worker.
      (worker === undefined || worker.ok || (worker.local && worker.refused)),
    jobServers,
    queues,
    mysql,
    worker: worker ?? null,
  };
}
