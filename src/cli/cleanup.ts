/**
 * The `cleanup` subcommand: retention, once (docs/operations.md#cleanup, docs/retention.md).
 * Weekly partitioned tables get their weeks ahead laid out, expired weeks dropped and only the
 * week straddling the cutoff trimmed by batched DELETE; any other table is cleaned by batched
 * DELETE alone. Its interface is its log and its exit code; it writes no metrics.
 *
 * @module
 */
import {
  CleanupSession,
  dayNumber,
  describeMysqlConnectFailure,
  mysqlOptionsFromUrl,
  type MysqlUrlOptions,
  partitionsToTrim,
  planMaintenance,
  planRepairStep,
  repairHorizon,
  repairStepCount,
  type TableLayout,
} from "../mysql/mod.ts";
import {
  formatLocalRfc3339,
  isRetentionKey,
  RETENTION_KEYS,
  RETENTION_TABLES,
  retentionCutoff,
  unixSeconds,
} from "../cleanup/retention.ts";
import type { RetentionRule } from "../config/mod.ts";
import { errorMessage, getLogger } from "../log.ts";
import { hasCode } from "../util/errors.ts";
import { delay } from "../util/async.ts";
import { redactText, redactUrl } from "../util/redact.ts";
import type { Io } from "./io.ts";

/** Options of the `cleanup` command (already resolved from flags, env and file). */
export interface CleanupCommandOptions {
  readonly mysqlUrl: string;
  /** Rows per DELETE statement, ≥ 1. */
  readonly batchSize: number;
  /** Sleep between two batches of one table, ≥ 0. */
  readonly batchPauseMs: number;
  /**
   * Age in days per legacy YAML key (`age_hostchecks` …). `0` disables a table; a missing key
   * means the default. Any other key refuses to run (else a typo would be silently ignored).
   */
  readonly ages: Readonly<Record<string, number>>;
  readonly dryRun?: boolean;
  readonly repairPartitions?: boolean;
  /** How often a table still deleting logs its progress; default 10 s (0: every batch). */
  readonly progressIntervalMs?: number;
  /** Reference instant of the cutoffs and the weeks ahead (tests); defaults to now. */
  readonly now?: Date;
}

/** `setTimeout` fires at once above 2^31 − 1 ms, which would turn a long pause into none. */
const MAX_PAUSE_MS = 2 ** 31 - 1;
/** Column width of the table name in printed lines (longest name has 38 characters). */
const TABLE_COLUMN = 38;
const DEFAULT_PROGRESS_INTERVAL_MS = 10_000;
/** Exit code when another run holds the database (EX_TEMPFAIL: try again later). */
const CLEANUP_RUNNING_EXIT = 75;
/**
 * Most rows the count before a table's DELETE reads, for the total and ETA of its progress
 * lines. Counting is some 40 times faster than deleting (docs/retention.md#output); the bound
 * (some 20 s) keeps a legacy table with years of old rows from being scanned to the end first.
 */
const PROGRESS_COUNT_LIMIT = 10_000_000;

const log = getLogger("cleanup");

/** A table with the age this run applies and its cutoff (null: disabled). */
interface PlannedTable extends RetentionRule {
  readonly days: number;
  readonly cutoff: Date | null;
}

/** What happened to one table so far (also when it was interrupted or failed). */
interface TableStats {
  layout: TableLayout["kind"];
  added: string[];
  dropped: string[];
  droppedRowsEstimate: number;
  rows: number;
  batches: number;
  /** The `p_max` of this table holds rows (reported, repaired only on request). */
  needsRepair: boolean;
  /** MySQL refused the ALTER TABLE of its partitions; old rows were deleted row by row instead. */
  alterDenied: boolean;
  /** Dry run: what the run would do to the table, the parts of the line printed for it. */
  wouldDo: string[];
}

/**
 * The advice when the account may not ALTER or DROP the tables cleanup maintains, or undefined.
 * Asked once before the first table, so the dry run reveals what the run would hit once the
 * weeks laid out ahead run out. A failing check is no reason to stop the cleanup.
 */
