import assert from "node:assert/strict";
import { ALL_TABLES, type Table, TABLES } from "./catalogue.ts";
import {
  type ColumnRow,
  compareSchema,
  describeDifference,
  describeDifferences,
  normalizeColumnDefault,
  normalizeColumnType,
  normalizePartitionExpression,
  type PartitionRow,
  type SchemaDifference,
  type SchemaSnapshot,
  type StatisticsRow,
  type TableRow,
} from "./schema.ts";

/** One `information_schema.STATISTICS` row of a whole-column index. */
function statistic(
  tableName: string,
  indexName: string,
  seqInIndex: number,
  columnName: string,
  nonUnique: number,
): StatisticsRow {
  return { tableName, indexName, seqInIndex, columnName, nonUnique, subPart: null };
}

/** One `information_schema.TABLES` row of an InnoDB base table. */
function baseTable(tableName: string, collation: string): TableRow {
  return { tableName, tableType: "BASE TABLE", engine: "InnoDB", collation };
}

/**
 * `COLUMN_NAME`, `ORDINAL_POSITION`, `COLUMN_TYPE`, `IS_NULLABLE`, `COLUMN_DEFAULT`, `EXTRA` and
 * `CHARACTER_SET_NAME` of one `information_schema.COLUMNS` row.
 */
type ColumnSpec = [string, number, string, string, string | null, string, string | null];

/** The `information_schema.COLUMNS` rows of one table, in the given order. */
function columnsOf(tableName: string, ...specs: ColumnSpec[]): ColumnRow[] {
  return specs.map((
    [columnName, position, columnType, isNullable, columnDefault, extra, characterSet],
  ) => ({
    tableName,
    columnName,
    position,
    columnType,
    isNullable,
    columnDefault,
    extra,
    characterSet,
  }));
}

// Literal information_schema rows as MariaDB 10.11 reports them for a schema created from
// the catalogue (copied from a real server).
const MARIADB_ROWS: SchemaSnapshot = {
  tables: [
    baseTable("statusengine_dbversion", "utf8mb4_general_ci"),
    baseTable("statusengine_logentries", "utf8mb4_general_ci"),
  ],
  columns: [
    ...columnsOf(
      "statusengine_dbversion",
      ["id", 1, "int(11)", "NO", null, "", null],
      ["dbversion", 2, "varchar(255)", "YES", "'3.0.0'", "", "utf8mb4"],
    ),
    ...columnsOf(
      "statusengine_logentries",
      ["id", 1, "bigint(20) unsigned", "NO", null, "auto_increment", null],
      ["entry_time", 2, "bigint(20)", "NO", null, "", null],
      ["logentry_type", 3, "int(11)", "YES", "0", "", null],
      ["logentry_data", 4, "varchar(2048)", "YES", "NULL", "", "utf8mb4"],
      ["node_name", 5, "varchar(255)", "YES", "NULL", "", "utf8mb4"],
    ),
  ],
  statistics: [
    statistic("statusengine_dbversion", "PRIMARY", 1, "id", 0),
    statistic("statusengine_logentries", "PRIMARY", 1, "id", 0),
    statistic("statusengine_logentries", "PRIMARY", 2, "entry_time", 0),
    statistic("statusengine_logentries", "logentries_se", 1, "entry_time", 1),
    statistic("statusengine_logentries", "logentries_se", 2, "node_name", 1),
  ],
  partitions: [
    { tableName: "statusengine_logentries", method: "RANGE", expression: "`entry_time` DIV 86400" },
  ],
};

