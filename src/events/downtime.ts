/**
 * The downtime lifecycle as a pure function: one downtime event in, the ordered statements for
 * the downtime tables, announcements and tombstones out, the same rows whatever order the events
 * arrive in (docs/downtimes.md#the-rule). `src/mysql/` only renders the statements.
 *
 * @module
 */

import type {
  DowntimeEventName,
  DowntimeGuard,
  DowntimeHistoryTable,
  DowntimeMerge,
  DowntimeStatement,
  Row,
  ScheduledDowntimeTable,
} from "./types.ts";

// Envelope `type`s, the host `downtime_type` (every other value is a service downtime) and the
// `attr` of a STOP cancelled by a user: docs/tables.md#downtime-events.
export const DOWNTIME_ADD = 1100;
export const DOWNTIME_DELETE = 1101;
/** Restored from retention at start-up. */
export const DOWNTIME_LOAD = 1102;
export const DOWNTIME_START = 1103;
export const DOWNTIME_STOP = 1104;
export const DOWNTIME_TYPE_HOST = 2;
const DOWNTIME_STOP_CANCELLED = 2;

/**
 * One downtime event with its fields already coerced: the envelope's `type`, `attr` (STOP only),
 * `timestamp`, `timestamp_usec` (ADD only), and the `downtime` payload's fields.
 */
export interface DowntimeEvent {
  readonly type: number;
  readonly attr: number;
  readonly timestamp: number;
  readonly timestampUsec: number;
  readonly downtimeType: number;
  readonly hostName: string;
  /** Ignored for host downtimes. */
  readonly serviceDescription: string;
  readonly downtimeId: number;
  /** The scheduled window start, part of the primary key. */
  readonly startTime: number;
  readonly endTime: number;
  readonly entryTime: number;
  readonly authorName: string;
  readonly commentData: string;
  readonly triggeredBy: number;
  readonly fixed: number;
  readonly duration: number;
}

/** The envelope types that write rows, by name; any other type writes nothing. */
export const DOWNTIME_EVENT_NAMES: Readonly<Record<number, DowntimeEventName>> = Object.freeze({
  [DOWNTIME_ADD]: "ADD",
  [DOWNTIME_DELETE]: "DELETE",
  [DOWNTIME_LOAD]: "LOAD",
  [DOWNTIME_START]: "START",
  [DOWNTIME_STOP]: "STOP",
});

const TOMBSTONES = "statusengine_downtime_tombstones";
const ANNOUNCEMENTS = "statusengine_downtime_announcements";

// Merge lists are built once, never per event (docs/downtimes.md#the-rule has the rules).
function merges(...list: DowntimeMerge[]): readonly DowntimeMerge[] {
  return Object.freeze(list.map((m) => Object.freeze(m)));
}
const assign = (column: string): DowntimeMerge => ({ column, rule: "assign" });
// Only an ADD overwrites the definition: the other events only fill a row that does not exist
// yet, so should the definitions differ, the ADD's wins whatever the order.
const HISTORY_ADD = merges(
  ...[
    "entry_time",
    "entry_time_usec",
    "author_name",
    "comment_data",
    "triggered_by_id",
    "is_fixed",
    "duration",
    "scheduled_end_time",
  ].map(assign),
);
// Started once is started for good; the first START's time is the real start (a core restart
// re-announces a running downtime with a START stamped with the restart time), and the first
// is the earliest.
const START_MERGE = merges(
  { column: "was_started", rule: "max" },
  { column: "actual_start_time", rule: "earliest" },
);
// The last STOP decides the end and whether it was cancelled; the last is the latest.
// was_cancelled is merged first, against the end time the row had before this event.
const STOP_MERGE = merges(
  { column: "was_cancelled", rule: "follows", of: "actual_end_time" },
  { column: "actual_end_time", rule: "max" },
);
const NOTHING = merges();
// The newest announcement counts: the core had the downtime at that time.
const ANNOUNCE_MERGE = merges({ column: "announced_at", rule: "max" });

