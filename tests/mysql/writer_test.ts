/**
 * TableWriter against a real MariaDB (scratch database): group commit, D1
 * commit tracking, D7 dead-lettering, the retry policy, backpressure,
 * withPaused and the shutdown budget.
 *
 * Statements are held "in flight" with a real `LOCK TABLES … WRITE` from a
 * second connection and MySQL outages are made with a TCP proxy. The only
 * simulated failures are lock errors 1213/1205, which MySQL cannot produce on
 * demand; the executor that injects them passes every other call to MySQL.
 */
import { registryValue } from "../helpers/metric_registry.ts";
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase, type ScratchDatabase } from "../helpers/mysql.ts";
import { lockTables, waitForBlocked } from "../helpers/mysql_lock.ts";
import { startTcpProxy, type TcpProxy } from "../helpers/tcp_proxy.ts";
import { waitFor } from "../helpers/wait.ts";
import { withLogs } from "../helpers/logs.ts";
import { type CommitListener, TableWriter } from "../../src/mysql/writer.ts";
import { hasCode } from "../../src/util/errors.ts";
import { type TableName, TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { emptyInsertStatement } from "../../src/mysql/sql.ts";
import {
  type ExecResult,
  poolExecutor,
  type RunOptions,
  type SqlExecutor,
} from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { Row } from "../../src/events/types.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { JobTracker } from "../../src/mysql/job_tracker.ts";
import { DeadLetterFile, DeadLetters } from "../../src/pipeline/dead_letter.ts";
import type { DeadLetterRecord, DeadLetterSink } from "../../src/mysql/dead_letter_sink.ts";
import { deadline } from "../../src/util/async.ts";

const LOG = "statusengine_logentries";
const HOSTCHECKS = "statusengine_hostchecks";
const LOG_QUEUE = "statusngin_logentries";

/** One statement as the writer sent it. */
interface Call {
  readonly sql: string;
  readonly values: readonly unknown[];
  readonly table: string;
  /** Row tuples in the statement. */
  readonly rows: number;
  readonly started: number;
  settled?: number;
  ok?: boolean;
}

/**
 * Passes every statement to MySQL and records it. `inject` may return an
 * error for a call (1-based number) instead: only used for lock errors, which
 * MySQL cannot produce on demand.
 */
class RecordingExecutor implements SqlExecutor {
  readonly calls: Call[] = [];
  readonly #inner: SqlExecutor;
  inject: ((n: number, call: Call) => Error | undefined) | undefined;

  constructor(inner: SqlExecutor) {
    this.#inner = inner;
  }

  async run(
    sql: string,
    values: readonly unknown[] = [],
    options?: RunOptions,
  ): Promise<ExecResult> {
    const table = /^INSERT INTO `([^`]+)`/.exec(sql)?.[1] ?? "";
    const columns = TABLES[table as TableName]?.insertColumns.length ?? 1;
    const call: Call = {
      sql,
      values,
      table,
      rows: values.length / columns,
      started: performance.now(),
    };
    this.calls.push(call);
    const injected = this.inject?.(this.calls.length, call);
    try {
      if (injected !== undefined) throw injected;
      const result = await this.#inner.run(sql, values, options);
      call.ok = true;
      return result;
    } catch (err: unknown) {
      call.ok = false;
      throw err;
    } finally {
      call.settled = performance.now();
    }
  }

  /** Row counts of the statements sent for `table`. */
  rowsPerStatement(table: string): number[] {
    return this.calls.filter((c) => c.table === table).map((c) => c.rows);
  }
}

function lockError(errno: 1213 | 1205): Error {
  return errno === 1213
    ? Object.assign(
      new Error("Deadlock found when trying to get lock; try restarting transaction"),
      {
        errno,
        code: "ER_LOCK_DEADLOCK",
        sqlState: "40001",
      },
    )
    : Object.assign(new Error("Lock wait timeout exceeded; try restarting transaction"), {
      errno,
      code: "ER_LOCK_WAIT_TIMEOUT",
      sqlState: "HY000",
    });
}

interface Fixture extends AsyncDisposable {
  readonly db: ScratchDatabase;
  readonly executor: RecordingExecutor;
  readonly metrics: Metrics;
  readonly availability: DbAvailability;
  readonly deadLetterPath: string;
  /** Present when the pool connects through a proxy. */
  readonly proxy: TcpProxy | undefined;
  /** A writer closed by the fixture; `sink` replaces the dead-letter file. */
  writer(
    table: TableName,
    batchSize: number,
    sink?: DeadLetterSink,
    onCommitted?: CommitListener,
  ): TableWriter;
  count(table: string, where?: string): Promise<number>;
  deadLetters(): Promise<(DeadLetterRecord & { time: string })[]>;
}

/** A scratch database with `tables`, a pool (optionally via a TCP proxy) and writers' collaborators. */
async function setup(
  tables: readonly TableName[],
  options: { proxy?: boolean } = {},
): Promise<Fixture> {
  const db = await createScratchDatabase();
  const cleanups: (() => Promise<void>)[] = [() => db.drop()];
  const undo = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    for (const t of tables) {
      await db.query(createTableStatement(TABLES[t], { collation: "utf8mb4_general_ci" }));
    }
    let proxy: TcpProxy | undefined;
    if (options.proxy === true) {
      const p = await startTcpProxy(`${db.host}:${db.port}`);
      proxy = p;
      cleanups.push(() => p.close());
    }
    const pool = mysql.createPool({
      host: proxy === undefined ? db.host : "127.0.0.1",
      port: proxy === undefined ? db.port : proxy.port,
      user: db.user,
      password: db.password,
      database: db.name,
      charset: "utf8mb4",
      connectionLimit: 4,
      connectTimeout: 2_000,
    });
    cleanups.push(() => pool.end());
    const deadLetterPath = await Deno.makeTempFile({ suffix: ".ndjson" });
    cleanups.push(() => Deno.remove(deadLetterPath));
    const metrics = createMetrics();
    // The worker's one path for dead letters: it counts what it wrote.
    const sink = new DeadLetters(new DeadLetterFile(deadLetterPath), metrics);
    cleanups.push(() => sink.close());
    const availability = new DbAvailability(metrics.dbAvailable);
    const executor = new RecordingExecutor(poolExecutor(pool));
    const writers: TableWriter[] = [];
    cleanups.push(async () => {
      using budget = deadline(2_000);
      await Promise.all(writers.map((w) => w.close(budget.signal)));
    });
    return {
      db,
      executor,
      metrics,
      availability,
      deadLetterPath,
      proxy,
      writer(table, batchSize, deadLetters = sink, onCommitted) {
        const w = new TableWriter({
          table: TABLES[table],
          batchSize,
          executor,
          availability,
          deadLetters,
          metrics,
          ...(onCommitted === undefined ? {} : { onCommitted }),
        });
        writers.push(w);
        return w;
      },
      async count(table, where = "1") {
        const rows = await db.query<{ n: number }[]>(
          `SELECT COUNT(*) AS n FROM \`${table}\` WHERE ${where}`,
        );
        return Number(rows[0]?.n ?? 0);
      },
      async deadLetters() {
        const text = await Deno.readTextFile(deadLetterPath);
        return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
      },
      [Symbol.asyncDispose]: undo,
    };
  } catch (err: unknown) {
    await undo();
    throw err;
  }
}

