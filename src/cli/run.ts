/**
 * The `run` command: settings → {@link WorkerConfig}, start, wait for SIGTERM/SIGINT, shut
 * down in order, exit 0 (docs/shutdown.md).
 *
 * @module
 */
import {
  listenAddress,
  settingsDifferingFromDefaults,
  type SettingsFor,
  settingsGroup,
} from "../config/mod.ts";
import {
  type PerfdataBackend,
  serviceNotifier,
  SETTINGS_AS_IS,
  startWorker,
  type WorkerConfig,
} from "../daemon/mod.ts";
import { QUEUE_NAMES } from "../events/mod.ts";
import { illegalCharactersPattern } from "../util/illegal_characters.ts";
import type { Io } from "./io.ts";
import { aborted } from "../util/async.ts";
import { errorMessage, getLogger, logReachesStderr } from "../log.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/**
 * Map validated settings onto the worker's configuration; a `startup` WorkerError when no queue
 * is left or the task queue's command file may not be written.
 */
export function workerConfigFrom(s: SettingsFor<"run">): WorkerConfig {
  const wanted = (q: string) => s.queues.length === 0 || s.queues.includes(q);
  const queues = QUEUE_NAMES.filter((q) => wanted(q) && !s.excludeQueues.includes(q));
  if (queues.length === 0) {
    throw new WorkerError(
      "startup",
      "Cannot start: no queue left to consume: --queues and --exclude-queues (or the legacy " +
        "number_*_worker: 0 and process_perfdata: 0) exclude all of them",
    );
  }
  refuseUnwritableCommandFile(s);
  return {
    ...Object.fromEntries(SETTINGS_AS_IS.map((key) => [key, s[key]])) as Pick<
      SettingsFor<"run">,
      (typeof SETTINGS_AS_IS)[number]
    >,
    queues,
    // Always: several workers may share a job server, and the in-order queues must then be
    // consumed by one of them at a time.
    inOrderLock: {},
    consumer: s.consumer,
    gearmanServers: s.gearmanAddr,
    maxJobsPerQueue: s.gearmanMaxConcurrentJobsPerQueue,
    maxInFlightBytes: s.maxInFlightBytes,
    rabbitmq: settingsGroup(s, "rabbitmq"),
    reconnectIntervalMs: s.consumer === "rabbitmq"
      ? s.rabbitmqReconnectIntervalMs
      : s.gearmanReconnectIntervalMs,
    batchSize: s.mysqlBatchSize,
    // Rounded up: never discards an event younger than asked, and never turns 500ms into the
    // 0 that disables the filter.
    statusMaxAgeSeconds: Math.ceil(s.statusMaxAgeMs / 1000),
    deadLetterFile: s.deadLetterFile === "" ? null : s.deadLetterFile,
    // The setting's pattern admits only these names.
    perfdataBackends: s.perfdataBackends as PerfdataBackend[],
    graphite: {
      ...settingsGroup(s, "graphite"),
      illegalCharacters: illegalCharactersPattern(s.graphiteIllegalCharacters),
    },
    influxdb: settingsGroup(s, "influxdb"),
    prometheusRemoteWrite: settingsGroup(s, "prometheusRemoteWrite"),
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
    // Served only with keys and an address (docs/operations.md#ws): a generated key would have to
    // be logged to be of use, i.e. written into the journal.
    websocket: s.listenAddr === "" || !s.apiKeys.some((k) => k !== "")
      ? null
      : { ...listenAddress(s.listenAddr), apiKeys: s.apiKeys },
    changedSettings: settingsDifferingFromDefaults("run", s),
  };
}

/**
 * Refuse a task queue that could never deliver: with `--submit-method cmd` and a command file
 * this process may not write (docs/operations.md#compiled-permissions) the worker would look
 * ready while every task waited in statusengine_tasks. Only Deno's permission is checked, so
 * that `config` checks it without opening anything; `run` opens the file at start (src/daemon/start.ts).
 */
function refuseUnwritableCommandFile(s: SettingsFor<"run">): void {
  if (!s.checkForCommands || s.submitMethod !== "cmd") return;
  const path = s.externalCommandFile;
  if (Deno.permissions.querySync({ name: "write", path }).state === "granted") return;
  throw new WorkerError(
    "startup",
    `Cannot start: check_for_commands submits the UI's tasks with submit_method cmd to the ` +
      `external command file "${path}", which this process may not write, so every task would ` +
      `fail. Either set submit_method: broker (--submit-method broker: the tasks go to ` +
      `statusngin_cmd like POST /commands), or let the worker write that file: the compiled ` +
      `binary may write the usual cores' command files (set external_command_file, ` +
      `--external-command-file, to the core's one) and any other it was built for ` +
      `(STATUSENGINE_COMMAND_FILES=${path} deno task compile); from a checkout, name it in ` +
      `--allow-write (docs/operations.md#compiled-permissions)`,
  );
}

/** What the command line learns of the running worker (for SIGHUP). */
export interface RunHooks {
  /** Called once the worker runs, with what a reload may do to it. */
  readonly started?: (worker: { reopenDeadLetters(): Promise<string | null> }) => void;
}

/** Run the daemon until `signal` aborts: exit 0 after a completed shutdown, 1 when it cannot start. */
export async function runWorkerCommand(
  settings: SettingsFor<"run">,
  io: Io,
  signal: AbortSignal,
  hooks: RunHooks = {},
): Promise<number> {
  // Type=notify: `systemctl start` returns (successfully) only after READY=1, and fails when the
  // worker exits before it (docs/running.md#notify); `systemctl status` shows what a start waits for.
  const notifier = serviceNotifier();
  // WatchdogSec= in the unit: WATCHDOG=1 from this event loop for as long as the command runs,
  // also while the start waits for MySQL and during the shutdown. It proves that the event loop
  // turns, not that MySQL or the job servers answer (docs/running.md#watchdog).
  using _keepAlive = notifier.watchdog();
  let shown: string | undefined;
  // One status at a time, each after the one before, and READY=1 after them all: each is a child
  // process of its own, and a STATUS= that arrived after READY=1 would stay on `systemctl status`.
  let statusSent = Promise.resolve();
  let worker;
  try {
    worker = await startWorker(workerConfigFrom(settings), {
      signal,
      waiting: (reason) => {
        if (reason === shown) return;
        shown = reason;
        statusSent = statusSent.then(() => notifier.status(reason ?? "starting"));
      },
    });
    hooks.started?.(worker);
  } catch (err: unknown) {
    if (!hasCode(err, "startup")) throw err;
    if (signal.aborted) {
      // Told to stop while waiting for MySQL: a requested stop, not a failure.
      log.info("shutdown signal received during start-up, stopped", { reason: err.message });
      return 0;
    }
    // Once per place it is seen: the log line (priority err in the journal), and stderr only
    // when stderr does not show the log already (a terminal or the journal would show it twice).
    log.error(err.message);
    if (!logReachesStderr()) io.err(`statusengine-worker: ${err.message}`);
    return 1;
  }
  await statusSent;
  await notifier.ready("consuming");
  await aborted(signal);
  log.info("shutdown signal received, starting graceful shutdown");
  await notifier.stopping();
  try {
    await worker.stop();
  } catch (err: unknown) {
    log.error("shutdown failed", { error: errorMessage(err) });
  }
  return 0;
}
