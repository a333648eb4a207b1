/**
 * Runs one statement under the W5 / D7 retry policy:
 *
 * - lock errors (1213, 1205): three attempts 50 ms and 200 ms apart, then
 *   held with the capped back-off like a lost connection (D7: transient
 *   failures never fail a job);
 * - `unavailable` errors (connection lost, read-only, full, privileges,
 *   statement timeout, …): held, retried 100 ms doubling to 5 s, until MySQL
 *   takes the statement or `signal` aborts (shutdown); `db_available` is 0
 *   meanwhile;
 * - `row` and `statement` errors: thrown as a {@link MysqlWriteError} at once;
 *   the caller decides whether the rows are at fault (writer.ts).
 *
 * Safe only because every write is idempotent or accepted as duplicable (W4).
 *
 * @module
 */
import type { Counter } from "prom-client";
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError } from "./errors.ts";
import { delay } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

/** Back-offs of the first lock retries (W5). */
const LOCK_BACKOFF_MS = [50, 200] as const;
/** First pause while holding a statement for MySQL; doubles up to {@link HOLD_MAX_MS}. */
export const HOLD_INITIAL_MS = 100;
/** Longest pause while holding. */
export const HOLD_MAX_MS = 5_000;

/** Collaborators of {@link runWithRetry}. */
export interface RetryContext {
  readonly table: string;
  readonly availability: DbAvailability;
  /** Ends holding (shutdown, flush budget). */
  readonly signal: AbortSignal;
  readonly lockRetries?: Counter;
  readonly connectionRetries?: Counter;
}

/**
 * Run `op` until it succeeds, fails permanently, or `ctx.signal` aborts.
 *
 * @param op The statement.
 * @param ctx Table, availability tracker, abort signal and retry counters.
 * @returns The statement's result.
 * @throws {MysqlWriteError} With `kind` `row` or `statement` for a deterministic failure.
 * @throws The signal's reason when aborted while holding.
 */
export async function runWithRetry<T>(op: () => Promise<T>, ctx: RetryContext): Promise<T> {
  let lockAttempts = 0;
  let holdMs = HOLD_INITIAL_MS;
  for (;;) {
    ctx.signal.throwIfAborted();
    try {
      const result = await op();
      ctx.availability.reachable(ctx.table);
      return result;
    } catch (err: unknown) {
      const failure = new MysqlWriteError(ctx.table, err);
      if (failure.kind === "row" || failure.kind === "statement") throw failure;
      if (failure.kind === "lock") {
        lockAttempts++;
        ctx.lockRetries?.inc();
        const backoff = LOCK_BACKOFF_MS[lockAttempts - 1];
        log.warn("db: lock conflict, retrying the statement", {
          table: ctx.table,
          attempt: lockAttempts,
          error: errorMessage(err),
        });
        if (backoff !== undefined) {
          await delay(backoff, { signal: ctx.signal });
          continue;
        }
      } else {
        ctx.connectionRetries?.inc();
        ctx.availability.unreachable(ctx.table, err);
      }
      try {
        await delay(holdMs, { signal: ctx.signal });
      } catch (abort: unknown) {
        ctx.availability.abandon(ctx.table);
        throw abort;
      }
      holdMs = Math.min(holdMs * 2, HOLD_MAX_MS);
    }
  }
}
