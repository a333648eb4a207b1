/**
 * Core restart against real MariaDB through the real pipeline (docs/core-restart.md).
 *
 * The restart job carries no time (or, from some brokers, the restart's `timestamp`). What
 * must hold at every moment, checked by a watcher that reads both status tables in one
 * statement over and over while each scenario runs, and after every step:
 *
 * - no service row of a node without the host row of the same node (the Statusengine UI
 *   joins services on their host's status and shows `hoststatus: null` otherwise);
 * - every object the core still has keeps its rows (the tables are never emptied);
 * - no row the core reported after the restart is ever deleted;
 * - another node's rows are never touched.
 *
 * And once the core has re-published its objects (live, or with the restart's time known),
 * the rows of objects removed from the configuration are gone.
 *
 * The sweep's clock is driven by hand, so "the settle time has passed" is a step of the test,
 * never a race against a loaded machine.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  connectionOptionsOf,
  createScratchDatabase,
  type ScratchDatabase,
} from "./helpers/mysql.ts";
import { createSchema } from "./helpers/worker.ts";
import { waitFor } from "./helpers/wait.ts";
import type { Pipeline } from "../src/pipeline/pipeline.ts";
import { testPipeline } from "./helpers/pipeline.ts";
import { type RestartClock, type RestartTiming } from "../src/mysql/core_restart.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { poolExecutor, type SqlExecutor } from "../src/mysql/executor.ts";
import { adjustRow } from "../src/mysql/values.ts";
import type { Row } from "../src/events/types.ts";
import type { Job } from "../src/consumer/contract.ts";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const HOSTSTATUS = "statusengine_hoststatus";
const SERVICESTATUS = "statusengine_servicestatus";
const TIMING: RestartTiming = {
  settleMs: 10_000,
  maxWaitMs: 300_000,
  pollMs: 1_000,
  tableCheckMs: 30_000,
  startupWindowMs: 60_000,
};

/**
 * The captured restart job: `{"object_type": 102, "timestamp": 0}`; 0 means "no time", as
 * current brokers send none.
 */
const RESTART = Deno.readTextFileSync(new URL("statusngin_core_restart.job", FIXTURES));

/** The restart, in the core's clock: its second, and when the worker received the job. */
const T = 1_800_000_000;

/** A clock the test advances; `sleep` resolves only when the test moves time past it. */
class ManualClock implements RestartClock {
  #now: number;
  #sleepers: { until: number; resolve: () => void }[] = [];
  constructor(startMs: number) {
    this.#now = startMs;
  }
  nowMs(): number {
    return this.#now;
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const sleeper = { until: this.#now + ms, resolve };
      this.#sleepers.push(sleeper);
      signal.addEventListener("abort", () => {
        this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
        reject(signal.reason);
      }, { once: true });
    });
  }
  get sleepers(): number {
    return this.#sleepers.length;
  }
  advance(ms: number): void {
    this.#now += ms;
    const due = this.#sleepers.filter((s) => s.until <= this.#now);
    this.#sleepers = this.#sleepers.filter((s) => s.until > this.#now);
    for (const s of due) s.resolve();
  }
}

interface Harness extends AsyncDisposable {
  readonly pipeline: Pipeline;
  readonly clock: ManualClock;
  /** Hand one job to the pipeline's handler, as a backend would. */
  handle(
    queue: string,
    payload: string,
    receivedAtMs: number,
    linkOpenedAtMs?: number,
  ): Promise<void>;
  /** Advance the clock a poll at a time until the sweep has run (or nothing is pending). */
  runSweep(): Promise<void>;
  /** Advance the clock by `ms` and let the sweep's loop look at the tables. */
  advance(ms: number): Promise<void>;
  /** SELECTs on a status table the worker has sent so far (the sweep's looks at the tables). */
  statusReads(): number;
}

