/**
 * The daemon, assembled: MySQL pool → schema check → node registration →
 * writers, /ws hub and handler → HTTP servers (metrics, /ws, /commands when
 * keyed) → queue consumer (Gearman or RabbitMQ); and the ordered, bounded
 * shutdown of pipeline.md §6 (drain, flush, pool, HTTP).
 *
 * Independent of how settings were obtained, so tests can run a complete
 * worker in-process and the `run` command only maps settings onto it.
 *
 * @module
 */
import mysql from "mysql2/promise";
import { GearmanConsumer } from "./gearman/consumer.ts";
import { RabbitMqConsumer } from "./amqp/consumer.ts";
import { metricsObserver } from "./consumer/metrics_observer.ts";
import {
  CONSUMER_DEAD_LETTER_REASONS,
  type ConsumerDeadLetterSink,
  type ConsumerObserver,
  JOB_RESULTS,
} from "./consumer/contract.ts";
import { QUEUE_NAMES, type QueueName, QUEUES } from "./events/queues.ts";
import { INVALID_REASONS } from "./events/types.ts";
import { ADJUSTMENT_REASONS } from "./mysql/values.ts";
import { assertTablesExist } from "./mysql/schema.ts";
import { mysqlOptionsFromUrl, redactUrl } from "./mysql/url.ts";
import { poolExecutor, PREPARED_STATEMENTS_PER_CONNECTION } from "./mysql/executor.ts";
import { dropEmptyParameterMetadata } from "./mysql/statement_metadata.ts";
import { createMetrics, type Metrics, precreateSeries, setBuildInfo } from "./metrics/registry.ts";
import { COMPONENTS } from "./metrics/catalogue.ts";
import { type MetricsServer, startMetricsServer } from "./metrics/server.ts";
import { startWebSocketServer, WebSocketHub, type WebSocketServer } from "./http/mod.ts";
import {
  COMMAND_NAMES,
  COMMAND_QUEUE,
  type CommandPublisher,
  type CommandServer,
  DENIED_RAW_COMMANDS,
  gearmanCommandPublisher,
  rabbitMqCommandPublisher,
  REJECT_REASONS,
  startCommandServer,
} from "./commands/mod.ts";
import { batchedTables, downtimeTables, Pipeline } from "./pipeline/pipeline.ts";
import { DeadLetterFile, type DeadLetterSink, DISCARDING_SINK } from "./pipeline/dead_letter.ts";
import { GraphiteClient } from "./graphite/client.ts";
import { identity, versionLine } from "./version.ts";
import {
  IN_ORDER_DRAIN_MS,
  IN_ORDER_LOCK_POLL_MS,
  InOrderGate,
  inOrderGraceMs,
  inOrderLockName,
} from "./in_order_gate.ts";
import {
  brokerSubmitter,
  commandFileSubmitter,
  type SubmitMethod,
  TaskManager,
} from "./tasks/task_manager.ts";
import { deadline } from "./util/async.ts";
import { errorMessage, getLogger } from "./log.ts";

const log = getLogger("worker");

/** Where perfdata goes (F1). */
export type PerfdataRoute = "mysql" | "graphite" | "both";

/** Queue backend (`--consumer`). */
export type ConsumerKind = "gearman" | "rabbitmq";

/**
 * What the worker needs of a queue backend; both {@link GearmanConsumer} and
 * {@link RabbitMqConsumer} satisfy it.
 */
export interface QueueConsumer {
  /** Connect and start consuming; throws when the broker cannot be used. */
  start(): Promise<void>;
  /** Stop consuming, drain within the drain timeout (D1), close. Idempotent, safe before start. */
  stop(): Promise<void>;
}

