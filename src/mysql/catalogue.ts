/**
 * The table catalogue: the single source of truth for the 22 tables of the Statusengine 3 schema
 * (D2, docs/tables.md) and the three the worker adds for itself (docs/downtimes.md). Column lines
 * are spelt as the production schema dump spells them; everything else (service twins, insert and
 * update lists, character limits, integer ranges) is derived, never written by hand.
 *
 * @module
 */
import type { TableName } from "../events/mod.ts";

/**
 * How the worker writes a table (docs/tables.md#write-modes): `full_upsert` keeps the newer
 * snapshot, `history_upsert` the greater of two rows of one key, `insert` has no natural key,
 * `downtime` is written per event (not batched), `none` by no batched writer.
 */
export type WriteMode = "full_upsert" | "history_upsert" | "insert" | "downtime" | "none";

/** The write modes whose rows go through a batched multi-row INSERT. */
export const BATCHED_WRITE_MODES: readonly WriteMode[] = Object.freeze([
  "full_upsert",
  "history_upsert",
  "insert",
]);

/**
 * Largest allowed `mysql_batch_size`: the Go worker's ceiling, so existing configurations mean the
 * same here (docs/writers.md#statement-shape).
 */
export const MAX_BATCH_SIZE = 700;

/** Placeholders one server-side prepared statement may carry (a 16-bit count in the protocol). */
export const MAX_PLACEHOLDERS = 65_535;

/** What a column's SQL type means for the values bound to it. */
export type ColumnKind =
  /** `varchar(N)`: `maxChars` Unicode code points. */
  | { readonly kind: "string"; readonly maxChars: number }
  /** `flag` marks `tinyint(1)` (always written as 0/1). */
  | {
    readonly kind: "integer";
    readonly min: number;
    readonly max: number;
    readonly unsigned: boolean;
    readonly flag: boolean;
  }
  /** `double`: stored exactly as received (D6). */
  | { readonly kind: "double" };

/** One column of a table, in schema order. */
export interface Column {
  readonly name: string;
  /** 1-based. */
  readonly position: number;
  /** SQL type exactly as the schema dump writes it, e.g. `int(10) unsigned`. */
  readonly type: string;
  readonly nullable: boolean;
  /** SQL literal of the DEFAULT clause (`0`, `NULL`, `'3.0.0'`), or `null` for none. */
  readonly default: string | null;
  readonly autoIncrement: boolean;
  /**
   * `true` for the text columns where a JSON null stays SQL NULL (the table's `keepNull`); every
   * other text column stores `''` for null (docs/tables.md#null-or-empty).
   */
  readonly keepsNull: boolean;
  readonly sqlType: ColumnKind;
}

/** A secondary index (docs/tables.md#shared-table-properties). */
export interface Index {
  readonly name: string;
  readonly columns: readonly string[];
  /** A secondary UNIQUE index would make an upsert overwrite a row its key does not identify. */
  readonly unique: false;
}

/** One table of the catalogue with its derived column lists. */
export interface Table {
  readonly name: TableName;
  readonly columns: readonly Column[];
  /** Empty for the three tables without one. */
  readonly primaryKey: readonly string[];
  readonly indexes: readonly Index[];
  /** Time column of `PARTITION BY RANGE (<col> DIV 86400)` for the weekly-partitioned tables. */
  readonly partitionColumn: string | null;
  readonly writeMode: WriteMode;
  /** Columns an INSERT supplies, in schema order: every column except AUTO_INCREMENT. */
  readonly insertColumns: readonly string[];
  /** Columns `ON DUPLICATE KEY UPDATE` assigns: the key's time column and the non-key ones. */
  readonly updateColumns: readonly string[];
  /**
   * For the upserted tables the columns in the order that decides which of two rows of one key
   * stays (docs/writers.md#newest-snapshot); the first holds the decision while a row is updated.
   */
  readonly snapshotOrder: readonly string[];
  /** Character limit (code points) of every string column, by column name. */
  readonly charLimits: Readonly<Record<string, number>>;
  /** One of `BATCHED_WRITE_MODES`. */
  readonly batched: boolean;
}

