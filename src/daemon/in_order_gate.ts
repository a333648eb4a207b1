/**
 * Safe scale-out for the in-order queues: only the worker holding the in-order lease (a row of
 * `statusengine_worker_leases`, src/mysql/lease.ts) consumes them, through a consumer of their own
 * started once the lease is taken and stopped when it is lost or runs out. Why two workers never
 * consume at once, why a failed renewal keeps the in-flight job (gearmand would re-queue it at the
 * tail) and what it cannot fix: docs/consumption.md#in-order-lock and docs/downtimes.md#galera.
 *
 * RabbitMQ's single-active-consumer would need `x-single-active-consumer` at declaration, and the
 * broker module declares its queues without arguments (a different declaration is refused, 406),
 * so both backends use the lease.
 *
 * @module
 */
import { Lease, leaseTermMs, type MysqlConnection } from "../mysql/mod.ts";
import { abortable } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** What the gate needs of a consumer. */
export interface GatedConsumer {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Interval of lease renewals and reads; also the bound of each lease query and connect. */
export const IN_ORDER_LOCK_POLL_MS = 1_000;

/** Drain budget of the in-order consumer: one job in flight, a few statements. */
export const IN_ORDER_DRAIN_MS = 2_000;

/**
 * Lease name of the in-order queues: one per node, since the workers of one node share its queues
 * and other nodes' must not wait. Cut to the column's 255 characters (a shared lease only costs
 * parallelism).
 */
export function inOrderLeaseName(nodeName: string): string {
  return [...`in-order:${nodeName}`].slice(0, 255).join("");
}

/** A holder id unique among workers and restarts: `pid <pid> <8 hex>`. */
export function leaseHolderId(): string {
  return `pid ${Deno.pid} ${crypto.randomUUID().slice(0, 8)}`;
}

/** Resolves when a new in-order job may start; rejects once the lock is lost or `signal` aborts. */
export type Admit = (signal: AbortSignal) => Promise<void>;

/** Raised to a job waiting for admission once the in-order lease was lost or given up. */
function lockLost(): WorkerError {
  return new WorkerError(
    "in_order_lock_lost",
    "the in-order lease is no longer this worker's; the job goes back to the broker",
  );
}

/** Whether new in-order jobs may start: open, waiting (re-acquiring), closed (lost). One per built consumer. */
export class Admission {
  #state: "open" | "waiting" | "closed" = "open";
  #waiting: PromiseWithResolvers<void> | undefined;

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

export interface InOrderGateOptions {
  /** A fresh consumer (a stopped one cannot restart) whose handler awaits `admit` first. */
  readonly build: (admit: Admit) => GatedConsumer;
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
