/**
 * The contract between the queue backends (Gearman, RabbitMQ) and the event
 * pipeline, and the transport seam between the backends and the consumer core
 * they share. The backends know nothing of MySQL; the pipeline knows nothing of
 * Gearman; nothing above the seam branches on the backend.
 *
 * The seam, top to bottom: the daemon holds a {@link QueueConsumer}; the core
 * asks each {@link LinkTarget} to open a {@link Link} (connect), starts it,
 * and drains, aborts or replaces it (close); a link takes jobs within its
 * queue's budget and hands each to the delivery engine as a {@link Delivery}
 * with an {@link Acknowledgement} (ack) and a {@link DeliveryScope}; a job not
 * acknowledged is given back by ending the link, never by a WORK_FAIL (it drops a background job).
 * {@link Link.giveBack} is that verb on purpose: while MySQL cannot take writes and another worker
 * consumes the queue ({@link LinkTarget.consumers}), the core hands the held jobs back to the
 * broker (docs/retries.md#give-back).
 *
 * D1: a job is acknowledged only when the handler's promise resolves, which
 * the pipeline does once every row of the job is committed (or dead-lettered,
 * D7). A rejection means "not done": the delivery engine retries the job
 * while its link lives, and otherwise leaves it unacknowledged for the broker
 * to hand out again.
 *
 * @module
 */

/** One job as handed to the pipeline. */
export interface Job {
  /** Queue (Gearman function) name, e.g. `statusngin_hoststatus`. */
  readonly queue: string;
  /** `host:port` of the job server (or the broker) that handed it out. */
  readonly server: string;
  /** Broker handle (Gearman job handle, AMQP delivery tag); valid on its link only. */
  readonly handle: string;
  /** Unique id given by the producer (may be empty). */
  readonly unique: string;
  /**
   * The workload, raw bytes: UTF-8 repair happens in the pipeline (docs/payloads.md#utf8-repair).
   * Valid until the delivery has ended (answered or given up): the backend then frees the buffer,
   * and every view of it reads as empty. What must outlive the delivery is copied or written
   * before.
   */
  readonly payload: Uint8Array;
  /**
   * When the backend received the job, epoch milliseconds (worker clock). A job may wait
   * (prefetch buffer, retries) before the pipeline runs it; times derived from its arrival
   * (the core-restart cutoff) use this, never the clock at handling time.
   */
  readonly receivedAt: number;
  /**
   * When the link (connection) that delivered the job was opened, epoch milliseconds (worker
   * clock). A job received soon after may have waited at the broker while no link was up; the
   * core-restart sweep then does not take the receive time for the restart's (docs/core-restart.md).
   * Absent: unknown.
   */
  readonly linkOpenedAt?: number;
}

/**
 * Handles one job.
 *
 * - Resolve: the job's rows are committed (or dead-lettered); the backend acknowledges it.
 * - Reject with a `WorkerError` with code `internal` or a built-in programming error (TypeError,
 *   RangeError, ReferenceError, SyntaxError): a bug, not a passing condition. Retried a
 *   few times, then dead-lettered with reason `internal` and completed, so one job that
 *   trips a bug cannot wedge its queue (a one-slot queue would otherwise stall for good).
 * - Reject with anything else: transient, the job is NOT acknowledged; the engine retries
 *   it with back-off while its link is alive and not draining.
 * - `signal` aborts when the job must be given up (drain deadline, D1 shutdown);
 *   a handler must then settle promptly. An abandoned job is redelivered by the broker.
 */
export type JobHandler = (job: Job, signal: AbortSignal) => Promise<void>;

/** How one delivery of a job ended, as counted in `statusengine_queue_jobs_total{result}`. */
export type JobResult =
  /** Acknowledged: the handler resolved, or the job was dead-lettered (too large, internal error). */
  | "completed"
  /** Not acknowledged: link lost, drain deadline, or handled after the link died. Redelivered by the broker. */
  | "abandoned";