/** What one event contributes to the dynamic columns of its rows. */
interface Dynamics {
  readonly wasStarted: number;
  readonly actualStart: number;
  readonly actualEnd: number;
  readonly wasCancelled: number;
}
const NO_DYNAMICS: Dynamics = { wasStarted: 0, actualStart: 0, actualEnd: 0, wasCancelled: 0 };

function tombstoneKey(ev: DowntimeEvent, isHost: boolean, nodeName: string): Row {
  // Primary-key order of statusengine_downtime_tombstones; '' stands for "host downtime".
  return {
    hostname: ev.hostName,
    service_description: isHost ? "" : ev.serviceDescription,
    node_name: nodeName,
    scheduled_start_time: ev.startTime,
    internal_downtime_id: ev.downtimeId,
  };
}

function historyRow(ev: DowntimeEvent, isHost: boolean, nodeName: string, d: Dynamics): Row {
  // Schema column order of the downtime history tables.
  const identity: Row = isHost
    ? { hostname: ev.hostName }
    : { hostname: ev.hostName, service_description: ev.serviceDescription };
  return {
    ...identity,
    internal_downtime_id: ev.downtimeId,
    scheduled_start_time: ev.startTime,
    node_name: nodeName,
    entry_time: ev.entryTime,
    entry_time_usec: ev.type === DOWNTIME_ADD ? ev.timestampUsec : 0,
    author_name: ev.authorName,
    comment_data: ev.commentData,
    triggered_by_id: ev.triggeredBy,
    is_fixed: ev.fixed,
    duration: ev.duration,
    scheduled_end_time: ev.endTime,
    was_started: d.wasStarted,
    actual_start_time: d.actualStart,
    actual_end_time: d.actualEnd,
    was_cancelled: d.wasCancelled,
  };
}

/**
 * The statements one downtime event requires, in execution order
 * (docs/downtimes.md#statements-per-event). Each upsert is suppressed by the downtime's tombstone
 * where one says its row must not exist. `nodeName` is part of every downtime primary key; a bulk
 * job passes its list as `out`, so it fills one list without intermediate arrays.
 *
 * @example A cancelled STOP of a host downtime
 * ```ts
 * import assert from "node:assert/strict";
 * import { downtimeStatements } from "./downtime.ts";
 * const [history, tombstone, del] = downtimeStatements({
 *   type: 1104, attr: 2, timestamp: 1000, timestampUsec: 0, downtimeType: 2,
 *   hostName: "web01", serviceDescription: "", downtimeId: 7, startTime: 900, endTime: 2000,
 *   entryTime: 800, authorName: "me", commentData: "", triggeredBy: 0, fixed: 1, duration: 0,
 * }, "N");
 * assert.ok(history?.kind === "upsert" && history.row.was_cancelled === 1);
 * assert.ok(tombstone?.kind === "tombstone" && tombstone.row.end_time === 1000);
 * assert.ok(del?.kind === "delete" && del.table === "statusengine_host_scheduleddowntimes");
 * ```
 */