let seq = 0;
/** A distinct log entry; `marker` lets a test find it again. */
function logRow(marker: string, overrides: Record<string, string | number> = {}): Row {
  seq++;
  return {
    entry_time: 1_700_000_000 + seq,
    logentry_type: 262144,
    logentry_data: marker,
    node_name: "N",
    ...overrides,
  };
}

function hostcheckRow(host: string): Row {
  seq++;
  return {
    hostname: host,
    start_time: 1_700_000_000 + seq,
    start_time_usec: seq,
    end_time: 1_700_000_001 + seq,
    state: 0,
    output: "PING OK",
  };
}

function rows(n: number, prefix: string): Row[] {
  return Array.from({ length: n }, (_, i) => logRow(`${prefix}-${i}`));
}

/** Whether a promise has settled, observable without awaiting it. */
/** A writer of the log table whose first row (`marker`) is committed: its connection is open. */
async function warmWriter(fx: Fixture, batchSize: number, marker = "warm") {
  const writer = fx.writer(LOG, batchSize);
  const warm = new JobTracker(LOG_QUEUE, 1);
  await writer.add([logRow(marker)], warm);
  await warm.done;
  return writer;
}

/** Until the writers hold a batch: db_available 0, and `retried` (two retries of it). */
async function untilHeld(fx: Fixture, retried: string): Promise<void> {
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0, {
    message: "db_available 0",
  });
  await waitFor(
    async () => (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 2,
    { message: retried },
  );
}

function track(p: Promise<unknown>): { readonly settled: boolean } {
  const state = { settled: false };
  p.then(() => (state.settled = true), () => (state.settled = true));
  return state;
}

/**
 * Let every pending timer of 0 ms and every I/O callback run: the writer's
 * group-commit turn is a 0 ms timer, so a statement it was going to send has
 * been sent after this. Used only to show that something does NOT happen
 * while the state that would allow it is held by the test.
 */
async function turns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 0));
}

// --- group commit ----------------------------------------------------------

Deno.test("writer: a full batch is sent at once, before add() returns (docs/writers.md#group-commit)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  const job = new JobTracker(LOG_QUEUE, 5);
  await writer.add(rows(5, "full"), job);
  // No timer turn has passed: a full buffer does not wait for one.
  assert.deepEqual(fx.executor.rowsPerStatement(LOG), [5]);
  await job.done;
  assert.equal(await fx.count(LOG), 5);
});

Deno.test("writer: an idle writer sends a partial batch on the next turn instead of waiting 250 ms (group commit)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 100);
  const job = new JobTracker(LOG_QUEUE, 3);
  // A 250 ms ticker would send after 250 ms; group commit sends on the next
  // event-loop turn, so the statement has started after a few turns, with no timer
  // of any length in between.
  await writer.add(rows(3, "partial"), job);
  await turns();
  assert.deepEqual(
    fx.executor.rowsPerStatement(LOG),
    [3],
    "the partial batch was sent within a few event-loop turns",
  );
  await job.done;
  assert.equal(await fx.count(LOG), 3);
});

Deno.test("writer: rows arriving while a statement is in flight go out together in the next one, never more than batch size (docs/writers.md#writers-per-table)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  const lock = await lockTables(fx.db, [LOG]);
  try {
    const first = new JobTracker(LOG_QUEUE, 1);
    await writer.add([logRow("first")], first);
    await waitForBlocked(fx.db, "INSERT INTO `statusengine_logentries`%");
    // Seven one-row jobs while the first statement is held: five fill the buffer,
    // two wait for room (bounded buffer).
    const jobs = Array.from({ length: 7 }, () => new JobTracker(LOG_QUEUE, 1));
    const adds = jobs.map((j, i) => writer.add([logRow(`next-${i}`)], j));
    await waitFor(() => writer.buffered === 5, { message: "buffer full" });
    assert.deepEqual(fx.executor.rowsPerStatement(LOG), [1], "nothing sent while one is in flight");
    await lock.unlock();
    await Promise.all(adds);
    await Promise.all([first.done, ...jobs.map((j) => j.done)]);
  } finally {
    await lock.unlock();
  }
  assert.deepEqual(fx.executor.rowsPerStatement(LOG), [1, 5, 2]);
  assert.equal(await fx.count(LOG), 8);
});

