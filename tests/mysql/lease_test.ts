/**
 * The in-order lease against a real MariaDB (src/mysql/lease.ts): one holder at a time; a
 * holder whose connection dies renews on a new one and keeps its place; a holder that cannot
 * renew stops before anyone else may take over, and a waiting worker takes over only after the
 * whole term; a lease another worker took is given up. The same on a Galera cluster, across
 * nodes, is in tests/lease_cluster_test.ts.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase, type ScratchDatabase } from "../helpers/mysql.ts";
import { track, waitFor } from "../helpers/wait.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { ensureSchema } from "../../src/mysql/schema.ts";
import { Lease, leaseTermMs } from "../../src/mysql/lease.ts";
import { DowntimeExecutor } from "../../src/mysql/downtime.ts";
import { createWriterPool, poolExecutor } from "../../src/mysql/executor.ts";
import { startMariadbd } from "../helpers/mariadbd.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import { createMetrics } from "../../src/metrics/registry.ts";
import { DeadLetters } from "../../src/pipeline/dead_letter.ts";
import { type DowntimeEvent, downtimeStatements } from "../../src/events/downtime.ts";
import { errorMessage, getLogger } from "../../src/log.ts";
import { WorkerError } from "../../src/util/errors.ts";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import type { Job } from "../../src/consumer/contract.ts";
import { withLogs } from "../helpers/logs.ts";

const QUEUE = "statusngin_downtimes";

const POLL_MS = 100;
const DRAIN_MS = 200;

interface Recorded {
  readonly lease: Lease;
  /** Lets the test cut this worker off the database (its connects fail). */
  cut: boolean;
}

function recordingLease(
  options: mysql.ConnectionOptions,
  name: string,
  who: string,
  events: string[],
  takeovers?: { n: number },
): Recorded {
  const r: Recorded = {
    cut: false,
    lease: new Lease({
      connect: () => {
        if (r.cut) return Promise.reject(new Error("cut off"));
        return mysql.createConnection({ ...options, connectTimeout: 1_000 });
      },
      name,
      holder: `${who} ${crypto.randomUUID().slice(0, 8)}`,
      pollMs: POLL_MS,
      termMs: leaseTermMs(POLL_MS, DRAIN_MS),
      drainMs: DRAIN_MS,
      onHeld: () => {
        events.push(`${who} held`);
        return Promise.resolve();
      },
      onLost: () => {
        events.push(`${who} lost`);
        return Promise.resolve();
      },
      onSuspect: () => events.push(`${who} suspect`),
      ...(takeovers === undefined ? {} : { takeovers: { inc: () => takeovers.n++ } }),
    }),
  };
  return r;
}

async function leaseDatabase() {
  const db = await createScratchDatabase();
  const options = mysqlOptionsFromUrl(db.url);
  const conn = await mysql.createConnection(options);
  try {
    await ensureSchema(conn);
  } finally {
    await conn.end();
  }
  return { db, options };
}

async function holderOf(db: { query<T>(sql: string, p?: unknown[]): Promise<T> }, name: string) {
  const rows = await db.query<{ holder: string }[]>(
    "SELECT holder FROM statusengine_worker_leases WHERE name = ?",
    [name],
  );
  return rows[0]?.holder;
}

/** Every other connection to the test's database killed by the server, as a failover does. */
async function killConnections(db: ScratchDatabase): Promise<void> {
  const ids = await db.query<{ id: number }[]>(
    "SELECT ID AS id FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    [db.name],
  );
  for (const { id } of ids) await db.query(`KILL ${Number(id)}`).catch(() => {});
}

/** Start a lease alone and wait until it is active. */
async function elected(lease: { start(): void; readonly active: boolean }, who: string) {
  lease.start();
  await waitFor(() => lease.active, { message: `${who} elected` });
}