/** `[name, type, NULL/NOT NULL]` or with a fourth element: default literal or `AUTO_INCREMENT`. */
type ColumnLine = readonly [name: string, type: string, null: "NOT NULL" | "NULL", extra?: string];

interface TableDefinition {
  readonly writeMode: WriteMode;
  /** The leading columns of `snapshotOrder`; the other non-key ones follow in schema order. */
  readonly snapshotOrder?: readonly string[];
  /** Text columns that keep SQL NULL for a JSON null, as the legacy worker writes them. */
  readonly keepNull?: readonly string[];
  readonly columns: readonly ColumnLine[];
  readonly primaryKey: readonly string[];
  readonly indexes?: readonly (readonly [name: string, columns: readonly string[]])[];
  readonly partitionColumn?: string;
}

/**
 * Not in the Statusengine schema: the index the core-restart sweep walks one node's status rows
 * along (docs/core-restart.md#bounded). The status writers never change `node_name` on an upsert.
 */
const NODE_NAME_INDEX = ["node_name", ["node_name"]] as const;

const HOSTNAME_KEY: ColumnLine = ["hostname", "varchar(255)", "NOT NULL"];
const SERVICE_DESCRIPTION_KEY: ColumnLine = ["service_description", "varchar(255)", "NOT NULL"];

type Twins = { readonly [T in "host" | "service"]: readonly ColumnLine[] };

/** A host table's columns, and its service twin's with `service_description` after `hostname`. */
function hostThenService(rest: readonly ColumnLine[]): Twins {
  return {
    host: [HOSTNAME_KEY, ...rest],
    service: [HOSTNAME_KEY, SERVICE_DESCRIPTION_KEY, ...rest],
  };
}

/**
 * The columns of a host history table keyed by `hostname` and an event time with its
 * microseconds, and of its service twin: there `service_description` leads the key, and
 * `hostname`, no longer a key column, is nullable and follows the two time columns.
 */
function hostAndServiceHistory(time: string, rest: readonly ColumnLine[]): Twins {
  const timeColumns: readonly ColumnLine[] = [
    [time, "bigint(20)", "NOT NULL"],
    [`${time}_usec`, "int(10) unsigned", "NOT NULL", "0"],
  ];
  return {
    host: [HOSTNAME_KEY, ...timeColumns, ...rest],
    service: [
      SERVICE_DESCRIPTION_KEY,
      ...timeColumns,
      ["hostname", "varchar(255)", "NULL", "NULL"],
      ...rest,
    ],
  };
}

const ACKNOWLEDGEMENT_COLUMNS = hostAndServiceHistory("entry_time", [
  ["state", "smallint(5) unsigned", "NULL", "0"],
  ["author_name", "varchar(255)", "NULL", "NULL"],
  ["comment_data", "varchar(1024)", "NULL", "NULL"],
  ["acknowledgement_type", "smallint(5) unsigned", "NULL", "0"],
  ["is_sticky", "tinyint(1)", "NULL", "0"],
  ["persistent_comment", "tinyint(1)", "NULL", "0"],
  ["notify_contacts", "tinyint(1)", "NULL", "0"],
]);

const CHECK_COLUMNS = hostAndServiceHistory("start_time", [
  ["state", "smallint(2)", "NULL", "0"],
  ["is_hardstate", "tinyint(1)", "NULL", "0"],
  ["end_time", "bigint(20)", "NOT NULL"],
  ["output", "varchar(1024)", "NULL", "NULL"],
  ["timeout", "smallint(3)", "NULL", "0"],
  ["early_timeout", "tinyint(1)", "NULL", "0"],
  ["latency", "double", "NULL", "0"],
  ["execution_time", "double", "NULL", "0"],
  ["perfdata", "varchar(2048)", "NULL", "NULL"],
  ["command", "varchar(1024)", "NULL", "NULL"],
  ["current_check_attempt", "smallint(3)", "NULL", "0"],
  ["max_check_attempts", "smallint(3)", "NULL", "0"],
  ["long_output", "varchar(8192)", "NULL", "NULL"],
]);

