/**
 * A losstest backlog for fault tests: marker events published to a private
 * gearmand before the worker starts, and the losstest check afterwards that
 * every one of them is in MySQL exactly once (D1, D7).
 */
import assert from "node:assert/strict";
import { GearmanClient } from "../../src/gearman/client.ts";
import {
  formatRanges,
  LOSSTEST_QUEUE,
  losstestJobs,
  parseLossMarker,
  verifyRows,
} from "../../src/cli/losstest.ts";
import { ALL_TABLES } from "../../src/mysql/catalogue.ts";
import type { Gearmand } from "./gearmand.ts";
import { createWorkerUser, type Mariadbd, startMariadbd } from "./mariadbd.ts";
import { waitFor } from "./wait.ts";
import { createSchema, jobsAtGearmand } from "./worker.ts";

/** Events of a default backlog (1,000 jobs of 100). */
export const BACKLOG_EVENTS = 100_000;

/** Where the rows are read from: a scratch database or a private server's database. */
export interface Queryable {
  query<T = unknown>(sql: string, params?: unknown[]): Promise<T>;
}

/** One database of a private server, as a {@link Queryable}. */
export function serverDb(server: Mariadbd, database: string): Queryable {
  return { query: <T>(sql: string, p?: unknown[]) => server.query<T>(sql, p, database) };
}

/**
 * A private MariaDB holding `database` with the worker's schema and its unprivileged user
 * (`WORKER_USER`): one node of the multi-server fault tests.
 */
export async function startWorkerServer(database: string): Promise<Mariadbd> {
  const server = await startMariadbd();
  try {
    await server.query(`CREATE DATABASE ${database} CHARACTER SET utf8mb4`);
    await createSchema(server.url({ database }));
    await createWorkerUser(server, database, ALL_TABLES.map((t) => t.name));
    return server;
  } catch (err: unknown) {
    await server.stop();
    throw err;
  }
}

/**
 * Publish the run's marker jobs; each job gets its own unique id (persistent queues).
 *
 * @returns The number of jobs.
 */
export async function publishBacklog(
  addr: string,
  runId: string,
  count = BACKLOG_EVENTS,
): Promise<number> {
  await using client = await GearmanClient.connect(addr, { window: 200 });
  const pending: Promise<string>[] = [];
  let jobs = 0;
  for (const job of losstestJobs(runId, count)) {
    pending.push(
      client.submitBackground(LOSSTEST_QUEUE, job.payload, { unique: crypto.randomUUID() }),
    );
    jobs++;
    if (pending.length >= 500) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  return jobs;
}

/** Marker events of the run committed so far. */
export async function committed(db: Queryable, runId: string): Promise<number> {
  const [row] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_hostchecks WHERE hostname LIKE ?",
    [`lt-${runId}-%`],
  );
  return Number(row?.n ?? 0);
}

/** The run's sequence numbers committed, one entry per row (a row written twice: twice). */
export async function committedSequences(db: Queryable, runId: string): Promise<number[]> {
  const rows = await db.query<{ hostname: string }[]>(
    "SELECT hostname FROM statusengine_hostchecks WHERE hostname LIKE ?",
    [`lt-${runId}-%`],
  );
  return rows.map((r) => parseLossMarker(runId, r.hostname)).filter((s) => s !== undefined);
}

/** The losstest verify check: every sequence number present, none twice. */
export async function assertNothingMissing(
  db: Queryable,
  runId: string,
  count = BACKLOG_EVENTS,
): Promise<void> {
  const rows = await db.query<{ hostname: string }[]>(
    "SELECT hostname FROM statusengine_hostchecks WHERE hostname LIKE ?",
    [`lt-${runId}-%`],
  );
  const seqs = rows.map((r) => parseLossMarker(runId, r.hostname)).filter((s) =>
    s !== undefined
  ) as number[];
  const report = verifyRows(seqs, count);
  assert.equal(
    report.missing,
    0,
    `missing ${report.missing} of ${count}: ${formatRanges(report.missingRanges)}`,
  );
  assert.equal(report.duplicates, 0);
}

/** Wait until gearmand holds no job of the losstest queue. */
export async function drained(gearmand: Gearmand, timeoutMs = 180_000): Promise<void> {
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, LOSSTEST_QUEUE)) === 0, {
    timeoutMs,
    intervalMs: 200,
    message: "the backlog at gearmand to drain",
  });
}
