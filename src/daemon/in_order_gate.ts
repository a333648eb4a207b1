/**
 * Safe scale-out for the in-order queues (`statusngin_downtimes`, handled strictly in order): when
 * several workers share a job server, or write through different nodes of a Galera cluster, only
 * the one holding the in-order lease (a row of `statusengine_worker_leases`, see
 * src/mysql/lease.ts and docs/downtimes.md#galera) consumes them, through a consumer of their own
 * that is started once the lease is taken and stopped when it is lost or runs out.
 *
 * A lone worker keeps its place through short database outages: when a renewal fails (MySQL
 * restarted, the connection killed, a network cut) the worker keeps its in-flight in-order job,
 * admits no new one, and renews on a new connection. Handing the job back on every dropped
 * connection reordered it: gearmand re-queues an unacknowledged job at the tail, behind the jobs
 * published after it. Only when the lease's validity runs out (a few seconds before any other
 * worker may take it) does it stop the consumer, handing its job back.
 *
 * Why two workers never consume at the same time, on one server or a cluster:
 * - A waiting worker takes a held lease only after seeing it unrenewed for the whole term.
 * - The holder admits a job only while its lease is valid (its last renewal less than the
 *   term minus the drain and two polls ago), and stops its consumer, whose drain is bounded by
 *   {@link IN_ORDER_DRAIN_MS}, when the validity runs out.
 * - A holder that dies (SIGKILL, crash) also loses its broker connections, so its
 *   unacknowledged job is back at the broker long before its term ends.
 *
 * What it cannot fix: a holder frozen longer than its validity (SIGSTOP, a suspended VM) may,
 * once it runs again, finish the statement it was sending before its lease loop stops it. The
 * downtime statements are written so that their order does not change the result
 * (docs/downtimes.md); the lease keeps them from running at the same time on two nodes, which
 * Galera cannot make safe, and keeps the queue in the core's order wherever it can.
 *
 * RabbitMQ's single-active-consumer would do the election in the broker, but it needs the
 * `x-single-active-consumer` argument at declaration, and the broker module declares its
 * queues without arguments: a different declaration is refused (406). So both backends use
 * the lease.
 *
 * @module
 */
import { Lease, leaseTermMs, type MysqlConnection } from "../mysql/mod.ts";
import { abortable } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** What the gate needs of a consumer: the public start/stop of every backend's consumer. */
export interface GatedConsumer {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Interval of lease renewals and reads; also the bound of each lease query and connect. */
export const IN_ORDER_LOCK_POLL_MS = 1_000;

/** Drain budget of the in-order consumer: one job in flight, a few statements. */
export const IN_ORDER_DRAIN_MS = 2_000;

/**
 * Lease name of the in-order queues (the key of its row in `statusengine_worker_leases`): one
 * per node, since the workers of one node (one core, one job server) share its queues, and
 * other nodes' workers must not wait for it. Cut to the column's 255 characters (two nodes
 * whose names differ only after that share a lease, which only costs parallelism).
 *
 * @param nodeName `--node-name`.
 * @returns `in-order:<node name>`.
 */
export function inOrderLeaseName(nodeName: string): string {
  return [...`in-order:${nodeName}`].slice(0, 255).join("");
}

/**
 * A holder id unique among the workers and their restarts: the process id and a random part
 * (the worker logs it when it takes the lease, which says on which machine).
 *
 * @returns `pid <pid> <8 hex>`.
 */
export function leaseHolderId(): string {
  return `pid ${Deno.pid} ${crypto.randomUUID().slice(0, 8)}`;
}

/**
 * Waits until the gate admits a new in-order job: resolves at once while the lock is held,
 * waits while the holder takes its lock again, rejects once the lock went to another worker
 * or `signal` aborts.
 */
export type Admit = (signal: AbortSignal) => Promise<void>;

/** Raised to a job waiting for admission once the in-order lease was lost or given up. */
function lockLost(): WorkerError {
  return new WorkerError(
    "in_order_lock_lost",
    "the in-order lease is no longer this worker's; the job goes back to the broker",
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
  /** Opens the lease's dedicated connection. */
  readonly connect: () => Promise<MysqlConnection>;
  readonly leaseName: string;
  readonly holder: string;
  readonly pollMs: number;
  /** The in-order consumer's drain budget; the lease term allows for it. */
  readonly drainMs: number;
  /** `statusengine_in_order_lock_held`. */
  readonly heldGauge?: { set(value: number): void };
  /** `statusengine_in_order_lease_takeovers_total`. */
  readonly takeovers?: { inc(): void };
}

/** Consumes the in-order queues only while this worker holds the lease. */
export class InOrderGate implements GatedConsumer {
  readonly #lease: Lease;
  #consumer: GatedConsumer | undefined;
  #admission: Admission | undefined;

  /** @param options Consumer factory, lease connection, name, holder and timing. */
  constructor(options: InOrderGateOptions) {
    this.#lease = new Lease({
      connect: options.connect,
      name: options.leaseName,
      holder: options.holder,
      pollMs: options.pollMs,
      termMs: leaseTermMs(options.pollMs, options.drainMs),
      drainMs: options.drainMs,
      ...(options.heldGauge === undefined ? {} : { heldGauge: options.heldGauge }),
      ...(options.takeovers === undefined ? {} : { takeovers: options.takeovers }),
      onHeld: async () => {
        const admission = new Admission();
        // A job starts only while the lease is valid; past that it waits for the next renewal
        // (or is refused once the lease is given up).
        const admit: Admit = (signal) => {
          if (!this.#lease.valid) admission.hold();
          return admission.admit(signal);
        };
        const consumer = options.build(admit);
        try {
          await consumer.start();
        } catch (err: unknown) {
          admission.close();
          await consumer.stop();
          throw err;
        }
        this.#consumer = consumer;
        this.#admission = admission;
        log.info("worker: consuming the in-order queues (this worker holds the lease)");
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
    return this.#lease.active;
  }

  /** Whether it is renewing its lease after a renewal failed. */
  get reacquiring(): boolean {
    return this.#lease.reacquiring;
  }

  /** Start competing for the lease; returns at once (consuming starts when elected). */
  start(): Promise<void> {
    this.#lease.start();
    return Promise.resolve();
  }

  /** Stop consuming, then release the lease. Idempotent. */
  stop(): Promise<void> {
    return this.#lease.stop();
  }
}
