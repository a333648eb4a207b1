/**
 * An in-process worker against a private gearmand (or the test RabbitMQ
 * broker) and a scratch database, built through the same `startWorker` the
 * `run` command uses.
 */
import { registryValue } from "./metric_registry.ts";
import mysql from "mysql2/promise";
import { type RunningWorker, startWorker, type WorkerConfig } from "../../src/daemon/mod.ts";
import { ensureSchema } from "../../src/mysql/schema.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { GearmanClient } from "../../src/gearman/client.ts";
import { adminStatus } from "../../src/gearman/admin.ts";
import { defaultOf, SETTING_ROWS } from "../../src/config/settings.ts";
import { parseGoDuration } from "../../src/config/values.ts";

/**
 * The `run` default of an integer or duration setting (durations in milliseconds), so test
 * workers run as an installation does.
 */
export function runDefault(flag: string): number {
  const row = SETTING_ROWS.find((r) => r.flag === flag);
  const text = row === undefined ? undefined : defaultOf(row, "run");
  if (text === undefined) throw new Error(`No default for --${flag}`);
  if (/^[0-9]+$/.test(text)) return Number(text);
  const duration = parseGoDuration(text);
  if (!duration.ok) {
    throw new Error(`--${flag}: default ${text} is neither a number nor a duration`);
  }
  return duration.value;
}

/**
 * The RabbitMQ broker of the tests: `STATUSENGINE_TEST_RABBITMQ_URL`, default
 * `amqp://guest:guest@127.0.0.1:5672/`. A test that cannot reach it fails.
 */
export function testRabbitMqUrl(): string {
  return Deno.env.get("STATUSENGINE_TEST_RABBITMQ_URL") ?? "amqp://guest:guest@127.0.0.1:5672/";
}

/** The default dead-letter file of a test worker, relative to its own directory. */
export const TEST_DEAD_LETTER_FILE = "dead-letters.ndjson";

/**
 * Queue durability of every test publisher, consumer and worker: the default of
 * `--rabbitmq-durable-queues` (and of the broker module's DurableQueues), so the tests declare
 * exactly as a default installation does.
 */
export const TEST_QUEUE_DURABILITY = { durableQueues: false } as const;

/**
 * Worker settings suitable for tests; override what a test needs. A RabbitMQ
 * worker (`consumer: "rabbitmq"`) gets the test broker with prefetch 100
 * unless `rabbitmq` is given.
 */
export function testConfig(
  overrides: Partial<WorkerConfig> & Pick<WorkerConfig, "mysqlUrl">,
): WorkerConfig {
  return {
    gearmanServers: [],
    rabbitmq: { url: testRabbitMqUrl(), prefetch: 100, ...TEST_QUEUE_DURABILITY },
    maxJobsPerQueue: runDefault("gearman-max-concurrent-jobs-per-queue"),
    reconnectIntervalMs: 100,
    drainTimeoutMs: 5_000,
    shutdownFlushTimeoutMs: 5_000,
    mysqlMaxOpenConns: 8,
    mysqlStatementTimeoutMs: 30_000,
    mysqlFailbackAfterMs: runDefault("mysql-failback-after"),
    mysqlGiveBackAfterMs: runDefault("mysql-give-back-after"),
    mysqlWritersPerTable: runDefault("mysql-writers-per-table"),
    batchSize: 100,
    statusMaxAgeSeconds: 0,
    nodeName: "N",
    // Relative: startTestWorker puts it into the worker's own temporary directory.
    deadLetterFile: TEST_DEAD_LETTER_FILE,
    perfdataBackends: ["mysql"],
    perfdataLabelQuotes: "keep",
    graphite: { addr: "127.0.0.1:2003", prefix: "statusengine", batchSize: 100 },
    openItcockpit: false,
    metrics: null,
    statsIntervalMs: 0,
    ...overrides,
  };
}

/** Create the Statusengine schema in a (scratch) database. */
export async function createSchema(url: string): Promise<void> {
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(url));
  try {
    await ensureSchema(conn);
  } finally {
    await conn.end();
  }
}

/** A test worker with its own directory. */
export interface TestWorker extends RunningWorker, AsyncDisposable {
  /** The worker's own temporary directory; removed when the worker is disposed. */
  readonly dir: string;
  /** The dead-letter file actually used (a relative setting resolved into `dir`), or null. */
  readonly deadLetterFile: string | null;
}

/**
 * Start a worker; stop it with `await using` or `stop()`. Each worker gets a fresh temporary directory, and
 * a relative `deadLetterFile` (the default of {@linkcode testConfig}) is put into it, so
 * parallel tests never share a dead-letter file and nothing is written into the repository.
 */
export async function startTestWorker(config: WorkerConfig): Promise<TestWorker> {
  const dir = await Deno.makeTempDir({ prefix: "se-worker-" });
  const file = config.deadLetterFile;
  const deadLetterFile = file === null || file.startsWith("/") ? file : `${dir}/${file}`;
  let worker: RunningWorker;
  try {
    worker = await startWorker({ ...config, deadLetterFile });
  } catch (err: unknown) {
    await Deno.remove(dir, { recursive: true });
    throw err;
  }
  const stopWorker = worker.stop.bind(worker);
  // Tests stop a worker either way (`await using` or stop()); both remove its directory.
  const stop = async () => {
    try {
      await stopWorker();
    } finally {
      await Deno.remove(dir, { recursive: true }).catch((err: unknown) => {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
      });
    }
  };
  return Object.assign(worker, {
    dir,
    deadLetterFile,
    stop,
    [Symbol.asyncDispose]: stop,
  });
}

/** Submit background jobs (pipelined) to one job server. */
export async function publish(
  addr: string,
  fn: string,
  payloads: readonly (string | Uint8Array)[],
): Promise<void> {
  await using client = await GearmanClient.connect(addr);
  await Promise.all(payloads.map((p) => client.submitBackground(fn, p)));
}

/** Jobs of a function still at gearmand (queued + running). */
export async function jobsAtGearmand(addr: string, fn: string): Promise<number> {
  const status = await adminStatus(addr);
  return status.find((s) => s.function === fn)?.total ?? 0;
}

/** Current value of one series of a worker's registry (0 when the series does not exist). */
export async function metricValue(
  worker: RunningWorker,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  return await registryValue(worker.metrics, name, labels);
}
