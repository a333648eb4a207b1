/**
 * Logging behind one module, so the backend (`@logtape/logtape`) can be switched in one place.
 * Policy: docs/logging.md.
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

export type LogLevel = "debug" | "info" | "warn" | "error";
/** Formats accepted by `--log-format`: `text` is logfmt (`key=value`), `json` one object per line. */
export type LogFormat = "text" | "json";

export type LogProperties = Record<string, unknown>;

export type Logger = Record<LogLevel, (message: string, properties?: LogProperties) => void>;

const encoder = new TextEncoder();

/**
 * Syslog priority per level (sd-daemon(3)): journald stores a line starting with `<3>` at err, so
 * `journalctl -p err` finds it; without the prefix every line is stored at info.
 */
const JOURNAL_PRIORITY: Record<LogLevel, number> = { debug: 7, info: 6, warn: 4, error: 3 };

/** The `--log-level` spelling of each logtape level. */
const LEVEL_NAME: Record<LogtapeLevel, LogLevel> = {
  trace: "debug",
  debug: "debug",
  info: "info",
  warning: "warn",
  error: "error",
  fatal: "error",
};

/**
 * logtape spells the level `warning` in logfmt and `WARN` in JSON; both are rewritten to the
 * `--log-level` spelling so one grep works in every format. The level follows the timestamp.
 */
const LEVEL_FIELD: Record<LogFormat, RegExp> = {
  text: /^(time=\S+ level=)[A-Za-z]+/,
  json: /^(\{"@timestamp":"[^"]*","level":")[A-Za-z]+/,
};

function lineFormatter(format: LogFormat, journal: boolean): (record: LogRecord) => string {
  const formatter = format === "json" ? jsonLinesFormatter : logfmtFormatter;
  const field = LEVEL_FIELD[format];
  return (record) => {
    const level = LEVEL_NAME[record.level];
    const line = formatter(record).replace(field, `$1${level}`);
    return journal ? `<${JOURNAL_PRIORITY[level]}>${line}` : line;
  };
}

/**
 * Whether the log goes to the systemd journal, by `JOURNAL_STREAM` (systemd.exec(5)). sd-daemon
 * compares its `device:inode` with the stream's, which Deno cannot without every permission, so
 * the variable counts unless the stream is a terminal (a shell inherits it from a user service).
 */
export function connectedToJournal(
  journalStream: string | undefined,
  isTerminal: boolean,
): boolean {
  return journalStream !== undefined && journalStream !== "" && !isTerminal;
}

/** Whether stdout and stderr are one open file (`2>&1`); fstat needs no permission, /proc does. */
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

let logSharesStderr = false;

/** Whether stderr shows the log (same file, terminal, journal); else fatal errors go there too. */
export function logReachesStderr(): boolean {
  return logSharesStderr;
}

/** Options of {@link configureLogging}. */
export interface LoggingOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
  /** Default stdout; a command that prints data logs to stderr, so its stdout stays parseable. */
  readonly stream?: "stdout" | "stderr";
  /** Receives every formatted line instead of the stream (tests). */
  readonly write?: ((line: string) => void) | undefined;
  /** Prefix lines with their syslog priority; default: {@link connectedToJournal}. */
  readonly journal?: boolean;
}

/** Configure the process-wide logging; a second call replaces the first. */
export async function configureLogging(options: LoggingOptions): Promise<void> {
  const { stream = "stdout", write } = options;
  const target = stream === "stderr" ? Deno.stderr : Deno.stdout;
  const journal = options.journal ?? (write === undefined &&
    connectedToJournal(Deno.env.get("JOURNAL_STREAM"), target.isTerminal()));
  const toLine = lineFormatter(options.format, journal);
  // Under systemd both are the journal (StandardError=inherit).
  logSharesStderr = write === undefined && (stream === "stderr" || journal ||
    (Deno.stdout.isTerminal() && Deno.stderr.isTerminal()) || stdoutIsStderr());
  const sink = (record: LogRecord): void => {
    const line = toLine(record);
    if (write !== undefined) return write(line);
    const bytes = encoder.encode(line);
    let off = 0;
    while (off < bytes.length) off += target.writeSync(bytes.subarray(off));
  };
  await configure({
    reset: true,
    sinks: { out: sink },
    loggers: [
      {
        category: ["statusengine"],
        sinks: ["out"],
        lowestLevel: options.level === "warn" ? "warning" : options.level,
      },
      { category: ["logtape", "meta"], sinks: ["out"], lowestLevel: "warning" },
    ],
  });
}

/** Drop the logging configuration (tests). */
export { reset as resetLogging };

/**
 * A logger for one component, e.g. `getLogger("gearman")`. Its methods are arrow functions, so a
 * caller may pick one and call it alone (`(dryRun ? log.warn : log.error)(…)`); logtape's need
 * their logger as `this`.
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

/**
 * Lets a repeating line through once per key and interval and counts the rest, so a failure that
 * lasts logs its first line and then reminders, never a line per job or request (docs/logging.md).
 */
export class LogThrottle<K> {
  readonly #intervalMs: number;
  readonly #last = new Map<K, { at: number; skipped: number }>();

  constructor(intervalMs: number) {
    this.#intervalMs = intervalMs;
  }

  /** The lines of `key` skipped since the last one let through, or undefined: skip this one. */
  due(key: K): number | undefined {
    const now = performance.now();
    const last = this.#last.get(key);
    if (last !== undefined && now - last.at < this.#intervalMs) {
      last.skipped++;
      return undefined;
    }
    this.#last.set(key, { at: now, skipped: 0 });
    return last?.skipped ?? 0;
  }
}

export { errorMessage } from "./util/errors.ts";
