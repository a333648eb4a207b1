/**
 * The Gearman consumer: one supervisor per (queue, server) (G1, D9), one slot
 * pool per queue (G2/G3), a parallel drain on stop (G9), and the periodic
 * per-queue summary line (L2).
 *
 * @module
 */
import { Supervisor } from "./supervisor.ts";
import type { ConsumerObserver, JobHandler } from "../consumer/contract.ts";
import { ConsumerStats } from "../consumer/consumer_stats.ts";
import { SlotPool } from "../consumer/slot_pool.ts";
import { deadline } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("gearman");

/** One consumed queue. */
export interface ConsumedQueue {
  readonly name: string;
  /** Messages only make sense in sequence: one job at a time, whatever the cap (G3). */
  readonly inOrder: boolean;
}

/** Options of {@link GearmanConsumer}. */
export interface GearmanConsumerOptions {
  /** `host:port` of every job server (D9). */
  readonly servers: readonly string[];
  readonly queues: readonly ConsumedQueue[];
  /** Jobs in flight per queue (≥ 1); in-order queues always get 1. */
  readonly maxJobsPerQueue: number;
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  readonly reconnectIntervalMs: number;
  /** Stop waits this long for running handlers before abandoning their jobs (G9). */
  readonly drainTimeoutMs: number;
  readonly heartbeatIntervalMs?: number;
  readonly heartbeatTimeoutMs?: number;
  readonly connectTimeoutMs?: number;
  readonly idlePollMs?: number;
  /** Prefix of the SET_CLIENT_ID shown in `gearadmin --workers`. */
  readonly clientIdPrefix?: string;
  /** Interval of the per-queue summary line; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number;
}

/** Raised when start-up cannot reach any job server. */
export class ConsumerStartError extends Error {
  /**
   * @param message What failed.
   * @param options `cause`.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ConsumerStartError";
  }
}

/** Consumes every queue from every job server. */
export class GearmanConsumer {
  readonly #options: GearmanConsumerOptions;
  readonly #supervisors: Supervisor[] = [];
  readonly #pools = new Map<string, SlotPool>();
  readonly #up = new Map<string, Set<string>>();
  readonly #stats: ConsumerStats;
  #statsTimer: ReturnType<typeof setInterval> | undefined;
  #started = false;
  #stopping: Promise<void> | undefined;

  /**
   * @param options Servers, queues, cap, handler, observer and timings.
   * @throws {RangeError} On an empty queue or server list, or a cap below 1.
   */
  constructor(options: GearmanConsumerOptions) {
    if (options.queues.length === 0) {
      // One connection per queue: with none, start would "succeed" consuming nothing (G1).
      throw new RangeError("Cannot create Gearman consumer: no queues to consume");
    }
    if (options.servers.length === 0) {
      throw new RangeError("Cannot create Gearman consumer: no job server address");
    }
    if (!Number.isInteger(options.maxJobsPerQueue) || options.maxJobsPerQueue < 1) {
      throw new RangeError(
        `Cannot create Gearman consumer: jobs per queue must be >= 1, got ${options.maxJobsPerQueue}`,
      );
    }
    this.#options = options;
    for (const q of options.queues) {
      this.#pools.set(q.name, new SlotPool(this.capFor(q)));
      this.#up.set(q.name, new Set());
    }
    this.#stats = new ConsumerStats(options.queues.map((q) => q.name));
  }

  /**
   * The effective cap of a queue: 1 for in-order queues, the configured value otherwise.
   *
   * @param queue The queue.
   * @returns Jobs allowed in flight at once.
   */
  capFor(queue: ConsumedQueue): number {
    return queue.inOrder ? 1 : this.#options.maxJobsPerQueue;
  }

  /** Jobs currently holding a slot of `queue` (handlers running plus grabs outstanding). */
  slotsInUse(queue: string): number {
    return this.#pools.get(queue)?.inUse ?? 0;
  }

