/**
 * The Gearman backend of the consumer core: one link target per (queue,
 * server) — one connection per queue registering exactly that queue's
 * function (G1), one per job server (D9) — each link a {@link QueueWorker}.
 * Budgets, delivery, reconnects, stall detection, stop and the summary line
 * are the core's.
 *
 * @module
 */
import { QueueWorker } from "./worker.ts";
import { adminStatus } from "./admin.ts";
import {
  type ConsumedQueue,
  Consumer,
  ConsumerStartError,
  type LinkContext,
  type WindowOptions,
} from "../consumer/consumer.ts";
import type { ConsumerDeadLetterSink, ConsumerObserver, JobHandler } from "../consumer/contract.ts";
import type { BackoffOptions } from "../consumer/backoff.ts";
import type { LinkTarget } from "../consumer/link.ts";
import type { Supervisor } from "../consumer/supervisor.ts";
import { getLogger } from "../log.ts";

const log = getLogger("gearman");

export { type ConsumedQueue, ConsumerStartError };

/** Options of {@link GearmanConsumer}. */
export interface GearmanConsumerOptions {
  /** `host:port` of every job server (D9). */
  readonly servers: readonly string[];
  readonly queues: readonly ConsumedQueue[];
  /** Most jobs in flight per queue (≥ 1), the hard cap of its window; in-order queues always get 1. */
  readonly maxJobsPerQueue: number;
  /** Adapt each queue's jobs in flight to its writers; absent = fixed at the cap. */
  readonly window?: WindowOptions;
  /** Payload bytes in flight across all queues; default 256 MiB. */
  readonly maxInFlightBytes?: number;
  /** A job above this many bytes is dead-lettered unread (`too_large`); default 64 MiB. */
  readonly maxJobSize?: number;
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  /** Records jobs that are too large or trip an internal error. */
  readonly deadLetter?: ConsumerDeadLetterSink;
  readonly retry?: BackoffOptions;
  readonly reconnectIntervalMs: number;
  /** Stop waits this long for running handlers before abandoning their jobs (G9). */
  readonly drainTimeoutMs: number;
  readonly heartbeatIntervalMs?: number;
  readonly heartbeatTimeoutMs?: number;
  /** Bound on connecting and on the server's first answer. */
  readonly connectTimeoutMs?: number;
  readonly idlePollMs?: number;
  /** Jobs waiting at a server that the queue does not take for this long = stalled; 0 disables. */
  readonly stallTimeoutMs?: number;
  /** Prefix of the SET_CLIENT_ID shown in `gearadmin --workers`. */
  readonly clientIdPrefix?: string;
  /** Interval of the per-queue summary line; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number;
}

/** Consumes every queue from every job server. */
export class GearmanConsumer {
  readonly #core: Consumer;

  /**
   * @param options Servers, queues, caps, handler, observer and timings.
   * @throws {RangeError} On an empty queue or server list, or a cap below 1.
   */
  constructor(options: GearmanConsumerOptions) {
    if (options.servers.length === 0) {
      throw new RangeError("Cannot create Gearman consumer: no job server address");
    }
    const o = options;
    this.#core = new Consumer({
      name: "gearman",
      log,
      queues: o.queues,
      maxJobsPerQueue: o.maxJobsPerQueue,
      ...(o.window === undefined ? {} : { window: o.window }),
      ...(o.maxInFlightBytes === undefined ? {} : { maxInFlightBytes: o.maxInFlightBytes }),
      handler: o.handler,
      observer: o.observer,
      ...(o.deadLetter === undefined ? {} : { deadLetter: o.deadLetter }),
      ...(o.retry === undefined ? {} : { retry: o.retry }),
      targets: (context) => o.queues.flatMap((q) => o.servers.map((s) => target(o, q, s, context))),
      reconnectIntervalMs: o.reconnectIntervalMs,
      drainTimeoutMs: o.drainTimeoutMs,
      ...(o.stallTimeoutMs === undefined ? {} : { stallTimeoutMs: o.stallTimeoutMs }),
      ...(o.statsIntervalMs === undefined ? {} : { statsIntervalMs: o.statsIntervalMs }),
      describe: { servers: o.servers.join(",") },
      serverNoun: "job server",
    });
  }

  /**
   * The hard cap of a queue: 1 for in-order queues, the configured value otherwise.
   *
   * @param queue The queue.
   * @returns The most jobs the queue may hold in flight at once.
   */
  capFor(queue: ConsumedQueue): number {
    return this.#core.capFor(queue);
  }

  /** Jobs `queue` may hold in flight now (its window, or its cap without one). */
  windowOf(queue: string): number {
    return this.#core.windowOf(queue);
  }

  /** Jobs currently holding a slot of `queue` (handlers running plus grabs outstanding). */
  slotsInUse(queue: string): number {
    return this.#core.slotsInUse(queue);
  }

  /** Payload bytes held by jobs in flight and outstanding grabs. */
  get bytesInFlight(): number {
    return this.#core.bytesInFlight;
  }

  /** Whether every job-server connection of `queue` is up and answered. */
  connected(queue: string): boolean {
    return this.#core.connected(queue);
  }

  /** Whether `queue` has jobs waiting that it does not take. */
  stalled(queue: string): boolean {
    return this.#core.stalled(queue);
  }

  /** One supervisor per (queue, server) (tests). */
  get supervisors(): readonly Supervisor[] {
    return this.#core.supervisors;
  }

  /**
   * Connect every (queue, server) pair in parallel and start consuming.
   * Fails only when no job server at all can be reached; pairs that could not
   * connect keep retrying in the background.
   *
   * @throws {ConsumerStartError} When every connection attempt failed.
   */
  start(): Promise<void> {
    return this.#core.start();
  }

  /** Stop every queue in parallel (G9). Idempotent. */
  stop(): Promise<void> {
    return this.#core.stop();
  }
}

function target(
  o: GearmanConsumerOptions,
  queue: ConsumedQueue,
  server: string,
  context: LinkContext,
): LinkTarget {
  const budget = context.budget(queue.name);
  const clientId = o.clientIdPrefix === undefined
    ? undefined
    : `${o.clientIdPrefix}-${queue.name}-${Deno.pid}`;
  return {
    queues: [queue.name],
    server,
    open: (signal) =>
      QueueWorker.open({
        queue: queue.name,
        server,
        budget,
        engine: context.engine,
        ...(clientId === undefined ? {} : { clientId }),
        ...(o.idlePollMs === undefined ? {} : { idlePollMs: o.idlePollMs }),
        connect: {
          signal,
          ...(o.heartbeatIntervalMs === undefined
            ? {}
            : { heartbeatIntervalMs: o.heartbeatIntervalMs }),
          ...(o.heartbeatTimeoutMs === undefined
            ? {}
            : { heartbeatTimeoutMs: o.heartbeatTimeoutMs }),
          ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
          ...(o.maxJobSize === undefined ? {} : { maxBodySize: o.maxJobSize }),
        },
      }),
    async backlog(name, signal) {
      const rows = await adminStatus(server, { signal });
      const row = rows.find((r) => r.function === name);
      return row === undefined ? 0 : Math.max(0, row.total - row.running);
    },
  };
}
