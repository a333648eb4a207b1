/**
 * The core every perfdata backend besides MySQL shares: a bounded buffer, batches sent one at a
 * time, retries with backoff where the transport says a failure is temporary, and every lost point
 * counted with the reason. `push` never waits: a slow or dead endpoint only loses points, it never
 * holds up MySQL (docs/perfdata.md#no-backend-holds-up-mysql).
 *
 * @module
 */
import { deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";
import { Backoff, type BackoffOptions } from "../util/backoff.ts";
import { errorMessage, getLogger, LogThrottle } from "../log.ts";
import type { Row } from "../events/mod.ts";

const log = getLogger("perfdata");
const FAILURE_LOG_INTERVAL_MS = 60_000;
/** Points buffered at least, whatever the batch size. */
const MIN_BUFFER = 10_000;
/** Batches buffered at most; beyond, points are dropped. */
const BUFFER_BATCHES = 10;
/** A batch that is not full is sent this long after its first point. */
const FLUSH_INTERVAL_MS = 250;

/** Why points were dropped (the `reason` label of `statusengine_perfdata_dropped_total`). */
export const DROP_REASONS = ["buffer_full", "write_failed", "rejected", "out_of_order"] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/** A failed write; `retryable` when it may pass (e.g. HTTP 5xx or 429), not for e.g. HTTP 4xx. */
export class SinkWriteError extends Error {
  readonly retryable: boolean;
  /** How the batch's points are counted when it is dropped. */
  readonly reason: DropReason;
  /** `message`: what failed, with the server's answer; `reason` defaults to `write_failed`. */
  constructor(message: string, options: { retryable: boolean; reason?: DropReason }) {
    super(message);
    this.name = "SinkWriteError";
    this.retryable = options.retryable;
    this.reason = options.reason ?? "write_failed";
  }
}

/** Points of a batch the backend refused while it stored the others. */
export interface Refusal {
  readonly points: number;
  readonly reason: DropReason;
  /** The server's answer, for the log. */
  readonly error?: string;
}

/** Sends one batch; what differs between backends. */
export interface Transport<T> {
  /** Backend name for logs and metric labels (`graphite`, `influxdb`, `prometheus`). */
  readonly backend: string;
  /** Where it writes, secrets masked, for logs. */
  readonly target: string;
  /**
   * Send a batch. Resolves with the number of points the backend refused (0 normally; a number
   * is `out_of_order`, a {@link Refusal} names its reason); throws a {@link SinkWriteError} (or
   * any error, read as retryable) when the batch did not arrive.
   */
  write(batch: readonly T[], signal: AbortSignal): Promise<number | Refusal>;
  /** Forget connection state after a failure (the next write dials again). */
  reset?(): void;
}

/** What the core reports; the daemon maps it onto the metric catalogue. */
export interface SinkObserver {
  written(points: number): void;
  dropped(points: number, reason: DropReason): void;
  available(up: boolean): void;
  retried(): void;
  /** One failed write (counted once per batch, not per attempt). */
  failed(): void;
}

/** Retries of a batch whose write failed with a retryable error. */
export interface RetryPolicy {
  /** Further attempts after the first; 0 = drop at the first failure. */
  readonly retries: number;
  /** The pauses between the attempts of one batch (docs/retries.md). */
  readonly backoff: BackoffOptions;
}

export interface SinkOptions<T> {
  readonly transport: Transport<T>;
  readonly batchSize: number;
  /** Default: no retry. */
  readonly retry?: RetryPolicy;
  readonly observer?: SinkObserver;
  /** Interval of the write summary; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number | undefined;
}

/** A bounded, batching, never-blocking sender of points of type `T` to one backend. */
export class BatchingSink<T> {
  readonly #o: SinkOptions<T>;
  readonly #t: Transport<T>;
  readonly #capacity: number;
  #items: T[] = [];
  #flushing: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #statsTimer: ReturnType<typeof setInterval> | undefined;
  #closed = false;
  /** Aborted when the close budget is spent: backoff pauses and writes in flight end. */
  readonly #stop = new AbortController();
  #up = true;
  /** The last batch failed after all its retries (see #send). */
  #down = false;
  /** A line said points were dropped for a slow or dead endpoint; its return is logged. */
  #downLogged = false;
  readonly #interval = { flushes: 0, points: 0, dropped: 0 };
  #total = 0;

  constructor(options: SinkOptions<T>) {
    this.#o = options;
    this.#t = options.transport;
    // At least MIN_BUFFER points: while the worker decodes a burst of jobs the event loop runs
    // no write callbacks, and ten small Graphite batches overflowed with Carbon on this machine.
    this.#capacity = Math.max(options.batchSize * BUFFER_BATCHES, MIN_BUFFER);
    const every = options.statsIntervalMs ?? 30_000;
    this.#statsTimer = every > 0 ? setInterval(() => this.#logStats(false), every) : undefined;
  }

  /** Accept points, in sending order. Never waits: what does not fit is dropped and counted. */
  push(points: readonly T[]): void {
    if (this.#closed || points.length === 0) return;
    const room = Math.max(0, this.#capacity - this.#items.length);
    const accepted = Math.min(room, points.length);
    for (let i = 0; i < accepted; i++) this.#items.push(points[i] as T);
    if (accepted < points.length) this.#drop(points.length - accepted, "buffer_full");
    this.#schedule();
  }

  /** Send what is buffered within `budgetMs`, then stop; the rest is dropped and counted. */
  async close(budgetMs: number): Promise<void> {
    clearInterval(this.#statsTimer);
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#closed) return;
    this.#closed = true;
    using limit = deadline(budgetMs);
    const drain = (async () => {
      while (this.#items.length > 0 || this.#flushing !== undefined) {
        if (this.#stop.signal.aborted) break;
        await (this.#flushing ?? this.#flush());
      }
    })();
    await settledWithin(drain, limit.signal);
    this.#stop.abort();
    this.#t.reset?.();
    await drain.catch(() => {});
    if (this.#items.length > 0) this.#drop(this.#items.splice(0).length, "write_failed");
    this.#logStats(true);
  }

  #drop(points: number, reason: DropReason): void {
    this.#o.observer?.dropped(points, reason);
    this.#interval.dropped += points;
    if (reason === "buffer_full" && this.#logDue(reason)) {
      this.#downLogged = true;
      log.warn(`${this.#t.backend}: buffer full, points dropped`, {
        target: this.#t.target,
        points,
        buffered: this.#items.length,
        reason,
        hint: "the backend takes points slower than they arrive, or is down; " +
          "statusengine_perfdata_dropped_total counts them (repeats at most once a minute)",
      });
    }
    if (reason === "buffer_full" || reason === "write_failed") this.#setUp(false);
  }

  #setUp(up: boolean): void {
    this.#o.observer?.available(up);
    if (up === this.#up) return;
    this.#up = up;
    // Logged on the change only, and only after a line said points were dropped: a slow backend
    // whose buffer overflows between successful writes flips at every batch.
    if (up && this.#downLogged) {
      this.#downLogged = false;
      log.info(`${this.#t.backend}: writes succeed again`, { target: this.#t.target });
    }
  }

  #schedule(): void {
    if (this.#flushing !== undefined || this.#stop.signal.aborted) return;
    if (this.#items.length >= this.#o.batchSize) {
      void this.#flush();
      return;
    }
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      if (this.#flushing === undefined && this.#items.length > 0) void this.#flush();
    }, FLUSH_INTERVAL_MS);
  }

  #flush(): Promise<void> {
    const batch = this.#items.splice(0, this.#o.batchSize);
    this.#flushing = this.#send(batch).finally(() => {
      this.#flushing = undefined;
      if (this.#items.length > 0) this.#schedule();
    });
    return this.#flushing;
  }

  async #send(batch: T[]): Promise<void> {
    if (batch.length === 0) return;
    // Built on the first retry only: most batches never need it.
    let backoff: Backoff | undefined;
    for (let attempt = 0;; attempt++) {
      try {
        const answer = await this.#t.write(batch, this.#stop.signal);
        this.#down = false;
        const { points: refused, reason, error } = typeof answer === "number"
          ? { points: answer, reason: "out_of_order" as const, error: undefined }
          : answer;
        const written = batch.length - refused;
        this.#o.observer?.written(written);
        if (refused > 0) this.#refused(refused, batch.length, reason, error);
        this.#setUp(true);
        this.#interval.flushes++;
        this.#interval.points += written;
        this.#total += written;
        return;
      } catch (err: unknown) {
        this.#t.reset?.();
        const e = err instanceof SinkWriteError
          ? err
          : new SinkWriteError(errorMessage(err), { retryable: true });
        // Once a batch has used up its retries the endpoint counts as down, and the batches
        // behind it get one attempt each until a write succeeds: otherwise a dead endpoint would
        // drain the buffer at one batch per backoff cycle while newer points are dropped.
        const policy = this.#o.retry;
        const retry = policy !== undefined && e.retryable && !this.#down &&
          attempt < policy.retries && !this.#stop.signal.aborted;
        if (retry) {
          this.#o.observer?.retried();
          log.debug(`${this.#t.backend}: write failed, retrying`, {
            target: this.#t.target,
            attempt: attempt + 1,
            error: e.message,
          });
          backoff ??= new Backoff(policy.backoff);
          // Close cuts the pause short; the attempt after it is then the batch's last.
          await sleepUnlessAborted(backoff.next(), this.#stop.signal);
          continue;
        }
        this.#o.observer?.failed();
        if (e.retryable) this.#down = true;
        this.#drop(batch.length, e.reason);
        this.#logFailure(e, batch.length);
        return;
      }
    }
  }

  /** Points the server refused of a batch whose rest it stored; logged at most once a minute. */
  #refused(points: number, batch: number, reason: DropReason, error: string | undefined): void {
    this.#drop(points, reason);
    if (!this.#logDue(reason)) return;
    const fields = { target: this.#t.target, points, batch, reason };
    if (reason === "out_of_order") {
      log.warn(`${this.#t.backend}: points the server cannot take dropped`, {
        ...fields,
        hint: "older than the server keeps (retention) or than their series' newest point, or a " +
          "second value for one time, e.g. a redelivered job or a drained backlog (repeats at " +
          "most once a minute)",
      });
      return;
    }
    log.warn(`${this.#t.backend}: points the server refused dropped`, {
      ...fields,
      error,
      hint: "the server stored the rest of the batch; the error names the points it refused " +
        "(repeats at most once a minute)",
    });
  }

  /** Rate-limited by {@link #logDue}: a dead endpoint must show in the log without flooding it. */
  #logFailure(e: SinkWriteError, points: number): void {
    if (!this.#logDue(e.reason)) return;
    if (e.reason === "write_failed") this.#downLogged = true;
    log.error(`${this.#t.backend}: write failed, points dropped`, {
      target: this.#t.target,
      points,
      reason: e.reason,
      error: e.message,
      hint: e.reason === "write_failed"
        ? "is the server running and reachable? (repeats at most once a minute)"
        : "the server refused the data; see the error (repeats at most once a minute)",
    });
  }

  readonly #failureLines = new LogThrottle<DropReason>(FAILURE_LOG_INTERVAL_MS);

  /** Whether a line for `reason` may be logged now: one per reason and minute. */
  #logDue(reason: DropReason): boolean {
    return this.#failureLines.due(reason) !== undefined;
  }

  #logStats(final: boolean): void {
    const s = this.#interval;
    if (s.flushes === 0 && s.dropped === 0 && (!final || this.#total === 0)) return;
    log.info(`${this.#t.backend}: write stats`, {
      target: this.#t.target,
      flushes: s.flushes,
      points: s.points,
      points_per_flush: s.flushes === 0 ? 0 : Math.round((s.points / s.flushes) * 10) / 10,
      dropped: s.dropped,
      total_written: this.#total,
    });
    s.flushes = 0;
    s.points = 0;
    s.dropped = 0;
  }
}

/**
 * A {@link BatchingSink} fed with `statusengine_perfdata` rows; structurally the pipeline's
 * `PerfdataSink` (a sink must not import the pipeline that feeds it).
 */
export class PerfdataClient<T> extends BatchingSink<T> {
  readonly #point: (row: Row) => T | undefined;

  /** `point` is undefined for a row without a finite value. */
  constructor(
    transport: Transport<T>,
    point: (row: Row) => T | undefined,
    options: Pick<SinkOptions<T>, "batchSize" | "retry" | "observer" | "statsIntervalMs">,
  ) {
    super({ ...options, transport });
    this.#point = point;
  }

  /** Accept rows of `statusengine_perfdata`; never waits. */
  offer(rows: readonly Row[]): void {
    this.push(rows.map((row) => this.#point(row)).filter((p) => p !== undefined));
  }
}
