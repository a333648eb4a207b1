/**
 * A MySQL named lock (`GET_LOCK`) held on a connection of its own, with a liveness check and a
 * take-over loop: the election of the one worker that may consume the in-order queues when
 * several workers share a job server.
 *
 * MySQL releases a named lock when the connection holding it ends, whatever ended it (the
 * process died, was killed, or the server dropped the connection), so a dead holder's lock
 * is free again as soon as the server notices, and the next attempt of another worker gets
 * it. A holder checks every `pollMs` that the lock is still its own (`IS_USED_LOCK` =
 * `CONNECTION_ID()`, bounded by `pollMs`).
 *
 * A holder whose check fails without proof that someone else holds the lock (the connection
 * died with a MySQL restart or a KILL, the query timed out, the lock reads as free) keeps its
 * place: it tells {@link NamedLockOptions.onSuspect} and tries to take the same lock again on
 * a new connection, at once and then every `pollMs`, until either `GET_LOCK` succeeds (the
 * lock is its own again, {@link NamedLockOptions.onRegained}) or it finds the lock held by
 * another connection (another worker took it over: {@link NamedLockOptions.onLost}). Handing
 * the in-order queues back on every dropped connection made gearmand put the job in flight
 * behind the jobs queued after it, which a lone worker then applied out of order.
 *
 * @module
 */
