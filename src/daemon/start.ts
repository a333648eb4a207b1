/**
 * The daemon, assembled: metrics → MySQL (pool, probe, schema check, node row) → dead-letter
 * file, perfdata backends, `/ws` hub → pipeline → HTTP surfaces → queue consumption → task queue.
 * What was built is owned by an `AsyncDisposableStack` until the start succeeded, so a start
 * that fails half-way releases exactly what it opened; a running worker shuts down in the
 * documented order instead ({@link shutdown}).
 *
 * @module
 */
import { metricsObserver } from "../consumer/metrics_observer.ts";
import {
  CONSUMER_DEAD_LETTER_REASONS,
  GIVE_BACK_REASONS,
  JOB_RESULTS,
  type QueueConsumer,
} from "../consumer/contract.ts";
import { INVALID_REASONS, QUEUE_NAMES, type QueueName, QUEUES } from "../events/mod.ts";
import {
  ADJUSTMENT_REASONS,
  IdleProbe,
  Lease,
  type MysqlHosts,
  nodeLease,
  nodeLeaseOptions,
} from "../mysql/mod.ts";
import { createMetrics, type Metrics, precreateSeries } from "../metrics/registry.ts";
import { COMPONENTS } from "../metrics/catalogue.ts";
import { type ListenerName, type Readiness, WebSocketHub } from "../http/mod.ts";
import { COMMAND_NAMES, RawCommandAllowlist, REJECT_REASONS } from "../commands/mod.ts";
import { batchedTables, downtimeTables, Pipeline } from "../pipeline/pipeline.ts";
import type { DeadLetters } from "../pipeline/dead_letter.ts";
import type { ConnectionState } from "../consumer/metrics_observer.ts";
import {
  brokerSubmitter,
  commandFileSubmitter,
  probeCommandFile,
  TaskManager,
} from "../tasks/task_manager.ts";
import { identity, versionLine } from "../version.ts";
import { errorMessage, getLogger } from "../log.ts";
import { served, type WorkerConfig } from "./config.ts";
import { openDatabase, type WaitOptions } from "./database.ts";
import {
  openDeadLetters,
  perfdataOutputs,
  serveCommands,
  serveMetrics,
  serveWebSocket,
} from "./outputs.ts";
import {
  buildConsumption,
  IN_ORDER_LOCK_POLL_MS,
  type QueueBackend,
  queueBackend,
  type QueueSplit,
  splitQueues,
} from "./consumers.ts";
import { redactUrl } from "../util/redact.ts";
import { WorkerError } from "../util/errors.ts";
import { deadline, settledWithin } from "../util/async.ts";

const log = getLogger("worker");

/** A running worker. */
export interface RunningWorker {
  readonly metrics: Metrics;
  /** Bound metrics port, or null when disabled. */
  readonly metricsPort: number | null;
  /** Bound `/commands` port, or null when the endpoint is not served. */
  readonly commandsPort: number | null;
  /** Bound `/ws` port, or null when the stream is not served. */
  readonly websocketPort: number | null;
  readonly pipeline: Pipeline;
  readonly consumer: QueueConsumer;
  /** The task queue poller, or null when `statusengine_tasks` is not read. */
  readonly tasks: TaskManager | null;
  /** Reopen the dead-letter file at its path (SIGHUP); null when dead letters go to no file. */
  reopenDeadLetters(): Promise<string | null>;
  /** Graceful shutdown ({@link shutdown}). Idempotent. */
  stop(): Promise<void>;
}

/**
 * Start the daemon; `signal` ends a start that waits for MySQL (SIGTERM during start-up).
 *
 * @throws {WorkerError} (code `startup`) When MySQL, the schema, a listener, every job server, the
 *   RabbitMQ broker or the task queue's command file is unusable.
 */
