/**
 * `CREATE TABLE` statements derived from the catalogue (D2).
 *
 * @module
 */
import type { Connection } from "mysql2/promise";
import type { Column, Table } from "./catalogue.ts";

/** The part of a mysql2 connection or pool the schema code needs. */
export type QueryConnection = Pick<Connection, "query">;

/**
 * Collations for the tables, best first (D2). `utf8mb4_0900_ai_ci` is what the production schema
 * declares but exists only on MySQL 8; MariaDB 10.x rejects it with error 1273, so we fall back to
 * `utf8mb4_general_ci`. The worker does not depend on the collation
 * (docs/tables.md#shared-table-properties).
 */
const PREFERRED_COLLATIONS: readonly string[] = Object.freeze([
  "utf8mb4_0900_ai_ci",
  "utf8mb4_general_ci",
]);

/** Engine of every table (docs/tables.md#shared-table-properties). */
export const TABLE_ENGINE = "InnoDB";

/** Default character set of every table (4-byte characters such as emoji must fit). */
export const TABLE_CHARSET = "utf8mb4";

/** How many weekly partitions `CREATE TABLE` lays out: the current ISO week and the next 4. */
export const INITIAL_WEEKLY_PARTITIONS = 5;

const SECONDS_PER_DAY = 86_400;
const MS_PER_DAY = SECONDS_PER_DAY * 1000;

/**
 * Pick the table collation from what the server offers.
 *
 * D2 asks to detect the server by its collations rather than by parsing version strings
 * (MariaDB has reported `5.5.5-10.x` and may one day add the MySQL 8 collation).
 *
 * @param conn Connection or pool.
 * @returns The first of `PREFERRED_COLLATIONS` the server knows.
 * @throws {Error} If the server knows none of them.
 */
export async function chooseCollation(conn: QueryConnection): Promise<string> {
  const [rows] = await conn.query(
    "SELECT COLLATION_NAME AS name FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (?)",
    [PREFERRED_COLLATIONS],
  );
  const available = new Set(
    (rows as { name: unknown }[]).map((r) => String(r.name)),
  );
  const collation = PREFERRED_COLLATIONS.find((c) => available.has(c));
  if (collation === undefined) {
    throw new Error(
      `Cannot choose a table collation: the server offers none of ${
        PREFERRED_COLLATIONS.map((c) => `"${c}"`).join(", ")
      }`,
    );
  }
  return collation;
}

/** An ISO 8601 week: ISO week-numbering year and week number 1–53. */
export interface IsoWeek {
  /** ISO week-numbering year (differs from the calendar year around New Year). */
  readonly year: number;
  /** Week number 1–53. */
  readonly week: number;
}

function floorMod(a: number, n: number): number {
  return ((a % n) + n) % n;
}

/**
 * ISO week of a day number (days since 1970-01-01 UTC).
 *
 * @param dayNumber Days since the epoch; the partitioning key is `<time> DIV 86400` (docs/tables.md#shared-table-properties).
 * @returns The ISO week containing that day.
 */
export function isoWeekOfDay(dayNumber: number): IsoWeek {
  // 1970-01-01 was a Thursday; ISO weekday Monday = 0 … Sunday = 6 here.
  const weekday = floorMod(dayNumber + 3, 7);
  // An ISO week belongs to the year its Thursday falls in.
  const thursday = dayNumber - weekday + 3;
  const year = new Date(thursday * MS_PER_DAY).getUTCFullYear();
  const jan1 = Date.UTC(year, 0, 1) / MS_PER_DAY;
  return { year, week: Math.floor((thursday - jan1) / 7) + 1 };
}

/** One weekly partition: `PARTITION <name> VALUES LESS THAN (<lessThan>)`. */
export interface WeeklyPartition {
  /** `p_<isoyear>_<isoweek>`, week zero-padded to two digits as in the dump (`p_2026_29`). */
  readonly name: string;
  /** Day number of the Monday that starts the following ISO week. */
  readonly lessThan: number;
}