Deno.test("lease: one holder at a time; the other takes a released lease at once", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const a = recordingLease(options, "in-order:n", "A", events);
  const b = recordingLease(options, "in-order:n", "B", events);
  try {
    await elected(a.lease, "A");
    b.lease.start();
    await new Promise((r) => setTimeout(r, 5 * POLL_MS));
    assert.equal(b.lease.active, false);
    assert.match((await holderOf(db, "in-order:n")) ?? "", /^A /);
    const stopped = performance.now();
    await a.lease.stop();
    await waitFor(() => b.lease.active, { message: "B took the released lease" });
    assert.ok(
      performance.now() - stopped < leaseTermMs(POLL_MS, DRAIN_MS),
      "a released lease is taken without waiting for the term",
    );
    // A renewal may time out on a busy machine (a suspect, harmless): not part of the order.
    assert.deepEqual(events.filter((e) => !e.endsWith("suspect")), ["A held", "A lost", "B held"]);
  } finally {
    await a.lease.stop();
    await b.lease.stop();
  }
  assert.equal(await holderOf(db, "in-order:n"), "", "released on stop");
});

// The connection's death proves nothing: a lone worker must keep its job in flight and its
// place (handing it back reordered the downtime queue at gearmand).
Deno.test("lease: a holder whose connection the server kills renews on a new one and stays active", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const a = recordingLease(options, "in-order:n", "A", events);
  try {
    await elected(a.lease, "A");
    await killConnections(db);
    await waitFor(() => events.includes("A suspect"), { message: "A's renewal failed" });
    await waitFor(() => !a.lease.reacquiring, { message: "A renewed on a new connection" });
    await new Promise((r) => setTimeout(r, 5 * POLL_MS));
    assert.equal(a.lease.active, true);
    assert.equal(a.lease.valid, true);
    assert.ok(!events.includes("A lost"), events.join(", "));
  } finally {
    await a.lease.stop();
  }
});

// The safety property: a holder cut off from the database stops consuming before its term
// ends, and only then does a waiting worker take over (a SIGKILLed holder is the same, without
// the stop). Before the lease, a named lock held on another server or node was invisible.
Deno.test("lease: a holder that cannot renew stops before its term ends; the other takes over only after it", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const times = new Map<string, number>();
  const takeovers = { n: 0 };
  const a = recordingLease(options, "in-order:n", "A", events);
  const b = recordingLease(options, "in-order:n", "B", events, takeovers);
  const stamp = (e: string) => times.set(e, performance.now());
  try {
    await elected(a.lease, "A");
    b.lease.start();
    await new Promise((r) => setTimeout(r, 3 * POLL_MS));
    // Cut A off: its open connection dies, and no new one can be opened.
    a.cut = true;
    const cutAt = performance.now();
    await killConnections(db);
    await waitFor(() => events.includes("A lost"), { timeoutMs: 10_000, message: "A gave up" });
    stamp("A lost");
    assert.equal(b.lease.active, false, "B must not hold the lease while A may still apply");
    await waitFor(() => b.lease.active, { timeoutMs: 10_000, message: "B took over" });
    stamp("B held");
    const term = leaseTermMs(POLL_MS, DRAIN_MS);
    assert.ok((times.get("B held") ?? 0) - cutAt >= term - POLL_MS, "B waited for the term");
    assert.deepEqual(events.filter((e) => e !== "A suspect"), ["A held", "A lost", "B held"]);
    assert.equal(takeovers.n, 1);
    assert.match((await holderOf(db, "in-order:n")) ?? "", /^B /);
    // A, reconnected, finds the lease taken and waits.
    a.cut = false;
    await new Promise((r) => setTimeout(r, 5 * POLL_MS));
    assert.equal(a.lease.active, false);
  } finally {
    await a.lease.stop();
    await b.lease.stop();
  }
});

Deno.test("lease: a holder whose lease another worker took gives it up at its next renewal", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const a = recordingLease(options, "in-order:n", "A", events);
  try {
    await elected(a.lease, "A");
    await db.query(
      "UPDATE statusengine_worker_leases SET holder = 'X', renewals = renewals + 1 WHERE name = ?",
      ["in-order:n"],
    );
    await waitFor(() => events.includes("A lost"), { message: "A gave up" });
    assert.equal(a.lease.valid, false);
  } finally {
    await a.lease.stop();
  }
  assert.equal(await holderOf(db, "in-order:n"), "X", "stop does not release another's lease");
});

