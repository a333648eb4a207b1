/**
 * D6: make one row's values fit their columns before they are bound. In strict mode one
 * over-long string or NULL for a NOT NULL column rejects the whole multi-row INSERT
 * (docs/tables.md#long-values); each adjustment is counted in
 * `statusengine_db_values_adjusted_total{table,reason}`.
 *
 * @module
 */
import { type Column, type Table, type TableName, TABLES } from "./catalogue.ts";
import type { Row, SqlValue } from "../events/mod.ts";

/**
 * Why a value was changed (the `reason` label; listed to pre-create the metric series): a string
 * cut to its column's code points, null for a NOT NULL column written as `''` or 0, a fraction
 * for an integer column rounded half away from zero (docs/tables.md#numbers), an integer clamped
 * into its column's range, a `tinyint(1)` flag other than 0/1 written as 1
 * (docs/tables.md#booleans).
 */
export const ADJUSTMENT_REASONS = Object.freeze(
  ["truncated", "null_to_default", "rounded", "clamped", "flag_normalised"] as const,
);
export type AdjustmentReason = (typeof ADJUSTMENT_REASONS)[number];

/** One change made to one value. */
export interface ValueAdjustment {
  readonly column: string;
  readonly reason: AdjustmentReason;
}

/** A row ready to bind. */
export interface AdjustedRow {
  /** In `table.insertColumns` order. */
  readonly values: SqlValue[];
  /** What was changed; empty (and shared) when nothing was. */
  readonly adjustments: readonly ValueAdjustment[];
}

const TEXT = 0;
const INTEGER = 1;
const FLAG = 2;
const DOUBLE = 3;

interface Descriptor {
  readonly name: string;
  readonly kind: typeof TEXT | typeof INTEGER | typeof FLAG | typeof DOUBLE;
  readonly nullable: boolean;
  readonly keepsNull: boolean;
  /** TEXT: code points; INTEGER: range. */
  readonly maxChars: number;
  readonly min: number;
  readonly max: number;
}

const NO_ADJUSTMENTS: readonly ValueAdjustment[] = Object.freeze([]);
const descriptorCache = new Map<TableName, readonly Descriptor[]>();

function describe(column: Column): Descriptor {
  const t = column.sqlType;
  const base = {
    name: column.name,
    nullable: column.nullable,
    keepsNull: column.keepsNull,
    maxChars: 0,
    min: 0,
    max: 0,
  };
  if (t.kind === "string") return { ...base, kind: TEXT, maxChars: t.maxChars };
  if (t.kind === "double") return { ...base, kind: DOUBLE };
  return { ...base, kind: t.flag ? FLAG : INTEGER, min: t.min, max: t.max };
}

/** Per-table descriptors in insert-column order, built once per table (this runs per row). */
function descriptorsOf(table: Table): readonly Descriptor[] {
  let descriptors = descriptorCache.get(table.name);
  if (descriptors === undefined) {
    descriptors = table.columns.filter((c) => !c.autoIncrement).map(describe);
    descriptorCache.set(table.name, descriptors);
  }
  return descriptors;
}

/**
 * `value` itself when it has at most `maxChars` code points, else its longest prefix that does,
 * never cut between a surrogate pair (`varchar(N)` counts code points, `length` UTF-16 units).
 */
export function truncateToCodePoints(value: string, maxChars: number): string {
  // A string never has more code points than UTF-16 units.
  if (value.length <= maxChars) return value;
  let index = 0;
  let count = 0;
  const length = value.length;
  while (index < length && count < maxChars) {
    const unit = value.charCodeAt(index);
    if (unit >= 0xd800 && unit <= 0xdbff && index + 1 < length) {
      const next = value.charCodeAt(index + 1);
      index += next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
    } else {
      index += 1;
    }
    count += 1;
  }
  return index >= length ? value : value.slice(0, index);
}

/**
 * Adjust one row and write its values, in insert-column order, into `values` from index `at`
 * on (by default appended); each adjustment is pushed to `adjustments`.
 *
 * A plain loop, not a `new Function` per table: that fitted servicestatus rows 7 times faster in
 * `deno bench`, but within the noise in a drain (docs/performance.md).
 */
export function appendAdjustedRow(
  table: Table,
  row: Row,
  values: SqlValue[],
  adjustments: ValueAdjustment[],
  at: number = values.length,
): void {
  const descriptors = descriptorsOf(table);
  for (let i = 0; i < descriptors.length; i++) {
    const d = descriptors[i] as Descriptor;
    values[at + i] = adjustValue(d, row[d.name], adjustments);
  }
}

function adjustValue(d: Descriptor, raw: SqlValue | undefined, adjustments: ValueAdjustment[]) {
  if (raw === null || raw === undefined) return nullFor(d, adjustments);
  switch (d.kind) {
    case TEXT: {
      const text = typeof raw === "string" ? raw : String(raw);
      const cut = truncateToCodePoints(text, d.maxChars);
      if (cut !== text) adjustments.push({ column: d.name, reason: "truncated" });
      return cut;
    }
    case INTEGER:
    case FLAG:
      return typeof raw === "number" ? integerFor(d, raw, adjustments) : raw;
    default:
      // D6: doubles are bound exactly as received, never rounded.
      return raw;
  }
}

/**
 * One value of `column` fitted exactly as {@link appendAdjustedRow} fits it in a row, for the key
 * of a single-row statement: a key compared with a row must hold the value the row was written
 * with (a clamped id, a cut name), or it never finds that row.
 */
export function fitKeyValue(table: TableName, column: string, value: SqlValue): SqlValue {
  const d = descriptorsOf(TABLES[table]).find((c) => c.name === column);
  return d === undefined ? value : adjustValue(d, value, []);
}

/** Adjust one row (D6); missing keys count as null. */
export function adjustRow(table: Table | TableName, row: Row): AdjustedRow {
  const t = typeof table === "string" ? TABLES[table] : table;
  const values: SqlValue[] = [];
  const adjustments: ValueAdjustment[] = [];
  appendAdjustedRow(t, row, values, adjustments);
  return { values, adjustments: adjustments.length === 0 ? NO_ADJUSTMENTS : adjustments };
}

function nullFor(d: Descriptor, adjustments: ValueAdjustment[]): SqlValue {
  if (d.kind === TEXT) {
    // '' for a JSON null (docs/tables.md#null-or-empty); an adjustment only for NOT NULL.
    if (d.keepsNull) return null;
    if (!d.nullable) adjustments.push({ column: d.name, reason: "null_to_default" });
    return "";
  }
  if (d.nullable) return null;
  adjustments.push({ column: d.name, reason: "null_to_default" });
  return 0;
}

function integerFor(d: Descriptor, value: number, adjustments: ValueAdjustment[]): number {
  // NaN cannot come from JSON; the server rejects it rather than we invent a value (D7).
  if (Number.isNaN(value)) return value;
  let n = value;
  if (!Number.isInteger(n) && Number.isFinite(n)) {
    n = n < 0 ? -Math.round(-n) : Math.round(n);
    adjustments.push({ column: d.name, reason: "rounded" });
  }
  if (d.kind === FLAG) {
    if (n === 0 || n === 1) return n;
    adjustments.push({ column: d.name, reason: "flag_normalised" });
    return 1;
  }
  if (n >= d.min && n <= d.max) return n;
  adjustments.push({ column: d.name, reason: "clamped" });
  return n < d.min ? d.min : d.max;
}
