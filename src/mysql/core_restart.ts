/**
 * The status sweep after a monitoring-core restart (docs/core-restart.md): status rows not
 * refreshed since the restart belong to removed objects. They are deleted only once both status
 * tables show the re-published status (docs/core-restart.md#the-rules), which the writers report
 * to {@link StatusProgress}; then the scheduled downtimes the core did not announce since.
 *
 * @module
 */
import type { SqlExecutor } from "./executor.ts";
import { quoteIdentifier } from "./ddl.ts";
import { FUTURE_SNAPSHOT_SECONDS, keyBound } from "./sql.ts";
import { TABLES } from "./catalogue.ts";
import type { DbAvailability } from "./availability.ts";
import { runWithRetry } from "./retry.ts";
import type { Metrics } from "../metrics/registry.ts";
import { delay } from "../util/async.ts";
import { Backoff } from "../util/backoff.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Row } from "../events/mod.ts";

const log = getLogger("pipeline");

/** The two tables a core restart cleans, in the order they are swept (services first). */
export const STATUS_TABLES = ["statusengine_servicestatus", "statusengine_hoststatus"] as const;

export type StatusTable = (typeof STATUS_TABLES)[number];

export function isStatusTable(table: string): table is StatusTable {
  return (STATUS_TABLES as readonly string[]).includes(table);
}

/**
 * The newest committed `status_update_time` per status table and node, fed by the writers: the
 * rows' own times, so "newest ≥ cutoff" is what the tables would answer. Keeping the maximum needs
 * no order among a table's writers and, on one event loop, no lock. Also how many rows were
 * committed: while that grows the status queue is still draining.
 */
export class StatusProgress {
  readonly #newest: Record<StatusTable, Map<string, number>> = {
    statusengine_servicestatus: new Map(),
    statusengine_hoststatus: new Map(),
  };
  readonly #rows: Record<StatusTable, Map<string, number>> = {
    statusengine_servicestatus: new Map(),
    statusengine_hoststatus: new Map(),
  };

  /**
   * Record rows the writer of `table` has committed. Call only once MySQL returned the
   * statement that wrote them: rows still buffered, in flight, or dead-lettered must not count.
   */
  committed(table: StatusTable, rows: readonly Row[]): void {
    const newest = this.#newest[table];
    for (const row of rows) {
      const node = row["node_name"];
      const time = row["status_update_time"];
      if (typeof node !== "string" || typeof time !== "number" || !Number.isFinite(time)) {
        continue;
      }
      const known = newest.get(node);
      if (known === undefined || time > known) newest.set(node, time);
      this.#rows[table].set(node, (this.#rows[table].get(node) ?? 0) + 1);
    }
  }

  newest(table: StatusTable, nodeName: string): number | undefined {
    return this.#newest[table].get(nodeName);
  }

  rows(table: StatusTable, nodeName: string): number {
    return this.#rows[table].get(nodeName) ?? 0;
  }
}

/**
 * How long a restart message may have travelled to the worker. The receive time less this is the
 * restart instant, so status re-published in the second of the core's start is never older.
 */
const RECEIVE_ALLOWANCE_MS = 500;

/**
 * How far the core's clock is behind the worker's, read off status: a job's receive time less its
 * newest status time (the core's clock, whole seconds) is that lag plus the job's way, never less;
 * the smallest over the last 10 to 20 minutes is the lag, a little over. Beyond the maximum the
 * worker cannot tell a core clock behind from status queues behind (a cutoff moved back by a queue
 * lag over the settle time would not wait for re-published status still queued): the restart
 * instant is unknown. Over the warning, the core's clock wants setting right (NTP).
 */
const CLOCK_WINDOW_MS = 10 * 60_000;
const MAX_CORE_CLOCK_BEHIND_MS = 10_000;
const WARN_CORE_CLOCK_BEHIND_MS = 2_000;