// A lone worker after a long outage: nobody took its lease, so it need not wait out a term.
Deno.test("lease: a lone holder whose validity ran out while cut off takes its own lease back as soon as it reconnects", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const takeovers = { n: 0 };
  const a = recordingLease(options, "in-order:n", "A", events, takeovers);
  try {
    await elected(a.lease, "A");
    a.cut = true;
    await killConnections(db);
    await waitFor(() => events.includes("A lost"), { timeoutMs: 10_000, message: "A gave up" });
    a.cut = false;
    const back = performance.now();
    await waitFor(() => a.lease.active, { timeoutMs: 10_000, message: "A took it back" });
    assert.ok(
      performance.now() - back < leaseTermMs(POLL_MS, DRAIN_MS),
      "its own lease is taken back without waiting for the term",
    );
    assert.equal(takeovers.n, 0, "taking back its own lease is no take-over");
    assert.deepEqual(events.filter((e) => !e.endsWith("suspect")), ["A held", "A lost", "A held"]);
  } finally {
    await a.lease.stop();
  }
});

// Starting the in-order consumer may take longer than the validity (a RabbitMQ URL whose first
// brokers do not answer: 10 s each). A lease loop that waited for it renewed nothing meanwhile:
// the validity ran out during the start, the holder gave the lease up right after it, took it
// back, and started again, so the downtime queue was never consumed.
Deno.test("lease: a holder keeps renewing while its consumer starts, however long that takes", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const renewals = async () =>
    Number(
      (await db.query<{ renewals: string }[]>(
        "SELECT CAST(renewals AS CHAR) AS renewals FROM statusengine_worker_leases WHERE name = ?",
        ["in-order:n"],
      ))[0]?.renewals ?? 0,
    );
  const events: string[] = [];
  const started: string[] = [];
  const term = leaseTermMs(POLL_MS, DRAIN_MS);
  const lease = new Lease({
    connect: () => mysql.createConnection({ ...options, connectTimeout: 1_000 }),
    name: "in-order:n",
    holder: `A ${crypto.randomUUID().slice(0, 8)}`,
    pollMs: POLL_MS,
    termMs: term,
    drainMs: DRAIN_MS,
    onHeld: async () => {
      events.push("A held");
      if (started.length > 0) return;
      // A start that lasts more renewals than the whole term: over only once the holder renewed
      // that often meanwhile.
      const before = await renewals();
      try {
        await waitFor(async () => (await renewals()) >= before + term / POLL_MS + 2, {
          timeoutMs: 3 * term,
          message: "renewals while the consumer starts",
        });
        started.push("started");
      } catch (err: unknown) {
        started.push(`failed: ${err instanceof Error ? err.message : String(err)}`);
        throw err;
      }
    },
    onLost: () => {
      events.push("A lost");
      return Promise.resolve();
    },
  });
  try {
    lease.start();
    await waitFor(() => started.length > 0, { timeoutMs: 10 * term, message: "the start ended" });
    assert.deepEqual(started, ["started"], "the lease was renewed while its consumer started");
    await waitFor(() => lease.active, { message: "A active" });
    assert.equal(lease.valid, true);
    assert.deepEqual(events, ["A held"], "not given up after a long start");
  } finally {
    await lease.stop();
  }
});

// Only an UPDATE between two reads changes the row's `renewals`, and the take-over names the
// value first seen: a read that failed in between proves nothing about the holder. A waiting
// worker that started its count again after each failed read never took over the lease of a
// dead holder while one read in every term failed (a lossy link, a busy server): the downtime
// queue stalled, with only debug lines.
Deno.test("lease: the lease of a dead holder is taken over although some reads of the waiting worker fail", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  await db.query(
    "INSERT INTO statusengine_worker_leases (name, holder, renewals) VALUES (?, 'dead 1', 7)",
    ["in-order:n"],
  );
  const events: string[] = [];
  const takeovers = { n: 0 };
  let queries = 0;
  const b = new Lease({
    connect: async () => {
      const conn = await mysql.createConnection({ ...options, connectTimeout: 1_000 });
      // Every fourth statement fails, as one timed out: fewer polls apart than the term.
      const query = (o: unknown, v: unknown) =>
        ++queries % 4 === 0
          ? Promise.reject(new Error("no answer within the poll"))
          : conn.query(o as mysql.QueryOptions, v as unknown[]);
      return new Proxy(conn, {
        get: (target, key) => key === "query" ? query : Reflect.get(target, key, target),
      });
    },
    name: "in-order:n",
    holder: `B ${crypto.randomUUID().slice(0, 8)}`,
    pollMs: POLL_MS,
    termMs: leaseTermMs(POLL_MS, DRAIN_MS),
    drainMs: DRAIN_MS,
    onHeld: () => {
      events.push("B held");
      return Promise.resolve();
    },
    onLost: () => {
      events.push("B lost");
      return Promise.resolve();
    },
    takeovers: { inc: () => takeovers.n++ },
  });
  try {
    b.start();
    await waitFor(() => b.active, {
      timeoutMs: 6 * leaseTermMs(POLL_MS, DRAIN_MS),
      message: "B took over the dead holder's lease",
    });
    assert.equal(takeovers.n, 1);
    assert.match((await holderOf(db, "in-order:n")) ?? "", /^B /);
  } finally {
    await b.stop();
  }
});

