/**
 * What the status writers of this process have committed: per status table and node, the newest
 * `status_update_time` of a committed row, which the core-restart sweep waits on instead of
 * scanning the tables (docs/core-restart.md). The times are the rows' own, so "newest ≥ cutoff"
 * is what the tables would answer. Several writers of a table report here; keeping the maximum
 * needs no order and, on one event loop, no lock.
 *
 * @module
 */
import type { Row } from "../events/mod.ts";

/** The two tables a core restart cleans, in the order they are swept (services first). */
export const STATUS_TABLES = ["statusengine_servicestatus", "statusengine_hoststatus"] as const;

export type StatusTable = (typeof STATUS_TABLES)[number];

/** Whether `table` is one of the {@link STATUS_TABLES}. */
export function isStatusTable(table: string): table is StatusTable {
  return (STATUS_TABLES as readonly string[]).includes(table);
}

/** What the sweep asks: the newest status time committed for a node, if any. */
export interface CommittedStatus {
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
    }
  }

  newest(table: StatusTable, nodeName: string): number | undefined {
    return this.#newest[table].get(nodeName);
  }
}
