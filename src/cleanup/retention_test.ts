import assert from "node:assert/strict";
import { ALL_TABLES } from "../mysql/catalogue.ts";
import { RETENTION_RULES } from "../config/mod.ts";
import {
  formatLocalRfc3339,
  isRetentionKey,
  RETENTION_KEYS,
  RETENTION_TABLES,
  retentionCutoff,
  unixSeconds,
} from "./retention.ts";

/** The tables retention cleans. */
const CLEANED: ReadonlySet<string> = new Set(RETENTION_TABLES.map((r) => r.table));

// Without this test a typo in a table or column name would only surface as "cleanup: table
// failed" on every production run, and a retention column that is not the partitioning column
// of a partitioned table would make its weeks useless to retention (docs/retention.md).
Deno.test("retention: every table and column exists in the catalogue, partitioned ones on exactly that column", () => {
  for (const rule of RETENTION_TABLES) {
    const table = ALL_TABLES.find((t) => t.name === rule.table);
    assert.ok(table !== undefined, `${rule.table} is not in the catalogue`);
    const column = table.columns.find((c) => c.name === rule.column);
    assert.ok(column !== undefined, `${rule.table}.${rule.column} is not in the catalogue`);
    assert.equal(column.sqlType.kind, "integer", `${rule.table}.${rule.column} holds Unix seconds`);
    if (table.partitionColumn !== null) {
      assert.equal(
        table.partitionColumn,
        rule.column,
        `${rule.table} is partitioned on another column`,
      );
    }
  }
  // The nine partitioned tables are all cleaned (their weeks maintained, docs/retention.md).
  const partitioned = ALL_TABLES.filter((t) => t.partitionColumn !== null).map((t) => t.name);
  assert.equal(partitioned.length, 9);
  for (const name of partitioned) {
    assert.ok(CLEANED.has(name), `${name} is never cleaned`);
  }
});

// The processing order is the settings' order of the retention rules; the settings test
// "settings: retention rules keep the legacy worker's tables, columns, defaults and order" pins
// that list (the legacy keys and defaults carry an old config.yml over value for value).
Deno.test("retention: the tables are the settings' retention rules in their order, the history tables first, then the task queue (age_tasks), then the downtime tombstones", () => {
  assert.deepEqual(RETENTION_TABLES.slice(-2).map((r) => r.yamlKey), [
    "age_tasks",
    "age_downtime_tombstones",
  ]);
  assert.deepEqual(RETENTION_KEYS, RETENTION_TABLES.map((r) => r.yamlKey));
  assert.equal(CLEANED.size, 16);
});

// Deleting from these would cancel running downtimes or wipe current state.
Deno.test("retention: scheduled downtimes, status and bookkeeping tables are never cleaned", () => {
  for (
    const name of [
      "statusengine_host_scheduleddowntimes",
      "statusengine_service_scheduleddowntimes",
      "statusengine_hoststatus",
      "statusengine_servicestatus",
      "statusengine_users",
      "statusengine_nodes",
      "statusengine_dbversion",
    ]
  ) {
    assert.ok(!CLEANED.has(name), name);
  }
});

Deno.test("retention: every flag derives mechanically from the legacy YAML key", () => {
  for (const rule of RETENTION_RULES) {
    assert.equal(rule.flag, rule.yamlKey.replaceAll("_", "-"), rule.yamlKey);
  }
  assert.ok(isRetentionKey("age_perfdata"));
  assert.ok(isRetentionKey("age_tasks"));
  assert.ok(!isRetentionKey("age_users"));
  assert.ok(!isRetentionKey("ageHostchecksDays"));
});

Deno.test("retention: the cutoff keeps the local wall-clock time and refuses negative days", () => {
  const now = new Date(2026, 6, 15, 13, 45, 30, 250);
  const cutoff = retentionCutoff(now, 20);
  assert.deepEqual(
    [cutoff.getFullYear(), cutoff.getMonth(), cutoff.getDate(), cutoff.getHours()],
    [2026, 5, 25, 13],
  );
  assert.equal(cutoff.getMinutes(), 45);
  assert.equal(retentionCutoff(now, 0).getTime(), now.getTime());
  assert.equal(now.getDate(), 15, "the input date is not modified");
  assert.throws(() => retentionCutoff(now, -1), RangeError);
  assert.throws(() => retentionCutoff(now, 1.5), RangeError);
  assert.equal(unixSeconds(new Date(1_999)), 1);
  assert.equal(unixSeconds(new Date(-1)), -1);
});

Deno.test("retention: the logged cutoff is RFC 3339 local time with its offset", () => {
  const instant = new Date(2026, 2, 1, 4, 5, 6);
  const text = formatLocalRfc3339(instant);
  assert.match(text, /^2026-03-01T04:05:06[+-]\d\d:\d\d$/);
  assert.equal(new Date(text).getTime(), instant.getTime());
});
