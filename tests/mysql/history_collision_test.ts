/**
 * Two distinct events the core really emits can share a history table's key: the service tables'
 * keys lack the host, and the check and notification keys pair the payload's start second with
 * the envelope's microseconds (docs/tables.md#check-queues). One row is kept; which one must not
 * depend on the order the two are committed in (docs/writers.md#upsert-or-insert).
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { ALL_TABLES, type Table } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { insertStatement } from "../../src/mysql/sql.ts";
import { adjustRow } from "../../src/mysql/values.ts";
import type { Row, SqlValue } from "../../src/events/mod.ts";

/**
 * This week: in a partition of its own, not the first, where the upsert's mark (BIGINT's minimum,
 * held by the key's time column while a row is updated) would fall.
 */
const NOW = Math.floor(Date.now() / 1000);

/** A row of `table` with a fixed key; `variant` changes every non-key column, NULL included. */
function rowOf(table: Table, variant: number): Row {
  const row: Record<string, SqlValue> = {};
  for (const c of table.columns) {
    const key = table.primaryKey.includes(c.name);
    const v = key ? 0 : variant;
    row[c.name] = c.sqlType.kind === "string"
      ? (c.keepsNull && v === 1 ? null : `${c.name}-${v}`)
      : c.sqlType.kind === "double"
      ? v / 4
      : c.sqlType.kind === "integer" && c.sqlType.flag
      ? v % 2
      : NOW * Number(c.name.endsWith("_time")) + v;
  }
  return row;
}

/** Each inner list is one statement of the rows of those variants. */
const ORDERS = [[[1], [2]], [[2], [1]], [[1, 2]], [[2, 1]], [[1], [2], [1]], [[2], [1], [2]]];

Deno.test("history collision: two distinct events of one key end as the same row in any commit order, and a redelivered row changes nothing (docs/writers.md#upsert-or-insert)", async () => {
  await using db = await createScratchDatabase();
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 1 });
  try {
    for (const table of ALL_TABLES.filter((t) => t.writeMode === "history_upsert")) {
      await db.query(createTableStatement(table, { collation: "utf8mb4_general_ci" }));
      const rowsAfter = async (statements: number[][]) => {
        await db.query(`DELETE FROM \`${table.name}\``);
        for (const variants of statements) {
          const values = variants.flatMap((v) => adjustRow(table, rowOf(table, v)).values);
          await pool.execute(insertStatement(table, variants.length), values);
        }
        return (await pool.query(`SELECT * FROM \`${table.name}\``))[0];
      };
      const first = await rowsAfter(ORDERS[0] as number[][]);
      for (const order of ORDERS.slice(1)) {
        assert.deepEqual(await rowsAfter(order), first, `${table.name}: ${JSON.stringify(order)}`);
      }
      assert.deepEqual(await rowsAfter([[1], [1]]), await rowsAfter([[1]]), table.name);
    }
  } finally {
    await pool.end();
  }
});
