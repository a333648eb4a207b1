import assert from "node:assert/strict";
import { decodeJob } from "../events/decode.ts";
import { parsePerfdata } from "../events/perfdata.ts";
import { QUEUE_NAMES, type QueueName, QUEUES } from "../events/queues.ts";
import type { DecodedJob, DowntimeStatement, TableRow } from "../events/types.ts";
import { adjustRow } from "../mysql/values.ts";
import { type TableName, TABLES } from "../mysql/catalogue.ts";
import {
  defaultForm,
  encodeEvent,
  jobsFor,
  type JsonValue,
  SINGLE_FORM_QUEUES,
  type SyntheticEvent,
  syntheticEvents,
} from "./mod.ts";

const NOW = 1_785_470_668_000;
/** Heap cap of the million-event drain: the stream needs under 20 MB, a held million 150+ MB. */
const HEAP_CAP_MB = 48;
const CTX = { nodeName: "N", nowSeconds: NOW / 1000, statusMaxAgeSeconds: 300 };
const COUNT = 600;

function events(queue: QueueName, count = COUNT, seed = 42, now = NOW): SyntheticEvent[] {
  return [...syntheticEvents(queue, count, { seed, now })];
}

function decodeAll(queue: QueueName, jobs: Iterable<string>): DecodedJob[] {
  return [...jobs].map((j) => decodeJob(queue, j, CTX));
}

function payloadOf(queue: QueueName, ev: SyntheticEvent): Record<string, JsonValue> {
  const key = QUEUES[queue].payloadKey;
  assert.ok(key !== null);
  const p = ev[key];
  assert.ok(typeof p === "object" && p !== null && !Array.isArray(p), `${queue}: payload object`);
  return p as Record<string, JsonValue>;
}

function rowsOf(jobs: DecodedJob[]): TableRow[] {
  return jobs.flatMap((j) => (j.kind === "rows" ? j.rows : []));
}

function statementsOf(jobs: DecodedJob[]): DowntimeStatement[] {
  return jobs.flatMap((j) => (j.kind === "downtimes" ? j.statements : []));
}

const EXPECTED_KIND: Record<string, DecodedJob["kind"]> = {
  rows: "rows",
  downtimes: "downtimes",
  "core_restart": "core_restart",
};

for (const queue of QUEUE_NAMES) {
  for (const form of ["bulk", "single"] as const) {
    Deno.test(
      `synthetic: every ${form} job of ${queue} decodes to ${
        QUEUES[queue].output
      } without an invalid or stale event`,
      () => {
        const jobs = [...jobsFor(queue, events(queue), { form, eventsPerJob: 50 })];
        assert.equal(jobs.length, form === "bulk" ? COUNT / 50 : COUNT);
        for (const [i, job] of jobs.entries()) {
          const decoded = decodeJob(queue, job, CTX);
          assert.equal(
            decoded.kind,
            EXPECTED_KIND[QUEUES[queue].output],
            `${queue} job ${i}: ${decoded.kind === "invalid" ? decoded.message : decoded.kind}`,
          );
          if (decoded.kind === "rows") assert.equal(decoded.staleDiscarded, 0);
        }
      },
    );
  }
}

Deno.test("synthetic: the default form is single exactly for the four unbatched queues", () => {
  assert.deepEqual(
    QUEUE_NAMES.filter((q) => defaultForm(q) === "single").sort(),
    [...SINGLE_FORM_QUEUES].sort(),
  );
  assert.equal(QUEUE_NAMES.filter((q) => defaultForm(q) === "bulk").length, 8);
});

Deno.test("synthetic: bulk jobs are {messages, format none}, the last one holds the remainder", () => {
  const jobs = [...jobsFor("statusngin_hostchecks", events("statusngin_hostchecks", 250), {
    eventsPerJob: 100,
  })];
  assert.deepEqual(
    jobs.map((j) => (JSON.parse(j) as { messages: unknown[] }).messages.length),
    [100, 100, 50],
  );
  for (const j of jobs) assert.equal((JSON.parse(j) as { format: string }).format, "none");
});