/**
 * Weekly partitions starting with the ISO week that contains `now`
 * (docs/tables.md#shared-table-properties).
 *
 * The bound of `p_YYYY_WW` is the day number of the Monday that starts week WW+1, e.g.
 * `p_2026_29 VALUES LESS THAN (20654)` (2026-07-20). These give a new table its start; from then
 * on `cleanup` keeps the weeks ahead laid out and drops the expired ones (src/mysql/partitions.ts,
 * docs/retention.md), so `p_max` stays empty.
 *
 * @param now The current time.
 * @param count How many weeks, current one included.
 * @returns `count` partitions in ascending order.
 */
export function weeklyPartitions(
  now: Date,
  count: number = INITIAL_WEEKLY_PARTITIONS,
): WeeklyPartition[] {
  const today = Math.floor(now.getTime() / MS_PER_DAY);
  const monday = today - floorMod(today + 3, 7);
  const partitions: WeeklyPartition[] = [];
  for (let i = 0; i < count; i++) {
    const start = monday + 7 * i;
    const { year, week } = isoWeekOfDay(start);
    partitions.push({
      name: `p_${year}_${String(week).padStart(2, "0")}`,
      lessThan: start + 7,
    });
  }
  return partitions;
}

/** Options of `createTableStatement`. */
export interface CreateTableOptions {
  /** Table collation, normally from `chooseCollation` (D2). */
  readonly collation: string;
  /** Clock for the initial weekly partitions; defaults to the current time. */
  readonly now?: Date;
}

/**
 * Quote an identifier with backticks.
 *
 * @param name Identifier.
 * @returns The quoted identifier.
 */
export function quoteIdentifier(name: string): string {
  return `\`${name.replaceAll("`", "``")}\``;
}

function columnDefinition(column: Column): string {
  let sql = `${quoteIdentifier(column.name)} ${column.type} ${
    column.nullable ? "NULL" : "NOT NULL"
  }`;
  if (column.default !== null) sql += ` DEFAULT ${column.default}`;
  if (column.autoIncrement) sql += " AUTO_INCREMENT";
  return sql;
}

function columnList(columns: readonly string[]): string {
  return columns.map(quoteIdentifier).join(",");
}

/**
 * The `CREATE TABLE IF NOT EXISTS` statement of one table.
 *
 * @param table Catalogue table.
 * @param options Collation and the clock for the weekly partitions.
 * @returns The statement text.
 * @throws {TypeError} If the collation is not a `utf8mb4` collation.
 */
export function createTableStatement(table: Table, options: CreateTableOptions): string {
  if (!/^utf8mb4_[a-z0-9_]+$/.test(options.collation)) {
    throw new TypeError(
      `Cannot build CREATE TABLE for "${table.name}": collation "${options.collation}" is not a utf8mb4 collation`,
    );
  }
  const lines = table.columns.map((c) => `  ${columnDefinition(c)}`);
  if (table.primaryKey.length > 0) lines.push(`  PRIMARY KEY (${columnList(table.primaryKey)})`);
  for (const index of table.indexes) {
    lines.push(`  KEY ${quoteIdentifier(index.name)} (${columnList(index.columns)})`);
  }
  let sql = `CREATE TABLE IF NOT EXISTS ${quoteIdentifier(table.name)} (\n${
    lines.join(",\n")
  }\n) ENGINE=${TABLE_ENGINE} DEFAULT CHARSET=${TABLE_CHARSET} COLLATE=${options.collation}`;
  if (table.partitionColumn !== null) {
    const partitions = weeklyPartitions(options.now ?? new Date()).map(
      (p) => `  PARTITION ${p.name} VALUES LESS THAN (${p.lessThan})`,
    );
    partitions.push("  PARTITION p_max VALUES LESS THAN MAXVALUE");
    sql += `\nPARTITION BY RANGE (${
      quoteIdentifier(table.partitionColumn)
    } DIV ${SECONDS_PER_DAY})\n(${partitions.join(",\n").trimStart()})`;
  }
  return sql;
}