async function partitionGrantAdvice(
  session: CleanupSession,
  enabled: readonly PlannedTable[],
): Promise<string | undefined> {
  try {
    const { account, database, missing, grant } = await session.missingPartitionPrivileges(
      enabled.map((t) => t.table),
    );
    if (missing.length === 0) return undefined;
    return `the MySQL account ${account} may not ${missing.join(" or ")} the tables of ` +
      `"${database}": cleanup cannot add or drop weekly partitions once the weeks laid out ahead ` +
      `run out, and then deletes old rows one batch at a time instead. Grant it: ` +
      `${grant} (docs/retention.md#grants)`;
  } catch (err: unknown) {
    log.debug("cleanup: could not read the account's privileges", { error: errorMessage(err) });
    return undefined;
  }
}

type TableOutcome =
  | { readonly kind: "finished" | "interrupted"; readonly stats: TableStats }
  | { readonly kind: "failed"; readonly stats: TableStats; readonly error: unknown };

/** The error of an option that keeps the run from starting. */
function refusal(reason: string): RangeError {
  return new RangeError(`Cannot run cleanup: ${reason}`);
}

/** Check the options (a RangeError names the bad one) and resolve each table's age and cutoff. */
function plan(options: CleanupCommandOptions, now: Date): PlannedTable[] {
  const { batchSize, batchPauseMs } = options;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw refusal(`the batch size must be an integer ≥ 1, got ${batchSize}`);
  }
  if (!Number.isFinite(batchPauseMs) || batchPauseMs < 0 || batchPauseMs > MAX_PAUSE_MS) {
    throw refusal(`the batch pause must be 0–${MAX_PAUSE_MS} ms, got ${batchPauseMs}`);
  }
  for (const [key, days] of Object.entries(options.ages)) {
    if (!isRetentionKey(key)) {
      throw refusal(`unknown retention setting "${key}" (known: ${RETENTION_KEYS.join(", ")})`);
    }
    // A negative age would put the cutoff in the future and empty the table. An
    // undefined value (a Partial record at run time) means "not given": the default.
    if (days !== undefined && (!Number.isSafeInteger(days) || days < 0)) {
      throw refusal(`"${key}" must be a whole number of days ≥ 0 (0 disables), got ${days}`);
    }
  }
  return RETENTION_TABLES.map((rule) => {
    const days = options.ages[rule.yamlKey] ?? rule.defaultDays;
    return { ...rule, days, cutoff: days > 0 ? retentionCutoff(now, days) : null };
  });
}

function formatRate(rows: number, ms: number): number {
  const perSecond = rows / Math.max(ms, 1) * 1000;
  return perSecond >= 100 ? Math.round(perSecond) : Math.round(perSecond * 10) / 10;
}

/** The cutoff as every line shows it: local RFC 3339 (what an operator reads) and Unix seconds. */
function cutoffProperties(cutoff: Date): { cutoff: string; "cutoff_unix": number } {
  return { cutoff: formatLocalRfc3339(cutoff), "cutoff_unix": unixSeconds(cutoff) };
}

/** The total and ETA of a progress line, as far as the count before the DELETE knows them. */
function progressEstimate(
  done: number,
  counted: number,
  elapsedMs: number,
): { "rows_total": number; "eta_s"?: number } | { "rows_total_at_least": number } {
  if (counted >= PROGRESS_COUNT_LIMIT) return { "rows_total_at_least": counted };
  // Rows older than the cutoff that arrived after the count make the run longer than the
  // count said; the total then follows the rows done.
  const total = Math.max(counted, done);
  // No rate before the first deleted row: the ETA would be Infinity or NaN (null in JSON).
  if (done === 0) return { "rows_total": total };
  return { "rows_total": total, "eta_s": Math.round((total - done) * elapsedMs / done / 1000) };
}

function namesText(names: readonly string[]): string {
  if (names.length <= 4) return names.join(", ");
  return `${names[0]}, ${names[1]} … ${names.at(-1)} (${names.length})`;
}

/** Everything a table's processing needs besides the table. */
interface RunContext {
  readonly session: CleanupSession;
  readonly options: CleanupCommandOptions;
  readonly dryRun: boolean;
  readonly signal: AbortSignal;
  readonly today: number;
  readonly io: Io;
}

