/**
 * Downtime statements (docs/downtimes.md) rendered to SQL, and the
 * DowntimeExecutor against a real MariaDB: CLIENT_FOUND_ROWS (D10),
 * the unmatched counter, and D7 dead-lettering of a rejected statement.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase, type ScratchDatabase } from "../helpers/mysql.ts";
import { buildDowntimeStatement, DowntimeExecutor } from "../../src/mysql/downtime.ts";
import { TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { DeadLetterFile, DeadLetters } from "../../src/pipeline/dead_letter.ts";
import { type DowntimeEvent, downtimeStatements } from "../../src/events/downtime.ts";
import type { DowntimeStatement } from "../../src/events/types.ts";
import { deadline } from "../../src/util/async.ts";
import { track, waitFor } from "../helpers/wait.ts";
import { withLogs } from "../helpers/logs.ts";

const QUEUE = "statusngin_downtimes";
const DOWNTIME_TABLES = [
  "statusengine_downtime_announcements",
  "statusengine_downtime_tombstones",
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

Deno.test("buildDowntimeStatement: exact SQL text and argument order of the upserts, tombstone and deletes", () => {
  // ADD of a service downtime: history upsert, announcement, then the scheduled row copied from
  // the history row; each guarded by the downtime's tombstone; the history's ON DUPLICATE KEY
  // UPDATE merges only the definition (docs/tables.md#downtime-add-static-columns).
  const add = downtimeStatements(
    event({ downtimeType: 1, hostName: "db01", serviceDescription: "MySQL" }),
    "N",
  ).map(buildDowntimeStatement);
  assert.equal(add.length, 3);
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
  const guard = (removed: boolean) =>
    "WHERE NOT EXISTS (SELECT 1 FROM `statusengine_downtime_tombstones` WHERE `hostname` = ? " +
    "AND `service_description` = ? AND `node_name` = ? AND `scheduled_start_time` = ? " +
    `AND \`internal_downtime_id\` = ?${removed ? " AND `history_removed` = 1" : ""})`;
  const tombstoneKey = ["db01", "MySQL", "N", 1_700_000_200, 7];
  assert.equal(
    add[0]?.sql,
    `INSERT INTO \`statusengine_service_downtimehistory\` (${q(historyColumns)}) SELECT ${
      Array(17).fill("?").join(", ")
    } FROM DUAL ${guard(true)} ON DUPLICATE KEY UPDATE ${staticUpdate(true)}`,
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
    ...tombstoneKey,
  ]);
  assert.equal(
    add[1]?.sql,
    "INSERT INTO `statusengine_downtime_announcements` (`hostname`, `service_description`, " +
      "`node_name`, `scheduled_start_time`, `internal_downtime_id`, `announced_at`) SELECT ?, ?, " +
      `?, ?, ?, ? FROM DUAL ${guard(false)} ON DUPLICATE KEY UPDATE \`announced_at\` = ` +
      "GREATEST(`announced_at`, VALUES(`announced_at`))",
  );
  assert.deepEqual(add[1]?.values, [...tombstoneKey, 1_700_000_100, ...tombstoneKey]);
  const scheduledColumns = [
    "hostname",
    "service_description",
    "internal_downtime_id",
    "scheduled_start_time",
    "node_name",
    "entry_time",
    "author_name",
    "comment_data",
    "triggered_by_id",
    "is_fixed",
    "duration",
    "scheduled_end_time",
    "was_started",
    "actual_start_time",
  ];
  const serviceKeyColumns = "`hostname` = ? AND `service_description` = ? AND `node_name` = ? " +
    "AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?";
  assert.equal(
    add[2]?.sql,
    `INSERT INTO \`statusengine_service_scheduleddowntimes\` (${
      scheduledColumns.map((c) => `\`${c}\``).join(", ")
    }) SELECT ${scheduledColumns.map((c) => `h.\`${c}\``).join(", ")} FROM ` +
      `\`statusengine_service_downtimehistory\` h WHERE ${serviceKeyColumns} AND NOT EXISTS ` +
      `(SELECT 1 FROM \`statusengine_downtime_tombstones\` WHERE ${serviceKeyColumns}) ` +
      `ON DUPLICATE KEY UPDATE ${
        scheduledColumns.slice(5).map((c) =>
          `\`statusengine_service_scheduleddowntimes\`.\`${c}\` = VALUES(\`${c}\`)`
        ).join(", ")
      }`,
  );
  assert.deepEqual(add[2]?.values, [
    "db01",
    "MySQL",
    "N",
    1_700_000_200,
    7,
    ...tombstoneKey,
  ]);

  // START of a host downtime: started for good, the earliest start wins; a host downtime's
  // tombstone has '' as its service.
  const [startHistory, , startScheduled] = downtimeStatements(
    event({ type: 1103, timestamp: 1_700_000_205 }),
    "N",
  ).map(buildDowntimeStatement);
  const startMerge = "ON DUPLICATE KEY UPDATE `was_started` = GREATEST(`was_started`, " +
    "VALUES(`was_started`)), `actual_start_time` = IF(VALUES(`actual_start_time`) <> 0 AND " +
    "(`actual_start_time` = 0 OR VALUES(`actual_start_time`) < `actual_start_time`), " +
    "VALUES(`actual_start_time`), `actual_start_time`)";
  assert.match(startHistory?.sql ?? "", /^INSERT INTO `statusengine_host_downtimehistory` /);
  assert.ok(startHistory?.sql.endsWith(startMerge), startHistory?.sql);
  assert.deepEqual(startHistory?.values.slice(-9), [
    1,
    1_700_000_205,
    0,
    0,
    "web01",
    "",
    "N",
    1_700_000_200,
    7,
  ]);
  assert.match(
    startScheduled?.sql ?? "",
    /^INSERT INTO `statusengine_host_scheduleddowntimes` .* FROM `statusengine_host_downtimehistory` h /,
  );

  // Cancelled STOP of a service downtime: history upsert, tombstone, scheduled delete.
  const [stopHistory, stopTombstone, stopDelete] = downtimeStatements(
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
  assert.ok(
    stopHistory?.sql.endsWith(
      "ON DUPLICATE KEY UPDATE `was_cancelled` = IF(VALUES(`actual_end_time`) > " +
        "`actual_end_time`, VALUES(`was_cancelled`), IF(VALUES(`actual_end_time`) = " +
        "`actual_end_time`, GREATEST(`was_cancelled`, VALUES(`was_cancelled`)), " +
        "`was_cancelled`)), `actual_end_time` = GREATEST(`actual_end_time`, " +
        "VALUES(`actual_end_time`))",
    ),
    stopHistory?.sql,
  );
  assert.equal(
    stopTombstone?.sql,
    "INSERT INTO `statusengine_downtime_tombstones` (`hostname`, `service_description`, " +
      "`node_name`, `scheduled_start_time`, `internal_downtime_id`, `history_removed`, " +
      "`end_time`) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE `history_removed` = " +
      "GREATEST(`history_removed`, VALUES(`history_removed`)), `end_time` = " +
      "GREATEST(`end_time`, VALUES(`end_time`))",
  );
  assert.deepEqual(stopTombstone?.values, [...tombstoneKey, 0, 1_700_000_900]);
  const serviceKey = "WHERE `hostname` = ? AND `service_description` = ? AND `node_name` = ? " +
    "AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?";
  assert.equal(
    stopDelete?.sql,
    `DELETE FROM \`statusengine_service_scheduleddowntimes\` ${serviceKey}`,
  );
  assert.deepEqual(stopDelete?.values, ["db01", "MySQL", "N", 1_700_000_200, 7]);

  // DELETE before the window began: tombstone, scheduled, then history.
  const purge = downtimeStatements(event({ type: 1101, timestamp: 1_700_000_150 }), "N")
    .map(buildDowntimeStatement);
  const hostKey =
    "WHERE `hostname` = ? AND `node_name` = ? AND `scheduled_start_time` = ? AND `internal_downtime_id` = ?";
  assert.deepEqual(purge.slice(1).map((s) => s.sql), [
    `DELETE FROM \`statusengine_host_scheduleddowntimes\` ${hostKey}`,
    `DELETE FROM \`statusengine_host_downtimehistory\` ${hostKey}`,
  ]);
  assert.deepEqual(purge[0]?.values, ["web01", "", "N", 1_700_000_200, 7, 1, 1_700_000_150]);
  assert.deepEqual(purge[2]?.values, ["web01", "N", 1_700_000_200, 7]);

  // LOAD (and DELETE after the window began) only create the history row: it stays as it is.
  const [load] = downtimeStatements(event({ type: 1102 }), "N").map(buildDowntimeStatement);
  assert.ok(load?.sql.endsWith("ON DUPLICATE KEY UPDATE `hostname` = `hostname`"), load?.sql);
});

Deno.test("buildDowntimeStatement: key values are fitted to their columns like the upsert's, so START finds the row ADD wrote (D6)", () => {
  const long = "h".repeat(300);
  const [add] = downtimeStatements(event({ hostName: long }), "N").map(buildDowntimeStatement);
  const [stop, tombstone, del] = downtimeStatements(event({ type: 1104, hostName: long }), "N")
    .map(buildDowntimeStatement);
  assert.equal(add?.values[0], "h".repeat(255));
  // The guard's key too, or a long host name would never find its tombstone.
  assert.equal(add?.values[16], "h".repeat(255));
  assert.equal(stop?.values[0], "h".repeat(255));
  assert.equal(tombstone?.values[0], "h".repeat(255));
  assert.equal(del?.values[0], "h".repeat(255));
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

/** The four downtime tables and the worker's two, a pool built the way startWorker builds it, and an executor. */
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

