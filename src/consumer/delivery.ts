/**
 * The delivery engine: what happens to one job between its arrival from a
 * broker and its acknowledgement, the same for every backend.
 *
 * deliver → handler → acknowledge (D1), or retry with back-off while the link
 * lives, or dead-letter (too large, internal error) and acknowledge, or leave
 * unacknowledged for the broker to hand out again. The transports (Gearman
 * worker connection, AMQP session) only receive jobs and write the
 * acknowledgement on the link that received them (D12). The engine frees a
 * payload its delivery owns once the delivery ended, and `settleHandlers` is
 * the one rule by which every link waits for its handlers when it drains.
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
import { errorMessage, type Logger } from "../log.ts";
import { hasCode } from "../util/errors.ts";

/** Options of {@link DeliveryEngine}. */
export interface DeliveryEngineOptions {
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  /** Where jobs that cannot be handled are recorded (too large, internal errors). */
  readonly deadLetter: ConsumerDeadLetterSink;
  /** Backend name, the prefix of its log lines (`gearman`, `rabbitmq`). */
  readonly name: string;
  /** Logger of the backend. */
  readonly log: Logger;
  /** Retry schedule after a transient failure; default 100 ms doubling to 5 s, ±20 %. */
  readonly retry?: BackoffOptions;
  /** Attempts of a job that hits a programming error before it is dead-lettered; default 3. */
  readonly internalAttempts?: number;
}

/** Default retry schedule of a failed job. */
const DEFAULT_RETRY: BackoffOptions = { initialMs: 100, maxMs: 5_000, jitter: 0.2 };

/** Repeated retry warnings of one queue are summarised at most this often. */
const RETRY_WARN_INTERVAL_MS = 10_000;

/**
 * Whether a rejection is a bug in the worker rather than a passing condition.
 *
 * @param err What the handler rejected with.
 * @returns True for `WorkerError` with code `internal` and the built-in programming errors.
 */
function isProgrammingError(err: unknown): boolean {
  return hasCode(err, "internal") || err instanceof TypeError ||
    err instanceof RangeError || err instanceof ReferenceError || err instanceof SyntaxError;
}

/** Runs deliveries for every link of one consumer. */
export class DeliveryEngine {
  readonly #handler: JobHandler;
  readonly #observer: ConsumerObserver;
  readonly #deadLetter: ConsumerDeadLetterSink;
  readonly #log: Logger;
  readonly #name: string;
  readonly #retry: BackoffOptions;
  readonly #internalAttempts: number;
  readonly #lastRetryWarn = new Map<string, { at: number; suppressed: number }>();

  /** @param options Handler, observer, dead-letter sink, logger and retry schedule. */
  constructor(options: DeliveryEngineOptions) {
    this.#handler = options.handler;
    this.#observer = options.observer;
    this.#deadLetter = options.deadLetter;
    this.#log = options.log;
    this.#name = options.name;
    this.#retry = options.retry ?? DEFAULT_RETRY;
    this.#internalAttempts = Math.max(1, options.internalAttempts ?? 3);
  }

  /** The observer every link reports to. */
  get observer(): ConsumerObserver {
    return this.#observer;
  }

