import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { classifyMysqlError } from "./errors.ts";
import { createScratchDatabase } from "../../tests/helpers/mysql.ts";

// Without this table a permanent error could be retried forever (stalling the
// pipeline) or a lost connection could drop a batch (W5, TestIsConnectionError).
Deno.test("mysql errors: exactly 1205 and 1213 are lock errors", () => {
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
    "permanent",
  );
});

Deno.test("mysql errors: the connection class is exactly the unreachable-server set", () => {
  for (const errno of [1040, 1053, 1927, 2006, 2013]) {
    assert.equal(classifyMysqlError({ errno, sqlState: "08S01" }), "connection", String(errno));
  }
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
    ]
  ) {
    assert.equal(classifyMysqlError({ code, errno: -111 }), "connection", code);
  }
  assert.equal(classifyMysqlError({ code: "SOMETHING", fatal: true }), "connection");
});

Deno.test("mysql errors: deterministic server errors are permanent, never retried", () => {
  for (
    const [errno, code] of [
      [1062, "ER_DUP_ENTRY"],
      [1390, "ER_PS_MANY_PARAM"],
      [1406, "ER_DATA_TOO_LONG"],
      [1048, "ER_BAD_NULL_ERROR"],
      [1054, "ER_BAD_FIELD_ERROR"],
      [1146, "ER_NO_SUCH_TABLE"],
      [1064, "ER_PARSE_ERROR"],
      [1366, "ER_TRUNCATED_WRONG_VALUE_FOR_FIELD"],
    ] as const
  ) {
    assert.equal(classifyMysqlError({ errno, code, sqlState: "HY000" }), "permanent", code);
  }
  assert.equal(classifyMysqlError(new Error("plain")), "permanent");
  assert.equal(classifyMysqlError("string"), "permanent");
});

Deno.test("mysql errors: what mysql2 really throws for a refused connection, a killed connection and a bad statement", async () => {
  const refused = await mysql.createConnection({ host: "127.0.0.1", port: 1, user: "root" }).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.equal(classifyMysqlError(refused), "connection");

  await using db = await createScratchDatabase();
  const pool = mysql.createPool({
    host: db.host,
    port: db.port,
    user: db.user,
    password: db.password,
    database: db.name,
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
    assert.equal(classifyMysqlError(await running), "connection");
    const bad = await pool.query("SELECT * FROM no_such_table").then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.equal(classifyMysqlError(bad), "permanent");
  } finally {
    await admin.end();
    await pool.end();
  }
});
