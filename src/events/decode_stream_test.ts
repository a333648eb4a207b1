/**
 * The `/ws` copy of a job's events (`collectEvents`, docs/operations.md#ws): the same
 * filtering as persistence, the source objects unchanged, nothing collected unless asked.
 */
import assert from "node:assert/strict";
import { decodeJob } from "./decode.ts";
import { QUEUE_NAMES, QUEUES } from "./queues.ts";
import { APPENDIX_CTX, fixture } from "./_testing.ts";
import type { DecodeContext, DecodedJob, StreamEvent } from "./types.ts";

const COLLECT: DecodeContext = { ...APPENDIX_CTX, collectEvents: true };

function eventsOf(job: DecodedJob): StreamEvent[] | undefined {
  return job.kind === "rows" || job.kind === "downtimes" || job.kind === "core_restart"
    ? job.events
    : undefined;
}

function sourceEvents(text: string): unknown[] {
  const doc = JSON.parse(text);
  return Array.isArray(doc.messages) ? doc.messages : [doc];
}

Deno.test("decodeJob: without collectEvents no job carries events (a worker nobody watches pays nothing)", () => {
  for (const q of QUEUE_NAMES) {
    assert.equal(eventsOf(decodeJob(q, fixture(q), APPENDIX_CTX)), undefined, q);
  }
});

Deno.test("decodeJob: every fixture's events are collected unchanged, envelope included", () => {
  for (const q of QUEUE_NAMES) {
    const events = eventsOf(decodeJob(q, fixture(q), COLLECT));
    // Every fixture event passes its queue's filters: 601s reached contacts, the 605 and
    // the 102 count, and the stale filter is off.
    assert.deepEqual(events, sourceEvents(fixture(q)), q);
  }
});

Deno.test("decodeJob: collected events are the parsed objects themselves, not copies", () => {
  const job = decodeJob("statusngin_logentries", fixture("statusngin_logentries"), COLLECT);
  const events = eventsOf(job) ?? [];
  assert.equal(events.length, 3);
  assert.equal(typeof events[0]?.["logentry"], "object");
  assert.equal(events[0]?.["type"], 300);
});

Deno.test("decodeJob: stale status events are not collected (docs/operations.md#ws)", () => {
  const now = 1_785_470_700;
  const text = JSON.stringify({
    messages: [
      { type: 1201, timestamp: now - 1000, hoststatus: { name: "old" } },
      { type: 1201, timestamp: now - 5, hoststatus: { name: "fresh" } },
    ],
  });
  const job = decodeJob("statusngin_hoststatus", text, {
    nodeName: "N",
    nowSeconds: now,
    statusMaxAgeSeconds: 300,
    collectEvents: true,
  });
  assert.equal(job.kind, "rows");
  assert.equal(job.kind === "rows" ? job.staleDiscarded : -1, 1);
  assert.deepEqual(eventsOf(job)?.map((e) => (e["hoststatus"] as { name: string }).name), [
    "fresh",
  ]);
});

Deno.test("decodeJob: only notification ends that reached a contact are collected", () => {
  const base = {
    timestamp: 1,
    "notification_data": {
      host_name: "h",
      service_description: "",
      start_time: 1,
      end_time: 2,
      contacts_notified: 1,
    },
  };
  const text = JSON.stringify({
    messages: [
      { ...base, type: 600 },
      {
        ...base,
        type: 601,
        "notification_data": { ...base["notification_data"], contacts_notified: 0 },
      },
      { ...base, type: 601 },
    ],
  });
  const job = decodeJob("statusngin_notifications", text, COLLECT);
  assert.equal(job.kind === "rows" ? job.rows.length : -1, 1);
  assert.deepEqual(eventsOf(job), [JSON.parse(text).messages[2]]);
});

Deno.test("decodeJob: only contact-notification-method ends (605) are collected", () => {
  const start = { type: 604, timestamp: 1, contactnotificationmethod: { host_name: "h" } };
  const job = decodeJob("statusngin_contactnotificationmethod", JSON.stringify(start), COLLECT);
  assert.deepEqual(eventsOf(job), []);
});

Deno.test("decodeJob: only PROCESS_RESTART (102) core-restart events are collected", () => {
  const text = JSON.stringify({
    messages: [{ object_type: 100, timestamp: 5 }, { object_type: 102, timestamp: 0 }],
  });
  const job = decodeJob("statusngin_core_restart", text, COLLECT);
  assert.equal(job.kind, "core_restart");
  assert.deepEqual(eventsOf(job), [{ object_type: 102, timestamp: 0 }]);
  const other = decodeJob("statusngin_core_restart", '{"object_type":100}', COLLECT);
  assert.equal(other.kind, "ignored");
});

Deno.test("decodeJob: downtime LOAD events are streamed and write their rows", () => {
  const load = {
    type: 1102,
    timestamp: 1,
    downtime: { host_name: "h", downtime_type: 2, downtime_id: 1, start_time: 1 },
  };
  const job = decodeJob("statusngin_downtimes", JSON.stringify(load), COLLECT);
  assert.equal(job.kind === "downtimes" ? job.statements.length : -1, 3);
  assert.deepEqual(eventsOf(job), [load]);
});

Deno.test("queues: the stream rule keeps only effective events on exactly three queues", () => {
  assert.deepEqual(
    QUEUE_NAMES.filter((q) => QUEUES[q].stream === "effective_events"),
    ["statusngin_notifications", "statusngin_contactnotificationmethod", "statusngin_core_restart"],
  );
});
