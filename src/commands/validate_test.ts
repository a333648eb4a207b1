import assert from "node:assert/strict";
import {
  COMMAND_NAMES,
  DENIED_RAW_COMMANDS,
  MAX_BULK_COMMANDS,
  rawCommandName,
  REJECT_REASONS,
  REJECT_STATUS,
  type RejectReason,
  validateCommandBody,
  type ValidationResult,
} from "./validate.ts";

const NOW = 1_767_225_600;

function check(body: unknown): ValidationResult {
  return validateCommandBody(typeof body === "string" ? body : JSON.stringify(body), {
    nowSeconds: NOW,
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
    const data = name === "raw" ? "ENABLE_NOTIFICATIONS" : { host_name: "h", output: "o" };
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
  const r = accepted('{"Command":"raw","Data":"X;1","extra":true,"Data":"ENABLE_FLAP_DETECTION"}');
  assert.equal(r.body, `{"Command":"raw","Data":"[${NOW}] ENABLE_FLAP_DETECTION"}`);
});

Deno.test("validate: only the first JSON value is read; trailing text is ignored", () => {
  const r = accepted(' \n{"Command":"raw","Data":"A}\\"{"} {"Command":"nope"} garbage');
  assert.equal(r.body, `{"Command":"raw","Data":"[${NOW}] A}\\"{"}`);
});

Deno.test("validate: an empty messages array next to a single command is dropped, not forwarded", () => {
  // The broker ignores Command/Data beside "messages"; forwarding [] could silence the command.
  const r = accepted({ Command: "schedule_check", Data: SCHEDULE, messages: [] });
  assert.equal(r.body, JSON.stringify({ Command: "schedule_check", Data: SCHEDULE }));
});

// --- raw -------------------------------------------------------------------------------------

Deno.test("validate: raw gets the [now] prefix when missing, after trimming", () => {
  const r = accepted({ Command: "raw", Data: "  SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1\t " });
  assert.equal(
    r.body,
    `{"Command":"raw","Data":"[${NOW}] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1"}`,
  );
});

Deno.test("validate: a raw prefix supplied by the caller is kept exactly, content not checked", () => {
  for (const line of ["[1700000000] DISABLE_NOTIFICATIONS", "[soon]DISABLE_NOTIFICATIONS"]) {
    assert.equal(
      accepted({ Command: "raw", Data: line }).body,
      JSON.stringify({
        Command: "raw",
        Data: line,
      }),
    );
  }
  // "[" without any "]" is no prefix.
  assert.equal(
    accepted({ Command: "raw", Data: "[oops DISABLE_NOTIFICATIONS" }).body,
    `{"Command":"raw","Data":"[${NOW}] [oops DISABLE_NOTIFICATIONS"}`,
  );
});

Deno.test("validate: raw allows TAB inside the line", () => {
  assert.ok(check({ Command: "raw", Data: "ADD_HOST_COMMENT;h;1;a;with\ttab" }).ok);
});

Deno.test("validate: raw refuses every control character but TAB, even trailing ones", () => {
  const controls = [0, 1, 8, 10, 11, 12, 13, 27, 31, 127, 0x85, 0x9f];
  for (const c of controls) {
    const data = `DISABLE_NOTIFICATIONS${String.fromCharCode(c)}`;
    rejected({ Command: "raw", Data: data }, "malformed", /control character/);
  }
  rejected({ Command: "raw", Data: "A;b\nSHUTDOWN_PROGRAM" }, "malformed", /control character/);
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
        `  ${name} ;arg`,
        `[1700000000] ${name.toLowerCase()}`,
        `[1700000000]${name}`,
      ]
    ) {
      const r = check({ Command: "raw", Data: line });
      assert.ok(!r.ok, line);
      assert.equal(r.reason, "denied", line);
      assert.equal(r.denied, name, line);
      assert.match(r.error, new RegExp(name));
    }
  }
});

Deno.test("validate: commands merely containing a denied name are not denied", () => {
  assert.ok(check({ Command: "raw", Data: "ADD_HOST_COMMENT;SHUTDOWN_PROGRAM;1;a;b" }).ok);
  assert.ok(check({ Command: "raw", Data: "SHUTDOWN_PROGRAMS" }).ok);
});

Deno.test("validate: rawCommandName strips the timestamp, cuts at ';', trims and upper-cases", () => {
  assert.equal(rawCommandName("[1700000000] shutdown_process"), "SHUTDOWN_PROCESS");
  assert.equal(rawCommandName(" [1] Process_File ;/tmp/x;0"), "PROCESS_FILE");
  assert.equal(rawCommandName("enable_notifications"), "ENABLE_NOTIFICATIONS");
  assert.equal(rawCommandName("[no-close x;y"), "[NO-CLOSE X");
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

Deno.test("validate: missing Data is decided before an unknown command name", () => {
  rejected({ Command: "nope" }, "malformed");
});

Deno.test("validate: object commands need object Data", () => {
  for (const name of COMMAND_NAMES.filter((n) => n !== "raw")) {
    rejected({ Command: name, Data: "host" }, "malformed", /must be a JSON object/);
    rejected({ Command: name, Data: [1] }, "malformed", /must be a JSON object/);
  }
});

Deno.test("validate: an unknown command is unknown_command and names the value", () => {
  rejected({ Command: "Raw", Data: "X" }, "unknown_command", /unknown command "Raw"/);
  rejected({ Command: "reschedule", Data: {} }, "malformed");
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
Deno.test("validate: the README names every command and every denied raw command", async () => {
  const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
  const at = readme.indexOf("### `/commands`");
  assert.ok(at >= 0, "README has a /commands section");
  const section = readme.slice(at);
  for (const name of [...COMMAND_NAMES, ...DENIED_RAW_COMMANDS]) {
    assert.ok(section.includes(`\`${name}\``), `README /commands section names ${name}`);
  }
});
