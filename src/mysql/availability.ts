/**
 * Whether MySQL can take writes: `statusengine_db_available` and the outage log lines
 * (docs/logging.md#mysql-outage): a blip stays a warning, a minute without a commit is an ERROR.
 *
 * @module
 */
import { StatementTimeoutError } from "./errors.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";

const log = getLogger("db");
const STILL_DOWN_LOG_INTERVAL_MS = 10_000;
/** A restart or failover of MySQL takes seconds; a minute without a commit is a stall. */
const STALL_ERROR_AFTER_MS = 60_000;
const STALL_SUMMARY_INTERVAL_MS = 60_000;
/** A probe runs when no statement succeeded for this long. */
const IDLE_PROBE_INTERVAL_MS = 5_000;
const IDLE_PROBE_TIMEOUT_MS = 2_000;
/** ... or this many usual statements, when MySQL is slower, up to the statement timeout's default. */
const PROBE_TIMEOUT_STATEMENTS = 4;
const PROBE_TIMEOUT_MAX_MS = 30_000;

interface Outage {
  readonly since: number;
  /** When the latest failure was handled: only a statement sent after it ends the outage. */
  failedAt: number;
  /** The held statements, each known by its retry scope; with the last one the outage ends. */
  readonly holders: Set<object>;
  attempts: number;
  lastLogAt: number;
}

/** Writes held by at least one writer, from the first writer's outage to the last one's end. */
interface Stall {
  readonly since: number;
  /** When the last error line about it was logged; undefined while younger than a minute. */
  errorAt: number | undefined;
  lastError: string;
}

interface DbAvailabilityOptions {
  /** The MySQL URL as logs show it (password masked). */
  readonly mysql?: string | undefined;
  /** Jobs not yet acknowledged and rows the writers hold, for the stall's error lines. */
  readonly held?: () => { readonly jobs: number; readonly rows: number };
  /** Monotonic clock in milliseconds; default `performance.now` (tests pass a fake one). */
  readonly now?: () => number;
}

/** Shared by every writer and statement runner of one process. */
export class DbAvailability {
  readonly #gauge: Metrics["dbAvailable"] | undefined;
  /** The tables whose writers hold rows because MySQL cannot take them. */
  readonly #outages = new Map<string, Outage>();
  /** While the idle probe fails: since when, and its latest failure. It holds no rows. */
  #probeDown: { readonly since: number; failedAt: number } | undefined;
  readonly #options: DbAvailabilityOptions;
  /** This tracker's clock, read before a statement is sent (see {@link reachable}). */
  readonly now: () => number;
  #stall: Stall | undefined;
  #timeoutWarned = false;
  #lastSuccessAt: number;
  /** How long a statement that went through usually took, ms (moving average). */
  #statementMs = 0;

  constructor(gauge?: Metrics["dbAvailable"], options: DbAvailabilityOptions = {}) {
    this.#gauge = gauge;
    this.#options = options;
    this.now = options.now ?? (() => performance.now());
    this.#lastSuccessAt = this.now();
  }

  /** False while any writer is holding rows because MySQL cannot take them. */
  get available(): boolean {
    return this.#outages.size === 0 && this.#probeDown === undefined;
  }

  /** A statement for `table`, held by `holder` from now on, failed: MySQL cannot take writes now. */
  unreachable(table: string, err: unknown, holder: object): void {
    const now = this.now();
    const error = errorMessage(err);
    if (err instanceof StatementTimeoutError && !this.#timeoutWarned) {
      this.#timeoutWarned = true;
      log.warn(
        "db: a statement got no answer within --mysql-statement-timeout; MySQL is treated as " +
          "unavailable until a statement succeeds",
        { table, timeout_s: err.timeoutMs / 1000 },
      );
    }
    const outage = this.#outages.get(table);
    this.#stall ??= { since: now, errorAt: undefined, lastError: "" };
    this.#stall.lastError = error;
    if (outage === undefined) {
      const holders = new Set([holder]);
      this.#outages.set(table, { since: now, failedAt: now, holders, attempts: 1, lastLogAt: now });
      this.#gauge?.set(0);
      log.warn("db: MySQL cannot take writes, holding the batch", { table, error });
    } else {
      outage.attempts++;
      outage.failedAt = now;
      outage.holders.add(holder);
    }
    this.#escalate(now);
    if (outage === undefined || now - outage.lastLogAt < STILL_DOWN_LOG_INTERVAL_MS) return;
    outage.lastLogAt = now;
    log.warn("db: MySQL still cannot take writes, pipeline is stalled", {
      table,
      down_for_s: Math.round((now - outage.since) / 1000),
      attempts: outage.attempts,
      error,
    });
  }

