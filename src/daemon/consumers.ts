/**
 * The queue backend and the consumption. {@link queueBackend} is the one place that branches on
 * `--consumer`; everything above holds a `QueueConsumer` or a `CommandPublisher`.
 *
 * Only the worker holding the in-order lease (src/mysql/lease.ts) consumes the in-order queues,
 * with either backend: why, and what it cannot fix, in docs/consumption.md#in-order-lock,
 * docs/downtimes.md#galera and docs/running.md#several-workers.
 *
 * @module
 */
import { GearmanConsumer } from "../gearman/consumer.ts";
import { RabbitMqConsumer } from "../amqp/consumer.ts";
import type { BackendOptions } from "../consumer/consumer.ts";
import {
  type CommandPublisher,
  gearmanCommandPublisher,
  rabbitMqCommandPublisher,
} from "../commands/mod.ts";
import type {
  ConsumerDeadLetterSink,
  ConsumerObserver,
  JobHandler,
  QueueConsumer,
} from "../consumer/contract.ts";
import { type QueueName, QUEUES } from "../events/mod.ts";
import {
  type DeadLetterSink,
  Lease,
  type LeaseIdentity,
  type MysqlHosts,
  nodeLeaseOptions,
} from "../mysql/mod.ts";
import type { Pipeline } from "../pipeline/pipeline.ts";
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";
import { abortable } from "../util/async.ts";
import { type WorkerConfig } from "./config.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** The configured queue backend: what the daemon builds on it. */
export interface QueueBackend {
  /** A consumer of `queues`, not started. */
  consumer(queues: readonly QueueName[], options: Omit<BackendOptions, "queues">): QueueConsumer;
  /** A publisher to `statusngin_cmd` (it connects on first use); the caller closes it. */
  commandPublisher(): CommandPublisher;
}

/**
 * The backend `--consumer` names, built once at start, when it also logs likely setting mistakes.
 *
 * @throws {WorkerError} (code `startup`) When the RabbitMQ backend has no URL.
 */
export function queueBackend(
  config: WorkerConfig,
  metrics?: Pick<Metrics, "rabbitmqHostInUse">,
): QueueBackend {
  const name = config.nodeName.replace(/\s+/g, "_");
  const consumed = (queues: readonly QueueName[]) =>
    queues.map((q) => ({
      name: q,
      inOrder: QUEUES[q].inOrder,
      receiveAtOnce: QUEUES[q].receiveAtOnce,
    }));
  if ((config.consumer ?? "gearman") === "rabbitmq") {
    const rabbitmq = config.rabbitmq;
    if (rabbitmq === undefined) {
      throw new WorkerError("startup", 'Cannot start: consumer "rabbitmq" needs a RabbitMQ URL');
    }
    return {
      consumer: (queues, options) =>
        new RabbitMqConsumer({
          ...options,
          url: rabbitmq.url,
          prefetch: rabbitmq.prefetch,
          durableQueues: rabbitmq.durableQueues,
          declare: rabbitmq.declare,
          onHostInUse: (host, hosts) => {
            for (const h of hosts) metrics?.rabbitmqHostInUse.set({ host: h }, h === host ? 1 : 0);
          },
          queues: consumed(queues),
          connectionName: `statusengine-${name}`,
        }),
      commandPublisher: () =>
        rabbitMqCommandPublisher(rabbitmq.url, {
          durableQueues: rabbitmq.durableQueues,
          declare: rabbitmq.declare,
        }),
    };
  }
  if (config.gearmanServers.length > 1) {
    // D9; an event processed twice duplicates history rows and replays downtimes.
    log.warn(
      "worker: several Gearman job servers given; if one broker module publishes to all of " +
        "them every event is processed once per server. Run one worker per server with " +
        "disjoint brokers, or list only the active server and switch on failover",
      { servers: config.gearmanServers.join(",") },
    );
  }
  return {
    consumer: (queues, options) =>
      new GearmanConsumer({
        ...options,
        servers: config.gearmanServers,
        queues: consumed(queues),
        maxJobsPerQueue: config.maxJobsPerQueue,
        heartbeatIntervalMs: config.heartbeatIntervalMs,
        heartbeatTimeoutMs: config.heartbeatTimeoutMs,
        clientIdPrefix: `statusengine-${name}`,
      }),
    commandPublisher: () => gearmanCommandPublisher(config.gearmanServers),
  };
}

