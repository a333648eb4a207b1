import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { classifyMysqlError, StatementTimeoutError } from "../../src/mysql/errors.ts";
import { galeraNotReady } from "../../src/mysql/connect.ts";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";

// Without this table a row error could be retried forever (stalling its
// table) or an outage could dead-letter good rows (D7; the Go worker's TestIsConnectionError).
// Each errno is listed with why it is classified so; the SQL state is what
// MariaDB 10.11 reports for it.

Deno.test("mysql errors: exactly 1205, 1213 and 1615 are lock errors", () => {
  // 1615: DDL (cleanup's partition changes) met a prepared INSERT more times than the server
  // re-prepares on its own; as a statement error a lone row failing it twice was dead-lettered.
  assert.equal(
    classifyMysqlError({ errno: 1615, code: "ER_NEED_REPREPARE", sqlState: "HY000" }),
    "lock",
  );
  assert.equal(
    classifyMysqlError({ errno: 1213, code: "ER_LOCK_DEADLOCK", sqlState: "40001" }),
    "lock",
  );
  assert.equal(
    classifyMysqlError({ errno: 1205, code: "ER_LOCK_WAIT_TIMEOUT", sqlState: "HY000" }),
    "lock",
  );
  assert.equal(
    classifyMysqlError({ errno: 1062, code: "ER_DUP_ENTRY", sqlState: "23000" }),
    "row",
  );
});

/** Server errnos that mean "not now, whatever the rows": held, never dead-lettered. */
const UNAVAILABLE: readonly (readonly [number, string, string])[] = [
  // connection
  [1040, "08004", "too many connections: others hold every slot"],
  [1203, "42000", "max_user_connections reached for the worker's account"],
  [1226, "42000", "max_queries_per_hour & co. reached; resets with the hour"],
  [1053, "08S01", "server shutdown in progress"],
  [1927, "70100", "connection killed (MariaDB)"],
  [1317, "70100", "query interrupted: KILL QUERY, e.g. during a server shutdown"],
  [1158, "08S01", "server could not read from the connection"],
  [1159, "08S01", "server timed out reading from the connection"],
  [1160, "08S01", "server could not write to the connection"],
  [1161, "08S01", "server timed out writing to the connection"],
  [2006, "HY000", "server has gone away (client number)"],
  [2013, "HY000", "lost connection during the query (client number)"],
  [1047, "08S01", "Galera node not ready (wsrep_ready OFF): out of the primary component"],
  // read-only
  [1290, "HY000", "read_only / super_read_only: a replica, or a maintenance window"],
  [1836, "HY000", "InnoDB read-only mode"],
  [1792, "25006", "read-only transaction: a proxy routed the write to a replica"],
  // space and resources
  [1114, "HY000", "table full: disk or tablespace limit reached"],
  [1021, "HY000", "disk full"],
  [1026, "HY000", "error writing a file (e.g. ENOSPC in tmpdir)"],
  [1037, "HY001", "server out of memory"],
  [1038, "HY001", "out of sort memory"],
  [1041, "HY000", "server out of resources"],
  [1135, "HY000", "server cannot create a thread"],
  [1461, "42000", "max_prepared_stmt_count reached, by all clients together"],
  // privileges (revoked while running, or an expired password)
  [1142, "42000", "table privilege missing: INSERT revoked"],
  [1143, "42000", "column privilege missing"],
  [1044, "42000", "database access denied"],
  [1045, "28000", "login refused: password changed"],
  [1227, "42000", "a global privilege is missing"],
  [1130, "HY000", "host not allowed to connect"],
  [1129, "HY000", "host blocked after too many connection errors"],
  [1820, "HY000", "password expired, must be changed"],
  [1862, "HY000", "password expired at login"],
  [4151, "HY000", "account locked (MariaDB)"],
  // statement timeout
  [1969, "70100", "max_statement_time exceeded (MariaDB)"],
  [3024, "HY000", "max_execution_time exceeded (MySQL)"],
];

Deno.test("mysql errors: every server errno that means 'cannot take writes now' is unavailable", () => {
  for (const [errno, sqlState, why] of UNAVAILABLE) {
    assert.equal(classifyMysqlError({ errno, sqlState }), "unavailable", `${errno}: ${why}`);
  }
});

Deno.test("mysql errors: socket and driver failures are unavailable, and so is the executor's statement timeout", () => {
  for (
    const code of [
      "ECONNREFUSED",
      "ECONNRESET",
      "ETIMEDOUT",
      "EPIPE",
      "EHOSTUNREACH",
      "ENETUNREACH",
      "ENOTFOUND",
      "EAI_AGAIN",
      "PROTOCOL_CONNECTION_LOST",
      "PROTOCOL_SEQUENCE_TIMEOUT",
    ]
  ) {
    assert.equal(classifyMysqlError({ code, errno: -111 }), "unavailable", code);
  }
  assert.equal(classifyMysqlError({ code: "SOMETHING", fatal: true }), "unavailable");
  assert.equal(classifyMysqlError(new StatementTimeoutError(30_000)), "unavailable");
});

