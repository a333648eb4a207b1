/**
 * Tracks whether MySQL can take writes, for `statusengine_db_available` and the outage log lines
 * (docs/writers.md#retry-policy, docs/logging.md#mysql-outage): one WARN when a writer starts
 * holding a batch, then at most one "still" line per writer every 10 s, and one INFO with the
 * outage duration when a statement succeeds again. Once writes have been held for a minute the
 * stall is an ERROR (where, since when, how much is held), repeated as a summary every minute while
 * it lasts, and its end is a WARN with the stall's duration: `journalctl -p err` shows a stall, a
 * blip of a few seconds stays a warning. A statement that ran into `--mysql-statement-timeout`
 * adds one WARN per outage naming the setting, however many statements time out.
 *
 * @module
 */
import { StatementTimeoutError } from "./errors.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";

const log = getLogger("db");
const STILL_DOWN_LOG_INTERVAL_MS = 10_000;
/**
 * Writes held this long are a stall, logged as an error: a restart or failover of MySQL takes
 * seconds and stays a warning; a minute without a commit is something an operator must see.
 */
const STALL_ERROR_AFTER_MS = 60_000;
/** Interval of the error summaries while a stall lasts. */
const STALL_SUMMARY_INTERVAL_MS = 60_000;

interface Outage {
  readonly since: number;
  attempts: number;
  lastLogAt: number;
}

/** Writes held by at least one writer, from the first writer's outage to the last one's end. */
interface Stall {
  readonly since: number;
  /** When the last error line about it was logged; undefined while it is younger than a minute. */
  errorAt: number | undefined;
  lastError: string;
}

/** What the stall's error lines report as held. */
interface HeldWork {
  /** Jobs handed to the pipeline and not yet acknowledged. */
  readonly jobs: number;
  /** Rows the writers hold. */
  readonly rows: number;
}

/** Options of {@link DbAvailability}. */
interface DbAvailabilityOptions {
  /** The MySQL URL as logs show it (password masked). */
  readonly mysql?: string;
  /** What is held, for the stall's error lines. */
  readonly held?: () => HeldWork;
  /** Monotonic clock in milliseconds; default `performance.now` (tests pass a fake one). */
  readonly now?: () => number;
}

/** The outage key of the idle probe ({@link DbAvailability.probed}); no table is called so. */
const PROBE = "(idle probe)";

/** Shared by every writer and statement runner of one process. */
export class DbAvailability {
  readonly #gauge: Metrics["dbAvailable"] | undefined;
  readonly #outages = new Map<string, Outage>();
  readonly #options: DbAvailabilityOptions;
  readonly #now: () => number;
  #stall: Stall | undefined;
  #timeoutWarned = false;
  #lastSuccessAt: number;

