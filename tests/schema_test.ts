/**
 * Schema, value adjustment and statement texts against the real MariaDB/MySQL server
 * (tests/helpers/mysql.ts). Every test has its own scratch database; a test that cannot
 * reach the server fails.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { runSchemaCommand } from "../src/cli/schema.ts";
import {
  adjustRow,
  ALL_TABLES,
  assertTablesExist,
  describeDifference,
  diffSchema,
  ensureSchema,
  insertStatement,
  missingTables,
  mysqlOptionsFromUrl,
  SCHEMA_VERSION,
  TABLES,
} from "../src/mysql/mod.ts";
import type { Row, SqlValue } from "../src/events/types.ts";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { startMariadbd } from "./helpers/mariadbd.ts";
import { hasCode } from "../src/util/errors.ts";

async function connect(db: ScratchDatabase): Promise<mysql.Connection & AsyncDisposable> {
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  return Object.assign(conn, { [Symbol.asyncDispose]: () => conn.end() });
}

/** `schema --check` against the scratch database: its exit code and what it printed. */
async function schemaCheck(
  db: ScratchDatabase,
): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSchemaCommand(
    { mysqlUrl: db.url, check: true, createDatabase: false },
    { out: (l) => out.push(l), err: (l) => err.push(l) },
  );
  return { code, out, err };
}

/** Everything information_schema says about the tables, ordered, for before/after checks. */
async function describeDatabase(db: ScratchDatabase): Promise<string> {
  const where = `TABLE_SCHEMA = '${db.name}'`;
  const parts = await Promise.all([
    db.query(
      `SELECT TABLE_NAME, ENGINE, TABLE_COLLATION, CREATE_OPTIONS, CREATE_TIME
       FROM information_schema.TABLES WHERE ${where} ORDER BY TABLE_NAME`,
    ),
    db.query(
      `SELECT TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT,
              EXTRA, CHARACTER_SET_NAME, COLLATION_NAME
       FROM information_schema.COLUMNS WHERE ${where} ORDER BY TABLE_NAME, ORDINAL_POSITION`,
    ),
    db.query(
      `SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART
       FROM information_schema.STATISTICS WHERE ${where}
       ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`,
    ),
    db.query(
      `SELECT TABLE_NAME, PARTITION_NAME, PARTITION_ORDINAL_POSITION, PARTITION_METHOD,
              PARTITION_EXPRESSION, PARTITION_DESCRIPTION
       FROM information_schema.PARTITIONS WHERE ${where}
       ORDER BY TABLE_NAME, PARTITION_ORDINAL_POSITION`,
    ),
  ]);
  return JSON.stringify(parts);
}

const WEEK_29 = new Date("2026-07-15T12:00:00Z");

Deno.test("ensureSchema: creates all 25 tables (22 of Statusengine, the worker's tombstones, announcements and leases), and a second run changes nothing (D2)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  const first = await ensureSchema(conn, { now: WEEK_29 });
  assert.equal(first.created.length, 25);
  assert.deepEqual(await diffSchema(conn), []);
  await conn.query("INSERT INTO statusengine_nodes VALUES ('N', '1.0', 1)");

  const before = await describeDatabase(db);
  // Weeks later: new partitions would differ if anything were rebuilt.
  const second = await ensureSchema(conn, { now: new Date("2026-10-01T00:00:00Z") });
  assert.deepEqual(second.created, []);
  assert.equal(await describeDatabase(db), before);
  const rows = await db.query<{ n: number }[]>("SELECT COUNT(*) AS n FROM statusengine_nodes");
  assert.equal(Number(rows[0]?.n), 1);
});

