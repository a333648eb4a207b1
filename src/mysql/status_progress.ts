/**
 * What the status writers of this process have committed: per status table and node, the
 * newest `status_update_time` of a committed row (docs/core-restart.md).
 *
 * The sweep after a core restart waits until both status tables show status the core
 * re-published after the restart. Reading that from the tables means a scan per look, since
 * `node_name` has no index; the writers already know what they committed, so they tell this
 * record after each commit, and the sweep asks it instead.
 *
 * The times are the rows' own `status_update_time`, taken from the payload (D5) exactly as
 * the writer sent them, so "newest ≥ cutoff" is the comparison the tables would answer; the
 * worker's clock plays no part here. Several writers of one table (`--mysql-writers-per-table`)
 * report into the same record: keeping the maximum does not depend on the order of their
 * reports, and every report runs to its end before another starts (one event loop), so no lock
 * is needed. Only commits of this process are seen: rows another worker process committed are
 * not (the sweep's occasional look at the tables covers them).
 *
 * @module
 */
import type { Row } from "../events/mod.ts";

/** The two tables a core restart cleans, in the order they are swept (services first). */
export const STATUS_TABLES = ["statusengine_servicestatus", "statusengine_hoststatus"] as const;

/** One of {@link STATUS_TABLES}. */
export type StatusTable = (typeof STATUS_TABLES)[number];

/** Whether `table` is one of the {@link STATUS_TABLES}. */
export function isStatusTable(table: string): table is StatusTable {
  return (STATUS_TABLES as readonly string[]).includes(table);
}

/** What the sweep asks: the newest status time committed for a node. */
export interface CommittedStatus {
  /**
   * @param table A status table.
   * @param nodeName The node whose rows count.
   * @returns The newest `status_update_time` of a row of `nodeName` this process committed
   *   to `table`, or undefined when it committed none.
   */
  newest(table: StatusTable, nodeName: string): number | undefined;
}

/** The newest committed status time per status table and node, fed by the writers. */
export class StatusProgress implements CommittedStatus {
  readonly #newest: Record<StatusTable, Map<string, number>> = {
    statusengine_servicestatus: new Map(),
    statusengine_hoststatus: new Map(),
  };

  /**
   * Record rows the writer of `table` has committed. Call only once MySQL returned the
   * statement that wrote them: rows still buffered, in flight, or dead-lettered were not
   * written and must not count.
   *
   * @param table The status table written.
   * @param rows The committed rows (`node_name`, `status_update_time`; other columns ignored).
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
    }
  }

  /** @inheritdoc */
  newest(table: StatusTable, nodeName: string): number | undefined {
    return this.#newest[table].get(nodeName);
  }
}