// --- D1 --------------------------------------------------------------------

Deno.test("writer: a job resolves only after its last row commits, across two statements and two tables (D1)", async () => {
  await using fx = await setup([LOG, HOSTCHECKS]);
  const checks = fx.writer(HOSTCHECKS, 3);
  const log = fx.writer(LOG, 3);
  const lock = await lockTables(fx.db, [LOG]);
  try {
    // Job A: four host checks (batch size 3 → two statements) and one log entry.
    const a = new JobTracker(LOG_QUEUE, 5);
    const aDone = track(a.done);
    await checks.add(["a1", "a2", "a3", "a4"].map(hostcheckRow), a);
    // Job B shares A's second host-check statement.
    const b = new JobTracker(LOG_QUEUE, 1);
    await checks.add([hostcheckRow("b1")], b);
    await log.add([logRow("a-log")], a);
    await waitForBlocked(fx.db, "INSERT INTO `statusengine_logentries`%");
    await b.done;
    await waitFor(() => a.pending === 1, { message: "job A's host checks committed" });
    assert.deepEqual(fx.executor.rowsPerStatement(HOSTCHECKS), [3, 2]);
    assert.equal(await fx.count(HOSTCHECKS), 5);
    // Its last row is held by the lock: A must not resolve, whatever else committed.
    await turns();
    assert.equal(aDone.settled, false, "job A resolved before its log entry was committed");
    await lock.unlock();
    await a.done;
    assert.equal(await fx.count(LOG, "logentry_data = 'a-log'"), 1);
    assert.equal(a.deadLettered, 0);
  } finally {
    await lock.unlock();
  }
});

// --- D7 --------------------------------------------------------------------

Deno.test("writer: a row MySQL rejects is dead-lettered alone and the rest of its batch is committed, its neighbours' adjustments counted once (D7, D6)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 8);
  const good = new JobTracker(LOG_QUEUE, 4);
  const mixed = new JobTracker(LOG_QUEUE, 4);
  // Strict mode: a string in an int(11) column is error 1366, deterministic.
  const bad = logRow("bad", { logentry_type: "not-a-number" });
  await writer.add(rows(4, "good"), good);
  // m-0 goes out with the bad row until the last split: its truncation is counted once.
  const long = logRow("m-0", { node_name: "n".repeat(300) });
  await writer.add([long, bad, logRow("m-2"), logRow("m-3")], mixed);
  await Promise.all([good.done, mixed.done]);

  assert.equal(await fx.count(LOG), 7);
  assert.equal(await fx.count(LOG, "logentry_data = 'bad'"), 0);
  assert.equal(good.deadLettered, 0);
  assert.equal(mixed.deadLettered, 1);
  const letters = await fx.deadLetters();
  assert.equal(letters.length, 1);
  assert.equal(letters[0]?.queue, LOG_QUEUE);
  assert.equal(letters[0]?.table, LOG);
  assert.equal(letters[0]?.reason, "sql_rejected");
  assert.deepEqual(letters[0]?.row, bad);
  assert.match(letters[0]?.error ?? "", /1366/);

  // Split by halves: 8 → 4 ok + 4 → 2 ok + 2 → 1 ok + 1 rejected. No statement is sent twice.
  const rejected = fx.executor.calls.filter((c) => c.ok === false);
  assert.deepEqual(rejected.map((c) => c.rows), [8, 4, 2, 1]);
  const sent = fx.executor.calls.map((c) => JSON.stringify(c.values));
  assert.equal(new Set(sent).size, sent.length, "a rejected statement was retried");
  assert.equal(
    await registryValue(fx.metrics, "statusengine_dead_letters_total", {
      queue_name: LOG_QUEUE,
      reason: "sql_rejected",
    }),
    1,
  );
  // One error per flush MySQL rejected, however many halving steps isolated the row.
  assert.ok(rejected.length > 1, "the batch was split to isolate the row");
  assert.equal(
    await registryValue(fx.metrics, "statusengine_pipeline_errors_total", { component: "mysql" }),
    1,
  );
  assert.equal(await registryValue(fx.metrics, "statusengine_db_batch_retries_total"), 0);
  assert.equal(
    await registryValue(fx.metrics, "statusengine_db_values_adjusted_total", {
      table: LOG,
      reason: "truncated",
    }),
    1,
  );
});

Deno.test("writer: the commit listener hears each committed row once, after MySQL returned its statement and before its job resolves; never a rejected row", async () => {
  await using fx = await setup([LOG]);
  const heard: Row[] = [];
  let heardBeforeItsStatementReturned = 0;
  const writer = fx.writer(LOG, 8, undefined, (rows) => {
    // Statements go one at a time: the last call is the one that wrote `rows`.
    if (fx.executor.calls.at(-1)?.ok !== true) heardBeforeItsStatementReturned++;
    heard.push(...rows);
  });
  const clean = new JobTracker(LOG_QUEUE, 2);
  let heardWhenCleanResolved = -1;
  void clean.done.then(() => heardWhenCleanResolved = heard.length);
  await writer.add([logRow("c-0"), logRow("c-1")], clean);
  await clean.done;
  assert.equal(heardWhenCleanResolved, 2, "heard by the time the job learnt of its commit");

  const mixed = new JobTracker(LOG_QUEUE, 4);
  const good = [logRow("g-0"), logRow("g-1"), logRow("g-2")];
  // Strict mode: a string in an int(11) column is error 1366; the row is dead-lettered.
  const bad = logRow("bad", { logentry_type: "not-a-number" });
  await writer.add([good[0] as Row, bad, good[1] as Row, good[2] as Row], mixed);
  await mixed.done;

  assert.equal(mixed.deadLettered, 1);
  assert.equal(await fx.count(LOG), 5);
  assert.deepEqual(
    heard.map((r) => r["logentry_data"]).sort(),
    ["c-0", "c-1", "g-0", "g-1", "g-2"],
    "each committed row once, the rejected one never",
  );
  assert.equal(heardBeforeItsStatementReturned, 0);
});