// D10 asks for this check: the unmatched counter is only trustworthy if an upsert that finds
// its row unchanged (a redelivered START) reports the row. Without CLIENT_FOUND_ROWS it
// reports 0 and every redelivery would be counted as a lost event.
Deno.test("downtimes: CLIENT_FOUND_ROWS makes a repeated START report 1; a START without its ADD creates the history row; only a START of a downtime deleted before its window is lost (D10)", async () => {
  await using fx = await setup();
  const add = event();
  const start = event({ type: 1103, timestamp: 1_700_000_205 });
  await fx.run(downtimeStatements(add, "N"));
  await fx.run(downtimeStatements(start, "N"));
  await fx.run(downtimeStatements(start, "N")); // redelivered: identical values again
  assert.equal(await fx.unmatched(), 0, "a redelivered START was counted as unmatched");

  // The driver-level fact behind it, on the worker's pool options...
  const [upsert] = downtimeStatements(start, "N").map(buildDowntimeStatement);
  assert.ok(upsert !== undefined);
  const again = await poolExecutor(fx.pool).run(upsert.sql, upsert.values);
  assert.equal(again.affectedRows, 1, "mysql2 reports found rows (CLIENT_FOUND_ROWS)");
  // ...and what the same statement reports without the flag (the Go driver's default).
  const plain = await mysql.createConnection({
    ...mysqlOptionsFromUrl(fx.db.url),
    flags: ["-FOUND_ROWS"],
  });
  try {
    const [header] = await plain.query(upsert.sql, upsert.values);
    assert.equal((header as { affectedRows: number }).affectedRows, 0);
  } finally {
    await plain.end();
  }

  // A START whose ADD has not arrived (the issue: gearmand put the ADD back behind it): the
  // START creates the history row from its definition, and is not lost.
  const orphan = event({ type: 1103, downtimeId: 8, hostName: "web02", timestamp: 1_700_000_210 });
  await fx.run(downtimeStatements(orphan, "N"));
  assert.equal(await fx.unmatched(), 0);
  for (const table of ["downtimehistory", "scheduleddowntimes"]) {
    const rows = await fx.db.query<DbRow[]>(
      `SELECT was_started, actual_start_time FROM statusengine_host_${table} WHERE hostname = 'web02'`,
    );
    assert.deepEqual(
      rows.map((r) => [r["was_started"], Number(r["actual_start_time"])]),
      [[1, 1_700_000_210]],
      table,
    );
  }
  // Its ADD, late: keeps the start, adds its entry_time_usec.
  await fx.run(downtimeStatements(event({ downtimeId: 8, hostName: "web02" }), "N"));
  const [late] = await fx.db.query<DbRow[]>(
    "SELECT was_started, actual_start_time, entry_time_usec FROM statusengine_host_downtimehistory WHERE hostname = 'web02'",
  );
  assert.deepEqual(
    [late?.["was_started"], Number(late?.["actual_start_time"]), late?.["entry_time_usec"]],
    [1, 1_700_000_210, 424242],
  );

  // A START of a downtime whose DELETE before its window was applied first cannot be recorded:
  // that is the one event the counter still reports.
  const gone = { downtimeId: 9, hostName: "web03" };
  await fx.run(downtimeStatements(event({ ...gone, type: 1101, timestamp: 1_700_000_150 }), "N"));
  await fx.run(downtimeStatements(event({ ...gone, type: 1103, timestamp: 1_700_000_210 }), "N"));
  assert.equal(await fx.unmatched(), 1);
  for (const table of ["downtimehistory", "scheduleddowntimes"]) {
    const rows = await fx.db.query<DbRow[]>(
      `SELECT 1 FROM statusengine_host_${table} WHERE hostname = 'web03'`,
    );
    assert.equal(rows.length, 0, table);
  }

  const [history] = await fx.db.query<DbRow[]>(
    "SELECT was_started, actual_start_time FROM statusengine_host_downtimehistory WHERE hostname = 'web01'",
  );
  assert.equal(history?.["was_started"], 1);
  assert.equal(Number(history?.["actual_start_time"]), 1_700_000_205);
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

Deno.test("downtimes: an id outside its column's range is clamped in every key as in the row, so the scheduled row appears and its STOP removes it (D6)", async () => {
  await using fx = await setup();
  // int(10) unsigned: above 2^32 - 1 and below 0 both clamp (docs/tables.md#long-values).
  for (const downtimeId of [2 ** 32, -1]) {
    await fx.run(downtimeStatements(event({ downtimeId }), "N"));
    const scheduled = () =>
      fx.db.query<DbRow[]>("SELECT internal_downtime_id FROM statusengine_host_scheduleddowntimes");
    assert.equal((await scheduled()).length, 1, `ADD of id ${downtimeId}: no scheduled row`);
    await fx.run(
      downtimeStatements(event({ downtimeId, type: 1104, timestamp: 1_700_003_800 }), "N"),
    );
    assert.deepEqual(await scheduled(), [], `STOP of id ${downtimeId} left the scheduled row`);
    await fx.db.query("DELETE FROM statusengine_downtime_tombstones");
    await fx.db.query("DELETE FROM statusengine_host_downtimehistory");
  }
});

Deno.test("downtimes: a value cut to fit its column is counted in statusengine_db_values_adjusted_total, like the writers' (D6)", async () => {
  await using fx = await setup();
  await fx.run(downtimeStatements(event({ commentData: "c".repeat(2000) }), "N"));
  const [row] = await fx.db.query<DbRow[]>(
    "SELECT CHAR_LENGTH(comment_data) AS n FROM statusengine_host_scheduleddowntimes",
  );
  assert.equal(Number(row?.["n"]), 1024);
  const adjusted = (await fx.metrics.dbValuesAdjusted.get()).values
    .filter((v) => v.value > 0)
    .map((v) => [v.labels["table"], v.labels["reason"], v.value]);
  assert.deepEqual(adjusted, [["statusengine_host_downtimehistory", "truncated", 1]]);
});

Deno.test("downtimes: a statement MySQL rejects is dead-lettered and the executor goes on with the next (D7)", async () => {
  await using fx = await setup();
  const first = downtimeStatements(event(), "N");
  const [startUpsert] = downtimeStatements(event({ type: 1103 }), "N");
  assert.ok(startUpsert?.kind === "upsert");
  // Strict mode rejects a string in a bigint column (1366): deterministic, never retried.
  const rejected: DowntimeStatement = {
    ...startUpsert,
    row: { ...startUpsert.row, actual_start_time: "soon" },
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
  assert.equal(await fx.unmatched(), 0, "a rejected upsert is not an unmatched one");
});

Deno.test("downtimes: a rejected statement whose dead-letter record cannot be written is not logged as written; the job fails and is tried again (D7)", async () => {
  await using fx = await setup();
  const [startUpsert] = downtimeStatements(event({ type: 1103 }), "N");
  assert.ok(startUpsert?.kind === "upsert");
  const rejected: DowntimeStatement = {
    ...startUpsert,
    row: { ...startUpsert.row, actual_start_time: "soon" },
  };
  const executor = new DowntimeExecutor({
    executor: poolExecutor(fx.pool),
    availability: new DbAvailability(fx.metrics.dbAvailable),
    deadLetters: {
      write: () => Promise.reject(new Error("disk full")),
      close: () => Promise.resolve(),
    },
  });
  await withLogs(async (logs) => {
    using limit = deadline(5_000);
    await assert.rejects(executor.run(QUEUE, [rejected], limit.signal), /disk full/);
    const claims = logs.filter((l) => l.message.includes("written to the dead-letter file"));
    assert.equal(
      claims.length,
      0,
      `logged as written while the file refused it: ${JSON.stringify(claims)}`,
    );
  });
});

Deno.test("downtimes: a statement MySQL refuses whatever its values (1054 after a column rename) is held until MySQL takes it, never dead-lettered (D7)", async () => {
  await using fx = await setup();
  await fx.db.query(
    "ALTER TABLE statusengine_host_downtimehistory RENAME COLUMN author_name TO author_moved",
  );
  const statements = downtimeStatements(event(), "N");
  const stop = new AbortController();
  const running = fx.executor.run(QUEUE, statements, stop.signal);
  const done = track(running);
  const available = async () => (await fx.metrics.dbAvailable.get()).values[0]?.value;
  try {
    await waitFor(async () => done.settled || (await available()) === 0, {
      message: "the statement held, or the job settled",
    });
    const letters = (await Deno.readTextFile(fx.deadLetterPath)).trim();
    assert.equal(letters, "", "a downtime statement dead-lettered for a renamed column");
    assert.equal(done.settled, false);
    await fx.db.query(
      "ALTER TABLE statusengine_host_downtimehistory RENAME COLUMN author_moved TO author_name",
    );
    await running;
  } finally {
    stop.abort();
    await running.catch(() => {});
  }
  const history = await fx.db.query<DbRow[]>(
    "SELECT hostname, author_name FROM statusengine_host_downtimehistory",
  );
  assert.deepEqual(history.map((r) => [r["hostname"], r["author_name"]]), [["web01", "admin"]]);
  assert.equal(await available(), 1);
});
