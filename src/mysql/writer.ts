/**
 * One bulk writer per batched table (W1): a bounded buffer, at most one
 * statement in flight, and commit notification per job (D1).
 *
 * Flushing works as group commit (architecture.md): a busy writer sends the
 * next statement as soon as the previous one returned, with up to
 * `batchSize` waiting rows; an idle writer sends what arrived on the next
 * turn of the event loop, so every handler woken by the same read has handed
 * over its rows first. With acknowledgements waiting for commits, a writer
 * that only flushed "every 250 ms or at N rows" would cap a queue at
 * (jobs in flight × events per job) per 250 ms, since no further rows can
 * arrive while every job of the queue waits for its commit. The 250 ms
 * latency bound of W2 is therefore met with room to spare: a row waits at
 * most for the statement in flight plus one event-loop turn.
 *
 * Failures follow W5/D7 (see retry.ts): transient ones hold the batch,
 * permanent ones split it by halves until the offending rows are isolated;
 * those go to the dead-letter file and the rest is committed.
 *
 * @module
 */
import { clearImmediate, setImmediate } from "node:timers";
import type { Table } from "./catalogue.ts";
import type { SqlExecutor } from "./executor.ts";
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError } from "./errors.ts";
import { runWithRetry } from "./retry.ts";
import { insertStatement } from "./sql.ts";
import { appendAdjustedRow, type Row, type SqlValue, type ValueAdjustment } from "./values.ts";
import type { Metrics } from "../metrics/registry.ts";
import type { JobTracker } from "../pipeline/job_tracker.ts";
import type { DeadLetterSink } from "../pipeline/dead_letter.ts";
import { delay } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

/** Options of a {@link TableWriter}. */
export interface TableWriterOptions {
  readonly table: Table;
  /** Rows per statement, 1..700 (validated by the settings table). */
  readonly batchSize: number;
  readonly executor: SqlExecutor;
  readonly availability: DbAvailability;
  readonly deadLetters: DeadLetterSink;
  readonly metrics?: Metrics;
  /** Which of the table's writers this is (`2/4`), for log lines; absent when it is the only one. */
  readonly shard?: string;
}

/** A buffered row: its values in insert-column order, its job and its source row (for dead letters). */
interface Pending {
  readonly values: SqlValue[];
  readonly owner: JobTracker;
  readonly row: Row;
}

/** Per-interval counters for the 30 s summary line (L2). */
interface IntervalStats {
  flushes: number;
  rows: number;
}

/** Writer was closed; rows can no longer be added or flushed. */
export class WriterClosedError extends Error {
  /**
   * @param table Table of the writer.
   * @param action What was refused.
   */
  constructor(table: string, action = "add rows") {
    super(`Cannot ${action}: the writer of "${table}" is closed`);
    this.name = "WriterClosedError";
  }
}

/** The bulk writer of one table. */
export class TableWriter {
  readonly table: Table;
  readonly #batchSize: number;
  readonly #executor: SqlExecutor;
  readonly #availability: DbAvailability;
  readonly #deadLetters: DeadLetterSink;
  readonly #metrics: Metrics | undefined;
  readonly #logFields: Readonly<Record<string, string>>;
  #buffer: Pending[] = [];
  #inFlight: Promise<void> | undefined;
  #timer: ReturnType<typeof setImmediate> | undefined;
  #paused = 0;
  #closed = false;
  #closing: Promise<void> | undefined;
  /**
   * Rows ever buffered, and rows whose statement has ended (committed,
   * dead-lettered, or given up at shutdown). Rows leave the buffer in order
   * and one statement runs at a time, so `flush` can wait for exactly the rows
   * buffered before it was called: waiting for an empty buffer instead never
   * ends while producers keep refilling it (a core restart under load, D4).
   * Pinned by "writer: flush under sustained load commits what was buffered
   * before it and returns".
   */
  #rowsAdded = 0;
  #rowsSettled = 0;
  #spaceWaiters: (() => void)[] = [];
  #idleWaiters: (() => void)[] = [];
  /** Aborts statements held in a retry loop (shutdown budget exhausted). */
  readonly #abort = new AbortController();
  readonly #interval: IntervalStats = { flushes: 0, rows: 0 };
  #totalRows = 0;
  // Read by the consumer's in-flight window (through ShardedWriter.load): what the writer
  // holds and how long its statements take.
  #statementRows = 0;
  #statementSince: number | undefined;
  #typicalStatementMs = 0;

