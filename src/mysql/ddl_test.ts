import assert from "node:assert/strict";
import { TABLES } from "./catalogue.ts";
import {
  chooseCollation,
  createTableStatement,
  isoWeekOfDay,
  type QueryConnection,
  weeklyPartitions,
} from "./ddl.ts";

function day(iso: string): number {
  return Date.parse(`${iso}T00:00:00Z`) / 86_400_000;
}

Deno.test("isoWeekOfDay: weeks around New Year belong to the year of their Thursday", () => {
  assert.deepEqual(isoWeekOfDay(day("2026-01-01")), { year: 2026, week: 1 }); // Thursday
  assert.deepEqual(isoWeekOfDay(day("2024-12-30")), { year: 2025, week: 1 }); // Monday
  assert.deepEqual(isoWeekOfDay(day("2021-01-03")), { year: 2020, week: 53 }); // Sunday
  assert.deepEqual(isoWeekOfDay(day("2027-01-01")), { year: 2026, week: 53 }); // Friday
  assert.deepEqual(isoWeekOfDay(day("2026-07-13")), { year: 2026, week: 29 });
  assert.deepEqual(isoWeekOfDay(day("2026-07-19")), { year: 2026, week: 29 });
  assert.deepEqual(isoWeekOfDay(day("2026-07-20")), { year: 2026, week: 30 });
  assert.deepEqual(isoWeekOfDay(0), { year: 1970, week: 1 }); // Thursday 1970-01-01
});

// "p_2026_29 VALUES LESS THAN (20654), day 20654 = 2026-07-20"; the dump's partitions of
// the four-week tables are p_2026_29 … p_2026_32 with bounds 20654 … 20675.
Deno.test("weeklyPartitions: p_2026_29 ends at day 20654 and the bounds match the dump (docs/tables.md#shared-table-properties)", () => {
  assert.equal(day("2026-07-20"), 20654);
  assert.deepEqual(weeklyPartitions(new Date("2026-07-15T12:00:00Z")), [
    { name: "p_2026_29", lessThan: 20654 },
    { name: "p_2026_30", lessThan: 20661 },
    { name: "p_2026_31", lessThan: 20668 },
    { name: "p_2026_32", lessThan: 20675 },
    { name: "p_2026_33", lessThan: 20682 },
  ]);
});

Deno.test("weeklyPartitions: the current week starts on Monday 00:00 UTC", () => {
  assert.equal(weeklyPartitions(new Date("2026-07-19T23:59:59Z"), 1)[0]?.name, "p_2026_29");
  assert.equal(weeklyPartitions(new Date("2026-07-20T00:00:00Z"), 1)[0]?.name, "p_2026_30");
});

Deno.test("weeklyPartitions: names follow the ISO year across New Year and pad the week", () => {
  const names = weeklyPartitions(new Date("2026-12-30T00:00:00Z")).map((p) => p.name);
  assert.deepEqual(names, ["p_2026_53", "p_2027_01", "p_2027_02", "p_2027_03", "p_2027_04"]);
  const partitions = weeklyPartitions(new Date("2026-12-30T00:00:00Z"));
  for (let i = 1; i < partitions.length; i++) {
    assert.equal(partitions[i]?.lessThan, (partitions[i - 1]?.lessThan ?? 0) + 7);
  }
});

Deno.test("createTableStatement: exact text for an unpartitioned table", () => {
  assert.equal(
    createTableStatement(TABLES.statusengine_dbversion, { collation: "utf8mb4_general_ci" }),
    [
      "CREATE TABLE IF NOT EXISTS `statusengine_dbversion` (",
      "  `id` int(11) NOT NULL,",
      "  `dbversion` varchar(255) NULL DEFAULT '3.0.0',",
      "  PRIMARY KEY (`id`)",
      ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
    ].join("\n"),
  );
});

Deno.test("createTableStatement: exact text for a partitioned table with AUTO_INCREMENT", () => {
  assert.equal(
    createTableStatement(TABLES.statusengine_logentries, {
      collation: "utf8mb4_0900_ai_ci",
      now: new Date("2026-07-15T00:00:00Z"),
    }),
    [
      "CREATE TABLE IF NOT EXISTS `statusengine_logentries` (",
      "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,",
      "  `entry_time` bigint(20) NOT NULL,",
      "  `logentry_type` int(11) NULL DEFAULT 0,",
      "  `logentry_data` varchar(2048) NULL DEFAULT NULL,",
      "  `node_name` varchar(255) NULL DEFAULT NULL,",
      "  PRIMARY KEY (`id`,`entry_time`),",
      "  KEY `logentries_se` (`entry_time`,`node_name`)",
      ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci",
      "PARTITION BY RANGE (`entry_time` DIV 86400)",
      "(PARTITION p_2026_29 VALUES LESS THAN (20654),",
      "  PARTITION p_2026_30 VALUES LESS THAN (20661),",
      "  PARTITION p_2026_31 VALUES LESS THAN (20668),",
      "  PARTITION p_2026_32 VALUES LESS THAN (20675),",
      "  PARTITION p_2026_33 VALUES LESS THAN (20682),",
      "  PARTITION p_max VALUES LESS THAN MAXVALUE)",
    ].join("\n"),
  );
});

Deno.test("createTableStatement: every table declares InnoDB, utf8mb4 and no UNIQUE index", () => {
  for (const table of Object.values(TABLES)) {
    const sql = createTableStatement(table, { collation: "utf8mb4_general_ci" });
    assert.ok(sql.includes("ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"), table.name);
    assert.ok(!/UNIQUE/i.test(sql), table.name);
    assert.equal(sql.includes("PARTITION BY RANGE"), table.partitionColumn !== null, table.name);
  }
});

Deno.test("createTableStatement: a collation that is not utf8mb4 is refused", () => {
  assert.throws(
    () => createTableStatement(TABLES.statusengine_users, { collation: "utf8_general_ci" }),
    TypeError,
  );
  assert.throws(
    () => createTableStatement(TABLES.statusengine_users, { collation: "utf8mb4_x; DROP" }),
    TypeError,
  );
});

function fakeCollations(names: string[]): QueryConnection {
  const query = () => Promise.resolve([names.map((name) => ({ name })), []]);
  return { query } as unknown as QueryConnection;
}

Deno.test("chooseCollation: utf8mb4_0900_ai_ci where the server has it, else utf8mb4_general_ci (D2)", async () => {
  assert.equal(
    await chooseCollation(fakeCollations(["utf8mb4_general_ci", "utf8mb4_0900_ai_ci"])),
    "utf8mb4_0900_ai_ci",
  );
  assert.equal(await chooseCollation(fakeCollations(["utf8mb4_general_ci"])), "utf8mb4_general_ci");
  await assert.rejects(
    () => chooseCollation(fakeCollations([])),
    /Cannot choose a table collation/,
  );
});
