/**
 * The delivery engine: one job from arrival to acknowledgement (D1), the same for every backend:
 * handler, retry with back-off while the link lives, dead-letter (too large, internal error), or
 * leave unacknowledged for redelivery. Transports only receive jobs and acknowledge on the link
 * that received them (D12). `settleHandlers` is the one rule by which every link drains.
 *
 * @module
 */
import {
  type Acknowledgement,
  type ConsumerDeadLetterSink,
  type ConsumerObserver,
  type Delivery,
  type DeliveryScope,
  type Job,
  type JobHandler,
  type JobResult,
} from "./contract.ts";
import { Backoff, type BackoffOptions } from "../util/backoff.ts";
import { abortable, deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, type Logger, LogThrottle } from "../log.ts";
import { hasCode } from "../util/errors.ts";

/** What the delivery engine reports: the per-job part of a {@link ConsumerObserver}. */
export type JobObserver = Pick<
  ConsumerObserver,
  "jobReceived" | "inFlight" | "jobDone" | "jobRetried"
>;

export interface DeliveryEngineOptions {
  readonly handler: JobHandler;
  readonly observer: JobObserver;
  readonly deadLetter: ConsumerDeadLetterSink;
  /** Backend name, the prefix of log lines (`gearman`, `rabbitmq`). */
  readonly name: string;
  readonly log: Logger;
  /** Retry schedule of failed jobs; default 100 ms doubling to 5 s, ±20 %. */
  readonly retry?: BackoffOptions | undefined;
}

const DEFAULT_RETRY: BackoffOptions = { initialMs: 100, maxMs: 5_000, jitter: 0.2 };

/** Attempts of a job that hits a programming error before it is dead-lettered. */
const INTERNAL_ATTEMPTS = 3;

/** Repeated retry warnings of one queue are summarised at most this often. */
const RETRY_WARN_INTERVAL_MS = 10_000;

/** Whether a rejection is a bug in the worker rather than a passing condition. */
function isProgrammingError(err: unknown): boolean {
  return hasCode(err, "internal") || err instanceof TypeError ||
    err instanceof RangeError || err instanceof ReferenceError || err instanceof SyntaxError;
}

/** Runs deliveries for every link of one consumer. */
export class DeliveryEngine {
  readonly #handler: JobHandler;
  readonly #observer: JobObserver;
  readonly #deadLetter: ConsumerDeadLetterSink;
  readonly #log: Logger;
  readonly #name: string;
  readonly #retry: BackoffOptions;
  readonly #retryWarns = new LogThrottle<string>(RETRY_WARN_INTERVAL_MS);

  constructor(options: DeliveryEngineOptions) {
    this.#handler = options.handler;
    this.#observer = options.observer;
    this.#deadLetter = options.deadLetter;
    this.#log = options.log;
    this.#name = options.name;
    this.#retry = options.retry ?? DEFAULT_RETRY;
  }

  /** Handle one delivery to its end, answer it, and free its payload when the delivery owns it. */
  async deliver(
    delivery: Delivery,
    ack: Acknowledgement,
    scope: DeliveryScope,
  ): Promise<JobResult> {
    const { job } = delivery;
    try {
      const started = performance.now();
      this.#observer.jobReceived(job.queue);
      this.#observer.inFlight(job.queue, 1);
      let result: JobResult = "completed";
      try {
        // The first attempt is awaited here rather than in the retry loop: most jobs need no
        // other, and each async call on the way is one more promise per job.
        await this.#attempt(delivery, scope);
      } catch (err: unknown) {
        result = await this.#recover(delivery, scope, err);
      } finally {
        this.#observer.inFlight(job.queue, -1);
      }
      if (result === "completed") {
        // Gearman only queues its WORK_COMPLETE and answers at once; only AMQP's ack is awaited.
        const answered = ack.complete();
        if (answered === false || (answered !== true && !(await answered))) result = "abandoned";
      }
      this.#observer.jobDone(job.queue, result, (performance.now() - started) / 1000);
      return result;
    } finally {
      // Answered or given up: nothing reads the payload any more (a redelivery brings new bytes).
      if (delivery.ownsPayload) releaseBuffer(job.payload);
    }
  }

