/**
 * MySQL layer: table catalogue, schema, value adjustment and statement texts, and every
 * statement and use of mysql2: the rest of the code reaches MySQL only through this file.
 *
 * @module
 */
export * from "./catalogue.ts";
export * from "./ddl.ts";
export * from "./schema.ts";
export * from "./sql.ts";
export * from "../util/mysql_url.ts";
export * from "./values.ts";
export {
  createWriterPool,
  type MysqlPool,
  poolExecutor,
  registerNode,
  type SqlExecutor,
} from "./executor.ts";
export type { DeadLetterRecord, DeadLetterSink } from "./dead_letter_sink.ts";
export {
  describeMysqlConnectFailure,
  type MysqlConnectProblem,
  mysqlConnectProblem,
  waitingCannotFix,
} from "./errors.ts";
export {
  closeMysqlNow,
  connectMysql,
  countLosstestMarkers,
  deleteLosstestBatch,
  endMysql,
  endPool,
  LOSSTEST_TABLE,
  makeSessionReadOnly,
  type MysqlConnection,
  type NewestRows,
  probeMysql,
  selectLosstestRunSizes,
  selectNewestRows,
} from "./connect.ts";
export { Lease, type LeaseIdentity, nodeLease, nodeLeaseOptions } from "./lease.ts";
export { ShardedWriter } from "./sharded_writer.ts";
export { DowntimeExecutor } from "./downtime.ts";
export { DbAvailability, IdleProbe } from "./availability.ts";
export { runWithRetry } from "./retry.ts";
export { MysqlHosts } from "./failover.ts";
export {
  isStatusTable,
  type RestartClock,
  type RestartTiming,
  STATUS_TABLES,
  StatusCleaner,
  StatusProgress,
  type StatusTable,
} from "./core_restart.ts";
export { JobTracker } from "./job_tracker.ts";
export {
  CleanupSession,
  dayNumber,
  partitionsToTrim,
  planMaintenance,
  planRepairStep,
  repairHorizon,
  repairStepCount,
  type TableLayout,
} from "./partitions.ts";
