import assert from "node:assert/strict";
import { ALLOW_ALL, DEFAULT_ALLOWED_RAW_COMMANDS, DENIED_RAW_COMMANDS } from "../config/mod.ts";
import {
  COMMAND_NAMES,
  MAX_BULK_COMMANDS,
  MAX_JSON_DEPTH,
  parseRawCommand,
  RawCommandAllowlist,
  REJECT_REASONS,
  REJECT_STATUS,
  type RejectReason,
  validateCommandBody,
  type ValidationResult,
} from "./validate.ts";

const NOW = 1_767_225_600;

function check(body: unknown, allow?: RawCommandAllowlist): ValidationResult {
  return validateCommandBody(typeof body === "string" ? body : JSON.stringify(body), {
    nowSeconds: NOW,
    ...(allow === undefined ? {} : { allow }),
  });
}

function accepted(body: unknown): { body: string; commands: readonly string[] } {
  const r = check(body);
  if (!r.ok) throw new assert.AssertionError({ message: `rejected: ${r.reason} ${r.error}` });
  return r;
}

function rejected(body: unknown, reason: RejectReason, error?: RegExp): string {
  const r = check(body);
  if (r.ok) throw new assert.AssertionError({ message: `accepted: ${r.body}` });
  assert.equal(r.reason, reason, r.error);
  if (error !== undefined) assert.match(r.error, error);
  return r.error;
}

const SCHEDULE = { "host_name": "web01", "service_description": "HTTP", "schedule_time": NOW + 60 };

// --- acceptance and re-serialisation -------------------------------------------------------

Deno.test("validate: an object command is re-serialised with key order Command, Data", () => {
  const r = accepted('{"Data":{"host_name":"web01","schedule_time":1},"Command":"schedule_check"}');
  assert.equal(
    r.body,
    '{"Command":"schedule_check","Data":{"host_name":"web01","schedule_time":1}}',
  );
  assert.deepEqual(r.commands, ["schedule_check"]);
});

Deno.test("validate: every command name is accepted with suitable Data", () => {
  for (const name of COMMAND_NAMES) {
    const data = name === "raw" ? "ENABLE_HOST_NOTIFICATIONS;h" : { host_name: "h", output: "o" };
    assert.deepEqual(accepted({ Command: name, Data: data }).commands, [name]);
  }
});

Deno.test("validate: a bulk stays one envelope, its commands counted in order, mixed freely", () => {
  const r = accepted({
    messages: [
      { Command: "check_result", Data: { host_name: "h", output: "OK" } },
      { Data: "SCHEDULE_FORCED_HOST_CHECK;h;1", Command: "raw" },
      { Command: "delete_downtime", Data: { host_name: "h" } },
    ],
  });
  assert.deepEqual(r.commands, ["check_result", "raw", "delete_downtime"]);
  assert.equal(
    r.body,
    '{"messages":[{"Command":"check_result","Data":{"host_name":"h","output":"OK"}},' +
      `{"Command":"raw","Data":"[${NOW}] SCHEDULE_FORCED_HOST_CHECK;h;1"},` +
      '{"Command":"delete_downtime","Data":{"host_name":"h"}}]}',
  );
});

Deno.test("validate: a bulk of exactly the limit is accepted", () => {
  const messages = Array.from({ length: MAX_BULK_COMMANDS }, () => ({
    Command: "schedule_check",
    Data: SCHEDULE,
  }));
  assert.equal(accepted({ messages }).commands.length, MAX_BULK_COMMANDS);
});

Deno.test("validate: unknown fields are dropped and duplicate keys cannot reach the broker twice", () => {
  const r = accepted(
    '{"Command":"raw","Data":"X;1","extra":true,"Data":"ENABLE_HOST_FLAP_DETECTION;h"}',
  );
  assert.equal(r.body, `{"Command":"raw","Data":"[${NOW}] ENABLE_HOST_FLAP_DETECTION;h"}`);
});