// The Statusengine UI reads the schema version from statusengine_dbversion; the legacy
// `database --update` wrote it, so a schema created here without it looked unversioned.
Deno.test("ensureSchema: records the schema version in statusengine_dbversion once and never rewrites it", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  const first = await ensureSchema(conn, { now: WEEK_29 });
  assert.deepEqual(first.dbversion, { written: true, version: SCHEMA_VERSION });
  const rows = await db.query<{ id: number; dbversion: string }[]>(
    "SELECT id, dbversion FROM statusengine_dbversion",
  );
  assert.deepEqual(rows.map((r) => [Number(r.id), r.dbversion]), [[1, "3.7.4"]]);
  // An operator's (or an older tool's) value stays.
  await conn.query("UPDATE statusengine_dbversion SET dbversion = '3.6.0' WHERE id = 1");
  const second = await ensureSchema(conn, { now: WEEK_29 });
  assert.deepEqual(second.dbversion, { written: false, version: "3.6.0" });
  const after = await db.query<{ n: number }[]>("SELECT COUNT(*) AS n FROM statusengine_dbversion");
  assert.equal(Number(after[0]?.n), 1);
});

Deno.test("ensureSchema: the collation chosen on MariaDB is utf8mb4_general_ci (D2)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  const version = await db.query<{ v: string }[]>("SELECT VERSION() AS v");
  const isMariaDb = /mariadb/i.test(String(version[0]?.v));
  const { collation } = await ensureSchema(conn, { now: WEEK_29 });
  assert.equal(collation, isMariaDb ? "utf8mb4_general_ci" : "utf8mb4_0900_ai_ci");
  const collations = await db.query<{ c: string }[]>(
    `SELECT DISTINCT TABLE_COLLATION AS c FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?`,
    [db.name],
  );
  assert.deepEqual(collations.map((r) => r.c), [collation]);
});

Deno.test("ensureSchema: partitioned tables get p_<isoyear>_<isoweek> partitions and p_max (docs/tables.md#shared-table-properties)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  const rows = await db.query<{ t: string; p: string; d: string }[]>(
    `SELECT TABLE_NAME AS t, PARTITION_NAME AS p, PARTITION_DESCRIPTION AS d
     FROM information_schema.PARTITIONS
     WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'statusengine_hostchecks'
     ORDER BY PARTITION_ORDINAL_POSITION`,
    [db.name],
  );
  assert.deepEqual(rows.map((r) => `${r.p}<${r.d}`), [
    "p_2026_29<20654",
    "p_2026_30<20661",
    "p_2026_31<20668",
    "p_2026_32<20675",
    "p_2026_33<20682",
    "p_max<MAXVALUE",
  ]);
  const partitioned = await db.query<{ t: string }[]>(
    `SELECT DISTINCT TABLE_NAME AS t FROM information_schema.PARTITIONS
     WHERE TABLE_SCHEMA = ? AND PARTITION_NAME IS NOT NULL ORDER BY t`,
    [db.name],
  );
  assert.deepEqual(
    partitioned.map((r) => r.t).sort(),
    ALL_TABLES.filter((t) => t.partitionColumn !== null).map((t) => t.name).sort(),
  );
});

// ON DUPLICATE KEY UPDATE fires on any unique index; a secondary one would make the
// upserts skip rows or overwrite rows of other objects without an error.
Deno.test("created schema: no upserted table has a UNIQUE index besides its primary key (docs/writers.md#upsert-or-insert)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  const upserted = ALL_TABLES.filter((t) =>
    t.writeMode === "full_upsert" || t.writeMode === "history_upsert" || t.writeMode === "downtime"
  ).map((t) => t.name);
  assert.equal(upserted.length, 18);
  const unique = await db.query<{ t: string; i: string }[]>(
    `SELECT DISTINCT TABLE_NAME AS t, INDEX_NAME AS i FROM information_schema.STATISTICS
     WHERE TABLE_SCHEMA = ? AND NON_UNIQUE = 0 ORDER BY t`,
    [db.name],
  );
  for (const name of upserted) {
    assert.deepEqual(unique.filter((r) => r.t === name).map((r) => r.i), ["PRIMARY"], name);
  }
  // The same holds for every other table (no UNIQUE index besides primary keys).
  assert.ok(unique.every((r) => r.i === "PRIMARY"));
});

