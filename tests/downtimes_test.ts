/**
 * Downtime lifecycles end to end: gearmand → startWorker → MariaDB
 * (docs/tables.md#downtime-events, docs/payloads.md#downtimes).
 *
 * What would break without it: a burst of downtime jobs processed
 * concurrently corrupts history rows and leaves ghost scheduled rows with no
 * error and no log line (measured: 6 of ~14 downtimes after an outage).
 * The burst here is queued at gearmand before the worker starts, so it is
 * drained back to back with a configured cap of 8.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { blockedStatements, lockTables, waitForBlocked } from "./helpers/mysql_lock.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { GearmanClient } from "../src/gearman/client.ts";

const QUEUE = "statusngin_downtimes";
const NODE = "N";
const E = 1_760_000_000;

const ADD = 1100;
const DELETE = 1101;
const LOAD = 1102;
const START = 1103;
const STOP = 1104;

interface Event {
  readonly type: number;
  readonly ts: number;
  readonly usec?: number;
  readonly attr?: number;
}

interface Lifecycle {
  readonly host: string;
  /** null for a host downtime (downtime_type 2). */
  readonly service: string | null;
  readonly id: number;
  readonly start: number;
  readonly end: number;
  readonly entry: number;
  readonly fixed: 0 | 1;
  readonly duration: number;
  /** In the order the core emits them. */
  readonly events: readonly Event[];
  /** Dynamic history columns after the lifecycle, or null when no history row may exist. */
  readonly history: {
    readonly was_started: number;
    readonly actual_start_time: number;
    readonly actual_end_time: number;
    readonly was_cancelled: number;
  } | null;
  /** The scheduled row after the lifecycle, or null when none may be left. */
  readonly scheduled: { readonly was_started: number; readonly actual_start_time: number } | null;
}

function lifecycle(
  l: Omit<Lifecycle, "fixed" | "duration"> & Partial<Pick<Lifecycle, "fixed" | "duration">>,
): Lifecycle {
  return { fixed: 1, duration: l.end - l.start, ...l };
}