// The same tables as MySQL 8.0 reports them for the production schema file: no integer
// display widths (tinyint(1) excepted), bare string defaults, SQL NULL for DEFAULT NULL, the
// 0900 collation, statistics in another order and a lower-case partition operator.
const MYSQL8_ROWS: SchemaSnapshot = {
  tables: [
    baseTable("statusengine_logentries", "utf8mb4_0900_ai_ci"),
    baseTable("statusengine_dbversion", "utf8mb4_0900_ai_ci"),
  ],
  columns: [
    ...columnsOf(
      "statusengine_logentries",
      ["node_name", 5, "varchar(255)", "YES", null, "", "utf8mb4"],
      ["logentry_data", 4, "varchar(2048)", "YES", null, "", "utf8mb4"],
      ["logentry_type", 3, "int", "YES", "0", "", null],
      ["entry_time", 2, "bigint", "NO", null, "", null],
      ["id", 1, "bigint unsigned", "NO", null, "auto_increment", null],
    ),
    ...columnsOf(
      "statusengine_dbversion",
      ["id", 1, "int", "NO", null, "", null],
      ["dbversion", 2, "varchar(255)", "YES", "3.0.0", "", "utf8mb4"],
    ),
  ],
  // The same index rows as MariaDB reports, in another order.
  statistics: [4, 2, 3, 1, 0].map((i) => MARIADB_ROWS.statistics[i] as StatisticsRow),
  partitions: [
    {
      tableName: "statusengine_logentries",
      method: "RANGE",
      expression: "(`entry_time` div 86400)",
    },
  ],
};

const TWO_TABLES = [TABLES.statusengine_dbversion, TABLES.statusengine_logentries];

Deno.test("compareSchema: literal MariaDB rows of a catalogue schema show no difference", () => {
  assert.deepEqual(compareSchema(MARIADB_ROWS, TWO_TABLES), []);
});

Deno.test("compareSchema: literal MySQL 8 rows of the production schema show no difference (D2)", () => {
  assert.deepEqual(compareSchema(MYSQL8_ROWS, TWO_TABLES), []);
});

// Why these normalisations exist: without them a MySQL 8 database written from the official
// schema file would report a "difference" in nearly every column.
Deno.test("normalizeColumnType: integer display widths are ignored, everything else is kept", () => {
  assert.equal(normalizeColumnType("int(11)"), "int");
  assert.equal(normalizeColumnType("int"), "int");
  assert.equal(normalizeColumnType("INT(10) UNSIGNED"), "int unsigned");
  assert.equal(normalizeColumnType("bigint(20) unsigned"), "bigint unsigned");
  assert.equal(
    normalizeColumnType("smallint(6) unsigned"),
    normalizeColumnType("smallint unsigned"),
  );
  assert.equal(normalizeColumnType("tinyint(1)"), normalizeColumnType("tinyint"));
  assert.equal(normalizeColumnType("integer"), "int");
  assert.equal(normalizeColumnType("boolean"), "tinyint");
  assert.equal(normalizeColumnType("varchar(255)"), "varchar(255)");
  assert.notEqual(normalizeColumnType("varchar(255)"), normalizeColumnType("varchar(256)"));
  assert.notEqual(normalizeColumnType("int unsigned"), normalizeColumnType("int"));
  assert.equal(normalizeColumnType("double"), "double");
});

Deno.test("normalizeColumnDefault: quoted, bare, NULL and absent defaults compare as the servers mean them", () => {
  assert.equal(normalizeColumnDefault(null), null); // no default (both servers), NULL (MySQL 8)
  assert.equal(normalizeColumnDefault("NULL"), null); // DEFAULT NULL on MariaDB
  assert.equal(normalizeColumnDefault("'3.0.0'"), "3.0.0"); // MariaDB quotes strings
  assert.equal(normalizeColumnDefault("3.0.0"), "3.0.0"); // MySQL 8 does not
  assert.equal(normalizeColumnDefault("'it''s'"), "it's");
  assert.equal(normalizeColumnDefault("0"), "0");
  assert.equal(normalizeColumnDefault("0.0"), "0");
  assert.equal(normalizeColumnDefault("'NULL'"), "NULL"); // the string, not SQL NULL
  assert.notEqual(normalizeColumnDefault("1"), normalizeColumnDefault("0"));
});

Deno.test("normalizePartitionExpression: backticks, parentheses and case do not matter", () => {
  assert.equal(
    normalizePartitionExpression("`start_time` DIV 86400"),
    normalizePartitionExpression("(`start_time` div 86400)"),
  );
  assert.notEqual(
    normalizePartitionExpression("`start_time` DIV 86400"),
    normalizePartitionExpression("`end_time` DIV 86400"),
  );
});

