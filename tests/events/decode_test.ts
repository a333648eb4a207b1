import assert from "node:assert/strict";
import { APPENDIX_CTX, fixture, fixtureBytes } from "../../src/events/_testing.ts";
import { decodeJob, decodePayload } from "../../src/events/decode.ts";
import { QUEUE_NAMES, type QueueName } from "../../src/events/queues.ts";
import { repairUtf8 } from "../../src/events/utf8_repair.ts";
import type {
  DecodeContext,
  DecodedJob,
  InvalidReason,
  Row,
  TableRow,
} from "../../src/events/types.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const CTX = APPENDIX_CTX;

function rows(job: DecodedJob): TableRow[] {
  assert.equal(job.kind, "rows", JSON.stringify(job));
  return job.kind === "rows" ? job.rows : [];
}

function onlyRow(job: DecodedJob): Row {
  const rs = rows(job);
  assert.equal(rs.length, 1, JSON.stringify(rs));
  return rs[0]?.row ?? {};
}

function assertInvalid(job: DecodedJob, reason: InvalidReason, messagePart?: string): void {
  assert.equal(job.kind, "invalid", JSON.stringify(job));
  if (job.kind !== "invalid") return;
  assert.equal(job.reason, reason, job.message);
  if (messagePart !== undefined) {
    assert.ok(job.message.includes(messagePart), `message ${JSON.stringify(job.message)}`);
  }
}

type Json = Record<string, unknown>;

function parsed(queue: QueueName): Json {
  return JSON.parse(fixture(queue)) as Json;
}

/** The events of a fixture, whatever its form. */
function events(queue: QueueName): Json[] {
  const doc = parsed(queue);
  return Array.isArray(doc.messages) ? doc.messages as Json[] : [doc];
}

/** A single-form job: one event, with `patch` applied to its payload object. */
function single(queue: QueueName, payloadKey: string, patch: Json, envelope: Json = {}): string {
  const ev = structuredClone(events(queue)[0]) as Json;
  ev[payloadKey] = { ...(ev[payloadKey] as Json), ...patch };
  return JSON.stringify({ ...ev, ...envelope });
}

/** The one row of a single-form job whose payload has `patch` applied. */
function patchedRow(queue: QueueName, payloadKey: string, patch: Json): Row {
  return onlyRow(decodeJob(queue, single(queue, payloadKey, patch), CTX));
}

function bulk(evs: unknown[]): string {
  return JSON.stringify({ messages: evs, format: "none" });
}

// ---------------------------------------------------------------------------------------------
// Payload shapes (D3)

Deno.test("decodeJob: every queue decodes the single form to the same result as the bulk form (D3)", () => {
  for (const queue of QUEUE_NAMES) {
    const evs = events(queue);
    const asBulk = decodeJob(queue, bulk(evs), CTX);
    const asFixture = decodeJob(queue, fixture(queue), CTX);
    assert.deepEqual(asBulk, asFixture, `${queue}: bulk re-encoding`);
    if (asBulk.kind === "rows") {
      const concatenated = evs.flatMap((ev) => rows(decodeJob(queue, JSON.stringify(ev), CTX)));
      assert.deepEqual(concatenated, asBulk.rows, `${queue}: single events`);
      assert.ok(asBulk.rows.length > 0, queue);
    } else if (asBulk.kind === "downtimes") {
      const concatenated = evs.flatMap((ev) => {
        const j = decodeJob(queue, JSON.stringify(ev), CTX);
        return j.kind === "downtimes" ? j.statements : [];
      });
      assert.deepEqual(concatenated, asBulk.statements, queue);
      assert.ok(asBulk.statements.length > 0, queue);
    } else {
      assert.deepEqual(decodeJob(queue, JSON.stringify(evs[0]), CTX), asBulk, queue);
      assert.equal(asBulk.kind, "core_restart", queue);
    }
  }
});

Deno.test("decodeJob: an empty messages array is valid and yields nothing on every queue", () => {
  for (const queue of QUEUE_NAMES) {
    const job = decodeJob(queue, '{"messages":[],"format":"none"}', CTX);
    if (queue === "statusngin_downtimes") {
      assert.deepEqual(job, { kind: "downtimes", statements: [] });
    } else if (queue === "statusngin_core_restart") {
      assert.equal(job.kind, "ignored");
    } else {
      assert.deepEqual(job, { kind: "rows", rows: [], staleDiscarded: 0 }, queue);
    }
  }
});

Deno.test("decodeJob: a bulk job mixing host and service state changes yields both tables in event order", () => {
  const [svc] = events("statusngin_statechanges");
  const host = structuredClone(svc) as Json;
  host.statechange = {
    ...(host.statechange as Json),
    "statechange_type": 0,
    "service_description": null,
  };
  const got = rows(decodeJob("statusngin_statechanges", bulk([svc, host, svc]), CTX));
  assert.deepEqual(got.map((r) => r.table), [
    "statusengine_service_statehistory",
    "statusengine_host_statehistory",
    "statusengine_service_statehistory",
  ]);
  assert.equal(got[1]?.row.state_change, 0);
  assert.ok(!("service_description" in (got[1]?.row ?? {})));
});