/**
 * Batched DELETE inside one partition (or the whole table), a chunk of rows along the primary
 * key at a time, with a progress line every `progressIntervalMs`. Nothing to trim (`trim` null)
 * or a disabled table deletes nothing. A dry run counts the rows instead, in `holding`: where
 * they are before the run adds and drops partitions (docs/retention.md#dry-run).
 */
async function deleteInBatches(
  ctx: RunContext,
  table: PlannedTable,
  trim: string | "table" | null,
  stats: TableStats,
  holding: readonly string[] | "table" = "table",
): Promise<TableOutcome> {
  if (trim === null || table.cutoff === null) return { kind: "finished", stats };
  const { options, signal } = ctx;
  const cutoff = unixSeconds(table.cutoff);
  if (ctx.dryRun) {
    stats.rows = await ctx.session.countOlder(table, holding, cutoff);
    const from = trim === "table" ? "" : ` from ${trim}`;
    const older = `${table.column} < ${formatLocalRfc3339(table.cutoff)}, unix ${cutoff}`;
    stats.wouldDo.push(`delete ${stats.rows} rows${from} (${older})`);
    return { kind: "finished", stats };
  }
  const interval = options.progressIntervalMs ?? DEFAULT_PROGRESS_INTERVAL_MS;
  const counted = await ctx.session.countOlder(table, trim, cutoff, PROGRESS_COUNT_LIMIT);
  const started = performance.now();
  let lastProgress = started;
  let after: readonly unknown[] | undefined;
  for (;;) {
    if (signal.aborted) return { kind: "interrupted", stats };
    const batchStarted = performance.now();
    const chunk = await ctx.session.deleteOlderChunk(table, trim, cutoff, options.batchSize, after);
    const affected = chunk.deleted;
    stats.rows += affected;
    stats.batches++;
    log.debug("cleanup: batch deleted", {
      table: table.table,
      batch: stats.batches,
      rows: affected,
      "duration_ms": Math.round(performance.now() - batchStarted),
    });
    if (chunk.next === undefined) return { kind: "finished", stats };
    after = chunk.next;
    const now = performance.now();
    if (now - lastProgress >= interval) {
      lastProgress = now;
      log.info("cleanup: table progress", {
        table: table.table,
        partition: trim,
        rows: stats.rows,
        ...progressEstimate(stats.rows, counted, now - started),
        batches: stats.batches,
        "rows_per_s": formatRate(stats.rows, now - started),
      });
    }
    // The pause lets replicas and the writers catch up after a write; a chunk that deleted
    // nothing wrote nothing.
    if (options.batchPauseMs > 0 && affected > 0) await delay(options.batchPauseMs, { signal });
  }
}

/**
 * A disabled table is read only for its weeks ahead; one that does not exist (ER_NO_SUCH_TABLE)
 * has none and nothing to keep: age 0 skips it, in the run and in the repair.
 */
function missingAndDisabled(table: PlannedTable, err: unknown): boolean {
  return table.cutoff === null && (err as { errno?: unknown } | null)?.errno === 1146;
}

