/**
 * The command line: argv → the command table → settings, logging, signal handling → an exit
 * code; and SIGHUP for a running worker (docs/operations.md, "Reload (SIGHUP)"), which unhandled
 * would end the process with nothing logged. A reload's failures are only logged.
 *
 * @module
 */
import {
  type CommandName,
  loadSettings,
  parseCommandLine,
  renderHelp,
  RETENTION_RULES,
  settingKeyOf,
  SETTINGS,
  type SettingsFor,
  type SettingSource,
} from "../config/mod.ts";
import {
  configureLogging,
  errorMessage,
  getLogger,
  type LogFormat,
  type LogLevel,
  logReachesStderr,
} from "../log.ts";
import { versionLine } from "../version.ts";
import { type Io, PROCESS_IO } from "./io.ts";
import { type RunHooks, runWorkerCommand } from "./run.ts";
import { runSchemaCommand } from "./schema.ts";
import { runCleanupCommand } from "./cleanup.ts";
import { runStatusCommand } from "./status/format.ts";
import { runPublishCommand } from "./publish.ts";
import { runLosstestCommand } from "./losstest.ts";
import { runVerifyCommand } from "./verify.ts";
import { reportConfigError, runConfigCommand } from "./config.ts";
import { runDeadLettersCommand } from "./dead_letters.ts";
import { joinHostPort } from "../util/address.ts";
import { deadline, settledWithin } from "../util/async.ts";

const log = getLogger("cli");

type Handler<C extends CommandName> = (
  settings: SettingsFor<C>,
  io: Io,
  signal: AbortSignal,
  context: HandlerContext,
) => Promise<number>;

/** runCli answers `config` and `version` itself. */
type HandledCommand = Exclude<CommandName, "config" | "version">;

/** What a command learns besides its settings: `run` its hooks, `losstest` the sources. */
interface HandlerContext {
  readonly hooks: RunHooks;
  readonly sources: Readonly<Record<string, SettingSource>>;
}

/** The command table: drives dispatch (help comes from the settings table's COMMANDS). */
const HANDLERS: { readonly [C in HandledCommand]: Handler<C> } = {
  run: (s, io, signal, { hooks }) => runWorkerCommand(s, io, signal, hooks),
  // Commands whose options are named like their settings take the settings as they are.
  schema: (s, io) => runSchemaCommand(s, io),
  cleanup: (s, io, signal) =>
    runCleanupCommand(
      {
        ...s,
        batchSize: s.cleanupBatchSize,
        batchPauseMs: s.cleanupBatchPauseMs,
        ages: Object.fromEntries(
          RETENTION_RULES.map((r) => [r.yamlKey, (s as Record<string, unknown>)[r.key] as number]),
        ),
      },
      io,
      signal,
    ),
  status: (s, io) =>
    runStatusCommand({ ...s, ...rabbitmqTarget(s), localMetricsUrl: localMetricsUrl(s) }, io),
  publish: (s, io, signal) => runPublishCommand({ ...s, ...rabbitmqTarget(s) }, io, signal),
  losstest: (s, io, signal, { sources }) =>
    runLosstestCommand(
      // verify checks what the run published unless --count was really given.
      { ...s, ...rabbitmqTarget(s), countGiven: sources.count?.kind !== "default" },
      io,
      signal,
    ),
  verify: (s, io) => runVerifyCommand(s, io),
  "dead-letters": (s, io, signal) =>
    runDeadLettersCommand(
      {
        ...s,
        batchSize: s.mysqlBatchSize,
        statusMaxAgeSeconds: Math.ceil(s.statusMaxAgeMs / 1000),
        perfdataToMysql: s.perfdataBackends.includes("mysql"),
      },
      io,
      signal,
    ),
};

/** publish and losstest: the RabbitMQ URL only when RabbitMQ is the broker. */
function rabbitmqTarget(s: { readonly consumer: string; readonly rabbitmqUrl: string }) {
  return { rabbitmqUrl: s.consumer === "rabbitmq" ? s.rabbitmqUrl : undefined };
}

/**
 * For in-process tests: `signals: false` installs no SIGTERM/SIGINT/SIGHUP handling (installed,
 * it stays for the life of the process), `signal` aborts the command like a signal would,
 * `logWrite` receives the log lines.
 */
interface CliOptions {
  readonly io?: Io;
  readonly signals?: boolean;
  readonly signal?: AbortSignal;
  readonly logWrite?: (line: string) => void;
}

