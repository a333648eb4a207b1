/**
 * `CREATE TABLE` statements derived from the catalogue (D2), with their weekly partitions.
 *
 * @module
 */
import type { Connection } from "mysql2/promise";
import type { Column, Table } from "./catalogue.ts";

/** The part of a mysql2 connection or pool the schema code needs. */
export type QueryConnection = Pick<Connection, "query">;

/**
 * Collations for the tables, best first (D2): the production schema's `utf8mb4_0900_ai_ci` exists
 * only on MySQL 8 (MariaDB rejects it with error 1273). The worker does not depend on it.
 */
const PREFERRED_COLLATIONS = ["utf8mb4_0900_ai_ci", "utf8mb4_general_ci"];

export const TABLE_ENGINE = "InnoDB";

/** Default character set of every table (4-byte characters such as emoji must fit). */
export const TABLE_CHARSET = "utf8mb4";

/** How many weekly partitions `CREATE TABLE` lays out: the current ISO week and the next 4. */
export const INITIAL_WEEKLY_PARTITIONS = 5;

/** Seconds per partitioning day (`<time> DIV 86400`). */
export const SECONDS_PER_DAY = 86_400;
const MS_PER_DAY = SECONDS_PER_DAY * 1000;

/**
 * The first of `PREFERRED_COLLATIONS` the server offers. D2 detects the server by its collations,
 * not by version strings (MariaDB has reported `5.5.5-10.x`).
 *
 * @throws {Error} If the server knows none of them.
 */
export async function chooseCollation(conn: QueryConnection): Promise<string> {
  const [rows] = await conn.query(
    "SELECT COLLATION_NAME AS name FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (?)",
    [PREFERRED_COLLATIONS],
  );
  const available = new Set((rows as { name: unknown }[]).map((r) => String(r.name)));
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

/** The Monday (days since 1970-01-01 UTC, a Thursday) of the ISO week containing a day number. */
export function mondayOf(day: number): number {
  return day - (((day + 3) % 7) + 7) % 7;
}

/** The ISO week (its year is the one its Thursday falls in, 1–53) of a day number. */
export function isoWeekOfDay(dayNumber: number): { year: number; week: number } {
  const thursday = mondayOf(dayNumber) + 3;
  const year = new Date(thursday * MS_PER_DAY).getUTCFullYear();
  const jan1 = Date.UTC(year, 0, 1) / MS_PER_DAY;
  return { year, week: Math.floor((thursday - jan1) / 7) + 1 };
}

/** `p_<isoyear>_<isoweek>` of the ISO week that starts on `monday`, week padded as in the dump. */
export function weekName(monday: number): string {
  const { year, week } = isoWeekOfDay(monday);
  return `p_${year}_${String(week).padStart(2, "0")}`;
}

/** One weekly partition: `PARTITION <name> VALUES LESS THAN (<lessThan>)`. */
export interface WeeklyPartition {
  readonly name: string;
  /** Day number of the Monday that starts the following ISO week. */
  readonly lessThan: number;
}

/**
 * `count` weekly partitions starting with the ISO week that contains `now`, e.g. `p_2026_29
 * VALUES LESS THAN (20654)` (2026-07-20). They give a new table its start; from then on `cleanup`
 * keeps the weeks ahead laid out (docs/retention.md), so `p_max` stays empty.
 */
export function weeklyPartitions(
  now: Date,
  count: number = INITIAL_WEEKLY_PARTITIONS,
): WeeklyPartition[] {
  const monday = mondayOf(Math.floor(now.getTime() / MS_PER_DAY));
  return Array.from({ length: count }, (_, i) => ({
    name: weekName(monday + 7 * i),
    lessThan: monday + 7 * i + 7,
  }));
}

export function quoteIdentifier(name: string): string {
  return `\`${name.replaceAll("`", "``")}\``;
}

/** A column as `CREATE TABLE` and `ALTER TABLE … MODIFY` spell it, its name quoted. */
export function columnDefinition(column: Column): string {
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
 * The `CREATE TABLE IF NOT EXISTS` statement of one table, with the collation `chooseCollation`
 * picked and the weekly partitions of the week of `now`.
 *
 * @throws {TypeError} If the collation is not a `utf8mb4` collation.
 */
export function createTableStatement(
  table: Table,
  options: { readonly collation: string; readonly now?: Date },
): string {
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
