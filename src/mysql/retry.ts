/**
 * The MySQL hold (docs/writers.md#retry-policy, docs/retries.md): `unavailable` and `lock` errors
 * are sent again after a pause until MySQL takes them or `signal` aborts; `row` and `statement`
 * errors are thrown at once for writer.ts to judge. The only layer that retries a statement; safe
 * because every write is idempotent or accepted as duplicable.
 *
 * @module
 */
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError } from "./errors.ts";
import { Backoff, type BackoffOptions } from "../util/backoff.ts";
import { delay } from "../util/async.ts";
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("db");

/** The `kind` of `statusengine_mysql_conflicts_total` by errno; any other lock error is 1213's. */
const CONFLICT_KINDS: Readonly<Record<string, string>> = {
  1205: "lock_wait_timeout",
  1615: "reprepare",
};

/** Without jitter: at most one statement per writer is held, a few dozen in all. */
export const MYSQL_HOLD: BackoffOptions = { initialMs: 100, maxMs: 5_000, jitter: 0 };

/**
 * Where a statement is held; `signal` ends holding (shutdown, drain deadline, flush budget). The
 * object itself names the held statement to {@link DbAvailability}: one per statement.
 */
export interface HoldScope {
  readonly table: string;
  readonly availability: DbAvailability;
  readonly signal: AbortSignal;
}

export interface RetryContext extends HoldScope {
  /** The held statement this attempt continues, when its hold began elsewhere; default `this`. */
  readonly holder?: HoldScope | undefined;
  /** Whether every row's job was given back; asked before each attempt after the first. */
  readonly withdrawn?: () => boolean;
  readonly metrics?:
    | Pick<Metrics, "dbBatchRetries" | "mysqlConflicts" | "dbConnectionRetries">
    | undefined;
}

/** Wait out one pause of a held statement; on abort, the table's outage is no longer reported. */
export async function pauseHeld(hold: Backoff, scope: HoldScope): Promise<void> {
  try {
    await delay(hold.next(), { signal: scope.signal });
  } catch (abort: unknown) {
    scope.availability.abandon(scope.table, scope);
    throw abort;
  }
}

/**
 * Run `op` until it succeeds, fails permanently, or `ctx.signal` aborts.
 *
 * @throws {MysqlWriteError} With `kind` `row` or `statement` for a deterministic failure.
 * @throws {WorkerError} `statement_withdrawn` when `ctx.withdrawn` says nothing is left to write:
 * every row belongs to jobs given back (docs/retries.md#give-back).
 */
export async function runWithRetry<T>(op: () => Promise<T>, ctx: RetryContext): Promise<T> {
  let hold: Backoff | undefined;
  let lockAttempts = 0;
  const holder = ctx.holder ?? ctx;
  for (let attempt = 0;; attempt++) {
    ctx.signal.throwIfAborted();
    if (attempt > 0 && ctx.withdrawn?.() === true) {
      ctx.availability.abandon(ctx.table, holder);
      throw new WorkerError(
        "statement_withdrawn",
        `the held statement for ${ctx.table} has no rows left: their jobs were given back`,
      );
    }
    try {
      const sentAt = ctx.availability.now();
      const result = await op();
      ctx.availability.reachable(ctx.table, sentAt, holder);
      return result;
    } catch (err: unknown) {
      const failure = new MysqlWriteError(ctx.table, err);
      if (failure.kind === "row" || failure.kind === "statement") {
        // Answered, but not taken: a statement held on its own gives its hold up here, else the
        // table's outage (db_available 0) outlives it; one held elsewhere (`ctx.holder`) is
        // ended by whoever began the hold.
        if (ctx.holder === undefined) ctx.availability.abandon(ctx.table, ctx);
        throw failure;
      }
      if (failure.kind === "lock") {
        lockAttempts++;
        ctx.metrics?.dbBatchRetries.inc();
        ctx.metrics?.mysqlConflicts.inc({
          table: ctx.table,
          kind: CONFLICT_KINDS[failure.code] ?? "deadlock",
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
        // Given up meanwhile (a shutdown closing the pool under it): not an outage to report.
        if (ctx.signal.aborted) {
          ctx.availability.abandon(ctx.table, holder);
          throw ctx.signal.reason;
        }
        ctx.metrics?.dbConnectionRetries.inc();
        ctx.availability.unreachable(ctx.table, err, holder);
      }
      hold ??= new Backoff(MYSQL_HOLD);
      await pauseHeld(hold, holder);
    }
  }
}