export async function startWorker(
  config: WorkerConfig,
  options: Omit<WaitOptions, "metrics"> = {},
): Promise<RunningWorker> {
  const id = identity();
  log.info("statusengine-worker starting", {
    version: id.version,
    commit: id.commit,
    deno: id.denoVersion,
    line: versionLine(),
    node: config.nodeName,
  });
  if (config.changedSettings !== undefined) {
    const changed = Object.keys(config.changedSettings).length;
    // What was configured (secrets masked): a wrong file or a forgotten override shows.
    const summary = changed === 0 ? "all at their defaults" : `${changed} differ from the defaults`;
    log.info(`settings: ${summary}`, config.changedSettings);
  }
  const queues = config.queues ?? QUEUE_NAMES;
  const metrics = workerMetrics(config, queues, id);
  const backend = queueBackend(config, metrics);
  log.info("worker: stale status filter", {
    status_max_age_s: config.statusMaxAgeSeconds,
    enabled: config.statusMaxAgeSeconds > 0,
  });
  // A restart without a message timestamp is dated by the status this worker receives (the core
  // clock's lag, docs/core-restart.md): without either status queue every restart is "unknown".
  const dated = queues.some((q) => QUEUES[q].staleFilter);
  if (queues.includes("statusngin_core_restart") && !dated && !config.openItcockpit) {
    log.warn(
      "worker: statusngin_core_restart is consumed without statusngin_hoststatus or " +
        "statusngin_servicestatus, so a restart without a timestamp cannot be dated and sweeps " +
        "nothing; consume it on a worker that takes a status queue",
    );
  }
  if (config.tasks?.submitMethod === "cmd") {
    await checkCommandFile(config.tasks.externalCommandFile);
  }

  await using stack = new AsyncDisposableStack();
  // /metrics and /readyz first: a start waiting for MySQL or job servers shows what (503).
  let verdict: () => Readiness = () => ({ ready: false, reasons: ["starting"] });
  const metricsServer = stack.use(await serveMetrics(config, metrics, () => verdict()));
  const database = stack.use(
    await openDatabase(config, queues, id.version, {
      ...options,
      waiting: (reason) => {
        verdict = () => ({ ready: false, reasons: [reason ?? "starting"] });
        // No writes while waiting: the gauge says 0, so the MySQL alert fires at boot too.
        metrics.dbAvailable.set(reason === undefined ? 1 : 0);
        options.waiting?.(reason);
      },
      metrics,
    }),
  );
  const deadLetters = stack.use(await openDeadLetters(config, metrics));
  const perfdata = stack.use(perfdataOutputs(config, metrics));
  // The `/ws` hub when the stream is served, built before the pipeline that publishes into it.
  const hub = served(config.websocket)
    ? new WebSocketHub({ metrics, statsIntervalMs: config.statsIntervalMs })
    : undefined;
  if (hub !== undefined) stack.defer(() => Promise.resolve(hub.close()));
  const split = splitQueues(config, queues);
  // The downtime statements commit only while this worker holds the lease that admits them.
  const inOrderLease = split.gated.length > 0 ? nodeLease("in-order", config.nodeName) : undefined;
  const pipeline = new Pipeline({
    executor: database.executor,
    batchSize: config.batchSize,
    writersPerTable: config.mysqlWritersPerTable,
    deadLetters,
    metrics,
    mysql: redactUrl(config.mysqlUrl),
    nodeName: config.nodeName,
    statusMaxAgeSeconds: config.statusMaxAgeSeconds,
    openItcockpit: config.openItcockpit,
    perfdataLabelQuotes: config.perfdataLabelQuotes,
    perfdataToMysql: config.perfdataBackends.includes("mysql"),
    perfdataSink: perfdata,
    statsIntervalMs: config.statsIntervalMs,
    stream: hub,
    inOrderLease,
  });
  stack.defer(() => pipeline.close(0));
  // While nothing is written, a bounded round trip keeps statusengine_db_available true to what
  // MySQL does (else a frozen server shows as available until a statement times out).
  const probe = new IdleProbe(pipeline.availability, database.ping);
  probe.start();
  stack.defer(() => probe.stop());

  const observer = metricsObserver(metrics);
  verdict = () => readiness(pipeline, deadLetters, observer, split, database.hosts);
  const websocket = stack.use(await serveWebSocket(config, hub, metrics));
  const commands = stack.use(await serveCommands(config, metrics, backend));

  let consumer: QueueConsumer;
  try {
    consumer = buildConsumption({
      config,
      backend,
      pipeline,
      observer,
      deadLetters,
      metrics,
      mysqlHosts: database.hosts,
      inOrderLease,
    }, split);
    stack.defer(() => consumer.stop());
    // A stop ends the first connection attempts (each may wait up to its connect timeout); the
    // start then fails as stopped instead of going on to consume.
    const signal = options.signal;
    signal?.throwIfAborted();
    const stopStarting = () => void consumer.stop();
    signal?.addEventListener("abort", stopStarting, { once: true });
    try {
      await consumer.start();
    } finally {
      signal?.removeEventListener("abort", stopStarting);
    }
  } catch (err: unknown) {
    // Said once: errors that already begin with "Cannot start" keep their words.
    const text = errorMessage(err);
    const message = /^Cannot start\b/.test(text) ? text : `Cannot start: ${text}`;
    throw new WorkerError("startup", message, { cause: err });
  }

  // After the consumer: a worker that refuses to start must not have run any task.
  const tasks = startTasks(config, backend, database.executor, database.hosts, metrics);

  /**
   * The graceful shutdown (docs/shutdown.md#order-and-budgets): every step bounded and logged once
   * with its duration, a failed step never skips the next; the HTTP listeners go last, so
   * `/metrics` shows the shutdown until the end.
   */
  async function shutdown(): Promise<void> {
    const started = performance.now();
    const flushMs = config.shutdownFlushTimeoutMs;
    // Each step whose part was started, in this order.
    const steps: [string, (() => unknown) | undefined][] = [
      // A task being submitted is abandoned and stays in the table for the next start (unless its
      // message was written to the broker unconfirmed: deleted, not sent twice). Bounded: the
      // poll's statement may wait on a locked or frozen MySQL up to the statement timeout (0: for
      // ever); it fails once the pool is closed below.
      ["stop task queue", tasks && (() => bounded(() => tasks.close()))],
      ["drain consumer", () => consumer.stop()],
      ["flush writers", () => Promise.all([pipeline.close(flushMs), perfdata?.close(flushMs)])],
      // Bounded: a write to a hung mount never returns; its job was not acknowledged.
      ["close dead-letter file", async () => {
        using limit = deadline(CLOSE_TIMEOUT_MS);
        await deadLetters.close(limit.signal);
      }],
      ["close websocket clients", websocket && (() => websocket.closeClients())],
      ["close MySQL pool", async () => {
        await probe.stop();
        await database[Symbol.asyncDispose]();
      }],
      // The listener stops accepting first, so requests in flight can still publish.
      ["stop command server", commands && (() => bounded(() => commands.server.shutdown()))],
      ["close command publisher", commands && (() => commands.publisher.close())],
      ["stop websocket server", websocket && (() => bounded(() => websocket.shutdown()))],
      ["stop metrics server", metricsServer && (() => bounded(() => metricsServer.shutdown()))],
    ];
    for (const [name, fn] of steps) {
      if (fn !== undefined) await step(name, fn);
    }
    log.info("shutdown complete", { duration_ms: Math.round(performance.now() - started) });
  }

  // Started: from here on stop() releases everything, in order.
  stack.move();
  let stopping: Promise<void> | undefined;
  return {
    metrics,
    metricsPort: metricsServer?.port ?? null,
    commandsPort: commands?.server.port ?? null,
    websocketPort: websocket?.port ?? null,
    pipeline,
    consumer,
    tasks: tasks?.manager ?? null,
    reopenDeadLetters: () => deadLetters.reopen(),
    stop() {
      stopping ??= shutdown();
      return stopping;
    },
  };
}