const NOTIFICATION_COLUMNS = hostAndServiceHistory("start_time", [
  ["contact_name", "varchar(1024)", "NULL", "NULL"],
  ["command_name", "varchar(1024)", "NULL", "NULL"],
  ["command_args", "varchar(1024)", "NULL", "NULL"],
  ["state", "smallint(2)", "NULL", "0"],
  ["end_time", "bigint(20)", "NOT NULL"],
  ["reason_type", "smallint(3)", "NULL", "0"],
  ["output", "varchar(1024)", "NULL", "NULL"],
  ["ack_author", "varchar(255)", "NULL", "NULL"],
  ["ack_data", "varchar(1024)", "NULL", "NULL"],
]);

const STATE_HISTORY_COLUMNS = hostAndServiceHistory("state_time", [
  ["state_change", "tinyint(1)", "NULL", "0"],
  ["state", "smallint(2)", "NULL", "0"],
  ["is_hardstate", "tinyint(1)", "NULL", "0"],
  ["current_check_attempt", "smallint(3)", "NULL", "0"],
  ["max_check_attempts", "smallint(3)", "NULL", "0"],
  ["last_state", "smallint(2)", "NULL", "0"],
  ["last_hard_state", "smallint(2)", "NULL", "0"],
  ["output", "varchar(1024)", "NULL", "NULL"],
  ["long_output", "varchar(8192)", "NULL", "NULL"],
]);

const NOTIFICATION_LOG_COLUMNS = hostThenService([
  ["start_time", "bigint(20)", "NOT NULL"],
  ["start_time_usec", "int(10) unsigned", "NOT NULL", "0"],
  ["end_time", "bigint(20)", "NOT NULL"],
  ["state", "smallint(6) unsigned", "NULL", "0"],
  ["reason_type", "smallint(6) unsigned", "NULL", "0"],
  ["is_escalated", "tinyint(1)", "NOT NULL", "0"],
  ["contacts_notified_count", "smallint(6) unsigned", "NOT NULL", "0"],
  ["output", "varchar(1024)", "NULL", "NULL"],
  ["ack_author", "varchar(1024)", "NULL", "NULL"],
  ["ack_data", "varchar(1024)", "NULL", "NULL"],
]);

const DOWNTIME_HISTORY_COLUMNS = hostThenService([
  ["internal_downtime_id", "int(10) unsigned", "NOT NULL"],
  ["scheduled_start_time", "bigint(20)", "NOT NULL"],
  ["node_name", "varchar(255)", "NOT NULL"],
  ["entry_time", "bigint(20)", "NOT NULL"],
  ["entry_time_usec", "int(10) unsigned", "NOT NULL", "0"],
  ["author_name", "varchar(255)", "NULL", "NULL"],
  ["comment_data", "varchar(1024)", "NULL", "NULL"],
  ["triggered_by_id", "int(10) unsigned", "NULL", "NULL"],
  ["is_fixed", "tinyint(1)", "NULL", "0"],
  ["duration", "int(10) unsigned", "NULL", "NULL"],
  ["scheduled_end_time", "bigint(20)", "NOT NULL"],
  ["was_started", "tinyint(1)", "NULL", "0"],
  ["actual_start_time", "bigint(20)", "NOT NULL"],
  ["actual_end_time", "bigint(20)", "NOT NULL"],
  ["was_cancelled", "tinyint(1)", "NULL", "0"],
]);

/**
 * The key columns of the worker's own downtime records (announcements, tombstones);
 * `service_description` is '' for a host downtime.
 */
const DOWNTIME_RECORD_KEY_COLUMNS: readonly ColumnLine[] = [
  HOSTNAME_KEY,
  SERVICE_DESCRIPTION_KEY,
  ["node_name", "varchar(255)", "NOT NULL"],
  ["scheduled_start_time", "bigint(20)", "NOT NULL"],
  ["internal_downtime_id", "int(10) unsigned", "NOT NULL"],
];

/** The key of a service downtime's rows, and of every downtime's record (the columns above). */
const SERVICE_DOWNTIME_KEY = DOWNTIME_RECORD_KEY_COLUMNS.map(([name]) => name);
const HOST_DOWNTIME_KEY = SERVICE_DOWNTIME_KEY.filter((name) => name !== "service_description");

/** The trailing columns of the downtime history tables' report indexes. */
const DOWNTIME_WINDOW = ["scheduled_start_time", "scheduled_end_time", "was_cancelled"] as const;

