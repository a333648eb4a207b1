import assert from "node:assert/strict";
import {
  ALL_TABLES,
  BATCHED_WRITE_MODES,
  isTableName,
  MAX_BATCH_SIZE,
  MAX_PLACEHOLDERS,
  parseSqlType,
  TABLE_NAMES,
  type TableName,
  TABLES,
  type WriteMode,
} from "./catalogue.ts";
import {
  BATCHED_TABLE_NAMES,
  DOWNTIME_TABLE_NAMES,
  TABLE_NAMES as LEAF_TABLE_NAMES,
} from "../events/table_names.ts";

// The counts of the production schema dump (D2) plus the worker's tombstone table (7 columns,
// 5 of them key columns), announcement table (6 columns, 5 of them key columns) and lease table
// (4 columns, 1 key column); a miscopied column line would change one of them.
Deno.test("catalogue: 22 + 3 tables, 295 + 17 columns and 56 + 11 primary-key columns (D2)", () => {
  assert.equal(ALL_TABLES.length, 25);
  assert.equal(TABLE_NAMES.length, 25);
  assert.equal(ALL_TABLES.reduce((n, t) => n + t.columns.length, 0), 312);
  assert.equal(ALL_TABLES.reduce((n, t) => n + t.primaryKey.length, 0), 67);
  assert.equal(new Set(TABLE_NAMES).size, 25);
  for (const name of TABLE_NAMES) assert.match(name, /^statusengine_[a-z_]+$/);
});

// Two distinct events can share a history key; the upsert keeps the greater row, compared from the
// key's time column (docs/writers.md#upsert-or-insert), which also holds the decision.
Deno.test("catalogue: the ten history tables order their rows from the key's time column, then every non-key column (docs/tables.md#write-modes, docs/writers.md#upsert-or-insert)", () => {
  const expected: Record<string, string> = {
    "statusengine_hostchecks": "start_time",
    "statusengine_servicechecks": "start_time",
    "statusengine_host_statehistory": "state_time",
    "statusengine_service_statehistory": "state_time",
    "statusengine_host_acknowledgements": "entry_time",
    "statusengine_service_acknowledgements": "entry_time",
    "statusengine_host_notifications": "start_time",
    "statusengine_service_notifications": "start_time",
    "statusengine_host_notifications_log": "start_time",
    "statusengine_service_notifications_log": "start_time",
  };
  const history = ALL_TABLES.filter((t) => t.writeMode === "history_upsert");
  assert.deepEqual(history.map((t) => t.name).sort(), Object.keys(expected).sort());
  for (const table of history) {
    const time = expected[table.name] as string;
    const nonKey = table.insertColumns.filter((c) => !table.primaryKey.includes(c));
    assert.deepEqual(table.snapshotOrder, [time, ...nonKey], table.name);
    assert.deepEqual(table.updateColumns, table.snapshotOrder, table.name);
    assert.deepEqual(table.primaryKey.slice(-2), [time, `${time}_usec`], table.name);
  }
});

Deno.test("catalogue: write modes follow docs/tables.md#write-modes and give the 14 batched writers", () => {
  const byMode = (mode: WriteMode) =>
    ALL_TABLES.filter((t) => t.writeMode === mode).map((t) => t.name).sort();
  assert.deepEqual(byMode("full_upsert"), [
    "statusengine_hoststatus",
    "statusengine_servicestatus",
  ]);
  assert.equal(byMode("history_upsert").length, 10);
  assert.deepEqual(byMode("insert"), ["statusengine_logentries", "statusengine_perfdata"]);
  // The worker's two own tables, then the history and scheduled tables of hosts and services.
  assert.deepEqual(byMode("downtime"), [
    "statusengine_downtime_announcements",
    "statusengine_downtime_tombstones",
    ...["host", "service"].flatMap((kind) => [
      `statusengine_${kind}_downtimehistory`,
      `statusengine_${kind}_scheduleddowntimes`,
    ]),
  ]);
  assert.deepEqual(byMode("none"), [
    "statusengine_dbversion",
    "statusengine_nodes",
    "statusengine_tasks",
    "statusengine_users",
    "statusengine_worker_leases",
  ]);
  const batched = ALL_TABLES.filter((t) => t.batched);
  assert.equal(batched.length, 14);
  for (const t of ALL_TABLES) assert.equal(t.batched, BATCHED_WRITE_MODES.includes(t.writeMode));
});