/**
 * Rows one statement of a sweep reads or deletes: on Galera one big DELETE is one write set that
 * stalls every node's writes while it applies (docs/core-restart.md#galera).
 */
const SWEEP_CHUNK_ROWS = 1_000;

/** The tables a sweep walks, in order: the status tables, then the scheduled downtimes. */
const SWEPT_TABLES = [
  ...STATUS_TABLES,
  "statusengine_host_scheduleddowntimes",
  "statusengine_service_scheduleddowntimes",
] as const;
type SweptTable = (typeof SWEPT_TABLES)[number];

const ANNOUNCEMENTS = "statusengine_downtime_announcements";

/** What the cleaner needs of a status table's writer. */
export interface PausableWriter {
  /** Commit what is buffered, hold the table while `fn` runs, then resume. */
  withPaused<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T>;
  /** Rows handed over and not yet committed: buffered, sent, or held for a retry. */
  readonly held: number;
}

/** The clocks of the sweep; tests drive them by hand. */
export interface RestartClock {
  /** Epoch milliseconds, the clock of receive times and of the restart's cutoff. */
  nowMs(): number;
  /** What the waits are measured in: a step of the wall clock (NTP) must not end or stretch them. */
  monotonicMs(): number;
  /** Rejects when `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

const SYSTEM_CLOCK: RestartClock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
  sleep: (ms, signal) => delay(ms, { signal }),
};

/** When the sweep runs; the defaults suit a production core (docs/core-restart.md). */
export interface RestartTiming {
  /**
   * How far past the first re-published status a table's status must reach (in the status' own
   * clock), or how long its writers must commit nothing more, before the sweep.
   */
  readonly settleMs: number;
  /**
   * Sweep anyway this long after the restart was recorded or MySQL took writes again (a table
   * whose every object was removed never refreshes).
   */
  readonly maxWaitMs: number;
  /** How often the sweep looks whether the status was re-published (in memory, no SQL). */
  readonly pollMs: number;
  /**
   * For a table whose re-published status this process's writers have not committed (another
   * process wrote it, or the node has no row there): when, and how often, the table is read.
   */
  readonly tableCheckMs: number;
  /**
   * A restart job without a timestamp received this soon after the worker or its link started
   * may have waited in the queue: its restart instant is unknown.
   */
  readonly startupWindowMs: number;
}

const DEFAULT_RESTART_TIMING: RestartTiming = {
  settleMs: 10_000,
  maxWaitMs: 5 * 60_000,
  pollMs: 1_000,
  tableCheckMs: 30_000,
  startupWindowMs: 60_000,
};

interface StatusCleanerOptions {
  readonly executor: SqlExecutor;
  readonly availability: DbAvailability;
  readonly nodeName: string;
  /** Delete rows whose object is missing or disabled in openITCOCKPIT. */
  readonly openItcockpit: boolean;
  /** `--status-max-age` in seconds, 0 = off: re-published status older than it is discarded. */
  readonly statusMaxAgeSeconds: number;
  readonly writers: Readonly<Record<StatusTable, PausableWriter>>;
  /** What the sweep asks: the newest status time committed for a node, if any, and the rows. */
  readonly committed: Pick<StatusProgress, "newest" | "rows">;
  readonly metrics?: Metrics | undefined;
  readonly clock?: RestartClock;
  readonly timing?: Partial<RestartTiming>;
  /** Rows per statement of the sweeps; tests make it small to walk chunks. */
  readonly sweepChunkRows?: number;
}

/** A restart job as the handler hands it over (epoch seconds and milliseconds). */
interface RestartJob {
  /** The message's positive `timestamp`, or null when it carried none. */
  readonly messageSeconds: number | null;
  readonly receivedAtMs: number;
  /** When the link that delivered it was opened; null when unknown. */
  readonly linkOpenedAtMs: number | null;
}

/** A recorded restart waiting for its sweep: rows updated before `cutoff` (epoch s) are stale. */
interface PendingSweep {
  readonly cutoff: number;
  readonly recordedAtMs: number;
}

/** What the sweep of one pending restart has learnt while waiting (a table seen stays so). */
interface Republished {
  readonly sweep: PendingSweep;
  readonly seen: Map<StatusTable, Settling>;
  nextTableCheckMs: number;
}

/** A table seen re-published and settling (docs/core-restart.md, rule 2). */
interface Settling {
  /** Since when its writers committed nothing more of this node, and the rows by then. */
  sinceMs: number;
  rows: number;
  /** Status stamped from here on shows the re-publish drained; Infinity: the table was read. */
  readonly until: number;
}

/** Records core restarts and sweeps the status rows they left stale. */
export class StatusCleaner {
  readonly #o: StatusCleanerOptions;
  readonly #clock: RestartClock;
  readonly #timing: RestartTiming;
  readonly #startedAtMs: number;
  readonly #chunk: number;
  readonly #stop = new AbortController();
  #pending: PendingSweep | undefined;
  #running: Promise<void> | undefined;
  #sweptBefore = 0;
  /** The tables the sweep under way is done with; undefined while none is under way. */
  #swept: string[] | undefined;
  /** Smallest receive time less status time (ms) in this and the previous window (Infinity: none). */
  readonly #behind = { since: -Infinity, current: Infinity, previous: Infinity };

