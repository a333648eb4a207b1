import assert from "node:assert/strict";
import { ALL_TABLES, TABLES } from "../../src/mysql/catalogue.ts";
import {
  ADJUSTMENT_REASONS,
  adjustRow,
  appendAdjustedRow,
  truncateToCodePoints,
  type ValueAdjustment,
} from "../../src/mysql/values.ts";
import type { Row, SqlValue } from "../../src/events/types.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

function hostcheck(overrides: Row = {}): Row {
  return {
    hostname: "web01",
    start_time: 1785470659,
    start_time_usec: 123456,
    state: 0,
    is_hardstate: 1,
    end_time: 1785470660,
    output: "OK",
    timeout: 30,
    early_timeout: 0,
    latency: 0.60077601671218872,
    execution_time: 4.0977930000000002,
    perfdata: "rta=0.1ms",
    command: "check_ping",
    current_check_attempt: 1,
    max_check_attempts: 3,
    long_output: "",
    ...overrides,
  };
}

function valueOf(row: Row, column: string): SqlValue | undefined {
  const { values } = adjustRow("statusengine_hostchecks", row);
  return values[TABLES.statusengine_hostchecks.insertColumns.indexOf(column)];
}

Deno.test("adjustRow: a row that fits comes back unchanged in insert-column order", () => {
  const row = hostcheck();
  const { values, adjustments } = adjustRow("statusengine_hostchecks", row);
  assert.deepEqual(values, TABLES.statusengine_hostchecks.insertColumns.map((c) => row[c]));
  assert.deepEqual(adjustments, []);
});

// D6: the legacy worker rounded to 14 significant digits; we store the exact double.
Deno.test("adjustRow: doubles are passed through exactly (D6)", () => {
  assert.equal(valueOf(hostcheck(), "latency"), 0.60077601671218872);
  assert.equal(valueOf(hostcheck({ latency: 1e-300 }), "latency"), 1e-300);
  assert.equal(valueOf(hostcheck({ execution_time: -0.5 }), "execution_time"), -0.5);
});

Deno.test("adjustRow: a 10,000-character output is cut to 1024 code points (D6)", () => {
  const long = "x".repeat(10_000);
  const { values, adjustments } = adjustRow("statusengine_hostchecks", hostcheck({ output: long }));
  const output = values[TABLES.statusengine_hostchecks.insertColumns.indexOf("output")];
  assert.equal(output, "x".repeat(1024));
  assert.deepEqual(adjustments, [{ column: "output", reason: "truncated" }]);
});

Deno.test("truncateToCodePoints: never splits a surrogate pair (D6)", () => {
  const emoji = "😀"; // U+1F600, two UTF-16 units, four UTF-8 bytes
  assert.equal(truncateToCodePoints(emoji.repeat(20), 10), emoji.repeat(10));
  assert.equal(truncateToCodePoints(`a${emoji.repeat(20)}`, 10), `a${emoji.repeat(9)}`);
  // 600 emoji are 1200 UTF-16 units but only 600 code points: they fit 1024.
  const fits = emoji.repeat(600);
  assert.equal(truncateToCodePoints(fits, 1024), fits);
  // A lone surrogate counts as one character (it reaches MySQL as U+FFFD).
  assert.equal(truncateToCodePoints("\ud800abc", 2), "\ud800a");
  assert.equal(truncateToCodePoints("abc\ud83d", 3), "abc");
  assert.equal(truncateToCodePoints("", 0), "");
  assert.equal(truncateToCodePoints("abc", 0), "");
});

Deno.test("adjustRow: emoji output is truncated by code points, not UTF-16 units (D6)", () => {
  const output = "😀".repeat(2000);
  const value = valueOf(hostcheck({ output }), "output");
  assert.equal(value, "😀".repeat(1024));
  assert.equal([...String(value)].length, 1024);
  // Exactly at the limit is not an adjustment.
  const exact = adjustRow("statusengine_hostchecks", hostcheck({ output: "😀".repeat(1024) }));
  assert.deepEqual(exact.adjustments, []);
});

Deno.test("adjustRow: null for a NOT NULL column becomes '' or 0 (D6)", () => {
  const { values, adjustments } = adjustRow(
    "statusengine_hostchecks",
    hostcheck({ hostname: null, end_time: null, start_time_usec: null }),
  );
  const cols = TABLES.statusengine_hostchecks.insertColumns;
  assert.equal(values[cols.indexOf("hostname")], "");
  assert.equal(values[cols.indexOf("end_time")], 0);
  assert.equal(values[cols.indexOf("start_time_usec")], 0);
  assert.deepEqual(adjustments, [
    { column: "hostname", reason: "null_to_default" },
    { column: "start_time_usec", reason: "null_to_default" },
    { column: "end_time", reason: "null_to_default" },
  ]);
});

