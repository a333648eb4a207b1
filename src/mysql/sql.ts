/**
 * Multi-row INSERT statement texts for the batched writers (docs/writers.md#statement-shape).
 *
 * @module
 */
import { MAX_PLACEHOLDERS, type Table, type TableName, TABLES } from "./catalogue.ts";
import { quoteIdentifier } from "./ddl.ts";

interface StatementParts {
  readonly prefix: string;
  readonly tuple: string;
  readonly suffix: string;
  readonly columns: number;
  /** Texts by row count, least recently used first. */
  readonly texts: Map<number, string>;
}

/**
 * Statement texts kept per table: a small LRU, since a writer mostly repeats a few row counts but
 * any can occur, and a 700-row servicestatus text is ~70 kB.
 */
export const STATEMENT_CACHE_SIZE = 16;

const partsCache = new Map<TableName, StatementParts>();

function partsOf(table: Table): StatementParts {
  let parts = partsCache.get(table.name);
  if (parts !== undefined) return parts;
  if (!table.batched) {
    throw new TypeError(
      `Cannot build a batched INSERT for "${table.name}": its write mode "${table.writeMode}" is not batched`,
    );
  }
  const columns = table.insertColumns;
  let suffix = "";
  if (table.writeMode === "full_upsert" || table.writeMode === "history_upsert") {
    suffix = ` ON DUPLICATE KEY UPDATE ${newestSnapshotAssignments(table)}`;
  }
  parts = {
    // Never INSERT IGNORE (docs/writers.md#upsert-or-insert): it downgrades truncation and NOT NULL
    // errors to warnings.
    prefix: `INSERT INTO ${quoteIdentifier(table.name)} (${
      columns.map(quoteIdentifier).join(",")
    }) VALUES `,
    tuple: `(${new Array(columns.length).fill("?").join(",")})`,
    suffix,
    columns: columns.length,
    texts: new Map(),
  };
  partsCache.set(table.name, parts);
  return parts;
}

/**
 * How far ahead of MySQL's clock a status row's time may be before the row counts as older than
 * any snapshot (docs/writers.md#newest-snapshot): an hour, far beyond the clock skew
 * `--status-max-age` tolerates (5 min by default).
 */
export const FUTURE_SNAPSHOT_SECONDS = 3_600;

/**
 * What the snapshot's time column holds while one row is being updated and the inserted snapshot
 * has been found the newer: BIGINT's minimum, a time no core sends (a row stored with it would
 * only count as older than any snapshot).
 */
const NEWER_MARK = "-9223372036854775808";

/**
 * The assignments of an upsert that keep the greater in `snapshotOrder` of the stored and the
 * inserted row, whatever order they come in (docs/writers.md#newest-snapshot): the newer snapshot
 * of a status row, one fixed row of two history events sharing a key. The first
 * assignment decides once and marks a win with {@link NEWER_MARK}, the others follow the mark:
 * comparing a growing prefix in every assignment cost MariaDB 30–60 % more CPU per row.
 */
function newestSnapshotAssignments(table: Table): string {
  const [first, ...rest] = table.snapshotOrder;
  if (first === undefined) {
    throw new TypeError(`Cannot build an upsert for "${table.name}": no snapshot order`);
  }
  const compared = (column: string, value: string): string =>
    table.charLimits[column] === undefined ? value : `CAST(${value} AS BINARY)`;
  const order = table.snapshotOrder;
  const time = quoteIdentifier(first);
  const inserted = order.map((c) => compared(c, `VALUES(${quoteIdentifier(c)})`)).join(",");
  const stored = order.map((c) => compared(c, quoteIdentifier(c))).join(",");
  const future = table.writeMode === "full_upsert"
    ? ` OR ${time}>UNIX_TIMESTAMP()+${FUTURE_SNAPSHOT_SECONDS}`
    : "";
  const newer = `(${inserted})>=(${stored})${future}`;
  const marked = `${time}=${NEWER_MARK}`;
  return [
    `${time}=IF(${newer},${NEWER_MARK},${time})`,
    ...rest.map((c) => {
      const q = quoteIdentifier(c);
      return `${q}=IF(${marked},VALUES(${q}),${q})`;
    }),
    `${time}=IF(${marked},VALUES(${time}),${time})`,
  ].join(",");
}

