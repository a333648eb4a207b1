import assert from "node:assert/strict";
import { APPENDIX_CTX, fixture, SCHEMA_COLUMNS } from "./_testing.ts";
import { decodeJob } from "./decode.ts";
import { isQueueName, QUEUE_NAMES, type QueueName, QUEUES } from "./queues.ts";

Deno.test("queues: the table holds exactly the twelve consumed queues, spelled as on the wire", () => {
  assert.deepEqual([...QUEUE_NAMES].sort(), [
    "statusngin_acknowledgements",
    "statusngin_contactnotificationmethod",
    "statusngin_core_restart",
    "statusngin_downtimes",
    "statusngin_hostchecks",
    "statusngin_hoststatus",
    "statusngin_logentries",
    "statusngin_notifications",
    "statusngin_service_perfdata",
    "statusngin_servicechecks",
    "statusngin_servicestatus",
    "statusngin_statechanges",
  ]);
  assert.deepEqual(Object.keys(QUEUES).sort(), [...QUEUE_NAMES].sort());
  for (const name of QUEUE_NAMES) assert.equal(QUEUES[name].name, name);
  assert.ok(!isQueueName("statusngin_flappings"));
  assert.ok(!isQueueName("toString"));
});

// A second in-order queue would halve nothing but throughput; a missing one corrupts downtime rows
// (docs/tables.md#downtime-queue-in-order). A stale filter on a history queue is silent data loss
// (docs/tables.md#stale-status).
Deno.test("queues: only downtimes is in order and only the two status queues filter stale events", () => {
  assert.deepEqual(QUEUE_NAMES.filter((q) => QUEUES[q].inOrder), ["statusngin_downtimes"]);
  assert.deepEqual(QUEUE_NAMES.filter((q) => QUEUES[q].staleFilter), [
    "statusngin_hoststatus",
    "statusngin_servicestatus",
  ]);
});

Deno.test("queues: payload keys are those of docs/tables.md#consumed-queues", () => {
  const keys: Record<QueueName, string | null> = {
    "statusngin_hoststatus": "hoststatus",
    "statusngin_servicestatus": "servicestatus",
    "statusngin_hostchecks": "hostcheck",
    "statusngin_servicechecks": "servicecheck",
    "statusngin_service_perfdata": "servicecheck",
    "statusngin_statechanges": "statechange",
    "statusngin_logentries": "logentry",
    "statusngin_notifications": "notification_data",
    "statusngin_contactnotificationmethod": "contactnotificationmethod",
    "statusngin_acknowledgements": "acknowledgement",
    "statusngin_downtimes": "downtime",
    "statusngin_core_restart": null,
  };
  for (const q of QUEUE_NAMES) assert.equal(QUEUES[q].payloadKey, keys[q], q);
});

/** Host-side variants of the fixtures, so both tables of a routed queue are exercised. */
function variants(queue: QueueName): string[] {
  const text = fixture(queue);
  const doc = JSON.parse(text) as Record<string, unknown>;
  const out = [text];
  const key = QUEUES[queue].payloadKey;
  if (key === null || QUEUES[queue].tables.length === 1) return out;
  const evs = (Array.isArray(doc.messages) ? doc.messages : [doc]) as Record<string, unknown>[];
  const host = evs.map((ev) => ({
    ...ev,
    [key]: {
      ...(ev[key] as Record<string, unknown>),
      "service_description": null,
      "statechange_type": 0,
      "acknowledgement_type": 0,
      "downtime_type": 2,
    },
  }));
  out.push(JSON.stringify({ messages: host }));
  if (queue === "statusngin_downtimes") {
    for (const type of [1101, 1103, 1104]) {
      out.push(JSON.stringify({ messages: [...evs, ...host].map((ev) => ({ ...ev, type })) }));
    }
  }
  return out;
}

// If a decoder wrote a table its queue does not list, the writers wired from `tables` would
// never be created for it (one list, pinned by a consistency test).
Deno.test("queues: tables lists exactly what the decoders emit", () => {
  for (const q of QUEUE_NAMES) {
    const spec = QUEUES[q];
    const seen = new Set<string>();
    for (const text of variants(q)) {
      const job = decodeJob(q, text, APPENDIX_CTX);
      assert.equal(job.kind, spec.output, `${q}: ${JSON.stringify(job)}`);
      if (job.kind === "rows") { for (const r of job.rows) seen.add(r.table); }
      if (job.kind === "downtimes") { for (const s of job.statements) seen.add(s.table); }
    }
    if (spec.output === "core_restart") {
      // D4: the cleanup deletes from the two status tables; nothing is emitted as rows.
      assert.deepEqual(spec.tables, ["statusengine_hoststatus", "statusengine_servicestatus"]);
      continue;
    }
    assert.deepEqual([...seen].sort(), [...spec.tables].sort(), q);
  }
});

Deno.test("queues: every table a decoder writes has the catalogue's column list", () => {
  for (const q of QUEUE_NAMES) {
    for (const t of QUEUES[q].tables) assert.ok(SCHEMA_COLUMNS[t], `${q}: ${t}`);
  }
  for (const q of QUEUE_NAMES) {
    for (const text of variants(q)) {
      const job = decodeJob(q, text, APPENDIX_CTX);
      if (job.kind !== "rows") continue;
      for (const r of job.rows) {
        assert.deepEqual(Object.keys(r.row), SCHEMA_COLUMNS[r.table], `${q}: ${r.table}`);
      }
    }
  }
});