/** The run's registry with build info and the documented zero series. */
function workerMetrics(
  config: WorkerConfig,
  queues: readonly QueueName[],
  id: ReturnType<typeof identity>,
): Metrics {
  const commandsEnabled = served(config.commands);
  const metrics = createMetrics();
  // `revision`: the Go worker's name for the commit, which its dashboards select on.
  metrics.buildInfo.set(
    { version: id.version, deno_version: id.denoVersion, commit: id.commit, revision: id.commit },
    1,
  );
  precreateSeries(metrics, {
    queues,
    statusQueues: queues.filter((q) => QUEUES[q].staleFilter),
    eventLagQueues: queues.filter((q) => QUEUES[q].eventTimeColumn !== null),
    jobResults: JOB_RESULTS,
    deadLetterReasons: [...INVALID_REASONS, "sql_rejected", ...CONSUMER_DEAD_LETTER_REASONS],
    giveBackReasons: GIVE_BACK_REASONS,
    tables: [...batchedTables(), ...downtimeTables()].map((t) => t.name),
    batchedTables: batchedTables().map((t) => t.name),
    adjustReasons: ADJUSTMENT_REASONS,
    components: COMPONENTS,
    ...(commandsEnabled ? { commands: COMMAND_NAMES, commandRejectReasons: REJECT_REASONS } : {}),
    listeners: ([
      config.metrics === null ? null : "metrics",
      served(config.websocket) ? "websocket" : null,
      commandsEnabled ? "commands" : null,
    ] as const).filter((l): l is ListenerName => l !== null),
  });
  return metrics;
}

