/**
 * Assembles the write side: the writers of every batched table, the downtime executor, the job
 * handler, the 30 s write summaries, the shutdown flush and the pressure signal the consumer's
 * in-flight windows read.
 *
 * @module
 */
import {
  DbAvailability,
  DowntimeExecutor,
  isStatusTable,
  type LeaseIdentity,
  type RestartClock,
  type RestartTiming,
  ShardedWriter,
  type SqlExecutor,
  StatusCleaner,
  StatusProgress,
  type Table,
  TABLES,
} from "../mysql/mod.ts";
import type { JobHandler } from "../consumer/contract.ts";
import type { QueuePressure } from "../consumer/window.ts";
import {
  BATCHED_TABLE_NAMES,
  type BatchedTableName,
  DOWNTIME_TABLE_NAMES,
  isBatchedTableName,
  QUEUES,
  type Row,
} from "../events/mod.ts";
import { createJobHandler, type HandlerSettings } from "./handler.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { getLogger } from "../log.ts";

const log = getLogger("pipeline");

export function batchedTables(): Table[] {
  return BATCHED_TABLE_NAMES.map((name) => TABLES[name]);
}

/** Tables written one statement at a time (downtimes and their tombstones). */
export function downtimeTables(): Table[] {
  return DOWNTIME_TABLE_NAMES.map((name) => TABLES[name]);
}

/** The writers of every batched table: a row's table always has one. */
export type Writers = Readonly<Record<BatchedTableName, ShardedWriter>>;

/** A statement is slow once it has run this many times longer than the table's usual one. */
const SLOW_STATEMENT_FACTOR = 4;

/** No statement counts as slow before it has run this long (a busy machine jitters below it). */
const SLOW_STATEMENT_MIN_MS = 1_000;

export interface PipelineOptions extends HandlerSettings {
  readonly executor: SqlExecutor;
  readonly batchSize: number;
  /** Writers per batched table (`--mysql-writers-per-table`); default 1. */
  readonly writersPerTable?: number;
  /** Interval of the write summaries; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number | undefined;
  /** The MySQL URL as logs show it (password masked), named by the write stall's error lines. */
  readonly mysql?: string;
  /** The in-order lease the downtime statements commit under (docs/downtimes.md#galera). */
  readonly inOrderLease?: LeaseIdentity | undefined;
  /** When the core-restart sweep runs, and its clock (tests); defaults suit production. */
  readonly coreRestart?: {
    readonly clock?: RestartClock;
    readonly timing?: Partial<RestartTiming>;
    /** Rows per statement of the scheduled-downtime sweep. */
    readonly sweepChunkRows?: number;
  };
}

export class Pipeline {
  readonly writers: Writers;
  readonly availability: DbAvailability;
  readonly #fed = new Map<string, readonly ShardedWriter[]>();
  readonly handler: JobHandler;
  /** Records core restarts and sweeps the status rows they left stale. */
  readonly statusCleaner: StatusCleaner;
  readonly downtimes: DowntimeExecutor;
  readonly #statsTimer: ReturnType<typeof setInterval> | undefined;
  #closing: Promise<void> | undefined;
  /** Jobs in the handler: handed over and not yet committed, what a write stall holds. */
  #jobsHeld = 0;

