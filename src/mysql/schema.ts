/**
 * Create the schema where it is missing and report how an existing database differs from
 * the catalogue (D2). Nothing here drops, alters or rewrites anything that exists.
 *
 * @module
 */
import { ALL_TABLES, type Column, type Table, type TableName, TABLES } from "./catalogue.ts";
import {
  chooseCollation,
  columnDefinition,
  createTableStatement,
  type QueryConnection,
  quoteIdentifier,
  TABLE_CHARSET,
  TABLE_ENGINE,
} from "./ddl.ts";
import { errorMessage, WorkerError } from "../util/errors.ts";

// Reading information_schema

/** A row of `information_schema.TABLES`, reduced to what the diff needs. */
export interface TableRow {
  readonly tableName: string;
  readonly tableType: string;
  readonly engine: string | null;
  readonly collation: string | null;
}

/** A row of `information_schema.COLUMNS`, reduced to what the diff needs. */
export interface ColumnRow {
  readonly tableName: string;
  readonly columnName: string;
  readonly position: number;
  /** `COLUMN_TYPE`, e.g. `int(10) unsigned` (MariaDB) or `int unsigned` (MySQL 8). */
  readonly columnType: string;
  /** `YES` or `NO`. */
  readonly isNullable: string;
  /** As the server spells it (see `normalizeColumnDefault`). */
  readonly columnDefault: string | null;
  readonly extra: string;
  readonly characterSet: string | null;
}

/** A row of `information_schema.STATISTICS` (one per index column). */
export interface StatisticsRow {
  readonly tableName: string;
  readonly indexName: string;
  readonly seqInIndex: number;
  /** Null for a MySQL 8 functional index part. */
  readonly columnName: string | null;
  /** 0 for a unique index (the primary key included), 1 otherwise. */
  readonly nonUnique: number;
  /** Index prefix length, null for the whole column. */
  readonly subPart: number | null;
}

/** One partitioned table from `information_schema.PARTITIONS`. */
export interface PartitionRow {
  readonly tableName: string;
  readonly method: string;
  readonly expression: string;
}

/** What `information_schema` says about the catalogue's tables in one database. */
export interface SchemaSnapshot {
  readonly tables: readonly TableRow[];
  readonly columns: readonly ColumnRow[];
  readonly statistics: readonly StatisticsRow[];
  readonly partitions: readonly PartitionRow[];
}

/** Rows as text or null: on MySQL 8, mysql2 may return information_schema text as bytes. */
async function rowsOf(
  conn: QueryConnection,
  sql: string,
  params: unknown[],
): Promise<Record<string, string | null>[]> {
  const [rows] = await conn.query(sql, params);
  return (rows as Record<string, unknown>[]).map((row) =>
    Object.fromEntries(
      Object.entries(row).map(([k, v]) => [
        k,
        v === null || v === undefined
          ? null
          : v instanceof Uint8Array
          ? new TextDecoder().decode(v)
          : String(v),
      ]),
    )
  );
}

async function currentDatabase(conn: QueryConnection): Promise<string> {
  const [row] = await rowsOf(conn, "SELECT DATABASE() AS db", []);
  const name = row?.db ?? null;
  if (name === null) {
    throw new Error("Cannot inspect the schema: the connection has no database selected");
  }
  return name;
}