// The two plain-INSERT tables have no ON DUPLICATE KEY clause, so a key collision would fail the
// whole statement with 1062 (docs/writers.md#upsert-or-insert). They are safe only because nothing
// they insert can collide: logentries' key contains the server-assigned AUTO_INCREMENT id, and
// perfdata has no unique index at all.
Deno.test("catalogue: logentries and perfdata cannot collide (docs/writers.md#upsert-or-insert)", () => {
  const logentries = TABLES.statusengine_logentries;
  const id = logentries.columns.find((c) => c.name === "id");
  assert.equal(id?.autoIncrement, true);
  assert.ok(logentries.primaryKey.includes("id"));
  assert.ok(!logentries.insertColumns.includes("id"));
  assert.ok(logentries.indexes.every((i) => !i.unique));

  const perfdata = TABLES.statusengine_perfdata;
  assert.deepEqual(perfdata.primaryKey, []);
  assert.ok(perfdata.indexes.every((i) => !i.unique));
  assert.ok(perfdata.columns.every((c) => !c.autoIncrement));
});

// TestBatchSizeStaysUnderPlaceholderLimit in the Go worker: do the arithmetic for every table
// at the ceiling, not "no error" (a wrong guard passes that too).
Deno.test("catalogue: a full batch of 700 rows fits the 65,535 placeholders for every batched table (docs/writers.md#statement-shape)", () => {
  assert.equal(MAX_BATCH_SIZE, 700);
  assert.equal(MAX_PLACEHOLDERS, 65_535);
  for (const table of ALL_TABLES.filter((t) => t.batched)) {
    const placeholders = MAX_BATCH_SIZE * table.insertColumns.length;
    assert.ok(placeholders <= MAX_PLACEHOLDERS, `${table.name}: ${placeholders}`);
  }
  const widest = Math.max(
    ...ALL_TABLES.filter((t) => t.batched).map((t) => t.insertColumns.length),
  );
  assert.equal(widest, 43);
  assert.equal(MAX_BATCH_SIZE * widest, 30_100);
});

Deno.test("catalogue: column counts quoted in docs/writers.md#statement-shape are the insert column counts", () => {
  assert.equal(TABLES.statusengine_servicestatus.insertColumns.length, 43);
  assert.equal(TABLES.statusengine_hoststatus.insertColumns.length, 41);
  assert.equal(TABLES.statusengine_servicechecks.insertColumns.length, 17);
  assert.equal(TABLES.statusengine_hostchecks.insertColumns.length, 16);
  assert.equal(TABLES.statusengine_logentries.insertColumns.length, 4);
  assert.deepEqual(TABLES.statusengine_logentries.insertColumns, [
    "entry_time",
    "logentry_type",
    "logentry_data",
    "node_name",
  ]);
});

Deno.test("catalogue: full upserts update every non-key column and nothing else (docs/writers.md#upsert-or-insert)", () => {
  for (const name of ["statusengine_hoststatus", "statusengine_servicestatus"] as const) {
    const t = TABLES[name];
    assert.deepEqual(
      t.updateColumns,
      t.columns.map((c) => c.name).filter((c) => !t.primaryKey.includes(c)),
    );
  }
  assert.equal(TABLES.statusengine_hoststatus.updateColumns.length, 40);
  assert.equal(TABLES.statusengine_servicestatus.updateColumns.length, 41);
  assert.ok(!TABLES.statusengine_servicestatus.updateColumns.includes("service_description"));
  assert.deepEqual(TABLES.statusengine_logentries.updateColumns, []);
  assert.deepEqual(TABLES.statusengine_perfdata.updateColumns, []);
});