/** Everything the daemon needs, already validated. */
export interface WorkerConfig {
  /** Default `gearman`. */
  readonly consumer?: ConsumerKind;
  readonly gearmanServers: readonly string[];
  /**
   * Hard cap of a Gearman queue's adaptive window of jobs in flight
   * (`--gearman-max-concurrent-jobs-per-queue`); RabbitMQ's is the prefetch.
   */
  readonly maxJobsPerQueue: number;
  /** Payload bytes in flight across all queues (`--max-in-flight-bytes`); default 256 MiB. */
  readonly maxInFlightBytes?: number;
  /** Jobs above this size are dead-lettered unread (`--max-job-size`); default 64 MiB. */
  readonly maxJobSize?: number;
  /** `--queue-stall-timeout`; 0 disables; default 60 s. */
  readonly queueStallTimeoutMs?: number;
  /** Required when {@link consumer} is `rabbitmq`. */
  readonly rabbitmq?: {
    /** AMQP URL; the password never reaches a log line. */
    readonly url: string;
    /** Unacknowledged deliveries per queue (R2). */
    readonly prefetch: number;
    /** Declare queues durable; the consumer and the command publisher use the same flags. */
    readonly durableQueues: boolean;
  };
  /** Pause between attempts to rebuild a lost broker connection (both backends). */
  readonly reconnectIntervalMs: number;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly drainTimeoutMs: number;
  readonly shutdownFlushTimeoutMs: number;
  readonly mysqlUrl: string;
  readonly mysqlMaxOpenConns: number;
  /** Writers, i.e. statements in flight at once, per batched table (`--mysql-writers-per-table`). */
  readonly mysqlWritersPerTable: number;
  readonly batchSize: number;
  readonly statusMaxAgeSeconds: number;
  readonly nodeName: string;
  /** NDJSON path, or null when disabled by an explicit empty value. */
  readonly deadLetterFile: string | null;
  readonly perfdataRoute: PerfdataRoute;
  /** Carbon plaintext listener, path prefix and metrics per write (F4–F6). */
  readonly graphite: {
    readonly addr: string;
    readonly prefix: string;
    readonly batchSize: number;
    /** `--graphite-illegal-characters`; default the legacy set. */
    readonly illegalCharacters?: RegExp;
  };
  readonly openItcockpit: boolean;
  /** null disables the metrics listener (`--metrics-port 0`). */
  readonly metrics: { readonly hostname: string; readonly port: number } | null;
  /** Queues to consume; default all twelve. */
  readonly queues?: readonly QueueName[];
  /**
   * Consume the in-order queues (G3) only while holding a MySQL named lock, so several
   * workers can share a job server. Absent or null = no lock: this worker consumes them
   * whenever it runs (one worker per node). `run` always sets it.
   */
  readonly inOrderLock?: {
    /** Lock poll interval; default {@link IN_ORDER_LOCK_POLL_MS}. */
    readonly pollMs?: number;
  } | null;
  /** Interval of the periodic summaries; default 30 s. */
  readonly statsIntervalMs?: number;
  /**
   * `POST /commands` (operations.md §4.2); absent, null or without keys = not
   * served. Publishes to the backend of {@link consumer}.
   */
  readonly commands?: {
    readonly hostname: string;
    /** 0 picks a free port (tests). */
    readonly port: number;
    /** Command keys, separate from the /ws keys. */
    readonly apiKeys: readonly string[];
  } | null;
  /**
   * The UI's task queue (`statusengine_tasks`, `--check-for-commands`); absent or null = not
   * read. `broker` publishes with the backend of {@link consumer}.
   */
  readonly tasks?: {
    readonly intervalMs: number;
    readonly submitMethod: SubmitMethod;
    /** The core's external command file, for `cmd`. */
    readonly externalCommandFile: string;
  } | null;
  /** `GET /ws` (operations.md §4.3); absent or null = not served. */
  readonly websocket?: {
    readonly hostname: string;
    /** 0 picks a free port (tests). */
    readonly port: number;
    /** `/ws` keys; none = a random key is generated and logged once. */
    readonly apiKeys: readonly string[];
  } | null;
}

