/**
 * The bulk writer of one table (docs/writers.md): a bounded buffer, at most one statement in
 * flight, commit notification per job (D1), group commit (docs/writers.md#group-commit). Transient
 * failures hold the batch; rejections are split by halves down to the rows to dead-letter (D7).
 *
 * @module
 */
import { clearImmediate, setImmediate } from "node:timers";
import type { Table } from "./catalogue.ts";
import type { SqlExecutor } from "./executor.ts";
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError, sameMysqlError } from "./errors.ts";
import { type HoldScope, MYSQL_HOLD, pauseHeld, runWithRetry } from "./retry.ts";
import { emptyInsertStatement, insertStatement } from "./sql.ts";
import { appendAdjustedRow, type ValueAdjustment } from "./values.ts";
import type { Row, SqlValue } from "../events/mod.ts";
import type { Metrics } from "../metrics/registry.ts";
import type { JobTracker } from "./job_tracker.ts";
import type { DeadLetterSink } from "./dead_letter_sink.ts";
import { Backoff, type BackoffOptions } from "../util/backoff.ts";
import { abortable, delay } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

const log = getLogger("db");

export interface TableWriterOptions {
  readonly table: Table;
  /** Rows per statement, 1..700 (validated by the settings table). */
  readonly batchSize: number;
  readonly executor: SqlExecutor;
  readonly availability: DbAvailability;
  readonly deadLetters: DeadLetterSink;
  readonly metrics?: Metrics | undefined;
  /** Which of the table's writers this is (`2/4`), for log lines; absent when it is the only one. */
  readonly shard?: string;
  /** Told of the rows of each statement once MySQL committed it (the core-restart sweep). */
  readonly onCommitted?: CommitListener;
}

/**
 * Hears the rows of a statement after MySQL committed it (never rows dead-lettered). Runs
 * synchronously in the writer, so it must be quick and must not throw.
 */
export type CommitListener = (rows: readonly Row[]) => void;

/** A buffered row and its job; fitted (D6) when sent, not when buffered (docs/writers.md). */
interface Pending {
  readonly owner: JobTracker;
  readonly row: Row;
  /** Committed or dead-lettered (its owner was told). */
  settled?: boolean;
}

/** Rows held because MySQL, not they, made their statement fail. */
interface Held {
  readonly rows: Pending[];
  readonly error: MysqlWriteError;
}

/** Retried here, not by the delivery engine: the statement committed the rest of the batch. */
const DEAD_LETTER_RETRY: BackoffOptions = { initialMs: 1_000, maxMs: 1_000, jitter: 0 };

function writerClosed(table: string, action: string): WorkerError {
  return new WorkerError("writer_closed", `Cannot ${action}: the writer of "${table}" is closed`);
}

export class TableWriter {
  readonly table: Table;
  readonly #o: TableWriterOptions;
  readonly #batchSize: number;
  readonly #logFields: Readonly<Record<string, string>>;
  #buffer: Pending[] = [];
  #inFlight: Promise<void> | undefined;
  #timer: ReturnType<typeof setImmediate> | undefined;
  #paused = 0;
  #closed = false;
  #closing: Promise<void> | undefined;
  /** Counted so `flush` waits for the rows buffered before it, not for an empty buffer (D4). */
  #rowsAdded = 0;
  #rowsSettled = 0;
  #spaceWaiters: (() => void)[] = [];
  #idleWaiters: (() => void)[] = [];
  /** Aborts statements held in a retry loop (shutdown budget exhausted). */
  readonly #abort = new AbortController();
  /** For the 30 s summary line (docs/logging.md#summaries). */
  readonly #interval = { flushes: 0, rows: 0 };
  #totalRows = 0;
  // Read by the consumer's in-flight window, through ShardedWriter.load.
  #statementRows = 0;
  #statementSince: number | undefined;
  #typicalStatementMs = 0;

