/**
 * COM_STMT_EXECUTE packets of the bulk INSERTs, encoded in one pass into one buffer: mysql2 took
 * 7 ms for a 700-row servicestatus INSERT, close to half of the worker's CPU per row. Same bytes
 * as mysql2 (pinned in tests/mysql/execute_packet_test.ts); when it is used is
 * docs/writers.md#statement-shape, the hook is in mysql2_internals.ts.
 *
 * @module
 */
import type { SqlValue } from "../events/mod.ts";

const COM_STMT_EXECUTE = 0x17;
/** Cursor flag telling that a parameter count follows (with query attributes). */
const PARAMETER_COUNT_AVAILABLE = 0x08;
/** Client capability: query attributes in COM_STMT_EXECUTE (MySQL 8.0.23+, not MariaDB). */
export const CLIENT_QUERY_ATTRIBUTES = 0x08000000;

const TYPE_DOUBLE = 5;
/** MYSQL_TYPE_NULL: how MariaDB describes an INSERT placeholder (no type hint). */
export const TYPE_NULL = 6;
const TYPE_VAR_STRING = 253;

/** Length of a length-encoded integer, with mysql2's thresholds (so the bytes are the same). */
function lengthCodedSize(n: number): number {
  if (n < 0xfb) return 1;
  if (n < 0xffff) return 3;
  if (n < 0xffffff) return 4;
  return 9;
}

function writeLengthCoded(out: Uint8Array, at: number, n: number): number {
  const size = lengthCodedSize(n);
  if (size === 1) {
    out[at] = n;
    return at + 1;
  }
  // A marker (0xfc: 2 bytes follow, 0xfd: 3, 0xfe: 8), then n little-endian.
  out[at] = size === 3 ? 0xfc : size === 4 ? 0xfd : 0xfe;
  for (let i = 1, rest = n; i < size; i++, rest = Math.floor(rest / 256)) out[at + i] = rest % 256;
  return at + size;
}

/** UTF-8 length of a string (unpaired surrogates count 3, as U+FFFD, as TextEncoder writes them). */
function utf8Length(s: string): number {
  const n = s.length;
  let bytes = n;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    bytes += c < 0x800 ? 1 : 2;
    // A pair: 2 UTF-16 units, 4 bytes.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return bytes;
}

const encoder = new TextEncoder();
/** Finds a string that is not all ASCII, so its UTF-8 length must be counted. */
const NON_ASCII = /[\u0080-\uffff]/;
/**
 * Strings up to this many UTF-16 units take at most 3 × 83 = 249 UTF-8 bytes, so their length
 * prefix is one byte whatever they hold: they are copied in one pass that stops at the first
 * non-ASCII unit, without counting their bytes first.
 */
const ONE_BYTE_PREFIX_UNITS = 83;
/** Kinds in `lengths` besides a long string's UTF-8 length (which is above 83). */
const SHORT_STRING = 0;
const NULL_VALUE = -1;
const NUMBER_VALUE = -2;

/**
 * Per-call scratch (grown, never shrunk): the packet is written into `scratch`, sized for the
 * longest UTF-8 the strings could take, and copied out at its real length; `lengths` holds each
 * parameter's kind or, for a long string, its UTF-8 length.
 */
let scratch = new Uint8Array(1 << 20);
/** The scratch grows to this at most (a 700-row servicestatus statement takes about 0.35 MB). */
const SCRATCH_MAX_BYTES = 8 << 20;
let lengths = new Int32Array(1024);

/**
 * Encode one COM_STMT_EXECUTE packet, header included (sequence byte 0), as mysql2 does without
 * type hints: numbers as DOUBLE, strings as VAR_STRING in UTF-8, null as NULL; with query
 * attributes, the parameter count and an empty name per parameter.
 *
 * @throws {TypeError} For a value that is not a string, a number or null.
 */