function openHarness(
  db: ScratchDatabase,
  clockStartMs: number,
  openItcockpit = false,
  writersPerTable = 1,
): Harness {
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 8 });
  const clock = new ManualClock(clockStartMs);
  // Every statement the worker sends, counted where it leaves for MySQL.
  const statements: string[] = [];
  const inner = poolExecutor(pool);
  const executor: SqlExecutor = {
    run(sql, values, options) {
      statements.push(sql);
      return inner.run(sql, values, options);
    },
  };
  const pipeline = testPipeline(pool, {
    executor,
    openItcockpit,
    writersPerTable,
    coreRestart: { clock, timing: TIMING },
  });
  let idle = true;
  let sweepError: unknown;
  const settled = () => {
    idle = false;
    pipeline.statusCleaner.idle().then(() => idle = true, (err: unknown) => {
      sweepError = err;
      idle = true;
    });
  };
  let seq = 0;
  const harness: Harness = {
    pipeline,
    clock,
    async handle(queue, payload, receivedAtMs, linkOpenedAtMs) {
      const job: Job = {
        queue,
        server: "test",
        handle: `H:${++seq}`,
        unique: "",
        payload: new TextEncoder().encode(payload),
        receivedAt: receivedAtMs,
        ...(linkOpenedAtMs === undefined ? {} : { linkOpenedAt: linkOpenedAtMs }),
      };
      await pipeline.handler(job, AbortSignal.timeout(30_000));
      settled();
    },
    async advance(ms) {
      // The loop is parked in a sleep (or idle) before time moves, and again after.
      await waitFor(() => idle || clock.sleepers > 0, { message: "sweep loop parked" });
      clock.advance(ms);
      await new Promise((r) => setTimeout(r, 0));
      await waitFor(() => idle || clock.sleepers > 0, { message: "sweep loop parked again" });
    },
    statusReads() {
      return statements.filter((sql) =>
        /^\s*SELECT\b/i.test(sql) && /statusengine_(host|service)status/.test(sql)
      ).length;
    },
    async runSweep() {
      for (let i = 0; i < 1_000 && !idle; i++) await harness.advance(TIMING.pollMs);
      assert.ok(idle, "the sweep ran");
      assert.equal(sweepError, undefined);
    },
    async [Symbol.asyncDispose]() {
      await pipeline.close(5_000);
      await pool.end();
    },
  };
  return harness;
}

/** Rows written straight into a status table (what the tables held before the scenario). */
async function insertRows(db: ScratchDatabase, table: string, rows: readonly Row[]) {
  const t = table as typeof HOSTSTATUS;
  await db.query(
    insertStatement(TABLES[t], rows.length),
    rows.flatMap((r) => adjustRow(t, r).values),
  );
}

/** A hoststatus bulk job built from the real fixture, one event per (host, second). */
function hostJob(events: readonly [host: string, ts: number][]): string {
  const doc = JSON.parse(Deno.readTextFileSync(new URL("statusngin_hoststatus.job", FIXTURES)));
  const template = doc.messages[0];
  doc.messages = events.map(([host, ts]) => {
    const m = structuredClone(template);
    m.timestamp = ts;
    m.hoststatus.name = host;
    return m;
  });
  return JSON.stringify(doc);
}

/** A servicestatus bulk job built from the real fixture, one event per (host/service, second). */
function serviceJob(events: readonly [key: string, ts: number][]): string {
  const doc = JSON.parse(
    Deno.readTextFileSync(new URL("statusngin_servicestatus.job", FIXTURES)),
  );
  const template = doc.messages[0];
  doc.messages = events.map(([key, ts]) => {
    const [host, service] = key.split("/");
    const m = structuredClone(template);
    m.timestamp = ts;
    m.servicestatus.host_name = host;
    m.servicestatus.description = service;
    return m;
  });
  return JSON.stringify(doc);
}

