/**
 * The MySQL hold: how a statement waits while MySQL cannot take it.
 *
 * - `unavailable` errors (connection lost or refused, read-only, disk full,
 *   privileges, statement timeout, a Galera node not ready, …) and `lock` errors
 *   (deadlock 1213, lock wait timeout 1205): the statement is sent again after a
 *   pause of {@link MYSQL_HOLD}, until MySQL takes it or `signal` aborts
 *   (shutdown, drain deadline). A transient failure never fails a job;
 *   `db_available` is 0 meanwhile (for an outage, not for a lock conflict);
 * - the first lock conflict of a statement is sent again at once, without the
 *   pause: on Galera a 1213 is mostly a certification failure (another node
 *   committed the same rows first, also reported at the commit of an autocommit
 *   statement), which a second attempt, reading the winner's rows, passes. Only a
 *   conflict that comes back waits, so two writers that keep colliding back off;
 * - `row` and `statement` errors: thrown as a {@link MysqlWriteError} at once;
 *   the caller decides whether the rows are at fault (writer.ts).
 *
 * This is the only layer that retries a statement: the job above it is not
 * failed while its statement is held, so the delivery engine does not retry
 * it as well. Safe only because every write is idempotent or accepted as
 * duplicable. docs/retries.md puts it next to the other layers.
 *
 * @module
 */
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError } from "./errors.ts";
import { Backoff, type BackoffOptions } from "../util/backoff.ts";
import { delay } from "../util/async.ts";
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

/**
 * Pauses of a held statement: 100 ms doubling to 5 s. Without jitter: at most
 * one statement per writer is held, a few dozen in all, not one per job.
 */
export const MYSQL_HOLD: BackoffOptions = { initialMs: 100, maxMs: 5_000, jitter: 0 };

/** Where a statement is held: its table, the availability tracker and what ends the hold. */
export interface HoldScope {
  readonly table: string;
  readonly availability: DbAvailability;
  /** Ends holding (shutdown, drain deadline, flush budget). */
  readonly signal: AbortSignal;
}

/**
 * Every row of a held statement belongs to jobs given back to the broker (docs/retries.md#give-back):
 * there is nothing left to write, and the hold ends without a commit.
 */
export class StatementWithdrawnError extends Error {
  /** @param table The table whose statement was held. */
  constructor(table: string) {
    super(`the held statement for ${table} has no rows left: their jobs were given back`);
    this.name = "StatementWithdrawnError";
  }
}

/** Collaborators of {@link runWithRetry}. */
export interface RetryContext extends HoldScope {
  /**
   * Whether nothing is left to write (every row's job was given back); asked before each attempt
   * after the first. Absent: never.
   */
  readonly withdrawn?: () => boolean;
  /** Counts the retries by cause, and the conflicts by table and kind; none without. */
  readonly metrics?:
    | Pick<Metrics, "dbBatchRetries" | "mysqlConflicts" | "dbConnectionRetries">
    | undefined;
}

/**
 * Wait out one pause of a held statement.
 *
 * @param hold The statement's schedule (one {@link Backoff} of {@link MYSQL_HOLD} per hold).
 * @param scope Table, availability tracker and abort signal.
 * @throws The signal's reason when it aborts; the table's outage is then no longer reported.
 */
export async function pauseHeld(hold: Backoff, scope: HoldScope): Promise<void> {
  try {
    await delay(hold.next(), { signal: scope.signal });
  } catch (abort: unknown) {
    scope.availability.abandon(scope.table);
    throw abort;
  }
}

/**
 * Run `op` until it succeeds, fails permanently, or `ctx.signal` aborts.
 *
 * @param op The statement.
 * @param ctx Table, availability tracker, abort signal and retry counters.
 * @returns The statement's result.
 * @throws {MysqlWriteError} With `kind` `row` or `statement` for a deterministic failure.
 * @throws The signal's reason when aborted while holding.
 * @throws {StatementWithdrawnError} When `ctx.withdrawn` says nothing is left to write.
 */
export async function runWithRetry<T>(op: () => Promise<T>, ctx: RetryContext): Promise<T> {
  let hold: Backoff | undefined;
  let lockAttempts = 0;
  for (let attempt = 0;; attempt++) {
    ctx.signal.throwIfAborted();
    if (attempt > 0 && ctx.withdrawn?.() === true) {
      // The table no longer holds anything: its outage is not reported any more.
      ctx.availability.abandon(ctx.table);
      throw new StatementWithdrawnError(ctx.table);
    }
    try {
      const result = await op();
      ctx.availability.reachable(ctx.table);
      return result;
    } catch (err: unknown) {
      const failure = new MysqlWriteError(ctx.table, err);
      if (failure.kind === "row" || failure.kind === "statement") throw failure;
      if (failure.kind === "lock") {
        lockAttempts++;
        ctx.metrics?.dbBatchRetries.inc();
        ctx.metrics?.mysqlConflicts.inc({
          table: ctx.table,
          kind: failure.code === "1205" ? "lock_wait_timeout" : "deadlock",
        });
        // The first conflict is expected on a cluster and passes on the next attempt: the
        // counter shows it, a warning would only be noise. One that comes back is worth one.
        if (lockAttempts === 1) continue;
        log.warn("db: lock conflict again, retrying the statement after a pause", {
          table: ctx.table,
          attempt: lockAttempts,
          error: errorMessage(err),
        });
      } else {
        ctx.metrics?.dbConnectionRetries.inc();
        ctx.availability.unreachable(ctx.table, err);
      }
      hold ??= new Backoff(MYSQL_HOLD);
      await pauseHeld(hold, ctx);
    }
  }
}
