/**
 * Logging setup behind one module, so the backend (`@logtape/logtape`, an
 * import-map alias in deno.json) can be switched in one place.
 *
 * Policy (docs/logging.md): info carries lifecycle events and periodic
 * summaries only, never a line per job; errors carry queue/table/server
 * context and are logged once.
 *
 * @module
 */
import { fstatSync } from "node:fs";
import {
  configure,
  getLogger as getLogtapeLogger,
  jsonLinesFormatter,
  logfmtFormatter,
  type LogLevel as LogtapeLevel,
  type LogRecord,
  reset,
} from "@logtape/logtape";

/** Levels accepted by `--log-level`. */
export type LogLevel = "debug" | "info" | "warn" | "error";
/** Formats accepted by `--log-format`: `text` is logfmt (`key=value`), `json` one object per line. */
export type LogFormat = "text" | "json";

/** Structured properties of one log line. */
export type LogProperties = Record<string, unknown>;

/** The logger interface the rest of the code depends on. */
export interface Logger {
  debug(message: string, properties?: LogProperties): void;
  info(message: string, properties?: LogProperties): void;
  warn(message: string, properties?: LogProperties): void;
  error(message: string, properties?: LogProperties): void;
}

const LEVELS: Record<LogLevel, LogtapeLevel> = {
  debug: "debug",
  info: "info",
  warn: "warning",
  error: "error",
};

const encoder = new TextEncoder();

/** Where the log lines of a process go. */
export type LogStream = "stdout" | "stderr";

/**
 * The syslog priority of each level (sd-daemon(3)): a line starting with `<3>` is stored by
 * journald at priority err, so `journalctl -p err` finds it. Without the prefix every line of
 * the service is stored at the unit's `SyslogLevel=` (info).
 */
const JOURNAL_PRIORITY: Record<LogLevel, number> = { debug: 7, info: 6, warn: 4, error: 3 };

/** Our spelling of logtape's levels: the one `--log-level` accepts, in every format. */
const LEVEL_NAMES: Partial<Record<LogtapeLevel, LogLevel>> = {
  debug: "debug",
  info: "info",
  warning: "warn",
  error: "error",
};

function levelName(level: LogtapeLevel): LogLevel {
  return LEVEL_NAMES[level] ?? (level === "trace" ? "debug" : "error");
}

/**
 * logtape spells the level `warning` in logfmt and `WARN` in JSON; both are rewritten to the
 * `--log-level` spelling, so one grep or one query works whatever the format. Both formatters
 * put the level at a fixed place right after the timestamp, which the patterns anchor on.
 */
const LEVEL_FIELD: Record<LogFormat, RegExp> = {
  text: /^(time=\S+ level=)[A-Za-z]+/,
  json: /^(\{"@timestamp":"[^"]*","level":")[A-Za-z]+/,
};

/** Turns a record into one line: the format, our level names, the journal priority if asked. */
function lineFormatter(format: LogFormat, journal: boolean): (record: LogRecord) => string {
  const formatter = format === "json" ? jsonLinesFormatter : logfmtFormatter;
  const field = LEVEL_FIELD[format];
  return (record) => {
    const level = levelName(record.level);
    const line = formatter(record).replace(field, `$1${level}`);
    return journal ? `<${JOURNAL_PRIORITY[level]}>${line}` : line;
  };
}

function streamOf(stream: LogStream): typeof Deno.stdout | typeof Deno.stderr {
  return stream === "stderr" ? Deno.stderr : Deno.stdout;
}

/**
 * Whether the log lines end up in the systemd journal: systemd sets `JOURNAL_STREAM` when it
 * connects stdout/stderr to the journal (systemd.exec(5)). sd-daemon compares its
 * `device:inode` with the stream's own; Deno gives no fstat of stdout and reading
 * /proc/self/fd needs every permission, so the variable counts unless the stream is a terminal
 * (a shell started from a desktop's systemd user service inherits the variable, but writes to
 * its terminal).
 *
 * @param journalStream The value of `JOURNAL_STREAM`, if set.
 * @param isTerminal Whether the stream the log goes to is a terminal.
 * @returns True when the log lines should carry their syslog priority.
 */
export function connectedToJournal(
  journalStream: string | undefined,
  isTerminal: boolean,
): boolean {
  return journalStream !== undefined && journalStream !== "" && !isTerminal;
}