/**
 * A scheduled-downtime table's columns: the history table's without the ADD's envelope
 * microseconds and the end of the downtime (a scheduled row is deleted when it ends).
 */
function scheduledDowntimeColumns(historyColumns: readonly ColumnLine[]): readonly ColumnLine[] {
  const notScheduled = ["entry_time_usec", "actual_end_time", "was_cancelled"];
  return historyColumns.filter(([name]) => !notScheduled.includes(name));
}

/**
 * What leads the order of two status snapshots of one object (docs/writers.md#newest-snapshot):
 * the envelope `timestamp`, then times the core only moves forward; the other columns follow.
 */
const STATUS_SNAPSHOT_ORDER = [
  "status_update_time",
  "last_check",
  "last_state_change",
  "last_hard_state_change",
  "last_notification",
] as const;

/**
 * The status columns after the object's identity; host and service differ only in
 * `obsess_over_<object>` and in the `last_time_<state>` columns of the object's states.
 */
function statusColumns(object: "host" | "service", states: readonly string[]): ColumnLine[] {
  return [
    ["status_update_time", "bigint(20)", "NOT NULL"],
    ["output", "varchar(1024)", "NULL", "NULL"],
    ["long_output", "varchar(8192)", "NULL", "NULL"],
    ["perfdata", "varchar(2048)", "NULL", "NULL"],
    ["current_state", "smallint(5) unsigned", "NULL", "0"],
    ["current_check_attempt", "smallint(5) unsigned", "NULL", "0"],
    ["max_check_attempts", "smallint(5) unsigned", "NULL", "0"],
    ["last_check", "bigint(20)", "NOT NULL"],
    ["next_check", "bigint(20)", "NOT NULL"],
    ["is_passive_check", "tinyint(1)", "NULL", "0"],
    ["last_state_change", "bigint(20)", "NOT NULL"],
    ["last_hard_state_change", "bigint(20)", "NOT NULL"],
    ["last_hard_state", "smallint(5) unsigned", "NULL", "0"],
    ["is_hardstate", "tinyint(1)", "NULL", "0"],
    ["last_notification", "bigint(20)", "NOT NULL"],
    ["next_notification", "bigint(20)", "NOT NULL"],
    ["notifications_enabled", "tinyint(1)", "NULL", "0"],
    ["problem_has_been_acknowledged", "tinyint(1)", "NULL", "0"],
    ["acknowledgement_type", "smallint(5) unsigned", "NULL", "0"],
    ["passive_checks_enabled", "tinyint(1)", "NULL", "0"],
    ["active_checks_enabled", "tinyint(1)", "NULL", "0"],
    ["event_handler_enabled", "tinyint(1)", "NULL", "0"],
    ["flap_detection_enabled", "tinyint(1)", "NULL", "0"],
    ["is_flapping", "tinyint(1)", "NULL", "0"],
    ["latency", "double", "NULL", "0"],
    ["execution_time", "double", "NULL", "0"],
    ["scheduled_downtime_depth", "smallint(5) unsigned", "NULL", "0"],
    ["process_performance_data", "tinyint(1)", "NULL", "0"],
    [`obsess_over_${object}`, "tinyint(1)", "NULL", "0"],
    ["normal_check_interval", "int(10) unsigned", "NULL", "0"],
    ["retry_check_interval", "int(10) unsigned", "NULL", "0"],
    ["check_timeperiod", "varchar(255)", "NULL", "NULL"],
    ["node_name", "varchar(255)", "NULL", "NULL"],
    ...states.map((state): ColumnLine => [`last_time_${state}`, "bigint(20)", "NOT NULL"]),
    ["current_notification_number", "int(10) unsigned", "NULL", "0"],
    ["percent_state_change", "double", "NULL", "0"],
    ["event_handler", "varchar(255)", "NULL", "NULL"],
    ["check_command", "varchar(255)", "NULL", "NULL"],
  ];
}

