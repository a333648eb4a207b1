/**
 * Payload → rows for every consumed queue: UTF-8 repair (docs/payloads.md#utf8-repair), both
 * payload shapes (D3), the per-queue mappings of docs/tables.md, the stale filter
 * (docs/payloads.md#stale-status), the downtime lifecycle (docs/tables.md#downtime-statements), the
 * core-restart cutoff (D4) and the perfdata parser (docs/perfdata.md#parsing). Pure: no I/O and no
 * imports of other `src/` directories.
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