  constructor(options: StatusCleanerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? SYSTEM_CLOCK;
    this.#timing = { ...DEFAULT_RESTART_TIMING, ...options.timing };
    this.#startedAtMs = this.#clock.nowMs();
    this.#chunk = options.sweepChunkRows ?? SWEEP_CHUNK_ROWS;
  }

  /** A status job received at `receivedAtMs` whose newest status time is `statusSeconds`. */
  statusReceived(receivedAtMs: number, statusSeconds: number): void {
    const b = this.#behind;
    const ms = receivedAtMs - statusSeconds * 1000;
    if (receivedAtMs - b.since >= CLOCK_WINDOW_MS) {
      b.previous = b.current;
      b.current = ms;
      b.since = receivedAtMs;
    } else if (ms < b.current) b.current = ms;
  }

  /**
   * Record a restart for a later sweep (the job can be acknowledged at once), or in
   * openITCOCKPIT mode delete the rows of objects missing there (`signal` ends the wait for MySQL).
   */
  async onRestart(restart: RestartJob, signal: AbortSignal): Promise<void> {
    const o = this.#o;
    if (o.openItcockpit) {
      log.info("pipeline: monitoring core restarted, deleting status rows of removed objects", {
        node_name: o.nodeName,
        mode: "openitcockpit",
      });
      // Both status writers paused, services first (bounded write sets, SWEEP_CHUNK_ROWS).
      await this.#paused(async () => {
        for (const table of STATUS_TABLES) {
          const n = await this.#deleteInChunks(table, openItcockpitDelete(table), [], signal);
          log.info("pipeline: stale status rows deleted", { table, node_name: o.nodeName, ...n });
        }
      }, signal);
      return;
    }
    const nowMs = this.#clock.nowMs();
    const fromMessage = restart.messageSeconds !== null && restart.messageSeconds > 0;
    const upSinceMs = Math.max(this.#startedAtMs, restart.linkOpenedAtMs ?? this.#startedAtMs);
    if (!fromMessage && restart.receivedAtMs - upSinceMs < this.#timing.startupWindowMs) {
      log.info(
        "pipeline: monitoring core restarted at an unknown time (the restart job may have " +
          "waited in the queue while the worker or its link was down); status rows are kept, " +
          "objects removed from the configuration stay until the next restart",
        { node_name: o.nodeName },
      );
      return;
    }
    // The re-published status carries the core's clock: a cutoff in the worker's, with the
    // core's behind, would be newer than it and sweep the rows of objects the core still has.
    const behindMs = Math.min(this.#behind.current, this.#behind.previous);
    if (!fromMessage && !(behindMs <= MAX_CORE_CLOCK_BEHIND_MS)) {
      log.warn(
        "pipeline: monitoring core restarted at an unknown time: no status reached the worker " +
          "within 10 s of its time lately (no status yet, the status queues lag behind, or the " +
          "core's clock is behind the worker's); status rows are kept, objects removed from the " +
          "configuration stay until the next restart",
        {
          node_name: o.nodeName,
          core_clock_behind_ms: Number.isFinite(behindMs) ? behindMs : null,
        },
      );
      return;
    }
    if (!fromMessage && behindMs > WARN_CORE_CLOCK_BEHIND_MS) {
      log.warn("pipeline: the monitoring core's clock is behind the worker's; set it right (NTP)", {
        node_name: o.nodeName,
        core_clock_behind_ms: behindMs,
      });
    }
    const cutoff = fromMessage
      ? restart.messageSeconds
      : Math.floor((restart.receivedAtMs - RECEIVE_ALLOWANCE_MS - Math.max(0, behindMs)) / 1000);
    const maxAge = o.statusMaxAgeSeconds;
    if (maxAge > 0 && nowMs / 1000 - cutoff > maxAge) {
      log.warn(
        "pipeline: monitoring core restart is older than --status-max-age; the status the " +
          "core re-published after it was discarded as stale, so no rows are swept (objects " +
          "removed from the configuration stay until the next restart)",
        { node_name: o.nodeName, cutoff, status_max_age_seconds: maxAge },
      );
      return;
    }
    // No status reaches such a cutoff until the core's clock does: the sweep would run after the
    // longest wait and delete every row of the node, and the status after it would be discarded.
    if (fromMessage && cutoff - nowMs / 1000 > FUTURE_SNAPSHOT_SECONDS) {
      log.warn(
        "pipeline: monitoring core restart time is more than an hour ahead of the worker's " +
          "clock (a clock set wrong, or a time not in seconds); no rows are swept (objects " +
          "removed from the configuration stay until the next restart)",
        { node_name: o.nodeName, cutoff, now: Math.floor(nowMs / 1000) },
      );
      return;
    }
    // A later restart covers an earlier one that was not swept yet.
    if (this.#pending === undefined || cutoff > this.#pending.cutoff) {
      this.#pending = { cutoff, recordedAtMs: this.#clock.monotonicMs() };
    }
    log.info(
      "pipeline: monitoring core restarted, stale status rows are swept once the core " +
        "has re-published its objects",
      { node_name: o.nodeName, cutoff, cutoff_source: fromMessage ? "message" : "receive_time" },
    );
    this.#schedule();
  }

  #schedule(): void {
    this.#running ??= this.#run().finally(() => {
      this.#running = undefined;
      // A restart recorded after the loop's last look at #pending, before this callback, found
      // the loop still running and did not start one: it would never be swept.
      if (this.#pending !== undefined && !this.#stop.signal.aborted) this.#schedule();
    });
  }

  /**
   * The cutoff of the latest status sweep begun (epoch seconds), 0 before any: this node's status
   * older than it is a snapshot from before that restart, discarded on arrival
   * (docs/core-restart.md#after-the-sweep).
   */
  get sweptBefore(): number {
    return this.#sweptBefore;
  }

  /** Settles when no sweep is pending or running (tests). */
  async idle(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  /** Stop waiting; a restart not swept yet is dropped (logged). */
  async close(): Promise<void> {
    this.#stop.abort(new Error("worker shutting down"));
    await this.#running;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    // A sweep that failed for a reason the MySQL hold does not cover is tried again every poll
    // interval, without growth or jitter: one sweep per worker, and such failures are rare.
    const t = this.#timing;
    const again = new Backoff({ initialMs: t.pollMs, maxMs: t.pollMs, jitter: 0 });
    for (let next = this.#pending; next !== undefined; next = this.#pending) {
      try {
        const target = await this.#waitForResend(next, signal);
        // From here on a snapshot from before the restart would write the row of a removed
        // object again (a redelivered job): the core re-published a newer one of every object
        // it still has. Set before the first DELETE, so status handed over meanwhile is caught.
        this.#sweptBefore = Math.max(this.#sweptBefore, target.cutoff);
        this.#swept = [];
        await this.#sweep(target.cutoff, signal);
        this.#swept = undefined;
        if (this.#pending === target) this.#pending = undefined;
      } catch (err: unknown) {
        if (signal.aborted) {
          if (this.#swept === undefined) {
            log.info(
              "pipeline: core-restart sweep not run before shutdown; objects removed from " +
                "the configuration stay until the next restart",
              { node_name: this.#o.nodeName },
            );
          } else {
            // Some rows are gone already: "not run" would tell the operator none were.
            log.info(
              "pipeline: core-restart sweep interrupted by shutdown; rows of removed objects " +
                "in the tables not swept yet stay until the next restart",
              { node_name: this.#o.nodeName, tables_swept: this.#swept },
            );
          }
          this.#swept = undefined;
          this.#pending = undefined;
          return;
        }
        this.#o.metrics?.pipelineErrors.inc({ component: "mysql" });
        log.error("pipeline: core-restart sweep failed, retrying", {
          node_name: this.#o.nodeName,
          error: errorMessage(err),
        });
        await this.#clock.sleep(again.next(), signal).catch(() => {});
      }
    }
  }

  /**
   * Wait until both status tables have status re-published since the latest pending restart
   * and have settled, or the longest wait has passed (since MySQL last took writes again).
   */
  async #waitForResend(first: PendingSweep, signal: AbortSignal): Promise<PendingSweep> {
    const t = this.#timing;
    const lookAt = (sweep: PendingSweep): Republished => ({
      sweep,
      seen: new Map(),
      nextTableCheckMs: sweep.recordedAtMs + t.tableCheckMs,
    });
    let look = lookAt(first);
    // The longest wait counts from the restart, or from MySQL's return after an outage: the
    // re-published status queued meanwhile must have the time to be written.
    let waitFromMs = first.recordedAtMs;
    for (;;) {
      const latest = this.#pending;
      if (latest !== undefined && latest !== look.sweep) {
        look = lookAt(latest);
        waitFromMs = Math.max(waitFromMs, latest.recordedAtMs);
      }
      const now = this.#clock.monotonicMs();
      if (!this.#o.availability.available) waitFromMs = now;
      if (await this.#settled(look, now, signal)) return look.sweep;
      if (now - waitFromMs >= t.maxWaitMs) {
        const { cutoff, recordedAtMs } = look.sweep;
        log.warn(
          "pipeline: the status tables did not catch up with the core restart in time; " +
            "sweeping anyway (objects the core still has reappear with their next status)",
          { node_name: this.#o.nodeName, cutoff, waited_ms: now - recordedAtMs },
        );
        return look.sweep;
      }
      await this.#clock.sleep(t.pollMs, signal);
    }
  }

  /**
   * Whether each status table has status of this node re-published since the restart (as the
   * writers of this process committed it, or else as the table showed at its last read) and has
   * settled: the writers committed status stamped the settle time after the first re-published
   * status they committed (the queue drains in order, so all the core re-published before that is
   * in), or nothing more of this node for the settle time while MySQL took writes and they held
   * nothing (a queue drains without pauses).
   */
  async #settled(look: Republished, now: number, signal: AbortSignal): Promise<boolean> {
    const o = this.#o;
    const settleMs = this.#timing.settleMs;
    const missing: StatusTable[] = [];
    let settled = true;
    for (const table of STATUS_TABLES) {
      const newest = o.committed.newest(table, o.nodeName) ?? -Infinity;
      const rows = o.committed.rows(table, o.nodeName);
      let s = look.seen.get(table);
      if (s === undefined && newest >= look.sweep.cutoff) {
        s = { sinceMs: now, rows, until: newest + settleMs / 1000 };
        look.seen.set(table, s);
      }
      if (s === undefined) {
        missing.push(table);
        continue;
      }
      // Quiet means nothing more came, not that MySQL took nothing: while it takes no writes, or
      // the writers still hold rows of the table, re-published status may wait behind them.
      if (rows !== s.rows || !o.availability.available || o.writers[table].held > 0) {
        s.rows = rows;
        s.sinceMs = now;
      }
      const drained = newest >= s.until;
      if (!drained && now - s.sinceMs < settleMs) settled = false;
    }
    if (missing.length === 0) return settled;
    if (now < look.nextTableCheckMs) return false;
    look.nextTableCheckMs = now + this.#timing.tableCheckMs;
    for (const table of missing) {
      if (await this.#tableRepublished(table, look.sweep.cutoff, signal)) {
        const rows = o.committed.rows(table, o.nodeName);
        look.seen.set(table, { sinceMs: now, rows, until: Infinity });
      }
    }
    return false;
  }

  /**
   * Read one table: a row of this node refreshed since `cutoff`, or no row of this node at all
   * (nothing to wait for). Each EXISTS stops at its first match.
   */
  async #tableRepublished(table: StatusTable, cutoff: number, signal: AbortSignal) {
    const t = quoteIdentifier(table);
    const result = await this.#sql(
      table,
      `SELECT CASE WHEN EXISTS (SELECT 1 FROM ${t} WHERE \`node_name\` = ? ` +
        `AND \`status_update_time\` >= ?) THEN 1 ` +
        `WHEN EXISTS (SELECT 1 FROM ${t} WHERE \`node_name\` = ?) THEN 0 ELSE 1 END ` +
        `AS \`republished\``,
      [this.#o.nodeName, cutoff, this.#o.nodeName],
      signal,
    );
    return Number(result.rows[0]?.["republished"] ?? 0) === 1;
  }

  /**
   * Delete this node's status rows not refreshed since `cutoff` (docs/core-restart.md#bounded),
   * then its scheduled downtimes not announced since and its announcements older than the cutoff
   * (they can no longer keep a row). Safe against the downtime statements running meanwhile: they
   * record the announcement before they write the scheduled row
   * (docs/core-restart.md#scheduled-downtimes).
   */
  async #sweep(cutoff: number, signal: AbortSignal): Promise<void> {
    const o = this.#o;
    for (const table of SWEPT_TABLES) {
      const n = await this.#walk(table, cutoff, signal);
      if (isStatusTable(table)) {
        log.info("pipeline: stale status rows deleted", { table, node_name: o.nodeName, ...n });
      } else {
        log.info("pipeline: scheduled downtimes the core no longer has deleted", {
          table,
          node_name: o.nodeName,
          cutoff,
          ...n,
        });
      }
      this.#swept?.push(table);
    }
    await this.#deleteInChunks(
      ANNOUNCEMENTS,
      `DELETE FROM ${quoteIdentifier(ANNOUNCEMENTS)} WHERE \`node_name\` = ? ` +
        "AND `announced_at` < ?",
      [o.nodeName, cutoff],
      signal,
    );
  }

  /**
   * Delete this node's rows of `table` left stale by the restart at `cutoff` a chunk at a time:
   * read the next chunk's keys, then delete the stale rows in the chunk's key range; returns the
   * rows deleted. A status table is walked along its `node_name` index: its range runs from the
   * chunk's first key (no other rows of the node lie in it, whatever the other nodes' keys), its
   * DELETE is LIMITed and runs with both status writers paused. A scheduled-downtime table (alias
   * `s`) is walked along its primary key, its range starting after the previous chunk's last key
   * (a multi-table DELETE takes no LIMIT).
   */
  async #walk(table: SweptTable, cutoff: number, signal: AbortSignal): Promise<Deleted> {
    const nodeName = this.#o.nodeName;
    const status = isStatusTable(table);
    const alias = status ? "" : "s.";
    const t = quoteIdentifier(table);
    // Named, because MariaDB may otherwise walk the primary key in order for the ORDER BY …
    // LIMIT and filter the node on the way: from the start of the table for the first chunk.
    const indexed = status && await this.#hasNodeIndex(table, signal);
    const source = status ? (indexed ? `${t} FORCE INDEX (\`node_name\`)` : t) : `${t} s`;
    const where = indexed ? [{ sql: "`node_name` = ?", values: [nodeName] }] : [];
    const chunk = this.#chunk;
    const key = TABLES[table].primaryKey;
    const columns = key.map((c) => `${alias}${quoteIdentifier(c)}`).join(", ");
    const keyOf = (row: Record<string, unknown>) => key.map((c) => row[c]);
    let after: readonly unknown[] | undefined;
    const n: Deleted = { rows: 0 };
    for (;;) {
      const from = after === undefined ? undefined : keyBound(key, alias, ">", after);
      const conditions = from === undefined ? where : [...where, from];
      const filter = conditions.length === 0
        ? ""
        : ` WHERE ${conditions.map((c) => c.sql).join(" AND ")}`;
      const read = await this.#sql(
        table,
        `SELECT ${columns} FROM ${source}${filter} ORDER BY ${columns} LIMIT ${chunk}`,
        conditions.flatMap((c) => c.values),
        signal,
      );
      const last = read.rows.at(-1);
      if (last === undefined) break;
      const lower = status ? keyBound(key, alias, ">=", keyOf(read.rows[0] ?? last)) : from;
      const upper = keyBound(key, alias, "<=", keyOf(last));
      const bounds = lower === undefined ? [upper] : [lower, upper];
      const remove = () =>
        this.#sql(
          table,
          `${staleRowsDelete(table)} AND ${bounds.map((b) => b.sql).join(" AND ")}` +
            (status ? ` LIMIT ${chunk}` : ""),
          [nodeName, cutoff, ...bounds.flatMap((b) => b.values)],
          signal,
        );
      addTo(n, await (status ? this.#paused(remove, signal) : remove()));
      if (read.rows.length < chunk) break;
      after = keyOf(last);
    }
    return n;
  }

  /** Whether `table` has the `node_name` index the worker creates; warns if not (an old schema). */
  async #hasNodeIndex(table: StatusTable, signal: AbortSignal): Promise<boolean> {
    const result = await this.#sql(
      table,
      "SELECT COUNT(*) AS `n` FROM information_schema.STATISTICS WHERE " +
        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'node_name' " +
        "AND SEQ_IN_INDEX = 1 AND COLUMN_NAME = 'node_name'",
      [table],
      signal,
    );
    if (Number(result.rows[0]?.["n"] ?? 0) > 0) return true;
    const hint = `ALTER TABLE ${quoteIdentifier(table)} ADD INDEX node_name (node_name)`;
    log.warn(
      "pipeline: status table has no node_name index, the core-restart sweep walks every " +
        "node's rows (docs/core-restart.md#bounded)",
      { table, node_name: this.#o.nodeName, hint },
    );
    return false;
  }

  /** Run a single-table DELETE a chunk at a time until it deletes fewer; the rows deleted. */
  async #deleteInChunks(table: string, sql: string, values: unknown[], signal: AbortSignal) {
    const limited = `${sql} LIMIT ${this.#chunk}`;
    const n: Deleted = { rows: 0 };
    for (;;) {
      const one = await this.#sql(table, limited, values, signal);
      addTo(n, one);
      if (one.affectedRows < this.#chunk) return n;
    }
  }

  /** Run `fn` with both status writers paused (what they hold is committed first). */
  #paused<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    const { writers } = this.#o;
    return writers.statusengine_servicestatus.withPaused(
      () => writers.statusengine_hoststatus.withPaused(fn, signal),
      signal,
    );
  }

  /**
   * One statement, retried while MySQL is unavailable. A DELETE sent again may have committed
   * already, its reply lost with the connection: the resend deletes nothing of those rows, so its
   * count is then only a lower bound (`resent`).
   */
  async #sql(table: string, sql: string, values: readonly unknown[], signal: AbortSignal) {
    let sends = 0;
    const result = await runWithRetry(() => {
      sends++;
      return this.#o.executor.run(sql, values);
    }, { table, availability: this.#o.availability, signal, metrics: this.#o.metrics });
    return { ...result, resent: sends > 1 };
  }
}