Deno.test("synthetic: the same seed and now give identical jobs, another seed different ones", () => {
  for (const queue of QUEUE_NAMES) {
    const a = [...jobsFor(queue, events(queue, 200, 7))];
    const b = [...jobsFor(queue, events(queue, 200, 7))];
    assert.deepEqual(a, b, queue);
    if (queue !== "statusngin_core_restart") {
      assert.notDeepEqual(a, [...jobsFor(queue, events(queue, 200, 8))], queue);
    }
  }
});

Deno.test("synthetic: every event carries the broker's envelope, the core restart exactly its fixture shape", () => {
  for (const queue of QUEUE_NAMES) {
    for (const ev of events(queue, 100)) {
      if (queue === "statusngin_core_restart") {
        assert.deepEqual(ev, { object_type: 102, timestamp: 0 });
        continue;
      }
      assert.deepEqual(
        Object.keys(ev),
        ["type", "flags", "attr", "timestamp", "timestamp_usec", QUEUES[queue].payloadKey],
      );
      const usec = ev["timestamp_usec"];
      assert.ok(typeof usec === "number" && usec >= 0 && usec <= 999_999);
    }
  }
});

Deno.test("synthetic: status and check events fall into the minute before now, so none is stale", () => {
  for (
    const queue of [
      "statusngin_hoststatus",
      "statusngin_servicestatus",
      "statusngin_hostchecks",
      "statusngin_servicechecks",
    ] as const
  ) {
    for (const ev of events(queue)) {
      const ts = ev["timestamp"] as number;
      assert.ok(ts <= NOW / 1000 && ts >= NOW / 1000 - 62, `${queue}: ${ts}`);
    }
  }
});

Deno.test("synthetic: payloads carry every field the broker sends on their queue", () => {
  const fields: Partial<Record<QueueName, string[]>> = {
    "statusngin_hostchecks": [
      "host_name",
      "command_line",
      "command_name",
      "output",
      "long_output",
      "perf_data",
      "check_type",
      "current_attempt",
      "max_attempts",
      "state_type",
      "state",
      "timeout",
      "start_time",
      "end_time",
      "early_timeout",
      "execution_time",
      "latency",
      "return_code",
    ],
    "statusngin_service_perfdata": ["host_name", "service_description", "perf_data", "start_time"],
    "statusngin_statechanges": [
      "host_name",
      "service_description",
      "output",
      "long_output",
      "statechange_type",
      "state",
      "state_type",
      "current_attempt",
      "max_attempts",
      "last_state",
      "last_hard_state",
    ],
    "statusngin_logentries": ["entry_time", "data_type", "data"],
    "statusngin_notifications": [
      "host_name",
      "service_description",
      "output",
      "long_output",
      "ack_author",
      "ack_data",
      "notification_type",
      "start_time",
      "end_time",
      "reason_type",
      "state",
      "escalated",
      "contacts_notified",
    ],
    "statusngin_contactnotificationmethod": [
      "host_name",
      "service_description",
      "output",
      "ack_author",
      "ack_data",
      "contact_name",
      "command_name",
      "command_args",
      "reason_type",
      "state",
      "start_time",
      "end_time",
    ],
    "statusngin_acknowledgements": [
      "host_name",
      "service_description",
      "author_name",
      "comment_data",
      "acknowledgement_type",
      "state",
      "is_sticky",
      "persistent_comment",
      "notify_contacts",
    ],
    "statusngin_downtimes": [
      "host_name",
      "service_description",
      "author_name",
      "comment_data",
      "downtime_type",
      "entry_time",
      "start_time",
      "end_time",
      "triggered_by",
      "downtime_id",
      "fixed",
      "duration",
    ],
  };
  const fixture = (queue: QueueName): string[] => {
    const text = Deno.readTextFileSync(
      new URL(`../events/testdata/${queue}.job`, import.meta.url),
    );
    const doc = JSON.parse(text) as Record<string, unknown>;
    const ev = (Array.isArray(doc["messages"]) ? doc["messages"][0] : doc) as Record<
      string,
      Record<string, unknown>
    >;
    const key = QUEUES[queue].payloadKey ?? "";
    return Object.keys(ev[key] ?? {});
  };
  fields.statusngin_hoststatus = fixture("statusngin_hoststatus");
  fields.statusngin_servicestatus = fixture("statusngin_servicestatus");
  fields.statusngin_servicechecks = fixture("statusngin_servicechecks");
  for (const [queue, names] of Object.entries(fields) as [QueueName, string[]][]) {
    for (const ev of events(queue, 50)) {
      assert.deepEqual(Object.keys(payloadOf(queue, ev)), names, queue);
    }
  }
});