  /**
   * Connect every (queue, server) pair in parallel and start consuming.
   * Fails only when no job server at all can be reached; pairs that could not
   * connect keep retrying in the background (one server down must not stop
   * the others, gearman.md §8).
   *
   * @throws {ConsumerStartError} When every connection attempt failed.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error("GearmanConsumer.start() called twice");
    this.#started = true;
    const o = this.#options;
    const observer = this.#stats.wrap(o.observer);
    const pid = Deno.pid;
    for (const q of o.queues) {
      for (const server of o.servers) {
        this.#supervisors.push(
          new Supervisor({
            queue: q.name,
            server,
            pool: this.#pools.get(q.name) as SlotPool,
            handler: o.handler,
            observer,
            ...(o.clientIdPrefix === undefined
              ? {}
              : { clientId: `${o.clientIdPrefix}-${q.name}-${pid}` }),
            ...(o.idlePollMs === undefined ? {} : { idlePollMs: o.idlePollMs }),
            connect: {
              ...(o.heartbeatIntervalMs === undefined
                ? {}
                : { heartbeatIntervalMs: o.heartbeatIntervalMs }),
              ...(o.heartbeatTimeoutMs === undefined
                ? {}
                : { heartbeatTimeoutMs: o.heartbeatTimeoutMs }),
              ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
            },
            reconnectIntervalMs: o.reconnectIntervalMs,
            drainTimeoutMs: o.drainTimeoutMs,
            onState: (up) => this.#setState(q.name, server, up),
            onReconnected: () => {
              this.#stats.reconnected(q.name);
              o.observer.queueReconnected(q.name);
            },
          }),
        );
      }
    }
    const results = await Promise.allSettled(this.#supervisors.map((s) => s.start()));
    const failed = results.flatMap((r, i) =>
      r.status === "rejected" ? [{ s: this.#supervisors[i] as Supervisor, err: r.reason }] : []
    );
    if (failed.length === results.length) {
      const servers = [...new Set(failed.map((f) => f.s.server))].join(", ");
      throw new ConsumerStartError(
        `Cannot start Gearman consumer: no job server reachable (${servers}): ${
          errorMessage(failed[0]?.err)
        }`,
        { cause: failed[0]?.err },
      );
    }
    for (const { s, err } of failed) {
      log.warn("gearman: job server unreachable at start-up, retrying in the background", {
        queue: s.queue,
        server: s.server,
        error: errorMessage(err),
      });
      s.startDisconnected();
    }
    const caps = o.queues.map((q) => this.capFor(q));
    log.info("gearman: consumer started", {
      servers: o.servers.join(","),
      queues: o.queues.length,
      max_jobs_per_queue: o.maxJobsPerQueue,
      serialized_queues: o.queues.filter((q) => q.inOrder).length,
      process_max_in_flight: caps.reduce((a, b) => a + b, 0),
    });
    const interval = o.statsIntervalMs ?? 30_000;
    if (interval > 0) this.#statsTimer = setInterval(() => this.#logStats(false), interval);
  }

  /**
   * Stop every queue in parallel (G9): no new grabs, running handlers get up
   * to the drain timeout, then every connection closes. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#doStop();
    return this.#stopping;
  }

  async #doStop(): Promise<void> {
    if (this.#statsTimer !== undefined) clearInterval(this.#statsTimer);
    this.#statsTimer = undefined;
    using drain = deadline(this.#options.drainTimeoutMs);
    await Promise.all(this.#supervisors.map((s) => s.stop(drain.signal)));
    if (this.#started) this.#logStats(true);
  }

  #setState(queue: string, server: string, up: boolean): void {
    const set = this.#up.get(queue) as Set<string>;
    const before = set.size === this.#options.servers.length;
    if (up) set.add(server);
    else set.delete(server);
    const after = set.size === this.#options.servers.length;
    // The gauge is 1 only while every server's connection for the queue is up,
    // so a half-served queue (one of two job servers lost) is visible.
    if (before !== after) this.#options.observer.queueConnected(queue, after);
  }

  #logStats(final: boolean): void {
    this.#stats.log(
      log,
      final ? "gearman: consumer stopped" : "gearman: consumer stats",
      (queue) => ({
        servers_connected: `${
          (this.#up.get(queue) as Set<string>).size
        }/${this.#options.servers.length}`,
      }),
    );
  }
}