Deno.test("adjustRow: a missing member is treated like null (docs/tables.md#null-or-empty)", () => {
  const row: Record<string, string | number | null> = { ...hostcheck() };
  delete row.end_time;
  delete row.command;
  delete row.timeout;
  const { values, adjustments } = adjustRow("statusengine_hostchecks", row);
  const cols = TABLES.statusengine_hostchecks.insertColumns;
  assert.equal(values[cols.indexOf("end_time")], 0);
  assert.equal(values[cols.indexOf("command")], "");
  assert.equal(values[cols.indexOf("timeout")], null);
  assert.deepEqual(adjustments, [{ column: "end_time", reason: "null_to_default" }]);
});

// '' in every text column for a JSON null, except event_handler and command_args, which
// keep SQL NULL (the appendix expects NULL there). A nullable column's '' is the storage
// convention, not a D6 adjustment, so it is not counted.
Deno.test("adjustRow: nullable text columns store '' for null except the columns that keep NULL (docs/tables.md#null-or-empty)", () => {
  const status = adjustRow("statusengine_hoststatus", {
    hostname: "h",
    event_handler: null,
    check_command: null,
    check_timeperiod: null,
  });
  const cols = TABLES.statusengine_hoststatus.insertColumns;
  assert.equal(status.values[cols.indexOf("event_handler")], null);
  assert.equal(status.values[cols.indexOf("check_command")], "");
  assert.equal(status.values[cols.indexOf("check_timeperiod")], "");
  assert.equal(status.values[cols.indexOf("current_state")], null);
  assert.ok(status.adjustments.every((a) => a.reason === "null_to_default"));
  assert.ok(!status.adjustments.some((a) => a.column === "check_command"));

  const notification = adjustRow("statusengine_service_notifications", {
    service_description: "s",
    command_args: null,
    ack_author: null,
    contact_name: null,
  });
  const ncols = TABLES.statusengine_service_notifications.insertColumns;
  assert.equal(notification.values[ncols.indexOf("command_args")], null);
  assert.equal(notification.values[ncols.indexOf("ack_author")], null);
  assert.equal(notification.values[ncols.indexOf("contact_name")], "");
});

Deno.test("adjustRow: numbers in text columns become their decimal text", () => {
  assert.equal(valueOf(hostcheck({ output: 42 }), "output"), "42");
  const unit = adjustRow("statusengine_perfdata", {
    unit: 123456789012,
    timestamp: 1,
    timestamp_unix: 1,
  });
  const ucols = TABLES.statusengine_perfdata.insertColumns;
  assert.equal(unit.values[ucols.indexOf("unit")], "1234567890");
  assert.deepEqual(unit.adjustments, [{ column: "unit", reason: "truncated" }]);
});

Deno.test("adjustRow: out-of-range integers are clamped into the column (docs/tables.md#long-values)", () => {
  const { values, adjustments } = adjustRow(
    "statusengine_hostchecks",
    hostcheck({ timeout: 70_000, current_check_attempt: -40_000, start_time_usec: -1 }),
  );
  const cols = TABLES.statusengine_hostchecks.insertColumns;
  assert.equal(values[cols.indexOf("timeout")], 32_767); // smallint(3)
  assert.equal(values[cols.indexOf("current_check_attempt")], -32_768);
  assert.equal(values[cols.indexOf("start_time_usec")], 0); // int(10) unsigned
  assert.deepEqual(adjustments.map((a) => a.reason), ["clamped", "clamped", "clamped"]);

  const status = adjustRow("statusengine_hoststatus", {
    hostname: "h",
    current_state: -1, // smallint(5) unsigned
    normal_check_interval: 5_000_000_000, // int(10) unsigned
    last_check: 2 ** 70, // bigint(20)
  });
  const scols = TABLES.statusengine_hoststatus.insertColumns;
  assert.equal(status.values[scols.indexOf("current_state")], 0);
  assert.equal(status.values[scols.indexOf("normal_check_interval")], 4_294_967_295);
  const lastCheck = status.values[scols.indexOf("last_check")];
  assert.ok(typeof lastCheck === "number" && BigInt(lastCheck) <= 2n ** 63n - 1n);
});

