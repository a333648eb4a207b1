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

function streamSink(format: LogFormat, stream: LogStream): (record: LogRecord) => void {
  const formatter = format === "json" ? jsonLinesFormatter : logfmtFormatter;
  const target = stream === "stderr" ? Deno.stderr : Deno.stdout;
  return (record) => {
    const bytes = encoder.encode(formatter(record));
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
}

/**
 * Configure the process-wide logging backend. Calling it again replaces the
 * previous configuration.
 *
 * @param options Level, format and an optional line receiver.
 */
export async function configureLogging(options: LoggingOptions): Promise<void> {
  const formatter = options.format === "json" ? jsonLinesFormatter : logfmtFormatter;
  const write = options.write;
  const sink = write === undefined
    ? streamSink(options.format, options.stream ?? "stdout")
    : (record: LogRecord) => write(formatter(record));
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