/** Every {@link JobResult}, for pre-created metric series. */
export const JOB_RESULTS: readonly JobResult[] = ["completed", "abandoned"];

/** Why jobs were handed back to the broker, as counted in `statusengine_queue_jobs_given_back_total{reason}`. */
export type GiveBackReason =
  /** MySQL could not take writes for `--mysql-give-back-after` and another worker consumes the queue. */
  "mysql_unavailable";

/** Every {@link GiveBackReason}, for pre-created metric series. */
export const GIVE_BACK_REASONS: readonly GiveBackReason[] = ["mysql_unavailable"];

/**
 * The abort reason of a handler whose job was given back ({@link Link.giveBack}): what it handed to
 * the writers must not be written any more (another worker writes it), unlike a job given up at the
 * drain deadline.
 */
export class JobGivenBack extends Error {
  /** @param reason Why the job went back to the broker. */
  constructor(readonly reason: GiveBackReason) {
    super(`job given back to the broker (${reason})`);
    this.name = "JobGivenBack";
  }
}

/** What a consumer reports; the metrics layer implements it. */
export interface ConsumerObserver {
  /** A job was taken from the broker (before any decoding). */
  jobReceived(queue: string): void;
  /** A handler started (+1) or settled (−1). */
  inFlight(queue: string, delta: 1 | -1): void;
  /** One delivery ended. `seconds` is the time from receipt to the end of the handler. */
  jobDone(queue: string, result: JobResult, seconds: number): void;
  /** A failed attempt of a job that will be tried again on the same link. */
  jobRetried(queue: string): void;
  /** Connection state of one queue changed (1 = every link of the queue consuming, 0 = not). */
  queueConnected(queue: string, connected: boolean): void;
  /** A connection of the queue was re-established after a loss. */
  queueReconnected(queue: string): void;
  /** Jobs wait at the broker while the queue has room and takes none (true), or it took one again (false). */
  queueStalled(queue: string, stalled: boolean): void;
  /** Jobs the queue may hold in flight now changed (its adaptive window, or its fixed cap at start). */
  queueWindow(queue: string, jobs: number): void;
  /** Jobs waiting at the broker for the queue, read every so often; undefined = not known now. */
  queueBacklog(queue: string, jobs: number | undefined): void;
  /** Jobs of the queue in flight were handed back to the broker ({@link Link.giveBack}). */
  jobsGivenBack(queue: string, reason: GiveBackReason, jobs: number): void;
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
};

/** Why the delivery engine wrote a job to the dead-letter file itself. */
export type ConsumerDeadLetterReason = "too_large" | "internal";

/** Every {@link ConsumerDeadLetterReason}, for pre-created metric series. */
export const CONSUMER_DEAD_LETTER_REASONS: readonly ConsumerDeadLetterReason[] = [
  "too_large",
  "internal",
];

/** A job the delivery engine could not hand to the pipeline and dead-letters instead. */
export interface ConsumerDeadLetter {
  readonly job: Job;
  readonly reason: ConsumerDeadLetterReason;
  /** Human-readable detail. */
  readonly error: string;
  /** Size of the whole payload in bytes (for `too_large`, larger than `job.payload`). */
  readonly bytes: number;
}

/**
 * Writes a dead-letter record for the engine (the composition root binds it to
 * the dead-letter file); resolves once written, rejects when it could not be,
 * in which case the job stays unacknowledged and is retried. The record's
 * payload is freed when the delivery ends: a sink copies what it keeps.
 */
export type ConsumerDeadLetterSink = (record: ConsumerDeadLetter) => Promise<void>;

/** What the composition root holds of a backend's consumer: the one place that builds it picks it. */
export interface QueueConsumer {
  /** Connect and start consuming; throws when the broker cannot be used. */
  start(): Promise<void>;
  /** Stop consuming, drain within the drain timeout (D1), close. Idempotent, safe before start. */
  stop(): Promise<void>;
}

/**
 * One connection generation of a transport (a Gearman worker connection for one queue on one job
 * server, an AMQP connection with one channel per queue), built through one code path and never
 * repaired: when it ends, the supervisor builds the next one.
 */
