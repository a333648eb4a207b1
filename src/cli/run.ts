/**
 * The `run` command: settings → {@link WorkerConfig}, start, wait for
 * SIGTERM/SIGINT, shut down in order, exit 0 (docs/shutdown.md).
 *
 * @module
 */
import { settingsDifferingFromDefaults, type SettingsFor, splitHostPort } from "../config/mod.ts";
import {
  type PerfdataBackend,
  StartupError,
  startWorker,
  type WorkerConfig,
} from "../daemon/mod.ts";
import { QUEUE_NAMES } from "../events/queues.ts";
import { illegalCharactersPattern } from "../util/illegal_characters.ts";
import type { Io } from "./io.ts";
import { aborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("worker");

/**
 * Map validated settings onto the worker's configuration.
 *
 * @param s Settings of the `run` command.
 * @returns The worker configuration.
 */
export function workerConfigFrom(s: SettingsFor<"run">): WorkerConfig {
  const include = s.queues.length === 0
    ? QUEUE_NAMES
    : QUEUE_NAMES.filter((q) => s.queues.includes(q));
  const queues = include.filter((q) => !s.excludeQueues.includes(q));
  if (queues.length === 0) {
    throw new StartupError(
      "Cannot start: no queue left to consume: --queues and --exclude-queues (or the legacy " +
        "number_*_worker: 0 and process_perfdata: 0) exclude all of them",
    );
  }
  return {
    queues,
    // Always: several workers may share a job server, and the in-order queues must then be
    // consumed by one of them at a time.
    inOrderLock: {},
    consumer: s.consumer,
    gearmanServers: s.gearmanAddr,
    maxJobsPerQueue: s.gearmanMaxConcurrentJobsPerQueue,
    maxInFlightBytes: s.maxInFlightBytes,
    maxJobSize: s.maxJobSize,
    queueStallTimeoutMs: s.queueStallTimeoutMs,
    rabbitmq: {
      url: s.rabbitmqUrl,
      prefetch: s.rabbitmqPrefetch,
      durableQueues: s.rabbitmqDurableQueues,
    },
    reconnectIntervalMs: s.consumer === "rabbitmq"
      ? s.rabbitmqReconnectIntervalMs
      : s.gearmanReconnectIntervalMs,
    heartbeatIntervalMs: s.gearmanHeartbeatIntervalMs,
    heartbeatTimeoutMs: s.gearmanHeartbeatTimeoutMs,
    drainTimeoutMs: s.drainTimeoutMs,
    shutdownFlushTimeoutMs: s.shutdownFlushTimeoutMs,
    mysqlUrl: s.mysqlUrl,
    mysqlMaxOpenConns: s.mysqlMaxOpenConns,
    mysqlStatementTimeoutMs: s.mysqlStatementTimeoutMs,
    mysqlWritersPerTable: s.mysqlWritersPerTable,
    batchSize: s.mysqlBatchSize,
    statusMaxAgeSeconds: Math.floor(s.statusMaxAgeMs / 1000),
    nodeName: s.nodeName,
    deadLetterFile: s.deadLetterFile === "" ? null : s.deadLetterFile,
    // The setting's pattern admits only these names.
    perfdataBackends: s.perfdataBackends as PerfdataBackend[],
    graphite: {
      addr: s.graphiteAddr,
      prefix: s.graphitePrefix,
      batchSize: s.graphiteBatchSize,
      illegalCharacters: illegalCharactersPattern(s.graphiteIllegalCharacters),
    },
    influxdb: {
      url: s.influxdbUrl,
      user: s.influxdbUser,
      password: s.influxdbPassword,
      token: s.influxdbToken,
      measurement: s.influxdbMeasurement,
      batchSize: s.influxdbBatchSize,
    },
    prometheusRemoteWrite: {
      url: s.prometheusRemoteWriteUrl,
      bearerToken: s.prometheusRemoteWriteBearerToken,
      user: s.prometheusRemoteWriteUser,
      password: s.prometheusRemoteWritePassword,
      batchSize: s.prometheusRemoteWriteBatchSize,
    },
    openItcockpit: s.enableOpenitcockpitTweaks,
    metrics: s.metricsPort === 0 ? null : { hostname: s.metricsHost, port: s.metricsPort },
    commands: s.commandApiKeys.length === 0 ? null : {
      ...listenAddress(s.commandListenAddr),
      apiKeys: s.commandApiKeys,
      allow: s.commandAllow,
    },
    tasks: s.checkForCommands
      ? {
        intervalMs: s.commandCheckIntervalMs,
        submitMethod: s.submitMethod,
        externalCommandFile: s.externalCommandFile,
        allow: s.commandAllow,
      }
      : null,
    http: { maxConnections: s.httpMaxConnections },
    // Always served: without keys a random one is generated per run (docs/operations.md#ws).
    websocket: { ...listenAddress(s.listenAddr), apiKeys: s.apiKeys },
    changedSettings: settingsDifferingFromDefaults("run", s),
  };
}

/** `host:port` as validated by the settings (`:port` = all interfaces) → listen options. */
function listenAddress(addr: string): { hostname: string; port: number } {
  const split = splitHostPort(addr, { emptyHost: true });
  // Already validated when the settings were loaded; a failure here is a bug.
  if (!split.ok) throw new TypeError(`Cannot use listen address "${addr}": ${split.problem}`);
  return {
    hostname: split.value.host === "" ? "0.0.0.0" : split.value.host,
    port: split.value.port,
  };
}

/**
 * Run the daemon until `signal` aborts.
 *
 * @param settings Settings of `run`.
 * @param io Output for the start-up error.
 * @param signal Aborted by the first SIGTERM/SIGINT.
 * @returns Exit code: 0 after a completed shutdown, 1 when the worker cannot start.
 */
export async function runWorkerCommand(
  settings: SettingsFor<"run">,
  io: Io,
  signal: AbortSignal,
): Promise<number> {
  let worker;
  try {
    worker = await startWorker(workerConfigFrom(settings));
  } catch (err: unknown) {
    if (err instanceof StartupError) {
      log.error(err.message);
      io.err(`statusengine-worker: ${err.message}`);
      return 1;
    }
    throw err;
  }
  await aborted(signal);
  log.info("shutdown signal received, starting graceful shutdown");
  try {
    await worker.stop();
  } catch (err: unknown) {
    log.error("shutdown failed", { error: errorMessage(err) });
  }
  return 0;
}