// ---------------------------------------------------------------------------------------------
// Stale status events (docs/payloads.md#stale-status)

Deno.test("decodeJob: on the real clock with the default 300 s the status fixtures are discarded, hostchecks is not (docs/payloads.md#stale-status)", () => {
  const real: DecodeContext = {
    nodeName: "N",
    nowSeconds: Date.now() / 1000,
    statusMaxAgeSeconds: 300,
  };
  assert.deepEqual(decodeJob("statusngin_hoststatus", fixture("statusngin_hoststatus"), real), {
    kind: "rows",
    rows: [],
    staleDiscarded: 2,
  });
  assert.deepEqual(
    decodeJob("statusngin_servicestatus", fixture("statusngin_servicestatus"), real),
    { kind: "rows", rows: [], staleDiscarded: 2 },
  );
  // Only the status queues discard on age: every other queue is history
  // (docs/tables.md#stale-status).
  for (const queue of QUEUE_NAMES) {
    if (queue === "statusngin_hoststatus" || queue === "statusngin_servicestatus") continue;
    const job = decodeJob(queue, fixture(queue), real);
    assert.ok(job.kind !== "invalid" && job.kind !== "ignored", queue);
    if (job.kind === "rows") {
      assert.equal(job.staleDiscarded, 0, queue);
      assert.ok(job.rows.length > 0, queue);
    }
  }
});

Deno.test("decodeJob: with a clock up to 1785470959 and 300 s no status fixture event is stale (expected rows)", () => {
  const ctx = { ...CTX, nowSeconds: 1785470959, statusMaxAgeSeconds: 300 };
  const job = decodeJob("statusngin_hoststatus", fixture("statusngin_hoststatus"), ctx);
  assert.equal(rows(job).length, 2);
  assert.equal(job.kind === "rows" ? job.staleDiscarded : -1, 0);
});

Deno.test("decodeJob: an event exactly at now − max age is kept, one second older is discarded (docs/tables.md#stale-status)", () => {
  const now = 1_800_000_000;
  const ctx = { nodeName: "N", nowSeconds: now + 0.999, statusMaxAgeSeconds: 300 };
  const [ev] = events("statusngin_hoststatus");
  const at = { ...ev, timestamp: now - 300 };
  const older = { ...ev, timestamp: now - 301 };
  const future = { ...ev, timestamp: now + 3600 };
  const job = decodeJob("statusngin_hoststatus", bulk([older, at, older, future]), ctx);
  assert.equal(job.kind, "rows");
  if (job.kind !== "rows") return;
  assert.equal(job.staleDiscarded, 2);
  assert.deepEqual(job.rows.map((r) => r.row.status_update_time), [now - 300, now + 3600]);
});

Deno.test("decodeJob: status older than the last core-restart sweep's cutoff is discarded, with or without a max age, on the status queues only (docs/core-restart.md#after-the-sweep)", () => {
  const now = 1_800_000_000;
  const [ev] = events("statusngin_hoststatus");
  const job = (statusMaxAgeSeconds: number, statusSweptBeforeSeconds: number) =>
    decodeJob(
      "statusngin_hoststatus",
      bulk([now - 400, now - 200, now - 101, now - 100, now].map((t) => ({ ...ev, timestamp: t }))),
      { nodeName: "N", nowSeconds: now, statusMaxAgeSeconds, statusSweptBeforeSeconds },
    );
  const kept = (j: ReturnType<typeof job>) =>
    j.kind === "rows" ? j.rows.map((r) => now - Number(r.row.status_update_time)) : [];
  assert.deepEqual(kept(job(0, now - 100)), [100, 0], "the sweep's cutoff alone");
  assert.deepEqual(kept(job(300, now - 100)), [100, 0], "the later of the two: the sweep's");
  assert.deepEqual(kept(job(150, now - 300)), [101, 100, 0], "the later of the two: max age");
  assert.deepEqual(kept(job(0, 0)), [400, 200, 101, 100, 0], "no sweep, no max age");
  // History is never filtered: a check from before the restart is still a check that happened.
  const [check] = events("statusngin_hostchecks");
  const checks = decodeJob(
    "statusngin_hostchecks",
    bulk([{ ...check, timestamp: now - 400 }]),
    { nodeName: "N", nowSeconds: now, statusMaxAgeSeconds: 0, statusSweptBeforeSeconds: now },
  );
  assert.equal(rows(checks).length, 1);
});

Deno.test("decodeJob: status_max_age 0 disables the stale filter", () => {
  const ctx = { nodeName: "N", nowSeconds: 4_000_000_000, statusMaxAgeSeconds: 0 };
  const job = decodeJob("statusngin_servicestatus", fixture("statusngin_servicestatus"), ctx);
  assert.equal(rows(job).length, 2);
});

Deno.test("decodeJob: a stale event is discarded without inspecting its payload", () => {
  const ctx = { nodeName: "N", nowSeconds: 2_000_000_000, statusMaxAgeSeconds: 300 };
  const job = decodeJob(
    "statusngin_hoststatus",
    bulk([{ timestamp: 1, hoststatus: "garbage" }]),
    ctx,
  );
  assert.deepEqual(job, { kind: "rows", rows: [], staleDiscarded: 1 });
});