  constructor(options: PipelineOptions) {
    this.availability = new DbAvailability(options.metrics?.dbAvailable, {
      mysql: options.mysql,
      held: () => ({
        jobs: this.#jobsHeld,
        // The statements held in a retry loop too: they are what a stall holds first.
        rows: Object.values(this.writers).reduce((n, w) => n + w.held, 0),
      }),
    });
    // Status writers report their commits: the core-restart sweep need not read the tables back.
    const progress = new StatusProgress();
    const writers = Object.fromEntries(
      BATCHED_TABLE_NAMES.map((name) => [
        name,
        new ShardedWriter({
          table: TABLES[name],
          writers: options.writersPerTable ?? 1,
          batchSize: options.batchSize,
          executor: options.executor,
          availability: this.availability,
          deadLetters: options.deadLetters,
          metrics: options.metrics,
          ...(isStatusTable(name)
            ? { onCommitted: (rows: readonly Row[]) => progress.committed(name, rows) }
            : {}),
        }),
      ]),
    ) as Record<BatchedTableName, ShardedWriter>;
    this.writers = writers;
    for (const [queue, spec] of Object.entries(QUEUES)) {
      this.#fed.set(queue, spec.tables.filter(isBatchedTableName).map((t) => writers[t]));
    }
    const statusCleaner = new StatusCleaner({
      executor: options.executor,
      availability: this.availability,
      nodeName: options.nodeName,
      openItcockpit: options.openItcockpit,
      statusMaxAgeSeconds: options.statusMaxAgeSeconds,
      ...options.coreRestart,
      writers: {
        statusengine_hoststatus: writers.statusengine_hoststatus,
        statusengine_servicestatus: writers.statusengine_servicestatus,
      },
      committed: progress,
      metrics: options.metrics,
    });
    const downtimes = new DowntimeExecutor({
      executor: options.executor,
      lease: options.inOrderLease,
      availability: this.availability,
      deadLetters: options.deadLetters,
      metrics: options.metrics,
    });
    this.statusCleaner = statusCleaner;
    this.downtimes = downtimes;
    const handle = createJobHandler({ ...options, writers, downtimes, statusCleaner });
    this.handler = (job, signal) => {
      this.#jobsHeld++;
      return handle(job, signal).finally(() => this.#jobsHeld--);
    };
    const interval = options.statsIntervalMs ?? 30_000;
    this.#statsTimer = interval > 0
      ? setInterval(() => {
        for (const w of Object.values(writers)) w.logStats();
      }, interval)
      : undefined;
  }

  /** How full the writers `queue` feeds are and whether MySQL is slow: its in-flight window's input. */
  pressure(queue: string): QueuePressure {
    let fill = 0;
    let full = false;
    let excess = 0;
    let slow = !this.availability.available;
    let statementMs = 0;
    for (const writer of this.#fed.get(queue) ?? []) {
      const load = writer.load;
      fill = Math.max(fill, load.statementFill);
      full ||= load.waiting > 0;
      // A job hands its rows to every writer of the table; one job each may wait.
      excess = Math.max(excess, Math.round(load.waiting / load.writers) - 1);
      statementMs = Math.max(statementMs, load.typicalStatementMs);
      if (
        load.statementAgeMs >
          Math.max(SLOW_STATEMENT_MIN_MS, SLOW_STATEMENT_FACTOR * load.typicalStatementMs)
      ) {
        slow = true;
      }
    }
    return { fill, full, excess, slow, statementMs };
  }

  /** Shutdown flush (docs/writers.md#shutdown-flush) within `--shutdown-flush-timeout`. Idempotent. */
  close(budgetMs: number): Promise<void> {
    this.#closing ??= this.#close(budgetMs);
    return this.#closing;
  }

  async #close(budgetMs: number): Promise<void> {
    if (this.#statsTimer !== undefined) clearInterval(this.#statsTimer);
    const started = performance.now();
    using budget = deadline(budgetMs);
    // Within the budget: a sweep statement MySQL holds up (a lock, a frozen server) would
    // otherwise hold the stop until the statement timeout, for ever with none.
    await settledWithin(this.statusCleaner.close(), budget.signal);
    const writers = Object.values(this.writers);
    await Promise.all(writers.map((w) => w.close(budget.signal)));
    const left = writers.reduce((n, w) => n + w.buffered, 0);
    log.info("pipeline: shutdown flush complete", {
      duration_ms: Math.round(performance.now() - started),
      writers: writers.length,
      rows_left_uncommitted: left,
    });
  }
}
