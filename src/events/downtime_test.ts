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

function statics(): Row {
  return {
    "entry_time": 1785517314,
    "author_name": "Daniel Z",
    "comment_data": "In maintenance",
    "triggered_by_id": 0,
    "is_fixed": 1,
    duration: 120,
    "scheduled_end_time": 1785517500,
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

function assertColumnOrder(statements: DowntimeStatement[]): void {
  for (const s of statements) {
    if (s.kind === "upsert") {
      assert.deepEqual(
        Object.keys(s.row),
        SCHEMA_COLUMNS[s.table],
        `${s.table} upsert column order`,
      );
    } else {
      const host = s.table.startsWith("statusengine_host_");
      assert.deepEqual(Object.keys(s.key), Object.keys(key(host)), `${s.table} key order`);
    }
  }
}

Deno.test("downtimeStatements: ADD upserts history then scheduled with dynamic columns 0 (C.3)", () => {
  for (const k of KINDS) {
    const host = k.name === "host";
    const got = downtimeStatements(
      event({ type: DOWNTIME_ADD, downtimeType: k.downtimeType }),
      NODE,
    );
    assertColumnOrder(got);
    assert.deepEqual(got, [
      {
        kind: "upsert",
        event: "ADD",
        table: k.history,
        row: schemaOrdered(k.history, {
          ...key(host),
          ...statics(),
          "entry_time_usec": 224439,
          "was_started": 0,
          "actual_start_time": 0,
          "actual_end_time": 0,
          "was_cancelled": 0,
        }),
        updateColumns: [
          "entry_time",
          "entry_time_usec",
          "author_name",
          "comment_data",
          "triggered_by_id",
          "is_fixed",
          "duration",
          "scheduled_end_time",
        ],
      },
      {
        kind: "upsert",
        event: "ADD",
        table: k.scheduled,
        row: schemaOrdered(k.scheduled, {
          ...key(host),
          ...statics(),
          "was_started": 0,
          "actual_start_time": 0,
        }),
        updateColumns: [
          "entry_time",
          "author_name",
          "comment_data",
          "triggered_by_id",
          "is_fixed",
          "duration",
          "scheduled_end_time",
        ],
      },
    ], k.name);
  }
});

// Without C.4.2 a late or redelivered ADD would reset was_started/actual_* of a downtime that
// already started or ended (C.4 table, rows "ADD redelivered after START/STOP").
Deno.test("downtimeStatements: ADD updates only static columns, never a dynamic or key column (C.4.2)", () => {
  const dynamic = ["was_started", "actual_start_time", "actual_end_time", "was_cancelled"];
  for (const k of KINDS) {
    const host = k.name === "host";
    for (const s of downtimeStatements(event({ downtimeType: k.downtimeType }), NODE)) {
      assert.equal(s.kind, "upsert");
      if (s.kind !== "upsert") continue;
      for (const c of s.updateColumns) {
        assert.ok(!dynamic.includes(c), `${s.table}: ${c} must not be updated by ADD`);
        assert.ok(!(c in key(host)), `${s.table}: key column ${c} in the update list`);
        assert.ok(c in s.row, `${s.table}: ${c} is not inserted`);
      }
    }
  }
});

Deno.test("downtimeStatements: START updates history (C.5 flagged) then upserts scheduled as started", () => {
  const ts = START + 5;
  for (const k of KINDS) {
    const host = k.name === "host";
    const got = downtimeStatements(
      event({ type: DOWNTIME_START, downtimeType: k.downtimeType, timestamp: ts }),
      NODE,
    );
    assertColumnOrder(got);
    assert.deepEqual(got, [
      {
        kind: "update",
        event: "START",
        table: k.history,
        key: key(host),
        set: { "was_started": 1, "actual_start_time": ts },
        // A START re-announced after a core restart must not move the recorded start.
        setOnce: ["actual_start_time"],
        detectUnmatched: true,
      },
      {
        kind: "upsert",
        event: "START",
        table: k.scheduled,
        row: schemaOrdered(k.scheduled, {
          ...key(host),
          ...statics(),
          "was_started": 1,
          "actual_start_time": ts,
        }),
        // The upsert must set the dynamic columns on the row the ADD created.
        updateColumns: [
          "entry_time",
          "author_name",
          "comment_data",
          "triggered_by_id",
          "is_fixed",
          "duration",
          "scheduled_end_time",
          "was_started",
          "actual_start_time",
        ],
        setOnce: ["actual_start_time"],
      },
    ], k.name);
  }
});

Deno.test("downtimeStatements: STOP updates history end and cancel flag (attr 2 only), then deletes scheduled", () => {
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
          kind: "update",
          event: "STOP",
          table: k.history,
          key: key(host),
          set: { "actual_end_time": ts, "was_cancelled": cancelled },
          detectUnmatched: true,
        },
        { kind: "delete", event: "STOP", table: k.scheduled, key: key(host) },
      ], `${k.name} attr ${attr}`);
    }
  }
});

Deno.test("downtimeStatements: DELETE before the window began also deletes history, strictly start_time > ts", () => {
  for (const k of KINDS) {
    const host = k.name === "host";
    const scheduledDelete = {
      kind: "delete",
      event: "DELETE",
      table: k.scheduled,
      key: key(host),
    } as const;
    const historyDelete = { kind: "delete", event: "DELETE", table: k.history, key: key(host) };
    const before = downtimeStatements(
      event({ type: DOWNTIME_DELETE, downtimeType: k.downtimeType, timestamp: START - 1 }),
      NODE,
    );
    assertColumnOrder(before);
    assert.deepEqual(before, [scheduledDelete, historyDelete], `${k.name} before start`);
    // At the boundary the window has begun: the history row stays (C.3 "strictly greater").
    assert.deepEqual(
      downtimeStatements(
        event({ type: DOWNTIME_DELETE, downtimeType: k.downtimeType, timestamp: START }),
        NODE,
      ),
      [scheduledDelete],
      `${k.name} at start`,
    );
    assert.deepEqual(
      downtimeStatements(
        event({ type: DOWNTIME_DELETE, downtimeType: k.downtimeType, timestamp: START + 600 }),
        NODE,
      ),
      [scheduledDelete],
      `${k.name} after start`,
    );
  }
});

Deno.test("downtimeStatements: LOAD and unknown types produce no statement", () => {
  for (const k of KINDS) {
    for (const type of [DOWNTIME_LOAD, 1105, 0, -1]) {
      assert.deepEqual(downtimeStatements(event({ type, downtimeType: k.downtimeType }), NODE), []);
    }
  }
});

Deno.test("downtimeStatements: routing is on downtime_type only, 2 = host, anything else = service (C.1)", () => {
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
  for (const type of [DOWNTIME_ADD, DOWNTIME_START, DOWNTIME_STOP, DOWNTIME_DELETE]) {
    for (const s of downtimeStatements(event({ type, timestamp: 0 }), "other-node")) {
      const k = s.kind === "upsert" ? s.row : s.key;
      assert.equal(k.node_name, "other-node");
    }
  }
});
