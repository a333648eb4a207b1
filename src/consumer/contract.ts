/**
 * The contract between a queue backend (Gearman, later AMQP) and the event
 * pipeline. The backend knows nothing of MySQL; the pipeline knows nothing of
 * Gearman.
 *
 * D1: a job is acknowledged only when the handler's promise resolves, which
 * the pipeline does once every row of the job is committed (or dead-lettered,
 * D7). A rejection means "not done": the job is not acknowledged, and the
 * backend retries it while its connection lives, or leaves it to be
 * redelivered by the broker.
 *
 * @module
 */

/** One job as handed to the pipeline. */
export interface Job {
  /** Queue (Gearman function) name, e.g. `statusngin_hoststatus`. */
  readonly queue: string;
  /** `host:port` of the job server that handed it out. */
  readonly server: string;
  /** Broker handle (Gearman job handle); valid on its connection only. */
  readonly handle: string;
  /** Unique id given by the producer (may be empty). */
  readonly unique: string;
  /** The workload, raw bytes: UTF-8 repair happens in the pipeline (P1). */
  readonly payload: Uint8Array;
  /**
   * When the backend received the job, epoch milliseconds (worker clock). A job may wait
   * (prefetch buffer, retries) before the pipeline runs it; times derived from its arrival
   * (the core-restart cutoff) use this, never the clock at handling time.
   */
  readonly receivedAt: number;
}

/**
 * Handles one job.
 *
 * - Resolve: the job's rows are committed (or dead-lettered); the backend acknowledges it.
 * - Reject with {@link DiscardJobError}: the job must be discarded (Gearman WORK_FAIL).
 *   Nothing in the pipeline uses this today (D7 dead-letters and completes instead);
 *   it exists so a discard is always an explicit decision.
 * - Reject with anything else: transient, the job is NOT acknowledged; the backend
 *   retries it with backoff while its connection is alive and not draining.
 * - `signal` aborts when the job must be given up (drain deadline, D1 shutdown);
 *   a handler must then settle promptly. An abandoned job is redelivered by the broker.
 */
export type JobHandler = (job: Job, signal: AbortSignal) => Promise<void>;

/** Rejection that asks the backend to discard the job for good. */
export class DiscardJobError extends Error {
  /**
   * @param message Why the job is discarded.
   * @param options Standard error options (`cause`).
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "DiscardJobError";
  }
}

/** How one delivery of a job ended, as counted in `statusengine_queue_jobs_total{result}`. */
export type JobResult =
  /** Handler resolved and the acknowledgement was written. */
  | "completed"
  /** Handler asked for a discard; WORK_FAIL written. */
  | "failed"
  /** Not acknowledged: connection lost, drain deadline, or handled after the link died. Redelivered by the broker. */
  | "abandoned";

/** Every {@link JobResult}, for pre-created metric series. */
export const JOB_RESULTS: readonly JobResult[] = ["completed", "failed", "abandoned"];

/** What a consumer reports; the metrics layer implements it. */
export interface ConsumerObserver {
  /** A job was taken from the broker (before any decoding). */
  jobReceived(queue: string): void;
  /** A handler started (+1) or settled (−1). */
  inFlight(queue: string, delta: 1 | -1): void;
  /** One delivery ended. `seconds` is the time from receipt to the end of the handler. */
  jobDone(queue: string, result: JobResult, seconds: number): void;
  /** A transient handler failure; the job will be retried on the same connection. */
  jobRetried(queue: string): void;
  /** Connection state of one queue changed (1 = every server connected, 0 = not). */
  queueConnected(queue: string, connected: boolean): void;
  /** A connection of the queue was re-established after a loss. */
  queueReconnected(queue: string): void;
}

/** An observer that records nothing (tools, tests). */
export const NOOP_OBSERVER: ConsumerObserver = {
  jobReceived() {},
  inFlight() {},
  jobDone() {},
  jobRetried() {},
  queueConnected() {},
  queueReconnected() {},
};