/** How the connection's database differs from the catalogue (empty when it matches). */
export async function diffSchema(conn: QueryConnection): Promise<SchemaDifference[]> {
  const db = await currentDatabase(conn);
  const names = ALL_TABLES.map((t) => t.name);
  const read = (select: string, from: string, and = "") =>
    rowsOf(
      conn,
      `SELECT ${select} FROM information_schema.${from} ` +
        `WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN (?)${and}`,
      [db, names],
    );
  const [tables, columns, statistics, partitions] = await Promise.all([
    read(
      "TABLE_NAME AS `tableName`, TABLE_TYPE AS `tableType`, ENGINE AS `engine`, " +
        "TABLE_COLLATION AS `collation`",
      "TABLES",
    ),
    read(
      "TABLE_NAME AS `tableName`, COLUMN_NAME AS `columnName`, ORDINAL_POSITION AS `position`, " +
        "COLUMN_TYPE AS `columnType`, IS_NULLABLE AS `isNullable`, " +
        "COLUMN_DEFAULT AS `columnDefault`, COALESCE(EXTRA, '') AS `extra`, " +
        "CHARACTER_SET_NAME AS `characterSet`",
      "COLUMNS",
    ),
    read(
      "TABLE_NAME AS `tableName`, INDEX_NAME AS `indexName`, SEQ_IN_INDEX AS `seqInIndex`, " +
        "COLUMN_NAME AS `columnName`, NON_UNIQUE AS `nonUnique`, SUB_PART AS `subPart`",
      "STATISTICS",
    ),
    read(
      "DISTINCT TABLE_NAME AS `tableName`, COALESCE(PARTITION_METHOD, '') AS `method`, " +
        "COALESCE(PARTITION_EXPRESSION, '') AS `expression`",
      "PARTITIONS",
      " AND PARTITION_NAME IS NOT NULL",
    ),
  ]);
  return compareSchema({
    tables: tables as unknown as TableRow[],
    columns: columns.map((r) => ({ ...r, position: Number(r.position) })) as unknown as ColumnRow[],
    statistics: statistics.map((r) => ({
      ...r,
      seqInIndex: Number(r.seqInIndex),
      nonUnique: Number(r.nonUnique),
      subPart: r.subPart === null ? null : Number(r.subPart),
    })) as unknown as StatisticsRow[],
    partitions: partitions as unknown as PartitionRow[],
  });
}

// Normalisation: harmless spelling differences between MySQL 8 and MariaDB

/**
 * Canonical spelling of a column type for comparison. MySQL 8.0.17+ no longer reports integer
 * display widths (`int(11)` → `int`), MariaDB and the catalogue do; the width changes nothing
 * stored, so it is dropped on both sides. `integer`/`bool`/`boolean` are aliases MySQL may echo.
 */
export function normalizeColumnType(type: string): string {
  let t = type.trim().toLowerCase().replace(/\s+/g, " ");
  if (t === "bool" || t === "boolean") t = "tinyint(1)";
  t = t.replace(/^integer\b/, "int");
  return t.replace(/^(tinyint|smallint|mediumint|int|bigint)\(\d+\)/, "$1");
}

/**
 * Canonical value of a column default (`COLUMN_DEFAULT` or a catalogue literal) for comparison;
 * `null` means "no default" or `DEFAULT NULL`, which mean the same for a nullable column.
 * MariaDB ≥ 10.2.7 quotes strings (`'3.0.0'`) and reports `DEFAULT NULL` as the text `NULL`;
 * MySQL 8 reports the bare string and SQL NULL. Numbers may come back as `0` or `0.0`.
 */
export function normalizeColumnDefault(value: string | null): string | null {
  if (value === null || value === "NULL") return null;
  const quoted = /^'(.*)'$/s.exec(value);
  if (quoted?.[1] !== undefined) return quoted[1].replaceAll("''", "'");
  if (/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(value.trim())) {
    return String(Number(value));
  }
  return value;
}

/**
 * Canonical partition expression: MariaDB reports `` `start_time` DIV 86400 ``, MySQL 8
 * lower-cases the operator and may add parentheses, none of which means anything here.
 */
export function normalizePartitionExpression(expression: string): string {
  return expression.replace(/[`()\s]/g, "").toLowerCase();
}

/**
 * A partitioning as an operator reads it (`RANGE (start_time DIV 86400)`), shown by `schema
 * --check` and `cleanup`. Only for showing: {@linkcode normalizePartitionExpression} removes every
 * blank and would print `start_timediv86400`.
 *
 * @example MySQL 8's report of the schema's own partitioning
 * ```ts
 * import assert from "node:assert/strict";
 * import { describePartitioning } from "./schema.ts";
 * assert.equal(describePartitioning("range", "(`start_time` div 86400)"), "RANGE (start_time div 86400)");
 * ```
 */
export function describePartitioning(method: string, expression: string): string {
  let text = expression.replace(/`/g, "").replace(/\s+/g, " ").trim();
  while (text.startsWith("(") && closingParenthesis(text) === text.length - 1) {
    text = text.slice(1, -1).trim();
  }
  return `${method.toUpperCase()} (${text})`;
}

/** Index of the parenthesis that closes the one opening `text`, or -1. */
function closingParenthesis(text: string): number {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "(") depth++;
    if (text[i] === ")" && --depth === 0) return i;
  }
  return -1;
}

