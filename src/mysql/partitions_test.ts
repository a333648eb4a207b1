import assert from "node:assert/strict";
import { mondayOf, weeklyPartitions } from "./ddl.ts";
import {
  addPartitionsStatement,
  aheadTarget,
  classifyLayout,
  dropPartitionsStatement,
  type PartitionInfo,
  partitionsToTrim,
  planMaintenance,
  planRepairStep,
  repairStepCount,
  type WeeklyLayout,
  weeksUpTo,
} from "./partitions.ts";

const DAY = 86_400;
/** Day number of a UTC calendar date. */
function day(y: number, m: number, d: number): number {
  return Date.UTC(y, m - 1, d) / 1000 / DAY;
}

/** The layout `schema` creates at `created`: five weeks and p_max. */
function schemaLayout(created: Date, maxRows = 0): WeeklyLayout {
  return {
    bounded: weeklyPartitions(created).map((p) => ({ ...p, rowsEstimate: 10 })),
    max: { name: "p_max", rowsEstimate: maxRows },
  };
}

function info(rows: [string | null, string | null][], expression = "`start_time` DIV 86400") {
  return rows.map(([name, description], i): PartitionInfo => ({
    name,
    method: name === null ? null : "RANGE",
    expression: name === null ? null : expression,
    description,
    ordinal: name === null ? null : i + 1,
    rowsEstimate: 0,
  }));
}

Deno.test("partitions: the layout schema creates is recognised, others are not", () => {
  assert.deepEqual(classifyLayout(info([[null, null]]), "start_time"), { kind: "unpartitioned" });
  const weekly = classifyLayout(
    info([["p_2026_49", "20431"], ["p_max", "MAXVALUE"]]).reverse(),
    "start_time",
  );
  assert.equal(weekly.kind, "weekly");
  // MySQL 8 writes the expression in lower case within parentheses.
  assert.equal(
    classifyLayout(
      info([["p_1", "5"], ["p_max", "MAXVALUE"]], "(`start_time` div 86400)"),
      "start_time",
    )
      .kind,
    "weekly",
  );
  assert.equal(
    classifyLayout(info([["p_1", "5"]], "`state_time` DIV 86400"), "start_time").kind,
    "other",
  );
  assert.equal(
    classifyLayout(info([["p_1", "MAXVALUE"], ["p_2", "5"]]), "start_time").kind,
    "other",
  );
});

Deno.test("partitions: new weeks continue the layout Monday to Monday with ISO week names", () => {
  const created = new Date(Date.UTC(2026, 11, 3, 12)); // Thursday of ISO week 49
  const layout = schemaLayout(created);
  assert.equal(layout.bounded[0]?.name, "p_2026_49");
  assert.equal(layout.bounded[0]?.lessThan, day(2026, 12, 7));
  // Three weeks later the layout needs three more weeks to keep four weeks ahead.
  const today = day(2026, 12, 24);
  const plan = planMaintenance(layout, today, null, false);
  assert.deepEqual(plan.add.map((p) => p.name), ["p_2027_01", "p_2027_02", "p_2027_03"]);
  assert.equal(plan.add.at(-1)?.lessThan, aheadTarget(today));
  assert.equal(aheadTarget(today), mondayOf(today) + 35);
  // Around New Year: 2026 has 53 ISO weeks.
  assert.deepEqual(
    weeksUpTo(day(2026, 12, 21), 0, day(2027, 1, 11), new Set()).map((p) => p.name),
    ["p_2026_52", "p_2026_53", "p_2027_01"],
  );
  // Up to date: nothing to add.
  assert.deepEqual(planMaintenance(layout, day(2026, 12, 3), null, false).add, []);
});

Deno.test("partitions: weeks wholly older than the cutoff are dropped, the straddling one trimmed", () => {
  const layout = schemaLayout(new Date(Date.UTC(2026, 11, 3)));
  const today = day(2027, 1, 2); // Saturday of ISO week 53 of 2026
  // Cutoff Wednesday 2026-12-16 12:00 UTC: weeks 49 and 50 have gone, 51 straddles.
  const cutoff = day(2026, 12, 16) * DAY + 12 * 3600;
  const plan = planMaintenance(layout, today, cutoff, false);
  assert.deepEqual(plan.drop.map((p) => p.name), ["p_2026_49", "p_2026_50"]);
  assert.equal(plan.trim, "p_2026_51");
  assert.equal(plan.blockedWeeks, 0);
  // A cutoff exactly on a week's start: nothing straddles, the earlier week is dropped.
  const monday = planMaintenance(layout, today, day(2026, 12, 14) * DAY, false);
  assert.deepEqual(monday.drop.map((p) => p.name), ["p_2026_49", "p_2026_50"]);
  assert.equal(monday.trim, null);
  // Nothing expired: the first partition has no lower end, so old rows can be in it.
  const young = planMaintenance(layout, day(2026, 12, 3), day(2026, 12, 1) * DAY, false);
  assert.deepEqual(young.drop, []);
  assert.equal(young.trim, "p_2026_49");
});