/** One consistent read of both tables: `node:host` and `node:host/service` → update time. */
async function snapshot(db: ScratchDatabase): Promise<Map<string, number>> {
  const rows = await db.query<{ k: string; t: number }[]>(
    `SELECT CONCAT(node_name, ':', hostname) AS k, status_update_time AS t FROM ${HOSTSTATUS} ` +
      `UNION ALL SELECT CONCAT(node_name, ':', hostname, '/', service_description), ` +
      `status_update_time FROM ${SERVICESTATUS}`,
  );
  return new Map(rows.map((r) => [r.k, Number(r.t)]));
}

/**
 * Reads the tables over and over and records every broken invariant.
 *
 * @param kept Objects the core still has (`node:host`, `node:host/service`).
 * @param cutoff Rows with a status time from here on were reported after the restart.
 */
function watch(db: ScratchDatabase, kept: readonly string[], cutoff: number) {
  const violations: string[] = [];
  const fresh = new Set<string>();
  const check = async () => {
    const snap = await snapshot(db);
    for (const [k, t] of snap) {
      const slash = k.indexOf("/");
      if (slash >= 0 && !snap.has(k.slice(0, slash))) violations.push(`${k} without its host`);
      if (t >= cutoff) fresh.add(k);
    }
    for (const k of kept) if (!snap.has(k)) violations.push(`${k} (still in the core) missing`);
    for (const k of fresh) {
      if ((snap.get(k) ?? -1) < cutoff) violations.push(`${k} (reported after restart) deleted`);
    }
  };
  let running = true;
  const loop = (async () => {
    while (running) {
      await check();
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  // Stopped before the scratch database is dropped, also when the test fails.
  const halt = async () => {
    running = false;
    await loop.catch(() => {});
  };
  return {
    check,
    [Symbol.asyncDispose]: halt,
    async stop(): Promise<string[]> {
      running = false;
      await loop;
      await check();
      return [...new Set(violations)];
    },
  };
}

/** Before the restart: node N has hosts a, b, c, gone; node O one host and service. */
async function seed(db: ScratchDatabase): Promise<void> {
  await insertRows(db, HOSTSTATUS, [
    { hostname: "a", node_name: "N", status_update_time: T - 300 },
    { hostname: "b", node_name: "N", status_update_time: T - 1 },
    { hostname: "c", node_name: "N", status_update_time: T - 10 },
    { hostname: "gone", node_name: "N", status_update_time: T - 50 },
    { hostname: "x", node_name: "O", status_update_time: T - 1000 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "a", service_description: "1", node_name: "N", status_update_time: T - 300 },
    { hostname: "a", service_description: "2", node_name: "N", status_update_time: T - 200 },
    { hostname: "b", service_description: "1", node_name: "N", status_update_time: T - 20 },
    { hostname: "c", service_description: "1", node_name: "N", status_update_time: T - 10 },
    // Removed with its host; last updated the second before the restart.
    { hostname: "gone", service_description: "1", node_name: "N", status_update_time: T - 1 },
    { hostname: "x", service_description: "1", node_name: "O", status_update_time: T - 1000 },
  ]);
}

/** What the core still has after the restart, and another node's rows. */
const KEPT = ["N:a", "N:b", "N:c", "N:a/1", "N:a/2", "N:b/1", "N:c/1", "O:x", "O:x/1"];

Deno.test("core restart, live: rows not refreshed since the restart are swept only after the core re-published its objects, services before hosts", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  // The worker has run for ten minutes; the job arrives 700 ms into the restart's second
  // (it carries no time).
  const receivedAt = T * 1000 + 700;
  await using h = openHarness(db, receivedAt - 600_000);
  await using w = watch(db, KEPT, T);

  // Status the core re-published after the restart may be handled before the restart job.
  await h.handle("statusngin_servicestatus", serviceJob([["b/1", T]]), receivedAt + 5);
  await w.check();
  await h.handle("statusngin_core_restart", RESTART, receivedAt);
  await w.check();
  assert.ok((await snapshot(db)).has("N:gone"), "nothing is deleted when the job arrives");

  // The settle time passes before the hosts are re-published: no sweep yet.
  await h.advance(TIMING.settleMs * 2);
  assert.ok((await snapshot(db)).has("N:gone/1"), "no sweep before the hosts report again");
  await w.check();

  // The rest of the re-published status; host c's own status does not come (yet).
  await h.handle("statusngin_hoststatus", hostJob([["a", T], ["b", T + 1]]), receivedAt + 200);
  await w.check();
  await h.handle(
    "statusngin_servicestatus",
    serviceJob([["a/1", T], ["a/2", T + 1], ["c/1", T]]),
    receivedAt + 300,
  );
  await w.check();

  await h.runSweep();
  assert.deepEqual(await w.stop(), []);
  const after = await snapshot(db);
  assert.deepEqual([...after.keys()].sort(), [...KEPT].sort(), "gone and gone/1 swept");
  // c stays: its service reported after the restart, so the core still has the host.
  assert.equal(after.get("N:c"), T - 10);
  assert.equal(after.get("O:x"), T - 1000);
});

Deno.test("core restart, live: while the sweep waits the status tables are never read; the status writers' commits tell it the core re-published (one and two writers per table)", async () => {
  for (const writersPerTable of [1, 2]) {
    await using db = await createScratchDatabase();
    await createSchema(db.url);
    await seed(db);
    const receivedAt = T * 1000 + 700;
    await using h = openHarness(db, receivedAt - 600_000, false, writersPerTable);
    await using w = watch(db, KEPT, T);

    await h.handle("statusngin_core_restart", RESTART, receivedAt);
    // The core is slow to re-publish: the sweep waits, looking every second.
    for (let i = 0; i < 20; i++) await h.advance(TIMING.pollMs);
    assert.ok((await snapshot(db)).has("N:gone"), "nothing re-published, nothing swept");
    await h.handle("statusngin_hoststatus", hostJob([["a", T + 20], ["b", T + 20]]), receivedAt);
    await h.handle(
      "statusngin_servicestatus",
      serviceJob([["a/1", T + 20], ["a/2", T + 20], ["b/1", T + 20], ["c/1", T + 20]]),
      receivedAt,
    );
    await h.runSweep();

    assert.deepEqual(await w.stop(), [], `${writersPerTable} writers`);
    assert.deepEqual([...(await snapshot(db)).keys()].sort(), [...KEPT].sort());
    assert.equal(h.statusReads(), 0, "no SELECT on a status table while the sweep waited");
  }
});

Deno.test("core restart, several workers of one node: status another worker process committed is found by a rare bounded read of each table", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  const receivedAt = T * 1000 + 700;
  await using h = openHarness(db, receivedAt - 600_000);
  await using w = watch(db, KEPT, T);

  await h.handle("statusngin_core_restart", RESTART, receivedAt);
  // The re-published status goes through another worker process: this one commits none of it.
  await insertRows(db, HOSTSTATUS, [
    { hostname: "a", node_name: "N", status_update_time: T },
    { hostname: "b", node_name: "N", status_update_time: T + 1 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "a", service_description: "1", node_name: "N", status_update_time: T },
    { hostname: "a", service_description: "2", node_name: "N", status_update_time: T },
    { hostname: "b", service_description: "1", node_name: "N", status_update_time: T + 1 },
    { hostname: "c", service_description: "1", node_name: "N", status_update_time: T },
  ]);
  await h.advance(TIMING.tableCheckMs - TIMING.pollMs);
  assert.equal(h.statusReads(), 0, "the tables are not read before the table check is due");
  assert.ok((await snapshot(db)).has("N:gone"), "not swept before the tables were read");
  const started = h.clock.nowMs();
  await h.runSweep();

  assert.deepEqual(await w.stop(), []);
  assert.deepEqual([...(await snapshot(db)).keys()].sort(), [...KEPT].sort());
  assert.equal(h.statusReads(), 2, "one read per table, then the settle time in memory");
  assert.ok(h.clock.nowMs() - started < TIMING.maxWaitMs / 2, "long before the longest wait");
});

Deno.test("core restart: a status table without any row of the node has nothing to wait for", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Node N monitors hosts only: its service table holds no row of it (another node's only).
  await insertRows(db, HOSTSTATUS, [
    { hostname: "a", node_name: "N", status_update_time: T - 300 },
    { hostname: "gone", node_name: "N", status_update_time: T - 300 },
    { hostname: "x", node_name: "O", status_update_time: T - 1000 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "x", service_description: "1", node_name: "O", status_update_time: T - 1000 },
  ]);
  const receivedAt = T * 1000 + 700;
  await using h = openHarness(db, receivedAt - 600_000);
  const recorded = h.clock.nowMs();
  await h.handle("statusngin_core_restart", RESTART, receivedAt);
  await h.handle("statusngin_hoststatus", hostJob([["a", T]]), receivedAt + 100);
  await h.runSweep();
  assert.deepEqual([...(await snapshot(db)).keys()].sort(), ["N:a", "O:x", "O:x/1"]);
  assert.ok(h.clock.nowMs() - recorded < TIMING.maxWaitMs / 2, "long before the longest wait");
  assert.equal(h.statusReads(), 1, "only the service table, which this worker wrote nothing to");
});

Deno.test("core restart, backlog without a time: nothing is deleted, removed objects stay until the next restart", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  // The worker was down for ten minutes and has just started: the restart job (no time)
  // waited in the queue with the status the core sent after it.
  const receivedAt = (T + 600) * 1000;
  await using h = openHarness(db, receivedAt - 2_000);
  await using w = watch(db, KEPT, T);

  await h.handle("statusngin_hoststatus", hostJob([["a", T + 5]]), receivedAt - 10);
  await h.handle("statusngin_servicestatus", serviceJob([["a/1", T + 5]]), receivedAt - 5);
  await w.check();
  await h.handle("statusngin_core_restart", RESTART, receivedAt);
  await w.check();
  await h.handle("statusngin_hoststatus", hostJob([["b", T + 20]]), receivedAt + 10);
  await h.handle("statusngin_servicestatus", serviceJob([["b/1", T + 20]]), receivedAt + 20);
  await h.advance(TIMING.maxWaitMs * 2);
  await h.runSweep();

  assert.deepEqual(await w.stop(), []);
  const after = await snapshot(db);
  assert.equal(after.get("N:a"), T + 5);
  assert.equal(after.get("N:b"), T + 20);
  assert.ok(after.has("N:gone") && after.has("N:gone/1"), "removed objects linger");
});

