/**
 * Safe scale-out for the in-order queues (G3: `statusngin_downtimes`): when several workers
 * share a job server, only the one holding a MySQL named lock consumes them, through a
 * consumer of their own that is started while the lock is held and stopped when it is lost.
 *
 * Why order holds across a take-over:
 * - MySQL frees the lock only when the holder's connection ends. A holder that dies (SIGKILL,
 *   crash) also loses its broker connections, so its unacknowledged job is back at the broker
 *   before anyone can hold the lock.
 * - A holder that lives on but lost its lock connection (server restart, KILL, network) finds
 *   out at its next check, at most one poll plus one bounded query later, and first stops its
 *   in-order consumer (drain bounded by {@link IN_ORDER_DRAIN_MS}) before anything else.
 * - A new holder consumes only after holding the lock for {@link inOrderGraceMs}, which is
 *   longer than that detection plus that drain, re-checking the lock meanwhile. So the two
 *   never consume at the same time.
 *
 * What it cannot fix: gearmand re-queues an unacknowledged job at the tail of its queue, so
 * the one job in flight when a holder dies is applied after the jobs queued behind it
 * (RabbitMQ re-queues it in place); and a holder frozen longer than the grace (SIGSTOP, a
 * suspended VM) can commit its job in flight late.
 *
 * RabbitMQ's single-active-consumer would do the election in the broker, but it needs the
 * `x-single-active-consumer` argument at declaration, and the broker module declares its
 * queues without arguments: a different declaration is refused (406). So both backends use
 * the lock.
 *
 * @module
 */
import type mysql from "mysql2/promise";
import { NamedLock } from "../mysql/named_lock.ts";
import { errorMessage, getLogger } from "../log.ts";

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
 * Grace before a new holder consumes: a previous holder notices a loss within one poll plus
 * one query (each bounded by `pollMs`) and then drains within `drainMs`; one poll of margin.
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

/** Options of {@link InOrderGate}. */
export interface InOrderGateOptions {
  /** A fresh consumer of the in-order queues (a stopped consumer cannot be started again). */
  readonly build: () => GatedConsumer;
  /** Opens the lock's dedicated connection. */
  readonly connect: () => Promise<mysql.Connection>;
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

  /** @param options Consumer factory, lock connection, name and timing. */
  constructor(options: InOrderGateOptions) {
    this.#lock = new NamedLock({
      connect: options.connect,
      name: options.lockName,
      pollMs: options.pollMs,
      graceMs: options.graceMs,
      ...(options.heldGauge === undefined ? {} : { heldGauge: options.heldGauge }),
      onHeld: async () => {
        const consumer = options.build();
        try {
          await consumer.start();
        } catch (err: unknown) {
          await consumer.stop();
          throw err;
        }
        this.#consumer = consumer;
        log.info("worker: consuming the in-order queues (this worker holds the lock)");
      },
      onLost: async () => {
        const consumer = this.#consumer;
        this.#consumer = undefined;
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