Deno.test("synthetic: host names and service descriptions look like a real installation", () => {
  const hosts = new Set<string>();
  const services = new Set<string>();
  for (const ev of events("statusngin_servicechecks", 2_000)) {
    const p = payloadOf("statusngin_servicechecks", ev);
    hosts.add(String(p["host_name"]));
    services.add(String(p["service_description"]));
  }
  assert.ok([...hosts].some((h) => /^[a-z]+-\d{3}\.example\.(com|net|org)$/.test(h)));
  assert.ok([...hosts].some((h) => /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-/.test(h)), "UUID hosts");
  assert.ok(hosts.size >= 40, `${hosts.size} hosts`);
  for (const s of ["Disk Usage /var", "Datenträger C:", "Прочее", "監視 HTTP", "PING"]) {
    assert.ok(services.has(s), s);
  }
});

Deno.test("synthetic: jobs contain non-ASCII text (German, Cyrillic, CJK, emoji) and escape / as \\/", () => {
  const text = [...jobsFor(
    "statusngin_servicechecks",
    syntheticEvents("statusngin_servicechecks", 2_000, { seed: 3, now: NOW }),
  )].join("\n");
  for (const s of ["Datenträger C:", "größer", "Прочее", "監視", "Füllstand", "🔥"]) {
    assert.ok(text.includes(s), s);
  }
  assert.ok(text.includes("$USER1$\\/check_"), "slashes escaped like the broker does");
  assert.ok(!/[^\\]\/check_/.test(text));
});

Deno.test("synthetic: states and state types vary over the whole range", () => {
  const states = new Set<string>();
  for (const ev of events("statusngin_servicechecks", 3_000)) {
    const p = payloadOf("statusngin_servicechecks", ev);
    states.add(`${p["state"]}/${p["state_type"]}`);
  }
  for (const s of ["0/1", "1/0", "1/1", "2/0", "2/1", "3/1"]) assert.ok(states.has(s), s);
  const hostStates = new Set(
    events("statusngin_hostchecks", 3_000).map((ev) =>
      payloadOf("statusngin_hostchecks", ev)["state"]
    ),
  );
  assert.deepEqual([...hostStates].sort(), [0, 1, 2]);
});

Deno.test("synthetic: some long outputs are multi-line and a few KB long", () => {
  const longs = events("statusngin_servicechecks", 3_000)
    .map((ev) => String(payloadOf("statusngin_servicechecks", ev)["long_output"]))
    .filter((s) => s.length >= 2_000);
  assert.ok(longs.length > 0, "no long output");
  for (const s of longs) {
    assert.ok(s.includes("\n"));
    assert.ok(s.length <= 8_192, "fits long_output varchar(8192)");
  }
});

Deno.test("synthetic: every perfdata string parses into one gauge per token (docs/perfdata.md#parsing)", () => {
  let gauges = 0;
  for (const ev of events("statusngin_service_perfdata", 3_000)) {
    const perf = String(payloadOf("statusngin_service_perfdata", ev)["perf_data"]);
    if (perf === "") continue;
    const tokens = perf.match(/(?:'[^']*'|[^ '])+/g) ?? [];
    const parsed = parsePerfdata(perf);
    assert.equal(parsed.length, tokens.length, perf);
    gauges += parsed.length;
  }
  assert.ok(gauges > 3_000);
});