// ---------------------------------------------------------------------------------------------
// Field mappings (docs/tables.md#queues and its column decisions)

Deno.test("decodeJob: is_passive_check is 1 for an active check (check_type 0) and 0 otherwise (D5)", () => {
  for (const [checkType, want] of [[0, 1], [1, 0], [2, 0], [3, 0]] as const) {
    for (
      const [queue, key] of [["statusngin_hoststatus", "hoststatus"], [
        "statusngin_servicestatus",
        "servicestatus",
      ]] as const
    ) {
      const row = patchedRow(queue, key, { "check_type": checkType });
      assert.equal(row.is_passive_check, want, `${key} check_type ${checkType}`);
    }
  }
});

Deno.test("decodeJob: check intervals are rounded half away from zero, not truncated (docs/tables.md#check-interval-rounding)", () => {
  const cases = [[0.5, 1], [2.5, 3], [1.49, 1], [0.4, 0], [5.0, 5], [1.5000001, 2]] as const;
  for (const [interval, want] of cases) {
    const row = patchedRow("statusngin_servicestatus", "servicestatus", {
      "check_interval": interval,
      "retry_interval": interval,
    });
    assert.equal(row.normal_check_interval, want, `check_interval ${interval}`);
    assert.equal(row.retry_check_interval, want, `retry_interval ${interval}`);
  }
});

Deno.test("decodeJob: is_hardstate is 1 only for state_type 1 on every queue that has it", () => {
  const queues = [
    ["statusngin_hoststatus", "hoststatus"],
    ["statusngin_hostchecks", "hostcheck"],
    ["statusngin_servicechecks", "servicecheck"],
    ["statusngin_statechanges", "statechange"],
  ] as const;
  for (const [stateType, want] of [[1, 1], [0, 0], [2, 0]] as const) {
    for (const [queue, key] of queues) {
      const row = patchedRow(queue, key, { "state_type": stateType });
      assert.equal(row.is_hardstate, want, `${queue} state_type ${stateType}`);
    }
  }
});

Deno.test("decodeJob: *_usec columns come from the envelope timestamp_usec, default 0 when absent", () => {
  const job = decodeJob(
    "statusngin_hostchecks",
    single("statusngin_hostchecks", "hostcheck", {}, { "timestamp_usec": 42 }),
    CTX,
  );
  assert.equal(onlyRow(job).start_time_usec, 42);
  const ev = events("statusngin_hostchecks")[0] ?? {};
  delete ev.timestamp_usec;
  assert.equal(
    onlyRow(decodeJob("statusngin_hostchecks", JSON.stringify(ev), CTX)).start_time_usec,
    0,
  );
});

Deno.test("decodeJob: the node name comes from the context", () => {
  const ctx = { ...CTX, nodeName: "node-7" };
  assert.equal(
    onlyRow(
      decodeJob("statusngin_logentries", JSON.stringify(events("statusngin_logentries")[0]), ctx),
    ).node_name,
    "node-7",
  );
  const hs = rows(decodeJob("statusngin_hoststatus", fixture("statusngin_hoststatus"), ctx));
  assert.ok(hs.every((r) => r.row.node_name === "node-7"));
});

Deno.test("decodeJob: contact notification start_time is the payload's, not the envelope's (D5)", () => {
  const text = single(
    "statusngin_contactnotificationmethod",
    "contactnotificationmethod",
    { "start_time": 1785517000, "end_time": 1785517001 },
    { timestamp: 1785517089 },
  );
  const row = onlyRow(decodeJob("statusngin_contactnotificationmethod", text, CTX));
  assert.equal(row.start_time, 1785517000);
  assert.equal(row.end_time, 1785517001);
});

Deno.test("decodeJob: perfdata time is the payload start_time even when the envelope differs (D5)", () => {
  const got = rows(
    decodeJob("statusngin_service_perfdata", fixture("statusngin_service_perfdata"), CTX),
  );
  assert.deepEqual(got.slice(2).map((r) => r.row.timestamp_unix), [1785470664, 1785470664]);
});

Deno.test("decodeJob: JSON null becomes '' in text columns except event_handler, command_args and the notifications' ack_author/ack_data (docs/tables.md#json-null-text)", () => {
  const hs = onlyRow(decodeJob(
    "statusngin_hoststatus",
    single("statusngin_hoststatus", "hoststatus", {
      "check_command": null,
      "check_period": null,
      "event_handler": "eh",
    }),
    CTX,
  ));
  assert.equal(hs.check_command, "");
  assert.equal(hs.check_timeperiod, "");
  assert.equal(hs.event_handler, "eh");
  const cnm = onlyRow(decodeJob(
    "statusngin_contactnotificationmethod",
    single("statusngin_contactnotificationmethod", "contactnotificationmethod", {
      "ack_author": null,
      "ack_data": null,
      "command_args": "a!b",
    }),
    CTX,
  ));
  // The legacy worker writes NULL for a notification without acknowledgement data.
  assert.equal(cnm.ack_author, null);
  assert.equal(cnm.ack_data, null);
  assert.equal(cnm.command_args, "a!b");
  const ack = onlyRow(decodeJob(
    "statusngin_acknowledgements",
    single("statusngin_acknowledgements", "acknowledgement", {
      "author_name": null,
      "comment_data": null,
    }),
    CTX,
  ));
  assert.equal(ack.author_name, "");
  assert.equal(ack.comment_data, "");
});