Deno.test("writer: an error that names no row and fails both halves of a split holds the batch until MySQL takes it; nothing is dead-lettered (D7)", async () => {
  await using fx = await setup([LOG]);
  const writer = await warmWriter(fx, 8);
  // A schema change under the running worker: every INSERT fails with 1054
  // (unknown column), whatever its rows. Not the rows' fault.
  await fx.db.query(`ALTER TABLE ${LOG} RENAME COLUMN logentry_data TO logentry_data_moved`);
  const job = new JobTracker(LOG_QUEUE, 8);
  const done = track(job.done);
  await writer.add(rows(8, "held"), job);
  await untilHeld(fx, "the held batch retried");
  assert.equal(done.settled, false, "a job resolved while its rows were held");
  assert.equal(job.deadLettered, 0);
  const sizes = fx.executor.calls.slice(1, 4).map((c) => c.rows);
  assert.deepEqual(sizes, [8, 4, 4], "split once, then held: both halves failed alike");

  await fx.db.query(`ALTER TABLE ${LOG} RENAME COLUMN logentry_data_moved TO logentry_data`);
  await job.done;
  assert.equal(await fx.count(LOG, "logentry_data LIKE 'held-%'"), 8);
  assert.equal(job.deadLettered, 0);
  assert.equal((await fx.deadLetters()).length, 0);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
  assert.equal(
    await registryValue(fx.metrics, "statusengine_pipeline_errors_total", { component: "mysql" }),
    1,
    "one rejected flush",
  );
});

Deno.test("writer: a single row whose statement fails whatever its rows (1054 after a column rename) is held like a larger batch, then committed; nothing is dead-lettered (D7)", async () => {
  await using fx = await setup([LOG]);
  const writer = await warmWriter(fx, 8);
  // A quiet table: each statement carries one row, so no split can show that both halves fail.
  await fx.db.query(`ALTER TABLE ${LOG} RENAME COLUMN logentry_data TO logentry_data_moved`);
  const job = new JobTracker(LOG_QUEUE, 1);
  const done = track(job.done);
  await writer.add([logRow("alone")], job);
  await waitFor(
    async () =>
      done.settled ||
      (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 2,
    { message: "the row held and retried, or settled" },
  );
  assert.equal(job.deadLettered, 0, "a row dead-lettered for its statement's fault");
  assert.equal(done.settled, false, "a job resolved while its row was held");
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 0);

  await fx.db.query(`ALTER TABLE ${LOG} RENAME COLUMN logentry_data_moved TO logentry_data`);
  await job.done;
  assert.equal(await fx.count(LOG, "logentry_data = 'alone'"), 1);
  assert.equal(job.deadLettered, 0);
  assert.equal((await fx.deadLetters()).length, 0);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
});

Deno.test("writer: a NOT NULL column without a default added under the worker (1364) holds the rows, alone or in a batch, until it gets one; nothing is dead-lettered (D7)", async () => {
  await using fx = await setup([LOG]);
  const writer = await warmWriter(fx, 8);
  // The worker names every column it knows, so no row can fail this way: only the schema can.
  await fx.db.query(`ALTER TABLE ${LOG} ADD COLUMN site int NOT NULL`);
  const batch = new JobTracker(LOG_QUEUE, 8);
  const alone = new JobTracker(LOG_QUEUE, 1);
  const settled = [track(batch.done), track(alone.done)];
  await writer.add(rows(8, "batch"), batch);
  await writer.add([logRow("alone")], alone);
  await waitFor(
    async () =>
      settled.some((s) => s.settled) ||
      (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 2,
    { message: "the rows held and retried, or settled" },
  );
  assert.equal(batch.deadLettered + alone.deadLettered, 0, "rows dead-lettered for the schema");
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 0);

  await fx.db.query(`ALTER TABLE ${LOG} ALTER COLUMN site SET DEFAULT 0`);
  await Promise.all([batch.done, alone.done]);
  assert.equal(await fx.count(LOG, "logentry_data LIKE 'batch-%' OR logentry_data = 'alone'"), 9);
  assert.equal((await fx.deadLetters()).length, 0);
});

Deno.test("writer: MariaDB takes the row-less statement a lone rejected row is checked with, for every batched table (an error in it would hold every such row)", async () => {
  const batched = (Object.keys(TABLES) as TableName[]).filter((t) => TABLES[t].batched);
  await using fx = await setup(batched);
  for (const t of batched) {
    const result = await fx.executor.run(emptyInsertStatement(TABLES[t]), []);
    assert.equal(result.affectedRows, 0, t);
  }
});

Deno.test("writer: held rows that MySQL then rejects for their values are dead-lettered and db_available returns to 1 (D7)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 4);
  await fx.db.query(`ALTER TABLE ${LOG} RENAME COLUMN logentry_data TO logentry_data_moved`);
  const job = new JobTracker(LOG_QUEUE, 4);
  await writer.add(rows(4, "doomed"), job);
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0, {
    message: "db_available 0",
  });
  // The column is back, but a CHECK constraint (4025, SQL state 23000) now refuses these rows.
  await fx.db.query(
    `ALTER TABLE ${LOG} RENAME COLUMN logentry_data_moved TO logentry_data, ` +
      "ADD CONSTRAINT no_doom CHECK (logentry_data NOT LIKE 'doomed-%')",
  );
  await job.done;
  assert.equal(job.deadLettered, 4);
  assert.equal((await fx.deadLetters()).length, 4);
  // The last row settles its job just before the writer ends the outage.
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 1, {
    message: "the outage is over",
  });
});

