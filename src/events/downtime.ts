/**
 * The downtime lifecycle (docs/tables.md#c.1) as a pure function: one downtime event
 * in, the ordered statements for the four downtime tables out. The SQL builder in
 * `src/mysql/` only renders them; every rule (which table, which columns, the C.4.2 update
 * lists, the C.5 flag, the strict DELETE boundary) is decided here.
 *
 * @module
 */

import type {
  DowntimeDelete,
  DowntimeHistoryTable,
  DowntimeStatement,
  DowntimeUpdate,
  DowntimeUpsert,
  Row,
  ScheduledDowntimeTable,
} from "./types.ts";

/** Envelope `type` of a scheduled downtime (C.1). */
export const DOWNTIME_ADD = 1100;
/** Envelope `type` of a downtime removed from the core (C.1). */
export const DOWNTIME_DELETE = 1101;
/** Envelope `type` of a downtime restored from retention at start-up (C.1). */
export const DOWNTIME_LOAD = 1102;
/** Envelope `type` of a downtime that became active (C.1). */
export const DOWNTIME_START = 1103;
/** Envelope `type` of an active downtime that ended (C.1). */
export const DOWNTIME_STOP = 1104;
/** `downtime_type` of a host downtime; every other value is a service downtime (C.1). */
export const DOWNTIME_TYPE_HOST = 2;
/** Envelope `attr` of a STOP that was cancelled by a user (C.1). */
export const DOWNTIME_STOP_CANCELLED = 2;

/** One downtime event with its fields already coerced (see the decoder's coercion rules). */
export interface DowntimeEvent {
  /** Envelope `type` (1100–1104; anything else yields no statement). */
  readonly type: number;
  /** Envelope `attr`; only meaningful for STOP (2 = cancelled). */
  readonly attr: number;
  /** Envelope `timestamp`, epoch seconds (`ts` of C.3). */
  readonly timestamp: number;
  /** Envelope `timestamp_usec`; becomes the history `entry_time_usec` of an ADD. */
  readonly timestampUsec: number;
  /** `downtime.downtime_type`: 2 host, anything else service. */
  readonly downtimeType: number;
  /** `downtime.host_name`. */
  readonly hostName: string;
  /** `downtime.service_description`; ignored for host downtimes. */
  readonly serviceDescription: string;
  /** `downtime.downtime_id`. */
  readonly downtimeId: number;
  /** `downtime.start_time`: the scheduled window start, part of the primary key. */
  readonly startTime: number;
  /** `downtime.end_time`. */
  readonly endTime: number;
  /** `downtime.entry_time`. */
  readonly entryTime: number;
  /** `downtime.author_name`. */
  readonly authorName: string;
  /** `downtime.comment_data`. */
  readonly commentData: string;
  /** `downtime.triggered_by`. */
  readonly triggeredBy: number;
  /** `downtime.fixed`, already 0/1. */
  readonly fixed: number;
  /** `downtime.duration`, seconds. */
  readonly duration: number;
}

// Update lists are shared frozen arrays: built once, never per event.
// C.4.2: an ADD must not regress the dynamic columns of a row that a START/STOP already
// touched (late or redelivered ADD), so ADD updates only the static columns (+ the history
// entry_time_usec). Pinned by "downtimeStatements: ADD updates only static columns (C.4.2)".
const HISTORY_ADD_UPDATE: readonly string[] = Object.freeze([
  "entry_time",
  "entry_time_usec",
  "author_name",
  "comment_data",
  "triggered_by_id",
  "is_fixed",
  "duration",
  "scheduled_end_time",
]);
const SCHEDULED_ADD_UPDATE: readonly string[] = Object.freeze([
  "entry_time",
  "author_name",
  "comment_data",
  "triggered_by_id",
  "is_fixed",
  "duration",
  "scheduled_end_time",
]);
// START must set the dynamic columns on an existing row, otherwise the upsert would be a no-op
// for the common ADD → START sequence; it is an upsert only so the row exists without an ADD.
const SCHEDULED_START_UPDATE: readonly string[] = Object.freeze([
  ...SCHEDULED_ADD_UPDATE,
  "was_started",
  "actual_start_time",
]);
// After RESTART_PROGRAM the core re-announces every running downtime as LOAD then START, the
// START stamped with the restart time. The first START's time is the real one, so a START
// only fills actual_start_time while it is still 0. Pinned by "downtimes: a START re-announced
// after a core restart keeps the recorded actual_start_time".
const START_SET_ONCE: readonly string[] = Object.freeze(["actual_start_time"]);