/** `/readyz`: MySQL takes writes, dead letters can be written, every queue consumes. */
function readiness(
  pipeline: Pipeline,
  deadLetters: DeadLetters,
  queues: ConnectionState,
  split: QueueSplit,
  hosts: MysqlHosts,
): Readiness {
  const reasons: string[] = [];
  if (!pipeline.availability.available) reasons.push("MySQL unavailable");
  if (!deadLetters.writable) reasons.push("dead-letter file cannot be written");
  // Queues behind the in-order lock are consumed by one worker only: not a readiness condition.
  const down = split.always.filter((q) => !queues.connected.has(q));
  // Given back on purpose while MySQL cannot take writes (docs/retries.md#give-back).
  const givenBack = down.filter((q) => queues.givenBack.has(q));
  const lost = down.filter((q) => !queues.givenBack.has(q));
  if (givenBack.length > 0) {
    reasons.push(`jobs given back until MySQL answers: ${givenBack.join(", ")}`);
  }
  if (lost.length > 0) reasons.push(`not connected: ${lost.join(", ")}`);
  const stalled = [...split.always, ...split.gated].filter((q) => queues.stalled.has(q));
  if (stalled.length > 0) reasons.push(`stalled: ${stalled.join(", ")}`);
  // With several MySQL hosts, which one is written to (docs/running.md#mysql-hosts).
  const details = hosts.several ? [`MySQL host in use: ${hosts.label}`] : [];
  return { ready: reasons.length === 0, reasons, details };
}

/**
 * {@link probeCommandFile} when tasks are written to the command file; a missing one is said once
 * (tasks wait: right while the core is stopped, endless when the path is wrong).
 *
 * @throws {WorkerError} (code `startup`) When the file exists and cannot be opened for writing.
 */
async function checkCommandFile(path: string): Promise<void> {
  const probe = await probeCommandFile(path).catch(async (err: unknown) => {
    throw new WorkerError(
      "startup",
      `Cannot start: check_for_commands submits the UI's tasks with submit_method cmd, and the ` +
        `external command file "${path}" cannot be opened for writing: ${errorMessage(err)}. ` +
        `${await commandFileAdvice(path, err)}, or set submit_method: broker ` +
        `(--submit-method broker: the tasks go to statusngin_cmd like POST /commands) ` +
        `(docs/operations.md#command-files)`,
      { cause: err },
    );
  });
  if (probe === "missing") {
    log.warn(
      "tasks: the external command file does not exist; tasks wait until the core creates it " +
        "(a core that uses another path: set external_command_file)",
      { path },
    );
  }
}