// A whole catalogue schema in MariaDB spelling, to mutate one thing at a time.
function mariaDbSnapshot(tables: readonly Table[] = ALL_TABLES): {
  tables: TableRow[];
  columns: ColumnRow[];
  statistics: StatisticsRow[];
  partitions: PartitionRow[];
} {
  const snapshot = {
    tables: [] as TableRow[],
    columns: [] as ColumnRow[],
    statistics: [] as StatisticsRow[],
    partitions: [] as PartitionRow[],
  };
  for (const t of tables) {
    snapshot.tables.push({
      tableName: t.name,
      tableType: "BASE TABLE",
      engine: "InnoDB",
      collation: "utf8mb4_general_ci",
    });
    for (const c of t.columns) {
      snapshot.columns.push({
        tableName: t.name,
        columnName: c.name,
        position: c.position,
        columnType: c.type,
        isNullable: c.nullable ? "YES" : "NO",
        columnDefault: c.default,
        extra: c.autoIncrement ? "auto_increment" : "",
        characterSet: c.sqlType.kind === "string" ? "utf8mb4" : null,
      });
    }
    const indexes = [
      ...(t.primaryKey.length > 0
        ? [{ name: "PRIMARY", columns: t.primaryKey, unique: true }]
        : []),
      ...t.indexes,
    ];
    for (const index of indexes) {
      index.columns.forEach((column, i) =>
        snapshot.statistics.push({
          tableName: t.name,
          indexName: index.name,
          seqInIndex: i + 1,
          columnName: column,
          nonUnique: index.unique ? 0 : 1,
          subPart: null,
        })
      );
    }
    if (t.partitionColumn !== null) {
      snapshot.partitions.push({
        tableName: t.name,
        method: "RANGE",
        expression: `\`${t.partitionColumn}\` DIV 86400`,
      });
    }
  }
  return snapshot;
}

function only(differences: SchemaDifference[]): SchemaDifference {
  assert.equal(differences.length, 1, JSON.stringify(differences));
  return differences[0] as SchemaDifference;
}

Deno.test("compareSchema: a complete catalogue schema shows no difference", () => {
  assert.deepEqual(compareSchema(mariaDbSnapshot()), []);
});

Deno.test("compareSchema: an empty database reports all 25 tables missing", () => {
  const differences = compareSchema({ tables: [], columns: [], statistics: [], partitions: [] });
  assert.equal(differences.length, 25);
  assert.ok(differences.every((d) => d.kind === "missing_table"));
});

Deno.test("compareSchema: a missing column is reported", () => {
  const s = mariaDbSnapshot();
  s.columns = s.columns.filter((c) =>
    !(c.tableName === "statusengine_hostchecks" && c.columnName === "perfdata")
  );
  s.columns = s.columns.map((c) =>
    c.tableName === "statusengine_hostchecks" && c.position > 12
      ? { ...c, position: c.position - 1 }
      : c
  );
  const d = only(compareSchema(s));
  assert.equal(d.kind, "missing_column");
  assert.ok(
    d.kind === "missing_column" && d.column === "perfdata" && d.expected.type === "varchar(2048)",
  );
});

Deno.test("compareSchema: a different type, nullability or default is reported", () => {
  const mutate = (column: string, change: Partial<ColumnRow>) => {
    const s = mariaDbSnapshot([TABLES.statusengine_hostchecks]);
    s.columns = s.columns.map((c) => c.columnName === column ? { ...c, ...change } : c);
    return only(compareSchema(s, [TABLES.statusengine_hostchecks]));
  };
  const type = mutate("output", { columnType: "varchar(512)" });
  assert.ok(type.kind === "column_definition" && type.actual.type === "varchar(512)");
  assert.equal(mutate("end_time", { isNullable: "YES" }).kind, "column_definition");
  assert.equal(mutate("state", { columnDefault: "1" }).kind, "column_definition");
  assert.equal(mutate("state", { columnDefault: null }).kind, "column_definition");
  assert.equal(mutate("start_time_usec", { columnType: "int(10)" }).kind, "column_definition");
  assert.equal(mutate("output", { characterSet: "utf8mb3" }).kind, "column_charset");
});