/** Raised when the worker cannot start; `main` turns it into exit status 1. */
export class StartupError extends Error {
  /**
   * @param message What failed, naming the cause.
   * @param options `cause`.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StartupError";
  }
}

/** A running worker. */
export interface RunningWorker {
  readonly metrics: Metrics;
  /** Bound metrics port, or null when disabled. */
  readonly metricsPort: number | null;
  /** Bound `/commands` port, or null when the endpoint is not served. */
  readonly commandsPort: number | null;
  /** Bound `/ws` port, or null when the stream is not served. */
  readonly websocketPort: number | null;
  /** The `/ws` key generated for this run, or null when keys were configured (or no /ws). */
  readonly websocketGeneratedKey: string | null;
  readonly pipeline: Pipeline;
  readonly consumer: QueueConsumer;
  /** The task queue poller, or null when `statusengine_tasks` is not read. */
  readonly tasks: TaskManager | null;
  /**
   * Graceful shutdown in the documented order and budgets; each step logged
   * once with its duration. Idempotent.
   */
  stop(): Promise<void>;
}

const PING_TIMEOUT_MS = 5_000;

/**
 * Start the daemon.
 *
 * @param config Validated settings.
 * @returns The running worker.
 * @throws {StartupError} When MySQL, the schema, every job server or the RabbitMQ broker is unusable.
 */
export async function startWorker(config: WorkerConfig): Promise<RunningWorker> {
  const id = identity();
  log.info("statusengine-worker starting", {
    version: id.version,
    commit: id.commit,
    deno: id.denoVersion,
    line: versionLine(),
  });
  const queues = config.queues ?? QUEUE_NAMES;
  const commandsEnabled = config.commands?.apiKeys.some((k) => k !== "") ?? false;
  const metrics = createMetrics();
  setBuildInfo(metrics, id);
  precreateSeries(metrics, {
    queues,
    statusQueues: queues.filter((q) => QUEUES[q].staleFilter),
    jobResults: JOB_RESULTS,
    deadLetterReasons: [...INVALID_REASONS, "sql_rejected", ...CONSUMER_DEAD_LETTER_REASONS],
    tables: [...batchedTables(), ...downtimeTables()].map((t) => t.name),
    batchedTables: batchedTables().map((t) => t.name),
    adjustReasons: ADJUSTMENT_REASONS,
    components: COMPONENTS,
    ...(commandsEnabled ? { commands: COMMAND_NAMES, commandRejectReasons: REJECT_REASONS } : {}),
  });
  if ((config.consumer ?? "gearman") === "gearman" && config.gearmanServers.length > 1) {
    // D9 consumes from every server; the broker module publishes each message to every
    // server it is configured with, so the common "two servers for availability" set-up
    // writes every event twice (history rows duplicated, downtimes replayed).
    log.warn(
      "worker: several Gearman job servers given; if one broker module publishes to all of " +
        "them every event is processed once per server. Run one worker per server with " +
        "disjoint brokers, or list only the active server and switch on failover",
      { servers: config.gearmanServers.join(",") },
    );
  }
  log.info("worker: stale status filter", {
    status_max_age_s: config.statusMaxAgeSeconds,
    enabled: config.statusMaxAgeSeconds > 0,
  });

  const urlOptions = mysqlOptionsFromUrl(config.mysqlUrl);
  const pool = mysql.createPool({
    ...urlOptions,
    connectionLimit: config.mysqlMaxOpenConns,
    maxIdle: config.mysqlMaxOpenConns,
    connectTimeout: urlOptions.connectTimeout ?? PING_TIMEOUT_MS,
    enableKeepAlive: true,
    maxPreparedStatements: PREPARED_STATEMENTS_PER_CONNECTION,
    // Numbers stay numbers; bigint epoch seconds fit a double exactly (A.3).
    supportBigNumbers: true,
    bigNumberStrings: false,
  });
  dropEmptyParameterMetadata(pool);
  const cleanups: (() => Promise<void>)[] = [() => pool.end()];
  const undo = async () => {
    for (const c of cleanups.reverse()) await c().catch(() => {});
  };
  let deadLetters: DeadLetterSink = DISCARDING_SINK;
  let server: MetricsServer | undefined;
  let commands: { server: CommandServer; publisher: CommandPublisher } | undefined;
  let wsServer: WebSocketServer | undefined;
  try {
    try {
      using ping = deadline(PING_TIMEOUT_MS);
      const probe = pool.query("SELECT @@character_set_client AS cs, @@collation_connection AS co");
      const answered = await Promise.race([
        probe,
        new Promise<undefined>((resolve) =>
          ping.signal.addEventListener("abort", () => resolve(undefined))
        ),
      ]);
      if (answered === undefined) {
        probe.catch(() => {});
        throw new Error(`no answer within ${PING_TIMEOUT_MS} ms`);
      }
      const [rows] = answered as unknown as [{ cs: string; co: string }[]];
      const charset = rows[0]?.cs ?? "unknown";
      const collation = rows[0]?.co ?? "unknown";
      if (charset !== "utf8mb4") {
        log.warn("worker: MySQL connection character set is not utf8mb4", { charset, collation });
      }
      log.info("worker: MySQL connected", {
        url: redactUrl(config.mysqlUrl),
        pool_size: config.mysqlMaxOpenConns,
        writers_per_table: config.mysqlWritersPerTable,
        charset,
        collation,
      });
      const writers = batchedTables().length * config.mysqlWritersPerTable;
      if (config.mysqlMaxOpenConns <= writers) {
        // W9: the final flush runs every writer at once; so may a backlog on many queues.
        log.warn(
          "worker: the MySQL pool has fewer connections than there are table writers; " +
            "statements wait for a free connection under load and in the final flush",
          { pool_size: config.mysqlMaxOpenConns, writers },
        );
      }
    } catch (err: unknown) {
      throw new StartupError(
        `Cannot start: MySQL at ${redactUrl(config.mysqlUrl)} does not answer: ${
          errorMessage(err)
        }`,
        { cause: err },
      );
    }
    const needed = new Set<string>();
    for (const q of queues) for (const t of QUEUES[q].tables) needed.add(t);
    needed.add("statusengine_nodes");
    if (config.tasks) needed.add("statusengine_tasks");
    // Perfdata only to Graphite: an installation may have no perfdata table (operations.md §3.2).
    if (config.perfdataRoute === "graphite") needed.delete("statusengine_perfdata");
    try {
      await assertTablesExist(pool, [...needed].sort() as Parameters<typeof assertTablesExist>[1]);
    } catch (err: unknown) {
      throw new StartupError(`Cannot start: ${errorMessage(err)}`, { cause: err });
    }
    // D11: register this node, as the legacy worker does.
    await pool.query(
      "INSERT INTO `statusengine_nodes` (`node_name`, `node_version`, `node_start_time`) " +
        "VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE `node_version` = VALUES(`node_version`), " +
        "`node_start_time` = VALUES(`node_start_time`)",
      [config.nodeName, id.version, Math.floor(Date.now() / 1000)],
    );

    if (config.deadLetterFile !== null) {
      const file = new DeadLetterFile(config.deadLetterFile);
      try {
        await file.open();
      } catch (err: unknown) {
        throw new StartupError(
          `Cannot start: dead-letter file "${config.deadLetterFile}" cannot be opened: ${
            errorMessage(err)
          } (--dead-letter-file: a writable path, or "" to disable it)`,
          { cause: err },
        );
      }
      deadLetters = file;
      cleanups.push(() => file.close());
      log.info("worker: dead-letter file", { path: config.deadLetterFile });
    } else {
      log.warn(
        "worker: dead-letter file disabled; undecodable payloads are only counted and logged",
      );
    }

    const executor = poolExecutor(pool);
    // Built whatever the route (its availability gauge reads 1); it only dials when used.
    const graphite = new GraphiteClient({
      addr: config.graphite.addr,
      prefix: config.graphite.prefix,
      batchSize: config.graphite.batchSize,
      ...(config.graphite.illegalCharacters === undefined
        ? {}
        : { illegalCharacters: config.graphite.illegalCharacters }),
      metrics: {
        written: metrics.graphiteMetricsWritten,
        flushes: metrics.graphiteFlushes,
        dropped: metrics.graphiteMetricsDropped,
        available: metrics.graphiteAvailable,
        errors: metrics.pipelineErrors,
      },
      ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
    });
    cleanups.push(() => graphite.close(0));
    // Built before the pipeline so the handler can publish into it; it opens nothing itself.
    const hub = config.websocket
      ? new WebSocketHub({
        metrics,
        ...(config.statsIntervalMs === undefined
          ? {}
          : { statsIntervalMs: config.statsIntervalMs }),
      })
      : undefined;
    if (hub !== undefined) cleanups.push(() => Promise.resolve(hub.close()));
    const pipeline = new Pipeline({
      executor,
      batchSize: config.batchSize,
      writersPerTable: config.mysqlWritersPerTable,
      deadLetters,
      metrics,
      nodeName: config.nodeName,
      statusMaxAgeSeconds: config.statusMaxAgeSeconds,
      openItcockpit: config.openItcockpit,
      perfdataToMysql: config.perfdataRoute !== "graphite",
      ...(config.perfdataRoute === "mysql" ? {} : { graphite }),
      ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
      ...(hub === undefined ? {} : { stream: hub }),
    });
    cleanups.push(() => pipeline.close(0));

    const observer = metricsObserver(metrics);
    const gated = config.inOrderLock ? queues.filter((q) => QUEUES[q].inOrder) : [];
    const alwaysConsumed = queues.filter((q) => !gated.includes(q));
    if (config.metrics !== null) {
      try {
        server = await startMetricsServer({
          hostname: config.metrics.hostname,
          port: config.metrics.port,
          registry: metrics.registry,
          readiness: () => {
            const reasons: string[] = [];
            if (!pipeline.availability.available) reasons.push("MySQL unavailable");
            // Gated queues are consumed by one worker only: not a readiness condition.
            const down = alwaysConsumed.filter((q) => !observer.connected.has(q));
            if (down.length > 0) reasons.push(`not connected: ${down.join(", ")}`);
            const stalled = queues.filter((q) => observer.stalled.has(q));
            if (stalled.length > 0) reasons.push(`stalled: ${stalled.join(", ")}`);
            return { ready: reasons.length === 0, reasons };
          },
        });
      } catch (err: unknown) {
        throw new StartupError(
          `Cannot start: metrics listener ${config.metrics.hostname}:${config.metrics.port}: ${
            errorMessage(err)
          }`,
          { cause: err },
        );
      }
      const s = server;
      cleanups.push(() => s.shutdown());
      log.info("worker: metrics listening", { addr: `${s.hostname}:${s.port}` });
    }
    if (hub !== undefined && config.websocket) {
      const ws = config.websocket;
      try {
        wsServer = await startWebSocketServer({
          hostname: ws.hostname,
          port: ws.port,
          apiKeys: ws.apiKeys,
          hub,
          metrics,
        });
      } catch (err: unknown) {
        throw new StartupError(
          `Cannot start: websocket listener ${ws.hostname}:${ws.port}: ${
            errorMessage(err)
          }; choose another address for GET /ws with --listen-addr (STATUSENGINE_LISTEN_ADDR)`,
          { cause: err },
        );
      }
      const w = wsServer;
      cleanups.push(() => w.shutdown());
      log.info("websocket: listening", { addr: `${w.hostname}:${w.port}`, path: "/ws" });
    }
    if (commandsEnabled && config.commands) {
      commands = await startCommands(config, config.commands, metrics);
      const c = commands;
      cleanups.push(async () => {
        await c.server.shutdown();
        await c.publisher.close();
      });
    } else {
      log.info("command: POST /commands disabled (no command API keys configured)");
    }

    let consumer: QueueConsumer;
    try {
      const deadLetter = consumerDeadLetter(deadLetters, metrics);
      const main: QueueConsumer = alwaysConsumed.length === 0
        ? { start: () => Promise.resolve(), stop: () => Promise.resolve() }
        : buildConsumer(config, alwaysConsumed, pipeline, observer, deadLetter);
      if (gated.length === 0) {
        consumer = main;
      } else {
        const pollMs = config.inOrderLock?.pollMs ?? IN_ORDER_LOCK_POLL_MS;
        const drainMs = Math.min(config.drainTimeoutMs, IN_ORDER_DRAIN_MS);
        const gate = new InOrderGate({
          build: () =>
            buildConsumer(
              { ...config, drainTimeoutMs: drainMs },
              gated,
              pipeline,
              observer,
              deadLetter,
            ),
          connect: () =>
            mysql.createConnection({ ...urlOptions, connectTimeout: Math.max(pollMs, 1_000) }),
          lockName: await inOrderLockName(urlOptions.database ?? "", config.nodeName),
          pollMs,
          graceMs: inOrderGraceMs(pollMs, drainMs),
          heldGauge: metrics.inOrderLockHeld,
        });
        consumer = {
          start: async () => {
            await main.start();
            await gate.start();
          },
          stop: async () => {
            await Promise.all([main.stop(), gate.stop()]);
          },
        };
      }
    } catch (err: unknown) {
      throw new StartupError(`Cannot start: ${errorMessage(err)}`, { cause: err });
    }
    try {
      await consumer.start();
    } catch (err: unknown) {
      await consumer.stop();
      throw new StartupError(`Cannot start: ${errorMessage(err)}`, { cause: err });
    }

    // After the consumer: a task published before the worker can consume is still fine, but
    // a worker that refuses to start must not have run any task.
    let tasks: { manager: TaskManager; close: () => Promise<void> } | undefined;
    if (config.tasks) {
      const t = config.tasks;
      const publisher = t.submitMethod === "broker" ? commandPublisher(config) : undefined;
      const manager = new TaskManager({
        executor,
        nodeName: config.nodeName,
        intervalMs: t.intervalMs,
        submitter: publisher === undefined
          ? commandFileSubmitter(t.externalCommandFile)
          : brokerSubmitter(publisher),
        metrics,
      });
      manager.start();
      tasks = {
        manager,
        close: async () => {
          await manager.stop();
          await publisher?.close();
        },
      };
    }

    let stopping: Promise<void> | undefined;
    const metricsServer = server;
    return {
      metrics,
      metricsPort: metricsServer?.port ?? null,
      commandsPort: commands?.server.port ?? null,
      websocketPort: wsServer?.port ?? null,
      websocketGeneratedKey: wsServer?.generatedKey ?? null,
      pipeline,
      consumer,
      tasks: tasks?.manager ?? null,
      stop() {
        stopping ??= shutdown(
          config,
          tasks,
          consumer,
          pipeline,
          graphite,
          pool,
          deadLetters,
          metricsServer,
          commands,
          wsServer,
        );
        return stopping;
      },
    };
  } catch (err: unknown) {
    await undo();
    throw err;
  }
}

/** A publisher to `statusngin_cmd` on the worker's backend (connects on first use). */
function commandPublisher(config: WorkerConfig): CommandPublisher {
  if ((config.consumer ?? "gearman") === "rabbitmq") {
    if (config.rabbitmq === undefined) {
      throw new StartupError('Cannot start: consumer "rabbitmq" needs a RabbitMQ URL');
    }
    return rabbitMqCommandPublisher(config.rabbitmq.url, {
      durableQueues: config.rabbitmq.durableQueues,
    });
  }
  return gearmanCommandPublisher(config.gearmanServers);
}

/** The command publisher for the worker's backend, and the listener in front of it. */
async function startCommands(
  config: WorkerConfig,
  listen: NonNullable<WorkerConfig["commands"]>,
  metrics: Metrics,
): Promise<{ server: CommandServer; publisher: CommandPublisher }> {
  const publisher = commandPublisher(config);
  let server: CommandServer;
  try {
    server = await startCommandServer({
      hostname: listen.hostname,
      port: listen.port,
      apiKeys: listen.apiKeys,
      publisher,
      metrics,
    });
  } catch (err: unknown) {
    await publisher.close();
    throw new StartupError(
      `Cannot start: command listener ${listen.hostname}:${listen.port}: ${errorMessage(err)}`,
      { cause: err },
    );
  }
  log.info("command: listening", {
    addr: `${server.hostname}:${server.port}`,
    backend: publisher.backend,
    target: publisher.target,
    queue: COMMAND_QUEUE,
    denied: DENIED_RAW_COMMANDS.join(","),
  });
  return { server, publisher };
}

/**
 * The delivery engine's dead letters (jobs too large to read, jobs that trip
 * an internal error) go to the same file as the pipeline's, counted once
 * written.
 */
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
    await sink.write({
      queue: job.queue,
      reason,
      error,
      payload: decoder.decode(job.payload),
      ...(reason === "too_large" ? { bytes } : {}),
    });
    metrics.deadLetters.inc({ queue_name: job.queue, reason });
    metrics.pipelineErrors.inc({ component: "queue" });
  };
}

