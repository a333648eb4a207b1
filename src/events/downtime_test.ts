import assert from "node:assert/strict";
import { SCHEMA_COLUMNS } from "./_testing.ts";
import {
  DOWNTIME_ADD,
  DOWNTIME_DELETE,
  DOWNTIME_LOAD,
  DOWNTIME_START,
  DOWNTIME_STOP,
  type DowntimeEvent,
  downtimeStatements,
} from "./downtime.ts";
import type { DowntimeStatement, Row } from "./types.ts";

const NODE = "N";
const START = 1785517380;

function event(over: Partial<DowntimeEvent>): DowntimeEvent {
  return {
    type: DOWNTIME_ADD,
    attr: 0,
    timestamp: 1785517315,
    timestampUsec: 224439,
    downtimeType: 1,
    hostName: "efb91fa3",
    serviceDescription: "66d42eec",
    downtimeId: 1,
    startTime: START,
    endTime: 1785517500,
    entryTime: 1785517314,
    authorName: "Daniel Z",
    commentData: "In maintenance",
    triggeredBy: 0,
    fixed: 1,
    duration: 120,
    ...over,
  };
}

const KINDS = [
  {
    name: "host",
    downtimeType: 2,
    history: "statusengine_host_downtimehistory",
    scheduled: "statusengine_host_scheduleddowntimes",
  },
  {
    name: "service",
    downtimeType: 1,
    history: "statusengine_service_downtimehistory",
    scheduled: "statusengine_service_scheduleddowntimes",
  },
] as const;

function key(host: boolean): Row {
  return host
    ? {
      hostname: "efb91fa3",
      "node_name": NODE,
      "scheduled_start_time": START,
      "internal_downtime_id": 1,
    }
    : {
      hostname: "efb91fa3",
      "service_description": "66d42eec",
      "node_name": NODE,
      "scheduled_start_time": START,
      "internal_downtime_id": 1,
    };
}

/** The definition columns, as `event()` defines the downtime. */
function statics(): Row {
  const e = event({});
  return {
    "entry_time": e.entryTime,
    "author_name": e.authorName,
    "comment_data": e.commentData,
    "triggered_by_id": e.triggeredBy,
    "is_fixed": e.fixed,
    duration: e.duration,
    "scheduled_end_time": e.endTime,
  };
}

/** Orders a row's columns like the schema, so comparisons also pin the column order. */
function schemaOrdered(table: string, row: Row): Row {
  const cols = SCHEMA_COLUMNS[table];
  assert.ok(cols, table);
  const out: Record<string, string | number | null> = {};
  for (const c of cols) {
    const v = row[c];
    assert.ok(v !== undefined, `${table}.${c} missing from the expectation`);
    out[c] = v;
  }
  return out;
}

function tombstoneKey(host: boolean): Row {
  return {
    hostname: "efb91fa3",
    "service_description": host ? "" : "66d42eec",
    "node_name": NODE,
    "scheduled_start_time": START,
    "internal_downtime_id": 1,
  };
}

function guards(host: boolean) {
  const t = "statusengine_downtime_tombstones" as const;
  return {
    history: { table: t, key: tombstoneKey(host), historyRemoved: true },
    scheduled: { table: t, key: tombstoneKey(host), historyRemoved: false },
  };
}

/** The record that the core announced the downtime (ADD, LOAD, START) at `ts`. */
function announcement(host: boolean, event: "ADD" | "LOAD" | "START", ts: number) {
  return {
    kind: "upsert",
    event,
    table: "statusengine_downtime_announcements",
    row: { ...tombstoneKey(host), "announced_at": ts },
    merge: [{ column: "announced_at", rule: "max" }],
    guard: guards(host).scheduled,
    detectUnmatched: false,
  };
}

/** The scheduled row written as its share of the history row the statement before merged. */
function copy(k: (typeof KINDS)[number], event: "ADD" | "LOAD" | "START") {
  const host = k.name === "host";
  return {
    kind: "copy",
    event,
    table: k.scheduled,
    from: k.history,
    key: key(host),
    guard: guards(host).scheduled,
  };
}

function assertColumnOrder(statements: DowntimeStatement[]): void {
  for (const s of statements) {
    if (s.kind === "delete" || s.kind === "copy") {
      const host = s.table.startsWith("statusengine_host_");
      assert.deepEqual(Object.keys(s.key), Object.keys(key(host)), `${s.table} key order`);
    } else {
      assert.deepEqual(Object.keys(s.row), SCHEMA_COLUMNS[s.table], `${s.table} column order`);
    }
  }
}

