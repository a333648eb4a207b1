/**
 * The `perf_data` parser (docs/perfdata.md#parsing; a port of the legacy state machine: a missing
 * unit is NULL, every gauge kept, PHP's `trim()` set) and the `statusengine_perfdata` rows built
 * from it.
 *
 * @module
 */

import type { PerfdataLabelQuotes, Row, TableRow } from "./types.ts";

/**
 * Warning, critical, min and max of a gauge, each a plain number or null (absent, empty, or a
 * Nagios range such as `10:20` or `@5`). Not stored in MySQL; InfluxDB writes them as fields.
 */
export interface PerfdataThresholds {
  readonly warn: number | null;
  readonly crit: number | null;
  readonly min: number | null;
  readonly max: number | null;
}

/**
 * Key of a `statusengine_perfdata` row under which its gauge's thresholds travel to the
 * time-series backends. A symbol, so the row's string keys stay exactly the table's columns;
 * always present (null when the gauge has none) so every row has the same shape.
 */
export const PERFDATA_THRESHOLDS: unique symbol = Symbol("perfdata thresholds");

/** One gauge of a `perf_data` string (docs/perfdata.md#algorithm). */
export interface PerfdataMetric {
  /** Text before the first `=`; quotes are kept and `"` is normalised to `'`. */
  readonly label: string;
  readonly value: number;
  /** `''` when absent (docs/tables.md#perfdata-unit-null); `%%` is collapsed to `%`. */
  readonly unit: string;
  /** Present only when at least one of warn, crit, min, max is a plain number. */
  readonly thresholds?: PerfdataThresholds;
}

const SPACE = 0x20;
const QUOTE = 0x27; // '
const EQUALS = 0x3d;
const SEMICOLON = 0x3b;
const COMMA = 0x2c;
const DOT = 0x2e;
const MINUS = 0x2d;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/**
 * Whitespace removed around `perf_data` before parsing (docs/tables.md#perfdata-whitespace): PHP's
 * `trim()` set (space, tab, LF, CR, NUL, VT), which is what the legacy worker used. Not
 * String#trim: that one also removes NBSP and other Unicode spaces but keeps NUL.
 */
function isTrimmed(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d || c === 0x00 || c === 0x0b;
}

function isValueChar(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || c === DOT || c === MINUS || c === COMMA;
}

/**
 * A label without the plugin's quotes (docs/perfdata.md#labels): plugins quote a label that holds
 * spaces (`'memory used'`) and write a quote inside one as `''`. A label that starts and
 * ends with a quote loses them and has `''` read as `'`; any other label is returned as it is.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { plainLabel } from "./perfdata.ts";
 * assert.equal(plainLabel("'memory used'"), "memory used");
 * assert.equal(plainLabel("'it''s'"), "it's");
 * assert.equal(plainLabel("rta"), "rta");
 * ```
 */
export function plainLabel(label: string): string {
  const n = label.length;
  if (n < 2 || label.charCodeAt(0) !== QUOTE || label.charCodeAt(n - 1) !== QUOTE) return label;
  const inner = label.slice(1, n - 1);
  return inner.includes("''") ? inner.replaceAll("''", "'") : inner;
}

/** Parses one token (docs/perfdata.md#algorithm) and appends the gauge if it has a value. */
function parseToken(s: string, start: number, end: number, out: PerfdataMetric[]): void {
  // Bounded scans, not indexOf: an unbounded search would look past the token and make a long
  // perf_data string without `=` or `;` quadratic.
  let eq = start;
  while (eq < end && s.charCodeAt(eq) !== EQUALS) eq++;
  if (eq === end) return;
  let i = eq + 1;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (!isValueChar(c)) break;
    i++;
  }
  if (i === eq + 1) return; // `U`, `+5`, empty: no value characters at all
  let valueText = s.slice(eq + 1, i);
  if (valueText.includes(",")) valueText = valueText.replaceAll(",", ".");
  // Number() accepts exactly the shapes the value grammar can still produce that are doubles
  // (`.5`, `5.`, `-1`) and yields NaN for `1.2.3`, `-`, `--1`, `1-2` (docs/perfdata.md#algorithm);
  // more than 309 digits yield ±Infinity, which no column or backend takes.
  const value = Number(valueText);
  if (!Number.isFinite(value)) return;
  let unitEnd = i;
  while (unitEnd < end && s.charCodeAt(unitEnd) !== SEMICOLON) unitEnd++;
  let unit = s.slice(i, unitEnd);
  if (unit === "%%") unit = "%";
  const label = s.slice(start, eq);
  const thresholds = unitEnd < end ? parseThresholds(s, unitEnd + 1, end) : null;
  out.push(thresholds === null ? { label, value, unit } : { label, value, unit, thresholds });
}

/** One `;`-separated threshold field: a plain number (`,` read as `.`), else null. */
function thresholdValue(s: string, start: number, end: number): number | null {
  if (start >= end) return null;
  for (let i = start; i < end; i++) if (!isValueChar(s.charCodeAt(i))) return null;
  let text = s.slice(start, end);
  if (text.includes(",")) text = text.replaceAll(",", ".");
  const n = Number(text);
  return Number.isFinite(n) ? n : null;
}

