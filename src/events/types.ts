/**
 * Types at the boundary between the event decoders (this directory) and the writers
 * (`src/mysql/`): plain data, so the writers re-derive no mapping rule from the payload.
 *
 * @module
 */
import type { BatchedTableName } from "./table_names.ts";

/** A value bound to one SQL placeholder. */
export type SqlValue = string | number | null;

/**
 * Column name → raw value: strings are NOT truncated and numbers NOT clamped; the writer applies
 * D6 and counts what it adjusts. A row to insert lists its columns in schema order
 * (src/mysql/catalogue.ts); the `key` of a downtime UPDATE/DELETE in primary-key order.
 */
export type Row = Readonly<Record<string, SqlValue>>;

/** A row together with the table (with a bulk writer) it belongs to. */
export interface TableRow {
  readonly table: BatchedTableName;
  readonly row: Row;
}

/** The two downtime history tables (docs/tables.md#downtime-tables). */
export type DowntimeHistoryTable = `statusengine_${"host" | "service"}_downtimehistory`;

/** The two tables mirroring the downtimes the core currently knows. */
export type ScheduledDowntimeTable = `statusengine_${"host" | "service"}_scheduleddowntimes`;

/** The downtime events that produce statements (unknown types produce none). */
export type DowntimeEventName = "ADD" | "LOAD" | "START" | "STOP" | "DELETE";

/**
 * How one column of an existing row takes the value an event brings. Each rule gives the same
 * result whatever order the events come in and however often one repeats, which makes the
 * downtime tables independent of delivery order (docs/downtimes.md).
 *
 * - `assign`: the event's value (only for values every event of a downtime agrees on).
 * - `max`: the greater of both.
 * - `earliest`: the smaller of both, where 0 means "not set yet" on either side.
 * - `follows`: the value of the event whose `of` column is greater; on a tie the greater value.
 *   Must come before the merge of `of` in the list.
 */
export type DowntimeMerge =
  | { readonly column: string; readonly rule: "assign" | "max" | "earliest" }
  | { readonly column: string; readonly rule: "follows"; readonly of: string };

/** The tombstone that suppresses an upsert (docs/downtimes.md#the-tombstone-table). */
export interface DowntimeGuard {
  readonly table: "statusengine_downtime_tombstones";
  /** Equality on exactly the tombstone's primary-key columns, in primary-key order. */
  readonly key: Row;
  /** Suppress only when the tombstone says the history row was removed (DELETE before the window). */
  readonly historyRemoved: boolean;
}

// Every statement carries the `event` that produced it, for logs and metrics.

/**
 * `INSERT INTO table (<keys of row>) SELECT … WHERE NOT EXISTS (<guard>) ON DUPLICATE KEY
 * UPDATE <merge>`: create the row from the event's complete downtime definition, or merge the
 * event into the row that exists, unless the tombstone says the row must not exist.
 */
export interface DowntimeUpsert {
  readonly kind: "upsert";
  readonly event: DowntimeEventName;
  /** A history table, or the announcement record (docs/downtimes.md#the-announcement-table). */
  readonly table: DowntimeHistoryTable | "statusengine_downtime_announcements";
  /** Every column to insert, in schema order, primary-key columns included. */
  readonly row: Row;
  /** How the existing row takes this event, in assignment order; empty = leave it as it is. */
  readonly merge: readonly DowntimeMerge[];
  readonly guard: DowntimeGuard;
  /**
   * True when writing nothing means the event is lost for good (its downtime was deleted before
   * its window began), reported in `statusengine_queue_downtime_updates_unmatched_total`.
   */
  readonly detectUnmatched: boolean;
}

/**
 * `INSERT INTO <tombstones> … ON DUPLICATE KEY UPDATE`: record that the downtime ended (STOP,
 * DELETE) and whether its history row must go (DELETE before the window began).
 */
export interface DowntimeTombstone {
  readonly kind: "tombstone";
  readonly event: "STOP" | "DELETE";
  readonly table: "statusengine_downtime_tombstones";
  /** Every column, in schema order. */
  readonly row: Row;
}

/**
 * `DELETE FROM table WHERE <full primary key>`. Deleting zero rows is normal and never reported
 * (docs/tables.md#unmatched-deletes).
 */
export interface DowntimeDelete {
  readonly kind: "delete";
  readonly event: "STOP" | "DELETE";
  readonly table: DowntimeHistoryTable | ScheduledDowntimeTable;
  /** Equality on exactly the primary-key columns, in primary-key order. */
  readonly key: Row;
}

/**
 * `INSERT INTO <scheduled> (…) SELECT <the same columns> FROM <history> WHERE <key> AND NOT
 * EXISTS (<guard>) ON DUPLICATE KEY UPDATE <every non-key column>`: the scheduled row as a copy
 * of the history row the statement before merged this event into (docs/downtimes.md#the-rule).
 */