Deno.test("writer: a trigger's SIGNAL (1644, SQL state 45000) refuses rows like a CHECK constraint: two refused rows, one in each half, are dead-lettered and never hold the batch; the good rows commit (D7)", async () => {
  await using fx = await setup([LOG]);
  // The trigger runs for each row, so its SIGNAL is about the row it runs for.
  await fx.db.query(
    `CREATE TRIGGER refuse_some BEFORE INSERT ON ${LOG} FOR EACH ROW ` +
      "IF NEW.logentry_data LIKE 'refused-%' THEN " +
      "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF",
  );
  const writer = fx.writer(LOG, 8);
  const job = new JobTracker(LOG_QUEUE, 8);
  const done = track(job.done);
  // Split 4 + 4: each half carries one refused row, so both halves fail with 1644.
  await writer.add(
    [...rows(3, "ok"), logRow("refused-a"), logRow("ok-3"), logRow("refused-b"), ...rows(2, "ok2")],
    job,
  );
  await waitFor(
    async () =>
      done.settled ||
      (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 1,
    { message: "the job settled, or the batch held" },
  );
  assert.equal(
    await registryValue(fx.metrics, "statusengine_db_connection_retries_total"),
    0,
    "the batch was held for two rows a trigger refuses",
  );
  await job.done;
  assert.equal(job.deadLettered, 2);
  assert.equal(await fx.count(LOG), 6);
  const letters = await fx.deadLetters();
  assert.deepEqual(letters.map((l) => l.row?.["logentry_data"]).sort(), ["refused-a", "refused-b"]);
  assert.match(letters[0]?.error ?? "", /1644/);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1, "never held");
});

Deno.test("writer: a rejected row whose job was given back while its batch was being split is not dead-lettered: the worker that takes the job handles it (docs/writers.md#give-back)", async () => {
  await using fx = await setup([LOG], { proxy: true });
  const proxy = fx.proxy as TcpProxy;
  const writer = fx.writer(LOG, 2);
  let givenBack = false;
  const rejected = new JobTracker(LOG_QUEUE, 1, () => givenBack);
  const good = new JobTracker(LOG_QUEUE, 1);
  // Call 1 is the batch (rejected for the bad row), 2 the bad row alone (rejected), 3 the good
  // row alone: MySQL goes away under it, and the bad row's job is given back meanwhile.
  fx.executor.inject = (n) => {
    if (n === 3) proxy.block();
    return undefined;
  };
  await writer.add([logRow("bad", { logentry_type: "x" })], rejected);
  await writer.add([logRow("good")], good);
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0, {
    message: "db_available 0 while the good row is held",
  });
  givenBack = true;
  proxy.unblock();
  await good.done;
  await writer.flush();
  assert.deepEqual(fx.executor.rowsPerStatement(LOG).slice(0, 3), [2, 1, 1]);
  assert.equal(await fx.count(LOG, "logentry_data = 'good'"), 1);
  assert.equal(rejected.deadLettered, 0, "a row of a job given back was dead-lettered");
  assert.equal((await fx.deadLetters()).length, 0, "another worker dead-letters it as well");
});

Deno.test("writer: a lone row held through an outage and then rejected for its value is dead-lettered and ends the outage: db_available returns to 1 (D7)", async () => {
  await using fx = await setup([LOG], { proxy: true });
  const proxy = fx.proxy as TcpProxy;
  const writer = await warmWriter(fx, 8);
  proxy.block();
  const job = new JobTracker(LOG_QUEUE, 1);
  // Strict mode: a string in an int(11) column is error 1366, once MySQL answers again.
  await writer.add([logRow("bad", { logentry_type: "x" })], job);
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0, {
    message: "db_available 0 while the row is held",
  });
  proxy.unblock();
  await job.done;
  assert.equal(job.deadLettered, 1);
  // Nothing else is written to this table: no later statement would end the outage.
  assert.equal(
    await registryValue(fx.metrics, "statusengine_db_available"),
    1,
    "MySQL answered, yet db_available stays 0",
  );
  assert.equal(fx.availability.available, true);
});

// --- retry policy (docs/writers.md#retry-policy) -----------------------------