// Differences

/**
 * One column as written (catalogue) or reported (server, `default` as `COLUMN_DEFAULT`); compared
 * normalised, shown as is.
 */
export type ColumnShape = Pick<Column, "type" | "nullable" | "default" | "autoIncrement">;

/** A difference of kind `K` in table `table`, with the fields `F`. */
type Diff<K extends string, F = unknown> =
  & { readonly kind: K; readonly table: TableName }
  & Readonly<F>;
type Both<T> = { expected: T; actual: T };

/** A difference without its table. */
type DiffBody = SchemaDifference extends infer D ? D extends unknown ? Omit<D, "table"> : never
  : never;

/** One way an existing database differs from the catalogue. */
export type SchemaDifference =
  | Diff<"missing_table">
  | Diff<"not_a_table", { tableType: string }>
  | Diff<"table_engine" | "table_charset", { expected: string; actual: string | null }>
  | Diff<"missing_column", { column: string; expected: ColumnShape }>
  | Diff<"extra_column", { column: string; actual: ColumnShape }>
  | Diff<"column_definition", { column: string } & Both<ColumnShape>>
  | Diff<"column_charset", { column: string; expected: string; actual: string | null }>
  | Diff<"column_order" | "primary_key", Both<readonly string[]>>
  | Diff<"missing_index", { index: string; expected: readonly string[] }>
  | Diff<"index_columns", { index: string } & Both<readonly string[]>>
  | Diff<"extra_index", { index: string; columns: readonly string[] }>
  /** `upserted`: the table is written with ON DUPLICATE KEY UPDATE, which the index would misdirect. */
  | Diff<
    "unexpected_unique_index",
    { index: string; columns: readonly string[]; upserted: boolean }
  >
  /** e.g. `RANGE (start_time DIV 86400)`; null for "not partitioned". */
  | Diff<"partitioning", Both<string | null>>;

function actualShape(row: ColumnRow): ColumnShape {
  return {
    type: row.columnType,
    nullable: row.isNullable.toUpperCase() === "YES",
    default: row.columnDefault,
    autoIncrement: /\bauto_increment\b/i.test(row.extra),
  };
}