function key(ev: DowntimeEvent, isHost: boolean, nodeName: string): Row {
  // Primary-key order of all four tables (B.3.3, B.3.6, B.3.14, B.3.17).
  return isHost
    ? {
      hostname: ev.hostName,
      node_name: nodeName,
      scheduled_start_time: ev.startTime,
      internal_downtime_id: ev.downtimeId,
    }
    : {
      hostname: ev.hostName,
      service_description: ev.serviceDescription,
      node_name: nodeName,
      scheduled_start_time: ev.startTime,
      internal_downtime_id: ev.downtimeId,
    };
}

function historyAdd(ev: DowntimeEvent, isHost: boolean, nodeName: string): DowntimeUpsert {
  const table: DowntimeHistoryTable = isHost
    ? "statusengine_host_downtimehistory"
    : "statusengine_service_downtimehistory";
  // Schema column order (B.3.3 / B.3.14); dynamic columns start at 0 (C.3 ADD).
  const row: Row = isHost
    ? {
      hostname: ev.hostName,
      internal_downtime_id: ev.downtimeId,
      scheduled_start_time: ev.startTime,
      node_name: nodeName,
      entry_time: ev.entryTime,
      entry_time_usec: ev.timestampUsec,
      author_name: ev.authorName,
      comment_data: ev.commentData,
      triggered_by_id: ev.triggeredBy,
      is_fixed: ev.fixed,
      duration: ev.duration,
      scheduled_end_time: ev.endTime,
      was_started: 0,
      actual_start_time: 0,
      actual_end_time: 0,
      was_cancelled: 0,
    }
    : {
      hostname: ev.hostName,
      service_description: ev.serviceDescription,
      internal_downtime_id: ev.downtimeId,
      scheduled_start_time: ev.startTime,
      node_name: nodeName,
      entry_time: ev.entryTime,
      entry_time_usec: ev.timestampUsec,
      author_name: ev.authorName,
      comment_data: ev.commentData,
      triggered_by_id: ev.triggeredBy,
      is_fixed: ev.fixed,
      duration: ev.duration,
      scheduled_end_time: ev.endTime,
      was_started: 0,
      actual_start_time: 0,
      actual_end_time: 0,
      was_cancelled: 0,
    };
  return { kind: "upsert", event: "ADD", table, row, updateColumns: HISTORY_ADD_UPDATE };
}

function scheduledUpsert(
  ev: DowntimeEvent,
  isHost: boolean,
  nodeName: string,
  started: boolean,
): DowntimeUpsert {
  const table: ScheduledDowntimeTable = isHost
    ? "statusengine_host_scheduleddowntimes"
    : "statusengine_service_scheduleddowntimes";
  const wasStarted = started ? 1 : 0;
  const actualStart = started ? ev.timestamp : 0;
  // Schema column order (B.3.6 / B.3.17).
  const row: Row = isHost
    ? {
      hostname: ev.hostName,
      internal_downtime_id: ev.downtimeId,
      scheduled_start_time: ev.startTime,
      node_name: nodeName,
      entry_time: ev.entryTime,
      author_name: ev.authorName,
      comment_data: ev.commentData,
      triggered_by_id: ev.triggeredBy,
      is_fixed: ev.fixed,
      duration: ev.duration,
      scheduled_end_time: ev.endTime,
      was_started: wasStarted,
      actual_start_time: actualStart,
    }
    : {
      hostname: ev.hostName,
      service_description: ev.serviceDescription,
      internal_downtime_id: ev.downtimeId,
      scheduled_start_time: ev.startTime,
      node_name: nodeName,
      entry_time: ev.entryTime,
      author_name: ev.authorName,
      comment_data: ev.commentData,
      triggered_by_id: ev.triggeredBy,
      is_fixed: ev.fixed,
      duration: ev.duration,
      scheduled_end_time: ev.endTime,
      was_started: wasStarted,
      actual_start_time: actualStart,
    };
  return started
    ? {
      kind: "upsert",
      event: "START",
      table,
      row,
      updateColumns: SCHEDULED_START_UPDATE,
      setOnce: START_SET_ONCE,
    }
    : { kind: "upsert", event: "ADD", table, row, updateColumns: SCHEDULED_ADD_UPDATE };
}

/**
 * Append the statements of one downtime event to `out`, in execution order
 * (C.3 with C.4.2). Used by the queue decoder so a bulk job fills one
 * list without intermediate arrays.
 *
 * @param ev The downtime event.
 * @param nodeName Configured node name (part of every downtime primary key).
 * @param out Receives the statements.
 */
