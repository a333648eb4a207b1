/**
 * A MySQL restart under one worker while a downtime's ADD is being written and its START
 * waits behind it at a real gearmand (issue: a plain MySQL restart lost a downtime's start).
 *
 * The worker used to treat its dead in-order lock connection as a lost election: it stopped
 * the downtimes consumer, abandoned the ADD whose write MySQL had not taken, and gearmand put
 * the ADD back behind the START. Once MySQL was back the START ran first ("downtime update
 * matched no row, the event is lost") and the ADD after it, so the history row said the
 * downtime never started. The worker must keep the ADD and its place, take its lock again,
 * and apply ADD then START.
 *
 * Deterministic: the ADD's write is held by a table lock on the private server (visible in
 * its process list) until the server goes down, so MySQL never commits it before the
 * restart; the test waits on conditions, and the outage lasts until the worker gave the job
 * back (the old behaviour) or 6 s, whichever comes first.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { type Gearmand, startGearmand } from "../helpers/gearmand.ts";
import { type Mariadbd, startMariadbd } from "../helpers/mariadbd.ts";
import { waitFor } from "../helpers/wait.ts";
import { createSchema, jobsAtGearmand, publish } from "../helpers/worker.ts";
import { seriesValue, startWorkerProcess, type WorkerProcess } from "../helpers/worker_process.ts";

const DOWNTIMES = "statusngin_downtimes";
const DB = "statusengine";
const E = 1_760_000_000;
const [ADD, START] = [1100, 1103];
const HISTORY = "statusengine_service_downtimehistory";
const SCHEDULED = "statusengine_service_scheduleddowntimes";

/** A fixed service downtime that starts at once: its START follows its ADD. */
function downtimeJob(type: number, ts: number): string {
  return JSON.stringify({
    type,
    flags: 0,
    attr: 0,
    timestamp: ts,
    timestamp_usec: 0,
    downtime: {
      host_name: "restart-host",
      service_description: "restart-service",
      author_name: "admin",
      comment_data: "maintenance",
      downtime_type: 1,
      entry_time: E,
      start_time: E,
      end_time: E + 3600,
      triggered_by: 0,
      downtime_id: 77,
      fixed: 1,
      duration: 3600,
    },
  });
}

async function metric(w: WorkerProcess, name: string, labels: Record<string, string> = {}) {
  return seriesValue(await w.metrics(), name, labels);
}

function jobs(w: WorkerProcess, result: string): Promise<number> {
  return metric(w, "statusengine_queue_jobs_total", { queue_name: DOWNTIMES, result });
}

/** Wait for a condition, but no longer than `ms`; says whether it came. */
async function waitAtMost(ms: number, predicate: () => Promise<boolean>): Promise<boolean> {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    if (await predicate()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

interface LogLine {
  readonly level: string;
  readonly message: string;
  readonly properties: Record<string, unknown>;
}

/** The worker's log so far (`--log-format json`). */
function logs(w: WorkerProcess): LogLine[] {
  return w.lines().filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as LogLine);
}

/** The events of the worker's downtime writes, in the order they were written. */
function writtenEvents(w: WorkerProcess): string[] {
  return logs(w).filter((l) => l.message === "db: downtime write").map((l) =>
    String(l.properties["event"])
  );
}

interface Scene {
  readonly server: Mariadbd;
  readonly gearmand: Gearmand;
  readonly worker: WorkerProcess;
}

/** A private MariaDB and gearmand, and one worker that holds the in-order lock. */
async function scene(stack: AsyncDisposableStack): Promise<Scene> {
  const server = stack.use(await startMariadbd());
  await server.query(`CREATE DATABASE ${DB} CHARACTER SET utf8mb4`);
  const url = server.url({ database: DB });
  await createSchema(url);
  const gearmand = stack.use(await startGearmand());
  const worker = stack.use(
    await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: url,
      args: [
        "--queues",
        DOWNTIMES,
        "--drain-timeout",
        "1s",
        "--log-level",
        "debug",
        "--log-format",
        "json",
      ],
    }),
  );
  await waitFor(async () => (await metric(worker, "statusengine_in_order_lock_held")) === 1, {
    timeoutMs: 30_000,
    message: "the worker holds the in-order lock",
  });
  return { server, gearmand, worker };
}

/**
 * The ADD taken and its write waiting at MySQL, the START queued behind it at gearmand, then
 * MySQL goes down before it took the ADD's write; resolves once the worker noticed.
 */