// A RabbitMQ URL whose first brokers do not answer keeps the in-order consumer starting 10 s per
// broker. A stop waited for that start to end before stopping it: the drain step of a shutdown
// took as long as the silent brokers, beyond its budget.
Deno.test("lease: a stop ends a consumer start under way instead of waiting for it", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const events: string[] = [];
  const starting = Promise.withResolvers<void>();
  const lease = new Lease({
    connect: () => mysql.createConnection({ ...options, connectTimeout: 1_000 }),
    name: "in-order:n",
    holder: `A ${crypto.randomUUID().slice(0, 8)}`,
    pollMs: POLL_MS,
    termMs: leaseTermMs(POLL_MS, DRAIN_MS),
    drainMs: DRAIN_MS,
    // A start that ends only when the stop ends it (as a consumer's stop ends its start).
    onHeld: (signal) =>
      new Promise<void>((_, reject) => {
        events.push("A starting");
        starting.resolve();
        signal?.addEventListener("abort", () => reject(new Error("stopped during start-up")));
      }),
    onLost: () => {
      events.push("A lost");
      return Promise.resolve();
    },
  });
  let stopped: { readonly settled: boolean } | undefined;
  try {
    lease.start();
    await starting.promise;
    stopped = track(lease.stop());
    await waitFor(() => stopped?.settled === true, { message: "the stop to end the start" });
    assert.deepEqual(events, ["A starting"]);
    assert.equal(await holderOf(db, "in-order:n"), "", "released");
  } finally {
    if (stopped?.settled !== true) void lease.stop();
  }
});

/** A database the test can query, by name. */
interface TestDatabase {
  readonly name: string;
  query<T = unknown>(sql: string, params?: unknown[]): Promise<T>;
}

/**
 * A downtime statement that outlives its worker's lease: the holder's scheduled-row copy of an
 * ADD waits on a row lock (a test transaction's gap lock), its client gives it up (statement
 * timeout), the holder drains and releases the lease, the other worker takes over and applies
 * the STOP; then the lock goes. The server still runs the copy the old holder gave up: it must
 * not bring back the scheduled row of the downtime the STOP ended. Each worker writes through
 * its own writer pool, as the daemon does. Returns what the rows ended as.
 */