Deno.test("writer: lock errors are sent again at once, then held with the MySQL hold's back-off until they clear, never dropped, counted by table and kind (D7)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 3);
  const sequence = [lockError(1213), lockError(1205), lockError(1213), lockError(1205)];
  // The back-offs are read from the timers the retry asks for, not measured on the clock: the
  // first timer requested after an injected failure is that failure's back-off. (Between the
  // failure and its back-off only promise callbacks run, no other code that sets timers.)
  const requested: number[] = [];
  let failed = false;
  const realSetTimeout = globalThis.setTimeout;
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
    if (failed) requested.push(args[1] ?? 0);
    failed = false;
    return realSetTimeout(...args);
  }) as typeof setTimeout;
  fx.executor.inject = (n) => {
    const error = sequence[n - 1];
    failed = error !== undefined;
    return error;
  };
  const job = new JobTracker(LOG_QUEUE, 3);
  try {
    await writer.add(rows(3, "locked"), job);
    await job.done;
  } finally {
    globalThis.setTimeout = realSetTimeout;
  }

  const calls = fx.executor.calls;
  assert.equal(calls.length, 5, "four lock failures, then the commit");
  assert.equal(
    new Set(calls.map((c) => JSON.stringify([c.sql, c.values]))).size,
    1,
    "same statement",
  );
  // The first conflict is sent again at once; the next ones wait the hold's back-off
  // (MYSQL_HOLD): 100 ms doubling.
  const backoffs = [100, 200, 400];
  assert.deepEqual(requested, backoffs, "back-offs requested after the 2nd to 4th failures");
  // A timer never fires early, so each retry came at least its back-off after the failure
  // (only a lower bound: how much later depends on the machine's load).
  const gaps = calls.slice(2).map((c, i) => c.started - (calls[i + 1]?.settled ?? 0));
  gaps.forEach((g, i) => {
    const floor = backoffs[i] ?? 0;
    assert.ok(g >= floor - 2, `gap ${i + 1}: ${g.toFixed(1)} ms, want at least ${floor}`);
  });
  assert.equal(await fx.count(LOG), 3);
  assert.equal(job.deadLettered, 0);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_batch_retries_total"), 4);
  for (const kind of ["deadlock", "lock_wait_timeout"]) {
    assert.equal(
      await registryValue(fx.metrics, "statusengine_mysql_conflicts_total", {
        table: LOG,
        kind,
      }),
      2,
      kind,
    );
  }
  assert.equal(await registryValue(fx.metrics, "statusengine_db_connection_retries_total"), 0);
  assert.equal(
    await registryValue(fx.metrics, "statusengine_db_available"),
    1,
    "a lock is not an outage",
  );
  assert.equal(
    await registryValue(fx.metrics, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
});

// DDL on the table (cleanup's partition changes) can fail a prepared INSERT with 1615 more than
// once in a row; as a statement error a lone row failing it twice was dead-lettered.
Deno.test("writer: a lone row failing with 1615 (re-prepare) while DDL runs is sent again and committed, never dead-lettered", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 1);
  const reprepare = Object.assign(
    new Error("Prepared statement needs to be re-prepared"),
    { errno: 1615, code: "ER_NEED_REPREPARE", sqlState: "HY000" },
  );
  fx.executor.inject = (n) => (n <= 3 ? reprepare : undefined);
  const job = new JobTracker(LOG_QUEUE, 1);
  await writer.add([logRow("reprepared")], job);
  await job.done;
  assert.equal(await fx.count(LOG), 1);
  assert.equal(job.deadLettered, 0);
  assert.equal(
    await registryValue(fx.metrics, "statusengine_mysql_conflicts_total", {
      table: LOG,
      kind: "reprepare",
    }),
    3,
  );
});

Deno.test("writer: a permanent error is never retried; every row of an all-bad batch is tried once alone (D7)", async () => {
  await using fx = await setup([LOG]);
  const single = fx.writer(LOG, 100);
  const one = new JobTracker(LOG_QUEUE, 1);
  await single.add([logRow("alone", { logentry_type: "x" })], one);
  await one.done;
  assert.equal(fx.executor.calls.length, 1, "a rejected single row is sent exactly once");
  assert.equal(one.deadLettered, 1);

  const batch = fx.writer(LOG, 4);
  const all = new JobTracker(LOG_QUEUE, 4);
  await batch.add(
    ["b0", "b1", "b2", "b3"].map((m) => logRow(m, { logentry_type: "x" })),
    all,
  );
  await all.done;
  const calls = fx.executor.calls.slice(1);
  // 4 → 2 + 2 (both halves are tried before either is split further) → 1 + 1 + 1 + 1:
  // seven distinct statements, none repeated. 1366 names the rows, so both halves
  // failing alike does not hold the batch.
  assert.deepEqual(calls.map((c) => c.rows), [4, 2, 2, 1, 1, 1, 1]);
  const texts = calls.map((c) => JSON.stringify(c.values));
  assert.equal(new Set(texts).size, texts.length);
  assert.equal(all.deadLettered, 4);
  assert.equal((await fx.deadLetters()).length, 5);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_batch_retries_total"), 0);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_connection_retries_total"), 0);
  assert.equal(await fx.count(LOG), 0);
});

