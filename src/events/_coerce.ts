/**
 * Field readers that turn JSON values into SQL values, and the per-job decode state that
 * records the first problem found.
 *
 * COERCION RULES (D7). The broker only ever
 * sends the "natural" JSON type of each field; anything else comes from another producer or a
 * bug, and the whole job is then dead-lettered (D7) rather than written with guessed values.
 *
 * | field kind | accepted | null / absent | anything else |
 * |---|---|---|---|
 * | integer (times, states, counters, ids) | finite integral number; string of 1–15 decimal digits with optional `-` (legacy PHP cast those) | 0 | `bad_type` (fractions included: truncating or rounding would be a guess) |
 * | double (`latency`, `execution_time`, `percent_state_change`, intervals) | finite number; decimal-number string | 0 | `bad_type` |
 * | flag (`tinyint(1)`) | number or numeric string: 0 → 0, any other → 1 (docs/tables.md#flag-columns); `true`/`false` → 1/0 | 0 | `bad_type` |
 * | text | string, unchanged (no trim; no truncation, that is D6 in the writer) | `''` (docs/tables.md#json-null-text), except `event_handler` and `command_args`, which keep SQL NULL (docs/tables.md#null-or-empty) | `bad_type` (numbers are not stringified) |
 * | required (row identity, routing discriminator, filter input) | as its kind | `missing_field` | `bad_type` |
 *
 * JSON.parse turns `1e400` into Infinity, so "finite" is checked, not assumed. Whitespace in
 * numeric strings is not accepted. A missing member is treated exactly like null
 * (docs/tables.md#null-or-empty). These rules are pinned by the "coercion:" tests in
 * tests/events/decode_test.ts.
 *
 * @module
 */

import type { DowntimeStatement, InvalidReason, PerfdataLabelQuotes, TableRow } from "./types.ts";

/** A parsed JSON object; members may be absent. */
export interface JsonObject {
  readonly [key: string]: unknown;
}

export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// At most 15 digits so every accepted string is an exact double (ids, epoch seconds).
const INT_STRING = /^-?[0-9]{1,15}$/;
const FLOAT_STRING = /^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$/;

/**
 * Mutable state of one decodeJob call. The readers never throw: they record the first problem
 * and return a harmless default, and the caller checks `reason` after each event. That keeps
 * the hot path free of exceptions and closures.
 */
export class DecodeState {
  readonly rows: TableRow[] = [];
  readonly statements: DowntimeStatement[] = [];
  /** Largest core-restart cutoff seen in this job, null while none was seen. */
  restartCutoff: number | null = null;
  /** Where {@link restartCutoff} came from: the message's timestamp, or the worker clock. */
  restartCutoffSource: "message" | "clock" = "clock";
  /** PROCESS_RESTART events seen so far (tells the stream which restart events counted). */
  restarts = 0;
  /** Why a core-restart message was ignored (the last one wins). */
  ignored = "";
  reason: InvalidReason | null = null;
  message = "";
  /** Bulk element index for messages, -1 for a single-form job. */
  index = -1;
  /** The current event: fields read from it are reported without the payload key. */
  envelope: JsonObject | null = null;
  /** Payload key of the queue, for messages. */
  payloadKey = "";
  perfdataLabelQuotes: PerfdataLabelQuotes = "keep";

  /** `nowSeconds`: floored, epoch seconds. */
  constructor(readonly nodeName: string, readonly nowSeconds: number) {}

  /** Records the first problem; later ones are consequences and are dropped. */
  fail(reason: InvalidReason, o: JsonObject | null, key: string, detail: string): void {
    if (this.reason !== null) return;
    this.reason = reason;
    let path = this.index >= 0 ? `messages[${this.index}]` : "";
    if (o !== null && o !== this.envelope && this.payloadKey !== "") {
      path = path === "" ? this.payloadKey : `${path}.${this.payloadKey}`;
    }
    if (key !== "") path = path === "" ? key : `${path}.${key}`;
    this.message = path === "" ? detail : `${path}: ${detail}`;
  }
}

