/**
 * Lists that live in different layers but must agree. Each test says what
 * would silently break without it.
 */
import assert from "node:assert/strict";
import { QUEUE_NAMES, QUEUES } from "../src/events/queues.ts";
import { QUEUE_NAMES as CONFIG_QUEUE_NAMES } from "../src/config/mod.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { batchedTables, downtimeTables } from "../src/pipeline/pipeline.ts";

// A table a decoder emits rows for but no writer owns would make every such job
// fail as "transient" and be retried forever: the queue would wedge.
Deno.test("consistency: every table a queue writes has a bulk writer, a downtime statement path, or is a core-restart target", () => {
  const batched = new Set<string>(batchedTables().map((t) => t.name));
  const downtime = new Set<string>(downtimeTables().map((t) => t.name));
  for (const q of QUEUE_NAMES) {
    const spec = QUEUES[q];
    for (const table of spec.tables) {
      assert.ok(TABLES[table as TableName], `${q}: ${table} is in the catalogue`);
      if (spec.output === "rows") assert.ok(batched.has(table), `${q}: ${table} has a writer`);
      if (spec.output === "downtimes") assert.ok(downtime.has(table), `${q}: ${table}`);
      if (spec.output === "core_restart") {
        assert.ok(
          table === "statusengine_hoststatus" || table === "statusengine_servicestatus",
          `${q}: ${table}`,
        );
      }
    }
  }
});

// Every batched table must be reachable from some queue, or its writer (and its
// pre-created metric series) would advertise a table nothing writes.
Deno.test("consistency: every bulk writer's table is written by some queue", () => {
  const written = new Set(QUEUE_NAMES.flatMap((q) => QUEUES[q].tables));
  for (const t of batchedTables()) assert.ok(written.has(t.name), t.name);
  assert.equal(batchedTables().length, 14);
  assert.equal(downtimeTables().length, 5); // the four downtime tables and the tombstones
});

Deno.test("consistency: the settings table offers exactly the consumed queues", () => {
  assert.deepEqual([...CONFIG_QUEUE_NAMES], [...QUEUE_NAMES]);
});

// The downtime queue is the one queue whose messages only make sense in order
// (docs/consumption.md#downtimes-in-order).
Deno.test("consistency: exactly statusngin_downtimes is consumed in order, exactly the status queues filter stale events", () => {
  assert.deepEqual(QUEUE_NAMES.filter((q) => QUEUES[q].inOrder), ["statusngin_downtimes"]);
  assert.deepEqual(QUEUE_NAMES.filter((q) => QUEUES[q].staleFilter), [
    "statusngin_hoststatus",
    "statusngin_servicestatus",
  ]);
});