Deno.test("diffSchema: a dropped column, a dropped index and an altered type are reported", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await conn.query("ALTER TABLE statusengine_hostchecks DROP COLUMN long_output");
  await conn.query("ALTER TABLE statusengine_servicestatus DROP INDEX issues");
  await conn.query("ALTER TABLE statusengine_logentries MODIFY logentry_data varchar(512) NULL");
  await conn.query("ALTER TABLE statusengine_nodes ADD UNIQUE INDEX by_version (node_version)");
  const differences = await diffSchema(conn);
  assert.deepEqual(
    differences.map((d) => describeDifference(d)),
    [
      "statusengine_hostchecks.long_output: column is missing (expected varchar(8192) NULL) " +
      "(ALTER TABLE `statusengine_hostchecks` ADD COLUMN `long_output` varchar(8192) NULL DEFAULT NULL AFTER `max_check_attempts`)",
      "statusengine_logentries.logentry_data: column is varchar(512) NULL, expected varchar(2048) NULL " +
      "(ALTER TABLE `statusengine_logentries` MODIFY `logentry_data` varchar(2048) NULL DEFAULT NULL)",
      "statusengine_nodes: secondary UNIQUE index by_version (node_version) is not in the schema",
      "statusengine_servicestatus: index issues (problem_has_been_acknowledged, scheduled_downtime_depth, current_state) is missing " +
      "(ALTER TABLE `statusengine_servicestatus` ADD INDEX `issues` (`problem_has_been_acknowledged`, `scheduled_downtime_depth`, `current_state`))",
    ],
  );
  // ensureSchema never repairs (D2: no ALTER): the differences stay.
  await ensureSchema(conn, { now: WEEK_29 });
  assert.equal((await diffSchema(conn)).length, 4);
});

Deno.test("missingTables: names the tables that do not exist", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  assert.deepEqual(
    await missingTables(conn, ["statusengine_hostchecks", "statusengine_perfdata"]),
    ["statusengine_hostchecks", "statusengine_perfdata"],
  );
  await ensureSchema(conn, { now: WEEK_29 });
  await conn.query("DROP TABLE statusengine_perfdata");
  assert.deepEqual(
    await missingTables(conn, ["statusengine_hostchecks", "statusengine_perfdata"]),
    ["statusengine_perfdata"],
  );
});

// The run command's start-up check: the operator must learn which command fixes it.
Deno.test("assertTablesExist: refuses with a message that names the schema command", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await assert.rejects(
    () => assertTablesExist(conn, ["statusengine_hoststatus", "statusengine_logentries"]),
    (err: unknown) => {
      assert.ok(hasCode(err, "missing_tables"), String(err));
      assert.match(err.message, new RegExp(`2 table\\(s\\) missing in database "${db.name}"`));
      assert.match(err.message, /statusengine_hoststatus, statusengine_logentries/);
      assert.match(err.message, /run the "schema" command/);
      return true;
    },
  );
  await ensureSchema(conn, { now: WEEK_29 });
  await assertTablesExist(conn, ["statusengine_hoststatus", "statusengine_logentries"]);
});

Deno.test("schema --check: a fresh database reports 25 missing tables and exits 1", async () => {
  await using db = await createScratchDatabase();
  const { code, out, err } = await schemaCheck(db);
  assert.equal(code, 1);
  assert.deepEqual(err, []);
  assert.equal(out.filter((l) => l.endsWith(": table is missing")).length, 25);
  const tables = await db.query<unknown[]>(
    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
    [db.name],
  );
  assert.equal(tables.length, 0);
});

Deno.test("schema --check: a partitioning difference is printed as it reads, blanks kept", async () => {
  await using db = await createScratchDatabase();
  {
    await using conn = await connect(db);
    await ensureSchema(conn, { now: WEEK_29 });
  }
  await db.query("ALTER TABLE `statusengine_hostchecks` REMOVE PARTITIONING");
  await db.query(
    "ALTER TABLE `statusengine_servicechecks` PARTITION BY RANGE (start_time DIV 3600) " +
      "(PARTITION p_all VALUES LESS THAN MAXVALUE)",
  );
  const { code, out, err } = await schemaCheck(db);
  assert.equal(code, 1);
  assert.deepEqual(err, []);
  assert.deepEqual(out, [
    "statusengine_hostchecks: partitioning is none, expected RANGE (start_time DIV 86400)",
    "statusengine_servicechecks: partitioning is RANGE (start_time DIV 3600), expected RANGE (start_time DIV 86400)",
    `2 difference(s) in ${db.name}`,
  ]);
});