Deno.test("decodeJob: a 10 MB output string decodes unchanged (truncation is the writer's job, D6)", () => {
  const big = "x".repeat(10 * 1024 * 1024);
  const row = patchedRow("statusngin_servicechecks", "servicecheck", {
    output: big,
    "long_output": big,
  });
  assert.equal(row.output, big);
  assert.equal(row.long_output, big);
});

// ---------------------------------------------------------------------------------------------
// Routing and filters (docs/tables.md#notifications)

Deno.test("decodeJob: statechange_type 0 and acknowledgement_type 0 route to the host tables", () => {
  const sc = rows(
    decodeJob(
      "statusngin_statechanges",
      single("statusngin_statechanges", "statechange", {
        "statechange_type": 0,
        "service_description": null,
      }),
      CTX,
    ),
  );
  assert.equal(sc[0]?.table, "statusengine_host_statehistory");
  const ack = rows(
    decodeJob(
      "statusngin_acknowledgements",
      single("statusngin_acknowledgements", "acknowledgement", {
        "acknowledgement_type": 0,
        "service_description": null,
      }),
      CTX,
    ),
  );
  assert.equal(ack[0]?.table, "statusengine_host_acknowledgements");
  assert.deepEqual(ack[0]?.row, {
    hostname: "localhost",
    "entry_time": 1785516972,
    "entry_time_usec": 732213,
    state: 2,
    "author_name": "Daniel Z",
    "comment_data": "I will take a look at this",
    "acknowledgement_type": 0,
    "is_sticky": 0,
    "persistent_comment": 1,
    "notify_contacts": 1,
  });
});

Deno.test("decodeJob: an empty or null service_description routes notifications to the host tables", () => {
  for (const sd of [null, ""]) {
    const n = rows(
      decodeJob(
        "statusngin_notifications",
        single("statusngin_notifications", "notification_data", { "service_description": sd }),
        CTX,
      ),
    );
    assert.equal(n[0]?.table, "statusengine_host_notifications_log");
    const c = rows(decodeJob(
      "statusngin_contactnotificationmethod",
      single("statusngin_contactnotificationmethod", "contactnotificationmethod", {
        "service_description": sd,
      }),
      CTX,
    ));
    assert.equal(c[0]?.table, "statusengine_host_notifications");
    assert.deepEqual(Object.keys(c[0]?.row ?? {}).slice(0, 3), [
      "hostname",
      "start_time",
      "start_time_usec",
    ]);
  }
});

Deno.test("decodeJob: notifications keep only type 601 with contacts_notified > 0", () => {
  const q = "statusngin_notifications";
  const k = "notification_data";
  assert.equal(rows(decodeJob(q, single(q, k, {}, { type: 600 }), CTX)).length, 0);
  assert.equal(rows(decodeJob(q, single(q, k, { "contacts_notified": 0 }), CTX)).length, 0);
  assert.equal(rows(decodeJob(q, single(q, k, { "contacts_notified": -1 }), CTX)).length, 0);
  assert.equal(rows(decodeJob(q, single(q, k, { "contacts_notified": 3 }), CTX)).length, 1);
  // A filtered event is not inspected further, so its broken fields cannot dead-letter the job.
  assert.equal(rows(decodeJob(q, single(q, k, { "host_name": 5 }, { type: 600 }), CTX)).length, 0);
});

Deno.test("decodeJob: contact notification methods keep only type 605", () => {
  const q = "statusngin_contactnotificationmethod";
  const k = "contactnotificationmethod";
  assert.equal(rows(decodeJob(q, single(q, k, {}, { type: 604 }), CTX)).length, 0);
  assert.equal(rows(decodeJob(q, single(q, k, {}, { type: 605 }), CTX)).length, 1);
});

Deno.test("decodeJob: downtime_type 2 writes the host downtime tables, LOAD both rows and its announcement too", () => {
  const q = "statusngin_downtimes";
  const host = decodeJob(
    q,
    single(q, "downtime", { "downtime_type": 2, "service_description": null }),
    CTX,
  );
  assert.equal(host.kind, "downtimes");
  assert.deepEqual(host.kind === "downtimes" ? host.statements.map((s) => s.table) : [], [
    "statusengine_host_downtimehistory",
    "statusengine_downtime_announcements",
    "statusengine_host_scheduleddowntimes",
  ]);
  const load = decodeJob(q, single(q, "downtime", {}, { type: 1102 }), CTX);
  assert.deepEqual(load.kind === "downtimes" ? load.statements.map((s) => s.table) : [], [
    "statusengine_service_downtimehistory",
    "statusengine_downtime_announcements",
    "statusengine_service_scheduleddowntimes",
  ]);
});

