/**
 * Safe scale-out for the in-order queues (`statusngin_downtimes`, handled strictly in order): when
 * several workers share a job server, only the one holding a MySQL named lock consumes them,
 * through a consumer of their own that is started while the lock is held and stopped when another
 * worker has taken it.
 *
 * A lone worker keeps its place: when the lock's connection dies (MySQL restarted, the
 * connection killed, a network cut) the worker keeps its in-flight in-order job, admits no
 * new one, and takes the same lock again on a new connection (see named_lock.ts). It hands
 * the queues back only when it finds the lock held by another worker. Handing the job back
 * on every dropped connection was what reordered it: gearmand re-queues an unacknowledged
 * job at the tail, behind the jobs published after it (a downtime's ADD landed behind its
 * START, and the START was lost).
 *
 * Why two workers never consume at the same time:
 * - MySQL frees the lock only when the holder's connection ends. A holder that dies (SIGKILL,
 *   crash) also loses its broker connections, so its unacknowledged job is back at the broker
 *   before anyone can hold the lock.
 * - A holder that lives on but lost its lock connection starts no new job until it has the
 *   lock again. If another worker took it meanwhile, the holder finds out at its next attempt
 *   (every poll, each bounded) and stops its in-order consumer (drain bounded by
 *   {@link IN_ORDER_DRAIN_MS}) before anything else.
 * - A new holder consumes only after holding the lock for {@link inOrderGraceMs}, which is
 *   longer than a check plus that drain, re-checking the lock meanwhile.
 *
 * What it cannot fix: the one job that was in flight when the old holder's lock connection
 * died may still commit (its write is held and retried) after the new holder applied jobs
 * queued behind it, and when the old holder stops, gearmand re-queues that job at the tail
 * (RabbitMQ re-queues it in place). A holder frozen longer than the grace (SIGSTOP, a
 * suspended VM) can likewise commit its job in flight late. The downtime statements are
 * written so that their order does not change the result; the gate keeps the queue applied
 * in the core's order wherever it can, which also keeps the unmatched-update warning of a
 * lost event meaningful.
 *
 * RabbitMQ's single-active-consumer would do the election in the broker, but it needs the
 * `x-single-active-consumer` argument at declaration, and the broker module declares its
 * queues without arguments: a different declaration is refused (406). So both backends use
 * the lock.
 *
 * @module
 */
import { type MysqlConnection, NamedLock } from "../mysql/mod.ts";
import { abortable } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** What the gate needs of a consumer: the public start/stop of every backend's consumer. */
export interface GatedConsumer {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Interval of lock attempts and liveness checks; also the bound of each lock query. */
export const IN_ORDER_LOCK_POLL_MS = 1_000;

/** Drain budget of the in-order consumer: one job in flight, a few statements. */
export const IN_ORDER_DRAIN_MS = 2_000;

/**
 * Grace before a new holder consumes: a previous holder that is taking its lock again finds
 * it taken at its next attempt, one poll later, after a connect and a `GET_LOCK` (each bounded
 * by about a poll: the connect by at least 1 s), and then drains within `drainMs`. Meanwhile
 * it starts no new job, so only its one job in flight can overlap a late detection.
 *
 * @param pollMs Lock poll interval.
 * @param drainMs Drain budget of the in-order consumer.
 * @returns Milliseconds.
 */
export function inOrderGraceMs(pollMs: number, drainMs: number): number {
  return 3 * pollMs + drainMs;
}

/**
 * Lock name of the in-order queues: one per database and node, since the workers of one
 * node (one core, one job server) share its queues, and other nodes' workers must not wait
 * for it. Hashed to stay within MySQL's 64 characters.
 *
 * @param database Database name.
 * @param nodeName `--node-name`.
 * @returns `statusengine_in_order_<40 hex>`.
 */
export async function inOrderLockName(database: string, nodeName: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-1",
    new TextEncoder().encode(`${database}\u0000${nodeName}`),
  );
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `statusengine_in_order_${hex}`;
}

/**
 * Waits until the gate admits a new in-order job: resolves at once while the lock is held,
 * waits while the holder takes its lock again, rejects once the lock went to another worker
 * or `signal` aborts.
 */
export type Admit = (signal: AbortSignal) => Promise<void>;