Deno.test("validate: JSON whitespace around the object is fine, any other text after it is malformed", () => {
  const one = '{"Command":"raw","Data":"DEL_HOST_COMMENT;1;a}\\"{"}';
  assert.equal(
    accepted(` \n\t\r${one} \r\n\t `).body,
    `{"Command":"raw","Data":"[${NOW}] DEL_HOST_COMMENT;1;a}\\"{"}`,
  );
  for (
    const tail of [' {"Command":"raw","Data":"SHUTDOWN_PROGRAM"}', " garbage", "}", "\u00a0", "0"]
  ) {
    rejected(one + tail, "malformed", /text after the JSON object/);
  }
  // Broken JSON is not "text after" anything.
  rejected('{"Command":"raw",} x', "malformed", /not a JSON object/);
});

Deno.test("validate: nesting is refused beyond the broker parser's 32 levels, counted on the envelope", () => {
  // The envelope is level 1, Data level 2, Data.x level 3; a chain of n objects at x puts
  // its final scalar at level 3 + n (json-c 0.16 reads level 32 and drops level 33).
  const chain = (n: number): unknown => n === 0 ? 1 : { a: chain(n - 1) };
  const single = (n: number) => ({
    Command: "check_result",
    Data: { host_name: "h", x: chain(n) },
  });
  accepted(single(MAX_JSON_DEPTH - 3));
  rejected(single(MAX_JSON_DEPTH - 2), "malformed", /nested deeper than 32 levels/);
  // In a bulk the same Data sits two levels lower (messages, entry).
  const bulk = (n: number) => ({ messages: [single(n)] });
  accepted(bulk(MAX_JSON_DEPTH - 5));
  rejected(bulk(MAX_JSON_DEPTH - 4), "malformed", /nested deeper than 32 levels/);
  // Empty containers at the last level are fine: they hold no value below it.
  const empties = (n: number): unknown => n === 0 ? [] : [empties(n - 1)];
  accepted({ Command: "check_result", Data: { host_name: "h", x: empties(MAX_JSON_DEPTH - 3) } });
  // A deep document is answered, not a stack overflow.
  const deep = "[".repeat(200_000) + "]".repeat(200_000);
  rejected(`{"Command":"check_result","Data":{"x":${deep}}}`, "malformed", /nested deeper/);
  // Fields that are not published do not count.
  accepted({ Command: "check_result", Data: { host_name: "h" }, ignored: chain(100) });
});

Deno.test("validate: an empty messages array next to a single command is dropped, not forwarded", () => {
  // The broker ignores Command/Data beside "messages"; forwarding [] could silence the command.
  const r = accepted({ Command: "schedule_check", Data: SCHEDULE, messages: [] });
  assert.equal(r.body, JSON.stringify({ Command: "schedule_check", Data: SCHEDULE }));
});

// --- raw -------------------------------------------------------------------------------------

Deno.test("validate: raw gets the [now] prefix when missing, after trimming spaces and TABs", () => {
  const r = accepted({ Command: "raw", Data: "  SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1\t " });
  assert.equal(
    r.body,
    `{"Command":"raw","Data":"[${NOW}] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1"}`,
  );
});

Deno.test("validate: a raw prefix supplied by the caller is kept; the name is upper-cased, the arguments are not", () => {
  assert.equal(
    accepted({ Command: "raw", Data: "[1700000000] add_host_comment;web01;1;Me;a Comment" }).body,
    '{"Command":"raw","Data":"[1700000000] ADD_HOST_COMMENT;web01;1;Me;a Comment"}',
  );
  assert.equal(
    accepted({ Command: "raw", Data: "[0] Del_Host_Downtime" }).body,
    '{"Command":"raw","Data":"[0] DEL_HOST_DOWNTIME"}',
  );
});

Deno.test("validate: a raw line outside the grammar is malformed, whatever name it hides", () => {
  const cases: [string, RegExp][] = [
    ["[soon] DEL_HOST_DOWNTIME;1", /must start with "\[<unix seconds>\] "/],
    ["[1700000000]DEL_HOST_DOWNTIME;1", /must start with/],
    ["[1700000000]  DEL_HOST_DOWNTIME;1", /NAME made of the letters A-Z/],
    ["[oops DEL_HOST_DOWNTIME", /must start with/],
    ["[1] [2] DEL_HOST_DOWNTIME;1", /NAME made of the letters A-Z/],
    ["DEL_HOST_DOWNTIME ;1", /NAME made of the letters A-Z/],
    ["DEL HOST DOWNTIME;1", /NAME made of the letters A-Z/],
    ["DEL-HOST-DOWNTIME;1", /NAME made of the letters A-Z/],
    [";DEL_HOST_DOWNTIME", /NAME made of the letters A-Z/],
    ["ſhutdown_program", /NAME made of the letters A-Z/],
  ];
  for (const [line, error] of cases) rejected({ Command: "raw", Data: line }, "malformed", error);
});