Deno.test("compareSchema: a column order difference is reported once", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_nodes]);
  s.columns = s.columns.map((c) =>
    c.columnName === "node_version"
      ? { ...c, position: 3 }
      : c.columnName === "node_start_time"
      ? { ...c, position: 2 }
      : c
  );
  const d = only(compareSchema(s, [TABLES.statusengine_nodes]));
  assert.deepEqual(d, {
    kind: "column_order",
    table: "statusengine_nodes",
    expected: ["node_name", "node_version", "node_start_time"],
    actual: ["node_name", "node_start_time", "node_version"],
  });
});

Deno.test("compareSchema: an extra column is reported", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_nodes]);
  s.columns.push(
    ...columnsOf("statusengine_nodes", ["note", 4, "varchar(10)", "NO", null, "", "utf8mb4"]),
  );
  assert.equal(only(compareSchema(s, [TABLES.statusengine_nodes])).kind, "extra_column");
});

Deno.test("compareSchema: a different primary key is reported", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_servicechecks]);
  s.statistics = s.statistics.filter((r) => !(r.indexName === "PRIMARY" && r.seqInIndex === 3));
  const d = only(compareSchema(s, [TABLES.statusengine_servicechecks]));
  assert.deepEqual(d, {
    kind: "primary_key",
    table: "statusengine_servicechecks",
    expected: ["service_description", "start_time", "start_time_usec"],
    actual: ["service_description", "start_time"],
  });
});

Deno.test("compareSchema: a missing index and an index with other columns are reported", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_hostchecks]);
  s.statistics = s.statistics
    .filter((r) => r.indexName !== "times")
    .map((r) =>
      r.indexName === "hostname" && r.seqInIndex === 2 ? { ...r, columnName: "end_time" } : r
    );
  const differences = compareSchema(s, [TABLES.statusengine_hostchecks]);
  assert.deepEqual(differences.map((d) => d.kind).sort(), ["index_columns", "missing_index"]);
});

Deno.test("compareSchema: a secondary UNIQUE index is flagged, as an upsert hazard where upserted (docs/tables.md#shared-table-properties, docs/writers.md#upsert-or-insert)", () => {
  const tables = [TABLES.statusengine_hoststatus, TABLES.statusengine_perfdata];
  const s = mariaDbSnapshot(tables);
  s.statistics.push(statistic("statusengine_hoststatus", "uniq_node", 1, "node_name", 0));
  s.statistics = s.statistics.map((r) =>
    r.tableName === "statusengine_perfdata" && r.indexName === "metric" ? { ...r, nonUnique: 0 } : r
  );
  const differences = compareSchema(s, tables);
  assert.deepEqual(differences, [
    {
      kind: "unexpected_unique_index",
      table: "statusengine_hoststatus",
      index: "uniq_node",
      columns: ["node_name"],
      upserted: true,
    },
    {
      kind: "unexpected_unique_index",
      table: "statusengine_perfdata",
      index: "metric",
      columns: ["hostname", "service_description", "label", "timestamp_unix"],
      upserted: false,
    },
  ]);
});

Deno.test("compareSchema: an extra non-unique index and a prefix index are reported", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_tasks]);
  s.statistics.push(statistic("statusengine_tasks", "type", 1, "type", 1));
  s.statistics = s.statistics.map((r) => r.indexName === "uuid" ? { ...r, subPart: 16 } : r);
  const differences = compareSchema(s, [TABLES.statusengine_tasks]);
  assert.deepEqual(differences.map((d) => d.kind).sort(), ["extra_index", "index_columns"]);
});

Deno.test("compareSchema: missing or unexpected partitioning is reported", () => {
  const tables = [TABLES.statusengine_hostchecks, TABLES.statusengine_hoststatus];
  const s = mariaDbSnapshot(tables);
  s.partitions = [{
    tableName: "statusengine_hoststatus",
    method: "HASH",
    expression: "`hostname`",
  }];
  const differences = compareSchema(s, tables);
  assert.deepEqual(differences, [
    {
      kind: "partitioning",
      table: "statusengine_hostchecks",
      expected: "RANGE (start_time DIV 86400)",
      actual: null,
    },
    {
      kind: "partitioning",
      table: "statusengine_hoststatus",
      expected: null,
      actual: "HASH (hostname)",
    },
  ]);
});