Deno.test("partitions: a p_max with rows blocks the weeks ahead and trims the whole table", () => {
  const layout = schemaLayout(new Date(Date.UTC(2026, 11, 3)), 1000);
  const today = day(2027, 3, 1);
  const cutoff = day(2026, 12, 16) * DAY;
  const plan = planMaintenance(layout, today, cutoff, true);
  assert.deepEqual(plan.add, []);
  assert.ok(plan.blockedWeeks > 10, String(plan.blockedWeeks));
  assert.deepEqual(plan.drop.map((p) => p.name), ["p_2026_49", "p_2026_50"]);
  assert.equal(plan.trim, "table");
});

Deno.test("partitions: a dry run counts where the rows the DELETE will remove are before the run", () => {
  // p_max holds rows: the whole table is trimmed after the drop, so not in the dropped weeks.
  const stale = schemaLayout(new Date(Date.UTC(2026, 11, 3)), 1000);
  const blocked = planMaintenance(stale, day(2027, 3, 1), day(2026, 12, 16) * DAY, true);
  assert.deepEqual(partitionsToTrim(stale, blocked), [
    "p_2026_51",
    "p_2026_52",
    "p_2026_53",
    "p_max",
  ]);
  // The straddling week is one the run adds first: its rows are still in the empty p_max.
  const behind = planMaintenance(stale, day(2027, 3, 1), day(2027, 2, 24) * DAY, false);
  assert.ok(!stale.bounded.some((p) => p.name === behind.trim), String(behind.trim));
  assert.deepEqual(partitionsToTrim(stale, behind), ["p_max"]);
  // An existing straddling week is counted alone; nothing to trim, nothing to count.
  const current = planMaintenance(stale, day(2026, 12, 10), day(2026, 12, 9) * DAY, false);
  assert.deepEqual(partitionsToTrim(stale, current), [current.trim]);
  assert.deepEqual(partitionsToTrim(stale, { ...current, trim: null }), []);
});

Deno.test("partitions: the repair halves what is left, at least four weeks a step, up to the newest row", () => {
  let layout = schemaLayout(new Date(Date.UTC(2026, 0, 1)), 1000);
  const today = day(2026, 12, 3);
  const rows = { min: day(2026, 2, 1), max: day(2027, 2, 1) };
  const sizes: number[] = [];
  for (;;) {
    const step = planRepairStep(layout, today, rows);
    if (step === null) break;
    sizes.push(step.add.length);
    layout = {
      bounded: [...layout.bounded, ...step.add.map((p) => ({ ...p, rowsEstimate: 0 }))],
      max: layout.max,
    };
  }
  const top = layout.bounded.at(-1)?.lessThan ?? 0;
  assert.ok(top > rows.max, "the newest row is laid out");
  assert.ok(top >= aheadTarget(today));
  assert.equal(sizes.length, repairStepCount(sizes.reduce((a, b) => a + b, 0)));
  for (const [i, size] of sizes.entries()) {
    const left = sizes.slice(i).reduce((a, b) => a + b, 0);
    assert.equal(size, Math.min(left, Math.max(4, Math.ceil(left / 2))));
  }
  assert.ok(sizes.length <= 6, sizes.join(","));
});

Deno.test("partitions: statements split p_max, or add without one, and drop in one statement", () => {
  const layout = schemaLayout(new Date(Date.UTC(2026, 11, 3)));
  const add = [{ name: "p_2027_02", lessThan: 20468 }];
  assert.equal(
    addPartitionsStatement("t", layout, add),
    "ALTER TABLE `t` REORGANIZE PARTITION `p_max` INTO (PARTITION `p_2027_02` VALUES LESS THAN (20468), PARTITION `p_max` VALUES LESS THAN MAXVALUE)",
  );
  assert.equal(
    addPartitionsStatement("t", { ...layout, max: null }, add),
    "ALTER TABLE `t` ADD PARTITION (PARTITION `p_2027_02` VALUES LESS THAN (20468))",
  );
  assert.equal(
    dropPartitionsStatement("t", [{ name: "a" }, { name: "b" }]),
    "ALTER TABLE `t` DROP PARTITION `a`, `b`",
  );
  assert.throws(
    () => weeksUpTo(day(2026, 12, 7), 0, day(2026, 12, 21), new Set(["p_2026_50"])),
    /exists with another range/,
  );
});