/**
 * Rows deleted, as logged: `rows_at_least` when a DELETE was sent again, so more may have gone than
 * `rows` says.
 */
interface Deleted {
  rows: number;
  "rows_at_least"?: true;
}

function addTo(total: Deleted, one: { affectedRows: number; resent: boolean }): void {
  total.rows += one.affectedRows;
  if (one.resent) total.rows_at_least = true;
}

/**
 * The openITCOCKPIT-mode cleanup of one status table (docs/tables.md#core-restart-queue): rows
 * whose object is missing or disabled in openITCOCKPIT's own tables, whatever their node or age.
 * NOT EXISTS rather than NOT IN: a NULL uuid in hosts/services would make NOT IN match nothing.
 */
function openItcockpitDelete(table: StatusTable): string {
  const noHost = "NOT EXISTS (SELECT 1 FROM `hosts` h WHERE h.`uuid` = " +
    `\`${table}\`.\`hostname\` AND h.\`disabled\` = 0)`;
  // A service whose host goes goes too: no service row is left without its host row.
  return table === "statusengine_hoststatus"
    ? `DELETE FROM \`${table}\` WHERE ${noHost}`
    : `DELETE FROM \`${table}\` WHERE NOT EXISTS (SELECT 1 FROM \`services\` v WHERE ` +
      `v.\`uuid\` = \`${table}\`.\`service_description\` AND v.\`disabled\` = 0) OR ${noHost}`;
}

