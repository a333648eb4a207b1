/**
 * The status cleanup of a monitoring-core restart (D4, P7): the core forgets objects on a
 * restart and announces the rest again, so status rows not refreshed since the restart
 * belong to objects that no longer exist. The status writers first commit what they hold
 * and stay quiet while their table is cleaned, so the cleanup neither deletes rows that were
 * only waiting in a buffer nor races a statement in flight.
 *
 * @module
 */
import type { SqlExecutor } from "./executor.ts";
import { quoteIdentifier } from "./ddl.ts";
import type { BuiltStatement } from "./downtime.ts";
import type { DbAvailability } from "./availability.ts";
import { runWithRetry } from "./retry.ts";
import type { Metrics } from "../metrics/registry.ts";
import { getLogger } from "../log.ts";

const log = getLogger("pipeline");

/** The two tables a core restart cleans. */
export const STATUS_TABLES = ["statusengine_hoststatus", "statusengine_servicestatus"] as const;

/** One of {@link STATUS_TABLES}. */
export type StatusTable = (typeof STATUS_TABLES)[number];

/** What the cleaner needs of a status table's writer. */
export interface PausableWriter {
  /** Commit what is buffered, hold the table while `fn` runs, then resume. */
  withPaused<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T>;
}

/** Options of {@link StatusCleaner}. */
export interface StatusCleanerOptions {
  readonly executor: SqlExecutor;
  readonly availability: DbAvailability;
  readonly nodeName: string;
  /** openITCOCKPIT mode: delete rows whose object is missing or disabled there (D.1). */
  readonly openItcockpit: boolean;
  /** The writers of the two status tables. */
  readonly writers: Readonly<Record<StatusTable, PausableWriter>>;
  readonly metrics?: Metrics;
}

/** Deletes the status rows a core restart left stale. */
export class StatusCleaner {
  readonly #o: StatusCleanerOptions;

  /** @param options Executor, availability, node, mode and the status writers. */
  constructor(options: StatusCleanerOptions) {
    this.#o = options;
  }

  /**
   * The cutoff of a restart message without a timestamp: the time the job was received, but
   * never later than the newest status of this node written so far. A message handled late
   * (worker started after the restart, backlog) is received after status events the core
   * sent after the restart; those may be committed by the flush of {@link clean}, and the
   * receive time alone would delete them. Read before that flush, the newest written status
   * is at most the newest one from before the restart or one that was already committed.
   *
   * @param receivedAtMs When the job was received, epoch milliseconds.
   * @param signal Ends holding while MySQL is unavailable (shutdown).
   * @returns The cutoff in epoch seconds.
   */
  async cutoffFromReceiveTime(receivedAtMs: number, signal: AbortSignal): Promise<number> {
    const o = this.#o;
    const result = await runWithRetry(
      () =>
        o.executor.run(
          "SELECT GREATEST(" +
            "COALESCE((SELECT MAX(`status_update_time`) FROM `statusengine_hoststatus` " +
            "WHERE `node_name` = ?), 0), " +
            "COALESCE((SELECT MAX(`status_update_time`) FROM `statusengine_servicestatus` " +
            "WHERE `node_name` = ?), 0)) AS `newest`",
          [o.nodeName, o.nodeName],
        ),
      this.#retry("statusengine_hoststatus", signal),
    );
    const newest = Number(result.rows[0]?.["newest"] ?? 0);
    return Math.min(Math.floor(receivedAtMs / 1000), newest);
  }

  /**
   * Delete the stale rows of both status tables, each while its writer is paused.
   *
   * @param cutoff Epoch seconds of the restart (ignored in openITCOCKPIT mode).
   * @param signal Ends holding while MySQL is unavailable (shutdown).
   */
  async clean(cutoff: number, signal: AbortSignal): Promise<void> {
    const o = this.#o;
    log.info("pipeline: monitoring core restarted, deleting stale status rows", {
      ...(o.openItcockpit ? {} : { cutoff }),
      node_name: o.nodeName,
      mode: o.openItcockpit ? "openitcockpit" : "cutoff",
    });
    for (const table of STATUS_TABLES) {
      const statement = coreRestartStatement(table, cutoff, o);
      const result = await o.writers[table].withPaused(
        () =>
          runWithRetry(
            () => o.executor.run(statement.sql, statement.values),
            this.#retry(table, signal),
          ),
        signal,
      );
      log.info("pipeline: stale status rows deleted", { table, rows: result.affectedRows });
    }
  }

  #retry(table: string, signal: AbortSignal) {
    const m = this.#o.metrics;
    return {
      table,
      availability: this.#o.availability,
      signal,
      ...(m === undefined
        ? {}
        : { lockRetries: m.dbBatchRetries, connectionRetries: m.dbConnectionRetries }),
    };
  }
}

/**
 * The cleanup statement of one status table on a core restart (D4, D.1).
 *
 * @param table `statusengine_hoststatus` or `statusengine_servicestatus`.
 * @param cutoff Epoch seconds; rows updated before it are stale.
 * @param options Node name and mode.
 * @returns The statement.
 */
export function coreRestartStatement(
  table: StatusTable,
  cutoff: number,
  options: Pick<StatusCleanerOptions, "nodeName" | "openItcockpit">,
): BuiltStatement {
  if (options.openItcockpit) {
    // NOT EXISTS rather than NOT IN: a NULL uuid in hosts/services would make
    // NOT IN match nothing and silently keep every row.
    return table === "statusengine_hoststatus"
      ? {
        sql: "DELETE s FROM `statusengine_hoststatus` s WHERE NOT EXISTS " +
          "(SELECT 1 FROM `hosts` h WHERE h.`uuid` = s.`hostname` AND h.`disabled` = 0)",
        values: [],
      }
      : {
        sql: "DELETE s FROM `statusengine_servicestatus` s WHERE NOT EXISTS " +
          "(SELECT 1 FROM `services` v WHERE v.`uuid` = s.`service_description` AND v.`disabled` = 0)",
        values: [],
      };
  }
  // D4: only this node's rows, and only those older than the restart.
  return {
    sql: `DELETE FROM ${
      quoteIdentifier(table)
    } WHERE \`node_name\` = ? AND \`status_update_time\` < ?`,
    values: [options.nodeName, cutoff],
  };
}
