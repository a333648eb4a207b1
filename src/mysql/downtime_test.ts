/**
 * Downtime statements (C.3) rendered to SQL, and the
 * DowntimeExecutor against a real MariaDB: CLIENT_FOUND_ROWS (D10, C.5.4),
 * the unmatched-update counter, and D7 dead-lettering of a rejected statement.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase, type ScratchDatabase } from "../../tests/helpers/mysql.ts";
import { buildDowntimeStatement, DowntimeExecutor } from "./downtime.ts";
import { TABLES } from "./catalogue.ts";
import { createTableStatement } from "./ddl.ts";
import { poolExecutor } from "./executor.ts";
import { DbAvailability } from "./availability.ts";
import { mysqlOptionsFromUrl } from "./url.ts";
import { createMetrics, type Metrics } from "../metrics/registry.ts";
import { DeadLetterFile, DeadLetters } from "../pipeline/dead_letter.ts";
import { type DowntimeEvent, downtimeStatements } from "../events/downtime.ts";
import type { DowntimeStatement } from "../events/types.ts";
import { deadline } from "../util/async.ts";

const QUEUE = "statusngin_downtimes";
const DOWNTIME_TABLES = [
  "statusengine_host_downtimehistory",
  "statusengine_host_scheduleddowntimes",
  "statusengine_service_downtimehistory",
  "statusengine_service_scheduleddowntimes",
] as const;

function event(overrides: Partial<DowntimeEvent> = {}): DowntimeEvent {
  return {
    type: 1100,
    attr: 0,
    timestamp: 1_700_000_100,
    timestampUsec: 424242,
    downtimeType: 2,
    hostName: "web01",
    serviceDescription: "",
    downtimeId: 7,
    startTime: 1_700_000_200,
    endTime: 1_700_003_800,
    entryTime: 1_700_000_099,
    authorName: "admin",
    commentData: "maintenance",
    triggeredBy: 0,
    fixed: 1,
    duration: 3600,
    ...overrides,
  };
}

function q(names: string): string {
  return names.split(" ").map((n) => `\`${n}\``).join(", ");
}

Deno.test("buildDowntimeStatement: exact SQL text and argument order of the upsert, update and delete (C.3)", () => {
  // ADD of a service downtime: history upsert, then scheduled upsert; ON DUPLICATE KEY
  // UPDATE lists only the static columns (C.4.2).
  const add = downtimeStatements(
    event({ downtimeType: 1, hostName: "db01", serviceDescription: "MySQL" }),
    "N",
  ).map(buildDowntimeStatement);
  assert.equal(add.length, 2);
  const historyColumns =
    "hostname service_description internal_downtime_id scheduled_start_time node_name " +
    "entry_time entry_time_usec author_name comment_data triggered_by_id is_fixed duration " +
    "scheduled_end_time was_started actual_start_time actual_end_time was_cancelled";
  const staticUpdate = (withUsec: boolean) =>
    [
      "entry_time",
      ...(withUsec ? ["entry_time_usec"] : []),
      "author_name",
      "comment_data",
      "triggered_by_id",
      "is_fixed",
      "duration",
      "scheduled_end_time",
    ].map((c) => `\`${c}\` = VALUES(\`${c}\`)`).join(", ");
  assert.equal(
    add[0]?.sql,
    `INSERT INTO \`statusengine_service_downtimehistory\` (${q(historyColumns)}) VALUES (${
      Array(17).fill("?").join(", ")
    }) ON DUPLICATE KEY UPDATE ${staticUpdate(true)}`,
  );
  assert.deepEqual(add[0]?.values, [
    "db01",
    "MySQL",
    7,
    1_700_000_200,
    "N",
    1_700_000_099,
    424242,
    "admin",
    "maintenance",
    0,
    1,
    3600,
    1_700_003_800,
    0,
    0,
    0,
    0,
  ]);
  const scheduledColumns =
    "hostname service_description internal_downtime_id scheduled_start_time node_name " +
    "entry_time author_name comment_data triggered_by_id is_fixed duration scheduled_end_time " +
    "was_started actual_start_time";
  assert.equal(
    add[1]?.sql,
    `INSERT INTO \`statusengine_service_scheduleddowntimes\` (${q(scheduledColumns)}) VALUES (${
      Array(14).fill("?").join(", ")
    }) ON DUPLICATE KEY UPDATE ${staticUpdate(false)}`,
  );
  assert.deepEqual(add[1]?.values, [
    "db01",
    "MySQL",
    7,
    1_700_000_200,
    "N",
    1_700_000_099,
    "admin",
    "maintenance",
    0,
    1,
    3600,
    1_700_003_800,
    0,
    0,
  ]);

  // START of a host downtime: SET values first, then the primary key in key order.
  const [startUpdate, startUpsert] = downtimeStatements(
    event({ type: 1103, timestamp: 1_700_000_205 }),
    "N",
  ).map(buildDowntimeStatement);
  assert.equal(
    startUpdate?.sql,
    "UPDATE `statusengine_host_downtimehistory` SET `was_started` = ?, " +
      "`actual_start_time` = IF(`actual_start_time` = 0, ?, `actual_start_time`) " +
      "WHERE `hostname` = ? AND `node_name` = ? AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?",
  );
  assert.deepEqual(startUpdate?.values, [1, 1_700_000_205, "web01", "N", 1_700_000_200, 7]);
  assert.match(startUpsert?.sql ?? "", /^INSERT INTO `statusengine_host_scheduleddowntimes` /);
  assert.match(
    startUpsert?.sql ?? "",
    /, `was_started` = VALUES\(`was_started`\), `actual_start_time` = IF\(`actual_start_time` = 0, VALUES\(`actual_start_time`\), `actual_start_time`\)$/,
  );
  assert.deepEqual(startUpsert?.values.slice(-2), [1, 1_700_000_205]);

  // Cancelled STOP of a service downtime: history update, then scheduled delete.
  const [stopUpdate, stopDelete] = downtimeStatements(
    event({
      type: 1104,
      attr: 2,
      timestamp: 1_700_000_900,
      downtimeType: 1,
      hostName: "db01",
      serviceDescription: "MySQL",
    }),
    "N",
  ).map(buildDowntimeStatement);
  const serviceKey = "WHERE `hostname` = ? AND `service_description` = ? AND `node_name` = ? " +
    "AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?";
  assert.equal(
    stopUpdate?.sql,
    `UPDATE \`statusengine_service_downtimehistory\` SET \`actual_end_time\` = ?, \`was_cancelled\` = ? ${serviceKey}`,
  );
  assert.deepEqual(stopUpdate?.values, [1_700_000_900, 1, "db01", "MySQL", "N", 1_700_000_200, 7]);
  assert.equal(
    stopDelete?.sql,
    `DELETE FROM \`statusengine_service_scheduleddowntimes\` ${serviceKey}`,
  );
  assert.deepEqual(stopDelete?.values, ["db01", "MySQL", "N", 1_700_000_200, 7]);

  // DELETE before the window began: scheduled first, then history.
  const purge = downtimeStatements(event({ type: 1101, timestamp: 1_700_000_150 }), "N")
    .map(buildDowntimeStatement);
  const hostKey =
    "WHERE `hostname` = ? AND `node_name` = ? AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?";
  assert.deepEqual(purge.map((s) => s.sql), [
    `DELETE FROM \`statusengine_host_scheduleddowntimes\` ${hostKey}`,
    `DELETE FROM \`statusengine_host_downtimehistory\` ${hostKey}`,
  ]);
  assert.deepEqual(purge[1]?.values, ["web01", "N", 1_700_000_200, 7]);
});

Deno.test("buildDowntimeStatement: key values are fitted to their columns like the upsert's, so START finds the row ADD wrote (D6)", () => {
  const long = "h".repeat(300);
  const [add] = downtimeStatements(event({ hostName: long }), "N").map(buildDowntimeStatement);
  const [update] = downtimeStatements(event({ type: 1103, hostName: long }), "N")
    .map(buildDowntimeStatement);
  assert.equal(add?.values[0], "h".repeat(255));
  assert.equal(update?.values[2], "h".repeat(255));
});

interface Fixture extends AsyncDisposable {
  readonly db: ScratchDatabase;
  readonly pool: mysql.Pool;
  readonly metrics: Metrics;
  readonly executor: DowntimeExecutor;
  readonly deadLetterPath: string;
  run(statements: readonly DowntimeStatement[]): Promise<void>;
  unmatched(): Promise<number>;
}

/** The four downtime tables, a pool built the way startWorker builds it, and an executor. */
async function setup(): Promise<Fixture> {
  const db = await createScratchDatabase();
  const cleanups: (() => Promise<void>)[] = [() => db.drop()];
  const undo = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    for (const t of DOWNTIME_TABLES) {
      await db.query(createTableStatement(TABLES[t], { collation: "utf8mb4_general_ci" }));
    }
    // Same options as src/daemon/database.ts: whatever flags mysql2 sets by default are the ones under test.
    const pool = mysql.createPool({ ...mysqlOptionsFromUrl(db.url), connectionLimit: 2 });
    cleanups.push(() => pool.end());
    const deadLetterPath = await Deno.makeTempFile({ suffix: ".ndjson" });
    cleanups.push(() => Deno.remove(deadLetterPath));
    const metrics = createMetrics();
    // The worker's one path for dead letters: it counts what it wrote.
    const deadLetters = new DeadLetters(new DeadLetterFile(deadLetterPath), metrics);
    cleanups.push(() => deadLetters.close());
    const executor = new DowntimeExecutor({
      executor: poolExecutor(pool),
      availability: new DbAvailability(metrics.dbAvailable),
      deadLetters,
      metrics,
    });
    return {
      db,
      pool,
      metrics,
      executor,
      deadLetterPath,
      async run(statements) {
        using limit = deadline(5_000);
        await executor.run(QUEUE, statements, limit.signal);
      },
      async unmatched() {
        return (await metrics.queueDowntimeUpdatesUnmatched.get()).values[0]?.value ?? 0;
      },
      [Symbol.asyncDispose]: undo,
    };
  } catch (err: unknown) {
    await undo();
    throw err;
  }
}