import mysql from "mysql2/promise";
import type { MysqlConnection } from "./connect.ts";
import { driverOptions, type MysqlUrlOptions } from "./url.ts";
import { sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

/**
 * What one query says about the lock: `own` (this connection holds it), `taken` (another
 * connection holds it), or `unknown` (the query failed, timed out, or found the lock free).
 */
export type LockVerdict = "own" | "taken" | "unknown";

/**
 * The verdict of a liveness check (`IS_USED_LOCK(name) = CONNECTION_ID()`) or of an attempt
 * (`GET_LOCK(name, 0)`): both read 1 when the lock is this connection's, 0 when another
 * connection holds it, and NULL when the lock is free (check) or the attempt failed.
 *
 * @param value The query's one value; an `Error` when the query itself failed.
 * @returns The verdict.
 */
export function lockVerdict(value: unknown): LockVerdict {
  if (value instanceof Error) return "unknown";
  if (value === 1 || value === 1n || value === "1") return "own";
  if (value === 0 || value === 0n || value === "0") return "taken";
  return "unknown";
}

/**
 * What a holder that has started consuming is after a verdict.
 * - `holding`: the lock is its own, consume.
 * - `reacquiring`: it may still be its own (its connection died, a query failed): keep the
 *   job in flight and its place, admit no new job, and try `GET_LOCK` again on a new
 *   connection.
 * - `lost`: another worker holds it: stop consuming and hand the jobs back.
 */
export type HolderState = "holding" | "reacquiring" | "lost";

/**
 * The re-acquire decision of a holder: only proof that another connection holds the lock
 * makes it give up; anything else keeps it trying to take its own lock again.
 *
 * @param verdict What the last check or attempt said.
 * @returns The holder's next state.
 */
export function holderStateAfter(verdict: LockVerdict): HolderState {
  switch (verdict) {
    case "own":
      return "holding";
    case "taken":
      return "lost";
    case "unknown":
      return "reacquiring";
  }
}

/**
 * Open a lock's dedicated connection: no probe (the first `GET_LOCK` is the probe), so that
 * an attempt takes a connect and one query.
 *
 * @param options Connection options from the URL.
 * @param connectTimeoutMs Bound on connecting.
 * @returns The connection; the lock closes it.
 */
export function openLockConnection(
  options: MysqlUrlOptions,
  connectTimeoutMs: number,
): Promise<MysqlConnection> {
  return mysql.createConnection({ ...driverOptions(options), connectTimeout: connectTimeoutMs });
}

/** Options of {@link NamedLock}. */
export interface NamedLockOptions {
  /** Opens the dedicated connection (never a pooled one: the lock lives and dies with it). */
  readonly connect: () => Promise<MysqlConnection>;
  /** Lock name, at most 64 characters (MySQL's limit). */
  readonly name: string;
  /** Interval of the acquisition attempts and liveness checks, and the bound of each query. */
  readonly pollMs: number;
  /**
   * Time the lock must have been held, with every check passing, before {@link onHeld} runs:
   * a previous holder that lost the lock without dying needs it to notice and stop.
   */
  readonly graceMs: number;
  /** The lock is held and the grace is over. A rejection is logged; it is called again next poll. */
  readonly onHeld: () => Promise<void>;
  /**
   * The lock was lost to another worker, or is released on stop, after {@link onHeld}
   * resolved. Must not reject.
   */
  readonly onLost: () => Promise<void>;
  /**
   * After {@link onHeld}: the lock may no longer be this worker's (its connection failed);
   * it is being taken again. Admit no new job until {@link onRegained} or {@link onLost}.
   */
  readonly onSuspect?: () => void;
  /** After {@link onSuspect}: `GET_LOCK` on a new connection succeeded; the lock is ours. */
  readonly onRegained?: () => void;
  /** Held (1) or not (0); stays 1 while the holder re-acquires its own lock. */
  readonly heldGauge?: { set(value: number): void };
}

/** Elects one holder among the processes using the same lock name. */
export class NamedLock {
  readonly #o: NamedLockOptions;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #conn: MysqlConnection | undefined;
  /** performance.now() when GET_LOCK succeeded, undefined while not held. */
  #acquiredAt: number | undefined;
  #active = false;
  /** Active, but the last check failed: taking the lock again on a new connection. */
  #reacquiring = false;

  /** @param options Connection, name, timing and callbacks. */
  constructor(options: NamedLockOptions) {
    this.#o = options;
  }

  /** Whether {@link NamedLockOptions.onHeld} has run and the lock was not lost since. */
  get active(): boolean {
    return this.#active;
  }

  /** Whether the holder is taking its lock again after its connection failed. */
  get reacquiring(): boolean {
    return this.#reacquiring;
  }

  /** Start competing for the lock. */
  start(): void {
    this.#o.heldGauge?.set(0);
    this.#loop ??= this.#run();
  }

  /** Stop: `onLost` if active, release the lock, close the connection. Idempotent. */
  async stop(): Promise<void> {
    this.#stop.abort(new Error("named lock stopped"));
    await this.#loop;
  }

  async #query(sql: string, values: unknown[]): Promise<unknown> {
    let conn = this.#conn;
    if (conn === undefined) {
      conn = await this.#o.connect();
      // A connection the server closes while idle (restart, KILL) reports it as an 'error'
      // event; without a listener that event would end the process. The next query fails
      // and says so.
      conn.on("error", () => {});
      this.#conn = conn;
    }
    const [rows] = await conn.query({ sql, timeout: this.#o.pollMs }, values);
    return (rows as Record<string, unknown>[])[0]?.["v"];
  }

  /** Run a query for its verdict; a failed query drops the connection (a new one is opened). */
  async #verdict(sql: string): Promise<{ verdict: LockVerdict; error?: unknown }> {
    try {
      return { verdict: lockVerdict(await this.#query(sql, [this.#o.name])) };
    } catch (err: unknown) {
      this.#dropConnection();
      return { verdict: "unknown", error: err };
    }
  }

  async #run(): Promise<void> {
    const o = this.#o;
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      let again = false;
      try {
        if (this.#acquiredAt === undefined) {
          if (await this.#query("SELECT GET_LOCK(?, 0) AS v", [o.name]) === 1) {
            this.#acquiredAt = performance.now();
            log.info("db: in-order lock acquired; consuming after the grace period", {
              lock: o.name,
              grace_ms: o.graceMs,
            });
          }
        } else if (this.#active) {
          again = await this.#checkHolder();
        } else {
          // In the grace period nothing is consumed yet: a failed check starts over.
          const { verdict, error } = await this.#verdict(
            "SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS v",
          );
          if (verdict !== "own") {
            throw error ??
              new Error(
                verdict === "taken" ? "the lock is held by another connection" : "the lock is free",
              );
          }
        }
        if (
          this.#acquiredAt !== undefined && !this.#active &&
          performance.now() - this.#acquiredAt >= o.graceMs
        ) {
          try {
            await o.onHeld();
            this.#active = true;
            o.heldGauge?.set(1);
          } catch (err: unknown) {
            log.error("db: in-order lock held, but consuming could not start; retrying", {
              lock: o.name,
              error: errorMessage(err),
            });
          }
        }
      } catch (err: unknown) {
        if (signal.aborted) break;
        if (this.#acquiredAt !== undefined) {
          log.warn("db: in-order lock lost; stopping the in-order queues", {
            lock: o.name,
            error: errorMessage(err),
          });
        }
        await this.#lose();
      }
      if (again) continue;
      if (!(await sleepUnlessAborted(this.#nextDelay(), signal))) break;
    }
    await this.#lose(true);
  }

  /**
   * One liveness check or re-acquire attempt of an active holder.
   *
   * @returns True to try again at once (the first attempt after a check failed).
   */
  async #checkHolder(): Promise<boolean> {
    const o = this.#o;
    const wasReacquiring = this.#reacquiring;
    const { verdict, error } = await this.#verdict(
      wasReacquiring
        ? "SELECT GET_LOCK(?, 0) AS v"
        : "SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS v",
    );
    if (this.#stop.signal.aborted) return false;
    switch (holderStateAfter(verdict)) {
      case "holding":
        if (wasReacquiring) {
          this.#reacquiring = false;
          log.info(
            "db: in-order lock taken again on a new connection; the in-order queues kept " +
              "their job in flight and their place",
            { lock: o.name },
          );
          o.onRegained?.();
        }
        return false;
      case "lost":
        log.warn(
          wasReacquiring
            ? "db: another worker took the in-order lock while this worker's lock connection " +
              "was down; handing the in-order queues over to it"
            : "db: in-order lock held by another connection; stopping the in-order queues",
          { lock: o.name },
        );
        await this.#lose();
        return false;
      case "reacquiring":
        if (!wasReacquiring) {
          this.#reacquiring = true;
          // A check that ran on a live connection and found the lock free: a new
          // connection takes it (GET_LOCK on the old one would nest the lock).
          this.#dropConnection();
          log.warn(
            "db: in-order lock connection failed; keeping the in-order queues' job in flight " +
              "and taking the lock again on a new connection (no new job until then)",
            {
              lock: o.name,
              error: error === undefined ? "the lock is free" : errorMessage(error),
            },
          );
          o.onSuspect?.();
          return true;
        }
        return false;
    }
  }

  /** Poll sooner while the grace runs out, so the take-over is not a poll late. */
  #nextDelay(): number {
    const o = this.#o;
    if (this.#acquiredAt === undefined || this.#active) return o.pollMs;
    const left = o.graceMs - (performance.now() - this.#acquiredAt);
    return Math.max(0, Math.min(o.pollMs, left));
  }

  #dropConnection(): void {
    const conn = this.#conn;
    this.#conn = undefined;
    // destroy: a connection that timed out may never answer an orderly QUIT.
    conn?.destroy();
  }

  async #lose(release = false): Promise<void> {
    this.#reacquiring = false;
    if (this.#active) {
      this.#active = false;
      this.#o.heldGauge?.set(0);
      // First stop consuming: only then may anyone else take the lock over (see the caller).
      await this.#o.onLost();
    }
    const conn = this.#conn;
    this.#conn = undefined;
    const held = this.#acquiredAt !== undefined;
    this.#acquiredAt = undefined;
    if (conn === undefined) return;
    if (release && held) {
      try {
        await conn.query({ sql: "SELECT RELEASE_LOCK(?)", timeout: this.#o.pollMs }, [
          this.#o.name,
        ]);
        log.info("db: in-order lock released", { lock: this.#o.name });
      } catch {
        // Closing the connection below releases it as well.
      }
    }
    conn.destroy();
  }
}