/**
 * The multi-row statement text for `rowCount` rows of a batched table, cached per table and row
 * count: `INSERT INTO <t> (<cols>) VALUES (?,…),(?,…) [ON DUPLICATE KEY UPDATE …]`
 * (docs/writers.md#upsert-or-insert). `VALUES(col)` rather than a row alias because MariaDB lacks
 * the alias syntax.
 *
 * @throws {TypeError} If the table is not written by a batched writer.
 * @throws {RangeError} If `rowCount` is not a positive integer or the statement would exceed
 *   65,535 placeholders (docs/writers.md#statement-shape).
 */
export function insertStatement(table: TableName | Table, rowCount: number): string {
  const t = typeof table === "string" ? TABLES[table] : table;
  const parts = partsOf(t);
  const cached = parts.texts.get(rowCount);
  if (cached !== undefined) {
    parts.texts.delete(rowCount);
    parts.texts.set(rowCount, cached);
    return cached;
  }
  if (!Number.isSafeInteger(rowCount) || rowCount < 1) {
    throw new RangeError(
      `Cannot build an INSERT for "${t.name}": row count must be a positive integer, got ${rowCount}`,
    );
  }
  if (rowCount * parts.columns > MAX_PLACEHOLDERS) {
    throw new RangeError(
      `Cannot build an INSERT for "${t.name}": ${rowCount} rows × ${parts.columns} columns exceed ${MAX_PLACEHOLDERS} placeholders`,
    );
  }
  const text = `${parts.prefix}${parts.tuple}${
    `,${parts.tuple}`.repeat(rowCount - 1)
  }${parts.suffix}`;
  if (parts.texts.size >= STATEMENT_CACHE_SIZE) {
    const oldest = parts.texts.keys().next();
    if (oldest.done !== true) parts.texts.delete(oldest.value);
  }
  parts.texts.set(rowCount, text);
  return text;
}

/**
 * The INSERT of {@link insertStatement} (same table, columns and update clause) carrying no row:
 * MySQL refusing it refuses the statement, not a row, so the writer holds a lone row it rejected
 * that way instead of dead-lettering it (docs/writers.md#retry-policy).
 */
export function emptyInsertStatement(table: Table): string {
  const parts = partsOf(table);
  const nulls = new Array(parts.columns).fill("NULL").join(",");
  return `${parts.prefix.replace(/VALUES $/, "")}SELECT ${nulls} FROM DUAL WHERE 0${parts.suffix}`;
}

/**
 * How many rows of a plain-INSERT table equal one row in every inserted column (`<=>`, so NULL
 * equals NULL): `dead-letters replay` tells a row it replayed before from a missing one by it,
 * since these tables have no key (docs/running.md#dead-letters).
 */
export function identicalRowsStatement(table: Table): string {
  return `SELECT COUNT(*) AS n FROM ${quoteIdentifier(table.name)} WHERE ${
    table.insertColumns.map((c) => `${quoteIdentifier(c)} <=> ?`).join(" AND ")
  }`;
}

/**
 * A comparison of a composite key (columns prefixed by `alias`, e.g. `s.`) with a tuple, spelt out
 * column by column (`a > ? OR (a = ? AND b > ?)`): MariaDB reads a row constructor comparison
 * (`(a, b) > (?, ?)`) by scanning the whole index, the spelt-out form as a range of it.
 */
export function keyBound(
  key: readonly string[],
  alias: string,
  op: ">" | ">=" | "<=",
  tuple: readonly unknown[],
): { sql: string; values: unknown[] } {
  const [first, ...rest] = key;
  if (first === undefined) return { sql: "", values: [] };
  const c = `${alias}${quoteIdentifier(first)}`;
  if (rest.length === 0) return { sql: `${c} ${op} ?`, values: [tuple[0]] };
  // `c <strict> ? OR (c = ? AND <the bound of the other columns>)`.
  const inner = keyBound(rest, alias, op, tuple.slice(1));
  const strict = op === "<=" ? "<" : ">";
  return {
    sql: `(${c} ${strict} ? OR (${c} = ? AND ${inner.sql}))`,
    values: [tuple[0], tuple[0], ...inner.values],
  };
}
