/**
 * Lists that live in different layers but must agree. Each test says what
 * would silently break without it.
 */
import assert from "node:assert/strict";
import { QUEUE_NAMES, QUEUES } from "../src/events/queues.ts";
import { QUEUE_NAMES as CONFIG_QUEUE_NAMES } from "../src/config/mod.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { batchedTables, downtimeTables } from "../src/pipeline/pipeline.ts";
import { isTestFile, stripComments } from "../tools/dead_exports.ts";

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
  // The four downtime tables, the tombstones and the announcements.
  assert.equal(downtimeTables().length, 6);
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

/** The worker's source files below `src/`, tests left out, as paths like `src/util/backoff.ts`. */
async function sourceFiles(dir = "src"): Promise<string[]> {
  const files: string[] = [];
  for await (const e of Deno.readDir(new URL(`../${dir}/`, import.meta.url))) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory) files.push(...await sourceFiles(path));
    else if (path.endsWith(".ts") && !isTestFile(path)) files.push(path);
  }
  return files;
}

// docs/retries.md says which layer pauses how long before trying again. A layer that builds its
// own back-off without a line there, a schedule constant the page does not name, or a loop that
// doubles a delay of its own beside src/util/backoff.ts (as the perfdata sink once did) would make
// the page wrong without anyone noticing.
Deno.test("consistency: every back-off in src/ is named in docs/retries.md, and only util/backoff.ts grows a delay", async () => {
  const doc = await Deno.readTextFile(new URL("../docs/retries.md", import.meta.url));
  // Not named in docs/retries.md; growing a delay without src/util/backoff.ts.
  const unnamed: string[] = [];
  const growing: string[] = [];
  for (const path of await sourceFiles()) {
    if (path === "src/util/backoff.ts") continue;
    const code = stripComments(await Deno.readTextFile(new URL(`../${path}`, import.meta.url)));
    if (/\bnew Backoff\(/.test(code) && !doc.includes(`\`${path}\``)) unnamed.push(path);
    for (const [, name] of code.matchAll(/\bconst (\w+): (?:BackoffOptions|RetryPolicy)\b/g)) {
      if (!doc.includes(`\`${name}\``)) unnamed.push(`${path}: ${name}`);
    }
    // `x = Math.min(x * 2, cap)` or `x *= 2`: a doubling delay of its own.
    if (/\b([\w.#]+)\s*=\s*Math\.min\(\s*\1\s*\*\s*2\b|\*=\s*2\b/.test(code)) growing.push(path);
  }
  assert.deepEqual({ unnamed, growing }, { unnamed: [], growing: [] });
});
