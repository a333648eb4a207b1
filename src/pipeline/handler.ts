/**
 * The job handler the consumer calls (the contract of src/consumer/contract.ts): UTF-8 repair
 * (docs/payloads.md#utf8-repair) → decode (src/events) → hand rows to the table writers → resolve
 * once every row is committed or dead-lettered (D1, D7).
 *
 * @module
 */
import type { Job, JobHandler } from "../consumer/contract.ts";
import {
  type BatchedTableName,
  type DecodedJob,
  decodePayload,
  isQueueName,
  type PerfdataLabelQuotes,
  QUEUES,
  type Row,
  type StreamEvent,
  type TableRow,
} from "../events/mod.ts";
import {
  type DeadLetterSink,
  type DowntimeExecutor,
  JobTracker,
  type ShardedWriter,
  type StatusCleaner,
} from "../mysql/mod.ts";
import type { Metrics } from "../metrics/registry.ts";
import { getLogger } from "../log.ts";

const log = getLogger("pipeline");

/** Where perfdata rows go besides MySQL (`--perfdata-backends`, docs/perfdata.md#routing). */
export interface PerfdataSink {
  /** Accept parsed `statusengine_perfdata` rows; never blocks (docs/perfdata.md#no-backend-holds-up-mysql). */
  offer(rows: readonly Row[]): void;
}

/** The `/ws` hub (docs/operations.md#ws); never blocks or throws, so clients cannot slow ingestion. */
export interface EventStream {
  /** Whether a client listens to `topic`; the job's events are neither collected nor encoded otherwise. */
  wants(topic: string): boolean;
  /** Hand over one job's events (non-empty, after the queue's filters), before its rows go to MySQL. */
  publish(topic: string, events: readonly StreamEvent[]): void;
}

/** What the pipeline's options and the handler's share: decode settings and side outputs. */
export interface HandlerSettings {
  readonly deadLetters: DeadLetterSink;
  readonly metrics?: Metrics;
  readonly nodeName: string;
  /** `--status-max-age` in seconds; 0 disables (docs/payloads.md#stale-status). */
  readonly statusMaxAgeSeconds: number;
  readonly openItcockpit: boolean;
  /** `--perfdata-label-quotes` (docs/perfdata.md#labels); default `keep`. */
  readonly perfdataLabelQuotes?: PerfdataLabelQuotes | undefined;
  readonly perfdataToMysql: boolean;
  /** Perfdata to Graphite, InfluxDB and remote write; absent = none of them is configured. */
  readonly perfdataSink?: PerfdataSink | undefined;
  /** Worker clock in epoch seconds (tests). */
  readonly now?: () => number;
  /** Absent = nothing is streamed. */
  readonly stream?: EventStream | undefined;
}

/** What the handler needs of each table's writer; `dead-letters replay` puts a filter in front. */
export type RowWriters = Readonly<Record<BatchedTableName, Pick<ShardedWriter, "add">>>;

export interface JobHandlerOptions extends HandlerSettings {
  readonly writers: RowWriters;
  readonly downtimes: DowntimeExecutor;
  /** docs/core-restart.md */
  readonly statusCleaner: StatusCleaner;
  /** Where `deadLetters` writes when not the dead-letter file (`dead-letters replay`), for the log. */
  readonly leftOverFile?: string;
}

const REPAIR_WARN_INTERVAL_MS = 5 * 60_000;
const PERFDATA_TABLE = "statusengine_perfdata";