/** Raised to a job waiting for admission when another worker took the in-order lock. */
function lockLost(): WorkerError {
  return new WorkerError(
    "in_order_lock_lost",
    "the in-order lock was taken over by another worker; the job goes back to the broker",
  );
}

/**
 * Whether new in-order jobs may start: open while the lock is held, held (waiting) while the
 * holder re-acquires it, closed once it is lost. One per consumer the gate builds.
 */
export class Admission {
  #state: "open" | "waiting" | "closed" = "open";
  #waiting: PromiseWithResolvers<void> | undefined;

  /** Current state, for tests and logs. */
  get state(): "open" | "waiting" | "closed" {
    return this.#state;
  }

  /** The lock may no longer be ours: new jobs wait. */
  hold(): void {
    if (this.#state !== "open") return;
    this.#state = "waiting";
    this.#waiting = Promise.withResolvers<void>();
    // A waiter may be gone (aborted); the rejection must not be unhandled.
    this.#waiting.promise.catch(() => {});
  }

  /** The lock is ours again: waiting jobs go on. */
  open(): void {
    if (this.#state !== "waiting") return;
    this.#state = "open";
    this.#waiting?.resolve();
    this.#waiting = undefined;
  }

  /** The lock went to another worker: waiting and later jobs are refused. */
  close(): void {
    if (this.#state === "closed") return;
    this.#state = "closed";
    this.#waiting?.reject(lockLost());
    this.#waiting = undefined;
  }

  /** See {@link Admit}. */
  readonly admit: Admit = (signal) => {
    switch (this.#state) {
      case "open":
        return Promise.resolve();
      case "closed":
        return Promise.reject(lockLost());
      case "waiting":
        return abortable((this.#waiting as PromiseWithResolvers<void>).promise, signal);
    }
  };
}

/** Options of {@link InOrderGate}. */
export interface InOrderGateOptions {
  /**
   * A fresh consumer of the in-order queues (a stopped consumer cannot be started again);
   * its handler awaits `admit` before it starts a job.
   */
  readonly build: (admit: Admit) => GatedConsumer;
  /** Opens the lock's dedicated connection. */
  readonly connect: () => Promise<MysqlConnection>;
  readonly lockName: string;
  readonly pollMs: number;
  readonly graceMs: number;
  /** `statusengine_in_order_lock_held`. */
  readonly heldGauge?: { set(value: number): void };
}

/** Consumes the in-order queues only while this worker holds the lock. */
export class InOrderGate implements GatedConsumer {
  readonly #lock: NamedLock;
  #consumer: GatedConsumer | undefined;
  #admission: Admission | undefined;

  /** @param options Consumer factory, lock connection, name and timing. */
  constructor(options: InOrderGateOptions) {
    this.#lock = new NamedLock({
      connect: options.connect,
      name: options.lockName,
      pollMs: options.pollMs,
      graceMs: options.graceMs,
      ...(options.heldGauge === undefined ? {} : { heldGauge: options.heldGauge }),
      onHeld: async () => {
        const admission = new Admission();
        const consumer = options.build(admission.admit);
        try {
          await consumer.start();
        } catch (err: unknown) {
          admission.close();
          await consumer.stop();
          throw err;
        }
        this.#consumer = consumer;
        this.#admission = admission;
        log.info("worker: consuming the in-order queues (this worker holds the lock)");
      },
      onSuspect: () => this.#admission?.hold(),
      onRegained: () => this.#admission?.open(),
      onLost: async () => {
        const consumer = this.#consumer;
        this.#consumer = undefined;
        // A job waiting for admission is refused at once, so the drain need not wait for it.
        this.#admission?.close();
        this.#admission = undefined;
        try {
          await consumer?.stop();
        } catch (err: unknown) {
          log.error("worker: stopping the in-order consumer failed", {
            error: errorMessage(err),
          });
        }
      },
    });
  }

  /** Whether this worker currently consumes the in-order queues. */
  get active(): boolean {
    return this.#lock.active;
  }

  /** Whether it is taking its lock again after the lock's connection failed. */
  get reacquiring(): boolean {
    return this.#lock.reacquiring;
  }

  /** Start competing for the lock; returns at once (consuming starts when elected). */
  start(): Promise<void> {
    this.#lock.start();
    return Promise.resolve();
  }

  /** Stop consuming, then release the lock. Idempotent. */
  stop(): Promise<void> {
    return this.#lock.stop();
  }
}