Deno.test("decodeJob: a bulk downtime job yields the statements of all events in order", () => {
  const q = "statusngin_downtimes";
  const [add] = events(q);
  const start = { ...add, type: 1103, timestamp: 1785517380 };
  const stop = { ...add, type: 1104, attr: 2, timestamp: 1785517400 };
  const del = { ...add, type: 1101, timestamp: 1785517400 };
  const job = decodeJob(q, bulk([add, start, stop, del]), CTX);
  assert.equal(job.kind, "downtimes");
  if (job.kind !== "downtimes") return;
  assert.deepEqual(
    job.statements.map((s) =>
      `${s.event} ${s.kind} ${s.table.replace("statusengine_service_", "")}`
    ),
    [
      "ADD upsert downtimehistory",
      "ADD upsert statusengine_downtime_announcements",
      "ADD copy scheduleddowntimes",
      "START upsert downtimehistory",
      "START upsert statusengine_downtime_announcements",
      "START copy scheduleddowntimes",
      "STOP upsert downtimehistory",
      "STOP tombstone statusengine_downtime_tombstones",
      "STOP delete scheduleddowntimes",
      "DELETE tombstone statusengine_downtime_tombstones",
      "DELETE delete scheduleddowntimes",
      "DELETE upsert downtimehistory",
    ],
  );
});

Deno.test("decodeJob: core restart uses a positive timestamp, else the floored worker clock, and says which (docs/tables.md#core-restart-queue)", () => {
  const q = "statusngin_core_restart";
  const ctx = { ...CTX, nowSeconds: 1000.7 };
  const cases = [
    ['{"object_type":102,"timestamp":500}', 500, "message"],
    ['{"object_type":102,"timestamp":-5}', 1000, "clock"],
    ['{"object_type":102}', 1000, "clock"],
    ['{"object_type":102,"timestamp":null}', 1000, "clock"],
  ] as const;
  for (const [payload, cutoff, cutoffSource] of cases) {
    assert.deepEqual(decodeJob(q, payload, ctx), { kind: "core_restart", cutoff, cutoffSource });
  }
  assert.deepEqual(
    decodeJob(
      q,
      '{"messages":[{"object_type":102,"timestamp":500},{"object_type":102,"timestamp":700}]}',
      ctx,
    ),
    { kind: "core_restart", cutoff: 700, cutoffSource: "message" },
  );
});

Deno.test("decodeJob: a core restart message with another object_type is ignored, a missing one is invalid", () => {
  const q = "statusngin_core_restart";
  const job = decodeJob(q, '{"object_type":101,"timestamp":0}', CTX);
  assert.equal(job.kind, "ignored");
  assert.ok(job.kind === "ignored" && job.reason.includes("101"));
  assertInvalid(decodeJob(q, "{}", CTX), "missing_field", "object_type");
  assertInvalid(decodeJob(q, '{"object_type":"restart"}', CTX), "bad_type", "object_type");
});

Deno.test("decodeJob: empty perf_data yields nothing and needs no identity fields", () => {
  const q = "statusngin_service_perfdata";
  assert.equal(
    rows(decodeJob(q, JSON.stringify({ type: 701, servicecheck: { "perf_data": "  " } }), CTX))
      .length,
    0,
  );
  assert.equal(
    rows(decodeJob(q, JSON.stringify({ type: 701, servicecheck: { "perf_data": "" } }), CTX))
      .length,
    0,
  );
  assertInvalid(
    decodeJob(
      q,
      JSON.stringify({
        type: 701,
        servicecheck: { "perf_data": "a=1", "host_name": "h", "start_time": 1 },
      }),
      CTX,
    ),
    "missing_field",
    "servicecheck.service_description",
  );
});

// ---------------------------------------------------------------------------------------------
// Malformed input (D7)

Deno.test("decodeJob: text that is not JSON is invalid with reason not_json", () => {
  for (const text of ["", "not json", "{", '{"messages":[', "NaN", "{'a':1}", '{"a":1}x']) {
    assertInvalid(decodeJob("statusngin_hoststatus", text, CTX), "not_json");
  }
  const fx = fixture("statusngin_servicechecks");
  assertInvalid(decodeJob("statusngin_servicechecks", fx.slice(0, fx.length / 2), CTX), "not_json");
});

Deno.test("decodeJob: a top-level value that is not an object is invalid with reason not_object", () => {
  for (const text of ["[]", "[{}]", "42", '"x"', "null", "true"]) {
    assertInvalid(decodeJob("statusngin_logentries", text, CTX), "not_object");
  }
});