Deno.test("validate: raw allows TAB inside the line", () => {
  assert.ok(check({ Command: "raw", Data: "ADD_HOST_COMMENT;h;1;a;with\ttab" }).ok);
});

Deno.test("validate: raw refuses every control character but TAB, even trailing ones", () => {
  const controls = [0, 1, 8, 10, 11, 12, 13, 27, 31, 127, 0x85, 0x9f];
  for (const c of controls) {
    const data = `DISABLE_HOST_CHECK;h${String.fromCharCode(c)}`;
    rejected({ Command: "raw", Data: data }, "malformed", /control character/);
  }
  rejected({ Command: "raw", Data: "A;b\nSHUTDOWN_PROGRAM" }, "malformed", /control character/);
});

Deno.test("validate: raw refuses a lone surrogate", () => {
  rejected({ Command: "raw", Data: "ADD_HOST_COMMENT;h;1;a;\ud800" }, "malformed", /Unicode/);
});

Deno.test("validate: raw Data must be a non-empty, non-blank JSON string", () => {
  rejected({ Command: "raw", Data: 5 }, "malformed", /must be a JSON string/);
  rejected({ Command: "raw", Data: { line: "X" } }, "malformed", /must be a JSON string/);
  rejected({ Command: "raw", Data: ["X"] }, "malformed", /must be a JSON string/);
  rejected({ Command: "raw", Data: "" }, "malformed", /empty/);
  rejected({ Command: "raw", Data: " \t " }, "malformed", /empty/);
});

Deno.test("validate: every denied raw command is refused in any case, with or without a timestamp", () => {
  for (const name of DENIED_RAW_COMMANDS) {
    for (
      const line of [
        name,
        name.toLowerCase(),
        `${name};arg`,
        ` \t${name};arg\t`,
        `[1700000000] ${name.toLowerCase()}`,
      ]
    ) {
      // Also when everything else is allowed.
      for (const allow of [undefined, new RawCommandAllowlist([ALLOW_ALL, name])]) {
        const r = check({ Command: "raw", Data: line }, allow);
        assert.ok(!r.ok, line);
        assert.equal(r.reason, "denied", line);
        assert.equal(r.denied, name, line);
        assert.equal(r.rule, "denylist", line);
        assert.match(r.error, new RegExp(name));
      }
    }
  }
});

Deno.test("validate: commands merely containing a denied name are not denied", () => {
  assert.ok(check({ Command: "raw", Data: "ADD_HOST_COMMENT;SHUTDOWN_PROGRAM;1;a;b" }).ok);
  const all = new RawCommandAllowlist([ALLOW_ALL]);
  assert.ok(check({ Command: "raw", Data: "SHUTDOWN_PROGRAMS" }, all).ok);
});

Deno.test("validate: the default allowlist passes what the UIs send and refuses program-wide switches", () => {
  for (const name of DEFAULT_ALLOWED_RAW_COMMANDS) {
    assert.ok(check({ Command: "raw", Data: `${name.toLowerCase()};h` }).ok, name);
  }
  for (const name of ["DISABLE_NOTIFICATIONS", "STOP_EXECUTING_SVC_CHECKS", "SHUTDOWN_PROGRAMS"]) {
    const r = check({ Command: "raw", Data: name });
    assert.ok(!r.ok, name);
    assert.equal(r.reason, "denied");
    assert.equal(r.rule, "allowlist");
    assert.match(r.error, /not in the allowlist of this API \(--command-allow\)/);
  }
  assert.equal(new Set(DEFAULT_ALLOWED_RAW_COMMANDS).size, DEFAULT_ALLOWED_RAW_COMMANDS.length);
  for (const name of DEFAULT_ALLOWED_RAW_COMMANDS) assert.match(name, /^[A-Z_]+$/);
  for (const name of DENIED_RAW_COMMANDS) {
    assert.ok(!(DEFAULT_ALLOWED_RAW_COMMANDS as readonly string[]).includes(name), name);
  }
});