const LIFECYCLES: readonly Lifecycle[] = [
  // Host, runs and ends normally, then is removed.
  lifecycle({
    host: "dt-host-1",
    service: null,
    id: 101,
    start: E + 1000,
    end: E + 4600,
    entry: E + 900,
    events: [
      { type: ADD, ts: E + 900, usec: 111 },
      { type: START, ts: E + 1000 },
      { type: STOP, ts: E + 4600, attr: 1 },
      { type: DELETE, ts: E + 4600 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 1000,
      actual_end_time: E + 4600,
      was_cancelled: 0,
    },
    scheduled: null,
  }),
  // Host, cancelled by a user while running.
  lifecycle({
    host: "dt-host-2",
    service: null,
    id: 102,
    start: E + 500,
    end: E + 8000,
    entry: E + 400,
    events: [
      { type: ADD, ts: E + 400, usec: 222 },
      { type: START, ts: E + 500 },
      { type: STOP, ts: E + 2000, attr: 2 },
      { type: DELETE, ts: E + 2000 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 500,
      actual_end_time: E + 2000,
      was_cancelled: 1,
    },
    scheduled: null,
  }),
  // Service, runs and ends normally.
  lifecycle({
    host: "dt-host-3",
    service: "HTTP",
    id: 103,
    start: E + 3000,
    end: E + 3600,
    entry: E + 2900,
    events: [
      { type: ADD, ts: E + 2900, usec: 333 },
      { type: START, ts: E + 3000 },
      { type: STOP, ts: E + 3600, attr: 1 },
      { type: DELETE, ts: E + 3600 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 3000,
      actual_end_time: E + 3600,
      was_cancelled: 0,
    },
    scheduled: null,
  }),
  // Service on the same host, cancelled.
  lifecycle({
    host: "dt-host-3",
    service: "Disk",
    id: 104,
    start: E + 100,
    end: E + 9000,
    entry: E + 50,
    events: [
      { type: ADD, ts: E + 50, usec: 444 },
      { type: START, ts: E + 100 },
      { type: STOP, ts: E + 700, attr: 2 },
      { type: DELETE, ts: E + 700 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 100,
      actual_end_time: E + 700,
      was_cancelled: 1,
    },
    scheduled: null,
  }),
  // Host, deleted before its window began: leaves nothing (the DELETE removes history when
  // start_time > ts).
  lifecycle({
    host: "dt-host-5",
    service: null,
    id: 105,
    start: E + 5000,
    end: E + 6000,
    entry: E + 200,
    events: [{ type: ADD, ts: E + 200, usec: 555 }, { type: DELETE, ts: E + 300 }],
    history: null,
    scheduled: null,
  }),
  // Service, deleted before its window began.
  lifecycle({
    host: "dt-host-6",
    service: "Ping",
    id: 106,
    start: E + 7000,
    end: E + 7200,
    entry: E + 600,
    events: [{ type: ADD, ts: E + 600, usec: 666 }, { type: DELETE, ts: E + 650 }],
    history: null,
    scheduled: null,
  }),
  // Host, fixed downtime whose window had begun: ADD and START microseconds apart; still running.
  lifecycle({
    host: "dt-host-7",
    service: null,
    id: 107,
    start: E + 1499,
    end: E + 99_999,
    entry: E + 1500,
    events: [{ type: ADD, ts: E + 1500, usec: 777 }, { type: START, ts: E + 1500 }],
    history: { was_started: 1, actual_start_time: E + 1500, actual_end_time: 0, was_cancelled: 0 },
    scheduled: { was_started: 1, actual_start_time: E + 1500 },
  }),
  // Service, scheduled in the future, nothing else yet.
  lifecycle({
    host: "dt-host-8",
    service: "Load",
    id: 108,
    start: E + 50_000,
    end: E + 60_000,
    entry: E + 800,
    events: [{ type: ADD, ts: E + 800, usec: 888 }],
    history: { was_started: 0, actual_start_time: 0, actual_end_time: 0, was_cancelled: 0 },
    scheduled: { was_started: 0, actual_start_time: 0 },
  }),
  // Host, flexible downtime that never triggered: deleted after its window began, so the
  // history row stays, all dynamic columns 0 (DELETE never sets actual_end_time).
  lifecycle({
    host: "dt-host-9",
    service: null,
    id: 109,
    start: E + 100,
    end: E + 2000,
    entry: E + 90,
    fixed: 0,
    duration: 600,
    events: [{ type: ADD, ts: E + 90, usec: 999 }, { type: DELETE, ts: E + 2000 }],
    history: { was_started: 0, actual_start_time: 0, actual_end_time: 0, was_cancelled: 0 },
    scheduled: null,
  }),
  // A second downtime on dt-host-1 with the same scheduled start (distinct id).
  lifecycle({
    host: "dt-host-1",
    service: null,
    id: 111,
    start: E + 1000,
    end: E + 1300,
    entry: E + 950,
    events: [
      { type: ADD, ts: E + 950, usec: 1111 },
      { type: START, ts: E + 1000 },
      { type: STOP, ts: E + 1300, attr: 1 },
      { type: DELETE, ts: E + 1300 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 1000,
      actual_end_time: E + 1300,
      was_cancelled: 0,
    },
    scheduled: null,
  }),
  // A START whose ADD never reached the queue: it creates both rows from the definition it
  // carries (docs/downtimes.md), so the history says the downtime started; nothing is lost.
  lifecycle({
    host: "dt-host-10",
    service: null,
    id: 110,
    start: E + 1200,
    end: E + 1800,
    entry: E + 1100,
    events: [{ type: START, ts: E + 1200 }],
    history: {
      was_started: 1,
      actual_start_time: E + 1200,
      actual_end_time: 0,
      was_cancelled: 0,
    },
    scheduled: { was_started: 1, actual_start_time: E + 1200 },
  }),
  // A core restart while the downtime runs: the core re-announces it as LOAD, then START with
  // the restart time. The recorded start must stay the real one (seen on 9 downtimes when
  // the START overwrote it); the downtime is still running, so its scheduled row stays too.
  lifecycle({
    host: "dt-host-12",
    service: null,
    id: 112,
    start: E + 200,
    end: E + 9000,
    entry: E + 150,
    events: [
      { type: ADD, ts: E + 150, usec: 1212 },
      { type: START, ts: E + 200 },
      { type: LOAD, ts: E + 5000 },
      { type: START, ts: E + 5000 },
    ],
    history: { was_started: 1, actual_start_time: E + 200, actual_end_time: 0, was_cancelled: 0 },
    scheduled: { was_started: 1, actual_start_time: E + 200 },
  }),
  // The same across a restart, then the downtime ends normally after it.
  lifecycle({
    host: "dt-host-13",
    service: "HTTP",
    id: 113,
    start: E + 300,
    end: E + 6000,
    entry: E + 250,
    events: [
      { type: ADD, ts: E + 250, usec: 1313 },
      { type: START, ts: E + 300 },
      { type: LOAD, ts: E + 5000 },
      { type: START, ts: E + 5000 },
      { type: STOP, ts: E + 6000, attr: 1 },
      { type: DELETE, ts: E + 6000 },
    ],
    history: {
      was_started: 1,
      actual_start_time: E + 300,
      actual_end_time: E + 6000,
      was_cancelled: 0,
    },
    scheduled: null,
  }),
];

function payload(l: Lifecycle, ev: Event): string {
  return JSON.stringify({
    type: ev.type,
    flags: 0,
    attr: ev.attr ?? 0,
    timestamp: ev.ts,
    timestamp_usec: ev.usec ?? 0,
    downtime: {
      host_name: l.host,
      service_description: l.service,
      author_name: "Daniel Z",
      comment_data: `downtime ${l.id}`,
      downtime_type: l.service === null ? 2 : 1,
      entry_time: l.entry,
      start_time: l.start,
      end_time: l.end,
      triggered_by: 0,
      downtime_id: l.id,
      fixed: l.fixed,
      duration: l.duration,
    },
  });
}

/**
 * Merge the lifecycles into one burst with a fixed pseudo-random interleaving:
 * each lifecycle keeps its own order, the burst as a whole does not follow time.
 */
function burst(): { lifecycle: Lifecycle; event: Event }[] {
  const cursors = LIFECYCLES.map(() => 0);
  const out: { lifecycle: Lifecycle; event: Event }[] = [];
  let seed = 12345;
  for (;;) {
    const open = LIFECYCLES.map((_, i) => i).filter((i) =>
      (cursors[i] ?? 0) < (LIFECYCLES[i]?.events.length ?? 0)
    );
    if (open.length === 0) return out;
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const i = open[seed % open.length] as number;
    const l = LIFECYCLES[i] as Lifecycle;
    out.push({ lifecycle: l, event: l.events[cursors[i] ?? 0] as Event });
    cursors[i] = (cursors[i] ?? 0) + 1;
  }
}

type DbRow = Record<string, unknown>;

function normalise(row: DbRow): DbRow {
  return Object.fromEntries(
    Object.entries(row).map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v]),
  );
}

Deno.test("downtimes: a burst of interleaved lifecycles ends correct in history and scheduled tables, with no leftover rows (docs/consumption.md#downtimes-in-order, docs/tables.md#downtime-statements)", async () => {
  const jobs = burst();
  // The premise: the burst is not in time order, and every lifecycle kept its own order.
  const times = jobs.map((j) => j.event.ts);
  assert.ok(times.some((t, i) => i > 0 && t < (times[i - 1] ?? 0)), "burst is in time order");
  for (const l of LIFECYCLES) {
    assert.deepEqual(jobs.filter((j) => j.lifecycle === l).map((j) => j.event), l.events);
  }
  assert.ok(LIFECYCLES.length >= 8);

  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  {
    // One connection, one submission at a time: gearmand queues them in exactly this order.
    await using client = await GearmanClient.connect(gearmand.addr);
    for (const { lifecycle: l, event } of jobs) {
      await client.submitBackground(QUEUE, payload(l, event));
    }
  }
  assert.equal(await jobsAtGearmand(gearmand.addr, QUEUE), jobs.length);

  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, maxJobsPerQueue: 8 }),
  );
  await waitFor(async () =>
    (await jobsAtGearmand(gearmand.addr, QUEUE)) === 0 &&
    (await metricValue(worker, "statusengine_queue_jobs_total", {
        queue_name: QUEUE,
        result: "completed",
      })) === jobs.length, { message: "every downtime job completed" });

  for (const kind of ["host", "service"] as const) {
    const mine = LIFECYCLES.filter((l) => (l.service === null) === (kind === "host"));
    const key = (r: DbRow) =>
      `${r["hostname"]}|${r["service_description"] ?? ""}|${r["internal_downtime_id"]}`;
    const svc = kind === "service" ? ", service_description" : "";

    const history = (await db.query<DbRow[]>(
      `SELECT hostname${svc}, internal_downtime_id, scheduled_start_time, node_name, entry_time, ` +
        "entry_time_usec, author_name, comment_data, triggered_by_id, is_fixed, duration, " +
        "scheduled_end_time, was_started, actual_start_time, actual_end_time, was_cancelled " +
        `FROM statusengine_${kind}_downtimehistory`,
    )).map(normalise);
    const wantHistory = mine.filter((l) => l.history !== null).map((l) => {
      const addUsec = l.events.find((e) => e.type === ADD)?.usec ?? 0;
      return {
        hostname: l.host,
        ...(kind === "service" ? { service_description: l.service } : {}),
        internal_downtime_id: l.id,
        scheduled_start_time: l.start,
        node_name: NODE,
        entry_time: l.entry,
        entry_time_usec: addUsec,
        author_name: "Daniel Z",
        comment_data: `downtime ${l.id}`,
        triggered_by_id: 0,
        is_fixed: l.fixed,
        duration: l.duration,
        scheduled_end_time: l.end,
        ...l.history,
      };
    });
    assert.deepEqual(
      history.sort((a, b) => key(a).localeCompare(key(b))),
      wantHistory.sort((a, b) => key(a).localeCompare(key(b))),
      `statusengine_${kind}_downtimehistory`,
    );

    const scheduled = (await db.query<DbRow[]>(
      `SELECT hostname${svc}, internal_downtime_id, scheduled_start_time, node_name, entry_time, ` +
        "author_name, comment_data, triggered_by_id, is_fixed, duration, scheduled_end_time, " +
        `was_started, actual_start_time FROM statusengine_${kind}_scheduleddowntimes`,
    )).map(normalise);
    const wantScheduled = mine.filter((l) => l.scheduled !== null).map((l) => ({
      hostname: l.host,
      ...(kind === "service" ? { service_description: l.service } : {}),
      internal_downtime_id: l.id,
      scheduled_start_time: l.start,
      node_name: NODE,
      entry_time: l.entry,
      author_name: "Daniel Z",
      comment_data: `downtime ${l.id}`,
      triggered_by_id: 0,
      is_fixed: l.fixed,
      duration: l.duration,
      scheduled_end_time: l.end,
      ...l.scheduled,
    }));
    assert.deepEqual(
      scheduled.sort((a, b) => key(a).localeCompare(key(b))),
      wantScheduled.sort((a, b) => key(a).localeCompare(key(b))),
      `statusengine_${kind}_scheduleddowntimes: no leftover rows for stopped or deleted downtimes`,
    );
  }

  // No event was lost: the START without its ADD created its rows (docs/downtimes.md).
  assert.equal(
    await metricValue(worker, "statusengine_queue_downtime_updates_unmatched_total"),
    0,
  );
  assert.equal(
    await metricValue(worker, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
});

// The drain deadline abandons the job, not its statement: it still runs in MySQL. Released then,
// the lease went to the next worker within a poll, which applied downtime jobs beside it: two
// appliers at once, what the lease exists to rule out (docs/downtimes.md#galera).
Deno.test("downtimes: a stopping holder whose downtime statement still runs does not release the in-order lease", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using lock = await lockTables(db, ["statusengine_host_downtimehistory"]);
  await using worker = await startTestWorker(
    testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      inOrderLock: {},
      drainTimeoutMs: 500,
    }),
  );
  const l = LIFECYCLES[0];
  assert.ok(l !== undefined && l.events[0] !== undefined);
  await GearmanClient.connect(gearmand.addr).then(async (client) => {
    await using c = client;
    await c.submitBackground(QUEUE, payload(l, l.events[0] as Event));
  });
  const statement = "%statusengine_host_downtimehistory%";
  await waitForBlocked(db, statement);
  // Past the drain deadline: the job is abandoned while its statement waits for the table.
  await worker.consumer.stop();
  const still = await blockedStatements(db, statement);
  const rows = await db.query<{ holder: string }[]>(
    "SELECT holder FROM statusengine_worker_leases WHERE name = 'in-order:N'",
  );
  await lock.unlock();
  assert.equal(still, 1, "the abandoned downtime statement still runs");
  assert.notEqual(rows[0]?.holder, "", "lease released while the holder's statement still runs");
});