function hostcheckRow(overrides: Row): Row {
  return {
    hostname: "web01",
    start_time: 1785470659,
    start_time_usec: 1,
    state: 0,
    is_hardstate: 1,
    end_time: 1785470660,
    output: "OK",
    timeout: 30,
    early_timeout: 0,
    latency: 0.60077601671218872,
    execution_time: 4.0977930000000002,
    perfdata: "",
    command: "check_ping",
    current_check_attempt: 1,
    max_check_attempts: 3,
    long_output: "",
    ...overrides,
  };
}

async function insertRows(
  conn: mysql.Connection,
  table: keyof typeof TABLES,
  rows: Row[],
): Promise<mysql.ResultSetHeader> {
  const values: SqlValue[] = [];
  for (const row of rows) values.push(...adjustRow(table, row).values);
  const [result] = await conn.execute<mysql.ResultSetHeader>(
    insertStatement(table, rows.length),
    values,
  );
  return result;
}

// D6: in strict mode one long plugin output would reject the whole multi-row INSERT.
Deno.test("insertStatement + adjustRow: a 10,000-character output stores exactly 1024 code points (D6)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await conn.query("SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
  const output = "é".repeat(10_000);

  // Without the adjustment the strict server refuses the statement (the premise of D6).
  const raw = TABLES.statusengine_hostchecks.insertColumns.map((c) =>
    hostcheckRow({ output, start_time_usec: 2 })[c] ?? null
  );
  await assert.rejects(
    () => conn.execute(insertStatement("statusengine_hostchecks", 1), raw),
    (e: unknown) => (e as { errno?: number }).errno === 1406,
  );

  await insertRows(conn, "statusengine_hostchecks", [
    hostcheckRow({ output }),
    hostcheckRow({ start_time_usec: 3 }),
  ]);
  const rows = await db.query<{ n: number; o: string; l: number }[]>(
    "SELECT CHAR_LENGTH(output) AS n, output AS o, latency AS l FROM statusengine_hostchecks ORDER BY start_time_usec",
  );
  assert.equal(rows.length, 2);
  assert.equal(Number(rows[0]?.n), 1024);
  assert.equal(rows[0]?.o, "é".repeat(1024));
  // The double is stored exactly.
  assert.equal(Number(rows[0]?.l), 0.60077601671218872);
});

Deno.test("insertStatement + adjustRow: 4-byte emoji are truncated without breaking a character (D6)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await conn.query("SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
  await insertRows(conn, "statusengine_hostchecks", [
    hostcheckRow({ output: "😀".repeat(3000) }),
    hostcheckRow({ start_time_usec: 2, output: `a${"🙂".repeat(1100)}` }),
  ]);
  const rows = await db.query<{ n: number; b: number; o: string }[]>(
    "SELECT CHAR_LENGTH(output) AS n, LENGTH(output) AS b, output AS o FROM statusengine_hostchecks ORDER BY start_time_usec",
  );
  assert.equal(Number(rows[0]?.n), 1024);
  assert.equal(Number(rows[0]?.b), 4096);
  assert.equal(rows[0]?.o, "😀".repeat(1024));
  assert.equal(rows[1]?.o, `a${"🙂".repeat(1023)}`);
  assert.ok(!String(rows[1]?.o).includes("\ufffd"));
});

Deno.test("insertStatement: redelivered rows are absorbed by the upserts and snapshots overwrite (docs/writers.md#upsert-or-insert)", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await insertRows(conn, "statusengine_hostchecks", [hostcheckRow({ output: "first" })]);
  // The same row again, next to a fresh row: no 1062, the fresh row lands, the old one stays
  // (two distinct rows of one key: tests/mysql/history_collision_test.ts).
  await insertRows(conn, "statusengine_hostchecks", [
    hostcheckRow({ output: "first" }),
    hostcheckRow({ start_time_usec: 9, output: "fresh" }),
  ]);
  const checks = await db.query<{ o: string }[]>(
    "SELECT output AS o FROM statusengine_hostchecks ORDER BY start_time_usec",
  );
  assert.deepEqual(checks.map((r) => r.o), ["first", "fresh"]);

  await insertRows(conn, "statusengine_hoststatus", [{
    hostname: "h",
    output: "old",
    last_check: 1,
  }]);
  await insertRows(conn, "statusengine_hoststatus", [{
    hostname: "h",
    output: "new",
    last_check: 2,
  }]);
  const status = await db.query<{ o: string; c: number }[]>(
    "SELECT output AS o, last_check AS c FROM statusengine_hoststatus",
  );
  assert.deepEqual(status.map((r) => [r.o, Number(r.c)]), [["new", 2]]);
});