async function addHeldStartQueuedMysqlDown(
  { server, gearmand, worker }: Scene,
  signal: "SIGTERM" | "SIGKILL",
): Promise<void> {
  // Hold the ADD's write: MySQL has not taken it when it goes down.
  const locker = await mysql.createConnection({
    host: server.host,
    port: server.port,
    user: "root",
    database: DB,
  });
  locker.on("error", () => {});
  try {
    await locker.query(`LOCK TABLES ${HISTORY} WRITE, ${SCHEDULED} WRITE`);
    await publish(gearmand.addr, DOWNTIMES, [downtimeJob(ADD, E)]);
    await waitFor(
      async () =>
        (await metric(worker, "statusengine_queue_jobs_in_flight", { queue_name: DOWNTIMES })) ===
          1 &&
        (await server.query<{ n: number }[]>(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
              "WHERE INFO LIKE 'INSERT INTO%' AND STATE LIKE 'Waiting for table%'",
          ))[0]?.n === 1,
      { timeoutMs: 30_000, message: "the ADD taken and its write waiting at MySQL" },
    );
    // The START, published right after: it waits at gearmand behind the ADD in flight.
    await publish(gearmand.addr, DOWNTIMES, [downtimeJob(START, E)]);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, DOWNTIMES)) === 2, {
      message: "the START queued at gearmand",
    });
    await server.down(signal);
  } finally {
    locker.destroy();
  }
  await waitFor(
    () => logs(worker).some((l) => l.level === "warn" && l.message.includes("in-order lease")),
    { timeoutMs: 30_000, message: "the worker noticed its lease renewal failed" },
  );
}

for (const signal of ["SIGTERM", "SIGKILL"] as const) {
  Deno.test(`in-order lock: a MySQL restart (${signal}) while a downtime's ADD is written keeps the ADD before its START`, async () => {
    await using stack = new AsyncDisposableStack();
    const { server, gearmand, worker } = await scene(stack);
    await addHeldStartQueuedMysqlDown({ server, gearmand, worker }, signal);
    // The outage: until the worker gives the ADD back to gearmand (what it must not do), or 6 s.
    await waitAtMost(6_000, async () => (await jobs(worker, "abandoned")) > 0);
    await server.restart();

    await waitFor(
      async () =>
        (await jobsAtGearmand(gearmand.addr, DOWNTIMES)) === 0 &&
        (await jobs(worker, "completed")) === 2,
      { timeoutMs: 60_000, message: "both jobs applied after the restart" },
    );
    assert.equal(await jobs(worker, "abandoned"), 0, "the ADD was handed back to gearmand");
    // Every statement of the ADD before any of the START, both once (consecutive repeats are
    // the statements of one job).
    assert.deepEqual(
      writtenEvents(worker).filter((e, i, all) => e !== all[i - 1]),
      ["ADD", "START"],
      "the ADD applied first, then the START",
    );
    const history = await server.query<Record<string, number>[]>(
      `SELECT was_started, actual_start_time, was_cancelled FROM ${HISTORY}`,
      [],
      DB,
    );
    assert.deepEqual(
      history.map((r) => [Number(r.was_started), Number(r.actual_start_time)]),
      [[1, E]],
    );
    const scheduled = await server.query<Record<string, number>[]>(
      `SELECT was_started, actual_start_time FROM ${SCHEDULED}`,
      [],
      DB,
    );
    assert.deepEqual(
      scheduled.map((r) => [Number(r.was_started), Number(r.actual_start_time)]),
      [[1, E]],
    );
    assert.equal(
      await metric(worker, "statusengine_queue_downtime_updates_unmatched_total"),
      0,
      "a downtime update matched no row",
    );
    assert.ok(!logs(worker).some((l) => l.message.includes("matched no row")));
    // Still the one consumer of the queue, on a new lock connection.
    assert.equal(await metric(worker, "statusengine_in_order_lock_held"), 1);
  });
}

// Keeping the job through an outage must not keep a stopping worker: SIGTERM while it takes
// its lock again ends the in-order consumer and exits as always, the ADD unacknowledged.
Deno.test("in-order lock: SIGTERM while the worker takes its lock again exits 0 and leaves the jobs at gearmand", async () => {
  await using stack = new AsyncDisposableStack();
  const scn = await scene(stack);
  await addHeldStartQueuedMysqlDown(scn, "SIGKILL");
  const { server, gearmand, worker } = scn;
  worker.kill("SIGTERM");
  const status = await worker.status;
  assert.equal(status.code, 0, worker.stderr());
  assert.equal(await jobsAtGearmand(gearmand.addr, DOWNTIMES), 2, "ADD and START at gearmand");
  await server.restart();
  const rows = await server.query<unknown[]>(`SELECT 1 FROM ${HISTORY}`, [], DB);
  assert.equal(rows.length, 0, "nothing written");
});