Deno.test("catalogue: the status tables order snapshots by their time first, then times the core only moves forward, then every other non-key column (docs/writers.md#newest-snapshot)", () => {
  for (const name of ["statusengine_hoststatus", "statusengine_servicestatus"] as const) {
    const t = TABLES[name];
    assert.deepEqual(t.snapshotOrder.slice(0, 5), [
      "status_update_time",
      "last_check",
      "last_state_change",
      "last_hard_state_change",
      "last_notification",
    ]);
    assert.deepEqual([...t.snapshotOrder].sort(), [...t.updateColumns].sort(), name);
  }
  for (const t of ALL_TABLES.filter((t) => !t.writeMode.endsWith("_upsert"))) {
    assert.deepEqual(t.snapshotOrder, [], t.name);
  }
});

Deno.test("catalogue: insert columns are the schema order minus AUTO_INCREMENT", () => {
  for (const t of ALL_TABLES) {
    assert.deepEqual(
      t.insertColumns,
      t.columns.filter((c) => !c.autoIncrement).map((c) => c.name),
      t.name,
    );
    assert.deepEqual(t.columns.map((c) => c.position), t.columns.map((_, i) => i + 1), t.name);
  }
});

// docs/tables.md#long-values lists the limits the worker truncates to; they must be the ones
// derived from the types.
Deno.test("catalogue: character limits derived from the types match docs/tables.md#long-values", () => {
  const expectations: [TableName, string, number][] = [
    ["statusengine_hoststatus", "hostname", 255],
    ["statusengine_servicestatus", "service_description", 255],
    ["statusengine_hoststatus", "output", 1024],
    ["statusengine_servicestatus", "long_output", 8192],
    ["statusengine_hoststatus", "perfdata", 2048],
    ["statusengine_servicechecks", "perfdata", 2048],
    ["statusengine_hostchecks", "command", 1024],
    ["statusengine_servicestatus", "check_command", 255],
    ["statusengine_servicestatus", "event_handler", 255],
    ["statusengine_hoststatus", "check_timeperiod", 255],
    ["statusengine_hoststatus", "node_name", 255],
    ["statusengine_host_acknowledgements", "author_name", 255],
    ["statusengine_host_acknowledgements", "comment_data", 1024],
    ["statusengine_service_notifications", "contact_name", 1024],
    ["statusengine_service_notifications", "command_name", 1024],
    ["statusengine_service_notifications", "command_args", 1024],
    ["statusengine_service_notifications", "ack_author", 255],
    ["statusengine_service_notifications_log", "ack_author", 1024],
    ["statusengine_host_notifications_log", "ack_data", 1024],
    ["statusengine_logentries", "logentry_data", 2048],
    ["statusengine_perfdata", "label", 255],
    ["statusengine_perfdata", "unit", 10],
    ["statusengine_tasks", "payload", 8192],
  ];
  for (const [table, column, limit] of expectations) {
    assert.equal(TABLES[table].charLimits[column], limit, `${table}.${column}`);
  }
  for (const t of ALL_TABLES) {
    for (const c of t.columns) {
      assert.equal(c.name in t.charLimits, c.type.startsWith("varchar("), `${t.name}.${c.name}`);
    }
  }
});

Deno.test("catalogue: the nine weekly-partitioned tables partition by their time column (docs/tables.md#shared-table-properties)", () => {
  const partitioned = Object.fromEntries(
    ALL_TABLES.filter((t) => t.partitionColumn !== null).map((t) => [t.name, t.partitionColumn]),
  );
  assert.deepEqual(partitioned, {
    "statusengine_host_notifications": "start_time",
    "statusengine_host_notifications_log": "start_time",
    "statusengine_host_statehistory": "state_time",
    "statusengine_hostchecks": "start_time",
    "statusengine_logentries": "entry_time",
    "statusengine_service_notifications": "start_time",
    "statusengine_service_notifications_log": "start_time",
    "statusengine_service_statehistory": "state_time",
    "statusengine_servicechecks": "start_time",
  });
  for (const t of ALL_TABLES) {
    if (t.partitionColumn !== null) assert.ok(t.primaryKey.includes(t.partitionColumn), t.name);
  }
});

