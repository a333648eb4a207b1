/**
 * The fixtures of src/events/testdata and the rows they must produce, for the
 * end-to-end tests of both backends: what the decoder says, after the writer's
 * D6 adjustment, compared column by column with what MariaDB holds.
 */
import assert from "node:assert/strict";
import { decodeJob } from "../../src/events/decode.ts";
import type { QueueName } from "../../src/events/queues.ts";
import type { TableRow } from "../../src/events/types.ts";
import { adjustRow } from "../../src/mysql/values.ts";
import { type TableName, TABLES } from "../../src/mysql/catalogue.ts";

const FIXTURES = new URL("../../src/events/testdata/", import.meta.url);

export function fixture(queue: QueueName): string {
  return Deno.readTextFileSync(new URL(`${queue}.job`, FIXTURES));
}

/**
 * A fixture job whose event times (`timestamp`, `end_time`) are moved so that the newest is
 * `ageSeconds` old now; the spacing between its events is kept.
 */
export function fixtureAged(queue: QueueName, ageSeconds: number): string {
  const text = fixture(queue);
  const field = /"(timestamp|end_time)": (\d+)/g;
  const newest = Math.max(...[...text.matchAll(field)].map((m) => Number(m[2])));
  const shift = Math.floor(Date.now() / 1000) - ageSeconds - newest;
  return text.replace(field, (_, name, n) => `"${name}": ${Number(n) + shift}`);
}

/** A row of any table a fixture writes (the downtime upserts included). */
export interface FixtureRow {
  readonly table: TableName;
  readonly row: TableRow["row"];
}

/** Rows the decoder says a fixture must produce, after the writer's D6 adjustment. */
export function expectedRows(queue: QueueName): FixtureRow[] {
  const job = decodeJob(queue, fixture(queue), {
    nodeName: "N",
    nowSeconds: Date.now() / 1000,
    statusMaxAgeSeconds: 0,
  });
  if (job.kind === "rows") return job.rows;
  if (job.kind === "downtimes") {
    return job.statements.flatMap((s) =>
      s.kind === "upsert" ? [{ table: s.table, row: s.row }] : []
    );
  }
  return [];
}

export type DbRow = Record<string, unknown>;

export async function tableRows(
  db: { query<T>(sql: string): Promise<T> },
  table: string,
): Promise<DbRow[]> {
  const t = TABLES[table as TableName];
  const cols = t.insertColumns.map((c) => `\`${c}\``).join(", ");
  const order = t.primaryKey.length > 0 ? t.primaryKey.map((c) => `\`${c}\``).join(", ") : cols;
  return await db.query<DbRow[]>(`SELECT ${cols} FROM \`${table}\` ORDER BY ${order}`);
}

function normalise(value: unknown): unknown {
  if (typeof value === "bigint") return Number(value);
  return value;
}

/**
 * Assert that the database holds exactly the rows the fixtures of `queues` produce.
 *
 * @param db The worker's database.
 * @param queues Queues whose fixture was published once each.
 */
export async function assertFixtureRows(
  db: { query<T>(sql: string): Promise<T> },
  queues: readonly QueueName[],
): Promise<void> {
  const expected = new Map<string, DbRow[]>();
  for (const q of queues) {
    for (const { table, row } of expectedRows(q)) {
      const t = TABLES[table as TableName];
      const { values } = adjustRow(t, row);
      const dbRow: DbRow = {};
      t.insertColumns.forEach((c, i) => (dbRow[c] = values[i]));
      const list = expected.get(table) ?? [];
      list.push(dbRow);
      expected.set(table, list);
    }
  }
  assert.ok(expected.size >= 12, `fixtures cover ${expected.size} tables`);
  for (const [table, rows] of expected) {
    const got = (await tableRows(db, table)).map((r) =>
      Object.fromEntries(Object.entries(r).map(([k, v]) => [k, normalise(v)]))
    );
    assert.equal(got.length, rows.length, `${table}: row count`);
    for (const want of rows) {
      const match = got.find((g) =>
        TABLES[table as TableName].insertColumns.every((c) => Object.is(g[c], want[c]))
      );
      assert.ok(
        match,
        `${table}: no stored row equals ${JSON.stringify(want)}\nstored: ${JSON.stringify(got)}`,
      );
    }
  }
}