type DbRow = Record<string, unknown>;

// D10 asks for this check: the unmatched counter is only trustworthy if an
// UPDATE that rewrites identical values (a redelivered START) reports the row
// as matched. Without CLIENT_FOUND_ROWS it reports 0 and every redelivery
// would be counted as a lost ADD.
Deno.test("downtimes: CLIENT_FOUND_ROWS makes a repeated UPDATE report 1, so a redelivered START is not unmatched but a START without its ADD is (D10, C.5)", async () => {
  await using fx = await setup();
  const add = event();
  const start = event({ type: 1103, timestamp: 1_700_000_205 });
  await fx.run(downtimeStatements(add, "N"));
  await fx.run(downtimeStatements(start, "N"));
  await fx.run(downtimeStatements(start, "N")); // redelivered: identical values again
  assert.equal(await fx.unmatched(), 0, "a redelivered START was counted as unmatched");

  // The driver-level fact behind it, on the worker's pool options...
  const [update] = downtimeStatements(start, "N").map(buildDowntimeStatement);
  assert.ok(update !== undefined);
  const again = await poolExecutor(fx.pool).run(update.sql, update.values);
  assert.equal(again.affectedRows, 1, "mysql2 reports matched rows (CLIENT_FOUND_ROWS)");
  // ...and what the same statement reports without the flag (the Go driver's default).
  const plain = await mysql.createConnection({
    ...mysqlOptionsFromUrl(fx.db.url),
    flags: ["-FOUND_ROWS"],
  });
  try {
    const [header] = await plain.query(update.sql, update.values);
    assert.equal((header as { affectedRows: number }).affectedRows, 0);
  } finally {
    await plain.end();
  }

  // A START whose ADD never arrived: counted once; its scheduled upsert still runs (C.3).
  const orphan = event({ type: 1103, downtimeId: 8, hostName: "web02", timestamp: 1_700_000_210 });
  await fx.run(downtimeStatements(orphan, "N"));
  assert.equal(await fx.unmatched(), 1);
  const orphanHistory = await fx.db.query<DbRow[]>(
    "SELECT 1 FROM statusengine_host_downtimehistory WHERE hostname = 'web02'",
  );
  assert.equal(orphanHistory.length, 0);
  const orphanScheduled = await fx.db.query<DbRow[]>(
    "SELECT was_started, actual_start_time FROM statusengine_host_scheduleddowntimes WHERE hostname = 'web02'",
  );
  assert.deepEqual(
    orphanScheduled.map((r) => [r["was_started"], Number(r["actual_start_time"])]),
    [[1, 1_700_000_210]],
  );

  const [history] = await fx.db.query<DbRow[]>(
    "SELECT was_started, actual_start_time FROM statusengine_host_downtimehistory WHERE hostname = 'web01'",
  );
  assert.equal(history?.["was_started"], 1);
  assert.equal(Number(history?.["actual_start_time"]), 1_700_000_205);
  // Every successful statement counts once for its table, including the repeat.
  assert.equal(
    (await fx.metrics.dbEventsWritten.get()).values.find((v) =>
      v.labels.table === "statusengine_host_downtimehistory"
    )?.value,
    4, // ADD upsert, START, START again, the orphan START (which matched nothing)
  );
});