export interface Link {
  /** Settles once, when the link ended: `undefined` after a deliberate close, else why. */
  readonly closed: Promise<Error | undefined>;
  /** Handlers of this link still running. */
  readonly inFlight: number;
  /** `performance.now()` when this link last received a job, or when it started consuming. */
  readonly lastReceivedAt: number;
  /** Begin consuming; called once, after the link was opened. */
  start(): void;
  /**
   * Stop taking jobs, let running handlers finish and acknowledge within
   * `signal` (then abort them; their jobs are redelivered), close.
   */
  drain(signal: AbortSignal): Promise<void>;
  /** Wait for the handlers of a lost link; when `signal` aborts first, abort them. */
  settled(signal: AbortSignal): Promise<void>;
  /** Close now; running handlers keep running but their acknowledgements are dropped. */
  abort(): Promise<void>;
  /**
   * Jobs wait at the broker while this link has room and takes none: ask for
   * work again (a lost wake-up must not become a silent stall).
   *
   * @param queue The stalled queue (a link of one queue may ignore it).
   */
  nudge(queue: string): void;
  /**
   * Hand every job of this link back to the broker and close it (docs/retries.md#give-back):
   * running handlers are aborted with a {@link JobGivenBack}, no acknowledgement goes out any more,
   * and closing the connection (Gearman) or the channels (RabbitMQ) requeues what was taken. Never
   * a WORK_FAIL. `closed` then settles with `undefined`.
   *
   * @param reason Why.
   * @returns Jobs that were in flight, per queue (queues with none are left out).
   */
  giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>>;
}

/** Where a link connects to and how it is built: what a backend gives the core. */
export interface LinkTarget {
  /** Queues a link of this target consumes. */
  readonly queues: readonly string[];
  /** Job server `host:port`, or the broker URL without secrets, for logs. */
  readonly server: string;
  /**
   * Build a link whose peer has answered: a TCP connection that a hung or
   * stopped server accepted is not "connected".
   *
   * @param signal Aborts the attempt (shutdown).
   * @returns An opened, not yet started link.
   */
  open(signal: AbortSignal): Promise<Link>;
  /**
   * Jobs of `queue` waiting at the broker for this target, for stall
   * detection; undefined when the broker cannot tell right now.
   *
   * @param queue Queue name.
   * @param signal Bounds the query.
   */
  backlog(queue: string, signal: AbortSignal): Promise<number | undefined>;
  /**
   * Workers consuming `queue` at this target's broker now, this one included (Gearman: the
   * workers column of the admin `status`; RabbitMQ: the consumer count of a passive declare);
   * undefined when the broker cannot tell right now.
   *
   * @param queue Queue name.
   * @param signal Bounds the query.
   */
  consumers(queue: string, signal: AbortSignal): Promise<number | undefined>;
}

/** One job as a link hands it to the delivery engine. */
export interface Delivery {
  readonly job: Job;
  /**
   * Size of the whole payload when it was larger than the job-size limit; the
   * transport then kept only its first KiB in `job.payload` and discarded the
   * rest unread.
   */
  readonly tooLarge?: number;
  /**
   * The buffer behind `job.payload` belongs to this delivery alone: the engine frees it when the
   * delivery ends. False when it is shared (a Gearman read buffer holding several packets).
   */
  readonly ownsPayload: boolean;
}

/** How the link answers a job, on the link that received it. */
export interface Acknowledgement {
  /**
   * WORK_COMPLETE / basic.ack. False when the link is gone (the job is then redelivered). A
   * transport that only queues the answer returns the boolean itself: no promise per job.
   */
  complete(): boolean | Promise<boolean>;
}

/** Signals of the link a delivery runs on. */
export interface DeliveryScope {
  /** Drain deadline reached: the handler is aborted and the job abandoned. */
  readonly abort: AbortSignal;
  /** The link drains or died: no further attempt; the job is abandoned if not done. */
  readonly stopRetries: AbortSignal;
}