Deno.test("schema: a table the server refuses to create is named in the error", async () => {
  // COMPACT rows allow index keys of 767 bytes: a utf8mb4 varchar(255) key (1020 bytes) is
  // refused with an error that names no table.
  await using server = await startMariadbd({ extraArgs: ["--innodb-default-row-format=compact"] });
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSchemaCommand(
    { mysqlUrl: server.url({ database: "se" }), check: false, createDatabase: true, now: WEEK_29 },
    { out: (l) => out.push(l), err: (l) => err.push(l) },
  );
  assert.equal(code, 1, out.join("\n"));
  const created = await server.query<{ t: string }[]>(
    "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'se'",
  );
  const refused = ALL_TABLES.map((t) => t.name).find((t) => !created.some((r) => r.t === t));
  assert.ok(refused !== undefined, "some table was refused");
  assert.match(err.join("\n"), new RegExp(`\\b${refused}\\b: .*too (large|long)`), err.join("\n"));
});

// A database of the legacy workers may hold 3-byte utf8 (utf8mb3) tables or latin1 columns: every
// emoji in a check output is refused there (1366), so the report says which ALTER converts them.
Deno.test("schema --check: a utf8mb3 table or latin1 column names the ALTER that converts it once per table, and after it an emoji is stored", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await db.query(
    "ALTER TABLE `statusengine_servicestatus` CONVERT TO CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci",
  );
  await db.query(
    "ALTER TABLE `statusengine_hostchecks` MODIFY `output` varchar(1024) CHARACTER SET latin1 DEFAULT NULL",
  );
  await conn.query("SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
  await assert.rejects(
    () => insertRows(conn, "statusengine_hostchecks", [hostcheckRow({ output: "OK 😀" })]),
    (e: unknown) => (e as { errno?: number }).errno === 1366,
  );
  const before = await schemaCheck(db);
  assert.equal(before.code, 1);
  // One statement per table: CONVERT converts every column, so it is not repeated per column.
  const alters = before.out.flatMap((l) =>
    [...l.matchAll(/ALTER TABLE [^;)]*utf8mb4/g)].map((m) => m[0])
  );
  assert.deepEqual(alters.toSorted(), [
    "ALTER TABLE `statusengine_hostchecks` CONVERT TO CHARACTER SET utf8mb4",
    "ALTER TABLE `statusengine_servicestatus` CONVERT TO CHARACTER SET utf8mb4",
  ], before.out.join("\n"));
  for (const alter of alters) await db.query(alter);
  assert.deepEqual(await schemaCheck(db), {
    code: 0,
    out: [`Schema of ${db.name} matches the 25 tables the worker needs`],
    err: [],
  });
  await insertRows(conn, "statusengine_hostchecks", [hostcheckRow({ output: "OK 😀" })]);
  const rows = await db.query<{ o: string }[]>("SELECT output AS o FROM statusengine_hostchecks");
  assert.equal(rows[0]?.o, "OK 😀");
});