function buildConsumer(
  config: WorkerConfig,
  queues: readonly QueueName[],
  pipeline: Pipeline,
  observer: ConsumerObserver,
  deadLetter: ConsumerDeadLetterSink,
): QueueConsumer {
  const common = {
    handler: pipeline.handler,
    observer,
    // The windows of the queues that are not in order follow their tables' writers.
    window: { pressure: (queue: string) => pipeline.pressure(queue) },
    deadLetter,
    reconnectIntervalMs: config.reconnectIntervalMs,
    drainTimeoutMs: config.drainTimeoutMs,
    ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
    ...(config.maxInFlightBytes === undefined ? {} : { maxInFlightBytes: config.maxInFlightBytes }),
    ...(config.maxJobSize === undefined ? {} : { maxJobSize: config.maxJobSize }),
    ...(config.queueStallTimeoutMs === undefined
      ? {}
      : { stallTimeoutMs: config.queueStallTimeoutMs }),
  };
  const name = config.nodeName.replace(/\s+/g, "_");
  if ((config.consumer ?? "gearman") === "rabbitmq") {
    if (config.rabbitmq === undefined) {
      throw new TypeError('Consumer "rabbitmq" needs a RabbitMQ URL and prefetch');
    }
    return new RabbitMqConsumer({
      ...common,
      url: config.rabbitmq.url,
      prefetch: config.rabbitmq.prefetch,
      durableQueues: config.rabbitmq.durableQueues,
      queues: queues.map((q) => ({ name: q, inOrder: QUEUES[q].inOrder })),
      connectionName: `statusengine-${name}`,
    });
  }
  return new GearmanConsumer({
    ...common,
    servers: config.gearmanServers,
    queues: queues.map((q) => ({ name: q, inOrder: QUEUES[q].inOrder })),
    maxJobsPerQueue: config.maxJobsPerQueue,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    heartbeatTimeoutMs: config.heartbeatTimeoutMs,
    clientIdPrefix: `statusengine-${name}`,
  });
}

