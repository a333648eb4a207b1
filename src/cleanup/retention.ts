/**
 * What `cleanup` deletes (docs/operations.md#cleanup-tables) and the calendar-day cutoff it
 * deletes before (docs/operations.md#cleanup-algorithm). The rows are the `age-*` settings of
 * src/config, which owns names, defaults and validation.
 *
 * @module
 */
import { RETENTION_RULES, type RetentionRule } from "../config/mod.ts";

/**
 * The sixteen tables `cleanup` processes, in order, one at a time: the disk and not the number
 * of statements is the bottleneck. Deliberately absent: `…_scheduleddowntimes` (deleting there
 * would cancel running downtimes), the status tables (not a log), and the tables the worker
 * does not write. `age_host_downtimes`/`age_service_downtimes` clean the *history* tables.
 */
export const RETENTION_TABLES: readonly RetentionRule[] = RETENTION_RULES;

/** The legacy YAML keys (`age_hostchecks` …, as the PHP and Go workers name them), in order. */
export const RETENTION_KEYS: readonly string[] = Object.freeze(
  RETENTION_TABLES.map((t) => t.yamlKey),
);

/**
 * Whether a string is one of the sixteen retention keys.
 *
 * @example Narrowing a key
 * ```ts
 * import { isRetentionKey } from "./retention.ts";
 * if (!isRetentionKey("age_hostchecks")) throw new Error("unreachable");
 * ```
 */
export function isRetentionKey(key: string): boolean {
  return RETENTION_KEYS.includes(key);
}

/**
 * The retention cutoff: `now` minus `days` calendar days in the local time zone
 * (docs/operations.md#cleanup-algorithm step 1): the wall-clock time is kept across a DST
 * change, unlike the legacy worker's `86400 × days` seconds.
 *
 * @example Two days before a date
 * ```ts
 * import { retentionCutoff } from "./retention.ts";
 * const cutoff = retentionCutoff(new Date(2026, 0, 10, 12), 2);
 * if (cutoff.getDate() !== 8 || cutoff.getHours() !== 12) throw new Error();
 * ```
 */
export function retentionCutoff(now: Date, days: number): Date {
  if (!Number.isSafeInteger(days) || days < 0) {
    throw new RangeError(
      `Cannot compute a retention cutoff: days must be an integer ≥ 0, got ${days}`,
    );
  }
  const cutoff = new Date(now.getTime());
  cutoff.setDate(cutoff.getDate() - days);
  return cutoff;
}

/**
 * Unix seconds of an instant, rounded down (the unit of every retention column).
 *
 * @example
 * ```ts
 * import { unixSeconds } from "./retention.ts";
 * if (unixSeconds(new Date(1500)) !== 1) throw new Error();
 * ```
 */
export function unixSeconds(instant: Date): number {
  return Math.floor(instant.getTime() / 1000);
}

/**
 * An instant as RFC 3339 in the local time zone with its offset (`2026-03-28T12:00:00+01:00`,
 * never `Z`), the form `cleanup` logs its cutoff in: an operator reads the wall-clock time the
 * calendar-day rule produced.
 *
 * @example
 * ```ts
 * import { formatLocalRfc3339 } from "./retention.ts";
 * const text = formatLocalRfc3339(new Date(0));
 * if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$/.test(text)) throw new Error(text);
 * ```
 */
export function formatLocalRfc3339(instant: Date): string {
  const timeZone = Temporal.Now.timeZoneId();
  return instant.toTemporalInstant().toString({ timeZone, smallestUnit: "second" });
}