  /** One attempt: the handler, or the dead-letter record of a job too large to read. */
  #attempt(delivery: Delivery, scope: DeliveryScope): Promise<void> {
    const { job, tooLarge: bytes } = delivery;
    if (bytes !== undefined) {
      const kept = `first ${job.payload.length} bytes kept`;
      const error = `payload of ${bytes} bytes is larger than the job size limit; ${kept}`;
      return abortable(this.#deadLetter({ job, reason: "too_large", error, bytes }), scope.abort);
    }
    // A handler that ignores the abort must not hold its slot (and shutdown) hostage.
    return abortable(this.#handler(job, scope.abort), scope.abort);
  }

  /** After a failed attempt: retry with back-off, dead-letter an internal error, or give up. */
  async #recover(delivery: Delivery, scope: DeliveryScope, failure: unknown): Promise<JobResult> {
    const { job } = delivery;
    let err = failure;
    let backoff: Backoff | undefined;
    const stopped = () => scope.abort.aborted || scope.stopRetries.aborted;
    let internalFailures = 0;
    for (;;) {
      if (stopped()) return "abandoned";
      if (isProgrammingError(err) && ++internalFailures >= INTERNAL_ATTEMPTS) {
        if (await this.#deadLetterInternal(job, err, scope)) return "completed";
        if (stopped()) return "abandoned";
      }
      backoff ??= new Backoff(this.#retry);
      // Another worker took the in-order lease: the lease logs that, and its next renewal stops
      // this consumer, which gives the job back. Sooner attempts would only roll back again, and
      // a warning per job would repeat the lease's line in alarming words.
      const leaseLost = hasCode(err, "in_order_lock_lost");
      const waitMs = leaseLost ? this.#retry.maxMs : backoff.next();
      if (leaseLost) {
        this.#log.debug(`${this.#name}: in-order lease lost, the job goes back at the stop`, {
          queue: job.queue,
          handle: job.handle,
        });
      } else this.#warnRetry(job, err, waitMs);
      // Both link signals, not AbortSignal.any: a dependent signal per job would stay reachable
      // from them, listener and all, as long as the link lives.
      if (!(await sleepUnlessAborted(waitMs, scope.abort, scope.stopRetries))) return "abandoned";
      // Counted once the attempt really starts: a link that ended during the back-off retried nothing.
      this.#observer.jobRetried(job.queue);
      try {
        await this.#attempt(delivery, scope);
        return "completed";
      } catch (next: unknown) {
        err = next;
      }
    }
  }

  /** Returns true once the job is recorded; false when the record could not be written. */
  async #deadLetterInternal(job: Job, err: unknown, scope: DeliveryScope): Promise<boolean> {
    this.#log.error(`${this.#name}: internal error handling a job, dead-lettering it`, {
      queue: job.queue,
      server: job.server,
      handle: job.handle,
      attempts: INTERNAL_ATTEMPTS,
      error: errorMessage(err),
    });
    const bytes = job.payload.length;
    const record = { job, reason: "internal" as const, error: errorMessage(err), bytes };
    try {
      await abortable(this.#deadLetter(record), scope.abort);
      return true;
    } catch {
      // The sink logged why; the job stays unacknowledged and is tried again.
      return false;
    }
  }

  #warnRetry(job: Job, err: unknown, waitMs: number): void {
    const skipped = this.#retryWarns.due(job.queue);
    if (skipped === undefined) return;
    this.#log.warn(`${this.#name}: job failed, retrying it`, {
      queue: job.queue,
      server: job.server,
      handle: job.handle,
      retry_in_ms: Math.round(waitMs),
      retries_not_logged: skipped,
      error: errorMessage(err),
    });
  }
}

/** How long aborted handlers get to settle after the drain deadline. */
const ABORT_GRACE_MS = 1_000;

/**
 * Wait for a link's handlers within `signal`; when it aborts first, abort them (their jobs are
 * redelivered) and give them a moment to settle. `pending` is read again after the abort.
 */
export async function settleHandlers(
  pending: () => readonly Promise<unknown>[],
  signal: AbortSignal,
  abort: () => void,
): Promise<void> {
  if (await settledWithin(Promise.allSettled(pending()), signal)) return;
  abort();
  using grace = deadline(ABORT_GRACE_MS);
  await settledWithin(Promise.allSettled(pending()), grace.signal);
}

/**
 * Free the buffer behind `bytes` now: a payload promoted to V8's old generation would wait for a
 * full collection (a RabbitMQ drain at batch 700 peaked 20 MB higher). Only for a buffer its
 * caller owns alone: every view reads as empty afterwards.
 */
function releaseBuffer(bytes: Uint8Array): void {
  const buffer = bytes.buffer;
  if (!(buffer instanceof ArrayBuffer) || buffer.detached || buffer.byteLength === 0) return;
  buffer.transfer(0);
}