export function createJobHandler(options: JobHandlerOptions): JobHandler {
  const m = options.metrics;
  const now = options.now ?? (() => Date.now() / 1000);
  const lastRepairWarn = new Map<string, number>();

  async function deadLetter(job: Job, reason: string, message: string, text: string) {
    // Read before the write is awaited: a job given up meanwhile has its payload freed (Job.payload).
    const bytes = job.payload.length;
    // A failed write rejects: the job stays unacknowledged and is retried (D7: never silent).
    await options.deadLetters.write({ queue: job.queue, reason, error: message, payload: text });
    m?.pipelineErrors.inc({ component: "queue" });
    const file = options.leftOverFile;
    const where = file === undefined ? "the dead-letter file" : "the replay's left-over file";
    log.warn(`pipeline: undecodable payload written to ${where}`, {
      ...(file === undefined ? {} : { file }),
      queue: job.queue,
      server: job.server,
      reason,
      error: message,
      bytes,
    });
  }

  /**
   * Group a job's rows by table, with the tracker of their commits and the newest event time (s),
   * and offer its perfdata to the other backends. Synchronous: one async function less per job.
   */
  function route(job: Job, rows: readonly TableRow[], signal: AbortSignal) {
    const byTable = new Map<BatchedTableName, Row[]>();
    const sinkRows: Row[] = [];
    const timeColumn = isQueueName(job.queue) ? QUEUES[job.queue].eventTimeColumn : null;
    let newest = 0;
    for (const { table, row } of rows) {
      if (timeColumn !== null) {
        const t = row[timeColumn];
        if (typeof t === "number" && t > newest) newest = t;
      }
      if (table === PERFDATA_TABLE) {
        if (options.perfdataSink !== undefined) sinkRows.push(row);
        if (!options.perfdataToMysql) continue;
      }
      let list = byTable.get(table);
      if (list === undefined) {
        list = [];
        byTable.set(table, list);
      }
      list.push(row);
    }
    // Status times are the core's clock: how far it is behind the worker's dates a restart.
    if (timeColumn === "status_update_time" && newest > 0) {
      options.statusCleaner.statusReceived(job.receivedAt, newest);
    }
    // Offered, not awaited: the perfdata backends never hold up MySQL.
    if (sinkRows.length > 0) options.perfdataSink?.offer(sinkRows);
    let total = 0;
    for (const list of byTable.values()) total += list.length;
    // An aborted job is never acknowledged and comes back: its rows must not be committed too.
    const withdrawn = () => signal.aborted;
    return { byTable, tracker: new JobTracker(job.queue, total, withdrawn), newest };
  }

  const stream = options.stream;

  /**
   * Decode a job's payload, count a repair, offer the events to `/ws`. The payload text is
   * kept only for a job that goes to the dead-letter file: a local of the async handler would
   * stay alive until the job's commit, one payload-sized string per job in flight.
   */
  function decode(job: Job): { decoded: DecodedJob; invalidText: string } {
    // One native strict pass; the per-byte repair only runs when it fails.
    const { job: decoded, repaired, text } = decodePayload(job.queue, job.payload, {
      nodeName: options.nodeName,
      nowSeconds: now(),
      statusMaxAgeSeconds: options.statusMaxAgeSeconds,
      statusSweptBeforeSeconds: options.statusCleaner.sweptBefore,
      perfdataLabelQuotes: options.perfdataLabelQuotes,
      // Checked per job: a client that connects mid-run sees the next job, not this one.
      collectEvents: stream?.wants(job.queue) === true,
    });
    if (repaired) {
      m?.queuePayloadsRepaired.inc({ queue_name: job.queue });
      const t = performance.now();
      if (t - (lastRepairWarn.get(job.queue) ?? -Infinity) >= REPAIR_WARN_INTERVAL_MS) {
        lastRepairWarn.set(job.queue, t);
        log.warn(
          "pipeline: payload was not valid UTF-8, invalid bytes read as Windows-1252 " +
            "(see statusengine_queue_payloads_repaired_total)",
          { queue: job.queue },
        );
      }
    }
    // One frame per job, published before its rows go to MySQL (docs/operations.md#ws).
    if (stream !== undefined && decoded.kind !== "invalid" && decoded.kind !== "ignored") {
      const events = decoded.events;
      if (events !== undefined && events.length > 0) stream.publish(job.queue, events);
    }
    return { decoded, invalidText: decoded.kind === "invalid" ? text : "" };
  }

  return async function handle(job: Job, signal: AbortSignal): Promise<void> {
    const { decoded, invalidText } = decode(job);
    switch (decoded.kind) {
      case "invalid":
        await deadLetter(job, decoded.reason, decoded.message, invalidText);
        return;
      case "ignored":
        log.debug("pipeline: job ignored", { queue: job.queue, reason: decoded.reason });
        return;
      case "rows": {
        if (decoded.staleDiscarded > 0) {
          m?.queueEventsDiscardedStale.inc({ queue_name: job.queue }, decoded.staleDiscarded);
          log.debug("pipeline: stale status events discarded", {
            queue: job.queue,
            events: decoded.staleDiscarded,
          });
        }
        const { byTable, tracker, newest } = route(job, decoded.rows, signal);
        // `signal` stops handing over rows of a job given up (the writers drop those they hold).
        // The commit wait is not raced against it: the delivery engine already stops waiting.
        for (const [table, list] of byTable) {
          await options.writers[table].add(list, tracker, signal);
        }
        await tracker.done;
        // How far MySQL is behind the core at commit; a core clock ahead reads as 0.
        if (newest > 0) {
          m?.queueEventLag.observe({ queue_name: job.queue }, Math.max(0, now() - newest));
        }
        return;
      }
      case "downtimes":
        await options.downtimes.run(job.queue, decoded.statements, signal);
        return;
      case "core_restart":
        await options.statusCleaner.onRestart({
          messageSeconds: decoded.cutoffSource === "message" ? decoded.cutoff : null,
          receivedAtMs: job.receivedAt,
          linkOpenedAtMs: job.linkOpenedAt ?? null,
        }, signal);
        return;
    }
  };
}