  /**
   * Handle one delivery to its end, answer it, and free its payload when the delivery owns it.
   *
   * @param delivery The job (and whether it was too large to read, and owns its buffer).
   * @param ack Answers on the receiving link.
   * @param scope Abort and stop signals of that link.
   * @returns How the delivery ended.
   */
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
      // The job is answered or given up: nothing reads its payload any more (D1: a job not
      // acknowledged is handed out again by the broker, not re-run from these bytes).
      if (delivery.ownsPayload) releaseBuffer(job.payload);
    }
  }

  /** One attempt: the handler, or the dead-letter record of a job too large to read. */
  #attempt(delivery: Delivery, scope: DeliveryScope): Promise<void> {
    const { job } = delivery;
    if (delivery.tooLarge !== undefined) {
      return abortable(this.#deadLetterTooLarge(job, delivery.tooLarge), scope.abort);
    }
    // A handler that ignores the abort must not hold its slot (and
    // shutdown) hostage: once aborted, stop waiting for it.
    return abortable(this.#handler(job, scope.abort), scope.abort);
  }

  /** After a failed attempt: retry with back-off, dead-letter an internal error, or give up. */
  async #recover(delivery: Delivery, scope: DeliveryScope, failure: unknown): Promise<JobResult> {
    const { job } = delivery;
    let err = failure;
    let backoff: Backoff | undefined;
    // Built on the first retry only: most jobs never need it, and a dependent signal per job
    // costs two listeners on signals every job in flight shares.
    let stop: AbortSignal | undefined;
    const stopped = () => scope.abort.aborted || scope.stopRetries.aborted;
    let internalFailures = 0;
    for (;;) {
      if (stopped()) return "abandoned";
      if (isProgrammingError(err) && ++internalFailures >= this.#internalAttempts) {
        if (await this.#deadLetterInternal(job, err, scope)) return "completed";
        if (stopped()) return "abandoned";
      }
      this.#observer.jobRetried(job.queue);
      backoff ??= new Backoff(this.#retry);
      stop ??= AbortSignal.any([scope.abort, scope.stopRetries]);
      const waitMs = backoff.next();
      this.#warnRetry(job, err, waitMs);
      if (!(await sleepUnlessAborted(waitMs, stop))) return "abandoned";
      try {
        await this.#attempt(delivery, scope);
        return "completed";
      } catch (next: unknown) {
        err = next;
      }
    }
  }

  #deadLetterTooLarge(job: Job, bytes: number): Promise<void> {
    return this.#deadLetter({
      job,
      reason: "too_large",
      error:
        `payload of ${bytes} bytes is larger than the job size limit; first ${job.payload.length} bytes kept`,
      bytes,
    });
  }

  /** Returns true once the job is recorded; false when the record could not be written. */
  async #deadLetterInternal(job: Job, err: unknown, scope: DeliveryScope): Promise<boolean> {
    this.#log.error(`${this.#name}: internal error handling a job, dead-lettering it`, {
      queue: job.queue,
      server: job.server,
      handle: job.handle,
      attempts: this.#internalAttempts,
      error: errorMessage(err),
    });
    try {
      await abortable(
        this.#deadLetter({
          job,
          reason: "internal",
          error: errorMessage(err),
          bytes: job.payload.length,
        }),
        scope.abort,
      );
      return true;
    } catch {
      // The sink logged why; the job stays unacknowledged and is tried again.
      return false;
    }
  }

  #warnRetry(job: Job, err: unknown, waitMs: number): void {
    const now = performance.now();
    const last = this.#lastRetryWarn.get(job.queue);
    if (last !== undefined && now - last.at < RETRY_WARN_INTERVAL_MS) {
      last.suppressed++;
      return;
    }
    this.#lastRetryWarn.set(job.queue, { at: now, suppressed: 0 });
    this.#log.warn(`${this.#name}: job failed, retrying it`, {
      queue: job.queue,
      server: job.server,
      handle: job.handle,
      retry_in_ms: Math.round(waitMs),
      retries_not_logged: last?.suppressed ?? 0,
      error: errorMessage(err),
    });
  }
}

/** How long aborted handlers get to settle after the drain deadline. */
const ABORT_GRACE_MS = 1_000;

/**
 * Wait for a link's handlers within `signal`; when it aborts first, abort them
 * (their jobs stay unacknowledged and are redelivered) and give them a moment
 * to settle. One rule for every transport, so a handler that ignores its
 * abort cannot hold a drain beyond its deadline on one backend only.
 *
 * @param pending The handlers' promises, read again after the abort.
 * @param signal The drain deadline.
 * @param abort Aborts the handlers.
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
 * Free the memory behind `bytes` now. A job's payload usually lives long enough to be
 * promoted to V8's old generation, where its buffer would wait for the next full collection
 * (a RabbitMQ servicestatus drain at batch 700 peaked 20 MB higher that way); detaching the
 * buffer frees it at once. Every view of the buffer reads as empty afterwards, so this is only
 * for a buffer nothing else uses.
 *
 * @param bytes A view of a buffer its caller owns alone.
 */
function releaseBuffer(bytes: Uint8Array): void {
  const buffer = bytes.buffer;
  if (!(buffer instanceof ArrayBuffer) || buffer.detached || buffer.byteLength === 0) return;
  buffer.transfer(0);
}