/** Errors about the values of the rows sent: isolated by halves and dead-lettered. */
const ROW: readonly (readonly [number, string, string])[] = [
  [1062, "23000", "duplicate key"],
  [1048, "23000", "NULL in a NOT NULL column"],
  [1452, "23000", "foreign key: no parent row"],
  [1451, "23000", "foreign key: row is a parent"],
  [4025, "23000", "CHECK constraint failed (MariaDB)"],
  [1406, "22001", "data too long for a column"],
  [1366, "22007", "incorrect value for a column (a string in an int column)"],
  [1292, "22007", "incorrect datetime or truncated value"],
  [1264, "22003", "out of range value"],
  [1690, "22003", "value out of range in an expression"],
  [1365, "22012", "division by zero"],
  [1367, "22007", "illegal value during parsing"],
  [1265, "01000", "data truncated (strict mode)"],
  [1300, "HY000", "invalid character string for the column's charset"],
  [1411, "HY000", "incorrect value for a function of a type"],
  [3819, "HY000", "CHECK constraint violated (MySQL)"],
  [1644, "45000", "SIGNAL in a trigger, which runs for one row: a check of that row"],
  [1526, "HY000", "no partition for the value (a row outside every partition)"],
  [1118, "42000", "row size too large for the page"],
  [1153, "08S01", "statement larger than max_allowed_packet: halving cures it"],
  [1197, "HY000", "statement larger than the binlog cache: halving cures it"],
  [1390, "HY000", "too many placeholders: halving cures it"],
];

Deno.test("mysql errors: errors about the rows' values (SQL state 22/23 and the listed HY000 ones) are row errors", () => {
  for (const [errno, sqlState, why] of ROW) {
    assert.equal(classifyMysqlError({ errno, sqlState }), "row", `${errno}: ${why}`);
  }
  // Class 22/23 is a row error even for an errno not listed anywhere.
  assert.equal(classifyMysqlError({ errno: 9999, sqlState: "22018" }), "row");
  assert.equal(classifyMysqlError({ errno: 9998, sqlState: "23514" }), "row");
  // Raised before reaching the server (a value mysql2 cannot bind, a bug in a
  // row): about the rows sent, never held.
  assert.equal(
    classifyMysqlError(new TypeError("Bind parameters must not contain undefined")),
    "row",
  );
  assert.equal(classifyMysqlError(new Error("plain")), "row");
  assert.equal(classifyMysqlError("string"), "row");
});

Deno.test("mysql errors: other server errors are statement errors (split, held when both halves fail alike)", () => {
  for (
    const [errno, sqlState, why] of [
      [1054, "42S22", "unknown column: a schema older than the worker"],
      [1146, "42S02", "table does not exist: dropped or renamed while running"],
      [1364, "HY000", "a NOT NULL column without a default the worker does not know was added"],
      [1064, "42000", "syntax error: a bug in a statement text"],
      [1030, "HY000", "got an error from the storage engine (e.g. 28: no space)"],
      [1180, "HY000", "error during COMMIT"],
      [1100, "HY000", "table was not locked with LOCK TABLES"],
    ] as const
  ) {
    assert.equal(classifyMysqlError({ errno, sqlState }), "statement", `${errno}: ${why}`);
  }
});

// A Galera node that answers but is not Synced is down for the worker like one that refuses
// statements with 1047 (docs/running.md#galera): held, never dead-lettered, another host tried.
Deno.test("mysql errors: a Galera node found not ready by the connection's check is unavailable, like its 1047", () => {
  const notReady = galeraNotReady("OFF", "Initialized");
  assert.equal(classifyMysqlError(notReady), "unavailable");
  assert.match(notReady.message, /wsrep_ready=OFF, wsrep_local_state_comment=Initialized/);
  assert.equal(
    classifyMysqlError({
      errno: 1047,
      code: "ER_UNKNOWN_COM_ERROR",
      sqlState: "08S01",
      message: "WSREP has not yet prepared node for application use",
    }),
    "unavailable",
  );
});

Deno.test("mysql errors: no errno is in two classes", () => {
  const seen = new Map<number, string>();
  for (const [errno] of UNAVAILABLE) seen.set(errno, "unavailable");
  for (const [errno] of ROW) {
    assert.equal(seen.get(errno), undefined, `${errno} is listed twice`);
  }
  for (const errno of [1205, 1213, 1615]) assert.equal(seen.get(errno), undefined);
});

Deno.test("mysql errors: what mysql2 really throws for a refused connection, a killed connection and a bad statement", async () => {
  const refused = await mysql.createConnection({ host: "127.0.0.1", port: 1, user: "root" }).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.equal(classifyMysqlError(refused), "unavailable");

  await using db = await createScratchDatabase();
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 2,
  });
  const admin = await mysql.createConnection({
    host: db.host,
    port: db.port,
    user: db.user,
    password: db.password,
  });
  try {
    const marker = `se_kill_${crypto.randomUUID().slice(0, 8)}`;
    const running = pool.query(`SELECT SLEEP(5) AS ${marker}`).then(
      () => undefined,
      (err: unknown) => err,
    );
    let id: number | undefined;
    for (let i = 0; i < 100 && id === undefined; i++) {
      const [rows] = await admin.query(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND ID <> CONNECTION_ID()",
        [`SELECT SLEEP(5) AS ${marker}%`],
      ) as unknown as [{ ID: number }[]];
      id = rows.find((r) => r.ID !== undefined)?.ID;
      if (id === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(id !== undefined, "found the running statement");
    await admin.query(`KILL CONNECTION ${id}`);
    assert.equal(classifyMysqlError(await running), "unavailable");
    const bad = await pool.query("SELECT * FROM no_such_table").then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.equal(classifyMysqlError(bad), "statement");
  } finally {
    await admin.end();
    await pool.end();
  }
});
