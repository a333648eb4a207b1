import assert from "node:assert/strict";
import { createScratchDatabase } from "./mysql.ts";

Deno.test("mysql helper: a scratch database exists until it is dropped", async () => {
  const db = await createScratchDatabase();
  try {
    await db.query("CREATE TABLE t (id int primary key)");
    await db.query("INSERT INTO t VALUES (1),(2)");
    const rows = await db.query<{ n: number }[]>("SELECT COUNT(*) AS n FROM t");
    assert.equal(Number(rows[0]?.n), 2);
  } finally {
    await db.drop();
  }
});
