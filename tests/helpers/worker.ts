/**
 * An in-process worker against a private gearmand (or the test RabbitMQ
 * broker) and a scratch database, built through the same `startWorker` the
 * `run` command uses.
 */
import mysql from "mysql2/promise";
import { type RunningWorker, startWorker, type WorkerConfig } from "../../src/worker.ts";
import { ensureSchema } from "../../src/mysql/schema.ts";
import { mysqlOptionsFromUrl } from "../../src/mysql/url.ts";
import { GearmanClient } from "../../src/gearman/client.ts";
import { adminStatus } from "../../src/gearman/admin.ts";

/**
 * The RabbitMQ broker of the tests: `STATUSENGINE_TEST_RABBITMQ_URL`, default
 * `amqp://guest:guest@127.0.0.1:5672/`. A test that cannot reach it fails.
 */
export function testRabbitMqUrl(): string {
  return Deno.env.get("STATUSENGINE_TEST_RABBITMQ_URL") ?? "amqp://guest:guest@127.0.0.1:5672/";
}

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
    rabbitmq: { url: testRabbitMqUrl(), prefetch: 100 },
    maxJobsPerQueue: 8,
    reconnectIntervalMs: 100,
    heartbeatIntervalMs: 15_000,
    heartbeatTimeoutMs: 5_000,
    drainTimeoutMs: 5_000,
    shutdownFlushTimeoutMs: 5_000,
    mysqlMaxOpenConns: 8,
    mysqlStatementTimeoutMs: 30_000,
    batchSize: 100,
    statusMaxAgeSeconds: 0,
    nodeName: "N",
    deadLetterFile: null,
    perfdataRoute: "mysql",
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

/** Start a worker; stop it with `await using`. */
export async function startTestWorker(
  config: WorkerConfig,
): Promise<RunningWorker & AsyncDisposable> {
  const worker = await startWorker(config);
  return Object.assign(worker, { [Symbol.asyncDispose]: () => worker.stop() });
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
  const metric = worker.metrics.registry.getSingleMetric(name);
  if (metric === undefined) throw new Error(`No metric ${name}`);
  const data = await metric.get();
  const match = data.values.find((v) =>
    Object.entries(labels).every(([k, val]) => (v.labels as Record<string, unknown>)[k] === val)
  );
  return match?.value ?? 0;
}