// The tables in alphabetical order, as docs/tables.md#table-definitions lists them.
const DEFINITIONS = {
  statusengine_dbversion: {
    writeMode: "none",
    columns: [
      ["id", "int(11)", "NOT NULL"],
      ["dbversion", "varchar(255)", "NULL", "'3.0.0'"],
    ],
    primaryKey: ["id"],
  },
  // Not a Statusengine table: the newest envelope `timestamp` of an ADD, LOAD or START of each
  // downtime (docs/core-restart.md#scheduled-downtimes). The index lets the sweep prune one
  // node's old records without reading the others'.
  statusengine_downtime_announcements: {
    writeMode: "downtime",
    columns: [...DOWNTIME_RECORD_KEY_COLUMNS, ["announced_at", "bigint(20)", "NOT NULL"]],
    primaryKey: SERVICE_DOWNTIME_KEY,
    indexes: [["node_announced", ["node_name", "announced_at"]]],
  },
  // Not a Statusengine table: downtimes that ended (STOP, DELETE), so that a job delivered late
  // or twice cannot re-create their rows (docs/downtimes.md#the-tombstone-table). `cleanup`
  // prunes it by `end_time`.
  statusengine_downtime_tombstones: {
    writeMode: "downtime",
    columns: [
      ...DOWNTIME_RECORD_KEY_COLUMNS,
      ["history_removed", "tinyint(1)", "NOT NULL", "0"],
      ["end_time", "bigint(20)", "NOT NULL"],
    ],
    primaryKey: SERVICE_DOWNTIME_KEY,
    indexes: [["end_time", ["end_time"]]],
  },
  statusengine_host_acknowledgements: {
    writeMode: "history_upsert",
    columns: ACKNOWLEDGEMENT_COLUMNS.host,
    primaryKey: ["hostname", "entry_time", "entry_time_usec"],
    indexes: [["hostname", ["hostname"]], ["entry_time", ["entry_time"]]],
  },
  statusengine_host_downtimehistory: {
    writeMode: "downtime",
    columns: DOWNTIME_HISTORY_COLUMNS.host,
    primaryKey: HOST_DOWNTIME_KEY,
    indexes: [
      ["reports", ["hostname", "entry_time", "entry_time_usec", ...DOWNTIME_WINDOW]],
      ["list", ["hostname", ...DOWNTIME_WINDOW]],
    ],
  },
  statusengine_host_notifications: {
    writeMode: "history_upsert",
    keepNull: ["command_args", "ack_author", "ack_data"],
    columns: NOTIFICATION_COLUMNS.host,
    primaryKey: ["hostname", "start_time", "start_time_usec"],
    indexes: [["hostname", ["hostname"]], ["start_time", ["start_time"]]],
    partitionColumn: "start_time",
  },
  statusengine_host_notifications_log: {
    writeMode: "history_upsert",
    keepNull: ["ack_author", "ack_data"],
    columns: NOTIFICATION_LOG_COLUMNS.host,
    primaryKey: ["hostname", "start_time", "start_time_usec"],
    indexes: [
      ["hostname", ["hostname"]],
      ["filter", ["start_time", "end_time", "reason_type", "state"]],
    ],
    partitionColumn: "start_time",
  },
  statusengine_host_scheduleddowntimes: {
    writeMode: "downtime",
    columns: scheduledDowntimeColumns(DOWNTIME_HISTORY_COLUMNS.host),
    primaryKey: HOST_DOWNTIME_KEY,
  },
  statusengine_host_statehistory: {
    writeMode: "history_upsert",
    columns: STATE_HISTORY_COLUMNS.host,
    primaryKey: ["hostname", "state_time", "state_time_usec"],
    indexes: [["hostname_time", ["hostname", "state_time"]]],
    partitionColumn: "state_time",
  },
  statusengine_hostchecks: {
    writeMode: "history_upsert",
    columns: CHECK_COLUMNS.host,
    primaryKey: ["hostname", "start_time", "start_time_usec"],
    indexes: [["hostname", ["hostname", "start_time"]], ["times", ["start_time", "end_time"]]],
    partitionColumn: "start_time",
  },
  statusengine_hoststatus: {
    writeMode: "full_upsert",
    snapshotOrder: STATUS_SNAPSHOT_ORDER,
    keepNull: ["event_handler"],
    columns: [HOSTNAME_KEY, ...statusColumns("host", ["up", "down", "unreachable"])],
    primaryKey: ["hostname"],
    indexes: [
      ["current_state_node", ["current_state", "node_name"]],
      ["issues", ["problem_has_been_acknowledged", "scheduled_downtime_depth", "current_state"]],
      NODE_NAME_INDEX,
    ],
  },
  // Plain INSERT: no natural key (docs/tables.md#write-modes). `id` is AUTO_INCREMENT and therefore
  // no insert column, so no two inserted rows can share a primary key.
  statusengine_logentries: {
    writeMode: "insert",
    columns: [
      ["id", "bigint(20) unsigned", "NOT NULL", "AUTO_INCREMENT"],
      ["entry_time", "bigint(20)", "NOT NULL"],
      ["logentry_type", "int(11)", "NULL", "0"],
      ["logentry_data", "varchar(2048)", "NULL", "NULL"],
      ["node_name", "varchar(255)", "NULL", "NULL"],
    ],
    primaryKey: ["id", "entry_time"],
    indexes: [["logentries_se", ["entry_time", "node_name"]]],
    partitionColumn: "entry_time",
  },
  // Written once at start-up by its own upsert (D11).
  statusengine_nodes: {
    writeMode: "none",
    columns: [
      ["node_name", "varchar(255)", "NOT NULL"],
      ["node_version", "varchar(255)", "NULL", "NULL"],
      ["node_start_time", "bigint(20)", "NOT NULL"],
    ],
    primaryKey: ["node_name"],
  },
  // Plain INSERT: no key nor unique index, so nothing can collide (docs/tables.md#write-modes).
  statusengine_perfdata: {
    writeMode: "insert",
    keepNull: ["unit"],
    columns: [
      ["hostname", "varchar(255)", "NULL", "NULL"],
      ["service_description", "varchar(255)", "NULL", "NULL"],
      ["label", "varchar(255)", "NULL", "NULL"],
      ["timestamp", "bigint(20)", "NOT NULL"],
      ["timestamp_unix", "bigint(20)", "NOT NULL"],
      ["value", "double", "NULL", "NULL"],
      ["unit", "varchar(10)", "NULL", "NULL"],
    ],
    primaryKey: [],
    indexes: [
      ["metric", ["hostname", "service_description", "label", "timestamp_unix"]],
      ["timestamp_unix", ["timestamp_unix"]],
    ],
  },
  statusengine_service_acknowledgements: {
    writeMode: "history_upsert",
    columns: ACKNOWLEDGEMENT_COLUMNS.service,
    primaryKey: ["service_description", "entry_time", "entry_time_usec"],
    indexes: [
      ["servicename", ["hostname", "service_description"]],
      ["entry_time", ["entry_time"]],
      ["servicedesc_time", ["service_description", "entry_time"]],
    ],
  },
  statusengine_service_downtimehistory: {
    writeMode: "downtime",
    columns: DOWNTIME_HISTORY_COLUMNS.service,
    primaryKey: SERVICE_DOWNTIME_KEY,
    indexes: [
      ["reports", ["service_description", "entry_time", "entry_time_usec", ...DOWNTIME_WINDOW]],
      ["report", ["service_description", ...DOWNTIME_WINDOW]],
    ],
  },
  statusengine_service_notifications: {
    writeMode: "history_upsert",
    keepNull: ["command_args", "ack_author", "ack_data"],
    columns: NOTIFICATION_COLUMNS.service,
    primaryKey: ["service_description", "start_time", "start_time_usec"],
    indexes: [["start_time", ["start_time"]], ["servicename", ["hostname", "service_description"]]],
    partitionColumn: "start_time",
  },
  // Unlike the other service history tables this key starts with `hostname`
  // (docs/tables.md#write-modes).
  statusengine_service_notifications_log: {
    writeMode: "history_upsert",
    keepNull: ["ack_author", "ack_data"],
    columns: NOTIFICATION_LOG_COLUMNS.service,
    primaryKey: ["hostname", "service_description", "start_time", "start_time_usec"],
    indexes: [
      ["servicename", ["hostname", "service_description"]],
      ["filter", ["start_time", "end_time", "reason_type", "state"]],
    ],
    partitionColumn: "start_time",
  },
  statusengine_service_scheduleddowntimes: {
    writeMode: "downtime",
    columns: scheduledDowntimeColumns(DOWNTIME_HISTORY_COLUMNS.service),
    primaryKey: SERVICE_DOWNTIME_KEY,
  },
  statusengine_service_statehistory: {
    writeMode: "history_upsert",
    columns: STATE_HISTORY_COLUMNS.service,
    primaryKey: ["service_description", "state_time", "state_time_usec"],
    indexes: [
      ["host_servicename_time", ["hostname", "service_description", "state_time"]],
      ["servicename_time", ["service_description", "state_time"]],
    ],
    partitionColumn: "state_time",
  },
  statusengine_servicechecks: {
    writeMode: "history_upsert",
    columns: CHECK_COLUMNS.service,
    primaryKey: ["service_description", "start_time", "start_time_usec"],
    indexes: [["servicename", ["hostname", "service_description", "start_time"]]],
    partitionColumn: "start_time",
  },
  statusengine_servicestatus: {
    writeMode: "full_upsert",
    snapshotOrder: STATUS_SNAPSHOT_ORDER,
    keepNull: ["event_handler"],
    columns: [
      HOSTNAME_KEY,
      SERVICE_DESCRIPTION_KEY,
      ...statusColumns("service", ["ok", "warning", "critical", "unknown"]),
    ],
    primaryKey: ["hostname", "service_description"],
    indexes: [
      ["service_description", ["service_description"]],
      ["current_state_node", ["current_state", "node_name"]],
      ["issues", ["problem_has_been_acknowledged", "scheduled_downtime_depth", "current_state"]],
      NODE_NAME_INDEX,
    ],
  },
  statusengine_tasks: {
    writeMode: "none",
    columns: [
      ["uuid", "varchar(255)", "NULL", "NULL"],
      ["node_name", "varchar(255)", "NULL", "NULL"],
      ["entry_time", "bigint(20)", "NOT NULL"],
      ["type", "varchar(255)", "NULL", "NULL"],
      ["payload", "varchar(8192)", "NULL", "NULL"],
    ],
    primaryKey: [],
    indexes: [["uuid", ["uuid"]], ["node_name", ["node_name"]]],
  },
  statusengine_users: {
    writeMode: "none",
    columns: [
      ["username", "varchar(255)", "NULL", "NULL"],
      ["password", "varchar(255)", "NULL", "NULL"],
    ],
    primaryKey: [],
    indexes: [["username", ["username", "password"]]],
  },
  // Not a Statusengine table: the worker's leases, one row each (src/mysql/lease.ts,
  // docs/downtimes.md#galera).
  statusengine_worker_leases: {
    writeMode: "none",
    columns: [
      ["name", "varchar(255)", "NOT NULL"],
      ["holder", "varchar(255)", "NOT NULL", "''"],
      ["renewals", "bigint(20) unsigned", "NOT NULL", "0"],
      ["renewed_at", "bigint(20)", "NOT NULL", "0"],
    ],
    primaryKey: ["name"],
  },
} as const satisfies Record<TableName, TableDefinition>;