// The definition columns, the ones `statics` fills, in schema order.
const STATIC_MERGE = Object.keys(statics()).map((column) => ({ column, rule: "assign" }));

function historyRow(host: boolean, usec: number, dynamic: Partial<Row> = {}): Row {
  return {
    ...key(host),
    ...statics(),
    "entry_time_usec": usec,
    "was_started": 0,
    "actual_start_time": 0,
    "actual_end_time": 0,
    "was_cancelled": 0,
    ...dynamic,
  };
}

Deno.test("downtimeStatements: ADD upserts history with dynamic columns 0, merging only the definition; LOAD creates it from its definition and changes nothing that exists; both record the announcement, then copy the scheduled row", () => {
  const cases = [
    {
      type: DOWNTIME_ADD,
      name: "ADD",
      usec: 224439,
      merge: [
        { column: "entry_time", rule: "assign" },
        { column: "entry_time_usec", rule: "assign" },
        ...STATIC_MERGE.slice(1),
      ],
    },
    // Only an ADD's usec is the entry_time_usec.
    { type: DOWNTIME_LOAD, name: "LOAD", usec: 0, merge: [] },
  ] as const;
  for (const k of KINDS) {
    const host = k.name === "host";
    for (const c of cases) {
      const got = downtimeStatements(
        event({ type: c.type, downtimeType: k.downtimeType, timestampUsec: 224439 }),
        NODE,
      );
      assertColumnOrder(got);
      assert.deepEqual(got, [
        {
          kind: "upsert",
          event: c.name,
          table: k.history,
          row: schemaOrdered(k.history, historyRow(host, c.usec)),
          merge: c.merge,
          guard: guards(host).history,
          detectUnmatched: false,
        },
        announcement(host, c.name, 1785517315),
        copy(k, c.name),
      ], `${k.name} ${c.name}`);
    }
  }
});

// A late or redelivered ADD must not reset was_started/actual_* of a downtime that already
// started or ended (docs/tables.md#downtime-add-static-columns).
Deno.test("downtimeStatements: no ADD or LOAD merges a dynamic or key column", () => {
  const dynamic = ["was_started", "actual_start_time", "actual_end_time", "was_cancelled"];
  for (const k of KINDS) {
    const host = k.name === "host";
    for (const type of [DOWNTIME_ADD, DOWNTIME_LOAD]) {
      for (const s of downtimeStatements(event({ type, downtimeType: k.downtimeType }), NODE)) {
        assert.notEqual(s.kind, "tombstone");
        assert.notEqual(s.kind, "delete");
        if (s.kind !== "upsert") continue;
        for (const { column } of s.merge) {
          assert.ok(!dynamic.includes(column), `${s.table}: ${column} must not be merged by ADD`);
          assert.ok(!(column in key(host)), `${s.table}: key column ${column} merged`);
          assert.ok(column in s.row, `${s.table}: ${column} is not inserted`);
        }
      }
    }
  }
});

Deno.test("downtimeStatements: START creates or merges the history row as started, earliest start wins, records the announcement, copies the scheduled row", () => {
  const ts = START + 5;
  const startMerge = [
    { column: "was_started", rule: "max" },
    // A START re-announced after a core restart must not move the recorded start.
    { column: "actual_start_time", rule: "earliest" },
  ];
  for (const k of KINDS) {
    const host = k.name === "host";
    const got = downtimeStatements(
      event({ type: DOWNTIME_START, downtimeType: k.downtimeType, timestamp: ts }),
      NODE,
    );
    assertColumnOrder(got);
    const started = { "was_started": 1, "actual_start_time": ts };
    assert.deepEqual(got, [
      {
        kind: "upsert",
        event: "START",
        table: k.history,
        row: schemaOrdered(k.history, historyRow(host, 0, started)),
        merge: startMerge,
        guard: guards(host).history,
        detectUnmatched: true,
      },
      announcement(host, "START", ts),
      copy(k, "START"),
    ], k.name);
  }
});