Deno.test("catalogue: event_handler, command_args, the notifications' ack_author/ack_data and the perfdata unit keep SQL NULL, as the legacy worker writes them (docs/tables.md#null-or-empty)", () => {
  const keepers = ALL_TABLES.flatMap((t) =>
    t.columns.filter((c) => c.keepsNull).map((c) => `${t.name}.${c.name}`)
  );
  assert.deepEqual(keepers.sort(), [
    "statusengine_host_notifications.ack_author",
    "statusengine_host_notifications.ack_data",
    "statusengine_host_notifications.command_args",
    "statusengine_host_notifications_log.ack_author",
    "statusengine_host_notifications_log.ack_data",
    "statusengine_hoststatus.event_handler",
    "statusengine_perfdata.unit",
    "statusengine_service_notifications.ack_author",
    "statusengine_service_notifications.ack_data",
    "statusengine_service_notifications.command_args",
    "statusengine_service_notifications_log.ack_author",
    "statusengine_service_notifications_log.ack_data",
    "statusengine_servicestatus.event_handler",
  ]);
});

Deno.test("catalogue: no secondary index is unique and every key column is NOT NULL (docs/tables.md#shared-table-properties)", () => {
  for (const t of ALL_TABLES) {
    for (const index of t.indexes) assert.equal(index.unique, false, `${t.name}.${index.name}`);
    for (const k of t.primaryKey) {
      assert.equal(t.columns.find((c) => c.name === k)?.nullable, false, `${t.name}.${k}`);
    }
  }
});

Deno.test("parseSqlType: integer ranges, flags and string limits come from the type", () => {
  assert.deepEqual(parseSqlType("tinyint(1)"), {
    kind: "integer",
    min: -128,
    max: 127,
    unsigned: false,
    flag: true,
  });
  assert.deepEqual(parseSqlType("smallint(5) unsigned"), {
    kind: "integer",
    min: 0,
    max: 65_535,
    unsigned: true,
    flag: false,
  });
  assert.equal(parseSqlType("smallint(2)").kind, "integer");
  assert.deepEqual(parseSqlType("int(10) unsigned"), {
    kind: "integer",
    min: 0,
    max: 4_294_967_295,
    unsigned: true,
    flag: false,
  });
  const bigint = parseSqlType("bigint(20)");
  assert.ok(bigint.kind === "integer");
  // Must stay at or below 2^63 − 1 once printed as a decimal literal.
  assert.ok(BigInt(bigint.max) <= 2n ** 63n - 1n);
  assert.ok(BigInt(bigint.min) >= -(2n ** 63n));
  assert.deepEqual(parseSqlType("varchar(10)"), { kind: "string", maxChars: 10 });
  assert.deepEqual(parseSqlType("double"), { kind: "double" });
  assert.throws(() => parseSqlType("text"), RangeError);
});

Deno.test("isTableName: finds catalogue tables and nothing else", () => {
  assert.ok(!isTableName("statusengine_nope"));
  assert.ok(!isTableName("toString"));
  assert.ok(isTableName("statusengine_users"));
  assert.ok(!isTableName("constructor"));
  assert.ok(Object.isFrozen(TABLES.statusengine_hostchecks));
});

// The decoders, the pipeline and the writers type table names with the leaf list of
// events/table_names.ts; a table defined here but missing there (or batched here but not
// there) would get rows without a writer, or a writer without rows.
Deno.test("catalogue: the table names and write modes match events/table_names.ts", () => {
  assert.deepEqual([...TABLE_NAMES].sort(), [...LEAF_TABLE_NAMES].sort());
  assert.deepEqual(
    ALL_TABLES.filter((t) => t.batched).map((t) => t.name).sort(),
    [...BATCHED_TABLE_NAMES].sort(),
  );
  assert.deepEqual(
    ALL_TABLES.filter((t) => t.writeMode === "downtime").map((t) => t.name).sort(),
    [...DOWNTIME_TABLE_NAMES].sort(),
  );
});