async function lateCopyAfterTakeOver(db: TestDatabase, url: string) {
  const options = mysqlOptionsFromUrl(url);
  const conn = await mysql.createConnection(options);
  try {
    await ensureSchema(conn);
  } finally {
    await conn.end();
  }
  const metrics = createMetrics();
  const deadLetters = new DeadLetters(null, metrics);
  const worker = () => {
    const pool = createWriterPool(options, 4);
    const executor = new DowntimeExecutor({
      executor: poolExecutor(pool, { statementTimeoutMs: 300 }),
      availability: new DbAvailability(metrics.dbAvailable),
      deadLetters,
      metrics,
    });
    return { pool, executor };
  };
  const a = worker();
  const b = worker();
  const events: string[] = [];
  const leaseA = recordingLease(options, "in-order:n", "A", events).lease;
  const leaseB = recordingLease(options, "in-order:n", "B", events).lease;
  const downtime = (type: number, ts: number, attr = 0): DowntimeEvent => ({
    type,
    attr,
    timestamp: ts,
    timestampUsec: 1,
    downtimeType: 1,
    hostName: "web1",
    serviceDescription: "HTTP",
    downtimeId: 7,
    startTime: 1_760_000_100,
    endTime: 1_760_000_700,
    entryTime: 1_760_000_050,
    authorName: "op",
    commentData: "maintenance",
    triggeredBy: 0,
    fixed: 1,
    duration: 600,
  });
  const blocker = await mysql.createConnection(options);
  try {
    // A gap lock on the empty scheduled table: every INSERT into it waits until the rollback.
    await blocker.query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    await blocker.query("BEGIN");
    await blocker.query("SELECT * FROM statusengine_service_scheduleddowntimes FOR UPDATE");
    await elected(leaseA, "A");
    leaseB.start();
    // A applies the ADD until its copy waits, then its drain gives the job up and A stops.
    const drain = new AbortController();
    const add = a.executor.run(QUEUE, downtimeStatements(downtime(1100, E + 50), "N"), drain.signal)
      .then(() => "done", (err: unknown) => `abandoned: ${errorMessage(err)}`);
    await waitFor(async () => (await waiting(db, SCHEDULED_INSERT, 0)) > 0, {
      message: "A's copy waiting on the lock",
    });
    drain.abort(new Error("drain deadline"));
    assert.match(await add, /^abandoned/);
    await leaseA.stop();
    await waitFor(() => leaseB.active, { message: "B took the lease" });
    const stop = b.executor.run(
      QUEUE,
      downtimeStatements(downtime(1104, E + 700, 1), "N"),
      AbortSignal.timeout(20_000),
    );
    const stopped = track(stop);
    // The STOP either completes or waits on what the old holder's copy holds.
    await waitFor(async () => stopped.settled || (await waiting(db, HISTORY_INSERT, 1_000)) > 0, {
      message: "B's STOP done or waiting on the lock",
    });
    const stopWaitedForOldCopy = !stopped.settled;
    await blocker.query("ROLLBACK");
    await stop;
    await waitFor(async () => (await running(db)) === 0, {
      message: "every statement the old holder gave up ended on the server",
    });
    const count = async (table: string) =>
      Number((await db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${table}`))[0]?.n);
    return {
      stopWaitedForOldCopy,
      scheduled: await count("statusengine_service_scheduleddowntimes"),
      history: await count("statusengine_service_downtimehistory"),
      tombstones: await count("statusengine_downtime_tombstones"),
    };
  } finally {
    await blocker.end().catch(() => {});
    await leaseA.stop();
    await leaseB.stop();
    await a.pool.end();
    await b.pool.end();
    await deadLetters.close();
  }
}

const E = 1_760_000_000;
const SCHEDULED_INSERT = "INSERT INTO `statusengine_service_scheduleddowntimes`%";
const HISTORY_INSERT = "INSERT INTO `statusengine_service_downtimehistory`%";

/**
 * Statements like `like` the server has been running for more than `ms` (INNODB_TRX would say
 * which wait on a lock, but MariaDB fills it from a cache that may miss them).
 */
async function waiting(db: TestDatabase, like: string, ms: number): Promise<number> {
  const rows = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
      "WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE ? AND TIME_MS > ?",
    [db.name, like, ms],
  );
  return Number(rows[0]?.n ?? 0);
}

/** Statements of the database the server still runs (this query aside). */
async function running(db: TestDatabase): Promise<number> {
  const rows = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
      "WHERE DB = ? AND COMMAND = 'Query' AND INFO NOT LIKE '%information_schema.PROCESSLIST%'",
    [db.name],
  );
  return Number(rows[0]?.n ?? 0);
}

// The lease ends before the term, but not a statement already on the server: the client's
// statement timeout only abandons it. Under REPEATABLE READ the copy holds the guard's shared
// locks (the history row, the tombstone's gap) while it waits, so the new holder's STOP waits
// for it and the rows end as in core order (docs/downtimes.md#galera).
Deno.test("lease: a downtime statement the old holder gave up still runs on the server, and the new holder's STOP waits for it", async () => {
  await using db = await createScratchDatabase();
  const rows = await lateCopyAfterTakeOver(db, db.url);
  assert.deepEqual(rows, { stopWaitedForOldCopy: true, scheduled: 0, history: 1, tombstones: 1 });
});

// A server whose default is READ COMMITTED reads the guard without a lock: the STOP would not
// wait, and the copy would commit after it, re-creating the scheduled row of a stopped downtime.
Deno.test("lease: the same on a server whose default isolation is READ COMMITTED", async () => {
  await using server = await startMariadbd({
    extraArgs: ["--transaction-isolation=READ-COMMITTED"],
  });
  await server.query("CREATE DATABASE se");
  const db: TestDatabase = { name: "se", query: (sql, params) => server.query(sql, params, "se") };
  const rows = await lateCopyAfterTakeOver(db, server.url({ database: "se" }));
  assert.deepEqual(rows, { stopWaitedForOldCopy: true, scheduled: 0, history: 1, tombstones: 1 });
});

// A holder frozen past its term (SIGSTOP, a suspended VM) runs again with its job half done: the
// downtime statements did not ask the lease, so the rest of the job committed after the new
// holder's jobs. Each statement now commits only with an UPDATE of the lease row as its holder.
Deno.test("lease: a downtime statement of a worker whose lease another worker took rolls back, and its job goes back", async () => {
  const { db, options } = await leaseDatabase();
  await using _db = db;
  const metrics = createMetrics();
  const deadLetters = new DeadLetters(null, metrics);
  const pool = createWriterPool(options, 2);
  const executor = new DowntimeExecutor({
    executor: poolExecutor(pool),
    availability: new DbAvailability(metrics.dbAvailable),
    deadLetters,
    metrics,
    lease: { name: "in-order:n", holder: "A 1" },
  });
  const add = (id: number) =>
    downtimeStatements({
      type: 1100,
      attr: 0,
      timestamp: E + 50,
      timestampUsec: 1,
      downtimeType: 1,
      hostName: "web1",
      serviceDescription: "HTTP",
      downtimeId: id,
      startTime: E + 100,
      endTime: E + 700,
      entryTime: E + 50,
      authorName: "op",
      commentData: "maintenance",
      triggeredBy: 0,
      fixed: 1,
      duration: 600,
    }, "N");
  const count = async (table: string) =>
    Number((await db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${table}`))[0]?.n);
  try {
    await db.query(
      "INSERT INTO statusengine_worker_leases (name, holder, renewals) VALUES ('in-order:n', 'A 1', 5)",
    );
    await executor.run(QUEUE, add(1), AbortSignal.timeout(10_000));
    assert.equal(await count("statusengine_service_scheduleddowntimes"), 1, "the holder's ADD");
    await db.query(
      "UPDATE statusengine_worker_leases SET holder = 'B 2' WHERE name = 'in-order:n'",
    );
    await assert.rejects(
      executor.run(QUEUE, add(2), AbortSignal.timeout(10_000)),
      (err: unknown) => err instanceof WorkerError && err.code === "in_order_lock_lost",
    );
    assert.equal(await count("statusengine_service_downtimehistory"), 1, "nothing of the 2nd ADD");
    assert.equal(await count("statusengine_downtime_announcements"), 1);
    assert.equal(await count("statusengine_service_scheduleddowntimes"), 1);
    // The same job delivered: the lease logs its loss and its next renewal stops the consumer
    // (here after the second attempt), which gives the job back. A "job failed, retrying"
    // warning per job meanwhile only repeated that, in alarming words.
    const stopRetries = new AbortController();
    let attempts = 0;
    const engine = new DeliveryEngine({
      handler: async (_job, signal) => {
        try {
          await executor.run(QUEUE, add(2), signal);
        } finally {
          if (++attempts === 2) stopRetries.abort();
        }
      },
      observer: { jobReceived() {}, inFlight() {}, jobDone() {}, jobRetried() {} },
      deadLetter: () => Promise.reject(new Error("no dead letter expected")),
      name: "gearman",
      log: getLogger("gearman"),
      retry: { initialMs: 10, maxMs: 50, jitter: 0 },
    });
    const job: Job = {
      queue: QUEUE,
      server: "s",
      handle: "H:1",
      unique: "",
      payload: new Uint8Array(),
      receivedAt: 0,
    };
    const { result, logs } = await withLogs(async (logs) => ({
      result: await engine.deliver({ job, ownsPayload: false }, { complete: () => true }, {
        abort: new AbortController().signal,
        stopRetries: stopRetries.signal,
      }),
      logs,
    }));
    assert.equal(result, "abandoned");
    assert.deepEqual(logs.map((l) => `${l.level} ${l.message}`), []);
    assert.equal(await count("statusengine_service_scheduleddowntimes"), 1);
  } finally {
    await pool.end();
    await deadLetters.close();
  }
});