Deno.test("adjustRow: fractional numbers for integer columns are rounded half away from zero (docs/tables.md#numbers)", () => {
  const status = adjustRow("statusengine_hoststatus", {
    hostname: "h",
    normal_check_interval: 0.5,
    retry_check_interval: 2.4,
    last_check: -2.5,
  });
  const cols = TABLES.statusengine_hoststatus.insertColumns;
  assert.equal(status.values[cols.indexOf("normal_check_interval")], 1);
  assert.equal(status.values[cols.indexOf("retry_check_interval")], 2);
  assert.equal(status.values[cols.indexOf("last_check")], -3);
  assert.deepEqual(
    status.adjustments.filter((a) => a.reason === "rounded").map((a) => a.column),
    ["last_check", "normal_check_interval", "retry_check_interval"],
  );
});

Deno.test("adjustRow: tinyint(1) flags other than 0/1 are written as 1 (docs/tables.md#booleans)", () => {
  const { values, adjustments } = adjustRow(
    "statusengine_hostchecks",
    hostcheck({ is_hardstate: 2, early_timeout: -1 }),
  );
  const cols = TABLES.statusengine_hostchecks.insertColumns;
  assert.equal(values[cols.indexOf("is_hardstate")], 1);
  assert.equal(values[cols.indexOf("early_timeout")], 1);
  assert.deepEqual(adjustments, [
    { column: "is_hardstate", reason: "flag_normalised" },
    { column: "early_timeout", reason: "flag_normalised" },
  ]);
  assert.deepEqual(
    adjustRow("statusengine_hostchecks", hostcheck({ is_hardstate: 0 })).adjustments,
    [],
  );
});

Deno.test("adjustRow: the AUTO_INCREMENT id of logentries is never bound", () => {
  const { values } = adjustRow("statusengine_logentries", {
    id: 99,
    entry_time: 1,
    logentry_type: 262144,
    logentry_data: "x",
    node_name: "N",
  });
  assert.deepEqual(values, [1, 262144, "x", "N"]);
});

Deno.test("appendAdjustedRow: rows append to one flat parameter array", () => {
  const values: SqlValue[] = [];
  const adjustments: ValueAdjustment[] = [];
  appendAdjustedRow(
    TABLES.statusengine_nodes,
    { node_name: "N", node_start_time: 1 },
    values,
    adjustments,
  );
  appendAdjustedRow(
    TABLES.statusengine_nodes,
    { node_name: null, node_version: "1" },
    values,
    adjustments,
  );
  assert.deepEqual(values, ["N", "", 1, "", "1", 0]);
  assert.deepEqual(adjustments, [
    { column: "node_name", reason: "null_to_default" },
    { column: "node_start_time", reason: "null_to_default" },
  ]);
});

Deno.test("ADJUSTMENT_REASONS: lists every reason label once", () => {
  assert.deepEqual([...ADJUSTMENT_REASONS].sort(), [
    "clamped",
    "flag_normalised",
    "null_to_default",
    "rounded",
    "truncated",
  ]);
});

Deno.test("appendAdjustedRow: every table's row written at an offset equals the row appended, on random rows", () => {
  const rnd = seededRandom(0xf17);
  const samples: (SqlValue | undefined | boolean)[] = [
    undefined,
    null,
    "",
    "ok",
    "x".repeat(5000),
    "\u{1F600}".repeat(900),
    "a\u{1F600}".repeat(700),
    0,
    1,
    -1,
    2,
    0.5,
    -0.5,
    2.5,
    -2.5,
    127,
    128,
    -129,
    255,
    256,
    65535,
    2147483647,
    2147483648,
    -2147483649,
    4294967296,
    1785470659,
    Number.MAX_SAFE_INTEGER,
    -Number.MAX_SAFE_INTEGER,
    1e300,
    -1e300,
    Infinity,
    -Infinity,
    NaN,
    0.60077601671218872,
    true,
    false,
  ];
  for (const table of ALL_TABLES) {
    for (let round = 0; round < 300; round++) {
      const row: Record<string, unknown> = {};
      for (const column of table.insertColumns) {
        const v = samples[rnd(samples.length)];
        if (v !== undefined || rnd(2) === 0) row[column] = v;
      }
      const reference: SqlValue[] = [];
      const referenceAdjustments: ValueAdjustment[] = [];
      appendAdjustedRow(table, row as Row, reference, referenceAdjustments);
      assert.equal(reference.length, table.insertColumns.length, `${table.name} round ${round}`);
      // At an offset into an array of a statement's length, as the writer fits its rows.
      const width = table.insertColumns.length;
      const statement = new Array<SqlValue>(2 * width);
      appendAdjustedRow(table, row as Row, statement, [], width);
      assert.deepEqual(statement.slice(width), reference, `${table.name} round ${round}`);
      assert.equal(Object.keys(statement).length, width, "the row's own slots, no hole left");
    }
  }
});