/** One table of a normal or dry run. */
async function processTable(ctx: RunContext, table: PlannedTable): Promise<TableOutcome> {
  const { session, signal, dryRun } = ctx;
  const stats: TableStats = {
    layout: "unpartitioned",
    added: [],
    dropped: [],
    droppedRowsEstimate: 0,
    rows: 0,
    batches: 0,
    needsRepair: false,
    alterDenied: false,
    wouldDo: [],
  };
  try {
    const layout = await session.readLayout(table);
    stats.layout = layout.kind;
    if (layout.kind === "other") {
      log.warn("cleanup: table partitioned in another way, cleaned by DELETE only", {
        table: table.table,
        partitioning: layout.description,
        hint: "`statusengine-worker schema --check` shows the difference",
      });
    }
    if (layout.kind !== "weekly") return await deleteInBatches(ctx, table, "table", stats);

    const weekly = layout.layout;
    const max = weekly.max;
    const maxHasRows = max !== null && await session.partitionHasRows(table.table, max.name);
    const cutoff = table.cutoff === null ? null : unixSeconds(table.cutoff);
    let maintenance: ReturnType<typeof planMaintenance>;
    try {
      maintenance = planMaintenance(weekly, ctx.today, cutoff, maxHasRows);
    } catch (err: unknown) {
      // A layout made by hand that gives a name of the weeks ahead to another range: nothing
      // can be laid out until the operator renames it, but the age still holds. The old rows
      // go by DELETE, as from a table partitioned another way, and the table is reported failed.
      if (dryRun) return { kind: "failed", stats, error: err };
      const outcome = await deleteInBatches(ctx, table, "table", stats);
      return outcome.kind === "finished" ? { kind: "failed", stats, error: err } : outcome;
    }
    stats.needsRepair = maxHasRows;
    if (maxHasRows) {
      log.warn("cleanup: p_max holds rows, weeks ahead cannot be laid out", {
        table: table.table,
        partition: max.name,
        "rows_estimate": max.rowsEstimate,
        "weeks_missing": maintenance.blockedWeeks,
        "repair_steps_at_least": repairStepCount(maintenance.blockedWeeks),
        hint: "run `statusengine-worker cleanup --repair-partitions` in a quiet hour " +
          "(docs/retention.md#repair)",
      });
    }
    const added = maintenance.add.map((p) => p.name);
    const dropped = maintenance.drop.map((p) => p.name);
    const droppedRowsEstimate = maintenance.drop.reduce((n, p) => n + p.rowsEstimate, 0);
    if (dryRun) {
      Object.assign(stats, { added, dropped, droppedRowsEstimate });
      if (added.length > 0) stats.wouldDo.push(`add ${namesText(added)}`);
      if (dropped.length > 0) {
        stats.wouldDo.push(`drop ${namesText(dropped)} (~${droppedRowsEstimate} rows)`);
      }
      if (maxHasRows) {
        stats.wouldDo.push(
          `${max.name} holds ~${max.rowsEstimate} rows: ${maintenance.blockedWeeks} week(s) cannot be laid out until --repair-partitions`,
        );
      }
      const holding = partitionsToTrim(weekly, maintenance);
      return await deleteInBatches(ctx, table, maintenance.trim, stats, holding);
    }

    try {
      if (added.length > 0) {
        const started = performance.now();
        await session.addPartitions(table.table, weekly, maintenance.add);
        stats.added = added;
        log.info("cleanup: partitions added", {
          table: table.table,
          partitions: added.join(","),
          "duration_ms": Math.round(performance.now() - started),
        });
      }
      if (!signal.aborted && dropped.length > 0) {
        const started = performance.now();
        await session.dropPartitions(table.table, maintenance.drop);
        Object.assign(stats, { dropped, droppedRowsEstimate });
        log.info("cleanup: partitions dropped", {
          table: table.table,
          partitions: dropped.join(","),
          "rows_estimate": droppedRowsEstimate,
          "duration_ms": Math.round(performance.now() - started),
        });
      }
    } catch (err: unknown) {
      // Only MySQL's "ALTER command denied to user …" (ER_TABLEACCESS_DENIED_ERROR).
      if ((err as { errno?: unknown } | null)?.errno !== 1142) throw err;
      // Without ALTER the old rows can still go: DELETE over the whole table, expired weeks
      // included, as for a table that is not partitioned. The run ends with the advice.
      stats.alterDenied = true;
      log.warn("cleanup: partitions cannot be changed, deleting old rows instead", {
        table: table.table,
        error: errorMessage(err),
      });
      return await deleteInBatches(ctx, table, "table", stats);
    }
    if (signal.aborted) return { kind: "interrupted", stats };
    return await deleteInBatches(ctx, table, maintenance.trim, stats);
  } catch (err: unknown) {
    if (signal.aborted) return { kind: "interrupted", stats };
    if (missingAndDisabled(table, err)) return { kind: "finished", stats };
    // Whatever broke (missing table, lock timeout, lost connection), the next table starts
    // on a fresh connection.
    session.discard();
    return { kind: "failed", stats, error: err };
  }
}