Deno.test("writer: while MySQL is unreachable the batch is held, db_available goes 1→0→1 and nothing is lost (D1)", async () => {
  await using fx = await setup([LOG], { proxy: true });
  const proxy = fx.proxy as TcpProxy;
  const writer = await warmWriter(fx, 10, "before");
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);

  proxy.block();
  const job = new JobTracker(LOG_QUEUE, 5);
  const done = track(job.done);
  await writer.add(rows(5, "outage"), job);
  await untilHeld(fx, "held batch retried");
  assert.equal(done.settled, false, "a job resolved while MySQL was unreachable");
  assert.equal(job.pending, 5);

  proxy.unblock();
  await job.done;
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
  assert.equal(await fx.count(LOG, "logentry_data LIKE 'outage-%'"), 5);
  assert.equal(job.deadLettered, 0);
  assert.equal((await fx.deadLetters()).length, 0);
  assert.equal(
    await registryValue(fx.metrics, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
});

Deno.test("writer: close(budget) while MySQL is unreachable returns within the budget and leaves the held jobs unresolved (D1)", async () => {
  await using fx = await setup([LOG], { proxy: true });
  const proxy = fx.proxy as TcpProxy;
  const writer = await warmWriter(fx, 5, "before");

  proxy.block();
  const held = new JobTracker(LOG_QUEUE, 5);
  const buffered = new JobTracker(LOG_QUEUE, 5);
  const heldDone = track(held.done);
  const bufferedDone = track(buffered.done);
  await writer.add(rows(5, "held"), held); // the statement in flight, held by the retry policy
  await writer.add(rows(5, "buffered"), buffered); // waiting behind it
  await waitFor(async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0, {
    message: "db_available 0",
  });

  // The budget is a signal the test ends itself: close() must wait while it runs and return
  // once it ends, however long the machine takes to get there.
  const budget = new AbortController();
  const closed = track(writer.close(budget.signal));
  await turns();
  assert.equal(closed.settled, false, "close returned before its budget ended");
  budget.abort(new DOMException("shutdown budget spent", "TimeoutError"));
  await waitFor(() => closed.settled, { message: "close to return once its budget ended" });
  const callsAtClose = fx.executor.calls.length;

  await turns();
  assert.equal(heldDone.settled, false, "the held job must not be acknowledged");
  assert.equal(bufferedDone.settled, false, "the buffered job must not be acknowledged");
  assert.equal(held.pending, 5);
  assert.equal(buffered.pending, 5);
  assert.equal(writer.buffered, 5, "rows left uncommitted are still reported as buffered");
  assert.equal(fx.executor.calls.length, callsAtClose, "a closed writer sent another statement");
  await assert.rejects(
    writer.add([logRow("late")], new JobTracker(LOG_QUEUE, 1)),
    (err: unknown) => hasCode(err, "writer_closed"),
  );
  assert.equal((await fx.deadLetters()).length, 0, "held rows are redelivered, not dead-lettered");
  proxy.unblock();
  assert.equal(await fx.count(LOG), 1);
});

Deno.test("writer: close(budget) returns within the budget while MySQL never answers the statement in flight; its job stays unacknowledged (D1, docs/shutdown.md)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  // The statement gets no answer while the table is locked: a frozen MySQL with no
  // --mysql-statement-timeout (0), or one whose timeout is longer than the flush budget.
  const lock = await lockTables(fx.db, [LOG]);
  try {
    const job = new JobTracker(LOG_QUEUE, 2);
    const done = track(job.done);
    await writer.add(rows(2, "unanswered"), job);
    await waitForBlocked(fx.db, "INSERT INTO `statusengine_logentries`%");

    const budget = new AbortController();
    const closed = track(writer.close(budget.signal));
    await turns();
    assert.equal(closed.settled, false, "close returned before its budget ended");
    budget.abort(new DOMException("shutdown budget spent", "TimeoutError"));
    // The lock is still held: the statement has no answer yet.
    await waitFor(() => closed.settled, { message: "close to return once its budget ended" });
    assert.equal(done.settled, false, "a job whose rows got no answer must not be acknowledged");
    assert.equal(job.pending, 2);
    assert.equal((await fx.deadLetters()).length, 0, "unanswered rows are redelivered");
    assert.equal(
      await registryValue(fx.metrics, "statusengine_pipeline_errors_total", {
        component: "mysql",
      }),
      0,
      "a statement given up at shutdown is no rejection",
    );
  } finally {
    await lock.unlock();
  }
});

Deno.test("writer: close keeps its budget while a rejected row cannot be dead-lettered, and its job stays unacknowledged (D7, D1)", async () => {
  await using fx = await setup([LOG]);
  let attempts = 0;
  const unwritable: DeadLetterSink = {
    write() {
      attempts++;
      return Promise.reject(new Error("disk full"));
    },
    close: () => Promise.resolve(),
  };
  const writer = fx.writer(LOG, 100, unwritable);
  const job = new JobTracker(LOG_QUEUE, 2);
  const done = track(job.done);
  await writer.add([logRow("fine"), logRow("rejected", { logentry_type: "x" })], job);
  await waitFor(() => attempts >= 1, { message: "dead-letter write attempted" });

  // As above: the test ends the budget, close() returns once it has ended.
  const budget = new AbortController();
  const closed = track(writer.close(budget.signal));
  await turns();
  assert.equal(closed.settled, false, "close returned before its budget ended");
  budget.abort(new DOMException("shutdown budget spent", "TimeoutError"));
  await waitFor(() => closed.settled, { message: "close to return once its budget ended" });
  await turns();
  assert.equal(
    done.settled,
    false,
    "a job whose row was neither stored nor dead-lettered resolved",
  );
  assert.equal(job.pending, 1, "the good row was committed, the rejected one is unsettled");
  assert.equal(job.deadLettered, 0);
  assert.equal(await fx.count(LOG), 1);
});

Deno.test("writer: a rejected row is logged as written to the dead-letter file only once the file took it, not while its writes fail (D7)", async () => {
  await using fx = await setup([LOG]);
  await withLogs(async (logs) => {
    let attempts = 0;
    let writable = false;
    const sink: DeadLetterSink = {
      write() {
        attempts++;
        return writable ? Promise.resolve() : Promise.reject(new Error("disk full"));
      },
      close: () => Promise.resolve(),
    };
    const writer = fx.writer(LOG, 100, sink);
    const job = new JobTracker(LOG_QUEUE, 1);
    await writer.add([logRow("rejected", { logentry_type: "x" })], job);
    await waitFor(() => attempts >= 1, { message: "dead-letter write attempted" });
    const claims = () => logs.filter((l) => l.message.includes("written to the dead-letter file"));
    assert.equal(
      claims().length,
      0,
      `logged as written while the file refused it: ${JSON.stringify(claims())}`,
    );
    writable = true;
    await job.done;
    assert.equal(job.deadLettered, 1);
    assert.equal(claims().length, 1, "one line once the record is written");
  });
});

// --- withPaused / backpressure ----------------------------------------------

