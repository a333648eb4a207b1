import assert from "node:assert/strict";
import { repairUtf8 } from "../../src/events/utf8_repair.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

/** Builds bytes from a string whose characters U+0000–U+00FF stand for single bytes. */
function bytes(s: string): Uint8Array {
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

function repaired(input: Uint8Array): string {
  const r = repairUtf8(input);
  assert.equal(r.repaired, true);
  return dec.decode(r.bytes);
}

Deno.test("repairUtf8: the test vectors of docs/payloads.md#utf8-repair come out as the intended text", () => {
  assert.equal(repaired(bytes("\xFCberlast")), "überlast");
  assert.equal(repaired(bytes("Datentr\xE4ger C:")), "Datenträger C:");
  assert.equal(repaired(bytes("\xC4nderung gr\xF6\xDFer")), "Änderung größer");
  assert.equal(repaired(bytes("Kosten: 5\x80")), "Kosten: 5€");
});

Deno.test("repairUtf8: a mixed document keeps its valid UTF-8 and repairs only the bad bytes (docs/tables.md#invalid-utf8-repair)", () => {
  const valid = enc.encode('{"a":"Datenträger","b":"');
  const bad = bytes("Datentr\xE4ger");
  const tail = enc.encode('"}');
  const input = new Uint8Array(valid.length + bad.length + tail.length);
  input.set(valid, 0);
  input.set(bad, valid.length);
  input.set(tail, valid.length + bad.length);
  assert.equal(repaired(input), '{"a":"Datenträger","b":"Datenträger"}');
});

Deno.test("repairUtf8: valid input is returned as the same array, not a copy, and not reported", () => {
  for (
    const s of ["", "plain ascii", "Datenträger ü € 日本 🎉", "\u0000\u007f\u0080\u07ff\uffff"]
  ) {
    const input = enc.encode(s);
    const r = repairUtf8(input);
    assert.equal(r.repaired, false, s);
    assert.equal(r.bytes, input, s);
  }
});

Deno.test("repairUtf8: every kind of ill-formed sequence is repaired one byte at a time", () => {
  const cases: [string, string, string][] = [
    ["stray continuation byte", "a\x80b", "a€b"],
    ["lead byte followed by ASCII", "\xE4g", "äg"],
    ["truncated 3-byte sequence at the end", "x\xE2\x82", "xâ‚"],
    ["truncated 3-byte sequence before ASCII", "\xE2\x82A", "â‚A"],
    ["overlong 2-byte (C0)", "\xC0\x80", "À€"],
    ["overlong 2-byte (C1)", "\xC1\xBF", "Á¿"],
    ["overlong 3-byte (E0 80..9F)", "\xE0\x80\x80", "à€€"],
    ["overlong 4-byte (F0 80..8F)", "\xF0\x8F\xBF\xBF", "ð\u008F¿¿"],
    ["encoded surrogate (ED A0..BF)", "\xED\xA0\x80", "í\u00A0€"],
    ["above U+10FFFF (F4 90..)", "\xF4\x90\x80\x80", "ô\u0090€€"],
    ["F5 is never a lead byte", "\xF5\x80", "õ€"],
    ["FF", "\xFF", "ÿ"],
    ["truncated 4-byte sequence", "\xF0\x9F\x8E", "ðŸŽ"],
  ];
  for (const [name, input, want] of cases) {
    assert.equal(repaired(bytes(input)), want, name);
  }
});

Deno.test("repairUtf8: the 0x80–0x9F table equals WHATWG windows-1252, including the five C1 bytes", () => {
  const whatwg = new TextDecoder("windows-1252");
  for (let b = 0x80; b <= 0xff; b++) {
    const want = whatwg.decode(new Uint8Array([b]));
    assert.equal(repaired(new Uint8Array([b])), want, `byte 0x${b.toString(16)}`);
  }
  assert.equal(repaired(bytes("\x81\x8D\x8F\x90\x9D")), "\u0081\u008D\u008F\u0090\u009D");
  assert.equal(repaired(bytes("\x8A\x9F")), "ŠŸ");
});

/**
 * An independent reference: at each position try to fatal-decode the sequence length the lead
 * byte announces; if that fails, read one byte as windows-1252 (WHATWG decoder).
 */
function referenceRepair(input: Uint8Array): string {
  const cp1252 = new TextDecoder("windows-1252");
  let out = "";
  let i = 0;
  while (i < input.length) {
    const b = input[i] ?? 0;
    const n = b < 0x80
      ? 1
      : b >= 0xc2 && b <= 0xdf
      ? 2
      : b >= 0xe0 && b <= 0xef
      ? 3
      : b >= 0xf0 && b <= 0xf4
      ? 4
      : 0;
    if (n > 0 && i + n <= input.length) {
      try {
        out += dec.decode(input.subarray(i, i + n));
        i += n;
        continue;
      } catch (_err: unknown) {
        // ill-formed: fall through to the single-byte reading
      }
    }
    out += cp1252.decode(input.subarray(i, i + 1));
    i++;
  }
  return out;
}

Deno.test("repairUtf8: random bytes always become valid UTF-8 equal to the per-byte reference", () => {
  const rnd = seededRandom(12345);
  const interesting = [
    0x41,
    0x80,
    0xbf,
    0xc2,
    0xc3,
    0xe0,
    0xe2,
    0xed,
    0xef,
    0xf0,
    0xf4,
    0xf5,
    0xff,
    0x9f,
    0xa0,
    0x8f,
    0x90,
  ];
  for (let round = 0; round < 3000; round++) {
    const len = rnd(12);
    const input = new Uint8Array(len);
    for (let i = 0; i < len; i++) {
      input[i] = rnd(2) === 0 ? rnd(256) : interesting[rnd(interesting.length)] ?? 0;
    }
    const r = repairUtf8(input);
    const text = dec.decode(r.bytes); // throws if the output were not valid UTF-8
    assert.equal(text, referenceRepair(input), `input ${Array.from(input).join(",")}`);
    assert.equal(r.repaired, r.bytes !== input);
  }
});
