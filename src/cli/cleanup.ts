/**
 * The `cleanup` subcommand: retention, once (docs/operations.md#cleanup). Deletes rows older than
 * the configured number of calendar days from the sixteen tables of
 * {@linkcode RETENTION_TABLES}, one table after another, in small autocommitted batches, and
 * exits. Its interface is its log and its exit code; it writes no metrics.
 *
 * @module
 */
import mysql from "mysql2/promise";
import {
  formatLocalRfc3339,
  isRetentionKey,
  RETENTION_KEYS,
  RETENTION_TABLES,
  retentionCutoff,
  type RetentionTable,
  unixSeconds,
} from "../cleanup/retention.ts";
import { errorMessage, getLogger } from "../log.ts";
import { quoteIdentifier } from "../mysql/ddl.ts";
import { mysqlOptionsFromUrl, type MysqlUrlOptions, redactUrl } from "../mysql/url.ts";
import { closeMysqlNow, connectMysql, unlessAborted } from "../mysql/connect.ts";
import { delay } from "../util/async.ts";
import type { Io } from "./io.ts";

/** Options of the `cleanup` command (already resolved from flags, env and file). */
export interface CleanupCommandOptions {
  /** `--mysql-url`; must name a database. */
  readonly mysqlUrl: string;
  /** `--cleanup-batch-size`: rows per DELETE statement, ≥ 1. */
  readonly batchSize: number;
  /** `--cleanup-batch-pause` in milliseconds, ≥ 0: sleep between two batches of one table. */
  readonly batchPauseMs: number;
  /**
   * Age in days per legacy YAML key (`age_hostchecks` …, see {@linkcode RETENTION_KEYS}).
   * `0` disables a table; a missing key means the table's default. Any other key refuses
   * to run (it would otherwise be a silently ignored typo).
   */
  readonly ages: Readonly<Record<string, number>>;
  /** Reference instant of the cutoffs (tests); defaults to the current time. */
  readonly now?: Date;
}

/** Start-up bound: connect plus `SELECT 1`; no answer within 5 s → exit 1. */
const PING_TIMEOUT_MS = 5_000;
/** `setTimeout` fires at once above 2^31 − 1 ms, which would turn a long pause into none. */
const MAX_PAUSE_MS = 2 ** 31 - 1;
/** Column width of the table name in progress lines (longest name has 38 characters). */
const TABLE_COLUMN = 38;

const log = getLogger("cleanup");

/** A table with the age this run applies. */
interface PlannedTable extends RetentionTable {
  readonly days: number;
}

/** How one table ended. */
type TableOutcome =
  | { readonly kind: "finished" | "interrupted"; readonly rows: number; readonly batches: number }
  | {
    readonly kind: "failed";
    readonly rows: number;
    readonly batches: number;
    readonly error: unknown;
  };

/**
 * Check the options and resolve each table's age.
 *
 * @throws {RangeError} Naming the offending option and its value.
 */
function plan(options: CleanupCommandOptions): PlannedTable[] {
  if (!Number.isSafeInteger(options.batchSize) || options.batchSize < 1) {
    throw new RangeError(
      `Cannot run cleanup: the batch size must be an integer ≥ 1, got ${options.batchSize}`,
    );
  }
  if (
    !Number.isFinite(options.batchPauseMs) || options.batchPauseMs < 0 ||
    options.batchPauseMs > MAX_PAUSE_MS
  ) {
    throw new RangeError(
      `Cannot run cleanup: the batch pause must be 0–${MAX_PAUSE_MS} ms, got ${options.batchPauseMs}`,
    );
  }
  for (const [key, days] of Object.entries(options.ages)) {
    if (!isRetentionKey(key)) {
      throw new RangeError(
        `Cannot run cleanup: unknown retention setting "${key}" (known: ${
          RETENTION_KEYS.join(", ")
        })`,
      );
    }
    // A negative age would put the cutoff in the future and empty the table. An
    // undefined value (a Partial record at run time) means "not given": the default.
    if (days !== undefined && (!Number.isSafeInteger(days) || days < 0)) {
      throw new RangeError(
        `Cannot run cleanup: "${key}" must be a whole number of days ≥ 0 (0 disables), got ${days}`,
      );
    }
  }
  return RETENTION_TABLES.map((rule) => ({
    ...rule,
    days: options.ages[rule.key] ?? rule.defaultDays,
  }));
}

/** The one dedicated connection of a run; reopened after a table failed. */
class CleanupSession {
  readonly #options: MysqlUrlOptions;
  readonly #signal: AbortSignal;
  #conn: mysql.Connection | undefined;