/**
 * Run the `cleanup` command over {@linkcode RETENTION_TABLES}, one table after another
 * (docs/retention.md). A failing table is logged and the run continues; when `signal` aborts,
 * no new statement starts and the rest is left for the next run.
 *
 * @returns 75 when another run holds the database's lock (nothing was done);
 *   0 when every table finished or the run was interrupted; 1 when a table failed (also
 *   before an interruption), an option is invalid, MySQL cannot be reached before the run, or
 *   (not in a dry run) the account may not ALTER and DROP the tables (after deleting what it
 *   could).
 */
export async function runCleanupCommand(
  options: CleanupCommandOptions,
  io: Io,
  signal: AbortSignal,
): Promise<number> {
  const runStarted = performance.now();
  const shownUrl = redactUrl(options.mysqlUrl);
  const now = options.now ?? new Date();
  let tables: PlannedTable[];
  let connectionOptions: MysqlUrlOptions;
  try {
    tables = plan(options, now);
    connectionOptions = mysqlOptionsFromUrl(options.mysqlUrl);
    if (connectionOptions.database === undefined) {
      throw refusal(`the MySQL URL "${shownUrl}" names no database (…/<database>)`);
    }
  } catch (err: unknown) {
    log.error("cleanup: cannot start", { error: errorMessage(err) });
    io.err(errorMessage(err));
    return 1;
  }
  const scrub = (text: string): string => redactText(text, connectionOptions.password);
  const dryRun = options.dryRun === true;
  const enabled = tables.filter((t) => t.days > 0);
  log.info(options.repairPartitions === true ? "cleanup: repair starting" : "cleanup: starting", {
    tables: enabled.length,
    disabled: tables.length - enabled.length,
    "batch_size": options.batchSize,
    "pause_ms": options.batchPauseMs,
    "dry_run": dryRun,
    "mysql_url": shownUrl,
  });

  const failed: string[] = [];
  // An interruption is no failure, but a table that failed before it still is one.
  const interrupted = (rows: number, remaining: number): number => {
    log.warn("cleanup: interrupted, remaining tables left for the next run", {
      rows,
      "remaining_tables": remaining,
      ...(failed.length > 0 ? { "failed_tables": failed.join(",") } : {}),
      "duration_ms": Math.round(performance.now() - runStarted),
    });
    return failed.length > 0 ? 1 : 0;
  };
  if (signal.aborted) return interrupted(0, tables.length);

  const session = new CleanupSession(connectionOptions, signal);
  try {
    try {
      await session.open();
    } catch (err: unknown) {
      if (signal.aborted) return interrupted(0, tables.length);
      if (hasCode(err, "cleanup_running")) {
        log.error("cleanup: another cleanup is running", { error: err.message });
        io.err(err.message);
        return CLEANUP_RUNNING_EXIT;
      }
      log.error("cleanup: cannot connect to MySQL", {
        "mysql_url": shownUrl,
        error: scrub(errorMessage(err)),
      });
      io.err(scrub(`Cannot run cleanup: ${describeMysqlConnectFailure(err, shownUrl)}`));
      return 1;
    }
    const ctx: RunContext = { session, options, dryRun, signal, today: dayNumber(now), io };
    // Said once, before any table: the dry run as a warning; the run deletes what it can and
    // ends with an error, since the weeks ahead will run out.
    const grantAdvice = await partitionGrantAdvice(session, enabled);
    if (grantAdvice !== undefined) {
      (dryRun ? log.warn : log.error)("cleanup: the account may not maintain partitions", {
        hint: grantAdvice,
      });
    }
    if (options.repairPartitions === true) return await runRepair(ctx, tables, scrub, runStarted);

    const total = { rows: 0, added: 0, dropped: 0, droppedRowsEstimate: 0 };
    const needRepair: string[] = [];
    const alterDenied: string[] = [];
    for (const [index, table] of tables.entries()) {
      if (signal.aborted) return interrupted(total.rows, tables.length - index);
      if (table.cutoff === null) {
        log.info("cleanup: table disabled, nothing is deleted", {
          table: table.table,
          setting: table.yamlKey,
        });
      } else {
        log.debug("cleanup: starting table", {
          table: table.table,
          column: table.column,
          "age_days": table.days,
          ...cutoffProperties(table.cutoff),
        });
      }
      const started = performance.now();
      const outcome = await processTable(ctx, table);
      const ms = performance.now() - started;
      const { stats } = outcome;
      if (dryRun && outcome.kind === "finished") {
        // Without weeks to lay out ahead, a disabled table has nothing else to show.
        const disabled = table.cutoff === null && stats.layout !== "weekly";
        const line = disabled ? `disabled (${table.yamlKey}: 0)` : stats.wouldDo.join("; ");
        io.out(`${table.table.padEnd(TABLE_COLUMN)} ${line || "nothing to do"}`);
      }
      total.rows += stats.rows;
      total.added += stats.added.length;
      total.dropped += stats.dropped.length;
      total.droppedRowsEstimate += stats.droppedRowsEstimate;
      if (stats.needsRepair) needRepair.push(table.table);
      if (stats.alterDenied) alterDenied.push(table.table);
      const properties = {
        table: table.table,
        layout: stats.layout,
        "age_days": table.days,
        ...(table.cutoff === null ? {} : cutoffProperties(table.cutoff)),
        "partitions_added": stats.added.length,
        "partitions_dropped": stats.dropped.length,
        "rows_dropped_estimate": stats.droppedRowsEstimate,
        rows: stats.rows,
        batches: stats.batches,
        "duration_ms": Math.round(ms),
        "rows_per_s": formatRate(stats.rows, ms),
      };
      if (outcome.kind === "failed") {
        const error = scrub(errorMessage(outcome.error));
        log.error("cleanup: table failed", { ...properties, error });
        failed.push(table.table);
      } else if (outcome.kind === "interrupted") {
        log.info("cleanup: table interrupted", properties);
        return interrupted(total.rows, tables.length - index - 1);
      } else if (!dryRun) log.info("cleanup: table finished", properties);
    }

    const summary = {
      tables: tables.length,
      rows: total.rows,
      "partitions_added": total.added,
      "partitions_dropped": total.dropped,
      "rows_dropped_estimate": total.droppedRowsEstimate,
      "tables_needing_repair": needRepair.join(","),
      "duration_ms": Math.round(performance.now() - runStarted),
    };
    if (dryRun) {
      io.out(
        `Dry run, nothing changed: would add ${total.added} and drop ${total.dropped} partition(s) (~${total.droppedRowsEstimate} rows) and delete ${total.rows} rows` +
          (needRepair.length > 0 ? `; p_max holds rows in ${needRepair.join(", ")}` : ""),
      );
    }
    const advice = grantAdvice ??
      (alterDenied.length > 0
        ? "the account may not ALTER the tables: GRANT ALTER, DROP " +
          "on the database to it (docs/retention.md#grants)"
        : undefined);
    if (failed.length > 0 || (!dryRun && advice !== undefined)) {
      log.error("cleanup: finished with errors", {
        failed: failed.length,
        "failed_tables": failed.join(","),
        "partitions_denied_tables": alterDenied.join(","),
        ...summary,
        ...(advice === undefined ? {} : { hint: advice }),
      });
      return 1;
    }
    log.info(dryRun ? "cleanup: dry run finished" : "cleanup: finished", summary);
    return 0;
  } finally {
    await session.close();
  }
}

