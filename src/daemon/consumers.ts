/**
 * The queue backend and the consumption. {@link queueBackend} is the one place that branches on
 * `--consumer`; everything above holds a `QueueConsumer` or a `CommandPublisher`. The in-order
 * queues may sit behind the in-order lease (a consumer of their own, started while it is held).
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
  type MysqlHosts,
  type MysqlUrlOptions,
  openLeaseConnection,
} from "../mysql/mod.ts";
import type { Pipeline } from "../pipeline/pipeline.ts";
import type { Metrics } from "../metrics/registry.ts";
import { getLogger } from "../log.ts";
import { type WorkerConfig } from "./config.ts";
import {
  IN_ORDER_DRAIN_MS,
  IN_ORDER_LOCK_POLL_MS,
  InOrderGate,
  inOrderLeaseName,
  leaseHolderId,
} from "./in_order_gate.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

type SharedConsumerOptions = Omit<BackendOptions, "queues"> & { readonly maxJobSize?: number };

/** The configured queue backend: what the daemon builds on it. */
export interface QueueBackend {
  /** A consumer of `queues`, not started. */
  consumer(queues: readonly QueueName[], options: SharedConsumerOptions): QueueConsumer;
  /** A publisher to `statusngin_cmd` (it connects on first use); the caller closes it. */
  commandPublisher(): CommandPublisher;
  /** Log, once at start, what in this backend's settings is likely a mistake. */
  warnAboutConfiguration(): void;
}

/**
 * The backend `--consumer` names: the one branch on it.
 *
 * @throws {WorkerError} (code `startup`) When the RabbitMQ backend has no URL.
 */
export function queueBackend(
  config: WorkerConfig,
  metrics?: Pick<Metrics, "rabbitmqHostInUse">,
): QueueBackend {
  const name = config.nodeName.replace(/\s+/g, "_");
  const consumed = (queues: readonly QueueName[]) =>
    queues.map((q) => ({ name: q, inOrder: QUEUES[q].inOrder }));
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
          ...(rabbitmq.declare === undefined ? {} : { declare: rabbitmq.declare }),
          onHostInUse: (host, hosts) => {
            for (const h of hosts) metrics?.rabbitmqHostInUse.set({ host: h }, h === host ? 1 : 0);
          },
          queues: consumed(queues),
          connectionName: `statusengine-${name}`,
        }),
      commandPublisher: () =>
        rabbitMqCommandPublisher(rabbitmq.url, {
          durableQueues: rabbitmq.durableQueues,
          ...(rabbitmq.declare === undefined ? {} : { declare: rabbitmq.declare }),
        }),
      warnAboutConfiguration: () => {},
    };
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
    warnAboutConfiguration: () => {
      if (config.gearmanServers.length <= 1) return;
      // D9 consumes from every server; the broker module publishes each message to every
      // server it is configured with, so the common "two servers for availability" set-up
      // writes every event twice (history rows duplicated, downtimes replayed).
      log.warn(
        "worker: several Gearman job servers given; if one broker module publishes to all of " +
          "them every event is processed once per server. Run one worker per server with " +
          "disjoint brokers, or list only the active server and switch on failover",
        { servers: config.gearmanServers.join(",") },
      );
    },
  };
}

export interface ConsumptionParts {
  readonly config: WorkerConfig;
  readonly backend: QueueBackend;
  readonly pipeline: Pipeline;
  readonly observer: ConsumerObserver;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: Metrics;
  readonly urlOptions: MysqlUrlOptions;
  /** The in-order lock's connection goes to the MySQL host in use. */
  readonly mysqlHosts: MysqlHosts;
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

/** Build the consumption of a worker (not started): one consumer to start and stop. */
export function buildConsumption(
  parts: ConsumptionParts,
  split: QueueSplit,
): QueueConsumer {
  const { config } = parts;
  const deadLetter = consumerDeadLetter(parts.deadLetters, parts.metrics);
  const main: QueueConsumer = split.always.length === 0
    ? { start: () => Promise.resolve(), stop: () => Promise.resolve() }
    : buildConsumer(config, split.always, parts, deadLetter);
  if (split.gated.length === 0) return main;
  const pollMs = config.inOrderLock?.pollMs ?? IN_ORDER_LOCK_POLL_MS;
  const drainMs = Math.min(config.drainTimeoutMs, IN_ORDER_DRAIN_MS);
  const gate = new InOrderGate({
    build: (admit) =>
      buildConsumer(
        { ...config, drainTimeoutMs: drainMs },
        split.gated,
        parts,
        deadLetter,
        // While the lease is not known to be ours no new in-order job starts writing.
        async (job, signal) => {
          await admit(signal);
          await parts.pipeline.handler(job, signal);
        },
      ),
    // Bounded by the poll: the lease's validity allows two polls for a renewal to end.
    connect: () => openLeaseConnection(parts.mysqlHosts.inUse, pollMs),
    leaseName: inOrderLeaseName(config.nodeName),
    holder: leaseHolderId(),
    pollMs,
    drainMs,
    heldGauge: parts.metrics.inOrderLockHeld,
    takeovers: parts.metrics.inOrderLeaseTakeovers,
  });
  return {
    start: async () => {
      await main.start();
      await gate.start();
    },
    stop: async () => {
      await Promise.all([main.stop(), gate.stop()]);
    },
  };
}

/** The delivery engine's dead letters take the pipeline's one path into the file, which counts them. */
function consumerDeadLetter(sink: DeadLetterSink, metrics: Metrics): ConsumerDeadLetterSink {
  const decoder = new TextDecoder();
  return async ({ job, reason, error, bytes }) => {
    log.error("worker: job written to the dead-letter file", {
      queue: job.queue,
      server: job.server,
      reason,
      bytes,
      error,
    });
    metrics.pipelineErrors.inc({ component: "queue" });
    await sink.write({
      queue: job.queue,
      reason,
      error,
      payload: decoder.decode(job.payload),
      ...(reason === "too_large" ? { bytes } : {}),
    });
  };
}

function buildConsumer(
  config: WorkerConfig,
  queues: readonly QueueName[],
  parts: ConsumptionParts,
  deadLetter: ConsumerDeadLetterSink,
  handler: JobHandler = parts.pipeline.handler,
): QueueConsumer {
  const common = {
    handler,
    observer: parts.observer,
    // The windows of the queues that are not in order follow their tables' writers.
    window: { pressure: (queue: string) => parts.pipeline.pressure(queue) },
    deadLetter,
    reconnectIntervalMs: config.reconnectIntervalMs,
    // Start like it runs: job servers that are not there yet are waited for in the reconnect
    // loop, with /readyz naming the queues that are not connected.
    waitAtStart: true,
    drainTimeoutMs: config.drainTimeoutMs,
    ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
    ...(config.queueBacklogIntervalMs === undefined
      ? {}
      : { backlogIntervalMs: config.queueBacklogIntervalMs }),
    ...(config.maxInFlightBytes === undefined ? {} : { maxInFlightBytes: config.maxInFlightBytes }),
    ...(config.maxJobSize === undefined ? {} : { maxJobSize: config.maxJobSize }),
    ...(config.queueStallTimeoutMs === undefined
      ? {}
      : { stallTimeoutMs: config.queueStallTimeoutMs }),
    // Held jobs go to another worker while MySQL cannot take them (docs/retries.md#give-back).
    giveBack: {
      afterMs: config.mysqlGiveBackAfterMs,
      holdingForMs: () => parts.pipeline.availability.holdingForMs,
      answeredSince: (at: number) => parts.pipeline.availability.answeredSince(at),
    },
  };
  return parts.backend.consumer(queues, common);
}