/**
 * Whether stdout and stderr are the same open file (`2>&1` into a file or a pipe, as a script or
 * a supervisor that merges them does): a line on each would then be read twice in one place.
 * fstat of the two descriptors needs no permission (a stat of /proc/self/fd would need
 * --allow-all, which the shipped binary does not have).
 */
function stdoutIsStderr(): boolean {
  try {
    const out = fstatSync(1);
    const err = fstatSync(2);
    return out.dev === err.dev && out.ino === err.ino;
  } catch {
    // A descriptor closed or not stat-able: treat them as two places, so the error is not lost.
    return false;
  }
}

/** Whether the last {@link configureLogging} writes to the same file as stderr. */
let logSharesStderr = false;

/**
 * Whether a line written to stderr would be a second copy of a line just logged, because the
 * log goes to stderr or stdout and stderr are the same file (a terminal, `2>&1` into a file or a
 * pipe, the journal).
 * The daemon's fatal error is logged; it is printed on stderr only where the log is not seen.
 *
 * @returns True when stderr shows the log already.
 */
export function logReachesStderr(): boolean {
  return logSharesStderr;
}

function streamSink(
  format: LogFormat,
  stream: LogStream,
  journal: boolean,
): (record: LogRecord) => void {
  const toLine = lineFormatter(format, journal);
  const target = streamOf(stream);
  return (record) => {
    const bytes = encoder.encode(toLine(record));
    let off = 0;
    while (off < bytes.length) off += target.writeSync(bytes.subarray(off));
  };
}

/** Options of {@link configureLogging}. */
export interface LoggingOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
  /**
   * Default stdout: the daemon's log is its output (the journal under systemd). A command
   * that prints data (status --json, verify, config) logs to stderr instead, so its stdout
   * stays parseable.
   */
  readonly stream?: LogStream;
  /** Receives every formatted line instead of the stream (tests). */
  readonly write?: (line: string) => void;
  /**
   * Prefix each line with its syslog priority (`<3>` for error …). Default: when
   * `JOURNAL_STREAM` says the stream is connected to the journal.
   */
  readonly journal?: boolean;
}

/**
 * Configure the process-wide logging backend. Calling it again replaces the
 * previous configuration.
 *
 * @param options Level, format and an optional line receiver.
 */
export async function configureLogging(options: LoggingOptions): Promise<void> {
  const stream = options.stream ?? "stdout";
  const write = options.write;
  let sink: (record: LogRecord) => void;
  if (write === undefined) {
    const journal = options.journal ??
      connectedToJournal(Deno.env.get("JOURNAL_STREAM"), streamOf(stream).isTerminal());
    sink = streamSink(options.format, stream, journal);
    // Under systemd stdout and stderr are both the journal (StandardError=inherit), in a
    // terminal both are the terminal.
    logSharesStderr = stream === "stderr" || journal ||
      (Deno.stdout.isTerminal() && Deno.stderr.isTerminal()) || stdoutIsStderr();
  } else {
    const format = lineFormatter(options.format, options.journal ?? false);
    sink = (record) => write(format(record));
    logSharesStderr = false;
  }
  await configure({
    reset: true,
    sinks: { out: sink },
    loggers: [
      { category: ["statusengine"], sinks: ["out"], lowestLevel: LEVELS[options.level] },
      { category: ["logtape", "meta"], sinks: ["out"], lowestLevel: "warning" },
    ],
  });
}

/** Drop the logging configuration (tests). */
export async function resetLogging(): Promise<void> {
  await reset();
}

/**
 * A logger for one component, e.g. `getLogger("gearman")`.
 *
 * @param component Category below `statusengine`.
 * @returns The logger.
 */
export function getLogger(component: string): Logger {
  const logger = getLogtapeLogger(["statusengine", component]);
  return {
    debug: (message, properties) => logger.debug(message, properties ?? {}),
    info: (message, properties) => logger.info(message, properties ?? {}),
    warn: (message, properties) => logger.warn(message, properties ?? {}),
    error: (message, properties) => logger.error(message, properties ?? {}),
  };
}

/** Text of an error for a log property; defined in util so that every layer can use it. */
export { errorMessage } from "./util/errors.ts";