/** What to change for a command file the open refused: the group, the unit, or the path. */
async function commandFileAdvice(path: string, err: unknown): Promise<string> {
  if (err instanceof Deno.errors.PermissionDenied) {
    const group = await groupOf(path);
    // The core creates its FIFO writable for its own group only.
    return `Its permissions refuse the user the worker runs as: add that user to ` +
      `${group === undefined ? "the file's group" : `the group ${group}`} (SupplementaryGroups=` +
      `${group ?? "<group>"} in the unit)`;
  }
  if (/read-only file system/i.test(errorMessage(err))) {
    return `A plain file needs ReadWritePaths=${path} in the unit (a FIFO does not)`;
  }
  return "Set external_command_file (--external-command-file) to the core's command file";
}

/** The name of a file's group from /etc/group, if it can be found (else only a better message is lost). */
async function groupOf(path: string): Promise<string | undefined> {
  try {
    const gid = (await Deno.stat(path)).gid;
    const groups = await Deno.readTextFile("/etc/group");
    return groups.split("\n").map((line) => line.split(":"))
      .find((fields) => fields[2] === String(gid))?.[0];
  } catch {
    return undefined;
  }
}

/** A tasks lease holder's time to stop: the submission in flight (a 5 s budget) and its DELETE. */
const TASKS_LEASE_DRAIN_MS = 7_000;

/**
 * The `statusengine_tasks` poller, when configured; its publisher is its own. With the in-order
 * lock (several workers may share the node), only the holder of the node's tasks lease runs them:
 * each worker would otherwise read the same rows and submit every task once per worker.
 */
function startTasks(
  config: WorkerConfig,
  backend: QueueBackend,
  executor: ConstructorParameters<typeof TaskManager>[0]["executor"],
  hosts: MysqlHosts,
  metrics: Metrics,
): { manager: TaskManager; close(): Promise<void> } | undefined {
  const t = config.tasks;
  if (!t) return undefined;
  const publisher = t.submitMethod === "broker" ? backend.commandPublisher() : undefined;
  // The lease of the node's task queue: one row of `statusengine_worker_leases` per node name.
  const lease = config.inOrderLock
    ? new Lease({
      ...nodeLeaseOptions(
        nodeLease("tasks", config.nodeName),
        () => hosts.inUse,
        config.inOrderLock.pollMs ?? IN_ORDER_LOCK_POLL_MS,
        TASKS_LEASE_DRAIN_MS,
      ),
      // The manager asks `valid` before each poll and each submission: nothing to start or stop.
      onHeld: () => {
        log.info("tasks: this worker runs the node's tasks (it holds the tasks lease)", {
          node_name: config.nodeName,
        });
        return Promise.resolve();
      },
      onLost: () => Promise.resolve(),
    })
    : undefined;
  const manager = new TaskManager({
    executor,
    nodeName: config.nodeName,
    intervalMs: t.intervalMs,
    submitter: publisher === undefined
      ? commandFileSubmitter(t.externalCommandFile)
      : brokerSubmitter(publisher),
    metrics,
    ...(t.allow === undefined ? {} : { allow: new RawCommandAllowlist(t.allow) }),
    ...(lease === undefined ? {} : { mayRun: () => lease.valid }),
  });
  lease?.start();
  manager.start();
  return {
    manager,
    close: async () => {
      // The lease is released only once no task is being submitted.
      await manager.stop();
      await lease?.stop();
      await publisher?.close();
    },
  };
}

/** Bound on each step that waits for a peer (task queue, dead-letter file, HTTP listeners). */
const CLOSE_TIMEOUT_MS = 5_000;

async function step(name: string, fn: () => unknown): Promise<void> {
  const started = performance.now();
  try {
    await fn();
  } catch (err: unknown) {
    log.error(`shutdown: ${name} failed`, { error: errorMessage(err) });
  }
  log.info(`shutdown: ${name} done`, { duration_ms: Math.round(performance.now() - started) });
}

/** Run `fn`, but stop waiting for it after {@link CLOSE_TIMEOUT_MS}. */
async function bounded(fn: () => Promise<unknown>): Promise<void> {
  using limit = deadline(CLOSE_TIMEOUT_MS);
  if (!(await settledWithin(fn(), limit.signal))) {
    throw new Error(`no answer within ${CLOSE_TIMEOUT_MS} ms`);
  }
}