Deno.test("core restart, backlog after a link outage without a time: nothing is deleted although the worker kept running", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  // The worker has run for an hour, but its link to the job server was down for ten minutes
  // and came back just now: the restart job (no time) waited there with the status after it.
  const receivedAt = (T + 600) * 1000;
  await using h = openHarness(db, receivedAt - 3_600_000);
  await using w = watch(db, KEPT, T);

  await h.handle("statusngin_hoststatus", hostJob([["a", T + 5]]), receivedAt - 10);
  await h.handle("statusngin_servicestatus", serviceJob([["a/1", T + 5]]), receivedAt - 5);
  await h.handle(
    "statusngin_core_restart",
    RESTART,
    receivedAt,
    receivedAt - 50,
  );
  await w.check();
  await h.handle("statusngin_hoststatus", hostJob([["b", T + 20]]), receivedAt + 10);
  await h.advance(TIMING.maxWaitMs * 2);
  await h.runSweep();

  assert.deepEqual(await w.stop(), []);
  const after = await snapshot(db);
  assert.equal(after.get("N:a"), T + 5);
  assert.ok(after.has("N:gone") && after.has("N:gone/1"), "removed objects linger");
});

Deno.test("core restart, backlog with the restart's time: swept once the backlog passed the restart, nothing reported after it deleted", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  const receivedAt = (T + 600) * 1000;
  await using h = openHarness(db, receivedAt - 2_000);
  await using w = watch(db, KEPT, T);

  // The status backlog drains alongside the restart job.
  await h.handle("statusngin_servicestatus", serviceJob([["a/1", T], ["c/1", T]]), receivedAt);
  await w.check();
  await h.handle(
    "statusngin_core_restart",
    JSON.stringify({ object_type: 102, timestamp: T }),
    receivedAt + 1,
  );
  await w.check();
  await h.advance(TIMING.settleMs * 2);
  assert.ok((await snapshot(db)).has("N:gone"), "not swept while the hosts lag behind");
  await h.handle("statusngin_hoststatus", hostJob([["a", T], ["b", T + 1]]), receivedAt + 2);
  await w.check();
  await h.handle("statusngin_servicestatus", serviceJob([["a/2", T + 1], ["b/1", T]]), receivedAt);
  await w.check();
  await h.runSweep();

  assert.deepEqual(await w.stop(), []);
  assert.deepEqual([...(await snapshot(db)).keys()].sort(), [...KEPT].sort());
});