Deno.test("decodeJob: a document matching neither payload shape is invalid with reason bad_shape", () => {
  assertInvalid(decodeJob("statusngin_hoststatus", "{}", CTX), "bad_shape", '"hoststatus"');
  assertInvalid(decodeJob("statusngin_hoststatus", '{"format":"none"}', CTX), "bad_shape");
  assertInvalid(decodeJob("statusngin_hoststatus", '{"messages":{}}', CTX), "bad_shape");
  assertInvalid(
    decodeJob("statusngin_hoststatus", '{"messages":[1]}', CTX),
    "bad_shape",
    "messages[0]",
  );
  // The queue decides the payload key: a hostcheck event on the hoststatus queue is not one.
  assertInvalid(
    decodeJob("statusngin_hoststatus", fixture("statusngin_hostchecks"), CTX),
    "bad_shape",
  );
  assertInvalid(
    decodeJob(
      "statusngin_logentries",
      bulk([events("statusngin_logentries")[0], { type: 300 }]),
      CTX,
    ),
    "bad_shape",
    'messages[1]: event has no "logentry" object',
  );
});

Deno.test("decodeJob: a payload key holding null or a non-object is invalid", () => {
  assertInvalid(
    decodeJob("statusngin_logentries", '{"type":300,"logentry":null}', CTX),
    "missing_field",
    "logentry",
  );
  assertInvalid(
    decodeJob("statusngin_logentries", '{"type":300,"logentry":[1]}', CTX),
    "bad_type",
    "logentry",
  );
});

Deno.test("decodeJob: an unknown queue is invalid with reason unknown_queue", () => {
  assertInvalid(
    decodeJob("statusngin_flappings", fixture("statusngin_hoststatus"), CTX),
    "unknown_queue",
  );
  assertInvalid(decodeJob("__proto__", "{}", CTX), "unknown_queue");
});

Deno.test("decodeJob: one undecodable event makes the whole bulk job invalid and names its index (docs/payloads.md#decode-errors)", () => {
  const evs = events("statusngin_servicechecks");
  const bad = structuredClone(evs[1]) as Json;
  (bad.servicecheck as Json).state = "CRITICAL";
  assertInvalid(
    decodeJob("statusngin_servicechecks", bulk([evs[0], bad]), CTX),
    "bad_type",
    'messages[1].servicecheck.state: expected an integer, got string "CRITICAL"',
  );
});

Deno.test("decodeJob: required fields that are absent or null are missing_field", () => {
  const cases: [QueueName, string, Json, Json, string][] = [
    ["statusngin_hoststatus", "hoststatus", { name: null }, {}, "hoststatus.name"],
    ["statusngin_hoststatus", "hoststatus", {}, { timestamp: null }, "timestamp"],
    [
      "statusngin_servicestatus",
      "servicestatus",
      { description: null },
      {},
      "servicestatus.description",
    ],
    ["statusngin_hostchecks", "hostcheck", { "start_time": null }, {}, "hostcheck.start_time"],
    [
      "statusngin_servicechecks",
      "servicecheck",
      { "service_description": null },
      {},
      "servicecheck.service_description",
    ],
    [
      "statusngin_statechanges",
      "statechange",
      { "statechange_type": null },
      {},
      "statechange.statechange_type",
    ],
    [
      "statusngin_statechanges",
      "statechange",
      { "service_description": null },
      {},
      "statechange.service_description",
    ],
    ["statusngin_logentries", "logentry", { "entry_time": null }, {}, "logentry.entry_time"],
    [
      "statusngin_notifications",
      "notification_data",
      { "contacts_notified": null },
      {},
      "contacts_notified",
    ],
    ["statusngin_notifications", "notification_data", {}, { type: null }, "type"],
    [
      "statusngin_contactnotificationmethod",
      "contactnotificationmethod",
      { "host_name": null },
      {},
      "host_name",
    ],
    [
      "statusngin_acknowledgements",
      "acknowledgement",
      { "acknowledgement_type": null },
      {},
      "acknowledgement_type",
    ],
    ["statusngin_acknowledgements", "acknowledgement", {}, { timestamp: null }, "timestamp"],
    ["statusngin_downtimes", "downtime", { "downtime_id": null }, {}, "downtime.downtime_id"],
    [
      "statusngin_downtimes",
      "downtime",
      { "service_description": null },
      {},
      "downtime.service_description",
    ],
    [
      "statusngin_downtimes",
      "downtime",
      { "start_time": null },
      { type: 1103 },
      "downtime.start_time",
    ],
    ["statusngin_downtimes", "downtime", {}, { type: 1104, timestamp: null }, "timestamp"],
    // An ADD's time is its announcement's: 0 would let the next core-restart sweep delete the
    // scheduled row of a downtime added after the restart (docs/downtimes.md#the-announcement-table).
    ["statusngin_downtimes", "downtime", {}, { type: 1100, timestamp: null }, "timestamp"],
  ];
  for (const [queue, key, patch, envelope, path] of cases) {
    assertInvalid(
      decodeJob(queue, single(queue, key, patch, envelope), CTX),
      "missing_field",
      path,
    );
  }
});

// ---------------------------------------------------------------------------------------------
// Coercion rules (the table at the top of _coerce.ts)

function hoststatusRow(patch: Json): DecodedJob {
  return decodeJob(
    "statusngin_hoststatus",
    single("statusngin_hoststatus", "hoststatus", patch),
    CTX,
  );
}

