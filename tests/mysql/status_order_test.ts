/**
 * The status upsert keeps the newest snapshot of each object whatever order its snapshots are
 * committed in (docs/writers.md#newest-snapshot), on a real MariaDB: shuffled, duplicated, split
 * into random multi-row statements and sent on several connections at once, a sequence of
 * snapshots ends with exactly the row of its last snapshot.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { seededRandom } from "../helpers/seeded_random.ts";
import { type Table, TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { insertStatement } from "../../src/mysql/sql.ts";
import { adjustRow } from "../../src/mysql/values.ts";
import type { Row, SqlValue } from "../../src/events/mod.ts";

type Rnd = (n: number) => number;

const OUTPUTS = ["OK - all fine", "ok - all fine", "WARNING - load 4", "CRITICAL - down", ""];

/** The key columns of one object of `table`. */
function keyOf(table: Table, object: number): Row {
  return table.primaryKey.length === 1
    ? { hostname: `host-${object}` }
    : { hostname: `host-${object % 3}`, service_description: `Service ${object}` };
}

/**
 * The snapshots of one object as the core sends them, oldest first: times rise or repeat within
 * a second (then a check, a state change or only the content tells them apart), the object's
 * configuration stays. Every snapshot is a complete row.
 */
function snapshotsOf(table: Table, object: number, count: number, rnd: Rnd): Row[] {
  const out: Row[] = [];
  let time = 1_700_000_000 + rnd(100);
  let lastCheck = time - 30;
  let lastStateChange = time - 600;
  for (let i = 0; i < count; i++) {
    time += rnd(3); // 0: a second snapshot in the same second
    if (rnd(2) === 0) lastCheck = Math.min(time, lastCheck + rnd(3));
    if (rnd(4) === 0) lastStateChange = lastCheck;
    const row: Record<string, SqlValue> = { ...keyOf(table, object) };
    for (const column of table.columns) {
      if (column.name in row) continue;
      const kind = column.sqlType;
      row[column.name] = kind.kind === "string"
        ? OUTPUTS[rnd(OUTPUTS.length)] ?? ""
        : kind.kind === "double"
        ? rnd(8) / 4
        : kind.flag
        ? rnd(2)
        : rnd(4);
    }
    Object.assign(row, {
      status_update_time: time,
      last_check: lastCheck,
      last_state_change: lastStateChange,
      last_hard_state_change: lastStateChange - 60,
      last_notification: 0,
      node_name: "node-a",
      // Configuration: the same in every snapshot of the object, NULL for some objects.
      event_handler: object % 2 === 0 ? null : "restart",
      check_command: `check_${object}`,
    });
    out.push(row);
  }
  return out;
}

/**
 * Compare two snapshots as the upsert does: `snapshotOrder`, column by column, strings by their
 * bytes (ASCII here, so by code unit).
 */
function compareSnapshots(table: Table, a: Row, b: Row): number {
  for (const column of table.snapshotOrder) {
    const x = a[column] ?? null;
    const y = b[column] ?? null;
    if (x === y) continue;
    if (x === null || y === null) throw new Error(`NULL in ordered column ${column}`);
    return x < y ? -1 : 1;
  }
  return 0;
}

function shuffle<T>(items: T[], rnd: Rnd): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rnd(i + 1);
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

