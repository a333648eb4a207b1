/**
 * The transport seam between the queue backends (Gearman, RabbitMQ) and the consumer core and
 * pipeline: nothing above it branches on the backend (docs/consumption.md). D1: a job is
 * acknowledged only once its handler resolved (see {@link JobHandler}); one not acknowledged is
 * given back by ending its link, never by a WORK_FAIL (it drops a background job).
 *
 * @module
 */

/** One job as handed to the pipeline. */
export interface Job {
  /** Queue (Gearman function) name, e.g. `statusngin_hoststatus`. */
  readonly queue: string;
  /** `host:port` of the job server (or the broker) that handed it out. */
  readonly server: string;
  /** Gearman job handle or AMQP delivery tag; valid on its link only. */
  readonly handle: string;
  /** Given by the producer (may be empty). */
  readonly unique: string;
  /**
   * Raw bytes (UTF-8 repair: docs/payloads.md#utf8-repair). Valid only until the delivery ends:
   * the backend then frees the buffer, so what must outlive it is copied first.
   */
  readonly payload: Uint8Array;
  /** Epoch ms the backend received it; arrival-based times (core-restart cutoff) use this. */
  readonly receivedAt: number;
  /** Epoch ms its link opened, if known: a job received soon after may have waited at the broker (docs/core-restart.md). */
  readonly linkOpenedAt?: number;
}

/**
 * Handles one job. Resolve: committed (or dead-lettered), acknowledge. Reject with a `WorkerError`
 * code `internal` or a built-in programming error: a bug, retried a few times then dead-lettered
 * (`internal`) so one job cannot wedge its queue. Any other rejection is transient: retried with
 * back-off while the link lives. `signal` aborts when the job is given up; settle promptly.
 */
export type JobHandler = (job: Job, signal: AbortSignal) => Promise<void>;

/**
 * How one delivery ended (`statusengine_queue_jobs_total{result}`): `completed` is acknowledged
 * (also when dead-lettered); `abandoned` is not (link lost, drain deadline) and is redelivered.
 */
export const JOB_RESULTS = ["completed", "abandoned"] as const;
export type JobResult = (typeof JOB_RESULTS)[number];

/**
 * Why jobs went back to the broker (`statusengine_queue_jobs_given_back_total{reason}`): MySQL
 * could not take writes for `--mysql-give-back-after` and another worker consumes the queue.
 */
export const GIVE_BACK_REASONS = ["mysql_unavailable"] as const;
export type GiveBackReason = (typeof GIVE_BACK_REASONS)[number];

/** Abort reason of a given-back job: unlike at the drain deadline, its rows must not be written (another worker will). */
export class JobGivenBack extends Error {
  constructor(readonly reason: GiveBackReason) {
    super(`job given back to the broker (${reason})`);
    this.name = "JobGivenBack";
  }
}

/** What a consumer reports; the metrics layer implements it. */
export interface ConsumerObserver {
  /** A job was taken from the broker (before any decoding). */
  jobReceived(queue: string): void;
  inFlight(queue: string, delta: 1 | -1): void;
  /** `seconds`: from receipt to the end of the handler. */
  jobDone(queue: string, result: JobResult, seconds: number): void;
  /** A failed attempt of a job is tried again on the same link, reported as the new attempt starts. */
  jobRetried(queue: string): void;
  /** Connection state of one queue changed (1 = every link of the queue consuming, 0 = not). */
  queueConnected(queue: string, connected: boolean): void;
  queueReconnected(queue: string): void;
  /** Jobs wait at the broker while the queue has room and takes none, or every slot holds a job that does not finish (true); it moves again (false). */
  queueStalled(queue: string, stalled: boolean): void;
  /** Jobs the queue may hold in flight now changed (its adaptive window, or its fixed cap at start). */
  queueWindow(queue: string, jobs: number): void;
  /** Jobs waiting at the broker for the queue, read every so often; undefined = not known now. */
  queueBacklog(queue: string, jobs: number | undefined): void;
  /** Jobs of the queue in flight were handed back to the broker ({@link Link.giveBack}). */
  jobsGivenBack(queue: string, reason: GiveBackReason, jobs: number): void;
  /** MySQL answered: no link of the queue is given back any more; it is not connected until rebuilt. */
  givenBackEnded(queue: string): void;
}