Deno.test("synthetic: generated rows need no D6 adjustment (every value fits its column)", () => {
  for (const queue of QUEUE_NAMES) {
    const decoded = decodeAll(queue, jobsFor(queue, events(queue, 1_000)));
    const rows = [
      ...rowsOf(decoded),
      ...statementsOf(decoded).flatMap((s) =>
        s.kind === "upsert" ? [{ table: s.table, row: s.row }] : []
      ),
    ];
    for (const { table, row } of rows) {
      const { adjustments } = adjustRow(TABLES[table as TableName], row);
      assert.deepEqual(adjustments, [], `${queue} → ${table}: ${JSON.stringify(adjustments)}`);
    }
  }
});

Deno.test("synthetic: primary keys of the history tables are unique within a run", () => {
  for (const queue of QUEUE_NAMES) {
    const rows = rowsOf(decodeAll(queue, jobsFor(queue, events(queue, 5_000))));
    const seen = new Map<string, Set<string>>();
    for (const { table, row } of rows) {
      const t = TABLES[table as TableName];
      // Status tables keep one row per object on purpose; perfdata and logentries have no key.
      if (t.writeMode !== "history_upsert") continue;
      const keys = seen.get(table) ?? new Set<string>();
      const key = JSON.stringify(t.primaryKey.map((c) => row[c]));
      assert.ok(!keys.has(key), `${table}: duplicate key ${key}`);
      keys.add(key);
      seen.set(table, keys);
    }
  }
});

Deno.test("synthetic: runs with different seeds at the same time share no history key", () => {
  const keys = (seed: number) =>
    new Set(
      rowsOf(decodeAll(
        "statusngin_servicechecks",
        jobsFor("statusngin_servicechecks", events("statusngin_servicechecks", 2_000, seed)),
      )).map(({ row }) =>
        `${row["service_description"]}|${row["start_time"]}|${row["start_time_usec"]}`
      ),
    );
  const a = keys(1);
  const b = keys(2);
  assert.equal([...a].filter((k) => b.has(k)).length, 0);
});

Deno.test("synthetic: host and service variants both occur, with the discriminators of docs/tables.md#host-or-service", () => {
  const tablesOf = (queue: QueueName) =>
    new Set(rowsOf(decodeAll(queue, jobsFor(queue, events(queue, 400)))).map((r) => r.table));
  // Each queue fills statusengine_host_<table> and statusengine_service_<table>.
  const variants: [QueueName, string][] = [
    ["statusngin_statechanges", "statehistory"],
    ["statusngin_acknowledgements", "acknowledgements"],
    ["statusngin_notifications", "notifications_log"],
    ["statusngin_contactnotificationmethod", "notifications"],
  ];
  for (const [queue, table] of variants) {
    assert.deepEqual(
      tablesOf(queue),
      new Set([`statusengine_host_${table}`, `statusengine_service_${table}`]),
      queue,
    );
  }
  const dtTables = new Set(
    statementsOf(
      decodeAll(
        "statusngin_downtimes",
        jobsFor("statusngin_downtimes", events("statusngin_downtimes", 400)),
      ),
    )
      .map((s) => s.table),
  );
  assert.ok(dtTables.has("statusengine_host_downtimehistory"));
  assert.ok(dtTables.has("statusengine_service_scheduleddowntimes"));
  // Contact notification methods come as 604 (skipped) + 605 (stored) pairs.
  const types = events("statusngin_contactnotificationmethod", 10).map((e) => e["type"]);
  assert.deepEqual(types, [604, 605, 604, 605, 604, 605, 604, 605, 604, 605]);
});

