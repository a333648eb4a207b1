/**
 * SIGHUP for a running worker (logrotate's `postrotate` sends it; unhandled it would end the
 * process with nothing logged): reopen the dead-letter file, re-read the settings, apply the
 * log level and format, name the settings that need a restart. Every failure is only logged.
 *
 * @module
 */
import { settingKeyOf, SETTINGS } from "../config/mod.ts";
import {
  configureLogging,
  errorMessage,
  getLogger,
  type LogFormat,
  type LogLevel,
} from "../log.ts";

const log = getLogger("worker");

/** The settings a reload reads: the logging ones, and the rest only to compare. */
export type ReloadableSettings = Readonly<Record<string, unknown>> & {
  readonly logLevel?: LogLevel;
  readonly logFormat?: LogFormat;
};

/** What a reload works with; everything injectable so a test can run it in-process. */
export interface ReloadOptions {
  readonly current: () => ReloadableSettings;
  /** Same command line and environment; the file is read anew. */
  readonly reread: () => Promise<ReloadableSettings>;
  readonly adopt: (settings: ReloadableSettings) => void;
  /** Resolves to the path, null without a file, undefined before the start. */
  readonly reopenDeadLetters: () => Promise<string | null | undefined>;
  /** Receives log lines instead of stdout (tests). */
  readonly logWrite?: (line: string) => void;
}

/** Settings applied by a reload; every other change waits for a restart. */
const APPLIED: ReadonlySet<string> = new Set(["logLevel", "logFormat"]);

/** Flag name by settings key, for naming changed settings without their (maybe secret) values. */
const FLAG_BY_KEY: ReadonlyMap<string, string> = new Map(
  SETTINGS.map((row) => [settingKeyOf(row), row.flag]),
);

function changedKeys(before: ReloadableSettings, after: ReloadableSettings): string[] {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k])).sort();
}

/** Handle one SIGHUP. Never throws. */
export async function reload(options: ReloadOptions): Promise<void> {
  log.info("SIGHUP received: reopening the dead-letter file and re-reading the settings");
  try {
    const path = await options.reopenDeadLetters();
    if (path === undefined) log.info("reload: the worker has not started; no file to reopen");
    else if (path === null) log.info("reload: no dead-letter file configured");
    else log.info("reload: dead-letter file reopened", { path });
  } catch (err: unknown) {
    log.error(
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
    log.error("reload: cannot re-read the settings; keeping the current ones", {
      error: errorMessage(err),
    });
    return;
  }
  const changed = changedKeys(before, after);
  const applied = changed.filter((k) => APPLIED.has(k));
  const waiting = changed.filter((k) => !APPLIED.has(k));
  const level = after.logLevel ?? "info";
  const format = after.logFormat ?? "text";
  if (applied.length > 0) {
    // Said before the switch as well, so that a level made quieter still shows the change.
    log.info("reload: switching logging", { log_level: level, log_format: format });
    await configureLogging({
      level,
      format,
      ...(options.logWrite === undefined ? {} : { write: options.logWrite }),
    });
  }
  options.adopt({
    ...before,
    ...(after.logLevel === undefined ? {} : { logLevel: after.logLevel }),
    ...(after.logFormat === undefined ? {} : { logFormat: after.logFormat }),
  });
  if (waiting.length > 0) {
    log.warn("reload: these settings changed but take effect only after a restart", {
      settings: waiting.map((k) => `--${FLAG_BY_KEY.get(k) ?? k}`).join(","),
    });
  }
  log.info("reload: done", {
    log_level: before.logLevel === after.logLevel ? level : `${before.logLevel}->${level}`,
    log_format: before.logFormat === after.logFormat ? format : `${before.logFormat}->${format}`,
    restart_needed_for: waiting.length,
  });
}