Deno.test("coercion: integer fields accept integral numbers and decimal-digit strings", () => {
  const row = onlyRow(
    hoststatusRow({
      "current_state": "2",
      "last_check": "1785470653",
      "max_attempts": -3,
      "next_check": 1e9,
    }),
  );
  assert.equal(row.current_state, 2);
  assert.equal(row.last_check, 1785470653);
  assert.equal(row.max_check_attempts, -3); // clamping into the column range is the writer's job (D6)
  assert.equal(row.next_check, 1e9);
});

Deno.test("coercion: integer fields reject fractions, non-numeric strings, booleans and containers", () => {
  for (
    const v of [1.5, "1.5", "", " 1", "1 ", "0x10", "12a", "1e3", true, [], {}, "1234567890123456"]
  ) {
    assertInvalid(hoststatusRow({ "current_state": v }), "bad_type", "hoststatus.current_state");
  }
});

Deno.test("coercion: optional fields that are null or absent become 0 or ''", () => {
  const ev = events("statusngin_hoststatus")[0] ?? {};
  const p = ev.hoststatus as Json;
  for (
    const k of [
      "current_state",
      "latency",
      "notifications_enabled",
      "plugin_output",
      "check_period",
    ]
  ) delete p[k];
  p.last_check = null;
  const row = onlyRow(decodeJob("statusngin_hoststatus", JSON.stringify(ev), CTX));
  assert.equal(row.current_state, 0);
  assert.equal(row.latency, 0);
  assert.equal(row.notifications_enabled, 0);
  assert.equal(row.output, "");
  assert.equal(row.check_timeperiod, "");
  assert.equal(row.last_check, 0);
});

Deno.test("coercion: flags are normalised to 0/1 and accept booleans and numeric strings (docs/tables.md#flag-columns)", () => {
  const cases: [unknown, number][] = [
    [0, 0],
    [1, 1],
    [5, 1],
    [-1, 1],
    [0.5, 1],
    [true, 1],
    [false, 0],
    ["0", 0],
    ["1", 1],
    ["2", 1],
    [null, 0],
  ];
  for (const [v, want] of cases) {
    const row = onlyRow(hoststatusRow({ "notifications_enabled": v, obsess: v }));
    assert.equal(row.notifications_enabled, want, `flag ${JSON.stringify(v)}`);
    assert.equal(row.obsess_over_host, want, `flag ${JSON.stringify(v)}`);
  }
  for (const v of ["yes", "true", [], {}]) {
    assertInvalid(hoststatusRow({ "is_flapping": v }), "bad_type", "hoststatus.is_flapping");
  }
});

Deno.test("coercion: double fields keep the exact value and accept decimal strings (docs/tables.md#double-columns)", () => {
  const row = onlyRow(
    hoststatusRow({
      latency: 0.60077601671218872,
      "execution_time": "4.25",
      "percent_state_change": "1e-3",
    }),
  );
  assert.equal(row.latency, 0.6007760167121887);
  assert.equal(row.execution_time, 4.25);
  assert.equal(row.percent_state_change, 0.001);
  for (const v of ["fast", true, "", "NaN", "Infinity"]) {
    assertInvalid(hoststatusRow({ latency: v }), "bad_type", "hoststatus.latency");
  }
});

Deno.test("coercion: a JSON number too large for a double (Infinity) is bad_type, not a row", () => {
  const text = fixture("statusngin_hoststatus").replace(
    '"latency": 0.25900000000000001',
    '"latency": 1e400',
  );
  assertInvalid(decodeJob("statusngin_hoststatus", text, CTX), "bad_type", "latency");
  const text2 = fixture("statusngin_hoststatus").replace(
    '"last_check": 1785470653',
    '"last_check": -1e400',
  );
  assertInvalid(decodeJob("statusngin_hoststatus", text2, CTX), "bad_type", "last_check");
});

Deno.test("coercion: text fields accept strings only; numbers are not stringified", () => {
  for (const v of [42, true, [], {}]) {
    assertInvalid(hoststatusRow({ "plugin_output": v }), "bad_type", "hoststatus.plugin_output");
    assertInvalid(hoststatusRow({ name: v }), "bad_type", "hoststatus.name");
  }
  assert.equal(onlyRow(hoststatusRow({ name: "" })).hostname, "");
});

Deno.test("coercion: strings are kept verbatim, without trimming or truncation (D6)", () => {
  const row = onlyRow(hoststatusRow({ "plugin_output": "  padded \n", "perf_data": "\tx=1 " }));
  assert.equal(row.output, "  padded \n");
  assert.equal(row.perfdata, "\tx=1 ");
});

Deno.test("coercion: unknown members are ignored wherever they appear (docs/tables.md#envelope)", () => {
  const ev = events("statusngin_acknowledgements")[0] ?? {};
  const job = decodeJob(
    "statusngin_acknowledgements",
    JSON.stringify({
      ...ev,
      future: { a: 1 },
      acknowledgement: { ...(ev.acknowledgement as Json), extra: [1, 2] },
    }),
    CTX,
  );
  assert.equal(rows(job).length, 1);
});

// ---------------------------------------------------------------------------------------------
// decodePayload: bytes in (docs/payloads.md#order-of-operations)