/**
 * The DELETE of this node's rows of `table` left stale by a restart (values: the node name, then
 * the cutoff in epoch seconds); the walk adds `AND` the key range of its chunk. A status row not
 * refreshed since the cutoff; a host row goes only once no service row of that host is left (the
 * UI joins services on their host's status). A scheduled downtime (alias `s`) not announced at or
 * after the cutoff: no announcement at all (written before the worker kept them, or pruned), or an
 * older one.
 */
function staleRowsDelete(table: SweptTable): string {
  if (isStatusTable(table)) {
    return `DELETE FROM \`${table}\` WHERE \`node_name\` = ? AND \`status_update_time\` < ?` +
      (table === "statusengine_servicestatus" ? "" : " AND NOT EXISTS (SELECT 1 FROM " +
        "`statusengine_servicestatus` s WHERE " +
        "s.`node_name` = `statusengine_hoststatus`.`node_name` " +
        "AND s.`hostname` = `statusengine_hoststatus`.`hostname`)");
  }
  // The announcement of a host downtime has '' for its service.
  const service = table === "statusengine_host_scheduleddowntimes"
    ? "''"
    : "s.`service_description`";
  return `DELETE s FROM ${quoteIdentifier(table)} s LEFT JOIN ` +
    `${quoteIdentifier(ANNOUNCEMENTS)} a ON a.\`hostname\` = s.\`hostname\` ` +
    `AND a.\`service_description\` = ${service} AND a.\`node_name\` = s.\`node_name\` ` +
    "AND a.`scheduled_start_time` = s.`scheduled_start_time` " +
    "AND a.`internal_downtime_id` = s.`internal_downtime_id` " +
    "WHERE s.`node_name` = ? AND (a.`announced_at` IS NULL OR a.`announced_at` < ?)";
}
