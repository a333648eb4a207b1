/**
 * The field readers of _coerce.ts are handed the member's value, read at the call site
 * (`int(st, p, "current_state", p.current_state)`), and the object and key only to name the
 * field in an error. A call whose value is not the member its key names would decode one
 * field and blame another, so every call in the decoders is checked here, in the source.
 */
import assert from "node:assert/strict";

const READERS = "int|flag|float|text|textOrNull|reqText|reqInt|optInt";
const CALL = new RegExp(`\\b(?:${READERS})\\(\\s*st\\b`, "g");
const WELL_FORMED = new RegExp(
  `\\b(?:${READERS})\\(\\s*st,\\s*(\\w+),\\s*"(\\w+)",\\s*([\\w.]+),?\\s*\\)`,
  "g",
);

Deno.test("decoders: every field reader is given the member its object and key name", async () => {
  let checked = 0;
  for (const file of ["_event_decoders.ts", "decode.ts"]) {
    const source = await Deno.readTextFile(new URL(file, import.meta.url));
    const calls = source.match(CALL)?.length ?? 0;
    const wellFormed = [...source.matchAll(WELL_FORMED)];
    assert.equal(
      wellFormed.length,
      calls,
      `${file}: every reader call must read (st, object, "key", object.key)`,
    );
    for (const [call, object, key, value] of wellFormed) {
      assert.equal(value, `${object}.${key}`, `${file}: ${call.replace(/\s+/g, " ")}`);
    }
    checked += calls;
  }
  assert.ok(checked > 200, `only ${checked} reader calls found: did the decoders move?`);
});
