/**
 * Every connection the worker and its tools open runs in strict mode, whatever the server's global
 * `sql_mode` (docs/decisions.md#d6), and keeps the server's other modes: the writers' pool, the
 * in-order lease's connection, and the dedicated connection of the tools and the daemon's probes.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { startMariadbd } from "../helpers/mariadbd.ts";
import { createSchema } from "../helpers/worker.ts";
import { orStuck, waitFor } from "../helpers/wait.ts";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { connectMysql, endMysql, endPool } from "../../src/mysql/connect.ts";
import { createWriterPool, poolExecutor } from "../../src/mysql/executor.ts";
import { Lease, nodeLease, nodeLeaseOptions } from "../../src/mysql/lease.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { runOnEachConnection } from "../../src/mysql/mysql2_internals.ts";
import { classifyMysqlError } from "../../src/mysql/errors.ts";

const EXPECTED = ["NO_ENGINE_SUBSTITUTION", "STRICT_TRANS_TABLES"];

/** The server's mode and strict mode, of the session's (mysql2 asks for IGNORE_SPACE too). */
function modes(rows: readonly Record<string, unknown>[]): string[] {
  return String(rows[0]?.m).split(",").filter((m) => EXPECTED.includes(m)).sort();
}

Deno.test("sql_mode: the writers' pool, the in-order lease and a tool's connection are strict on a server whose sql_mode is not, and keep its other modes", async () => {
  await using server = await startMariadbd({ extraArgs: ["--sql-mode=NO_ENGINE_SUBSTITUTION"] });
  await server.query("CREATE DATABASE se CHARACTER SET utf8mb4");
  const url = server.url({ database: "se" });
  await createSchema(url);
  const options = mysqlOptionsFromUrl(url);
  const SQL = "SELECT @@SESSION.sql_mode AS m";

  const pool = createWriterPool(options, 2);
  try {
    const run = poolExecutor(pool);
    assert.deepEqual(modes((await run.run(SQL)).rows), EXPECTED, "pool, text protocol");
    assert.deepEqual(modes((await run.run(SQL, [], { prepared: true })).rows), EXPECTED, "pool");
  } finally {
    await endPool(pool, 5_000);
  }

  const tool = await connectMysql(options, { timeoutMs: 5_000 });
  try {
    const [rows] = await tool.connection.query<mysql.RowDataPacket[]>(SQL);
    assert.deepEqual(modes(rows), EXPECTED, "a tool's connection");
  } finally {
    await endMysql(tool.connection);
  }

  const leaseOptions = nodeLeaseOptions(nodeLease("in-order", "N"), () => options, 100, 200);
  let leaseConnection: mysql.Connection | undefined;
  const lease = new Lease({
    ...leaseOptions,
    connect: async () => (leaseConnection = await leaseOptions.connect()),
    onHeld: () => Promise.resolve(),
    onLost: () => Promise.resolve(),
  });
  lease.start();
  try {
    await waitFor(() => lease.active, { timeoutMs: 10_000, message: "lease held" });
    const [rows] = await (leaseConnection as mysql.Connection).query<mysql.RowDataPacket[]>(SQL);
    assert.deepEqual(modes(rows), EXPECTED, "the lease's connection");
  } finally {
    await lease.stop();
  }
});

// A connection left without strict mode would write what it should refuse: it must serve nothing,
// and its caller must neither wait forever nor see a refusal of its rows (it retries).
Deno.test("sql_mode: a new pool connection whose first statement fails serves no statement; the caller sees a lost connection", async () => {
  await using db = await createScratchDatabase();
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 1 });
  const errors: unknown[] = [];
  runOnEachConnection(pool, "SET SESSION sql_mode = 'NO_SUCH_MODE'", (err) => errors.push(err));
  try {
    for (const attempt of [() => pool.query("SELECT 1"), () => pool.execute("SELECT 1")]) {
      const outcome = await orStuck(attempt().then(() => "served", (err: unknown) => err));
      assert.notEqual(outcome, "stuck");
      assert.notEqual(outcome, "served");
      assert.equal(classifyMysqlError(outcome), "unavailable", String(outcome));
    }
    assert.equal(errors.length, 2);
    assert.equal((errors[0] as { errno?: number }).errno, 1231);
  } finally {
    await endPool(pool, 5_000);
  }
});
