/**
 * The placeholder descriptions of cached prepared statements are dropped when
 * MariaDB describes every placeholder as type NULL, and the rows written are
 * exactly the same (real MariaDB, scratch database).
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  connectionOptionsOf,
  createScratchDatabase,
  type ScratchDatabase,
} from "../helpers/mysql.ts";
import {
  cachedStatements,
  dropEmptyParameterMetadata,
  hintsNothing,
} from "../../src/mysql/mysql2_internals.ts";
import { TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { insertStatement } from "../../src/mysql/sql.ts";
import { adjustRow } from "../../src/mysql/values.ts";

const TABLE = TABLES.statusengine_hostchecks;

function pool(db: ScratchDatabase): mysql.Pool {
  return mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 1,
    supportBigNumbers: true,
    bigNumberStrings: false,
  });
}

/** Placeholder descriptions of every statement cached on the pool's one connection. */
async function cachedParameterCounts(p: mysql.Pool): Promise<number[]> {
  const conn = await p.getConnection();
  try {
    return cachedStatements(conn).map((s) => (s.parameters as unknown[]).length);
  } finally {
    conn.release();
  }
}

const ROWS = [
  {
    hostname: "h-äöü-😀",
    start_time: 1_785_470_659,
    start_time_usec: 999_999,
    end_time: 1_785_470_660,
    latency: 0.60077601671218872,
    execution_time: 12.5,
    output: "PING OK",
    long_output: "",
    perfdata: "rta=0.08ms",
    current_check_attempt: 1,
    max_check_attempts: 3,
    state: 2,
    is_hardstate: 1,
    command: null,
  },
  { hostname: "plain", start_time: -5, start_time_usec: 0, output: "x", latency: -1e-300 },
];

Deno.test("statement metadata: MariaDB's type-NULL placeholder descriptions of a cached INSERT are dropped, and the rows written are the same", async () => {
  await using db = await createScratchDatabase();
  await db.query(createTableStatement(TABLE, { collation: "utf8mb4_general_ci" }));
  const sql = insertStatement(TABLE, ROWS.length);
  const values = ROWS.flatMap((r) => adjustRow(TABLE, r).values);
  const read = async () =>
    await db.query<Record<string, unknown>[]>(`SELECT * FROM ${TABLE.name} ORDER BY hostname`);

  const plain = pool(db);
  try {
    await poolExecutor(plain).run(sql, values, { prepared: true });
    assert.deepEqual(
      await cachedParameterCounts(plain),
      [values.length],
      "mysql2 keeps a description per placeholder",
    );
  } finally {
    await plain.end();
  }
  const before = await read();
  await db.query(`TRUNCATE TABLE ${TABLE.name}`);

  const lean = pool(db);
  dropEmptyParameterMetadata(lean);
  try {
    await poolExecutor(lean).run(sql, values, { prepared: true });
    assert.deepEqual(await cachedParameterCounts(lean), [0], "dropped");
    // The cached statement is used again without its descriptions.
    await poolExecutor(lean).run(sql, values, { prepared: true });
  } finally {
    await lean.end();
  }
  assert.deepEqual(await read(), before, "the same rows, value for value");
});

Deno.test("statement metadata: descriptions that could hint a type are kept", () => {
  assert.equal(hintsNothing([{ columnType: 6 }, { columnType: 6 }]), true);
  assert.equal(hintsNothing([{ columnType: 6 }, { columnType: 8 }]), false, "LONGLONG hints");
  assert.equal(hintsNothing([]), false);
  assert.equal(hintsNothing(undefined), false);
});
