/**
 * Payload → rows for every consumed queue (docs/payloads.md, docs/tables.md): UTF-8 repair, both
 * payload shapes, the per-queue mappings, the stale filter, the downtime lifecycle, the
 * core-restart cutoff and the perfdata parser. Pure: no I/O and no imports of other `src/`
 * directories.
 *
 * @module
 */

export { decodePayload } from "./decode.ts";
export { perfdataThresholds, plainLabel, positionalDecimal } from "./perfdata.ts";
export { isQueueName, QUEUE_NAMES, type QueueName, QUEUES } from "./queues.ts";
export {
  type DecodedJob,
  type DowntimeMerge,
  type DowntimeStatement,
  INVALID_REASONS,
  type PerfdataLabelQuotes,
  type Row,
  type SqlValue,
  type StreamEvent,
  type TableRow,
} from "./types.ts";
export {
  BATCHED_TABLE_NAMES,
  type BatchedTableName,
  DOWNTIME_TABLE_NAMES,
  isBatchedTableName,
  type TableName,
} from "./table_names.ts";
