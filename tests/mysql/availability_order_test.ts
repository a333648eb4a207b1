/**
 * {@link DbAvailability} must not depend on the order in which answers arrive. A table has two
 * writers by default, the idle probe runs beside them, and each answer is handled whenever its
 * round trip ends, so a success can be handled after a failure that MySQL produced later. The
 * model here states the rule without the tracker's bookkeeping: a table is out while a writer
 * holds a statement that failed, until a statement sent after the table's latest failure was seen
 * succeeds; a writer holds from its failure until its own success or give-up. The idle probe's
 * outage ends the same way, or with a probe that answers.
 * Random interleavings of sends, answers, give-ups and probes are checked against it after every
 * step, together with the gauge, the stall clock behind `--mysql-give-back-after` and the outage
 * log lines.
 */
import assert from "node:assert/strict";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { Metrics } from "../../src/metrics/registry.ts";
import { withLogs } from "../helpers/logs.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const TABLES = ["statusengine_hostchecks", "statusengine_servicechecks"] as const;
const WRITERS_PER_TABLE = 2;
const DOWN = new Error("connect ECONNREFUSED 127.0.0.1:3306");

/** What is known of one table: its latest failure, and whether a success sent after it was seen. */
interface TableModel {
  lastFailureAt: number | undefined;
  recovered: boolean;
}

interface Writer {
  readonly table: string;
  /** While a statement is in flight. */
  sentAt: number | undefined;
  /** From a failure until its own success or give-up (or the table's recovery). */
  holding: boolean;
}

/** A gauge that only remembers its value: `set` is all the tracker calls. */
function fakeGauge(): { value: number; gauge: Metrics["dbAvailable"] } {
  const state = { value: 1, gauge: undefined as unknown as Metrics["dbAvailable"] };
  state.gauge = { set: (v: number) => (state.value = v) } as unknown as Metrics["dbAvailable"];
  return state;
}

async function runCase(seed: number, steps: number): Promise<void> {
  const rnd = seededRandom(seed);
  let clock = 0;
  const gauge = fakeGauge();
  await withLogs((logs) => {
    const availability = new DbAvailability(gauge.gauge, { now: () => clock });
    const tables = new Map<string, TableModel>(
      TABLES.map((t) => [t, { lastFailureAt: undefined, recovered: true }]),
    );
    const writers: Writer[] = TABLES.flatMap((table) =>
      Array.from(
        { length: WRITERS_PER_TABLE },
        () => ({ table, sentAt: undefined, holding: false }),
      )
    );
    let probeFailedAt: number | undefined;
    let probeRecovered = true;
    let lastAnswerAt = 0;
    let stallSince: number | undefined;
    const outagesBegun = new Map<string, number>(TABLES.map((t) => [t, 0]));
    const trace: string[] = [];

    const down = (table: string) =>
      !tables.get(table)?.recovered && writers.some((w) => w.table === table && w.holding);
    for (let step = 0; step < steps; step++) {
      clock += 1 + rnd(3);
      const writer = writers[rnd(writers.length)];
      assert.ok(writer !== undefined);
      const model = tables.get(writer.table);
      assert.ok(model !== undefined);
      const wasHolding = TABLES.some(down);
      const roll = rnd(100);
      if (roll < 8) {
        // The idle probe: serial, so its answer is always newer than its last failure.
        if (rnd(2) === 0) {
          trace.push(`probe fails`);
          availability.probed(DOWN);
          probeFailedAt = clock;
          probeRecovered = false;
        } else {
          trace.push(`probe answers`);
          availability.probed(undefined);
          probeRecovered = true;
          lastAnswerAt = clock;
        }
      } else if (roll < 14 && writer.sentAt === undefined) {
        // A writer gives its statement up between attempts (its jobs given back, or shutdown).
        trace.push(`${writer.table} gives up (holding: ${writer.holding})`);
        availability.abandon(writer.table, writer);
        writer.holding = false;
      } else if (writer.sentAt === undefined) {
        trace.push(`${writer.table} sends at ${clock}`);
        writer.sentAt = availability.now();
      } else if (rnd(2) === 0) {
        trace.push(`${writer.table} fails (sent ${writer.sentAt})`);
        availability.unreachable(writer.table, DOWN, writer);
        if (!down(writer.table)) {
          outagesBegun.set(writer.table, (outagesBegun.get(writer.table) ?? 0) + 1);
        }
        model.lastFailureAt = clock;
        model.recovered = false;
        writer.holding = true;
        writer.sentAt = undefined;
      } else {
        trace.push(`${writer.table} succeeds (sent ${writer.sentAt})`);
        availability.reachable(writer.table, writer.sentAt, writer);
        writer.holding = false;
        if (model.lastFailureAt === undefined || writer.sentAt >= model.lastFailureAt) {
          model.recovered = true;
          for (const w of writers) if (w.table === writer.table) w.holding = false;
        }
        if (probeFailedAt !== undefined && writer.sentAt >= probeFailedAt) probeRecovered = true;
        lastAnswerAt = clock;
        writer.sentAt = undefined;
      }

      const holding = TABLES.some(down);
      if (holding && !wasHolding) stallSince = clock;
      if (!holding) stallSince = undefined;
      const expected: boolean = !holding && (probeFailedAt === undefined || probeRecovered);
      const where = `seed ${seed}, step ${step}:\n  ${trace.slice(-12).join("\n  ")}`;
      assert.equal(availability.available, expected, `available, ${where}`);
      assert.equal(gauge.value, expected ? 1 : 0, `gauge, ${where}`);
      assert.equal(
        availability.holdingForMs,
        stallSince === undefined ? 0 : clock - stallSince,
        `holding, ${where}`,
      );
      assert.equal(availability.msSinceSuccess, clock - lastAnswerAt, `since success, ${where}`);
    }
    // One "cannot take writes" line per outage of a table, not one per flap of a stale answer.
    for (const table of TABLES) {
      const begun = logs.filter((l) =>
        l.message === "db: MySQL cannot take writes, holding the batch" &&
        l.properties.table === table
      ).length;
      assert.equal(begun, outagesBegun.get(table), `outage lines of ${table}, seed ${seed}`);
    }
    return Promise.resolve();
  });
}

Deno.test("availability: random orders of sends, answers, give-ups and probes match the model", async () => {
  for (let seed = 1; seed <= 300; seed++) await runCase(seed, 300);
});