Deno.test("validate: a long name outside the allowlist is not echoed whole into the answer and the log", () => {
  const name = "A".repeat(1024 * 1024);
  const r = check({ Command: "raw", Data: `${name};h` });
  assert.ok(!r.ok && r.reason === "denied");
  assert.ok(r.error.length < 200, `error of ${r.error.length} characters`);
  assert.ok((r.denied ?? "").length < 100, `denied of ${r.denied?.length} characters`);
});

Deno.test("validate: --command-allow replaces the list; * allows all but the denylist; empty allows no raw command", () => {
  const own = new RawCommandAllowlist(["disable_notifications"]);
  assert.ok(check({ Command: "raw", Data: "DISABLE_NOTIFICATIONS" }, own).ok);
  assert.ok(!check({ Command: "raw", Data: "DEL_HOST_DOWNTIME;1" }, own).ok);
  assert.deepEqual(own.names, ["DISABLE_NOTIFICATIONS"]);
  const all = new RawCommandAllowlist([ALLOW_ALL]);
  assert.ok(all.all);
  assert.ok(check({ Command: "raw", Data: "START_EXECUTING_SVC_CHECKS" }, all).ok);
  const none = new RawCommandAllowlist([]);
  const r = check({ Command: "raw", Data: "DEL_HOST_DOWNTIME;1" }, none);
  assert.ok(!r.ok && r.reason === "denied");
  // Object commands are not raw lines: the allowlist does not touch them.
  assert.ok(check({ Command: "schedule_check", Data: SCHEDULE }, none).ok);
});

Deno.test("parseRawCommand: splits timestamp, upper-cased name and arguments", () => {
  assert.deepEqual(parseRawCommand("[1700000000] shutdown_process"), {
    ok: true,
    value: { timestamp: "1700000000", name: "SHUTDOWN_PROCESS", args: "" },
  });
  assert.deepEqual(parseRawCommand(" Process_File;/tmp/x;0 "), {
    ok: true,
    value: { timestamp: null, name: "PROCESS_FILE", args: ";/tmp/x;0" },
  });
  assert.deepEqual(parseRawCommand("A;"), {
    ok: true,
    value: { timestamp: null, name: "A", args: ";" },
  });
  for (const bad of ["[1]X", "[]  X", "[1] ", "\u212aILL", "X\u0000", "X\r"]) {
    assert.equal(parseRawCommand(bad).ok, false, JSON.stringify(bad));
  }
});

// --- envelope rules ------------------------------------------------------------------------

Deno.test("validate: a body that is not a JSON object is malformed", () => {
  for (
    const body of ["", "   ", "not json", "[]", '"raw"', "5", "null", "{", '{"Command":"raw",}']
  ) {
    rejected(body, "malformed", /not a JSON object/);
  }
});

Deno.test("validate: non-empty messages beside Command or Data is malformed", () => {
  const messages = [{ Command: "schedule_check", Data: SCHEDULE }];
  rejected({ Command: "schedule_check", messages }, "malformed", /cannot be combined/);
  rejected({ Data: SCHEDULE, messages }, "malformed", /cannot be combined/);
});

Deno.test("validate: more than the bulk limit is too_large, checked before the entries", () => {
  const messages: unknown[] = Array.from({ length: MAX_BULK_COMMANDS + 1 }, () => ({
    Command: "nope",
  }));
  rejected({ messages }, "too_large", /1001 commands exceeds the limit of 1000/);
});

Deno.test("validate: a bulk inside a bulk is malformed, with the index", () => {
  const inner = { messages: [{ Command: "schedule_check", Data: SCHEDULE }] };
  const error = rejected(
    { messages: [{ Command: "schedule_check", Data: SCHEDULE }, inner] },
    "malformed",
    /bulk cannot contain another bulk/,
  );
  assert.match(error, /^messages\[1\]: /);
});

Deno.test("validate: messages that is not an array is malformed", () => {
  rejected({ messages: { Command: "raw" } }, "malformed", /must be an array/);
  rejected({ messages: [{ Command: "raw", Data: "X", messages: 1 }] }, "malformed", /array/);
});