/** Run one command line (arguments after the program name); exit 0, 1 refused/failed, 2 usage. */
export async function runCli(
  argv: readonly string[],
  env: Readonly<Record<string, string>>,
  options: CliOptions = {},
): Promise<number> {
  const io = options.io ?? PROCESS_IO;
  let line;
  try {
    line = parseCommandLine(argv);
  } catch (err: unknown) {
    return reportConfigError(err, io);
  }
  // Help first: "version --help" asks how the version command is used, like any command.
  if (line.help) {
    io.out(renderHelp(line.commandGiven ? line.command : undefined));
    return 0;
  }
  if (line.version || line.command === "version") {
    io.out(versionLine());
    return 0;
  }
  if (line.command === "config") return await runConfigCommand(line.rest, env, io);
  const command: HandledCommand = line.command;
  let loaded;
  try {
    loaded = await loadSettings(command, { argv: line.rest, env });
  } catch (err: unknown) {
    return reportConfigError(err, io);
  }
  const settings = loaded.settings as SettingsFor<CommandName> & ReloadableSettings;
  await configureLogging({
    level: settings.logLevel ?? "info",
    format: settings.logFormat ?? "text",
    // Only the daemon logs to stdout; every other command keeps stdout for what it prints.
    stream: command === "run" ? "stdout" : "stderr",
    write: options.logWrite,
  });
  for (const warning of loaded.warnings) log.warn(`config: ${warning}`);

  const controller = new AbortController();
  const outer = options.signal;
  outer?.addEventListener("abort", () => controller.abort(outer.reason), { once: true });
  // Never removed: main.ts exits right after the command, and a signal that came after the
  // removal, before the exit, would end the process by the default action instead of its status.
  if (options.signals !== false) installSignals(controller, io);
  let current: ReloadableSettings = settings;
  let reopen: (() => Promise<string | null>) | undefined;
  const rest = line.rest;
  if (command === "run" && options.signals !== false) {
    installHangup(() =>
      reload({
        current: () => current,
        reread: async () => {
          const again = await loadSettings(command, { argv: rest, env });
          // As at the start: a key misspelt while editing the file must not pass unnoticed.
          for (const warning of again.warnings) log.warn(`config: ${warning}`);
          return again.settings as ReloadableSettings;
        },
        adopt: (s) => (current = s),
        reopenDeadLetters: () => reopen?.() ?? Promise.resolve(undefined),
        logWrite: options.logWrite,
      })
    );
  }
  const hooks: RunHooks = { started: (worker) => (reopen = () => worker.reopenDeadLetters()) };
  try {
    const handler = HANDLERS[command] as Handler<HandledCommand>;
    return await handler(settings as SettingsFor<HandledCommand>, io, controller.signal, {
      hooks,
      sources: loaded.sources,
    });
  } catch (err: unknown) {
    log.error(`${command} failed`, { error: errorMessage(err) });
    // Not twice where stderr shows the log already (a terminal, the journal).
    if (!logReachesStderr()) io.err(`statusengine-worker: ${command} failed: ${errorMessage(err)}`);
    return 1;
  }
}

/** Reload on every SIGHUP, one at a time (a second HUP during a reload runs after it). */
function installHangup(onHangup: () => Promise<void>): void {
  let chain = Promise.resolve();
  const listener = () => {
    chain = chain.then(onHangup).catch((err: unknown) => {
      log.error("reload failed; the worker keeps running", { error: errorMessage(err) });
    });
  };
  Deno.addSignalListener("SIGHUP", listener);
}

/**
 * The `/metrics` URL of a worker on this host: its listen address, with an address that
 * listens on every interface (0.0.0.0, ::) asked on loopback; none with metrics off (port 0).
 */
function localMetricsUrl(
  { metricsHost: host, metricsPort: port }: { metricsHost: string; metricsPort: number },
): string | undefined {
  if (port === 0) return undefined;
  const target = host === "0.0.0.0" || host === "" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return `http://${joinHostPort(target, port)}/metrics`;
}

/**
 * A signal this soon after the first is the same one delivered twice: Ctrl-C on `deno task
 * start` reaches the worker once from the terminal and once forwarded by the task runner.
 */
export const DUPLICATE_SIGNAL_MS = 250;

/**
 * The listener for every shutdown signal: the first aborts (graceful shutdown), a later one exits
 * at once (docs/shutdown.md#signals: do not rely on removing the listener to restore the default
 * action), a duplicate within {@link DUPLICATE_SIGNAL_MS} of the first is ignored.
 */
export function shutdownSignalHandler(actions: {
  readonly abort: () => void;
  readonly exit: () => void;
  readonly now: () => number;
}): () => void {
  let firstAt: number | undefined;
  return () => {
    const now = actions.now();
    if (firstAt === undefined) {
      firstAt = now;
      actions.abort();
    } else if (now - firstAt >= DUPLICATE_SIGNAL_MS) {
      actions.exit();
    }
  };
}