  /** @param options Table, batch size, executor and collaborators. */
  constructor(options: TableWriterOptions) {
    if (
      options.table.writeMode !== "full_upsert" && options.table.writeMode !== "noop_upsert" &&
      options.table.writeMode !== "insert"
    ) {
      throw new TypeError(
        `Cannot create a bulk writer for "${options.table.name}": write mode "${options.table.writeMode}" is not batched`,
      );
    }
    this.table = options.table;
    this.#batchSize = options.batchSize;
    this.#executor = options.executor;
    this.#availability = options.availability;
    this.#deadLetters = options.deadLetters;
    this.#metrics = options.metrics;
    this.#logFields = options.shard === undefined
      ? { table: options.table.name }
      : { table: options.table.name, writer: options.shard };
  }

  /** Rows waiting in the buffer (not counting a statement in flight). */
  get buffered(): number {
    return this.#buffer.length;
  }

  /** Rows of the statement in flight; 0 when none is. */
  get statementRows(): number {
    return this.#statementRows;
  }

  /** `performance.now()` when the statement in flight was sent; undefined when none is. */
  get statementSince(): number | undefined {
    return this.#statementSince;
  }

  /** Moving average of how long a statement took, retries included; 0 before the first. */
  get typicalStatementMs(): number {
    return this.#typicalStatementMs;
  }

  /** Rows written since start (every successful statement). */
  get totalRows(): number {
    return this.#totalRows;
  }