Deno.test("downtimeStatements: STOP records end and cancel flag (attr 2 only), then the tombstone, then deletes scheduled", () => {
  const ts = START + 120;
  for (const k of KINDS) {
    const host = k.name === "host";
    for (const [attr, cancelled] of [[1, 0], [2, 1], [0, 0], [3, 0]] as const) {
      const got = downtimeStatements(
        event({ type: DOWNTIME_STOP, downtimeType: k.downtimeType, timestamp: ts, attr }),
        NODE,
      );
      assertColumnOrder(got);
      assert.deepEqual(got, [
        {
          kind: "upsert",
          event: "STOP",
          table: k.history,
          row: schemaOrdered(
            k.history,
            historyRow(host, 0, { "actual_end_time": ts, "was_cancelled": cancelled }),
          ),
          // was_cancelled first: it is decided against the end time stored before this STOP.
          merge: [
            { column: "was_cancelled", rule: "follows", of: "actual_end_time" },
            { column: "actual_end_time", rule: "max" },
          ],
          guard: guards(host).history,
          detectUnmatched: true,
        },
        {
          kind: "tombstone",
          event: "STOP",
          table: "statusengine_downtime_tombstones",
          row: { ...tombstoneKey(host), "history_removed": 0, "end_time": ts },
        },
        { kind: "delete", event: "STOP", table: k.scheduled, key: key(host) },
      ], `${k.name} attr ${attr}`);
    }
  }
});

Deno.test("downtimeStatements: DELETE before the window began removes history, strictly start_time > ts; after it, keeps one", () => {
  for (const k of KINDS) {
    const host = k.name === "host";
    const tombstone = (ts: number, removed: number) => ({
      kind: "tombstone",
      event: "DELETE",
      table: "statusengine_downtime_tombstones",
      row: { ...tombstoneKey(host), "history_removed": removed, "end_time": ts },
    });
    const scheduledDelete = { kind: "delete", event: "DELETE", table: k.scheduled, key: key(host) };
    const historyDelete = { kind: "delete", event: "DELETE", table: k.history, key: key(host) };
    const historyKept = {
      kind: "upsert",
      event: "DELETE",
      table: k.history,
      row: schemaOrdered(k.history, historyRow(host, 0)),
      merge: [],
      guard: guards(host).history,
      detectUnmatched: false,
    };
    const before = downtimeStatements(
      event({ type: DOWNTIME_DELETE, downtimeType: k.downtimeType, timestamp: START - 1 }),
      NODE,
    );
    assertColumnOrder(before);
    assert.deepEqual(
      before,
      [tombstone(START - 1, 1), scheduledDelete, historyDelete],
      `${k.name} before start`,
    );
    // At the boundary the window has begun: the history row stays (the DELETE removes history only
    // when its start is strictly later).
    for (const ts of [START, START + 600]) {
      assert.deepEqual(
        downtimeStatements(
          event({ type: DOWNTIME_DELETE, downtimeType: k.downtimeType, timestamp: ts }),
          NODE,
        ),
        [tombstone(ts, 0), scheduledDelete, historyKept],
        `${k.name} at start + ${ts - START}`,
      );
    }
  }
});

Deno.test("downtimeStatements: unknown types produce no statement", () => {
  for (const k of KINDS) {
    for (const type of [1105, 0, -1]) {
      assert.deepEqual(downtimeStatements(event({ type, downtimeType: k.downtimeType }), NODE), []);
    }
  }
});

Deno.test("downtimeStatements: routing is on downtime_type only, 2 = host, anything else = service (docs/tables.md#downtime-events)", () => {
  for (const downtimeType of [0, 1, 3, -2]) {
    const [first] = downtimeStatements(event({ downtimeType }), NODE);
    assert.equal(
      first?.table,
      "statusengine_service_downtimehistory",
      `downtime_type ${downtimeType}`,
    );
  }
  // A host downtime never carries service_description, even if the payload had one.
  const [h] = downtimeStatements(event({ downtimeType: 2, serviceDescription: "svc" }), NODE);
  assert.equal(h?.table, "statusengine_host_downtimehistory");
  assert.ok(h?.kind === "upsert" && !("service_description" in h.row));
});

Deno.test("downtimeStatements: the node name is part of every key", () => {
  const types = [DOWNTIME_ADD, DOWNTIME_LOAD, DOWNTIME_START, DOWNTIME_STOP, DOWNTIME_DELETE];
  for (const type of types) {
    for (const s of downtimeStatements(event({ type, timestamp: 0 }), "other-node")) {
      const k = s.kind === "delete" || s.kind === "copy" ? s.key : s.row;
      assert.equal(k.node_name, "other-node");
      if (s.kind === "upsert" || s.kind === "copy") {
        assert.equal(s.guard.key.node_name, "other-node");
      }
    }
  }
});