// After RESTART_PROGRAM the core re-announces a running downtime as LOAD, then START with the
// restart time. Without the set-once rule the START overwrote actual_start_time in both tables
// (seen on 9 downtimes of a real installation).
Deno.test("downtimes: a START re-announced after a core restart keeps the recorded actual_start_time", async () => {
  await using fx = await setup();
  for (const downtimeType of [2, 1]) {
    const base = { downtimeType, serviceDescription: downtimeType === 1 ? "HTTP" : "" };
    await fx.run(downtimeStatements(event(base), "N"));
    await fx.run(downtimeStatements(event({ ...base, type: 1103, timestamp: 1_700_000_205 }), "N"));
    await fx.run(downtimeStatements(event({ ...base, type: 1102, timestamp: 1_700_002_000 }), "N"));
    await fx.run(downtimeStatements(event({ ...base, type: 1103, timestamp: 1_700_002_000 }), "N"));
    const kind = downtimeType === 2 ? "host" : "service";
    for (const table of [`${kind}_downtimehistory`, `${kind}_scheduleddowntimes`]) {
      const rows = await fx.db.query<DbRow[]>(
        `SELECT was_started, actual_start_time FROM statusengine_${table}`,
      );
      assert.deepEqual(
        rows.map((r) => [r["was_started"], Number(r["actual_start_time"])]),
        [[1, 1_700_000_205]],
        table,
      );
    }
  }
  // The re-announced START matched its row: not an unmatched update.
  assert.equal(await fx.unmatched(), 0);
  // A START whose row has no start yet (the normal case) still records it.
  await fx.run(downtimeStatements(event({ downtimeId: 9 }), "N"));
  await fx.run(
    downtimeStatements(event({ downtimeId: 9, type: 1103, timestamp: 1_700_000_300 }), "N"),
  );
  const [fresh] = await fx.db.query<DbRow[]>(
    "SELECT actual_start_time FROM statusengine_host_downtimehistory WHERE internal_downtime_id = 9",
  );
  assert.equal(Number(fresh?.["actual_start_time"]), 1_700_000_300);
});