  /**
   * A statement for `table` of `holder`, sent at `sentAt` ({@link now}), went through. It ends the
   * outage (and the idle probe's) if sent after the outage's latest failure was handled: one of the
   * table's other writer, committed just before MySQL stopped taking writes, may answer after the
   * failure. It also ends it when it was the last one held: none is left to notice MySQL is back.
   */
  reachable(table: string, sentAt: number, holder: object): void {
    const now = this.now();
    this.#lastSuccessAt = now;
    this.#statementMs = this.#statementMs * 0.8 + (now - sentAt) * 0.2;
    if (this.#probeDown !== undefined && sentAt >= this.#probeDown.failedAt) this.probed(undefined);
    const outage = this.#outages.get(table);
    if (outage === undefined) return;
    outage.holders.delete(holder);
    if (sentAt < outage.failedAt && outage.holders.size > 0) return;
    this.#outages.delete(table);
    log.info("db: MySQL takes writes again, held batch written", {
      table,
      down_for_s: Math.round((now - outage.since) / 100) / 10,
      attempts: outage.attempts,
    });
    const stall = this.#stall;
    if (stall?.errorAt !== undefined && this.#outages.size === 0) {
      // The end of what was logged as an error, so `journalctl -p warning` shows both ends.
      log.warn("db: MySQL takes writes again, the write stall is over", {
        mysql: this.#options.mysql,
        since: this.#wallTime(stall.since, now),
        down_for_s: Math.round((now - stall.since) / 1000),
      });
    }
    this.#ended();
  }

  /**
   * `holder` gave its statement up without a success (shutdown, or its jobs were given back). The
   * outage is forgotten once no statement of the table is held; the gauge follows `available`.
   */
  abandon(table: string, holder: object): void {
    const outage = this.#outages.get(table);
    if (outage === undefined || !outage.holders.delete(holder) || outage.holders.size > 0) return;
    this.#outages.delete(table);
    this.#ended();
  }

  /**
   * How long writers have been holding rows (since the first of them started, while any still
   * holds); 0 while none does. Drives `--mysql-give-back-after` (docs/retries.md#give-back).
   */
  get holdingForMs(): number {
    const stall = this.#stall;
    return stall === undefined || this.#outages.size === 0 ? 0 : this.now() - stall.since;
  }

  /** Whether a statement or the idle probe succeeded after `at` (this tracker's clock). */
  answeredSince(at: number): boolean {
    return this.#lastSuccessAt > at;
  }

  /**
   * How long the idle probe may take: a MySQL whose statements commit slowly is slow, not gone, and
   * its probe (a connect and a query, several round trips) takes longer than one statement.
   */
  get probeTimeoutMs(): number {
    const usual = Math.min(PROBE_TIMEOUT_MAX_MS, PROBE_TIMEOUT_STATEMENTS * this.#statementMs);
    return Math.max(IDLE_PROBE_TIMEOUT_MS, usual);
  }

  /** Milliseconds since a statement last succeeded (or since this tracker exists). */
  get msSinceSuccess(): number {
    return this.now() - this.#lastSuccessAt;
  }

  /** The idle probe's result (`err` undefined: answered); a failure is an outage of its own. */
  probed(err: unknown): void {
    const now = this.now();
    if (err === undefined) {
      this.#lastSuccessAt = now;
      const down = this.#probeDown;
      if (down === undefined) return;
      this.#probeDown = undefined;
      log.info("db: MySQL answers the idle probe again", {
        down_for_s: Math.round((now - down.since) / 100) / 10,
      });
      this.#ended();
      return;
    }
    // The writers retry with back-off; the probe's ticks keep the stall's summaries on time.
    this.#escalate(now);
    if (this.#probeDown !== undefined) {
      this.#probeDown.failedAt = now;
      return;
    }
    this.#probeDown = { since: now, failedAt: now };
    this.#gauge?.set(0);
    log.warn("db: MySQL does not answer the idle probe; treated as unavailable", {
      error: errorMessage(err),
    });
  }

  #ended(): void {
    if (this.#outages.size === 0) this.#stall = undefined;
    if (!this.available) return;
    this.#gauge?.set(1);
    this.#timeoutWarned = false;
  }

  #escalate(now: number): void {
    const stall = this.#stall;
    if (stall === undefined || now - stall.since < STALL_ERROR_AFTER_MS) return;
    const first = stall.errorAt === undefined;
    if (!first && now - (stall.errorAt ?? now) < STALL_SUMMARY_INTERVAL_MS) return;
    stall.errorAt = now;
    const held = this.#options.held?.();
    log.error(
      first
        ? "db: MySQL has not taken writes for a minute, writes are stalled"
        : "db: MySQL still cannot take writes, writes are stalled",
      {
        mysql: this.#options.mysql,
        since: this.#wallTime(stall.since, now),
        down_for_s: Math.round((now - stall.since) / 1000),
        tables: this.#outages.size,
        ...(held === undefined ? {} : { jobs_held: held.jobs, rows_held: held.rows }),
        error: stall.lastError,
      },
    );
  }

  #wallTime(at: number, now: number): string {
    return new Date(Date.now() - (now - at)).toISOString();
  }
}

/**
 * Keeps `statusengine_db_available` and `/readyz` truthful while nothing is written: an idle
 * worker has no statement to find an outage with (docs/writers.md#idle-probe).
 */
export class IdleProbe {
  readonly #availability: DbAvailability;
  /** A bounded round trip on a connection of its own: the pool's may all be busy. */
  readonly #ping: (timeoutMs: number) => Promise<void>;
  #timer: ReturnType<typeof setInterval> | undefined;
  #running: Promise<void> | undefined;

  constructor(availability: DbAvailability, ping: (timeoutMs: number) => Promise<void>) {
    this.#availability = availability;
    this.#ping = ping;
  }

  start(): void {
    this.#timer = setInterval(() => {
      if (this.#running !== undefined) return;
      const availability = this.#availability;
      if (availability.msSinceSuccess < IDLE_PROBE_INTERVAL_MS) return;
      this.#running = this.#ping(availability.probeTimeoutMs)
        .then(() => availability.probed(undefined), (err: unknown) => {
          availability.probed(err ?? new Error("failed"));
        })
        .finally(() => (this.#running = undefined));
    }, IDLE_PROBE_INTERVAL_MS / 2);
  }

  /** Stop probing; waits for a probe in flight (bounded by its timeout). */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}
