/**
 * A MySQL named lock (`GET_LOCK`) held on a connection of its own, with a liveness check and a
 * take-over loop: the election of the one worker that may consume the in-order queues when
 * several workers share a job server.
 *
 * MySQL releases a named lock when the connection holding it ends, whatever ended it (the
 * process died, was killed, or the server dropped the connection), so a dead holder's lock
 * is free again as soon as the server notices, and the next attempt of another worker gets
 * it. A holder checks every `pollMs` that the lock is still its own (`IS_USED_LOCK` =
 * `CONNECTION_ID()`, bounded by `pollMs`); any failure counts as a loss.
 *
 * @module
 */
import type mysql from "mysql2/promise";
import { sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

/** Options of {@link NamedLock}. */
export interface NamedLockOptions {
  /** Opens the dedicated connection (never a pooled one: the lock lives and dies with it). */
  readonly connect: () => Promise<mysql.Connection>;
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
  /** The lock was lost, or is released on stop, after {@link onHeld} resolved. Must not reject. */
  readonly onLost: () => Promise<void>;
  /** Held (1) or not (0). */
  readonly heldGauge?: { set(value: number): void };
}

/** Elects one holder among the processes using the same lock name. */
export class NamedLock {
  readonly #o: NamedLockOptions;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #conn: mysql.Connection | undefined;
  /** performance.now() when GET_LOCK succeeded, undefined while not held. */
  #acquiredAt: number | undefined;
  #active = false;

  /** @param options Connection, name, timing and callbacks. */
  constructor(options: NamedLockOptions) {
    this.#o = options;
  }

  /** Whether {@link NamedLockOptions.onHeld} has run and the lock is still held. */
  get active(): boolean {
    return this.#active;
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
    const conn = this.#conn ?? await this.#o.connect();
    this.#conn = conn;
    const [rows] = await conn.query({ sql, timeout: this.#o.pollMs }, values);
    return (rows as Record<string, unknown>[])[0]?.["v"];
  }

  async #run(): Promise<void> {
    const o = this.#o;
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        if (this.#acquiredAt === undefined) {
          if (await this.#query("SELECT GET_LOCK(?, 0) AS v", [o.name]) === 1) {
            this.#acquiredAt = performance.now();
            log.info("db: in-order lock acquired; consuming after the grace period", {
              lock: o.name,
              grace_ms: o.graceMs,
            });
          }
        } else if (
          await this.#query("SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS v", [o.name]) !== 1
        ) {
          throw new Error("the lock is held by another connection");
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
      if (!(await sleepUnlessAborted(this.#nextDelay(), signal))) break;
    }
    await this.#lose(true);
  }

  /** Poll sooner while the grace runs out, so the take-over is not a poll late. */
  #nextDelay(): number {
    const o = this.#o;
    if (this.#acquiredAt === undefined || this.#active) return o.pollMs;
    const left = o.graceMs - (performance.now() - this.#acquiredAt);
    return Math.max(0, Math.min(o.pollMs, left));
  }

  async #lose(release = false): Promise<void> {
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
    // destroy: a connection that timed out may never answer an orderly QUIT.
    conn.destroy();
  }
}
