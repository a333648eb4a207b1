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
    assert.ok(RETENTION_TABLES.some((r) => r.table === name), `${name} is never cleaned`);
  }
});

// The legacy keys and defaults must carry an old config.yml over value for value, and the order
// is the processing order.
Deno.test("retention: the fourteen history tables in order, then the task queue (age_tasks), then the downtime tombstones", () => {
  assert.deepEqual(
    RETENTION_TABLES.map((r) => [r.table, r.column, r.key, r.defaultDays]),
    [
      ["statusengine_hostchecks", "start_time", "age_hostchecks", 5],
      ["statusengine_servicechecks", "start_time", "age_servicechecks", 5],
      ["statusengine_host_acknowledgements", "entry_time", "age_host_acknowledgements", 60],
      ["statusengine_service_acknowledgements", "entry_time", "age_service_acknowledgements", 60],
      ["statusengine_host_notifications", "start_time", "age_host_notifications", 60],
      ["statusengine_service_notifications", "start_time", "age_service_notifications", 60],
      ["statusengine_host_notifications_log", "start_time", "age_host_notifications_log", 60],
      ["statusengine_service_notifications_log", "start_time", "age_service_notifications_log", 60],
      ["statusengine_host_statehistory", "state_time", "age_host_statehistory", 365],
      ["statusengine_service_statehistory", "state_time", "age_service_statehistory", 365],
      ["statusengine_host_downtimehistory", "entry_time", "age_host_downtimes", 60],
      ["statusengine_service_downtimehistory", "entry_time", "age_service_downtimes", 60],
      ["statusengine_logentries", "entry_time", "age_logentries", 5],
      ["statusengine_perfdata", "timestamp_unix", "age_perfdata", 90],
      // The PHP cleanup also removed leftover tasks of the UI's task queue.
      ["statusengine_tasks", "entry_time", "age_tasks", 5],
      // The worker's own tombstones of ended downtimes (docs/downtimes.md).
      ["statusengine_downtime_tombstones", "end_time", "age_downtime_tombstones", 60],
    ],
  );
  assert.deepEqual(RETENTION_KEYS, RETENTION_TABLES.map((r) => r.key));
  assert.equal(new Set(RETENTION_TABLES.map((r) => r.table)).size, 16);
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
    assert.ok(!RETENTION_TABLES.some((r) => r.table === name), name);
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
