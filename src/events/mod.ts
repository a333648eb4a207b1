/**
 * Payload → rows for every consumed queue (docs/payloads.md, docs/tables.md): UTF-8 repair, both
 * payload shapes, the per-queue mappings, the stale filter, the downtime lifecycle, the
 * core-restart cutoff and the perfdata parser. Pure: no I/O and no imports of other `src/`
 * directories.
 *
 * @module
 */

export { type DecodedPayload, decodePayload } from "./decode.ts";
export {
  type PerfdataLabelQuotes,
  perfdataThresholds,
  plainLabel,
  positionalDecimal,
} from "./perfdata.ts";
export {
  isQueueName,
  QUEUE_NAMES,
  type QueueName,
  type QueueOutput,
  QUEUES,
  type QueueSpec,
} from "./queues.ts";
export {
  type DecodeContext,
  type DecodedJob,
  type DowntimeDelete,
  type DowntimeEventName,
  type DowntimeGuard,
  type DowntimeHistoryTable,
  type DowntimeMerge,
  type DowntimeStatement,
  type DowntimeTombstone,
  type DowntimeTombstoneTable,
  type DowntimeUpsert,
  INVALID_REASONS,
  type InvalidReason,
  type Row,
  type ScheduledDowntimeTable,
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