export function encodeExecutePacket(
  statementId: number,
  values: readonly SqlValue[],
  queryAttributes: boolean,
): Uint8Array {
  const count = values.length;
  if (lengths.length < count) lengths = new Int32Array(Math.max(count, lengths.length * 2));
  // Header (4), command, statement id (4), cursor flags, iteration count (4).
  let fixed = 14;
  if (queryAttributes) fixed += lengthCodedSize(count);
  const stride = queryAttributes ? 3 : 2;
  if (count > 0) fixed += ((count + 7) >> 3) + 1 + count * stride;
  // The most the values can take: 8 bytes a number, a 9-byte prefix and 3 bytes a UTF-16 unit
  // a string (a unit is at most 3 UTF-8 bytes; a pair of 2 units, 4).
  let most = fixed;
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (typeof v === "string") {
      if (v.length <= ONE_BYTE_PREFIX_UNITS) {
        lengths[i] = SHORT_STRING;
        most += 1 + 3 * v.length;
      } else {
        const n = NON_ASCII.test(v) ? utf8Length(v) : v.length;
        lengths[i] = n;
        most += lengthCodedSize(n) + n;
      }
    } else if (typeof v === "number") {
      lengths[i] = NUMBER_VALUE;
      most += 8;
    } else if (v === null) {
      lengths[i] = NULL_VALUE;
    } else {
      throw new TypeError(`Bind parameter ${i} is ${typeof v}, not a string, number or null`);
    }
  }
  if (most <= SCRATCH_MAX_BYTES && scratch.length < most) {
    scratch = new Uint8Array(Math.min(SCRATCH_MAX_BYTES, most * 2));
  }
  // A rare statement of long outputs gets a buffer of its own, not a scratch kept at its size.
  const out = most <= SCRATCH_MAX_BYTES ? scratch : new Uint8Array(most);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  out.fill(0, 0, fixed);
  out[4] = COM_STMT_EXECUTE;
  view.setUint32(5, statementId, true);
  out[9] = queryAttributes ? PARAMETER_COUNT_AVAILABLE : 0;
  view.setUint32(10, 1, true);
  let at = 14;
  if (queryAttributes) at = writeLengthCoded(out, at, count);
  if (count > 0) {
    const bitmap = at;
    at += (count + 7) >> 3;
    out[at++] = 1; // new-params-bound flag
    // Types; out[at + 1]: unsigned flag 0; with query attributes, out[at + 2]: empty name.
    for (let i = 0; i < count; i++, at += stride) {
      const n = lengths[i] as number;
      if (n >= 0) {
        out[at] = TYPE_VAR_STRING;
      } else if (n === NUMBER_VALUE) {
        out[at] = TYPE_DOUBLE;
      } else {
        out[at] = TYPE_NULL;
        out[bitmap + (i >> 3)] = (out[bitmap + (i >> 3)] as number) | (1 << (i & 7));
      }
    }
    for (let i = 0; i < count; i++) {
      const n = lengths[i] as number;
      if (n === NUMBER_VALUE) {
        view.setFloat64(at, values[i] as number, true);
        at += 8;
      } else if (n === SHORT_STRING) {
        at = writeShortString(out, at, values[i] as string);
      } else if (n > 0) {
        const v = values[i] as string;
        at = writeLengthCoded(out, at, n);
        encoder.encodeInto(v, out.subarray(at, at + n));
        at += n;
      }
    }
  }
  if (at > most) {
    // Past the bound a typed array drops writes silently: never send such a packet.
    throw new Error(`COM_STMT_EXECUTE: wrote ${at} bytes, bound ${most}`);
  }
  const payload = at - 4;
  out[0] = payload & 0xff;
  out[1] = (payload >>> 8) & 0xff;
  out[2] = (payload >>> 16) & 0xff;
  return out === scratch ? out.slice(0, at) : out.subarray(0, at);
}

/** Write a string of at most {@link ONE_BYTE_PREFIX_UNITS} units with its one-byte length prefix. */
function writeShortString(out: Uint8Array, at: number, v: string): number {
  const units = v.length;
  const start = at + 1;
  let k = 0;
  for (; k < units; k++) {
    const c = v.charCodeAt(k);
    if (c >= 0x80) break;
    out[start + k] = c;
  }
  const n = k === units
    ? units
    : encoder.encodeInto(v, out.subarray(start, start + 3 * units)).written;
  out[at] = n;
  return start + n;
}