// Two `schema` runs at once (two hosts of a deployment): each finds the tables missing, both send
// CREATE TABLE IF NOT EXISTS, and only one of them creates each table.
Deno.test("ensureSchema: a table another process created between the lookup and the CREATE is not reported as created", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  let raced: string | undefined;
  const racing = {
    query: async (sql: string, params?: unknown[]) => {
      if (raced === undefined && sql.startsWith("CREATE TABLE IF NOT EXISTS")) {
        // The other `schema` run wins this table's CREATE.
        raced = /`([^`]+)`/.exec(sql)?.[1];
        await db.query(sql);
      }
      return await conn.query(sql, params);
    },
  } as unknown as mysql.Connection;
  const result = await ensureSchema(racing, { now: WEEK_29 });
  assert.equal(raced, "statusengine_dbversion");
  assert.equal(result.created.length, 24);
  assert.ok(!result.created.includes("statusengine_dbversion"), result.created.join(", "));
  assert.deepEqual(await diffSchema(conn), []);
});

// A database of the legacy workers has neither status table's node_name index
// (docs/tables.md#schema-differences), and may have narrower or missing columns: the report says
// the statement that mends each, and running exactly those leaves no difference.
Deno.test("schema --check: a missing index, a missing column and a narrower column each name the ALTER that mends it", async () => {
  await using db = await createScratchDatabase();
  {
    await using conn = await connect(db);
    await ensureSchema(conn, { now: WEEK_29 });
  }
  await db.query("ALTER TABLE `statusengine_hoststatus` DROP INDEX `node_name`");
  await db.query("ALTER TABLE `statusengine_servicestatus` DROP INDEX `node_name`");
  await db.query("ALTER TABLE `statusengine_hostchecks` MODIFY `output` varchar(255) NOT NULL");
  await db.query("ALTER TABLE `statusengine_servicechecks` DROP COLUMN `long_output`");
  const before = await schemaCheck(db);
  assert.equal(before.code, 1);
  const differences = before.out.slice(0, -1);
  const alters = differences.flatMap((l) => /\((ALTER TABLE .*)\)$/.exec(l)?.[1] ?? []);
  assert.equal(alters.length, 4, before.out.join("\n"));
  for (const alter of alters) await db.query(alter);
  assert.deepEqual(await schemaCheck(db), {
    code: 0,
    out: [`Schema of ${db.name} matches the 25 tables the worker needs`],
    err: [],
  });
});

// A MyISAM table takes no transaction: a value that does not fit in a later row of a multi-row INSERT
// is cut silently under STRICT_TRANS_TABLES. The report says the ALTER that makes it InnoDB.
Deno.test("schema --check: a MyISAM table names the ALTER that makes it InnoDB", async () => {
  await using db = await createScratchDatabase();
  {
    await using conn = await connect(db);
    await ensureSchema(conn, { now: WEEK_29 });
  }
  await db.query("ALTER TABLE `statusengine_dbversion` ENGINE=MyISAM");
  assert.deepEqual(await schemaCheck(db), {
    code: 1,
    out: [
      "statusengine_dbversion: engine is MyISAM, expected InnoDB " +
      "(ALTER TABLE `statusengine_dbversion` ENGINE=InnoDB)",
      `1 difference(s) in ${db.name}`,
    ],
    err: [],
  });
  await db.query("ALTER TABLE `statusengine_dbversion` ENGINE=InnoDB");
  const after = await schemaCheck(db);
  assert.equal(after.code, 0, after.out.join("\n"));
});

// A column added to a legacy table by other tooling, NOT NULL without a default, gets no value
// from the worker's INSERT: strict mode refuses every row (1364). The report says so and how.
Deno.test("schema --check: an extra NOT NULL column without a default says every INSERT is refused and names the ALTER", async () => {
  await using db = await createScratchDatabase();
  await using conn = await connect(db);
  await ensureSchema(conn, { now: WEEK_29 });
  await db.query("ALTER TABLE `statusengine_hostchecks` ADD COLUMN `site_id` int(11) NOT NULL");
  await conn.query("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'");
  await assert.rejects(
    () => insertRows(conn, "statusengine_hostchecks", [hostcheckRow({})]),
    (e: unknown) => (e as { errno?: number }).errno === 1364,
  );
  const { code, out } = await schemaCheck(db);
  assert.equal(code, 1);
  const line = out.find((l) => l.startsWith("statusengine_hostchecks.site_id:")) ?? "";
  assert.match(line, /every INSERT .* refused/, out.join("\n"));
  const alter = /\((ALTER TABLE .*)\)$/.exec(line)?.[1];
  assert.equal(alter, "ALTER TABLE `statusengine_hostchecks` MODIFY `site_id` int(11) NULL");
  await db.query(alter);
  await insertRows(conn, "statusengine_hostchecks", [hostcheckRow({})]);
});