async function step(name: string, fn: () => Promise<void>): Promise<void> {
  const started = performance.now();
  try {
    await fn();
  } catch (err: unknown) {
    log.error(`shutdown: ${name} failed`, { error: errorMessage(err) });
  }
  log.info(`shutdown: ${name} done`, { duration_ms: Math.round(performance.now() - started) });
}

/** pipeline.md §6.2: every step bounded; a failed step never skips the next. */
async function shutdown(
  config: WorkerConfig,
  tasks: { close: () => Promise<void> } | undefined,
  consumer: QueueConsumer,
  pipeline: Pipeline,
  graphite: GraphiteClient,
  pool: mysql.Pool,
  deadLetters: DeadLetterSink,
  server: MetricsServer | undefined,
  commands: { server: CommandServer; publisher: CommandPublisher } | undefined,
  websocket: WebSocketServer | undefined,
): Promise<void> {
  const started = performance.now();
  // 0. No new task is submitted; one being submitted is abandoned and stays in the table.
  if (tasks !== undefined) await step("stop task queue", () => tasks.close());
  // 1. No new jobs; running ones get the drain timeout to commit and be acknowledged (D1, G9).
  await step("drain consumer", () => consumer.stop());
  // 2. Whatever the writers still hold, within the flush budget (W9).
  // Writers and Graphite flush concurrently under the one budget (W9).
  await step("flush writers", async () => {
    await Promise.all([
      pipeline.close(config.shutdownFlushTimeoutMs),
      graphite.close(config.shutdownFlushTimeoutMs),
    ]);
  });
  await step("close dead-letter file", () => deadLetters.close());
  // 3. The hub: every /ws client gets a close frame, new ones are refused (operations.md §6.3).
  if (websocket !== undefined) {
    await step("close websocket clients", () => websocket.closeClients());
  }
  // The pool; a hung MySQL must not hold the process.
  await step("close MySQL pool", async () => {
    using limit = deadline(5_000);
    await Promise.race([
      pool.end(),
      new Promise<void>((resolve) => limit.signal.addEventListener("abort", () => resolve())),
    ]);
  });
  // 4. HTTP last, so /metrics shows the shutdown until the end. The command
  // server stops accepting before its publisher closes, so requests already
  // in flight can still publish (operations.md §6.3).
  if (commands !== undefined) {
    await step("stop command server", async () => {
      using limit = deadline(5_000);
      await Promise.race([
        commands.server.shutdown(),
        new Promise<void>((resolve) => limit.signal.addEventListener("abort", () => resolve())),
      ]);
    });
    await step("close command publisher", () => commands.publisher.close());
  }
  if (websocket !== undefined) {
    await step("stop websocket server", async () => {
      using limit = deadline(5_000);
      await Promise.race([
        websocket.shutdown(),
        new Promise<void>((resolve) => limit.signal.addEventListener("abort", () => resolve())),
      ]);
    });
  }
  if (server !== undefined) {
    await step("stop metrics server", async () => {
      using limit = deadline(5_000);
      await Promise.race([
        server.shutdown(),
        new Promise<void>((resolve) => limit.signal.addEventListener("abort", () => resolve())),
      ]);
    });
  }
  log.info("shutdown complete", { duration_ms: Math.round(performance.now() - started) });
}