/** `warn;crit;min;max` after the unit's `;`; null when none of them is a plain number. */
function parseThresholds(s: string, start: number, end: number): PerfdataThresholds | null {
  const fields: (number | null)[] = [null, null, null, null];
  let from = start;
  for (let f = 0; f < 4 && from <= end; f++) {
    let to = from;
    while (to < end && s.charCodeAt(to) !== SEMICOLON) to++;
    fields[f] = thresholdValue(s, from, to);
    from = to + 1;
  }
  const [warn = null, crit = null, min = null, max = null] = fields;
  if (warn === null && crit === null && min === null && max === null) return null;
  return { warn, crit, min, max };
}

/**
 * Split a `perf_data` string into gauges and parse each (docs/perfdata.md#algorithm). Never throws:
 * a token without `=` or without a numeric value is skipped and the others are kept. Every gauge is
 * returned, repeated labels included, in input order (docs/tables.md#perfdata-labels).
 *
 * @example Two gauges
 * ```ts
 * import assert from "node:assert/strict";
 * import { parsePerfdata } from "./perfdata.ts";
 * const m = parsePerfdata("rta=0.084000ms;100;500;0 pl=0%;20;60;0");
 * assert.ok(m.length === 2 && m[0]?.unit === "ms" && m[1]?.label === "pl");
 * ```
 */
export function parsePerfdata(perfData: string): PerfdataMetric[] {
  let start = 0;
  let end = perfData.length;
  while (start < end && isTrimmed(perfData.charCodeAt(start))) start++;
  while (end > start && isTrimmed(perfData.charCodeAt(end - 1))) end--;
  const out: PerfdataMetric[] = [];
  if (start === end) return out;

  // Both quote characters toggle quote mode and both are written as `'`
  // (docs/perfdata.md#algorithm), so normalising first gives the same tokens and lets every token
  // be a plain slice.
  const s = perfData.includes('"') ? perfData.replaceAll('"', "'") : perfData;
  let inQuotes = false;
  let tokenStart = start;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) {
      inQuotes = !inQuotes;
    } else if (c === SPACE && !inQuotes) {
      // Only U+0020 separates gauges; a tab or newline stays inside the token
      // (docs/perfdata.md#algorithm).
      if (i > tokenStart) parseToken(s, tokenStart, i, out);
      tokenStart = i + 1;
    }
  }
  if (end > tokenStart) parseToken(s, tokenStart, end, out);
  return out;
}

/**
 * The `statusengine_perfdata` rows of one reduced service check (docs/tables.md#perfdata-queue,
 * docs/perfdata.md#storage), one per gauge with a numeric value: `timestamp` in milliseconds and
 * `timestamp_unix` in seconds, both from the payload `start_time` (D5). Appended to `out`, the
 * job's rows when decoding.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parsePerfdata, perfdataRows } from "./perfdata.ts";
 * const rows = perfdataRows("localhost", "Current Users", 1785470660, parsePerfdata("users=0;20"));
 * assert.ok(rows[0]?.row.timestamp === 1785470660000);
 * ```
 */
export function perfdataRows(
  hostname: string,
  serviceDescription: string,
  startTime: number,
  metrics: readonly PerfdataMetric[],
  out: TableRow[] = [],
  quotes: PerfdataLabelQuotes = "keep",
): TableRow[] {
  const ms = startTime * 1000;
  for (const m of metrics) {
    out.push({
      table: "statusengine_perfdata",
      row: {
        hostname,
        service_description: serviceDescription,
        label: quotes === "keep" ? m.label : plainLabel(m.label),
        timestamp: ms,
        timestamp_unix: startTime,
        value: m.value,
        // No unit is SQL NULL, as the legacy worker writes it (docs/tables.md#perfdata-unit-null).
        unit: m.unit === "" ? null : m.unit,
        [PERFDATA_THRESHOLDS]: m.thresholds ?? null,
      },
    });
  }
  return out;
}

/** The thresholds a `statusengine_perfdata` row carries for the time-series backends, or null. */
export function perfdataThresholds(row: Row): PerfdataThresholds | null {
  return (row as { readonly [PERFDATA_THRESHOLDS]?: PerfdataThresholds | null })[
    PERFDATA_THRESHOLDS
  ] ?? null;
}

/**
 * The shortest decimal that round-trips, never in exponent notation (Carbon rejects it,
 * docs/perfdata.md#line-format; InfluxDB's line protocol is written the same way): `1e-7` →
 * `0.0000001`. It lives beside the parser because every perfdata backend writes values with it.
 */
export function positionalDecimal(value: number): string {
  const text = String(value);
  const e = text.indexOf("e");
  if (e === -1) return text;
  const negative = text.startsWith("-");
  const mantissa = text.slice(negative ? 1 : 0, e);
  const exponent = Number(text.slice(e + 1));
  const dot = mantissa.indexOf(".");
  const digits = mantissa.replace(".", "");
  const intLen = (dot === -1 ? mantissa.length : dot) + exponent;
  let out: string;
  if (intLen <= 0) out = `0.${"0".repeat(-intLen)}${digits}`;
  else if (intLen >= digits.length) out = digits + "0".repeat(intLen - digits.length);
  else out = `${digits.slice(0, intLen)}.${digits.slice(intLen)}`;
  return negative ? `-${out}` : out;
}
