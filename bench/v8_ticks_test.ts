import assert from "node:assert/strict";
import {
  compare,
  fields,
  fromFirst,
  functionOf,
  readTicks,
  sourceOf,
  stageOf,
} from "./v8_ticks.ts";

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

Deno.test("v8 ticks: two checkouts compare function by function, from the first sample of a function on", () => {
  assert.equal(
    functionOf("appendAdjustedRow file:///work/a/src/mysql/values.ts:108:38*'"),
    "appendAdjustedRow src/mysql/values.ts",
  );
  assert.equal(functionOf(" file:///b/bench/x.ts:1:1~"), "(anonymous) bench/x.ts");
  assert.equal(
    functionOf(
      "execute file:///root/.cache/deno/npm/registry.npmjs.org/mysql2/3.24.6/lib/x.js:1:2^",
    ),
    "execute npm:mysql2/3.24.6/lib/x.js",
  );
  assert.equal(functionOf("fit :3:34*'"), "fit");
  assert.equal(functionOf("[deno]"), "[deno]");
  assert.equal(functionOf("Builtin: KeyedLoadIC_Megamorphic"), "Builtin: KeyedLoadIC_Megamorphic");
  const tick = (js: string | undefined, state = "JS") => ({
    time: 0,
    state,
    self: "[deno]",
    js,
    stack: js === undefined ? [] : [js],
  });
  const old = [
    tick("start file:///old/src/main.ts:1:1~"),
    tick("decodeJob file:///old/src/events/decode.ts:86:30+"),
    tick("fit file:///old/src/mysql/values.ts:1:1*"),
  ];
  const now = [
    tick("decodeJob file:///new/src/events/decode.ts:87:30*"),
    tick("appendAdjustedRow file:///new/src/mysql/values.ts:108:38*"),
    tick("appendAdjustedRow file:///new/src/mysql/values.ts:108:38^"),
    tick(undefined, "GC"),
  ];
  assert.equal(fromFirst(old, "decodeJob").length, 2);
  assert.equal(fromFirst(old, "decode").length, 0);
  assert.deepEqual(compare(fromFirst(old, "decodeJob"), now), [
    { name: "appendAdjustedRow src/mysql/values.ts", a: 0, b: 2 },
    { name: "fit src/mysql/values.ts", a: 1, b: 0 },
    { name: "(garbage collection)", a: 0, b: 1 },
    { name: "decodeJob src/events/decode.ts", a: 1, b: 1 },
  ]);
});

Deno.test("v8 ticks: a sample belongs to the stage of the innermost known function on its stack", () => {
  const f = (name: string, file: string) => `${name} file:///w/${file}:1:1*`;
  const decodeJob = f("decodeJob", "src/events/decode.ts");
  const decodePayload = f("decodePayload", "src/events/decode.ts");
  const handle = f("handle", "src/pipeline/handler.ts");
  const tick = (self: string, stack: string[], state = "JS") => ({
    time: 0,
    state,
    self,
    js: stack[0],
    stack,
  });
  // Native code straight under decodeJob is JSON.parse; under decodePayload, the UTF-8 decode.
  assert.equal(stageOf(tick("[deno]", [decodeJob, handle])), "text → JSON (`JSON.parse`)");
  assert.equal(stageOf(tick("Builtin: JsonParse", [decodeJob])), "text → JSON (`JSON.parse`)");
  assert.equal(stageOf(tick("[deno]", [decodePayload, handle])), "bytes → text (UTF-8)");
  assert.equal(
    stageOf(
      tick("[libc.so.6]", ["decode ext:deno_web/08_text_encoding.js:1:1721^", decodePayload]),
    ),
    "bytes → text (UTF-8)",
  );
  // decodeJob's own code, and the decoders it calls, are decoding.
  assert.equal(stageOf({ ...tick(decodeJob, [handle]), js: decodeJob }), "decode (events → rows)");
  assert.equal(
    stageOf(tick("Builtin: KeyedLoadIC_Megamorphic", [
      f("decodeServiceStatus", "src/events/_event_decoders.ts"),
      decodeJob,
    ])),
    "decode (events → rows)",
  );
  // The innermost known file decides: the fitter called from the writer is fitting.
  assert.equal(
    stageOf(tick("[deno]", [
      f("appendAdjustedRow", "src/mysql/values.ts"),
      f("send", "src/mysql/writer.ts"),
    ])),
    "row → values (fit)",
  );
  assert.equal(
    stageOf(tick("[deno]", [f("encodeExecutePacket", "src/mysql/execute_packet.ts")])),
    "wire packet",
  );
  assert.equal(
    stageOf(tick("[deno]", [
      "write ext:deno_net/01_net.js:1:1*",
      f("write", "src/util/deno_socket.ts"),
      f("run", "src/mysql/executor.ts"),
    ])),
    "MySQL client (send, receive)",
  );
  assert.equal(
    stageOf(tick("[deno]", [
      "x file:///root/.cache/deno/npm/registry.npmjs.org/mysql2/3.24.6/lib/p.js:1:2*",
      f("run", "src/mysql/executor.ts"),
    ])),
    "MySQL client (send, receive)",
  );
  assert.equal(
    stageOf(tick("[deno]", [f("startStatement", "src/mysql/writer.ts")])),
    "writers (buffer, statement, commit)",
  );
  assert.equal(
    stageOf(tick("[deno]", [f("push", "src/gearman/codec.ts")])),
    "take job, ack (Gearman)",
  );
  assert.equal(stageOf(tick("[deno]", [handle])), "handler, delivery");
  // Only the runtime's own code on the stack, none at all, collection, idle.
  assert.equal(
    stageOf(tick("[deno]", ["runMicrotasks ext:core/01_core.js:1:1*"])),
    "runtime (promises, timers, I/O)",
  );
  assert.equal(stageOf(tick("[deno]", [])), "(no JavaScript on the stack)");
  assert.equal(stageOf(tick("[deno]", [handle], "GC")), "garbage collection (main thread)");
  assert.equal(stageOf(tick("[deno]", [], "IDLE")), "(idle)");
});