function installSignals(controller: AbortController, io: Io): void {
  const signals: Deno.Signal[] = ["SIGTERM", "SIGINT"];
  const onSignal = shutdownSignalHandler({
    abort: () => controller.abort(new DOMException("signal received", "AbortError")),
    exit: () => {
      io.err("statusengine-worker: second signal, exiting immediately");
      Deno.exit(130);
    },
    now: () => performance.now(),
  });
  for (const s of signals) Deno.addSignalListener(s, onSignal);
}

/** SIGHUP logs as the worker, whose settings it reloads. */
const workerLog = getLogger("worker");

/** The settings a reload reads: the logging ones, and the rest only to compare. */
export type ReloadableSettings = Readonly<Record<string, unknown>> & {
  readonly logLevel?: LogLevel;
  readonly logFormat?: LogFormat;
};

/**
 * What a reload works with (injected by tests): `reread` reads the file anew with the same
 * command line and environment; `reopenDeadLetters` resolves to the path, null without a file,
 * undefined before the start.
 */
interface ReloadOptions {
  readonly current: () => ReloadableSettings;
  readonly reread: () => Promise<ReloadableSettings>;
  readonly adopt: (settings: ReloadableSettings) => void;
  readonly reopenDeadLetters: () => Promise<string | null | undefined>;
  readonly logWrite?: ((line: string) => void) | undefined;
}

/** Settings applied by a reload; every other change waits for a restart. */
const APPLIED: ReadonlySet<string> = new Set(["logLevel", "logFormat"]);

/** Flag name by settings key, for naming changed settings without their (maybe secret) values. */
const FLAG_BY_KEY: ReadonlyMap<string, string> = new Map(
  SETTINGS.map((row) => [settingKeyOf(row), row.flag]),
);

/** The reopen waits for the file's pending writes, and one to a hung mount never returns. */
const REOPEN_TIMEOUT_MS = 5_000;

/** Handle one SIGHUP. Never throws. */
export async function reload(options: ReloadOptions): Promise<void> {
  workerLog.info("SIGHUP received: reopening the dead-letter file and re-reading the settings");
  try {
    using limit = deadline(REOPEN_TIMEOUT_MS);
    const reopened = options.reopenDeadLetters();
    if (!(await settledWithin(reopened, limit.signal))) {
      throw new Error(
        `the file does not answer within ${REOPEN_TIMEOUT_MS} ms (a write to it waits); ` +
          "it is reopened once that write returns",
      );
    }
    const path = await reopened;
    if (path === undefined) workerLog.info("reload: the worker has not started; no file to reopen");
    else if (path === null) workerLog.info("reload: no dead-letter file configured");
    else workerLog.info("reload: dead-letter file reopened", { path });
  } catch (err: unknown) {
    workerLog.error(
      "reload: cannot reopen the dead-letter file; the next dead letter tries again and " +
        "/readyz fails until one is written",
      { error: errorMessage(err) },
    );
  }
  const before = options.current();
  let after: ReloadableSettings;
  try {
    after = await options.reread();
  } catch (err: unknown) {
    workerLog.error("reload: cannot re-read the settings; keeping the current ones", {
      error: errorMessage(err),
    });
    return;
  }
  const changed = [...new Set([...Object.keys(before), ...Object.keys(after)])]
    .filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k])).sort();
  const waiting = changed.filter((k) => !APPLIED.has(k));
  const level = after.logLevel ?? "info";
  const format = after.logFormat ?? "text";
  if (changed.some((k) => APPLIED.has(k))) {
    // Said before the switch as well, so that a level made quieter still shows the change.
    workerLog.info("reload: switching logging", { log_level: level, log_format: format });
    await configureLogging({ level, format, write: options.logWrite });
  }
  options.adopt({
    ...before,
    ...(after.logLevel === undefined ? {} : { logLevel: after.logLevel }),
    ...(after.logFormat === undefined ? {} : { logFormat: after.logFormat }),
  });
  if (waiting.length > 0) {
    workerLog.warn("reload: these settings changed but take effect only after a restart", {
      settings: waiting.map((k) => `--${FLAG_BY_KEY.get(k) ?? k}`).join(","),
    });
  }
  workerLog.info("reload: done", {
    log_level: before.logLevel === after.logLevel ? level : `${before.logLevel}->${level}`,
    log_format: before.logFormat === after.logFormat ? format : `${before.logFormat}->${format}`,
    restart_needed_for: waiting.length,
  });
}
