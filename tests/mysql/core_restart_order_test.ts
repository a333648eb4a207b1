/**
 * The core-restart sweep over random orders (docs/core-restart.md, rule 2): restart jobs (later,
 * earlier and redelivered ones) are handled at any point of a running sweep, whose statements
 * answer after a random number of microtasks. Whatever the order, the latest restart is swept in
 * full after it was recorded, and no sweep uses a cutoff nobody recorded.
 *
 * No MySQL: the statements answer at once (a chunk of one row per table), so a seed is a few
 * milliseconds and the orders are the microtask interleavings a loaded event loop produces when a
 * restart job and the sweep's answers arrive in the same tick.
 */
import assert from "node:assert/strict";
import {
  type PausableWriter,
  type RestartClock,
  STATUS_TABLES,
  StatusCleaner,
} from "../../src/mysql/core_restart.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { SqlExecutor } from "../../src/mysql/executor.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const T = 1_800_000_000;
const SEEDS = 30;
/** The last restart is tried at every microtask of the sweep before it, and past its end. */
const OFFSETS = 150;
const STATUS_DELETE = /^DELETE FROM `(statusengine_(?:host|service)status)` WHERE `node_name` = \?/;

async function hops(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await null;
}

async function trial(seed: number, offset: number): Promise<void> {
  const rnd = seededRandom(seed);
  // One order of events: every statement and every recorded restart takes the next number.
  let seq = 0;
  const deletes: { table: string; cutoff: number; seq: number }[] = [];
  const executor: SqlExecutor = {
    async run(sql, values) {
      const at = ++seq;
      await hops(rnd(4));
      const del = STATUS_DELETE.exec(sql);
      if (del !== null) {
        deletes.push({ table: del[1] as string, cutoff: Number(values?.[1]), seq: at });
      }
      // The node_name index exists and each status table holds one row of the node.
      const rows = /information_schema/.test(sql)
        ? [{ n: 1 }]
        : /^SELECT `hostname`/.test(sql)
        ? [{ hostname: "h", service_description: "s", node_name: "N" }]
        : [];
      return { affectedRows: 0, rows };
    },
  };
  const writer: PausableWriter = {
    held: 0,
    async withPaused(fn) {
      await hops(rnd(3));
      return await fn();
    },
  };
  const clock: RestartClock = {
    nowMs: () => (T + 60) * 1000,
    monotonicMs: () => 0,
    // Nothing waits for time: the tables show every restart at once, the settle time is 0.
    sleep: (_ms, signal) =>
      new Promise((_resolve, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason), { once: true })
      ),
  };
  const cleaner = new StatusCleaner({
    executor,
    availability: new DbAvailability(),
    nodeName: "N",
    openItcockpit: false,
    statusMaxAgeSeconds: 0,
    writers: { statusengine_servicestatus: writer, statusengine_hoststatus: writer },
    committed: { newest: () => T + 3600, rows: () => 0 },
    clock,
    timing: { settleMs: 0, pollMs: 1 },
  });
  const signal = new AbortController().signal;
  // Restarts within a minute, in any order, some twice (a redelivered job).
  const cutoffs = Array.from({ length: 1 + rnd(4) }, () => T + rnd(6) * 10);
  // The earlier restarts at random points, the last one `offset` microtasks after the one before.
  const gaps = cutoffs.map((_, i) => i === cutoffs.length - 1 ? offset : rnd(60));
  const recorded: { cutoff: number; seq: number }[] = [];
  for (const [i, cutoff] of cutoffs.entries()) {
    await hops(gaps[i] as number);
    recorded.push({ cutoff, seq: ++seq });
    await cleaner.onRestart(
      { messageSeconds: cutoff, receivedAtMs: cutoff * 1000, linkOpenedAtMs: null },
      signal,
    );
  }
  await cleaner.idle();
  await cleaner.close();

  const latest = Math.max(...cutoffs);
  const first = recorded.find((r) => r.cutoff === latest) as { seq: number };
  const order = `seed ${seed}, offset ${offset}: restarts ${
    JSON.stringify(recorded)
  }, status DELETEs ${JSON.stringify(deletes)}`;
  for (const table of STATUS_TABLES) {
    assert.ok(
      deletes.some((d) => d.table === table && d.cutoff === latest && d.seq > first.seq),
      `${table} not swept at the latest cutoff ${latest} after it was recorded; ${order}`,
    );
  }
  for (const d of deletes) {
    assert.ok(cutoffs.includes(d.cutoff), `a sweep at an unrecorded cutoff; ${order}`);
  }
  assert.equal(cleaner.sweptBefore, latest, order);
}

Deno.test("core restart order: the latest restart is swept in full after it was recorded, whatever point of a running sweep the restart jobs are handled at", async () => {
  for (let seed = 1; seed <= SEEDS; seed++) {
    for (let offset = 0; offset < OFFSETS; offset++) await trial(seed, offset);
  }
});