export function appendDowntimeStatements(
  ev: DowntimeEvent,
  nodeName: string,
  out: DowntimeStatement[],
): void {
  const type = ev.type;
  if (
    type !== DOWNTIME_ADD && type !== DOWNTIME_START && type !== DOWNTIME_STOP &&
    type !== DOWNTIME_DELETE
  ) {
    return; // LOAD: persisted by its original ADD; unknown types: nothing (C.3).
  }
  // Routing is on downtime_type only, never on service_description (C.1).
  const isHost = ev.downtimeType === DOWNTIME_TYPE_HOST;
  const history: DowntimeHistoryTable = isHost
    ? "statusengine_host_downtimehistory"
    : "statusengine_service_downtimehistory";
  const scheduled: ScheduledDowntimeTable = isHost
    ? "statusengine_host_scheduleddowntimes"
    : "statusengine_service_scheduleddowntimes";

  if (type === DOWNTIME_ADD) {
    out.push(historyAdd(ev, isHost, nodeName), scheduledUpsert(ev, isHost, nodeName, false));
  } else if (type === DOWNTIME_START) {
    const update: DowntimeUpdate = {
      kind: "update",
      event: "START",
      table: history,
      key: key(ev, isHost, nodeName),
      set: { was_started: 1, actual_start_time: ev.timestamp },
      setOnce: START_SET_ONCE,
      detectUnmatched: true,
    };
    out.push(update, scheduledUpsert(ev, isHost, nodeName, true));
  } else if (type === DOWNTIME_STOP) {
    const k = key(ev, isHost, nodeName);
    const update: DowntimeUpdate = {
      kind: "update",
      event: "STOP",
      table: history,
      key: k,
      set: {
        actual_end_time: ev.timestamp,
        was_cancelled: ev.attr === DOWNTIME_STOP_CANCELLED ? 1 : 0,
      },
      detectUnmatched: true,
    };
    const del: DowntimeDelete = { kind: "delete", event: "STOP", table: scheduled, key: k };
    out.push(update, del);
  } else {
    const k = key(ev, isHost, nodeName);
    out.push({ kind: "delete", event: "DELETE", table: scheduled, key: k });
    // Strictly greater: deleted before its window began, so it never took effect and leaves no
    // history. At start_time <= ts the preceding STOP (or a flexible downtime that never
    // triggered) keeps its history row (C.3 DELETE). scheduled_start_time is in the key, so
    // the condition depends on the event alone and needs no SQL.
    if (ev.startTime > ev.timestamp) {
      out.push({ kind: "delete", event: "DELETE", table: history, key: k });
    }
  }
}

/**
 * The statements one downtime event requires, in execution order (C.3,
 * C.4.2; the UPDATEs carry the C.5 flag).
 *
 * | type | statements |
 * |---|---|
 * | ADD 1100 | history upsert (static + `entry_time_usec` updated), scheduled upsert (static updated) |
 * | START 1103 | history update (C.5), scheduled upsert with `was_started` 1 |
 * | STOP 1104 | history update (C.5), scheduled delete |
 * | DELETE 1101 | scheduled delete, history delete only if `start_time` > `timestamp` |
 * | LOAD 1102, other | none |
 *
 * @param ev The downtime event, fields already coerced.
 * @param nodeName Configured node name.
 * @returns The statements; empty for LOAD and unknown types.
 * @throws Never.
 *
 * @example A cancelled STOP of a host downtime
 * ```ts
 * import { downtimeStatements } from "./downtime.ts";
 * const [update, del] = downtimeStatements({
 *   type: 1104, attr: 2, timestamp: 1000, timestampUsec: 0, downtimeType: 2,
 *   hostName: "web01", serviceDescription: "", downtimeId: 7, startTime: 900, endTime: 2000,
 *   entryTime: 800, authorName: "me", commentData: "", triggeredBy: 0, fixed: 1, duration: 0,
 * }, "N");
 * console.assert(update?.kind === "update" && update.set.was_cancelled === 1);
 * console.assert(del?.kind === "delete" && del.table === "statusengine_host_scheduleddowntimes");
 * ```
 */
export function downtimeStatements(ev: DowntimeEvent, nodeName: string): DowntimeStatement[] {
  const out: DowntimeStatement[] = [];
  appendDowntimeStatements(ev, nodeName, out);
  return out;
}