Deno.test("decodePayload: invalid UTF-8 is repaired per byte before parsing and reported (docs/payloads.md#utf8-repair)", () => {
  const text = single("statusngin_logentries", "logentry", { data: "Datenträger / Datentr?ger" });
  const b = new TextEncoder().encode(text);
  b[b.lastIndexOf(0x3f)] = 0xe4; // a CP1252 "ä" next to a correct UTF-8 "ä"
  const { job, repaired } = decodePayload("statusngin_logentries", b, CTX);
  assert.equal(repaired, true);
  assert.equal(onlyRow(job).logentry_data, "Datenträger / Datenträger");
});

Deno.test("decodePayload: a valid fixture is not reported as repaired and decodes like decodeJob", () => {
  for (const queue of QUEUE_NAMES) {
    const { job, repaired } = decodePayload(queue, fixtureBytes(queue), CTX);
    assert.equal(repaired, false, queue);
    assert.deepEqual(job, decodeJob(queue, fixture(queue), CTX), queue);
  }
});

Deno.test("decodePayload: a U+FFFD sent by the core is kept and not reported as repaired; one next to an ill-formed byte is", () => {
  const text = single("statusngin_logentries", "logentry", { data: "bad \uFFFD char" });
  const valid = decodePayload("statusngin_logentries", new TextEncoder().encode(text), CTX);
  assert.equal(valid.repaired, false);
  assert.equal(onlyRow(valid.job).logentry_data, "bad \uFFFD char");
  const b = new TextEncoder().encode(text.replace("char", "ch?r"));
  b[b.lastIndexOf(0x3f)] = 0xe4;
  const mixed = decodePayload("statusngin_logentries", b, CTX);
  assert.equal(mixed.repaired, true);
  assert.equal(onlyRow(mixed.job).logentry_data, "bad \uFFFD chär");
});

Deno.test("decodePayload: the repaired flag agrees with repairUtf8 for random bytes", () => {
  const rnd = seededRandom(99);
  const prefix = new TextEncoder().encode('{"type":300,"logentry":{"entry_time":1,"data":"');
  const suffix = new TextEncoder().encode('"}}');
  for (let round = 0; round < 2000; round++) {
    const middle = Array.from({ length: rnd(8) }, () => 0x80 + rnd(128));
    const b = new Uint8Array([...prefix, ...middle, ...suffix]);
    const { job, repaired } = decodePayload("statusngin_logentries", b, CTX);
    const r = repairUtf8(b);
    assert.equal(repaired, r.repaired, middle.join(","));
    const data = new TextDecoder().decode(
      r.bytes.subarray(prefix.length, r.bytes.length - suffix.length),
    );
    assert.equal(onlyRow(job).logentry_data, data, middle.join(","));
  }
});

// ---------------------------------------------------------------------------------------------
// Robustness: decodeJob never throws

Deno.test("decodeJob: never throws for mutated fixtures (randomized)", () => {
  const rnd = seededRandom(0x5eed);
  const replacements: unknown[] = [null, 0, -1, 1.5, 1e308, "", "x", "123", true, false, [], {}, [
    1,
  ], { a: 1 }];
  const kinds = new Set(["rows", "downtimes", "core_restart", "ignored", "invalid"]);

  function mutate(v: unknown, depth: number): unknown {
    if (Array.isArray(v)) {
      const out = v.map((x) => (rnd(4) === 0 ? mutate(x, depth + 1) : x));
      if (rnd(10) === 0) out.push(replacements[rnd(replacements.length)]);
      if (rnd(10) === 0) out.pop();
      return out;
    }
    if (typeof v === "object" && v !== null) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) {
        const r = rnd(12);
        if (r === 0) continue; // drop the member
        out[k] = r === 1
          ? replacements[rnd(replacements.length)]
          : r < 4
          ? mutate(x, depth + 1)
          : x;
      }
      return out;
    }
    return rnd(3) === 0 ? replacements[rnd(replacements.length)] : v;
  }

  let total = 0;
  for (const queue of QUEUE_NAMES) {
    const base = parsed(queue);
    const text = fixture(queue);
    for (let i = 0; i < 400; i++) {
      const mutated = JSON.stringify(mutate(base, 0));
      // Also byte-level damage: truncation and a flipped character.
      const cut = text.slice(0, rnd(text.length + 1));
      const pos = rnd(text.length);
      const flipped = text.slice(0, pos) + String.fromCharCode(rnd(128)) + text.slice(pos + 1);
      for (const candidate of [mutated, cut, flipped]) {
        for (const q of [queue, QUEUE_NAMES[rnd(QUEUE_NAMES.length)] ?? queue]) {
          const job = decodeJob(q, candidate, {
            nodeName: "N",
            nowSeconds: 1785470700,
            statusMaxAgeSeconds: rnd(2) * 300,
          });
          assert.ok(kinds.has(job.kind), `${q}: ${candidate}`);
          if (job.kind === "invalid") assert.ok(job.message.length > 0);
          total++;
        }
      }
    }
  }
  assert.ok(total > 20_000);
});