/** The rows of `table` as the worker would find them, keyed columns first. */
async function tableRows(pool: mysql.Pool, table: Table): Promise<Row[]> {
  const [rows] = await pool.query(
    `SELECT * FROM \`${table.name}\` ORDER BY ${table.primaryKey.map((c) => `\`${c}\``).join(",")}`,
  );
  return (rows as Record<string, unknown>[]).map((r) =>
    Object.fromEntries(table.insertColumns.map((c) => [c, r[c] as SqlValue]))
  );
}

/** Run one statement, retrying the deadlocks two connections into one table may cause. */
async function execute(pool: mysql.Pool, sql: string, values: unknown[]): Promise<void> {
  for (let attempt = 1;; attempt++) {
    try {
      await pool.execute(sql, values as mysql.ExecuteValues);
      return;
    } catch (err: unknown) {
      const errno = (err as { errno?: number }).errno;
      if ((errno !== 1213 && errno !== 1205) || attempt >= 20) throw err;
    }
  }
}

for (const name of ["statusengine_servicestatus", "statusengine_hoststatus"] as const) {
  Deno.test(`status order: ${name} ends at each object's newest snapshot whatever order, batches and connections its snapshots are committed in (docs/writers.md#newest-snapshot)`, async () => {
    const table = TABLES[name];
    await using db = await createScratchDatabase();
    await db.query(createTableStatement(table, { collation: "utf8mb4_general_ci" }));
    const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 4 });
    try {
      for (let seed = 1; seed <= 6; seed++) {
        const rnd = seededRandom(seed * 7_919);
        await db.query(`DELETE FROM \`${name}\``);
        const objects = 8;
        const sequences = Array.from(
          { length: objects },
          (_, o) => snapshotsOf(table, o, 12, rnd),
        );
        // The core's order: each sequence as sent. Where two snapshots of one second cannot be
        // told apart by their times, their order is the documented tie-break.
        for (const s of sequences) s.sort((a, b) => compareSnapshots(table, a, b));
        const expected = sequences.map((s) => adjustRow(table, s[s.length - 1] as Row).values);

        // Redelivery: a third of the snapshots arrive twice; then any order.
        const all = sequences.flat();
        const delivered = shuffle([...all, ...all.filter(() => rnd(3) === 0)], rnd);
        const batches: Row[][] = [];
        for (let at = 0; at < delivered.length;) {
          const size = 1 + rnd(12);
          batches.push(delivered.slice(at, at + size));
          at += size;
        }
        // Four connections take the statements as they come free.
        let next = 0;
        await Promise.all(Array.from({ length: 4 }, async () => {
          while (next < batches.length) {
            const batch = batches[next++] as Row[];
            await execute(
              pool,
              insertStatement(table, batch.length),
              batch.flatMap((r) => adjustRow(table, r).values),
            );
          }
        }));

        const keyOfValues = (values: readonly unknown[]) =>
          JSON.stringify(values.slice(0, table.primaryKey.length));
        const actual = new Map(
          (await tableRows(pool, table)).map((r) => {
            const values = table.insertColumns.map((c) => r[c]);
            return [keyOfValues(values), values];
          }),
        );
        assert.equal(actual.size, objects, `seed ${seed}`);
        for (const want of expected) {
          assert.deepEqual(
            actual.get(keyOfValues(want)),
            want,
            `seed ${seed}: ${keyOfValues(want)}`,
          );
        }
      }
    } finally {
      await pool.end();
    }
  });
}

Deno.test("status order: an older snapshot never replaces a newer row, and a row dated more than an hour ahead of MySQL's clock is replaced by any snapshot (docs/writers.md#newest-snapshot)", async () => {
  const table = TABLES.statusengine_hoststatus;
  await using db = await createScratchDatabase();
  await db.query(createTableStatement(table, { collation: "utf8mb4_general_ci" }));
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 1 });
  try {
    const now = Math.floor(Date.now() / 1000);
    const write = (time: number, output: string) =>
      execute(
        pool,
        insertStatement(table, 1),
        adjustRow(table, {
          hostname: "h",
          status_update_time: time,
          last_check: time,
          output,
          node_name: "n",
        }).values,
      );
    const row = async () =>
      (await db.query<{ status_update_time: number; output: string }[]>(
        `SELECT status_update_time, output FROM ${table.name}`,
      ))[0];
    await write(now, "newer");
    await write(now - 10, "older");
    assert.deepEqual(await row(), { status_update_time: now, output: "newer" });
    // A core whose clock ran a day ahead, then set right: its next snapshot is taken.
    await write(now + 86_400, "from a clock a day ahead");
    await write(now + 1, "after the clock was set right");
    assert.deepEqual(await row(), {
      status_update_time: now + 1,
      output: "after the clock was set right",
    });
  } finally {
    await pool.end();
  }
});
