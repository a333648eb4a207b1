/**
 * poolExecutor's statement timeout against a real MariaDB: a statement held
 * by a real `LOCK TABLES … WRITE` from another connection never answers in
 * time.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { lockTables } from "../helpers/mysql_lock.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { classifyMysqlError, StatementTimeoutError } from "../../src/mysql/errors.ts";

Deno.test("executor: a statement without an answer within the timeout fails as unavailable, and its connection never serves another statement", async () => {
  await using db = await createScratchDatabase();
  await db.query("CREATE TABLE t (id int PRIMARY KEY)");
  // One connection: if the unanswered one went back to the pool, the next
  // statement would queue behind the blocked INSERT and time out as well.
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 1,
  });
  try {
    const executor = poolExecutor(pool, { statementTimeoutMs: 300 });
    await executor.run("INSERT INTO t VALUES (?)", [1], { prepared: true });
    const lock = await lockTables(db, ["t"]);
    let failure: unknown;
    try {
      await executor.run("INSERT INTO t VALUES (?)", [2], { prepared: true }).catch(
        (err: unknown) => (failure = err),
      );
      assert.ok(failure instanceof StatementTimeoutError, String(failure));
      assert.equal(classifyMysqlError(failure), "unavailable");
      // The table is still locked: only a fresh connection can answer this.
      const answer = await executor.run("SELECT 42 AS n");
      assert.equal(answer.rows[0]?.["n"], 42);
    } finally {
      await lock.unlock();
    }
    // The abandoned INSERT may still run once the lock is gone (harmless: writes are idempotent).
    const again = await executor.run("INSERT IGNORE INTO t VALUES (?)", [2], { prepared: true });
    assert.ok(again.affectedRows <= 1);
  } finally {
    await pool.end();
  }
});

Deno.test("executor: without a timeout a slow statement is waited for", async () => {
  await using db = await createScratchDatabase();
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 1,
  });
  try {
    const executor = poolExecutor(pool, { statementTimeoutMs: 0 });
    const result = await executor.run("SELECT SLEEP(0.5) AS s");
    assert.equal(result.rows[0]?.["s"], 0);
  } finally {
    await pool.end();
  }
});
