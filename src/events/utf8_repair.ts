/**
 * Per-byte repair of payloads that are not valid UTF-8 (docs/payloads.md#utf8-repair):
 * Windows plugins print CP1252, the broker copies those bytes into the JSON text,
 * and one bulk job may mix them with correct UTF-8 from other hosts.
 *
 * @module
 */

// Code points of CP1252 0x80–0x9F (WHATWG windows-1252). Written out rather than taken from
// TextDecoder("windows-1252") because some runtimes map this range as Latin-1
// (docs/payloads.md#utf8-repair). The five unassigned bytes 0x81, 0x8D, 0x8F, 0x90, 0x9D map to the
// C1 control of the same value. Pinned by "repairUtf8: the 0x80–0x9F table equals WHATWG
// windows-1252".
const CP1252_80_9F = "€\x81‚ƒ„…†‡ˆ‰Š‹Œ\x8dŽ\x8f\x90‘’“”•–—˜™š›œ\x9džŸ";

// UTF-8 encoding of the CP1252 character of every byte 0x80–0xFF, precomputed once so the
// repair loop only copies: REPLACEMENT[(b - 0x80) * 3 ..] holds REPLACEMENT_LEN[b - 0x80] bytes.
const REPLACEMENT = new Uint8Array(128 * 3);
const REPLACEMENT_LEN = new Uint8Array(128);
for (let b = 0x80; b <= 0xff; b++) {
  const utf8 = new TextEncoder().encode(
    b < 0xa0 ? CP1252_80_9F.charAt(b - 0x80) : String.fromCharCode(b),
  );
  REPLACEMENT.set(utf8, (b - 0x80) * 3);
  REPLACEMENT_LEN[b - 0x80] = utf8.length;
}

/**
 * Length of the well-formed UTF-8 sequence starting at `i`, or 0 when the byte at `i` cannot
 * start one. Implements the Unicode "well-formed byte sequences" table (Unicode 15, table 3-7),
 * which is what a strict decoder accepts: it excludes overlongs (C0, C1, E0 80–9F, F0 80–8F),
 * surrogates (ED A0–BF), code points above U+10FFFF (F4 90–BF, F5–FF) and truncated sequences.
 */
function sequenceLength(b: Uint8Array, i: number, end: number): number {
  const b0 = b[i] ?? 0;
  if (b0 < 0x80) return 1;
  if (b0 < 0xc2 || b0 > 0xf4) return 0;
  const n = b0 < 0xe0 ? 2 : b0 < 0xf0 ? 3 : 4;
  if (i + n > end) return 0;
  // Only the second byte has a narrower range than 80–BF, for E0, ED, F0 and F4.
  const b1 = b[i + 1] ?? 0;
  const lo = b0 === 0xe0 ? 0xa0 : b0 === 0xf0 ? 0x90 : 0x80;
  const hi = b0 === 0xed ? 0x9f : b0 === 0xf4 ? 0x8f : 0xbf;
  if (b1 < lo || b1 > hi) return 0;
  for (let k = 2; k < n; k++) if (((b[i + k] ?? 0) & 0xc0) !== 0x80) return 0;
  return n;
}

/** Index of the next byte at or after `from` not in a well-formed sequence, else `b.length`. */
function nextInvalid(b: Uint8Array, from: number): number {
  const end = b.length;
  let i = from;
  while (i < end) {
    // ASCII dominates real payloads; skip it without the sequence checks.
    if ((b[i] ?? 0) < 0x80) {
      i++;
      continue;
    }
    const n = sequenceLength(b, i, end);
    if (n === 0) return i;
    i += n;
  }
  return end;
}

/**
 * Replace every byte that is not part of a well-formed UTF-8 sequence by the UTF-8 encoding
 * of that byte read as Windows-1252; copy well-formed sequences unchanged. The decision is per
 * byte: after an invalid byte, scanning resumes at the next byte (so a lead byte followed by
 * ASCII becomes one CP1252 character followed by that ASCII). Valid input (the normal case) is
 * returned as the same `Uint8Array`, not copied.
 *
 * @example Repairing a CP1252 umlaut
 * ```ts
 * import assert from "node:assert/strict";
 * import { repairUtf8 } from "./utf8_repair.ts";
 * const { bytes, repaired } = repairUtf8(new Uint8Array([0xfc, 0x62])); // "\xFCb"
 * assert.ok(repaired && new TextDecoder().decode(bytes) === "üb");
 * ```
 */
export function repairUtf8(bytes: Uint8Array): { bytes: Uint8Array; repaired: boolean } {
  const end = bytes.length;
  let bad = nextInvalid(bytes, 0);
  if (bad === end) return { bytes, repaired: false };

  // Invalid bytes are rare even in a repaired payload: record their positions once, size the
  // output exactly, then copy the valid runs between them with one `set` each.
  const positions: number[] = [];
  let size = end;
  while (bad < end) {
    positions.push(bad);
    size += (REPLACEMENT_LEN[(bytes[bad] ?? 0) - 0x80] ?? 1) - 1;
    bad = nextInvalid(bytes, bad + 1);
  }

  const out = new Uint8Array(size);
  let o = 0;
  let from = 0;
  for (const p of positions) {
    // Short runs are copied inline: a subarray per run would dominate a payload that is
    // mostly CP1252 (every non-ASCII byte invalid).
    if (p - from > 32) {
      out.set(bytes.subarray(from, p), o);
      o += p - from;
    } else {
      for (let j = from; j < p; j++) out[o++] = bytes[j] ?? 0;
    }
    // Every byte below 0x80 is valid UTF-8, so an invalid byte indexes the 0x80–0xFF table.
    const k = (bytes[p] ?? 0) - 0x80;
    const len = REPLACEMENT_LEN[k] ?? 0;
    for (let j = k * 3; j < k * 3 + len; j++) out[o++] = REPLACEMENT[j] ?? 0;
    from = p + 1;
  }
  out.set(bytes.subarray(from), o);
  return { bytes: out, repaired: true };
}