  /**
   * @param gauge `statusengine_db_available` (optional in tests).
   * @param options Where MySQL is and what is held, for the stall's error lines; the clock.
   */
  constructor(gauge?: Metrics["dbAvailable"], options: DbAvailabilityOptions = {}) {
    this.#gauge = gauge;
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#lastSuccessAt = this.#now();
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
    const now = this.#now();
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
    this.#stall.lastError = errorMessage(err);
    if (outage === undefined) {
      this.#outages.set(table, { since: now, attempts: 1, lastLogAt: now });
      this.#gauge?.set(0);
      log.warn("db: MySQL cannot take writes, holding the batch", {
        table,
        error: errorMessage(err),
      });
      this.#escalate(now);
      return;
    }
    outage.attempts++;
    this.#escalate(now);
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
    const now = this.#now();
    this.#lastSuccessAt = now;
    // A statement went through: whatever the idle probe last saw is over too.
    if (this.#outages.has(PROBE)) this.probed(undefined);
    const outage = this.#outages.get(table);
    if (outage === undefined) return;
    this.#outages.delete(table);
    log.info("db: MySQL takes writes again, held batch written", {
      table,
      down_for_s: Math.round((now - outage.since) / 100) / 10,
      attempts: outage.attempts,
    });
    const stall = this.#stall;
    if (stall?.errorAt !== undefined && !this.#holding()) {
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
   * Forget an outage without a success (a writer gave up at shutdown).
   *
   * @param table The writer.
   */
  abandon(table: string): void {
    // Nothing is held for this table any more; keep the gauge in step with
    // `available` (the next failure sets it to 0 again).
    if (this.#outages.delete(table)) this.#ended();
  }

  /**
   * How long writers have been holding rows because MySQL cannot take them (since the first of
   * them started, while any still holds); 0 while none does. Drives the give-back of held jobs
   * (`--mysql-give-back-after`, docs/retries.md#give-back).
   */
  get holdingForMs(): number {
    const stall = this.#stall;
    return stall === undefined || !this.#holding() ? 0 : this.#now() - stall.since;
  }

  /**
   * Whether MySQL answered (a statement or the idle probe succeeded) after `at`.
   *
   * @param at A time of this tracker's clock (`performance.now()` unless a test passes one).
   * @returns True once an answer came after it.
   */
  answeredSince(at: number): boolean {
    return this.#lastSuccessAt > at;
  }

  /** Milliseconds since a statement last succeeded (or since this tracker exists). */
  get msSinceSuccess(): number {
    return this.#now() - this.#lastSuccessAt;
  }

  /**
   * The result of the idle probe ({@link IdleProbe}): a failure counts as an outage of its
   * own, logged once, until a probe or any statement succeeds again.
   *
   * @param err Undefined when MySQL answered, else why it did not.
   */
  probed(err: unknown): void {
    const now = this.#now();
    if (err === undefined) {
      this.#lastSuccessAt = now;
      const outage = this.#outages.get(PROBE);
      if (outage === undefined) return;
      this.#outages.delete(PROBE);
      log.info("db: MySQL answers the idle probe again", {
        down_for_s: Math.round((now - outage.since) / 100) / 10,
      });
      this.#ended();
      return;
    }
    // The writers retry with back-off; the probe's ticks keep the stall's summaries on time.
    this.#escalate(now);
    const outage = this.#outages.get(PROBE);
    if (outage !== undefined) {
      outage.attempts++;
      return;
    }
    this.#outages.set(PROBE, { since: now, attempts: 1, lastLogAt: now });
    this.#gauge?.set(0);
    log.warn("db: MySQL does not answer the idle probe; treated as unavailable", {
      error: errorMessage(err),
    });
  }

  #ended(): void {
    if (!this.#holding()) this.#stall = undefined;
    if (this.#outages.size > 0) return;
    this.#gauge?.set(1);
    this.#timeoutWarned = false;
  }

  /** Whether a writer holds rows because MySQL cannot take them (the idle probe holds none). */
  #holding(): boolean {
    return this.#outages.size > (this.#outages.has(PROBE) ? 1 : 0);
  }

  /** The stall's error: once it is a minute old, then a summary every minute while it lasts. */
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
        tables: [...this.#outages.keys()].filter((t) => t !== PROBE).length,
        ...(held === undefined ? {} : { jobs_held: held.jobs, rows_held: held.rows }),
        error: stall.lastError,
      },
    );
  }

  /** The wall-clock time of the monotonic instant `at`, for "since" in log lines. */
  #wallTime(at: number, now: number): string {
    return new Date(Date.now() - (now - at)).toISOString();
  }
}

/** Options of {@link IdleProbe}. */
export interface IdleProbeOptions {
  readonly availability: DbAvailability;
  /**
   * One bounded "does MySQL answer" round trip on a connection of its own (never the writers'
   * pool, whose connections may all be busy with slow statements); rejects when it does not
   * answer within `timeoutMs`.
   */
  readonly ping: (timeoutMs: number) => Promise<void>;
  /** Default {@link IDLE_PROBE_INTERVAL_MS}. */
  readonly intervalMs?: number;
  /** Default {@link IDLE_PROBE_TIMEOUT_MS}. */
  readonly timeoutMs?: number;
}

/** A probe runs when no statement succeeded for this long. */
const IDLE_PROBE_INTERVAL_MS = 5_000;
/** Bound on one probe. */
const IDLE_PROBE_TIMEOUT_MS = 2_000;

/**
 * Keeps `statusengine_db_available` and `/readyz` true while nothing is written. Writers find
 * an outage with their next statement; an idle worker has none, and a frozen MySQL (SIGSTOP, a
 * hung host) went unnoticed until a statement ran into `--mysql-statement-timeout`. Whenever no
 * statement succeeded for an interval, one cheap bounded round trip is made instead.
 */
export class IdleProbe {
  readonly #o: IdleProbeOptions;
  #timer: ReturnType<typeof setInterval> | undefined;
  #running: Promise<void> | undefined;

  /** @param options Availability tracker, ping and timings. */
  constructor(options: IdleProbeOptions) {
    this.#o = options;
  }

  /** Start probing. */
  start(): void {
    const interval = this.#o.intervalMs ?? IDLE_PROBE_INTERVAL_MS;
    this.#timer = setInterval(() => this.#tick(interval), Math.max(100, interval / 2));
  }

  #tick(interval: number): void {
    if (this.#running !== undefined) return;
    if (this.#o.availability.msSinceSuccess < interval) return;
    this.#running = this.probeOnce().finally(() => (this.#running = undefined));
  }

  /** One probe now; its result goes to the availability tracker. */
  async probeOnce(): Promise<void> {
    try {
      await this.#o.ping(this.#o.timeoutMs ?? IDLE_PROBE_TIMEOUT_MS);
      this.#o.availability.probed(undefined);
    } catch (err: unknown) {
      this.#o.availability.probed(err ?? new Error("failed"));
    }
  }

  /** Stop probing; waits for a probe in flight (bounded by its timeout). */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}