export interface DowntimeCopy {
  readonly kind: "copy";
  readonly event: "ADD" | "LOAD" | "START";
  readonly table: ScheduledDowntimeTable;
  /** The history table of the same object kind. */
  readonly from: DowntimeHistoryTable;
  /** Equality on exactly the primary-key columns, in primary-key order (the same in both). */
  readonly key: Row;
  readonly guard: DowntimeGuard;
}

/** One statement of the downtime lifecycle, executed in list order. */
export type DowntimeStatement = DowntimeUpsert | DowntimeCopy | DowntimeTombstone | DowntimeDelete;

/**
 * Every reason a payload could not be decoded, for pre-creating metric series: the `reason` label
 * of `statusengine_dead_letters_total` (D7, D10).
 *
 * - `not_json`: not valid JSON text (after UTF-8 repair).
 * - `not_object`: valid JSON whose top level is not an object.
 * - `bad_shape`: neither a bulk job nor a single event of the queue.
 * - `bad_type`: a field holds a JSON type that the coercion rules do not accept.
 * - `missing_field`: a required field (row identity, routing or filter input) is absent or null.
 * - `unknown_queue`: the queue name is not one of the twelve consumed queues.
 */
export const INVALID_REASONS = Object.freeze(
  ["not_json", "not_object", "bad_shape", "bad_type", "missing_field", "unknown_queue"] as const,
);
/** Why a payload could not be decoded: one of {@linkcode INVALID_REASONS}. */
export type InvalidReason = (typeof INVALID_REASONS)[number];

/** One event as it arrived (a bulk job's `messages[i]` or a single-form document), for `/ws`. */
export type StreamEvent = Readonly<Record<string, unknown>>;

/**
 * The outcome of decoding one job; expected outcomes are values, never exceptions. `events`
 * (the events the queue's stream rule keeps) is set only with `collectEvents`.
 */
export type DecodedJob =
  | {
    /** Rows for the bulk writers, in event order (several tables may be mixed). */
    readonly kind: "rows";
    readonly rows: TableRow[];
    /** Status events dropped by the stale filter (docs/payloads.md#stale-status). */
    readonly staleDiscarded: number;
    readonly events?: StreamEvent[];
  }
  | {
    /** In the order they must run (docs/tables.md#downtime-statements); events include LOAD. */
    readonly kind: "downtimes";
    readonly statements: DowntimeStatement[];
    readonly events?: StreamEvent[];
  }
  | {
    /**
     * A monitoring-core restart: the pipeline records it and later sweeps this node's status
     * rows not refreshed since it (docs/core-restart.md).
     */
    readonly kind: "core_restart";
    readonly cutoff: number;
    /**
     * `message`: the message's positive `timestamp`. `clock`: it had none and `cutoff` is the
     * decode clock, which the pipeline replaces (docs/core-restart.md#the-rules).
     */
    readonly cutoffSource: "message" | "clock";
    readonly events?: StreamEvent[];
  }
  | {
    /** Nothing to do, by design (e.g. a core-restart message with another `object_type`). */
    readonly kind: "ignored";
    readonly reason: string;
  }
  | {
    /** Undecodable: goes to the dead-letter file (D7). `message` names the offending field. */
    readonly kind: "invalid";
    readonly reason: InvalidReason;
    readonly message: string;
  };

/**
 * How labels are written to MySQL and Graphite (`--perfdata-label-quotes`,
 * docs/perfdata.md#labels): with the plugin's quotes (`keep`) or without (`strip`).
 */
export type PerfdataLabelQuotes = "keep" | "strip";

/** Settings the decoders need from the worker's configuration and clock. */
export interface DecodeContext {
  /** Written into `node_name` columns (docs/tables.md#configuration-in-data). */
  readonly nodeName: string;
  /** Worker clock, epoch seconds (floored), for the stale filter and the core-restart cutoff. */
  readonly nowSeconds: number;
  /** `--status-max-age`; 0 (or less) disables the stale filter (docs/payloads.md#stale-status). */
  readonly statusMaxAgeSeconds: number;
  /**
   * Status events older than this (epoch seconds) are discarded as stale too: the cutoff of the
   * last core-restart sweep (docs/core-restart.md#after-the-sweep); 0 or absent: none.
   */
  readonly statusSweptBeforeSeconds?: number | undefined;
  /** `--perfdata-label-quotes` (docs/perfdata.md#labels); default `keep`. */
  readonly perfdataLabelQuotes?: PerfdataLabelQuotes | undefined;
  /**
   * Also return the events the queue's stream rule keeps, for the `/ws` stream. Set only while a
   * client is connected, so a worker nobody watches pays nothing for it (docs/operations.md#ws).
   */
  readonly collectEvents?: boolean;
}