/**
 * `cleanup --repair-partitions` (docs/retention.md#repair): for every weekly partitioned table,
 * split `p_max` into weekly partitions up to its newest row and the weeks ahead, a few weeks
 * per `REORGANIZE PARTITION` ({@linkcode planRepairStep}). Each step is atomic; an interrupted
 * repair continues from the layout the server has. Deletes nothing.
 */
async function runRepair(
  ctx: RunContext,
  tables: readonly PlannedTable[],
  scrub: (text: string) => string,
  runStarted: number,
): Promise<number> {
  const { session, signal, dryRun, io } = ctx;
  let steps = 0;
  let repaired = 0;
  const failed: string[] = [];
  for (const [index, table] of tables.entries()) {
    if (signal.aborted) return repairInterrupted(tables.length - index, steps, failed);
    const tableStarted = performance.now();
    let tableSteps = 0;
    try {
      let layout = await session.readLayout(table);
      if (layout.kind !== "weekly" || layout.layout.max === null) continue;
      const max = layout.layout.max;
      const rowDays = await session.rowDaysIn(table, max.name);
      const horizon = repairHorizon(ctx.today);
      if (rowDays !== null && rowDays.newest >= horizon) {
        // Rerunning cannot help: the rows have to go (or be corrected) first.
        const newest = new Date(rowDays.newest * 1000);
        const where = `FROM \`${table.table}\` PARTITION (\`${max.name}\`) ` +
          `WHERE \`${table.column}\` >= ${horizon}`;
        log.error("cleanup: repair refused: p_max holds rows far in the future", {
          table: table.table,
          partition: max.name,
          newest: rowDays.newest,
          // Null past what a Date holds (year 275760; decoding accepts 15-digit times).
          "newest_utc": Number.isNaN(newest.getTime()) ? null : newest.toISOString(),
          hint: "rows more than a year ahead come from a wrong clock or a " +
            "bad payload; the repair would lay out a partition for every week up to them. " +
            `Look at them (SELECT * ${where}), delete them (DELETE ${where}), then run the ` +
            "repair again (docs/retention.md#far-future)",
        });
        failed.push(table.table);
        continue;
      }
      let weekly = layout.layout;
      for (;;) {
        const step = planRepairStep(weekly, ctx.today, rowDays);
        if (step === null) break;
        tableSteps++;
        const names = step.add.map((p) => p.name);
        if (dryRun) {
          // The summary of a dry run counts the steps it lists, as the run counts those it takes.
          steps++;
          io.out(
            `${table.table.padEnd(TABLE_COLUMN)} step ${tableSteps}: split ${
              namesText(names)
            } off ${max.name} (~${max.rowsEstimate} rows held), ${step.weeksLeft} week(s) left`,
          );
          weekly = {
            bounded: [...weekly.bounded, ...step.add.map((p) => ({ ...p, rowsEstimate: 0 }))],
            max: weekly.max,
          };
          continue;
        }
        if (signal.aborted) return repairInterrupted(tables.length - index, steps, failed);
        const started = performance.now();
        await session.addPartitions(table.table, weekly, step.add);
        steps++;
        layout = await session.readLayout(table);
        if (layout.kind !== "weekly") throw new Error("the layout changed during the repair");
        weekly = layout.layout;
        log.info("cleanup: repair step", {
          table: table.table,
          step: tableSteps,
          partitions: `${names[0]}…${names.at(-1)}`,
          "weeks_left": step.weeksLeft,
          "rows_left_in_p_max_estimate": weekly.max?.rowsEstimate ?? 0,
          "duration_ms": Math.round(performance.now() - started),
        });
      }
      if (tableSteps > 0) repaired++;
      if (tableSteps > 0 && !dryRun) {
        log.info("cleanup: table repaired", {
          table: table.table,
          steps: tableSteps,
          "duration_ms": Math.round(performance.now() - tableStarted),
        });
      }
    } catch (err: unknown) {
      if (signal.aborted) return repairInterrupted(tables.length - index, steps, failed);
      if (missingAndDisabled(table, err)) continue;
      session.discard();
      log.error("cleanup: repair failed", {
        table: table.table,
        steps: tableSteps,
        error: scrub(errorMessage(err)),
        hint: "run the repair again: it continues from the weeks already split off",
      });
      failed.push(table.table);
    }
  }
  const summary = {
    "tables_repaired": repaired,
    steps,
    "duration_ms": Math.round(performance.now() - runStarted),
  };
  if (failed.length > 0) {
    log.error("cleanup: repair finished with errors", {
      ...summary,
      "failed_tables": failed.join(","),
    });
    return 1;
  }
  if (dryRun) {
    io.out(
      `Dry run, nothing changed: the repair would take ${steps} step(s) on ${repaired} table(s)`,
    );
  }
  log.info(dryRun ? "cleanup: repair dry run finished" : "cleanup: repair finished", summary);
  return 0;
}

function repairInterrupted(remaining: number, steps: number, failed: readonly string[]): number {
  log.warn("cleanup: repair interrupted, run it again to continue", {
    steps,
    "remaining_tables": remaining,
    ...(failed.length > 0 ? { "failed_tables": failed.join(",") } : {}),
  });
  return failed.length > 0 ? 1 : 0;
}
