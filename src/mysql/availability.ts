/**
 * Tracks whether MySQL can take writes, for `statusengine_db_available` and
 * the outage log lines (W5): one WARN when a writer starts holding a batch,
 * then at most one "still" line per writer every 10 s, and one INFO with the
 * outage duration when a statement succeeds again. A statement that ran
 * into `--mysql-statement-timeout` adds one WARN per outage naming the
 * setting, however many statements time out.
 *
 * @module
 */
import type { Gauge } from "prom-client";
import { StatementTimeoutError } from "./errors.ts";
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
  #timeoutWarned = false;

  /** @param gauge `statusengine_db_available` (optional in tests). */
  constructor(gauge?: Gauge) {
    this.#gauge = gauge;
  }

  /** False while any writer is holding rows because MySQL cannot take them. */
  get available(): boolean {
    return this.#outages.size === 0;
  }

  /**
   * A statement for `table` failed because MySQL cannot take writes now
   * (unreachable, read-only, full, privileges, timeout, …).
   *
   * @param table Who is holding rows.
   * @param err The error.
   */
  unreachable(table: string, err: unknown): void {
    const now = performance.now();
    if (err instanceof StatementTimeoutError && !this.#timeoutWarned) {
      this.#timeoutWarned = true;
      log.warn(
        "db: a statement got no answer within --mysql-statement-timeout; MySQL is treated as " +
          "unavailable until a statement succeeds",
        { table, timeout_s: err.timeoutMs / 1000 },
      );
    }
    const outage = this.#outages.get(table);
    if (outage === undefined) {
      this.#outages.set(table, { since: now, attempts: 1, lastLogAt: now });
      this.#gauge?.set(0);
      log.warn("db: MySQL cannot take writes, holding the batch", {
        table,
        error: errorMessage(err),
      });
      return;
    }
    outage.attempts++;
    if (now - outage.lastLogAt >= STILL_DOWN_LOG_INTERVAL_MS) {
      outage.lastLogAt = now;
      log.warn("db: MySQL still cannot take writes, pipeline is stalled", {
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
    log.info("db: MySQL takes writes again, held batch written", {
      table,
      down_for_s: Math.round((performance.now() - outage.since) / 100) / 10,
      attempts: outage.attempts,
    });
    this.#ended();
  }

  /**
   * Forget an outage without a success (a writer gave up at shutdown).
   *
   * @param table The writer.
   */
  abandon(table: string): void {
    // Nothing is held for this table any more; keep the gauge in step with
    // `available` (the next failure sets it to 0 again).
    if (this.#outages.delete(table)) this.#ended();
  }

  #ended(): void {
    if (this.#outages.size > 0) return;
    this.#gauge?.set(1);
    this.#timeoutWarned = false;
  }
}
