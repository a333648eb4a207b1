/**
 * The names of the 25 tables (Statusengine's 22 and the worker's own) grouped by how they are
 * written: every layer types its table names with these, so a row can only name a table that has
 * a writer, and the compiler says so.
 *
 * @module
 */

/** Tables written through a bulk writer from decoded rows (docs/writers.md#writers-per-table). */
export const BATCHED_TABLE_NAMES = [
  "statusengine_host_acknowledgements",
  "statusengine_host_notifications",
  "statusengine_host_notifications_log",
  "statusengine_host_statehistory",
  "statusengine_hostchecks",
  "statusengine_hoststatus",
  "statusengine_logentries",
  "statusengine_perfdata",
  "statusengine_service_acknowledgements",
  "statusengine_service_notifications",
  "statusengine_service_notifications_log",
  "statusengine_service_statehistory",
  "statusengine_servicechecks",
  "statusengine_servicestatus",
] as const;

export type BatchedTableName = (typeof BATCHED_TABLE_NAMES)[number];

/**
 * Tables written one statement at a time by the downtime lifecycle
 * (docs/tables.md#downtime-statements): the four Statusengine downtime tables and the worker's own
 * records of when the core last announced a downtime and of ended downtimes (docs/downtimes.md).
 */
export const DOWNTIME_TABLE_NAMES = [
  "statusengine_downtime_announcements",
  "statusengine_downtime_tombstones",
  "statusengine_host_downtimehistory",
  "statusengine_host_scheduleddowntimes",
  "statusengine_service_downtimehistory",
  "statusengine_service_scheduleddowntimes",
] as const;

/**
 * Tables no queue writes: bookkeeping of the worker and the UI, and the worker's own lease of the
 * in-order queues (docs/downtimes.md#galera).
 */
const OTHER_TABLE_NAMES = [
  "statusengine_dbversion",
  "statusengine_nodes",
  "statusengine_tasks",
  "statusengine_users",
  "statusengine_worker_leases",
] as const;

/** Every table of the schema. */
export const TABLE_NAMES = [
  ...BATCHED_TABLE_NAMES,
  ...DOWNTIME_TABLE_NAMES,
  ...OTHER_TABLE_NAMES,
] as const;

export type TableName = (typeof TABLE_NAMES)[number];

/** Narrow a table name to one of the fourteen written through a bulk writer. */
export function isBatchedTableName(name: string): name is BatchedTableName {
  return (BATCHED_TABLE_NAMES as readonly string[]).includes(name);
}