interface ConsumptionParts {
  readonly config: WorkerConfig;
  readonly backend: QueueBackend;
  readonly pipeline: Pipeline;
  readonly observer: ConsumerObserver;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: Metrics;
  /** The in-order lock's connection goes to the MySQL host in use. */
  readonly mysqlHosts: MysqlHosts;
  /** The in-order lease's row and holder; the pipeline's downtime statements commit under it. */
  readonly inOrderLease?: LeaseIdentity | undefined;
}

/** The queues this worker consumes, split by whether they wait for the in-order lock. */
export interface QueueSplit {
  /** Consumed whenever the worker runs. */
  readonly always: readonly QueueName[];
  /** Consumed only while this worker holds the in-order lock (none without the lock). */
  readonly gated: readonly QueueName[];
}

/** Which queues wait for the in-order lock. */
export function splitQueues(config: WorkerConfig, queues: readonly QueueName[]): QueueSplit {
  const gated = config.inOrderLock ? queues.filter((q) => QUEUES[q].inOrder) : [];
  return { always: queues.filter((q) => !gated.includes(q)), gated };
}

/** The consumption of a worker (not started): one consumer to start and stop. */
export function buildConsumption(parts: ConsumptionParts, split: QueueSplit): QueueConsumer {
  const { config } = parts;
  const deadLetter = consumerDeadLetter(parts.deadLetters, parts.metrics);
  const main: QueueConsumer = split.always.length === 0
    ? { start: () => Promise.resolve(), stop: () => Promise.resolve() }
    : buildConsumer(split.always, parts, deadLetter);
  if (split.gated.length === 0) return main;
  const identity = parts.inOrderLease;
  if (identity === undefined) throw new Error("in-order queues need the in-order lease's identity");
  const pollMs = config.inOrderLock?.pollMs ?? IN_ORDER_LOCK_POLL_MS;
  const drainMs = Math.min(config.drainTimeoutMs, IN_ORDER_DRAIN_MS);
  // A fresh consumer each time the lease is taken: a stopped one cannot restart.
  let gated: QueueConsumer | undefined;
  let admission: Admission | undefined;
  // Handlers still running: one abandoned at the drain deadline goes on writing.
  let applying = 0;
  const lease: Lease = new Lease({
    // One lease per node: the workers of a node share its queues, other nodes' must not wait.
    ...nodeLeaseOptions(identity, () => parts.mysqlHosts.inUse, pollMs, drainMs),
    heldGauge: parts.metrics.inOrderLockHeld,
    takeovers: parts.metrics.inOrderLeaseTakeovers,
    releasable: () => applying === 0,
    onHeld: async (leaseStopped) => {
      const fresh = new Admission();
      const next = buildConsumer(
        split.gated,
        parts,
        deadLetter,
        drainMs,
        // Jobs start only while the lease is valid, else wait for a renewal (refused once lost).
        async (job, signal) => {
          if (!lease.valid) fresh.hold();
          await fresh.admit(signal);
          applying++;
          try {
            await parts.pipeline.handler(job, signal);
          } finally {
            applying--;
          }
        },
      );
      // Set before the start: the lease is renewed while the consumer starts, and a job that
      // waits for a renewal meanwhile is let on by it.
      admission = fresh;
      // A stop ends a start that waits for silent brokers (10 s each) instead of waiting for it.
      const stop = () => void next.stop();
      leaseStopped.addEventListener("abort", stop, { once: true });
      try {
        await next.start();
      } catch (err: unknown) {
        fresh.close();
        admission = undefined;
        await next.stop();
        throw err;
      } finally {
        leaseStopped.removeEventListener("abort", stop);
      }
      gated = next;
      log.info("worker: consuming the in-order queues (this worker holds the lease)");
    },
    onSuspect: () => admission?.hold(),
    onRegained: () => admission?.open(),
    onLost: async () => {
      const stopping = gated;
      gated = undefined;
      // A job waiting for admission is refused at once, so the drain need not wait for it.
      admission?.close();
      admission = undefined;
      try {
        await stopping?.stop();
      } catch (err: unknown) {
        log.error("worker: stopping the in-order consumer failed", { error: errorMessage(err) });
      }
      // Another worker consumes them now: no series, as before the lease was first held, and
      // not the 0 of a lost connection that StatusengineQueueDisconnected alerts on.
      for (const queue of split.gated) parts.metrics.queueConnected.remove({ queue_name: queue });
    },
  });
  return {
    start: async () => {
      await main.start();
      lease.start(); // returns at once; the in-order queues wait for the election
    },
    // Both at once: the lease stops the in-order consumer before it releases the lease.
    stop: async () => {
      await Promise.all([main.stop(), lease.stop()]);
    },
  };
}