Deno.test("compareSchema: engine, character set and views are reported", () => {
  const tables = [TABLES.statusengine_users, TABLES.statusengine_tasks];
  const s = mariaDbSnapshot(tables);
  s.tables = s.tables.map((t) =>
    t.tableName === "statusengine_users"
      ? { ...t, engine: "MyISAM", collation: "utf8mb3_general_ci" }
      : { ...t, tableType: "VIEW", engine: null, collation: null }
  );
  const differences = compareSchema(s, tables);
  assert.deepEqual(differences.map((d) => d.kind), [
    "table_engine",
    "table_charset",
    "not_a_table",
  ]);
});

Deno.test("describeDifference: every kind names its table and reads as one line", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_hostchecks]);
  s.tables[0] = { ...(s.tables[0] as TableRow), engine: "MyISAM", collation: "latin1_swedish_ci" };
  s.columns = s.columns
    .filter((c) => c.columnName !== "command")
    .map((c) =>
      c.columnName === "output" ? { ...c, columnType: "text", characterSet: "latin1" } : c
    );
  s.columns.push({ ...(s.columns[0] as ColumnRow), columnName: "extra", position: 99 });
  s.columns = s.columns.map((c) => c.columnName === "timeout" ? { ...c, position: 1 } : c);
  s.statistics = s.statistics
    .filter((r) => r.indexName !== "times" && r.seqInIndex !== 3)
    .map((r) =>
      r.indexName === "hostname" && r.seqInIndex === 2 ? { ...r, columnName: "end_time" } : r
    );
  s.statistics.push({ ...(s.statistics[0] as StatisticsRow), indexName: "u", nonUnique: 0 });
  s.statistics.push({ ...(s.statistics[0] as StatisticsRow), indexName: "x", nonUnique: 1 });
  s.partitions = [];
  const differences = [
    ...compareSchema(s, [TABLES.statusengine_hostchecks]),
    ...compareSchema({ tables: [], columns: [], statistics: [], partitions: [] }, [
      TABLES.statusengine_users,
    ]),
    ...compareSchema(
      {
        ...mariaDbSnapshot([TABLES.statusengine_users]),
        tables: [{
          tableName: "statusengine_users",
          tableType: "VIEW",
          engine: null,
          collation: null,
        }],
      },
      [TABLES.statusengine_users],
    ),
  ];
  const kinds = new Set(differences.map((d) => d.kind));
  assert.equal(kinds.size, 15, [...kinds].join(", "));
  for (const d of differences) {
    const line = describeDifference(d);
    assert.ok(line.startsWith(d.table), line);
    assert.ok(!line.includes("\n"), line);
  }
});

Deno.test("describeDifference: a column wider than the schema's is not offered a MODIFY that would cut its values", () => {
  const s = mariaDbSnapshot([TABLES.statusengine_hostchecks]);
  s.columns = s.columns.map((c) =>
    c.columnName === "output"
      ? { ...c, columnType: "varchar(4096)" }
      : c.columnName === "timeout"
      ? { ...c, columnType: "int(11)" }
      : c.columnName === "command"
      ? { ...c, columnType: "varchar(255)" }
      : c
  );
  const lines = describeDifferences(compareSchema(s, [TABLES.statusengine_hostchecks]));
  assert.deepEqual(lines, [
    "statusengine_hostchecks.output: column is varchar(4096) NULL, expected varchar(1024) NULL",
    "statusengine_hostchecks.timeout: column is int(11) NULL DEFAULT 0, expected smallint(3) NULL DEFAULT 0",
    "statusengine_hostchecks.command: column is varchar(255) NULL, expected varchar(1024) NULL " +
    "(ALTER TABLE `statusengine_hostchecks` MODIFY `command` varchar(1024) NULL DEFAULT NULL)",
  ]);
});