export type { TableName };

const INTEGER_RANGES: Readonly<Record<string, readonly [number, number, number]>> = {
  // [signed min, signed max, unsigned max]. The bigint bounds are the doubles nearest to the
  // true limits on the inside (2^63 − 1 and 2^64 − 1 are not representable as a number;
  // rounding them up would produce an out-of-range literal).
  tinyint: [-128, 127, 255],
  smallint: [-32_768, 32_767, 65_535],
  mediumint: [-8_388_608, 8_388_607, 16_777_215],
  int: [-2_147_483_648, 2_147_483_647, 4_294_967_295],
  bigint: [-(2 ** 63), 2 ** 63 - 1024, 2 ** 64 - 2048],
};

/**
 * What a schema SQL type (`smallint(5) unsigned`) means for binding values.
 *
 * @throws {RangeError} For a type the catalogue does not use (a programming error).
 */
export function parseSqlType(type: string): ColumnKind {
  const varchar = /^varchar\((\d+)\)$/.exec(type);
  if (varchar?.[1] !== undefined) return { kind: "string", maxChars: Number(varchar[1]) };
  if (type === "double") return { kind: "double" };
  const integer = /^(tinyint|smallint|mediumint|int|bigint)(?:\((\d+)\))?( unsigned)?$/.exec(type);
  const base = integer?.[1];
  const range = base === undefined ? undefined : INTEGER_RANGES[base];
  if (integer !== null && range !== undefined) {
    const unsigned = integer[3] !== undefined;
    return {
      kind: "integer",
      min: unsigned ? 0 : range[0],
      max: unsigned ? range[2] : range[1],
      unsigned,
      flag: base === "tinyint" && integer[2] === "1",
    };
  }
  throw new RangeError(`Cannot parse SQL type "${type}": not used by the Statusengine schema`);
}