export function downtimeStatements(
  ev: DowntimeEvent,
  nodeName: string,
  out: DowntimeStatement[] = [],
): DowntimeStatement[] {
  const name = DOWNTIME_EVENT_NAMES[ev.type];
  if (name === undefined) return out;
  // Routing is on downtime_type only, never on service_description
  // (docs/tables.md#downtime-events).
  const isHost = ev.downtimeType === DOWNTIME_TYPE_HOST;
  const kind = isHost ? "host" : "service";
  const historyTable: DowntimeHistoryTable = `statusengine_${kind}_downtimehistory`;
  const scheduledTable: ScheduledDowntimeTable = `statusengine_${kind}_scheduleddowntimes`;
  const tKey = tombstoneKey(ev, isHost, nodeName);
  // The four downtime tables' primary key, in their order: the tombstone's, without
  // `service_description` for a host (docs/tables.md#statusengine_host_downtimehistory).
  const { service_description: _, ...hostKey } = tKey;
  const rowKey = isHost ? hostKey : tKey;
  // A history row exists unless a DELETE before the window removed it; a scheduled row exists
  // only until the downtime ended (STOP) or was removed (DELETE).
  const historyGuard: DowntimeGuard = { table: TOMBSTONES, key: tKey, historyRemoved: true };
  const scheduledGuard: DowntimeGuard = { table: TOMBSTONES, key: tKey, historyRemoved: false };
  const history = (d: Dynamics, merge: readonly DowntimeMerge[], lossIsReported: boolean) =>
    out.push({
      kind: "upsert",
      event: name,
      table: historyTable,
      row: historyRow(ev, isHost, nodeName, d),
      merge,
      guard: historyGuard,
      detectUnmatched: lossIsReported,
    });
  const end = (event: "STOP" | "DELETE", historyRemoved: boolean) => {
    // The tombstone first, then the delete: an upsert that runs in between (another
    // connection, a redelivery) already sees the tombstone and writes nothing.
    out.push({
      kind: "tombstone",
      event,
      table: TOMBSTONES,
      row: { ...tKey, history_removed: historyRemoved ? 1 : 0, end_time: ev.timestamp },
    });
    out.push({ kind: "delete", event, table: scheduledTable, key: rowKey });
  };

  if (name === "ADD" || name === "LOAD" || name === "START") {
    // A LOAD is restored from the core's retention file: the downtime exists, whether or not its
    // ADD (from before the restart) reached the database.
    const started = name === "START";
    const d = started ? { ...NO_DYNAMICS, wasStarted: 1, actualStart: ev.timestamp } : NO_DYNAMICS;
    history(d, name === "ADD" ? HISTORY_ADD : started ? START_MERGE : NOTHING, started);
    // Written before the scheduled copy: the core-restart sweep deletes a scheduled row only while
    // its record is older than the restart, so a row this event creates or keeps is never swept
    // after it (docs/core-restart.md#scheduled-downtimes). An ended downtime gets no record.
    out.push({
      kind: "upsert",
      event: name,
      table: ANNOUNCEMENTS,
      row: { ...tKey, announced_at: ev.timestamp },
      merge: ANNOUNCE_MERGE,
      guard: scheduledGuard,
      detectUnmatched: false,
    });
    // The scheduled row is the part of the history row (just merged) that it shares: the history
    // row holds every event of the downtime seen so far, so the scheduled row ends the same
    // whether or not the core-restart sweep deleted it in between (docs/downtimes.md).
    out.push({
      kind: "copy",
      event: name,
      table: scheduledTable,
      from: historyTable,
      key: rowKey,
      guard: scheduledGuard,
    });
  } else if (name === "STOP") {
    const cancelled = ev.attr === DOWNTIME_STOP_CANCELLED ? 1 : 0;
    history({ ...NO_DYNAMICS, actualEnd: ev.timestamp, wasCancelled: cancelled }, STOP_MERGE, true);
    end("STOP", false);
  } else {
    // Strictly greater: deleted before its window began, so it never took effect and leaves no
    // history. At start_time <= ts the preceding STOP (or a flexible downtime that never triggered)
    // keeps its history row (docs/tables.md#downtime-statements). scheduled_start_time is in the
    // key, so the condition depends on the event alone and needs no SQL.
    const removed = ev.startTime > ev.timestamp;
    end("DELETE", removed);
    if (removed) {
      out.push({ kind: "delete", event: "DELETE", table: historyTable, key: rowKey });
    } else {
      // The downtime reached its window: it belongs in the history even if no other event of it was
      // ever written. DELETE never sets actual_end_time (docs/tables.md#downtime-statements).
      history(NO_DYNAMICS, NOTHING, false);
    }
  }
  return out;
}