function sameShape(a: ColumnShape, b: ColumnShape): boolean {
  return normalizeColumnType(a.type) === normalizeColumnType(b.type) &&
    a.nullable === b.nullable &&
    normalizeColumnDefault(a.default) === normalizeColumnDefault(b.default) &&
    a.autoIncrement === b.autoIncrement;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

function indexesOf(rows: readonly StatisticsRow[]) {
  const indexes = new Map<string, { name: string; unique: boolean; columns: string[] }>();
  for (const [name, parts] of Map.groupBy(rows, (r) => r.indexName)) {
    parts.sort((a, b) => a.seqInIndex - b.seqInIndex);
    indexes.set(name, {
      name,
      unique: parts.every((p) => p.nonUnique === 0),
      // A prefix index is not the index the catalogue describes; show the prefix so it differs.
      columns: parts.map((p) => {
        const column = p.columnName ?? "(expression)";
        return p.subPart === null ? column : `${column}(${p.subPart})`;
      }),
    });
  }
  return indexes;
}

type Partitioning = Pick<PartitionRow, "method" | "expression">;

/** Whether two partitionings (null: not partitioned) are the same, expressions normalised. */
export function samePartitioning(a: Partitioning | null, b: Partitioning | null): boolean {
  if (a === null || b === null) return a === b;
  return a.method.toUpperCase() === b.method.toUpperCase() &&
    normalizePartitionExpression(a.expression) === normalizePartitionExpression(b.expression);
}

/**
 * Every difference of a snapshot from the catalogue, table by table in catalogue order. Pure:
 * unit-testable with literal `information_schema` rows from either server.
 */
export function compareSchema(
  snapshot: SchemaSnapshot,
  tables: readonly Table[] = ALL_TABLES,
): SchemaDifference[] {
  const differences: SchemaDifference[] = [];
  let name: TableName;
  const add = (d: DiffBody) => differences.push({ ...d, table: name } as SchemaDifference);
  const tableRows = new Map(snapshot.tables.map((t) => [t.tableName, t]));
  const columnsByTable = Map.groupBy(snapshot.columns, (c) => c.tableName);
  const statsByTable = Map.groupBy(snapshot.statistics, (s) => s.tableName);
  const partitionsByTable = new Map(snapshot.partitions.map((p) => [p.tableName, p]));

  for (const table of tables) {
    name = table.name;
    const tableRow = tableRows.get(name);
    if (tableRow === undefined) {
      add({ kind: "missing_table" });
      continue;
    }
    if (tableRow.tableType.toUpperCase() !== "BASE TABLE") {
      add({ kind: "not_a_table", tableType: tableRow.tableType });
      continue;
    }
    if (tableRow.engine?.toLowerCase() !== TABLE_ENGINE.toLowerCase()) {
      add({ kind: "table_engine", expected: TABLE_ENGINE, actual: tableRow.engine });
    }
    // The character set matters, the collation does not (docs/tables.md#utf8mb4).
    const charset = tableRow.collation?.split("_")[0] ?? null;
    if (charset !== TABLE_CHARSET) {
      add({ kind: "table_charset", expected: TABLE_CHARSET, actual: charset });
    }

    const actualColumns = [...(columnsByTable.get(name) ?? [])].sort((a, b) =>
      a.position - b.position
    );
    const actualByName = new Map(actualColumns.map((c) => [c.columnName, c]));
    const expectedNames = new Set(table.columns.map((c) => c.name));
    for (const expected of table.columns) {
      const column = expected.name;
      const row = actualByName.get(column);
      if (row === undefined) {
        add({ kind: "missing_column", column, expected });
        continue;
      }
      const actual = actualShape(row);
      if (!sameShape(expected, actual)) {
        add({ kind: "column_definition", column, expected, actual });
      }
      if (expected.sqlType.kind === "string" && row.characterSet !== TABLE_CHARSET) {
        add({ kind: "column_charset", column, expected: TABLE_CHARSET, actual: row.characterSet });
      }
    }
    for (const row of actualColumns) {
      if (!expectedNames.has(row.columnName)) {
        add({ kind: "extra_column", column: row.columnName, actual: actualShape(row) });
      }
    }
    // Order among the columns both sides have; missing and extra ones are reported above.
    const expectedOrder = table.columns.map((c) => c.name).filter((c) => actualByName.has(c));
    const actualOrder = actualColumns.map((c) => c.columnName).filter((c) => expectedNames.has(c));
    if (!sameList(expectedOrder, actualOrder)) {
      add({ kind: "column_order", expected: expectedOrder, actual: actualOrder });
    }

    const indexes = indexesOf(statsByTable.get(name) ?? []);
    const actualPrimary = indexes.get("PRIMARY")?.columns ?? [];
    if (!sameList(table.primaryKey, actualPrimary)) {
      add({ kind: "primary_key", expected: table.primaryKey, actual: actualPrimary });
    }
    const expectedIndexes = new Set(table.indexes.map((i) => i.name));
    for (const { name: index, columns: expected } of table.indexes) {
      const actual = indexes.get(index)?.columns;
      if (actual === undefined) add({ kind: "missing_index", index, expected });
      else if (!sameList(expected, actual)) add({ kind: "index_columns", index, expected, actual });
    }
    const upserted = ["full_upsert", "history_upsert", "downtime"].includes(table.writeMode);
    for (const { name: index, unique, columns } of indexes.values()) {
      if (index === "PRIMARY") continue;
      if (unique) {
        // ON DUPLICATE KEY UPDATE fires on any unique index (reported even for an expected one).
        add({ kind: "unexpected_unique_index", index, columns, upserted });
      } else if (!expectedIndexes.has(index)) {
        add({ kind: "extra_index", index, columns });
      }
    }

    const expected = table.partitionColumn === null
      ? null
      : { method: "RANGE", expression: `${table.partitionColumn} DIV 86400` };
    const actual = partitionsByTable.get(name) ?? null;
    const show = (p: Partitioning | null) => p && describePartitioning(p.method, p.expression);
    if (!samePartitioning(expected, actual)) {
      add({ kind: "partitioning", expected: show(expected), actual: show(actual) });
    }
  }
  return differences;
}

function formatShape(shape: ColumnShape): string {
  let s = `${shape.type} ${shape.nullable ? "NULL" : "NOT NULL"}`;
  if (normalizeColumnDefault(shape.default) !== null) s += ` DEFAULT ${shape.default}`;
  if (shape.autoIncrement) s += " AUTO_INCREMENT";
  return s;
}

function formatList(list: readonly string[]): string {
  return `(${list.join(", ")})`;
}

/** `is <actual>, expected <expected>`, a missing side shown as `none`. */
function isNot(actual: string | null, expected: string | null): string {
  return `is ${actual ?? "none"}, expected ${expected ?? "none"}`;
}

const INTEGER_WIDTHS = ["tinyint", "smallint", "mediumint", "int", "bigint"];

/**
 * Whether an actual column type holds more than the expected one (a longer varchar, a larger
 * integer of the same signedness): the worker fits its values to the expected one anyway, and a
 * MODIFY back would cut what the column holds, so none is offered.
 */
function wider(actual: string, expected: string): boolean {
  const [a, e] = [normalizeColumnType(actual), normalizeColumnType(expected)];
  const length = (t: string) => Number(/^varchar\((\d+)\)$/.exec(t)?.[1] ?? NaN);
  if (length(a) > length(e)) return true;
  const [aBase, ...aRest] = a.split(" ");
  const [eBase, ...eRest] = e.split(" ");
  const rank = (t: string | undefined) => INTEGER_WIDTHS.indexOf(t ?? "");
  return rank(eBase) >= 0 && rank(aBase) > rank(eBase) && aRest.join(" ") === eRest.join(" ");
}

function alter(table: string, change: string): string {
  return `ALTER TABLE ${quoteIdentifier(table)} ${change}`;
}

/** ` (ALTER TABLE … <change>)` for a catalogue column, or nothing for a column it does not know. */
function mend(d: { table: TableName; column: string }, change: (c: Column) => string): string {
  const column = TABLES[d.table]?.columns.find((c) => c.name === d.column);
  return column === undefined ? "" : ` (${alter(d.table, change(column))})`;
}

/** Where a missing column goes: after the catalogue column before it (added first if missing). */
function placeOf(table: TableName, column: Column): string {
  const before = TABLES[table].columns[column.position - 2];
  return before === undefined ? "FIRST" : `AFTER ${quoteIdentifier(before.name)}`;
}

/**
 * One line a difference, for the `schema` command's output. A table's character set statement
 * is named once: CONVERT converts every column, so the later lines of that table only point to it.
 */
export function describeDifferences(differences: readonly SchemaDifference[]): string[] {
  const converted = new Set<string>();
  return differences.map((d) => {
    if (d.kind !== "table_charset" && d.kind !== "column_charset") return describeDifference(d);
    const named = converted.has(d.table);
    converted.add(d.table);
    return describeDifference(d, named);
  });
}

/** One line describing a difference; `converted`: its table's CONVERT was named on a line before. */
export function describeDifference(d: SchemaDifference, converted = false): string {
  const where = "column" in d ? `${d.table}.${d.column}` : d.table;
  return `${where}: ${problemOf(d, converted)}`;
}

/** What differs, and where a statement mends it, that statement: ` (ALTER TABLE …)`. */
function problemOf(d: SchemaDifference, converted: boolean): string {
  const fix = (change: string) => ` (${alter(d.table, change)})`;
  // The statement that converts a table and every text column of it to the expected charset.
  const convert = (charset: string) => fix(`CONVERT TO CHARACTER SET ${charset}`);
  switch (d.kind) {
    case "missing_table":
      return "table is missing";
    case "not_a_table":
      return `is a ${d.tableType}, expected a base table`;
    case "table_engine":
      return `engine ${isNot(d.actual, d.expected)}${fix(`ENGINE=${d.expected}`)}`;
    case "table_charset":
      return `default character set ${isNot(d.actual, d.expected)}${convert(d.expected)}`;
    case "missing_column": {
      const add = mend(d, (c) => `ADD COLUMN ${columnDefinition(c)} ${placeOf(d.table, c)}`);
      return `column is missing (expected ${formatShape(d.expected)})${add}`;
    }
    case "extra_column": {
      const line = `column is not in the schema (${formatShape(d.actual)})`;
      const { type, nullable, autoIncrement } = d.actual;
      // The worker's INSERT names only catalogue columns: strict mode refuses it (1364).
      if (nullable || autoIncrement || normalizeColumnDefault(d.actual.default) !== null) {
        return line;
      }
      const modify = fix(`MODIFY ${quoteIdentifier(d.column)} ${type} NULL`);
      return `${line}; without a default every INSERT of the worker is refused${modify}`;
    }
    case "column_definition": {
      const is = isNot(formatShape(d.actual), formatShape(d.expected));
      const wide = wider(d.actual.type, d.expected.type);
      return `column ${is}${wide ? "" : mend(d, (c) => `MODIFY ${columnDefinition(c)}`)}`;
    }
    case "column_charset":
      return `character set ${isNot(d.actual, d.expected)}; values with characters it lacks ` +
        `(emoji) are refused${
          converted ? " (the CONVERT above converts it)" : convert(d.expected)
        }`;
    case "column_order":
      return `column order ${isNot(formatList(d.actual), formatList(d.expected))}`;
    case "primary_key": {
      const actual = d.actual.length === 0 ? "missing" : formatList(d.actual);
      return `primary key ${
        isNot(actual, d.expected.length === 0 ? null : formatList(d.expected))
      }`;
    }
    case "missing_index": {
      const columns = d.expected.map(quoteIdentifier).join(", ");
      const add = fix(`ADD INDEX ${quoteIdentifier(d.index)} (${columns})`);
      return `index ${d.index} ${formatList(d.expected)} is missing${add}`;
    }
    case "index_columns":
      return `index ${d.index} ${isNot(formatList(d.actual), formatList(d.expected))}`;
    case "unexpected_unique_index":
      return `secondary UNIQUE index ${d.index} ${formatList(d.columns)}${
        d.upserted
          ? " makes ON DUPLICATE KEY UPDATE skip or overwrite rows the primary key does not identify"
          : " is not in the schema"
      }`;
    case "extra_index":
      return `index ${d.index} ${formatList(d.columns)} is not in the schema`;
    case "partitioning":
      return `partitioning ${isNot(d.actual, d.expected)}`;
  }
}

// Operations on a live database

/** Which of the given tables do not exist in the connection's database, in the order given. */
export async function missingTables(
  conn: QueryConnection,
  tableNames: readonly TableName[],
): Promise<TableName[]> {
  if (tableNames.length === 0) return [];
  const db = await currentDatabase(conn);
  const rows = await rowsOf(
    conn,
    "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN (?)",
    [db, [...tableNames]],
  );
  const present = new Set(rows.map((r) => r.t));
  return tableNames.filter((t) => !present.has(t));
}

/** How many missing tables the start-up error names before it says "and N more". */
const MISSING_TABLES_LISTED = 3;

/**
 * Refuse to go on when tables the worker writes are missing (the `run` start-up check).
 *
 * @throws {WorkerError} (code `missing_tables`) Naming the tables and the `schema` command.
 */
export async function assertTablesExist(
  conn: QueryConnection,
  tableNames: readonly TableName[],
): Promise<void> {
  const missing = await missingTables(conn, tableNames);
  if (missing.length === 0) return;
  const database = await currentDatabase(conn);
  // The list is cut: nineteen table names on one line hide the sentence that says what to do.
  const more = missing.length - MISSING_TABLES_LISTED;
  const shown = missing.slice(0, MISSING_TABLES_LISTED).join(", ") +
    (more > 0 ? ` and ${more} more` : "");
  throw new WorkerError(
    "missing_tables",
    `${missing.length} table(s) missing in database "${database}" (${shown}): run the ` +
      `"schema" command with the same --mysql-url to create them`,
  );
}

export async function databaseExists(conn: QueryConnection, database: string): Promise<boolean> {
  const rows = await rowsOf(
    conn,
    "SELECT SCHEMA_NAME AS name FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    [database],
  );
  return rows.length > 0;
}

/** Create a database (if still missing) in the tables' character set and best collation (D2). */
export async function createDatabase(conn: QueryConnection, database: string): Promise<string> {
  const collation = await chooseCollation(conn);
  await conn.query(
    `CREATE DATABASE IF NOT EXISTS ${
      quoteIdentifier(database)
    } CHARACTER SET ${TABLE_CHARSET} COLLATE ${collation}`,
  );
  return collation;
}

/** Make a database the current one of a dedicated connection (not a pool). */
export async function useDatabase(conn: QueryConnection, database: string): Promise<void> {
  await conn.query(`USE ${quoteIdentifier(database)}`);
}

/**
 * The schema version recorded in `statusengine_dbversion` (row `id` 1): what the legacy
 * `database --update` writes for this schema, which the Statusengine UI reads.
 */
export const SCHEMA_VERSION = "3.7.4";

/** What `ensureSchema` did. */
export interface EnsureSchemaResult {
  /** In catalogue order; not a table another process created after the lookup. */
  readonly created: readonly TableName[];
  readonly collation: string;
  /**
   * The version row: `written` when it was missing and {@link SCHEMA_VERSION} was recorded;
   * otherwise `version` is what the row already holds (never rewritten, D2).
   */
  readonly dbversion: { readonly written: boolean; readonly version: string | null };
}

/** Whether a `CREATE TABLE IF NOT EXISTS` found its table there (note 1050 "already exists"). */
async function existedAlready(conn: QueryConnection, result: unknown): Promise<boolean> {
  if (((result as { warningStatus?: number }).warningStatus ?? 0) === 0) return false;
  const warnings = await rowsOf(conn, "SHOW WARNINGS", []);
  return warnings.some((w) => w.Code === "1050");
}

/**
 * Create every catalogue table that is missing, its partitions laid out from the week of `now`.
 * Existing tables are left exactly as they are (no ALTER, no DROP, no data touched, D2);
 * `diffSchema` reports how they differ.
 */
export async function ensureSchema(
  conn: QueryConnection,
  options: { readonly now?: Date | undefined } = {},
): Promise<EnsureSchemaResult> {
  const collation = await chooseCollation(conn);
  const missing = await missingTables(conn, ALL_TABLES.map((t) => t.name));
  const now = options.now ?? new Date();
  const created: TableName[] = [];
  for (const name of missing) {
    // IF NOT EXISTS: another process (a second worker, the operator) may create it meanwhile.
    const [result] = await conn.query(createTableStatement(TABLES[name], { collation, now })).catch(
      (err: unknown) => {
        // The server's reason (an index key too long for the row format, …) often names no table.
        throw new Error(`table ${name}: ${errorMessage(err)}`, { cause: err });
      },
    );
    // A table that exists by now answers with note 1050 and was not created here. Only that
    // note counts: MySQL 8 also warns of the integer display widths of a table it did create.
    if (!(await existedAlready(conn, result))) created.push(name);
  }
  // IGNORE: an existing row (another version, or one written meanwhile) is left as it is.
  const [inserted] = await conn.query(
    "INSERT IGNORE INTO `statusengine_dbversion` (`id`, `dbversion`) VALUES (1, ?)",
    [SCHEMA_VERSION],
  );
  const written = ((inserted as { affectedRows?: number }).affectedRows ?? 0) > 0;
  let version: string | null = SCHEMA_VERSION;
  if (!written) {
    const [rows] = await conn.query(
      "SELECT `dbversion` FROM `statusengine_dbversion` WHERE `id` = 1",
    );
    const value = (rows as { dbversion?: unknown }[])[0]?.dbversion;
    version = typeof value === "string" ? value : null;
  }
  return { created, collation, dbversion: { written, version } };
}