Deno.test("synthetic: downtimes are consistent lifecycles ADD→START→STOP→DELETE or ADD→DELETE before the window", () => {
  const byId = new Map<number, SyntheticEvent[]>();
  const all = events("statusngin_downtimes", 2_000);
  for (const ev of all) {
    const id = payloadOf("statusngin_downtimes", ev)["downtime_id"] as number;
    byId.set(id, [...(byId.get(id) ?? []), ev]);
  }
  let full = 0;
  let early = 0;
  const lifecycles = [...byId.values()];
  // The last lifecycle may be cut by the count.
  for (const evs of lifecycles.slice(0, -1)) {
    const types = evs.map((e) => e["type"]);
    const p = payloadOf("statusngin_downtimes", evs[0] ?? {});
    // Identical definition in every event of a lifecycle (docs/tables.md#downtime-events).
    for (const e of evs) assert.deepEqual(payloadOf("statusngin_downtimes", e), p);
    const ts = evs.map((e) => e["timestamp"] as number);
    assert.deepEqual(ts, [...ts].sort((x, y) => x - y), "envelope times ascend");
    assert.ok((p["start_time"] as number) < (p["end_time"] as number));
    assert.ok((p["entry_time"] as number) <= (p["start_time"] as number));
    if (types.length === 4) {
      full++;
      assert.deepEqual(types, [1100, 1103, 1104, 1101]);
      const stop = evs[2] ?? {};
      assert.ok([1, 2].includes(stop["attr"] as number));
      if (stop["attr"] === 1) assert.equal(stop["timestamp"], p["end_time"]);
      else assert.ok((stop["timestamp"] as number) < (p["end_time"] as number));
    } else {
      early++;
      assert.deepEqual(types, [1100, 1101]);
      // Deleted before its window: the history row goes too (docs/tables.md#downtime-statements).
      assert.ok((p["start_time"] as number) > (evs[1]?.["timestamp"] as number));
    }
  }
  assert.ok(full > 0 && early > 0);
  // The decoder sees the same lifecycle: the statements of one id in lifecycle order
  // (docs/tables.md#downtime-statements).
  const statements = statementsOf(
    decodeAll("statusngin_downtimes", jobsFor("statusngin_downtimes", all)),
  );
  const adds = statements.filter((s) => s.kind === "upsert" && s.event === "ADD");
  const addKeys = adds.map((s) => (s.kind === "upsert" ? JSON.stringify(s.row) : ""));
  assert.equal(new Set(addKeys).size, addKeys.length);
});

Deno.test("synthetic: encodeEvent escapes only inside strings and round-trips", () => {
  const ev: SyntheticEvent = { a: "x/y", b: [1, "/"], c: { d: null } };
  const text = encodeEvent(ev);
  assert.equal(text, '{"a":"x\\/y","b":[1,"\\/"],"c":{"d":null}}');
  assert.deepEqual(JSON.parse(text), ev);
});

Deno.test("synthetic: counts and events per job must be positive integers", () => {
  assert.throws(() => [...syntheticEvents("statusngin_hoststatus", 0, { seed: 1 })], RangeError);
  assert.throws(
    () => [...jobsFor("statusngin_hoststatus", [], { eventsPerJob: 0 })],
    RangeError,
  );
  assert.throws(
    () => [...syntheticEvents("statusngin_flappings" as QueueName, 1, { seed: 1 })],
    /not a consumed queue/,
  );
});

Deno.test("synthetic: a million events stream in bounded memory", async () => {
  // Pulls one job at a time; nothing is kept. The drain runs in a child whose V8 heap is capped
  // well below what a million events take when held (over 150 MB of strings), so a leak ends it
  // with "heap limit reached". Reading heapUsed in this process instead would count garbage a
  // busy machine has not collected yet, and failed CI that way.
  const script = `
    const { jobsFor, syntheticEvents } = await import(${
    JSON.stringify(import.meta.resolve("./mod.ts"))
  });
    let jobs = 0;
    for (const job of jobsFor(
      "statusngin_logentries",
      syntheticEvents("statusngin_logentries", 1_000_000, { seed: 9, now: ${NOW} }),
    )) {
      if (job.length > 0) jobs++;
    }
    console.log(jobs);
  `;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", `--v8-flags=--max-old-space-size=${HEAP_CAP_MB}`, script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(
    out.code,
    0,
    `drain under a ${HEAP_CAP_MB} MB heap failed:\n${stderr.slice(0, 2000)}`,
  );
  assert.equal(new TextDecoder().decode(out.stdout).trim(), "10000");
});