function defineTable(table: TableName, def: TableDefinition): Table {
  // The invariants of the entries (noop and partition columns in the key, snapshot orders, the
  // NULL keepers) are pinned by src/mysql/catalogue_test.ts; only typos are caught here.
  const names = new Set(def.columns.map(([name]) => name));
  const indexes = def.indexes ?? [];
  for (const c of [...(def.keepNull ?? []), ...def.primaryKey, ...indexes.flatMap(([, c]) => c)]) {
    if (!names.has(c)) throw new Error(`Invalid catalogue entry "${table}": no column "${c}"`);
  }
  const keepNull = new Set(def.keepNull ?? []);
  const columns: Column[] = def.columns.map(([name, type, nullability, extra], i) => {
    const autoIncrement = extra === "AUTO_INCREMENT";
    return Object.freeze({
      name,
      position: i + 1,
      type,
      nullable: nullability === "NULL",
      default: autoIncrement || extra === undefined ? null : extra,
      autoIncrement,
      keepsNull: keepNull.has(name),
      sqlType: parseSqlType(type),
    });
  });
  const insertColumns = columns.filter((c) => !c.autoIncrement).map((c) => c.name);
  const key = new Set<string>(def.primaryKey);
  const nonKeyColumns = insertColumns.filter((c) => !key.has(c));
  // Two distinct events can share a history key (docs/writers.md#upsert-or-insert): the greater
  // row stays, compared from the key's time column (before its microseconds), equal in both.
  const history = def.writeMode === "history_upsert";
  const leading = history ? def.primaryKey.slice(-2, -1) : def.snapshotOrder ?? [];
  const snapshotOrder = leading.length === 0
    ? []
    : [...leading, ...nonKeyColumns.filter((c) => !leading.includes(c))];
  const updatesAll = def.writeMode === "full_upsert" || def.writeMode === "downtime";
  const updateColumns = history ? snapshotOrder : updatesAll ? nonKeyColumns : [];
  const charLimits: Record<string, number> = {};
  for (const c of columns) if (c.sqlType.kind === "string") charLimits[c.name] = c.sqlType.maxChars;
  return Object.freeze({
    name: table,
    columns: Object.freeze(columns),
    primaryKey: Object.freeze([...def.primaryKey]),
    indexes: Object.freeze(
      indexes.map(([name, cols]) =>
        Object.freeze({ name, columns: Object.freeze([...cols]), unique: false as const })
      ),
    ),
    partitionColumn: def.partitionColumn ?? null,
    writeMode: def.writeMode,
    insertColumns: Object.freeze(insertColumns),
    updateColumns: Object.freeze([...updateColumns]),
    snapshotOrder: Object.freeze(snapshotOrder),
    charLimits: Object.freeze(charLimits),
    batched: BATCHED_WRITE_MODES.includes(def.writeMode),
  });
}

/** All 25 tables by name, e.g. `TABLES.statusengine_hostchecks`. */
export const TABLES = Object.freeze(
  Object.fromEntries(
    Object.entries(DEFINITIONS).map(([n, d]) => [n, defineTable(n as TableName, d)]),
  ),
) as { readonly [N in TableName]: Table };

/** The 25 table names in alphabetical order. */
export const TABLE_NAMES = Object.freeze(Object.keys(DEFINITIONS)) as readonly TableName[];

/** The 25 tables in alphabetical order. */
export const ALL_TABLES: readonly Table[] = Object.freeze(TABLE_NAMES.map((n) => TABLES[n]));

export function isTableName(name: string): name is TableName {
  return Object.hasOwn(TABLES, name);
}