  constructor(options: TableWriterOptions) {
    this.table = options.table;
    this.#o = options;
    this.#batchSize = options.batchSize;
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
   * Hand rows of one job to the writer. Resolves once all are buffered (the job's tracker tells
   * of the commit); waits while the buffer is full (backpressure). `signal`: the drain deadline.
   *
   * @throws {WorkerError} (code `writer_closed`) After {@link close}.
   */
  async add(rows: readonly Row[], owner: JobTracker, signal?: AbortSignal): Promise<void> {
    let i = 0;
    while (i < rows.length) {
      if (this.#closed) throw writerClosed(this.table.name, "add rows");
      // Capacity: one batch waiting plus the statement in flight (2 × batch per table).
      let room = this.#batchSize - this.#buffer.length;
      if (room <= 0) {
        signal?.throwIfAborted();
        await waitIn(this.#spaceWaiters, signal);
        continue;
      }
      for (; room > 0 && i < rows.length; room--, i++) {
        this.#buffer.push({ owner, row: rows[i] as Row });
        this.#rowsAdded++;
      }
      this.#kick();
    }
  }

  /**
   * Commit everything buffered before this call (core restart D4, shutdown), within `signal`.
   *
   * @throws {WorkerError} (code `writer_closed`) After {@link close}.
   */
  async flush(signal?: AbortSignal): Promise<void> {
    const target = this.#rowsAdded;
    while (this.#rowsSettled < target) {
      if (this.#closed) throw writerClosed(this.table.name, "flush");
      // Rows not yet settled are in flight or buffered, so the buffer is not empty here.
      if (this.#inFlight === undefined) this.#startStatement();
      await this.#waitIdle(signal);
    }
  }

  /**
   * Commit what is buffered, then send nothing (rows keep buffering) while `fn` runs
   * (docs/payloads.md#core-restart). `signal` bounds the flush.
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
   * Commit what is buffered within `signal`, then refuse new rows. A statement still held, or still
   * waiting for MySQL's answer, when `signal` aborts is given up: its jobs are redelivered (D1).
   * Later calls share the first.
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
      clearImmediate(this.#timer);
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

  /** Log and reset the interval summary; `final` (shutdown) logs it even with nothing written. */
  logStats(final = false): void {
    const s = this.#interval;
    if (s.flushes === 0 && (!final || this.#totalRows === 0)) return;
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

  #waitIdle(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#inFlight === undefined && (this.#buffer.length === 0 || this.#paused > 0)) {
      return Promise.resolve();
    }
    return waitIn(this.#idleWaiters, signal);
  }

  /** Send a statement now (a full batch, or `partial` ones), soon, or not at all. */
  #kick(partial = false): void {
    // Closed: what is still buffered stays, reported by close() and redelivered (D1).
    if (this.#closed) return;
    if (this.#inFlight !== undefined || this.#paused > 0 || this.#buffer.length === 0) return;
    if (partial || this.#buffer.length >= this.#batchSize) {
      this.#startStatement();
      return;
    }
    // A partial batch: send once every handler woken in this turn handed its rows over; not
    // setTimeout(0), which nesting clamps to 4 ms (docs/writers.md#group-commit).
    this.#timer ??= setImmediate(() => {
      this.#timer = undefined;
      this.#kick(true);
    });
  }

  #startStatement(): void {
    clearImmediate(this.#timer);
    this.#timer = undefined;
    const batch = this.#buffer.splice(0, this.#batchSize);
    for (let n = batch.length; n > 0 && this.#spaceWaiters.length > 0; n--) {
      this.#spaceWaiters.shift()?.();
    }
    const since = performance.now();
    this.#statementRows = batch.length;
    this.#statementSince = since;
    this.#inFlight = this.#write(batch).finally(() => {
      const ms = performance.now() - since;
      this.#o.metrics?.dbBatchFlushDuration.observe({ table: this.table.name }, ms / 1000);
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
    try {
      await this.#commitOrIsolate(batch);
    } catch (err: unknown) {
      if (this.#abort.signal.aborted) {
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
      this.#o.metrics?.pipelineErrors.inc({ component: "mysql" });
      const failure = new MysqlWriteError(this.table.name, err);
      for (const p of batch) {
        if (!p.settled) await this.#deadLetter(p, failure).catch(() => {});
      }
    }
  }

  /**
   * Commit `batch`; rows MySQL refuses are isolated by halves and dead-lettered (D7). When both
   * halves fail with the same `statement` error, MySQL is at fault, not the rows: they are held.
   */
  async #commitOrIsolate(batch: Pending[]): Promise<void> {
    let failure = await this.#send(batch, true);
    if (failure === undefined) return;
    // One error per rejected flush, not one per halving step.
    this.#o.metrics?.pipelineErrors.inc({ component: "mysql" });
    if (batch.length > 1) {
      log.error("db: bulk insert rejected, isolating the offending rows", {
        table: this.table.name,
        rows: batch.length,
        error: failure.message,
      });
    }
    let rows = batch;
    let hold: Backoff | undefined;
    const scope = {
      table: this.table.name,
      availability: this.#o.availability,
      signal: this.#abort.signal,
    };
    for (;;) {
      const held = await this.#isolate(rows, failure);
      if (held === undefined) {
        // Held rows turned out to be rejected after all: the outage is over without a commit.
        if (hold !== undefined) this.#o.availability.abandon(this.table.name, scope);
        return;
      }
      if (hold === undefined) {
        hold = new Backoff(MYSQL_HOLD);
        log.warn(
          "db: MySQL refuses the statement whatever rows it carries, holding them instead of dead-lettering",
          {
            table: this.table.name,
            rows: held.rows.length,
            error: held.error.message,
          },
        );
      }
      rows = held.rows;
      this.#o.availability.unreachable(this.table.name, held.error, scope);
      this.#o.metrics?.dbConnectionRetries.inc();
      await pauseHeld(hold, scope);
      failure = await this.#send(rows, false, scope);
      if (failure === undefined) return;
    }
  }

  /**
   * `batch` was rejected with `failure`: dead-letter it if it is one row, else try its halves.
   * Returns the rows to hold: both halves of a split failed alike with a `statement` error, or one
   * row did and MySQL refuses the same statement without a row as well.
   */
  async #isolate(batch: Pending[], rejection: MysqlWriteError): Promise<Held | undefined> {
    let failure: MysqlWriteError | undefined = rejection;
    if (batch.length === 1) {
      // No other half to compare with: the statement without a row tells whether MySQL refuses
      // the statement itself (docs/writers.md#retry-policy).
      if (failure.kind === "statement") {
        const empty = await this.#rejectsEmpty(batch);
        if (empty !== undefined) return { rows: batch, error: empty };
        // Taken: the fault may have been mended since, so the row is sent once more.
        failure = await this.#send(batch, false);
        if (failure === undefined) return undefined;
      }
      // Its job may have been given back while the other parts of the split were sent (held
      // through an outage): the worker that takes the job handles the row, not this one.
      if (this.#dropWithdrawn(batch).length === 1) {
        await this.#deadLetter(batch[0] as Pending, failure);
      }
      return undefined;
    }
    const half = Math.ceil(batch.length / 2);
    const first = batch.slice(0, half);
    const second = batch.slice(half);
    const firstFailure = await this.#send(first, false);
    const secondFailure = await this.#send(second, false);
    if (
      firstFailure?.kind === "statement" && secondFailure?.kind === "statement" &&
      sameMysqlError(firstFailure, secondFailure)
    ) {
      return { rows: batch, error: secondFailure };
    }
    const heldFirst = firstFailure && (await this.#isolate(first, firstFailure));
    const heldSecond = secondFailure && (await this.#isolate(second, secondFailure));
    if (heldFirst === undefined) return heldSecond;
    if (heldSecond === undefined) return heldFirst;
    return { rows: [...heldFirst.rows, ...heldSecond.rows], error: heldSecond.error };
  }

  /**
   * Send `batch` as one statement under the retry policy. Returns undefined once committed, or
   * MySQL's rejection (`row` or `statement`); throws the abort reason at shutdown.
   */
  async #send(
    batch: Pending[],
    top: boolean,
    holder?: HoldScope,
  ): Promise<MysqlWriteError | undefined> {
    // Rows of jobs given back to the broker are dropped, before the first attempt and whenever a
    // held statement is sent again (docs/retries.md#give-back): another worker writes them.
    let live = this.#dropWithdrawn(batch);
    if (live.length === 0) {
      if (holder !== undefined) this.#o.availability.abandon(this.table.name, holder);
      return undefined;
    }
    let statement = this.#statement(live, top);
    let attempts = 0;
    const retry = {
      table: this.table.name,
      availability: this.#o.availability,
      signal: this.#abort.signal,
      withdrawn: () => live.every((p) => p.owner.withdrawn),
      metrics: this.#o.metrics,
      holder,
    };
    try {
      await runWithRetry(() => {
        if (attempts++ > 0 && live.some((p) => p.owner.withdrawn)) {
          live = this.#dropWithdrawn(live);
          statement = this.#statement(live, false);
        }
        // close() keeps its budget when MySQL does not answer (frozen, no statement timeout or a
        // longer one): the statement is given up, its jobs redelivered (D1).
        return abortable(
          this.#o.executor.run(statement.sql, statement.values, { prepared: true }),
          this.#abort.signal,
        );
      }, retry);
    } catch (err: unknown) {
      const rejection = this.#rejection(err, holder ?? retry);
      if (rejection === undefined) this.#dropWithdrawn(live);
      return rejection;
    }
    this.#interval.flushes++;
    this.#interval.rows += live.length;
    this.#totalRows += live.length;
    this.#o.metrics?.dbEventsWritten.inc({ table: this.table.name }, live.length);
    this.#o.metrics?.dbFlushes.inc({ table: this.table.name });
    log.debug("db: bulk insert flushed", { table: this.table.name, rows: live.length });
    // Before the jobs learn of the commit: whoever they tell then finds it recorded.
    this.#o.onCommitted?.(live.map((p) => p.row));
    for (const p of live) {
      p.settled = true;
      p.owner.committed();
    }
    return undefined;
  }

  /**
   * Send this table's statement with no row under the retry policy (`batch`: the row it stands
   * for, whose job may be given back meanwhile). Returns MySQL's rejection, or undefined.
   */
  async #rejectsEmpty(batch: Pending[]): Promise<MysqlWriteError | undefined> {
    const sql = emptyInsertStatement(this.table);
    const retry = {
      table: this.table.name,
      availability: this.#o.availability,
      signal: this.#abort.signal,
      withdrawn: () => batch.every((p) => p.owner.withdrawn),
      metrics: this.#o.metrics,
    };
    try {
      await runWithRetry(
        () => abortable(this.#o.executor.run(sql, []), this.#abort.signal),
        retry,
      );
      return undefined;
    } catch (err: unknown) {
      return this.#rejection(err, retry);
    }
  }

  /**
   * What `runWithRetry` failing with `err` means: MySQL's rejection (`row` or `statement`), or
   * undefined when every row's job was given back. Throws the abort reason at shutdown: given up,
   * answered or not, is not a rejection and is never isolated (#write logs it).
   */
  #rejection(err: unknown, holder: HoldScope): MysqlWriteError | undefined {
    if (this.#abort.signal.aborted) {
      this.#o.availability.abandon(this.table.name, holder);
      throw this.#abort.signal.reason;
    }
    if (err instanceof MysqlWriteError) return err;
    if (hasCode(err, "statement_withdrawn")) return undefined;
    throw err;
  }

  /** The rows of `batch` whose job was not given back; the others are settled without a commit. */
  #dropWithdrawn(batch: Pending[]): Pending[] {
    let live: Pending[] | undefined;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i] as Pending;
      if (!p.owner.withdrawn) {
        live?.push(p);
        continue;
      }
      live ??= batch.slice(0, i);
      p.settled = true;
    }
    if (live === undefined) return batch;
    log.debug("db: rows of jobs given back dropped from the batch", {
      ...this.#logFields,
      rows: batch.length - live.length,
    });
    return live;
  }

  #statement(batch: Pending[], top: boolean): { sql: string; values: SqlValue[] } {
    const sql = insertStatement(this.table, batch.length);
    // One array of the final length (pushing 30,000 values grows it in steps); each row fitted at
    // its own offset cannot shift the next one's placeholders (docs/writers.md#statement-shape).
    const width = this.table.insertColumns.length;
    const values = new Array<SqlValue>(batch.length * width);
    const adjustments: ValueAdjustment[] = [];
    for (let r = 0; r < batch.length; r++) {
      appendAdjustedRow(this.table, (batch[r] as Pending).row, values, adjustments, r * width);
    }
    // Counted once per row: the sends that isolate or hold rows fit them again.
    if (top) this.#o.metrics?.dbBatchSizeAtFlush.observe(batch.length);
    if (top && adjustments.length > 0 && this.#o.metrics !== undefined) {
      const byReason = new Map<string, number>();
      for (const a of adjustments) byReason.set(a.reason, (byReason.get(a.reason) ?? 0) + 1);
      for (const [reason, n] of byReason) {
        this.#o.metrics.dbValuesAdjusted.inc({ table: this.table.name, reason }, n);
      }
    }
    return { sql, values };
  }

  /** Dead-letter one rejected row; a failed write is retried until the file takes it (D7). */
  async #deadLetter(p: Pending, err: MysqlWriteError): Promise<void> {
    let retry: Backoff | undefined;
    for (;;) {
      try {
        await this.#o.deadLetters.write({
          queue: p.owner.queue,
          reason: "sql_rejected",
          error: err.message,
          table: this.table.name,
          row: p.row,
        });
        break;
      } catch {
        // Abortable, so close() keeps its budget; the job then stays unacknowledged.
        retry ??= new Backoff(DEAD_LETTER_RETRY);
        await delay(retry.next(), { signal: this.#abort.signal });
      }
    }
    // Logged once the file took the record: a line before it would be untrue while writes fail.
    log.error("db: row rejected by MySQL, written to the dead-letter file", {
      table: this.table.name,
      queue: p.owner.queue,
      error: err.message,
    });
    p.settled = true;
    p.owner.deadLetter();
  }
}

/** Wait in `waiters` until woken, or reject with `signal`'s reason (leaving the queue). */
function waitIn(waiters: (() => void)[], signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      const i = waiters.indexOf(wake);
      if (i !== -1) waiters.splice(i, 1);
      reject(signal?.reason);
    };
    const wake = () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    };
    waiters.push(wake);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