/** A short description of a value for error messages (never the whole of a large value). */
export function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") {
    return `string ${JSON.stringify(v.slice(0, 40))}${v.length > 40 ? "…" : ""}`;
  }
  if (typeof v === "number" || typeof v === "boolean") return `${typeof v} ${v}`;
  return typeof v === "object" ? "an object" : typeof v;
}

function badType(st: DecodeState, o: JsonObject, key: string, want: string, v: unknown): 0 {
  st.fail("bad_type", o, key, `expected ${want}, got ${describe(v)}`);
  return 0;
}

function missing<T>(st: DecodeState, o: JsonObject, key: string, want: string, fallback: T): T {
  st.fail("missing_field", o, key, `required ${want} is missing or null`);
  return fallback;
}

function coerceInt(st: DecodeState, o: JsonObject, key: string, v: unknown): number {
  if (typeof v === "number") {
    return Number.isInteger(v) ? v : badType(st, o, key, "an integer", v);
  }
  if (typeof v === "string" && INT_STRING.test(v)) return Number(v);
  return badType(st, o, key, "an integer", v);
}

function coerceText(st: DecodeState, o: JsonObject, key: string, v: unknown): string {
  if (typeof v === "string") return v;
  badType(st, o, key, "a string", v);
  return "";
}

/** Optional integer field: null/absent → 0. */
export function int(st: DecodeState, o: JsonObject, key: string): number {
  const v = o[key];
  if (v === undefined || v === null) return 0;
  return coerceInt(st, o, key, v);
}

/** Required integer field: null/absent → `missing_field`. */
export function reqInt(st: DecodeState, o: JsonObject, key: string): number {
  const v = o[key];
  if (v === undefined || v === null) return missing(st, o, key, "integer", 0);
  return coerceInt(st, o, key, v);
}

/** Optional double field: null/absent → 0; stored as received (docs/tables.md#double-columns). */
export function float(st: DecodeState, o: JsonObject, key: string): number {
  const v = o[key];
  if (v === undefined || v === null) return 0;
  if (typeof v === "number") return Number.isFinite(v) ? v : badType(st, o, key, "a number", v);
  if (typeof v === "string" && FLOAT_STRING.test(v)) {
    const n = Number(v);
    if (Number.isFinite(n)) return n;
  }
  return badType(st, o, key, "a number", v);
}

/** Flag field (`tinyint(1)`): normalised to 0/1 (docs/tables.md#flag-columns); null/absent → 0. */
export function flag(st: DecodeState, o: JsonObject, key: string): number {
  const v = o[key];
  if (v === undefined || v === null) return 0;
  if (typeof v === "number") {
    return Number.isFinite(v) ? (v !== 0 ? 1 : 0) : badType(st, o, key, "a flag", v);
  }
  if (typeof v === "boolean") return v ? 1 : 0;
  if (typeof v === "string" && FLOAT_STRING.test(v)) return Number(v) !== 0 ? 1 : 0;
  return badType(st, o, key, "a flag", v);
}

/** Optional text field: null/absent → `''` (docs/tables.md#json-null-text). */
export function text(st: DecodeState, o: JsonObject, key: string): string {
  const v = o[key];
  if (v === undefined || v === null) return "";
  return coerceText(st, o, key, v);
}

/** Text field that keeps SQL NULL for JSON null (docs/tables.md#null-or-empty). */
export function textOrNull(st: DecodeState, o: JsonObject, key: string): string | null {
  const v = o[key];
  if (v === undefined || v === null) return null;
  return coerceText(st, o, key, v);
}

/** Required text field: null/absent → `missing_field`; `''` is accepted. */
export function reqText(st: DecodeState, o: JsonObject, key: string): string {
  const v = o[key];
  if (v === undefined || v === null) return missing(st, o, key, "string", "");
  return coerceText(st, o, key, v);
}

/**
 * Round half away from zero, as MySQL converts a float bound to an INT column
 * (docs/tables.md#check-interval-rounding).
 */
export function roundInterval(x: number): number {
  const r = x < 0 ? -Math.round(-x) : Math.round(x);
  return r === 0 ? 0 : r; // no -0 for small negative fractions
}
