/**
 * What the perfdata backend tests share: `statusngin_service_perfdata` jobs built from checks
 * (with recent check times, which Prometheus requires), the hostile names every backend must
 * carry, and a gearmand + MariaDB + worker set-up with the chosen backends.
 */
import type { PerfdataBackend, WorkerConfig } from "../../src/daemon/mod.ts";
import { createScratchDatabase, type ScratchDatabase } from "./mysql.ts";
import { type Gearmand, startGearmand } from "./gearmand.ts";
import { DROP_REASONS } from "../../src/perfdata/sink.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
  type TestWorker,
} from "./worker.ts";
import { waitFor } from "./wait.ts";

/** The perfdata queue. */
export const PERFDATA_QUEUE = "statusngin_service_perfdata";

/** One service check of a perfdata job. */
export interface Check {
  readonly host: string;
  readonly service: string;
  readonly perfData: string;
  /** Epoch seconds. */
  readonly startTime: number;
}

/**
 * A `statusngin_service_perfdata` job (the broker's bulk format) of `checks`.
 *
 * @param checks The checks.
 * @returns The payload.
 */
export function perfdataJob(checks: readonly Check[]): string {
  return JSON.stringify({
    messages: checks.map((c) => ({
      type: 701,
      flags: 0,
      attr: 0,
      timestamp: c.startTime,
      timestamp_usec: 0,
      servicecheck: {
        host_name: c.host,
        service_description: c.service,
        perf_data: c.perfData,
        start_time: c.startTime,
      },
    })),
    format: "none",
  });
}

/** Whole seconds of the worker's clock, a little in the past (every backend takes it). */
export function recentSeconds(): number {
  return Math.floor(Date.now() / 1000) - 120;
}

/**
 * Checks whose names hold everything a backend's syntax reserves: spaces, commas, `=`, quotes,
 * backslashes (one before a space, one at the end), a line break and non-ASCII text.
 *
 * @param t Check time, epoch seconds.
 * @returns Three checks with four gauges in all.
 */
export function hostileChecks(t: number): Check[] {
  return [
    {
      host: "web 01,dc=eu",
      service: 'Disk "C:\\" usage',
      perfData: "'C:\\ used %'=42.5%;80;90;0;100",
      startTime: t,
    },
    {
      host: "köln-ü.example",
      service: "Temperatur ☃\nKüche",
      perfData: "'temp, inner'=-3,7C;;;-40;60 x=0.0000001",
      startTime: t,
    },
    {
      host: "trailing\\",
      service: "back\\slash",
      perfData: "a=1",
      startTime: t,
    },
  ];
}

/**
 * Many ordinary checks for volume: `jobs` jobs of `checksPerJob` checks with two gauges each,
 * one series per (job, check), times from `t`.
 */
export function volumeJobs(jobs: number, checksPerJob: number, t: number): string[] {
  return Array.from(
    { length: jobs },
    (_, j) =>
      perfdataJob(Array.from({ length: checksPerJob }, (_, c) => ({
        host: `host-${j}`,
        service: `service ${c}`,
        perfData: `rta=${j}.${c}ms;100;500;0 pl=${c}%;20;60;0;100`,
        startTime: t,
      }))),
  );
}

/** A running perfdata set-up. */
export interface PerfdataEnv extends AsyncDisposable {
  readonly gearmand: Gearmand;
  readonly db: ScratchDatabase;
  readonly worker: TestWorker;
  /** Rows of statusengine_perfdata. */
  mysqlRows(): Promise<number>;
  /** A series of the worker's registry. */
  metric(name: string, labels?: Record<string, string>): Promise<number>;
}

/**
 * gearmand, a scratch database with the schema, and a worker consuming the perfdata queue.
 *
 * @param backends `--perfdata-backends`.
 * @param overrides Further worker settings (the backends' URLs).
 * @returns The set-up; dispose stops the worker and gearmand and drops the database.
 */
export async function perfdataEnv(
  backends: PerfdataBackend[],
  overrides: Partial<WorkerConfig> = {},
): Promise<PerfdataEnv> {
  const gearmand = await startGearmand();
  const db = await createScratchDatabase();
  await createSchema(db.url);
  const worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    queues: [PERFDATA_QUEUE],
    perfdataBackends: backends,
    ...overrides,
  }));
  return {
    gearmand,
    db,
    worker,
    async mysqlRows() {
      const [row] = await db.query<{ n: number }[]>(
        "SELECT COUNT(*) AS n FROM statusengine_perfdata",
      );
      return Number(row?.n);
    },
    metric: (name, labels = {}) => metricValue(worker, name, labels),
    async [Symbol.asyncDispose]() {
      await worker.stop();
      await gearmand.stop();
      await db.drop();
    },
  };
}

/**
 * The backend's server killed mid-stream: 2,000 points reach it, the server is killed, `jobs`
 * more jobs of 100 points follow. Returns once MySQL holds every row, gearmand no job, and every
 * point offered to the backend is either written or counted as dropped (retries have ended).
 *
 * @param env A set-up writing to MySQL and `backend`.
 * @param backend The backend's metric label.
 * @param kill Kills the backend's server.
 * @param jobs Jobs published after the kill.
 * @param t Check time of the first jobs, epoch seconds (the later ones are a second after).
 */
export async function killBackendMidStream(
  env: PerfdataEnv,
  backend: PerfdataBackend,
  kill: () => Promise<void>,
  jobs: number,
  t: number,
): Promise<void> {
  const written = () => env.metric("statusengine_perfdata_points_written_total", { backend });
  const dropped = async () => {
    let n = 0;
    for (const reason of DROP_REASONS) {
      n += await env.metric("statusengine_perfdata_dropped_total", { backend, reason });
    }
    return n;
  };
  await publish(env.gearmand.addr, PERFDATA_QUEUE, volumeJobs(20, 50, t));
  await waitFor(async () => (await written()) === 20 * 50 * 2, {
    message: "the first 2000 points written",
    timeoutMs: 30_000,
  });
  await kill();
  await publish(env.gearmand.addr, PERFDATA_QUEUE, volumeJobs(jobs, 50, t + 1));
  const total = (20 + jobs) * 50 * 2;
  await waitFor(async () => (await env.mysqlRows()) === total, {
    message: "every perfdata row in MySQL",
    timeoutMs: 60_000,
  });
  await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, PERFDATA_QUEUE)) === 0, {
    message: "every job acknowledged",
  });
  // Retries end (three, with backoff), so every point is either written or counted.
  let counted = 0;
  await waitFor(async () => (counted = (await written()) + (await dropped())) === total, {
    message: `written + dropped = every point offered (${total}; last seen ${counted})`,
    timeoutMs: 30_000,
  });
}
