/**
 * What the perfdata backend tests share: `statusngin_service_perfdata` jobs built from checks
 * (with recent check times, which Prometheus requires), the hostile names every backend must
 * carry, and a gearmand + MariaDB + worker set-up with the chosen backends.
 */
import type { PerfdataBackend, WorkerConfig } from "../../src/daemon/mod.ts";
import { createScratchDatabase, type ScratchDatabase } from "./mysql.ts";
import { type Gearmand, startGearmand } from "./gearmand.ts";
import {
  createSchema,
  metricValue,
  startTestWorker,
  testConfig,
  type TestWorker,
} from "./worker.ts";

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