Deno.test("writer: withPaused commits what is buffered before the callback and holds rows added during it until after (docs/payloads.md#core-restart)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  const lock = await lockTables(fx.db, [LOG]);
  const before1 = new JobTracker(LOG_QUEUE, 1);
  const before2 = new JobTracker(LOG_QUEUE, 2);
  const during = new JobTracker(LOG_QUEUE, 2);
  let paused: Promise<void>;
  try {
    await writer.add([logRow("in-flight")], before1);
    await waitForBlocked(fx.db, "INSERT INTO `statusengine_logentries`%");
    await writer.add(rows(2, "buffered"), before2);
    assert.equal(writer.buffered, 2);
    paused = writer.withPaused(async () => {
      assert.equal(await fx.count(LOG), 3, "rows buffered before the pause were committed first");
      assert.equal(before1.pending + before2.pending, 0);
      const sentBefore = fx.executor.calls.length;
      await writer.add(rows(2, "during"), during);
      await turns();
      await fx.count(LOG); // a round trip to MySQL as well
      assert.equal(fx.executor.calls.length, sentBefore, "a statement was sent while paused");
      assert.equal(writer.buffered, 2);
      assert.equal(during.pending, 2);
    });
    await lock.unlock();
    await paused;
  } finally {
    await lock.unlock();
  }
  await during.done;
  assert.equal(await fx.count(LOG), 5);
  assert.deepEqual(fx.executor.rowsPerStatement(LOG), [1, 2, 2]);
});

Deno.test("writer: flush under sustained load commits what was buffered before it and returns (D4)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  // A producer that keeps the buffer full: every time a statement takes rows it refills it.
  let stop = false;
  const jobs: JobTracker[] = [];
  const producer = (async () => {
    let i = 0;
    while (!stop) {
      const job = new JobTracker(LOG_QUEUE, 1);
      jobs.push(job);
      await writer.add([logRow(`load-${i++}`)], job);
    }
  })();
  try {
    await waitFor(() => fx.executor.calls.length >= 3, { message: "writer under load" });
    const target = jobs.slice(); // rows handed over before the pause was requested
    let uncommitted = -1;
    {
      using limit = deadline(5_000);
      await writer.withPaused(() => {
        uncommitted = target.filter((j) => j.pending > 0).length;
        return Promise.resolve();
      }, limit.signal);
    }
    // The newest job may still have been waiting for room (its add() had not returned).
    assert.ok(
      uncommitted >= 0 && uncommitted <= 1,
      `${uncommitted} rows handed over before the pause were uncommitted in the callback`,
    );
  } finally {
    stop = true;
    await producer;
  }
  await Promise.all(jobs.map((j) => j.done));
  assert.equal(await fx.count(LOG), jobs.length);
  assert.ok(fx.executor.rowsPerStatement(LOG).every((n) => n <= 5));
});

Deno.test("writer: add() waits while the buffer is full and resumes once a statement took rows (docs/writers.md#backpressure)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 3);
  const lock = await lockTables(fx.db, [LOG]);
  const jobs = [1, 2, 3].map(() => new JobTracker(LOG_QUEUE, 3));
  const extra = new JobTracker(LOG_QUEUE, 1);
  try {
    await writer.add(rows(3, "j1"), jobs[0] as JobTracker); // in flight
    await waitForBlocked(fx.db, "INSERT INTO `statusengine_logentries`%");
    await writer.add(rows(3, "j2"), jobs[1] as JobTracker); // fills the buffer
    let statementsWhenResumed = -1;
    const waiting = writer.add([logRow("j3")], extra).then(() => {
      statementsWhenResumed = fx.executor.calls.length;
    });
    const waitingState = track(waiting);
    await turns();
    assert.equal(waitingState.settled, false, "add() returned although the buffer was full");
    assert.equal(writer.buffered, 3, "the buffer never holds more than one batch");
    await lock.unlock();
    await waiting;
    assert.equal(statementsWhenResumed, 2, "add() resumed when the second statement took rows");
    assert.ok(writer.buffered <= 3);
    await Promise.all([jobs[0]?.done, jobs[1]?.done, extra.done]);
  } finally {
    await lock.unlock();
  }
  assert.equal(await fx.count(LOG), 7);
});

// --- written metrics (docs/writers.md#written-metrics) -----------------------

Deno.test("writer: db_events_written_total and db_flushes_total count only successful statements; their ratio is the average batch size (docs/writers.md#written-metrics)", async () => {
  await using fx = await setup([LOG]);
  const writer = fx.writer(LOG, 5);
  const labels = { table: LOG };
  const written = () => registryValue(fx.metrics, "statusengine_db_events_written_total", labels);
  const flushes = () => registryValue(fx.metrics, "statusengine_db_flushes_total", labels);

  const full = new JobTracker(LOG_QUEUE, 20);
  await writer.add(rows(20, "full"), full);
  await full.done;
  assert.equal(await written(), 20);
  assert.equal(await flushes(), 4);
  assert.equal((await written()) / (await flushes()), 5);

  // A lock failure then success: one flush, not two.
  fx.executor.inject = (n) => (n === 5 ? lockError(1213) : undefined);
  const retried = new JobTracker(LOG_QUEUE, 3);
  await writer.add(rows(3, "retried"), retried);
  await retried.done;
  assert.equal(await written(), 23);
  assert.equal(await flushes(), 5);

  // A rejected row: the failed statements count nowhere, the committed halves do.
  const mixed = new JobTracker(LOG_QUEUE, 2);
  await writer.add([logRow("ok"), logRow("bad", { logentry_type: "x" })], mixed);
  await mixed.done;
  assert.equal(await written(), 24);
  assert.equal(await flushes(), 6);

  const ok = fx.executor.calls.filter((c) => c.ok === true);
  assert.equal(ok.length, await flushes());
  const average = ok.reduce((n, c) => n + c.rows, 0) / ok.length;
  assert.equal((await written()) / (await flushes()), average);
});
