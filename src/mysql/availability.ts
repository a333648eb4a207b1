/**
 * Tracks whether MySQL is reachable, for `statusengine_db_available` and the
 * outage log lines (W5): one WARN when a writer starts holding a batch, then
 * at most one "still unreachable" line per writer every 10 s, and one INFO
 * with the outage duration when it is reachable again.
 *
 * @module
 */
import type { Gauge } from "prom-client";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");
const STILL_DOWN_LOG_INTERVAL_MS = 10_000;

interface Outage {
  readonly since: number;
  attempts: number;
  lastLogAt: number;
}

/** Shared by every writer and statement runner of one process. */
export class DbAvailability {
  readonly #gauge: Gauge | undefined;
  readonly #outages = new Map<string, Outage>();

  /** @param gauge `statusengine_db_available` (optional in tests). */
  constructor(gauge?: Gauge) {
    this.#gauge = gauge;
  }

  /** False while any writer is holding rows for an unreachable MySQL. */
  get available(): boolean {
    return this.#outages.size === 0;
  }

  /**
   * A statement for `table` failed because MySQL is unreachable.
   *
   * @param table Who is holding rows.
   * @param err The connection error.
   */
  unreachable(table: string, err: unknown): void {
    const now = performance.now();
    const outage = this.#outages.get(table);
    if (outage === undefined) {
      this.#outages.set(table, { since: now, attempts: 1, lastLogAt: now });
      this.#gauge?.set(0);
      log.warn("db: MySQL unreachable, holding the batch", { table, error: errorMessage(err) });
      return;
    }
    outage.attempts++;
    if (now - outage.lastLogAt >= STILL_DOWN_LOG_INTERVAL_MS) {
      outage.lastLogAt = now;
      log.warn("db: MySQL still unreachable, pipeline is stalled", {
        table,
        down_for_s: Math.round((now - outage.since) / 1000),
        attempts: outage.attempts,
        error: errorMessage(err),
      });
    }
  }

  /**
   * A statement for `table` succeeded.
   *
   * @param table Who wrote.
   */
  reachable(table: string): void {
    const outage = this.#outages.get(table);
    if (outage === undefined) return;
    this.#outages.delete(table);
    log.info("db: MySQL reachable again, held batch written", {
      table,
      down_for_s: Math.round((performance.now() - outage.since) / 100) / 10,
      attempts: outage.attempts,
    });
    if (this.#outages.size === 0) this.#gauge?.set(1);
  }

  /**
   * Forget an outage without a success (a writer gave up at shutdown).
   *
   * @param table The writer.
   */
  abandon(table: string): void {
    // Nothing is held for this table any more; keep the gauge in step with
    // `available` (the next failure sets it to 0 again).
    if (this.#outages.delete(table) && this.#outages.size === 0) this.#gauge?.set(1);
  }
}
