/**
 * Assembles the write side: one writer per batched table (W1), the downtime
 * executor, the job handler, the 30 s write summaries (L2), and the shutdown
 * flush (W9).
 *
 * @module
 */
import { ALL_TABLES, type Table } from "../mysql/catalogue.ts";
import { TableWriter } from "../mysql/writer.ts";
import { DowntimeExecutor } from "../mysql/downtime.ts";
import type { SqlExecutor } from "../mysql/executor.ts";
import { DbAvailability } from "../mysql/availability.ts";
import type { Metrics } from "../metrics/registry.ts";
import type { JobHandler } from "../consumer/contract.ts";
import { createJobHandler, type EventStream, type PerfdataSink } from "./handler.ts";
import type { DeadLetterSink } from "../mysql/dead_letter_sink.ts";
import { deadline } from "../util/async.ts";
import { getLogger } from "../log.ts";

const log = getLogger("pipeline");

/** Tables written through a bulk writer (the fourteen of W1). */
export function batchedTables(): Table[] {
  return ALL_TABLES.filter((t) =>
    t.writeMode === "full_upsert" || t.writeMode === "noop_upsert" || t.writeMode === "insert"
  );
}

/** Tables written one statement at a time (the 4 downtime tables). */
export function downtimeTables(): Table[] {
  return ALL_TABLES.filter((t) => t.writeMode === "downtime");
}

/** Options of {@link Pipeline}. */
export interface PipelineOptions {
  readonly executor: SqlExecutor;
  readonly batchSize: number;
  readonly deadLetters: DeadLetterSink;
  readonly metrics?: Metrics;
  readonly nodeName: string;
  readonly statusMaxAgeSeconds: number;
  readonly openItcockpit: boolean;
  readonly perfdataToMysql: boolean;
  readonly graphite?: PerfdataSink;
  /** Interval of the write summaries; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number;
  readonly now?: () => number;
  /** The `/ws` hub (docs/operations.md#ws); absent = nothing is streamed. */
  readonly stream?: EventStream;
}

/** The write side of the worker. */
export class Pipeline {
  readonly writers: ReadonlyMap<string, TableWriter>;
  readonly availability: DbAvailability;
  readonly handler: JobHandler;
  readonly #statsTimer: ReturnType<typeof setInterval> | undefined;
  #closing: Promise<void> | undefined;

  /** @param options Executor, batch size, sinks, metrics and decode settings. */
  constructor(options: PipelineOptions) {
    this.availability = new DbAvailability(options.metrics?.dbAvailable);
    const writers = new Map<string, TableWriter>();
    for (const table of batchedTables()) {
      writers.set(
        table.name,
        new TableWriter({
          table,
          batchSize: options.batchSize,
          executor: options.executor,
          availability: this.availability,
          deadLetters: options.deadLetters,
          ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
        }),
      );
    }
    this.writers = writers;
    const downtimes = new DowntimeExecutor({
      executor: options.executor,
      availability: this.availability,
      deadLetters: options.deadLetters,
      ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    });
    this.handler = createJobHandler({
      writers,
      downtimes,
      executor: options.executor,
      availability: this.availability,
      deadLetters: options.deadLetters,
      nodeName: options.nodeName,
      statusMaxAgeSeconds: options.statusMaxAgeSeconds,
      openItcockpit: options.openItcockpit,
      perfdataToMysql: options.perfdataToMysql,
      ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
      ...(options.graphite === undefined ? {} : { graphite: options.graphite }),
      ...(options.now === undefined ? {} : { now: options.now }),
      ...(options.stream === undefined ? {} : { stream: options.stream }),
    });
    const interval = options.statsIntervalMs ?? 30_000;
    this.#statsTimer = interval > 0
      ? setInterval(() => {
        for (const w of writers.values()) w.logStats();
      }, interval)
      : undefined;
  }

  /**
   * Shutdown flush (W9): every writer commits what it holds, concurrently,
   * within one shared budget; what cannot be committed in time is left
   * unacknowledged (D1) and redelivered after the restart. Idempotent.
   *
   * @param budgetMs `--shutdown-flush-timeout`.
   */
  close(budgetMs: number): Promise<void> {
    this.#closing ??= this.#close(budgetMs);
    return this.#closing;
  }

  async #close(budgetMs: number): Promise<void> {
    if (this.#statsTimer !== undefined) clearInterval(this.#statsTimer);
    const started = performance.now();
    using budget = deadline(budgetMs);
    const writers = [...this.writers.values()];
    await Promise.all(writers.map((w) => w.close(budget.signal)));
    const left = writers.reduce((n, w) => n + w.buffered, 0);
    log.info("pipeline: shutdown flush complete", {
      duration_ms: Math.round(performance.now() - started),
      writers: writers.length,
      rows_left_uncommitted: left,
    });
  }
}