  /**
   * Hand rows of one job to the writer. Resolves once all are buffered —
   * not committed: the job's tracker tells that. Waits while the buffer is
   * full (backpressure: bounded memory, and the consumer's cap then stops
   * grabbing).
   *
   * @param rows Rows keyed by column name (raw values; D6 is applied here).
   * @param owner The job's tracker, settled row by row on commit.
   * @param signal Aborts the wait for buffer space (drain deadline).
   * @throws {WriterClosedError} After {@link close}.
   */
  async add(rows: readonly Row[], owner: JobTracker, signal?: AbortSignal): Promise<void> {
    const adjustments: ValueAdjustment[] = [];
    let i = 0;
    while (i < rows.length) {
      if (this.#closed) throw new WriterClosedError(this.table.name);
      // Capacity: one batch waiting plus the statement in flight (2 × batch per table).
      let room = this.#batchSize - this.#buffer.length;
      if (room <= 0) {
        await this.#waitForSpace(signal);
        continue;
      }
      for (; room > 0 && i < rows.length; room--, i++) {
        const row = rows[i] as Row;
        const values: SqlValue[] = [];
        appendAdjustedRow(this.table, row, values, adjustments);
        this.#buffer.push({ values, owner, row });
        this.#rowsAdded++;
      }
      this.#kick();
    }
    if (adjustments.length > 0) this.#countAdjustments(adjustments);
  }

  /**
   * Commit everything buffered before this call (core restart D4, shutdown).
   * Rows added meanwhile are not waited for.
   *
   * @param signal Bounds the wait (and a statement held for an unreachable MySQL).
   * @throws {WriterClosedError} After {@link close}.
   */
  async flush(signal?: AbortSignal): Promise<void> {
    const target = this.#rowsAdded;
    while (this.#rowsSettled < target) {
      if (this.#closed) throw new WriterClosedError(this.table.name, "flush");
      // Rows not yet settled are in flight or buffered, so the buffer is not empty here.
      if (this.#inFlight === undefined) this.#startStatement();
      await this.#waitIdle(signal);
    }
  }

  /**
   * Commit what is buffered, then hold the table (no statement is sent; rows
   * keep buffering up to capacity) while `fn` runs, then resume (P7).
   *
   * @param fn Runs while the table is quiet.
   * @param signal Bounds the initial flush.
   * @returns What `fn` returned.
   */
  async withPaused<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    await this.flush(signal);
    this.#paused++;
    try {
      while (this.#inFlight !== undefined) await this.#waitIdle(signal);
      return await fn();
    } finally {
      this.#paused--;
      this.#kick();
    }
  }

  /**
   * Commit what is buffered within `signal`, then refuse new rows. A
   * statement still held for an unreachable MySQL when `signal` aborts is
   * given up: its jobs were not acknowledged and are redelivered (D1).
   * Idempotent: later calls share the first one.
   *
   * @param signal Shutdown flush budget.
   */
  close(signal: AbortSignal): Promise<void> {
    this.#closing ??= this.#close(signal);
    return this.#closing;
  }

  async #close(signal: AbortSignal): Promise<void> {
    const onAbort = () => this.#abort.abort(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      await this.flush(signal);
    } catch {
      // Budget exhausted; reported below.
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#closed = true;
      if (this.#timer !== undefined) clearImmediate(this.#timer);
      this.#timer = undefined;
      this.#abort.abort(new DOMException("writer closed", "AbortError"));
      for (const w of this.#spaceWaiters.splice(0)) w();
    }
    if (this.#inFlight !== undefined) await this.#inFlight.catch(() => {});
    if (this.#buffer.length > 0) {
      log.warn("db: rows left uncommitted at shutdown, their jobs will be redelivered", {
        ...this.#logFields,
        rows: this.#buffer.length,
      });
    }
    this.logStats(true);
  }

  /**
   * Log the interval summary if anything was written (L2), and reset it.
   *
   * @param final True for the last line on shutdown (logged even when nothing was written).
   */
  logStats(final = false): void {
    const s = this.#interval;
    if (s.flushes === 0 && !final) return;
    if (s.flushes === 0 && this.#totalRows === 0) return;
    log.info("db: write stats", {
      ...this.#logFields,
      flushes: s.flushes,
      rows: s.rows,
      rows_per_flush: s.flushes === 0 ? 0 : Math.round((s.rows / s.flushes) * 10) / 10,
      total_processed: this.#totalRows,
    });
    s.flushes = 0;
    s.rows = 0;
  }

  #countAdjustments(adjustments: readonly ValueAdjustment[]): void {
    const counter = this.#metrics?.dbValuesAdjusted;
    if (counter === undefined) return;
    const byReason = new Map<string, number>();
    for (const a of adjustments) byReason.set(a.reason, (byReason.get(a.reason) ?? 0) + 1);
    for (const [reason, n] of byReason) counter.inc({ table: this.table.name, reason }, n);
  }

  #waitForSpace(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#spaceWaiters.indexOf(wake);
        if (i !== -1) this.#spaceWaiters.splice(i, 1);
        reject(signal?.reason);
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      this.#spaceWaiters.push(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  #waitIdle(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#inFlight === undefined && (this.#buffer.length === 0 || this.#paused > 0)) {
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#idleWaiters.indexOf(wake);
        if (i !== -1) this.#idleWaiters.splice(i, 1);
        reject(signal?.reason);
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      this.#idleWaiters.push(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Decide whether to send a statement now, soon, or not at all. */
  #kick(): void {
    // Closed: what is still buffered stays there, uncommitted and reported by
    // close(); its jobs are redelivered (D1). Sending it now would only give it
    // up against the aborted signal and make `buffered` read 0.
    if (this.#closed) return;
    if (this.#inFlight !== undefined || this.#paused > 0 || this.#buffer.length === 0) return;
    if (this.#buffer.length >= this.#batchSize) {
      this.#startStatement();
      return;
    }
    // Idle with a partial batch: send on the next macrotask, after every
    // handler woken in this turn handed over its rows. setImmediate, not
    // setTimeout(0): nested timeouts are clamped to 4 ms, which capped a queue
    // handled one job at a time (RabbitMQ, R3) at about 250 statements/s.
    this.#timer ??= setImmediate(() => {
      this.#timer = undefined;
      if (
        !this.#closed && this.#inFlight === undefined && this.#paused === 0 &&
        this.#buffer.length > 0
      ) {
        this.#startStatement();
      }
    });
  }

  #startStatement(): void {
    if (this.#timer !== undefined) {
      clearImmediate(this.#timer);
      this.#timer = undefined;
    }
    const batch = this.#buffer.splice(0, this.#batchSize);
    for (let n = batch.length; n > 0 && this.#spaceWaiters.length > 0; n--) {
      this.#spaceWaiters.shift()?.();
    }
    const since = performance.now();
    this.#statementRows = batch.length;
    this.#statementSince = since;
    this.#inFlight = this.#write(batch).finally(() => {
      const ms = performance.now() - since;
      this.#typicalStatementMs = this.#typicalStatementMs === 0
        ? ms
        : this.#typicalStatementMs * 0.8 + ms * 0.2;
      this.#statementRows = 0;
      this.#statementSince = undefined;
      this.#inFlight = undefined;
      this.#rowsSettled += batch.length;
      for (const w of this.#idleWaiters.splice(0)) w();
      this.#kick();
    });
  }

  /** Write one batch: commit, or isolate and dead-letter the rows MySQL rejects (D7). */
  async #write(batch: Pending[]): Promise<void> {
    const started = performance.now();
    try {
      await this.#writeOrSplit(batch, true);
    } catch (err: unknown) {
      if (this.#abort.signal.aborted) {
        // Shutdown budget exhausted while holding: the rows stay uncommitted
        // and their jobs unacknowledged, to be redelivered (D1).
        log.warn("db: batch given up at shutdown, its jobs will be redelivered", {
          table: this.table.name,
          rows: batch.length,
          error: errorMessage(err),
        });
        return;
      }
      // A bug (e.g. a miscounted row): never leave jobs waiting forever.
      log.error("db: bulk insert failed", {
        table: this.table.name,
        rows: batch.length,
        error: errorMessage(err),
      });
      this.#metrics?.pipelineErrors.inc({ component: "mysql" });
      const failure = new MysqlWriteError(this.table.name, err);
      for (const p of batch) await this.#deadLetter(p, failure).catch(() => {});
    } finally {
      this.#metrics?.dbBatchFlushDuration.observe((performance.now() - started) / 1000);
    }
  }

  async #writeOrSplit(batch: Pending[], top: boolean): Promise<void> {
    const sql = insertStatement(this.table, batch.length);
    const values: SqlValue[] = [];
    for (const p of batch) for (const v of p.values) values.push(v);
    if (values.length !== batch.length * this.table.insertColumns.length) {
      // A miscounted row would misalign every following placeholder (W3 argument guard).
      throw new Error(
        `Row builder for "${this.table.name}" produced ${values.length} values for ${batch.length} rows`,
      );
    }
    if (top) this.#metrics?.dbBatchSizeAtFlush.observe(batch.length);
    try {
      await runWithRetry(() => this.#executor.run(sql, values, { prepared: true }), {
        table: this.table.name,
        availability: this.#availability,
        signal: this.#abort.signal,
        ...(this.#metrics === undefined ? {} : {
          lockRetries: this.#metrics.dbBatchRetries,
          connectionRetries: this.#metrics.dbConnectionRetries,
        }),
      });
    } catch (err: unknown) {
      if (!(err instanceof MysqlWriteError) || err.kind !== "permanent") throw err;
      // One error per flush that MySQL rejected (the rows isolated from it are
      // counted in statusengine_dead_letters_total), not one per halving step.
      if (top) this.#metrics?.pipelineErrors.inc({ component: "mysql" });
      if (batch.length === 1) {
        await this.#deadLetter(batch[0] as Pending, err);
        return;
      }
      if (top) {
        log.error("db: bulk insert rejected, isolating the offending rows", {
          table: this.table.name,
          rows: batch.length,
          error: err.message,
        });
      }
      const half = Math.ceil(batch.length / 2);
      await this.#writeOrSplit(batch.slice(0, half), false);
      await this.#writeOrSplit(batch.slice(half), false);
      return;
    }
    this.#interval.flushes++;
    this.#interval.rows += batch.length;
    this.#totalRows += batch.length;
    this.#metrics?.dbEventsWritten.inc({ table: this.table.name }, batch.length);
    this.#metrics?.dbFlushes.inc({ table: this.table.name });
    log.debug("db: bulk insert flushed", { table: this.table.name, rows: batch.length });
    for (const p of batch) p.owner.committed();
  }

  async #deadLetter(p: Pending, err: MysqlWriteError): Promise<void> {
    log.error("db: row rejected by MySQL, written to the dead-letter file", {
      table: this.table.name,
      queue: p.owner.queue,
      error: err.message,
    });
    this.#metrics?.deadLetters.inc({ queue_name: p.owner.queue, reason: "sql_rejected" });
    for (;;) {
      try {
        await this.#deadLetters.write({
          queue: p.owner.queue,
          reason: "sql_rejected",
          error: err.message,
          table: this.table.name,
          row: p.row,
        });
        break;
      } catch (writeErr: unknown) {
        // Losing the row silently is worse than stalling the table (D7):
        // keep trying until the file is writable or shutdown.
        log.error("db: cannot dead-letter a rejected row, retrying", {
          table: this.table.name,
          error: errorMessage(writeErr),
        });
        // Abortable, so close() keeps its budget; the job then stays unacknowledged.
        await delay(1000, { signal: this.#abort.signal });
      }
    }
    p.owner.deadLetter();
  }
}
