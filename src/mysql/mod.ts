/**
 * MySQL layer: table catalogue, schema, value adjustment and statement texts.
 *
 * @module
 */
export * from "./catalogue.ts";
export * from "./ddl.ts";
export * from "./schema.ts";
export * from "./sql.ts";
export * from "./url.ts";
export * from "./values.ts";
export { poolExecutor, PREPARED_STATEMENTS_PER_CONNECTION, type SqlExecutor } from "./executor.ts";
export type { DeadLetterRecord, DeadLetterSink } from "./dead_letter_sink.ts";
export { denoSocketStream } from "./deno_socket.ts";
export {
  describeMysqlConnectFailure,
  type MysqlConnectProblem,
  mysqlConnectProblem,
} from "./errors.ts";
export { closeMysqlNow, connectMysql, endPool, probeMysql, unlessAborted } from "./connect.ts";
export { registerNode } from "./nodes.ts";
export { dropEmptyParameterMetadata } from "./statement_metadata.ts";
export { NamedLock } from "./named_lock.ts";
export { ShardedWriter } from "./sharded_writer.ts";
export { DowntimeExecutor } from "./downtime.ts";
export { DbAvailability, IdleProbe } from "./availability.ts";
export { type RestartClock, type RestartTiming, StatusCleaner } from "./core_restart.ts";
export {
  type CommittedStatus,
  isStatusTable,
  STATUS_TABLES,
  StatusProgress,
  type StatusTable,
} from "./status_progress.ts";
export { JobTracker } from "./job_tracker.ts";
export {
  addPartitionsStatement,
  classifyLayout,
  dayNumber,
  dropPartitionsStatement,
  type MaintenancePlan,
  type PartitionInfo,
  planMaintenance,
  planRepairStep,
  repairStepCount,
  SECONDS_PER_DAY,
  type TableLayout,
  type WeeklyLayout,
} from "./partitions.ts";