Deno.test("validate: missing Command or missing/empty Data is malformed", () => {
  rejected({ Data: SCHEDULE }, "malformed", /missing "Command"/);
  rejected({ Command: "", Data: SCHEDULE }, "malformed", /missing "Command"/);
  rejected({ Command: null, Data: SCHEDULE }, "malformed", /missing "Command"/);
  rejected({ messages: [] }, "malformed", /missing "Command"/);
  rejected({}, "malformed", /missing "Command"/);
  rejected({ Command: 7, Data: SCHEDULE }, "malformed", /must be a string/);
  for (const data of [undefined, null, "", {}, []]) {
    rejected({ Command: "schedule_check", Data: data }, "malformed", /missing or empty "Data"/);
  }
});

// An unknown command with empty Data used to be reported as 'missing or empty "Data"', which
// sent the client looking at the wrong field.
Deno.test("validate: an unknown command is reported as unknown whatever its Data, with the nearest name", () => {
  for (const data of [undefined, null, "", {}, []]) {
    rejected(
      { Command: "check_results", Data: data },
      "unknown_command",
      /^unknown command "check_results" \(did you mean check_result\?\); expected one of /,
    );
  }
  rejected({ Command: "nope" }, "unknown_command", /^unknown command "nope"; expected one of /);
});

Deno.test("validate: object commands need object Data", () => {
  for (const name of COMMAND_NAMES.filter((n) => n !== "raw")) {
    rejected({ Command: name, Data: "host" }, "malformed", /must be a JSON object/);
    rejected({ Command: name, Data: [1] }, "malformed", /must be a JSON object/);
  }
});

Deno.test("validate: an unknown command is unknown_command and names the value", () => {
  rejected({ Command: "Raw", Data: "X" }, "unknown_command", /unknown command "Raw"/);
  rejected({ Command: "reschedule", Data: {} }, "unknown_command", /"reschedule"/);
  rejected({ Command: "reschedule", Data: { a: 1 } }, "unknown_command", /"reschedule"/);
  const long = "x".repeat(1000);
  const error = rejected({ Command: long, Data: "X" }, "unknown_command");
  assert.ok(error.length < 300, "a long value is not echoed in full");
});

Deno.test("validate: errors inside a bulk carry the index of the first bad entry", () => {
  const good = { Command: "schedule_check", Data: SCHEDULE };
  assert.match(
    rejected({ messages: [good, good, good, { Command: "x", Data: "y" }] }, "unknown_command"),
    /^messages\[3\]: unknown command "x"/,
  );
  assert.match(
    rejected({ messages: [good, "text"] }, "malformed"),
    /^messages\[1\]: a command must be a JSON object/,
  );
  const denied = check({ messages: [good, { Command: "raw", Data: "[1] RESTART_PROGRAM" }] });
  assert.ok(!denied.ok);
  assert.equal(denied.reason, "denied");
  assert.match(denied.error, /^messages\[1\]: external command RESTART_PROGRAM/);
  assert.match(
    rejected({ messages: [good, { Command: "raw", Data: "A\r" }] }, "malformed"),
    /^messages\[1\]: .*control character/,
  );
});

// --- the lists -----------------------------------------------------------------------------

Deno.test("validate: every reject reason has its documented status", () => {
  assert.deepEqual(Object.keys(REJECT_STATUS).sort(), [...REJECT_REASONS].sort());
  assert.equal(REJECT_STATUS.auth, 401);
  assert.equal(REJECT_STATUS.denied, 403);
  assert.equal(REJECT_STATUS.too_large, 413);
  assert.equal(REJECT_STATUS.malformed, 400);
  assert.equal(REJECT_STATUS.unknown_command, 400);
});

// Without this, a command or denied name added here could be missing from the operator docs.
Deno.test("validate: docs/http.md names every command and every denied raw command", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/http.md", import.meta.url));
  const at = doc.indexOf("## `POST /commands`");
  assert.ok(at >= 0, "docs/http.md has a /commands section");
  const section = doc.slice(at);
  for (const name of [...COMMAND_NAMES, ...DENIED_RAW_COMMANDS]) {
    assert.ok(section.includes(`\`${name}\``), `docs/http.md /commands section names ${name}`);
  }
});