Deno.test("core restart: a later restart before the sweep moves the cutoff, one sweep covers both", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  const first = T * 1000 + 700;
  await using h = openHarness(db, first - 600_000);
  await h.handle("statusngin_core_restart", RESTART, first);
  // A second restart 30 s later; a was only updated between the two and is gone after it.
  await h.handle("statusngin_hoststatus", hostJob([["a", T + 5]]), first + 5_000);
  await h.handle("statusngin_servicestatus", serviceJob([["a/1", T + 5]]), first + 5_000);
  const second = first + 30_000;
  await h.handle("statusngin_core_restart", RESTART, second);
  await h.handle("statusngin_hoststatus", hostJob([["b", T + 30], ["c", T + 30]]), second + 100);
  await h.handle(
    "statusngin_servicestatus",
    serviceJob([["b/1", T + 30], ["c/1", T + 30]]),
    second + 100,
  );
  await h.runSweep();
  assert.deepEqual([...(await snapshot(db)).keys()].sort(), [
    "N:b",
    "N:b/1",
    "N:c",
    "N:c/1",
    "O:x",
    "O:x/1",
  ]);
});

Deno.test("core restart: when a table never shows a refreshed row (every service removed), the sweep runs after the longest wait", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertRows(db, HOSTSTATUS, [
    { hostname: "a", node_name: "N", status_update_time: T - 300 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "a", service_description: "1", node_name: "N", status_update_time: T - 300 },
  ]);
  const receivedAt = T * 1000 + 700;
  await using h = openHarness(db, receivedAt - 600_000);
  await using w = watch(db, ["N:a"], T);
  await h.handle("statusngin_core_restart", RESTART, receivedAt);
  await h.handle("statusngin_hoststatus", hostJob([["a", T]]), receivedAt + 100);
  await h.advance(TIMING.maxWaitMs - TIMING.pollMs);
  assert.ok((await snapshot(db)).has("N:a/1"), "still waiting for the services");
  await h.runSweep();
  assert.deepEqual(await w.stop(), []);
  assert.deepEqual([...(await snapshot(db)).keys()], ["N:a"]);
});

Deno.test("core restart, openITCOCKPIT mode: rows of objects missing or disabled there go at once, services first", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await seed(db);
  await db.query("CREATE TABLE hosts (uuid varchar(255) NULL, disabled int NOT NULL)");
  await db.query("CREATE TABLE services (uuid varchar(255) NULL, disabled int NOT NULL)");
  await db.query(
    "INSERT INTO hosts VALUES ('a', 0), ('b', 0), ('c', 1), ('x', 0), (NULL, 0)",
  );
  await db.query("INSERT INTO services VALUES ('1', 0), (NULL, 0)");
  await using h = openHarness(db, T * 1000, true);
  await h.handle("statusngin_core_restart", RESTART, T * 1000);
  assert.deepEqual([...(await snapshot(db)).keys()].sort(), [
    "N:a",
    "N:a/1",
    "N:b",
    "N:b/1",
    "O:x",
    "O:x/1",
  ]);
});
