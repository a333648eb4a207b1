import assert from "node:assert/strict";
import { fields, readTicks, sourceOf } from "./v8_ticks.ts";

Deno.test("v8 ticks: quoted fields keep their commas", () => {
  assert.deepEqual(fields('code-creation,JS,10,5,0x10,8,"f a,b.ts:1:2",0x9,~'), [
    "code-creation",
    "JS",
    "10",
    "5",
    "0x10",
    "8",
    "f a,b.ts:1:2",
    "0x9",
    "~",
  ]);
});

Deno.test("v8 ticks: a sample is attributed to its code object and to the first JavaScript function on its stack, across moves and deletes", () => {
  const log = [
    "shared-library,/usr/bin/deno,0x1000,0x2000,0",
    "code-creation,Builtin,3,1,0x3000,0x100,JSONParse",
    "code-creation,JS,10,2,0x4000,0x100,decodeJob file:///a.ts:1:1,0x9,*",
    "code-creation,JS,10,3,0x5000,0x100,handle file:///b.ts:2:2,0x9,^",
    // In native code, called from decodeJob, called from handle.
    "tick,0x1500,1000,0,0x0,0,0x4010,0x5010",
    // In a builtin on behalf of decodeJob.
    "tick,0x3010,2000,0,0x0,0,0x4020",
    // decodeJob moved; the old address no longer names it.
    "code-move,0x4000,0x6000",
    "tick,0x6010,3000,0,0x0,1",
    "code-delete,0x5000",
    "tick,0x4010,4000,0,0x0,0,0x5010",
  ].join("\n");
  const ticks = readTicks(log);
  assert.deepEqual(
    ticks.map((t) => [t.time, t.state, t.self, t.js ?? null, t.stack]),
    [
      [1, "JS", "[deno]", "decodeJob file:///a.ts:1:1*", [
        "decodeJob file:///a.ts:1:1*",
        "handle file:///b.ts:2:2^",
      ]],
      [2, "JS", "Builtin: JSONParse", "decodeJob file:///a.ts:1:1*", [
        "decodeJob file:///a.ts:1:1*",
      ]],
      [3, "GC", "decodeJob file:///a.ts:1:1*", "decodeJob file:///a.ts:1:1*", []],
      [4, "JS", "(unknown)", null, []],
    ],
  );
});

Deno.test("v8 ticks: source files of code names, npm packages by name and version", () => {
  assert.equal(
    sourceOf("decodeJob file:///w/src/events/decode.ts:86:30+'"),
    "file:///w/src/events/decode.ts",
  );
  assert.equal(
    sourceOf("execute file:///root/.cache/deno/npm/registry.npmjs.org/mysql2/3.24.6/lib/x.js:1:2^"),
    "npm:mysql2/3.24.6/lib/x.js",
  );
  assert.equal(sourceOf("async_op_4 ext:core/00_infra.js:299:33+"), "ext:core/00_infra.js");
  assert.equal(sourceOf("[deno]"), "[deno]");
  assert.equal(sourceOf("Builtin: JSONParse"), "(other)");
});
