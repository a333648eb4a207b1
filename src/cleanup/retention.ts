/**
 * The retention table: the single source of truth for what `cleanup` deletes
 * (docs/operations.md#cleanup-tables), and the calendar-day cutoff it deletes before
 * (docs/operations.md#cleanup-algorithm).
 *
 * The rows are the `age-*` settings of the settings table (src/config), which owns names,
 * defaults and validation; this module gives them the shape cleanup works with. The table
 * and column names are pinned against the table
 * catalogue by "retention: every table and column exists in the catalogue, partitioned ones
 * on exactly that column" (src/cleanup/retention_test.ts).
 *
 * @module
 */
import { RETENTION_RULES } from "../config/mod.ts";

/** One retention rule: which table, which time column, which setting, which default. */
export interface RetentionTable {
  /** Table cleaned, spelled as in the schema. */
  readonly table: string;
  /** Column (Unix seconds) the age is measured on; rows strictly older than the cutoff go. */
  readonly column: string;
  /**
   * The legacy YAML key (`age_hostchecks` …), shared by the legacy PHP worker, the Go
   * `db_cleanup` and us. The flag and env name derive from it like every setting's
   * (src/config/settings.ts: `age_hostchecks` → `--age-hostchecks`, `STATUSENGINE_AGE_HOSTCHECKS`).
   */
  readonly key: string;
  /** Default age in days (the legacy defaults, so an old `config.yml` carries over). */
  readonly defaultDays: number;
}

/**
 * The sixteen tables `cleanup` processes (the fourteen history tables, then the task queue, then
 * the worker's tombstones of ended downtimes, docs/downtimes.md), in the order it processes them:
 * one table after another, never in parallel, because the disk and not the number of statements
 * is the bottleneck.
 *
 * Deliberately absent: the two `…_scheduleddowntimes` tables (deleting there would cancel
 * running downtimes), the two status tables (one row per object, not a log), and
 * `…_users`, `…_nodes`, `…_dbversion` (not written by the worker).
 * Despite their names, `age_host_downtimes`/`age_service_downtimes` clean the *history*
 * tables, measured on the downtime's entry time.
 */
export const RETENTION_TABLES: readonly RetentionTable[] = Object.freeze(
  RETENTION_RULES.map((rule) => ({
    table: rule.table,
    column: rule.column,
    key: rule.yamlKey,
    defaultDays: rule.defaultDays,
  })),
);

/** The sixteen retention keys (`age_hostchecks` … `age_tasks`, `age_downtime_tombstones`). */
export type RetentionKey = string;

/** The keys alone, in processing order. */
export const RETENTION_KEYS: readonly RetentionKey[] = Object.freeze(
  RETENTION_TABLES.map((t) => t.key),
);

/**
 * Whether a string is one of the sixteen retention keys.
 *
 * @param key Any string.
 * @returns True for `age_hostchecks` … `age_perfdata`.
 *
 * @example Narrowing a key
 * ```ts
 * import { isRetentionKey } from "./retention.ts";
 * if (!isRetentionKey("age_hostchecks")) throw new Error("unreachable");
 * ```
 */
export function isRetentionKey(key: string): key is RetentionKey {
  return (RETENTION_KEYS as readonly string[]).includes(key);
}

/**
 * The retention cutoff: `now` minus `days` calendar days in the process's local time zone
 * (docs/operations.md#cleanup-algorithm step 1). The wall-clock time is kept across a DST change, so a cutoff
 * taken over the spring change lies 23 h per changed day closer than `86400 × days` seconds
 * (what the legacy worker subtracted) and 25 h further over the autumn change. A wall-clock
 * time that does not exist on the target day (inside the spring gap) moves forward by the
 * gap, as `Date` does.
 *
 * @param now The reference instant.
 * @param days Whole days, ≥ 0.
 * @returns The cutoff instant; rows whose column is strictly less than its Unix time go.
 * @throws {RangeError} When `days` is not a non-negative safe integer.
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
 * @param instant A date.
 * @returns Whole seconds since the epoch.
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

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

/**
 * An instant as RFC 3339 in the process's local time zone with its offset
 * (`2026-03-28T12:00:00+01:00`), the form `cleanup` logs its cutoff in: an operator reads the
 * wall-clock time the calendar-day rule produced.
 *
 * @param instant A date.
 * @returns The RFC 3339 text with seconds and a numeric offset (`Z` is never used).
 *
 * @example
 * ```ts
 * import { formatLocalRfc3339 } from "./retention.ts";
 * const text = formatLocalRfc3339(new Date(0));
 * if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$/.test(text)) throw new Error(text);
 * ```
 */
export function formatLocalRfc3339(instant: Date): string {
  const offsetMinutes = -instant.getTimezoneOffset();
  const sign = offsetMinutes < 0 ? "-" : "+";
  const abs = Math.abs(offsetMinutes);
  return `${pad(instant.getFullYear(), 4)}-${pad(instant.getMonth() + 1)}-${
    pad(instant.getDate())
  }T${pad(instant.getHours())}:${pad(instant.getMinutes())}:${pad(instant.getSeconds())}${sign}${
    pad(Math.floor(abs / 60))
  }:${pad(abs % 60)}`;
}