  constructor(options: MysqlUrlOptions, signal: AbortSignal) {
    this.#options = options;
    this.#signal = signal;
  }

  /** Connect and answer within 5 s (the connection is reused afterwards). */
  async open(): Promise<mysql.Connection> {
    if (this.#conn !== undefined) return this.#conn;
    const { connection } = await connectMysql(this.#options, {
      timeoutMs: PING_TIMEOUT_MS,
      signal: this.#signal,
    });
    this.#conn = connection;
    return connection;
  }

  /**
   * Run one DELETE; on abort the connection is closed and the call rejects with
   * `MysqlInterrupted` at once.
   *
   * @returns Affected rows.
   */
  async delete(sql: string, params: (string | number)[]): Promise<number> {
    const conn = await this.open();
    const [result] = await unlessAborted(
      conn.query<mysql.ResultSetHeader>(sql, params),
      this.#signal,
      () => this.discard(),
    );
    return result.affectedRows;
  }

  /** Drop the connection so the next table starts on a fresh one. */
  discard(): void {
    if (this.#conn !== undefined) closeMysqlNow(this.#conn);
    this.#conn = undefined;
  }

  /** Close politely; fall back to a hard close. */
  async close(): Promise<void> {
    const conn = this.#conn;
    this.#conn = undefined;
    if (conn === undefined) return;
    await conn.end().catch(() => closeMysqlNow(conn));
  }
}

function formatRate(rows: number, ms: number): string {
  const perSecond = rows / Math.max(ms, 1) * 1000;
  return perSecond >= 100 ? perSecond.toFixed(0) : perSecond.toFixed(1);
}

function batchesText(n: number): string {
  return n === 1 ? "1 batch" : `${n} batches`;
}

/** One table, batch after batch, until a batch deletes fewer rows than the batch size. */
async function cleanTable(
  session: CleanupSession,
  table: PlannedTable,
  cutoff: number,
  options: CleanupCommandOptions,
  signal: AbortSignal,
): Promise<TableOutcome> {
  // Names are constants from the retention table, never configuration, so nothing is
  // interpolated from outside; no ORDER BY (the range condition lets MySQL prune partitions).
  const sql = `DELETE FROM ${quoteIdentifier(table.table)} WHERE ${
    quoteIdentifier(table.column)
  } < ? LIMIT ${options.batchSize}`;
  let rows = 0;
  let batches = 0;
  try {
    for (;;) {
      if (signal.aborted) return { kind: "interrupted", rows, batches };
      const affected = await session.delete(sql, [cutoff]);
      rows += affected;
      batches++;
      log.debug("cleanup: batch deleted", { table: table.table, batch: batches, rows: affected });
      if (affected < options.batchSize) return { kind: "finished", rows, batches };
      if (options.batchPauseMs > 0) await delay(options.batchPauseMs, { signal });
    }
  } catch (err: unknown) {
    if (signal.aborted) return { kind: "interrupted", rows, batches };
    // Whatever broke (missing table, lock timeout, lost connection), the next table starts
    // on a fresh connection.
    session.discard();
    return { kind: "failed", rows, batches, error: err };
  }
}

/**
 * Run the `cleanup` command (docs/operations.md#cleanup).
 *
 * For each enabled table of {@linkcode RETENTION_TABLES}, in order: cutoff = `now` minus the
 * age in calendar days of the local time zone; repeat `DELETE … WHERE col < cutoff LIMIT n`
 * (autocommit) until a statement affects fewer than `n` rows, pausing `batchPauseMs` between
 * two batches (not after the last). Never `DROP PARTITION`, never `COUNT(*)`. A failing table
 * is logged as `cleanup: table failed` and the run continues. When `signal` aborts, no new
 * batch starts, a statement in flight is abandoned by closing its dedicated connection, and
 * the remaining tables are left for the next run.
 *
 * Log lines go through `getLogger("cleanup")`; one progress line per table (rows, batches,
 * duration, rows/s) goes to `io.out`, failures to `io.err`.
 *
 * @param options Resolved settings.
 * @param io Output sinks.
 * @param signal SIGTERM/SIGINT of the process.
 * @returns 0 when every enabled table finished or the run was interrupted; 1 when a table
 *   failed, an option is invalid, or MySQL cannot be reached before the run.
 */
export async function runCleanupCommand(
  options: CleanupCommandOptions,
  io: Io,
  signal: AbortSignal,
): Promise<number> {
  const runStarted = performance.now();
  const shownUrl = redactUrl(options.mysqlUrl);
  let tables: PlannedTable[];
  let connectionOptions: MysqlUrlOptions;
  try {
    tables = plan(options);
    connectionOptions = mysqlOptionsFromUrl(options.mysqlUrl);
    if (connectionOptions.database === undefined) {
      throw new TypeError(
        `Cannot run cleanup: the MySQL URL "${shownUrl}" names no database (…/<database>)`,
      );
    }
  } catch (err: unknown) {
    log.error("cleanup: cannot start", { error: errorMessage(err) });
    io.err(errorMessage(err));
    return 1;
  }
  const password = connectionOptions.password;
  const scrub = (text: string): string =>
    password === undefined || password === "" ? text : text.replaceAll(password, "****");
  const now = options.now ?? new Date();
  const enabled = tables.filter((t) => t.days > 0);
  log.info("cleanup: starting", {
    tables: enabled.length,
    disabled: tables.length - enabled.length,
    batch_size: options.batchSize,
    pause_ms: options.batchPauseMs,
    mysql_url: shownUrl,
  });

  const interrupted = (rows: number, remaining: number): number => {
    log.warn("cleanup: interrupted, remaining tables left for the next run", {
      rows,
      remaining_tables: remaining,
      duration_ms: Math.round(performance.now() - runStarted),
    });
    io.out(`Interrupted: ${rows} rows deleted; ${remaining} table(s) left for the next run`);
    return 0;
  };
  if (signal.aborted) return interrupted(0, enabled.length);

  const session = new CleanupSession(connectionOptions, signal);
  try {
    try {
      await session.open();
    } catch (err: unknown) {
      if (signal.aborted) return interrupted(0, enabled.length);
      const message = scrub(`Cannot connect to MySQL at "${shownUrl}": ${errorMessage(err)}`);
      log.error("cleanup: cannot connect to MySQL", {
        mysql_url: shownUrl,
        error: scrub(errorMessage(err)),
      });
      io.err(message);
      return 1;
    }

    let totalRows = 0;
    const failed: string[] = [];
    for (const [index, table] of tables.entries()) {
      if (signal.aborted) {
        return interrupted(totalRows, tables.slice(index).filter((t) => t.days > 0).length);
      }
      const name = table.table.padEnd(TABLE_COLUMN);
      if (table.days === 0) {
        log.info("cleanup: table disabled, skipping", { table: table.table, setting: table.key });
        io.out(`${name} disabled (${table.key}: 0)`);
        continue;
      }
      const cutoffDate = retentionCutoff(now, table.days);
      const cutoff = unixSeconds(cutoffDate);
      log.info("cleanup: starting table", {
        table: table.table,
        column: table.column,
        age_days: table.days,
        cutoff: formatLocalRfc3339(cutoffDate),
        cutoff_unix: cutoff,
      });
      const started = performance.now();
      const outcome = await cleanTable(session, table, cutoff, options, signal);
      const ms = performance.now() - started;
      totalRows += outcome.rows;
      const properties = {
        table: table.table,
        rows: outcome.rows,
        batches: outcome.batches,
        "duration_ms": Math.round(ms),
      };
      const progress = `${outcome.rows} rows deleted in ${batchesText(outcome.batches)}, ${
        (ms / 1000).toFixed(2)
      } s, ${formatRate(outcome.rows, ms)} rows/s`;
      switch (outcome.kind) {
        case "finished":
          log.info("cleanup: table finished", properties);
          io.out(`${name} ${progress}`);
          break;
        case "interrupted":
          log.info("cleanup: table interrupted", properties);
          io.out(`${name} interrupted: ${progress}`);
          return interrupted(
            totalRows,
            tables.slice(index + 1).filter((t) => t.days > 0).length,
          );
        case "failed": {
          const error = scrub(errorMessage(outcome.error));
          log.error("cleanup: table failed", { ...properties, error });
          io.err(`${name} failed: ${error} (${progress})`);
          failed.push(table.table);
          break;
        }
      }
    }

    const summary = { rows: totalRows, "duration_ms": Math.round(performance.now() - runStarted) };
    if (failed.length > 0) {
      log.error("cleanup: finished with errors", {
        failed: failed.length,
        failed_tables: failed.join(","),
        ...summary,
      });
      io.err(`Finished with errors: ${failed.length} table(s) failed (${failed.join(", ")})`);
      return 1;
    }
    log.info("cleanup: finished", { tables: enabled.length, ...summary });
    io.out(`Finished: ${totalRows} rows deleted from ${enabled.length} table(s)`);
    return 0;
  } finally {
    await session.close();
  }
}