/** The delivery engine's dead letters take the pipeline's one path into the file, which counts them. */
function consumerDeadLetter(sink: DeadLetterSink, metrics: Metrics): ConsumerDeadLetterSink {
  const decoder = new TextDecoder();
  return async ({ job, reason, error, bytes }) => {
    await sink.write({
      queue: job.queue,
      reason,
      error,
      payload: decoder.decode(job.payload),
      ...(reason === "too_large" ? { bytes } : {}),
    });
    // Only once written: a failed write is the sink's to log and count, and the job is retried.
    log.error("worker: job written to the dead-letter file", {
      queue: job.queue,
      server: job.server,
      reason,
      bytes,
      error,
    });
    metrics.pipelineErrors.inc({ component: "queue" });
  };
}

function buildConsumer(
  queues: readonly QueueName[],
  parts: ConsumptionParts,
  deadLetter: ConsumerDeadLetterSink,
  drainTimeoutMs = parts.config.drainTimeoutMs,
  handler: JobHandler = parts.pipeline.handler,
): QueueConsumer {
  const { config } = parts;
  return parts.backend.consumer(queues, {
    handler,
    observer: parts.observer,
    // The windows of the queues that are not in order follow their tables' writers.
    window: { pressure: (queue: string) => parts.pipeline.pressure(queue) },
    deadLetter,
    reconnectIntervalMs: config.reconnectIntervalMs,
    // Start like it runs: absent job servers are waited for, /readyz naming their queues.
    waitAtStart: true,
    drainTimeoutMs,
    statsIntervalMs: config.statsIntervalMs,
    backlogIntervalMs: config.queueBacklogIntervalMs,
    maxInFlightBytes: config.maxInFlightBytes,
    maxJobSize: config.maxJobSize,
    stallTimeoutMs: config.queueStallTimeoutMs,
    // Held jobs go to another worker while MySQL cannot take them (docs/retries.md#give-back).
    giveBack: {
      afterMs: config.mysqlGiveBackAfterMs,
      holdingForMs: () => parts.pipeline.availability.holdingForMs,
      answeredSince: (at: number) => parts.pipeline.availability.answeredSince(at),
    },
  });
}

/** Interval of lease renewals and reads; also the bound of each lease query and connect. */
export const IN_ORDER_LOCK_POLL_MS = 1_000;

/** Drain budget of the in-order consumer: one job in flight, a few statements. */
const IN_ORDER_DRAIN_MS = 2_000;

/** Raised to a job waiting for admission once the in-order lease was lost or given up. */
function lockLost(): WorkerError {
  return new WorkerError(
    "in_order_lock_lost",
    "the in-order lease is no longer this worker's; the job goes back to the broker",
  );
}

/** Whether new in-order jobs may start: open, waiting (re-acquiring), closed (lost). One per built consumer. */
export class Admission {
  #closed = false;
  /** Set while new jobs wait for the lock to be ours again. */
  #waiting: PromiseWithResolvers<void> | undefined;

  get state(): "open" | "waiting" | "closed" {
    return this.#closed ? "closed" : this.#waiting !== undefined ? "waiting" : "open";
  }

  /** The lock may no longer be ours: new jobs wait. */
  hold(): void {
    if (this.#closed || this.#waiting !== undefined) return;
    this.#waiting = Promise.withResolvers<void>();
    // A waiter may be gone (aborted); the rejection must not be unhandled.
    this.#waiting.promise.catch(() => {});
  }

  /** The lock is ours again: waiting jobs go on. */
  open(): void {
    this.#waiting?.resolve();
    this.#waiting = undefined;
  }

  /** The lock went to another worker: waiting and later jobs are refused. */
  close(): void {
    this.#closed = true;
    this.#waiting?.reject(lockLost());
    this.#waiting = undefined;
  }

  /** Resolves when a new in-order job may start; rejects once the lock is lost or `signal` aborts. */
  readonly admit = (signal: AbortSignal): Promise<void> =>
    this.#waiting !== undefined
      ? abortable(this.#waiting.promise, signal)
      : this.#closed
      ? Promise.reject(lockLost())
      : Promise.resolve();
}