Deno.test("downtimes: a statement MySQL rejects is dead-lettered and the executor goes on with the next (D7)", async () => {
  await using fx = await setup();
  const first = downtimeStatements(event(), "N");
  const [startUpdate] = downtimeStatements(event({ type: 1103 }), "N");
  assert.ok(startUpdate?.kind === "update");
  // Strict mode rejects a string in a bigint column (1366): deterministic, never retried.
  const rejected: DowntimeStatement = {
    ...startUpdate,
    set: { was_started: 1, actual_start_time: "soon" },
  };
  const second = downtimeStatements(event({ downtimeId: 9, hostName: "web09" }), "N");
  await fx.run([...first, rejected, ...second]);

  const history = await fx.db.query<DbRow[]>(
    "SELECT hostname, was_started, actual_start_time FROM statusengine_host_downtimehistory ORDER BY hostname",
  );
  assert.deepEqual(
    history.map((r) => [r["hostname"], r["was_started"], Number(r["actual_start_time"])]),
    [["web01", 0, 0], ["web09", 0, 0]],
    "the statements before and after the rejected one ran; the rejected one changed nothing",
  );
  const scheduled = await fx.db.query<DbRow[]>(
    "SELECT hostname FROM statusengine_host_scheduleddowntimes ORDER BY hostname",
  );
  assert.deepEqual(scheduled.map((r) => r["hostname"]), ["web01", "web09"]);

  const letters = (await Deno.readTextFile(fx.deadLetterPath)).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
  assert.equal(letters.length, 1);
  assert.equal(letters[0].queue, QUEUE);
  assert.equal(letters[0].reason, "sql_rejected");
  assert.equal(letters[0].table, "statusengine_host_downtimehistory");
  assert.equal(letters[0].row.actual_start_time, "soon");
  assert.equal(letters[0].row.hostname, "web01");
  assert.match(letters[0].error, /1366/);
  const errors = await fx.metrics.pipelineErrors.get();
  assert.equal(errors.values.find((v) => v.labels.component === "mysql")?.value, 1);
  const dead = await fx.metrics.deadLetters.get();
  assert.equal(
    dead.values.find((v) => v.labels.queue_name === QUEUE && v.labels.reason === "sql_rejected")
      ?.value,
    1,
  );
  assert.equal(await fx.unmatched(), 0, "a rejected UPDATE is not an unmatched one");
});