/** An observer that records nothing (tools, tests). */
export const NOOP_OBSERVER: ConsumerObserver = {
  jobReceived() {},
  inFlight() {},
  jobDone() {},
  jobRetried() {},
  queueConnected() {},
  queueReconnected() {},
  queueStalled() {},
  queueWindow() {},
  queueBacklog() {},
  jobsGivenBack() {},
  givenBackEnded() {},
};

/** Why the delivery engine wrote a job to the dead-letter file itself. */
export const CONSUMER_DEAD_LETTER_REASONS = ["too_large", "internal"] as const;
export type ConsumerDeadLetterReason = (typeof CONSUMER_DEAD_LETTER_REASONS)[number];

/** A job the delivery engine could not hand to the pipeline and dead-letters instead. */
export interface ConsumerDeadLetter {
  readonly job: Job;
  readonly reason: ConsumerDeadLetterReason;
  readonly error: string;
  /** Size of the whole payload in bytes (for `too_large`, larger than `job.payload`). */
  readonly bytes: number;
}

/** Writes a dead-letter record; a rejection leaves the job unacknowledged. The payload is freed when the delivery ends. */
export type ConsumerDeadLetterSink = (record: ConsumerDeadLetter) => Promise<void>;

/** What the composition root holds of a backend's consumer: the one place that builds it picks it. */
export interface QueueConsumer {
  /** Throws when the broker cannot be used. */
  start(): Promise<void>;
  /** Drain within the drain timeout (D1), close. Idempotent, safe before start. */
  stop(): Promise<void>;
}

/** One connection generation of a transport, never repaired: when it ends, the supervisor builds the next. */
export interface Link {
  /** Settles once, when the link ended: `undefined` after a deliberate close, else why. */
  readonly closed: Promise<Error | undefined>;
  readonly inFlight: number;
  /**
   * `performance.now()` when this link last received a job of `queue`, or when it started
   * consuming: per queue, as one RabbitMQ session serves them all.
   */
  receivedAt(queue: string): number;
  /** Called once, after the link was opened. */
  start(): void;
  /** Stop taking jobs, let running handlers finish within `signal` (then abort them), close. */
  drain(signal: AbortSignal): Promise<void>;
  /** Wait for the handlers of a lost link; when `signal` aborts first, abort them. */
  settled(signal: AbortSignal): Promise<void>;
  /** Close now; running handlers keep running but their acknowledgements are dropped. */
  abort(): Promise<void>;
  /** Jobs wait while this link has room and takes none: ask for work again (a lost wake-up). */
  nudge(queue: string): void;
  /**
   * Hand every job back by closing the link (docs/retries.md#give-back): handlers are aborted with
   * a {@link JobGivenBack}, no acknowledgement goes out. Returns jobs in flight per queue.
   */
  giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>>;
}

/** Where a link connects to and how it is built: what a backend gives the core. */
export interface LinkTarget {
  readonly queues: readonly string[];
  /** Job server `host:port`, or the broker URL without secrets, for logs. */
  readonly server: string;
  /** Build an opened, not yet started link whose peer has answered (an accepted TCP connection is not enough). */
  open(signal: AbortSignal): Promise<Link>;
  /** Jobs of `queue` waiting at the broker; undefined when it cannot tell now. */
  backlog(queue: string, signal: AbortSignal): Promise<number | undefined>;
  /** Workers consuming `queue` at the broker now, this one included; undefined when it cannot tell. */
  consumers(queue: string, signal: AbortSignal): Promise<number | undefined>;
}

/** One job as a link hands it to the delivery engine. */
export interface Delivery {
  readonly job: Job;
  /** Whole payload size when over the job-size limit; `job.payload` then holds only its first KiB. */
  readonly tooLarge?: number;
  /** The engine frees `job.payload` when the delivery ends; false for a shared read buffer. */
  readonly ownsPayload: boolean;
}

/** How the link answers a job, on the link that received it. */
export interface Acknowledgement {
  /** WORK_COMPLETE / basic.ack; false when the link is gone. A plain boolean avoids a promise per job. */
  complete(): boolean | Promise<boolean>;
}

/** Signals of the link a delivery runs on. */
export interface DeliveryScope {
  /** Drain deadline reached: the handler is aborted and the job abandoned. */
  readonly abort: AbortSignal;
  /** The link drains or died: no further attempt; the job is abandoned if not done. */
  readonly stopRetries: AbortSignal;
}
