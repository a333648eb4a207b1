/**
 * A lease in a row of `statusengine_worker_leases`: the election of the one worker that may
 * consume the in-order queues of a node, cluster-wide (`GET_LOCK` is local to one Galera node).
 * Each decision is an UPDATE whose WHERE names what its writer last saw; its affected-row count
 * says whether it won. The rules and why two holders never overlap: docs/downtimes.md#galera.
 *
 * @module
 */
import mysql from "mysql2/promise";
import { type MysqlConnection, STRICT_SESSION_SQL } from "./connect.ts";
import { driverOptions, type MysqlUrlOptions } from "../util/mysql_url.ts";
import { sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("db");

const TABLE = "statusengine_worker_leases";

/**
 * How long a holder may stay silent before another worker takes its lease: 13 polls of failed
 * renewals survived, plus the drain and the two polls in which the holder notices and stops.
 */
export function leaseTermMs(pollMs: number, drainMs: number): number {
  return 15 * pollMs + drainMs;
}

/** A lease's row and this worker's name in it. */
export interface LeaseIdentity {
  /** The row's key, at most 255 characters. */
  readonly name: string;
  /** This worker, unique among all workers and their restarts (pid and a random part). */
  readonly holder: string;
}

/**
 * A node's lease of one kind: its row (`<kind>:<node>`, cut to the column's 255 characters; a
 * shared lease only costs parallelism) and a holder unique among workers and restarts.
 */
export function nodeLease(kind: string, nodeName: string): LeaseIdentity {
  return {
    name: [...`${kind}:${nodeName}`].slice(0, 255).join(""),
    holder: `pid ${Deno.pid} ${crypto.randomUUID().slice(0, 8)}`,
  };
}

/**
 * The UPDATE that a write commits only with (`RunOptions.commitIf`): it matches the row only
 * while `lease.holder` holds it, and it changes the row, so a take-over, which changes it too,
 * makes one of the two fail (a row lock on one server, certification across Galera nodes). A
 * write its holder gave up can then not commit after the new holder's (docs/downtimes.md#galera).
 */
export function heldLeaseUpdate(lease: LeaseIdentity): { sql: string; values: string[] } {
  return {
    sql: `UPDATE ${TABLE} SET renewals = renewals + 1, renewed_at = UNIX_TIMESTAMP() ` +
      "WHERE name = ? AND holder = ?",
    values: [lease.name, lease.holder],
  };
}

/**
 * What every lease of a node shares: its identity ({@link nodeLease}), a dedicated connection to
 * the host in use, and the term from the poll and the drain.
 */
export function nodeLeaseOptions(
  lease: LeaseIdentity,
  host: () => MysqlUrlOptions,
  pollMs: number,
  drainMs: number,
): Pick<LeaseOptions, "connect" | "name" | "holder" | "pollMs" | "termMs" | "drainMs"> {
  return {
    // Never a pooled connection: its queries must not wait behind the writers'. No probe: the
    // first query is one. Bounded by the poll: the validity allows two polls for a renewal.
    connect: () => mysql.createConnection({ ...driverOptions(host()), connectTimeout: pollMs }),
    ...lease,
    pollMs,
    termMs: leaseTermMs(pollMs, drainMs),
    drainMs,
  };
}

interface LeaseOptions extends LeaseIdentity {
  readonly connect: () => Promise<MysqlConnection>;
  /** Interval of renewals and reads, and the bound of each query. */
  readonly pollMs: number;
  /** {@link leaseTermMs}. */
  readonly termMs: number;
  /** Time the holder needs to stop applying once it decides to. */
  readonly drainMs: number;
  /**
   * The lease is ours; renewed while this runs, however long. A rejection is logged and it is
   * called again next poll. `signal` aborts on {@link Lease.stop}: end the start then.
   */
  readonly onHeld: (signal: AbortSignal) => Promise<void>;
  /**
   * After {@link onHeld} resolved (one under way is waited for): stop consuming (lost, expired or
   * released). Must not reject.
   */
  readonly onLost: () => Promise<void>;
  /**
   * False while a write the holder started still runs (a job abandoned at the drain deadline):
   * the stop then leaves the lease to expire after its term instead of releasing it.
   */
  readonly releasable?: () => boolean;
  /** After {@link onHeld}: a renewal failed; admit no new job until {@link onRegained}. */
  readonly onSuspect?: () => void;
  /** A renewal succeeded within the validity: jobs held since {@link onSuspect} may go on. */
  readonly onRegained?: () => void;
  /** `statusengine_in_order_lock_held`: 1 from {@link onHeld} until {@link onLost}. */
  readonly heldGauge?: { set(value: number): void };
  /** `statusengine_in_order_lease_takeovers_total`: leases taken from a silent holder. */
  readonly takeovers?: { inc(): void };
}

export class Lease {
  readonly #o: LeaseOptions;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #conn: MysqlConnection | undefined;
  #rowEnsured = false;
  /** What a waiting worker last saw of the row, and since when (its own clock). */
  #seen: { readonly holder: string; readonly renewals: string; readonly since: number } | undefined;
  /** performance.now() until which the lease is ours; undefined while not held. */
  #validUntil: number | undefined;
  #active = false;
  #suspect = false;
  /** {@link LeaseOptions.onHeld} under way: the renewals go on beside it. */
  #starting: Promise<void> | undefined;

  constructor(options: LeaseOptions) {
    if (options.termMs - options.drainMs - 2 * options.pollMs <= options.pollMs) {
      throw new RangeError("lease term too short for its poll interval and drain");
    }
    this.#o = options;
  }

  /** {@link LeaseOptions.onHeld} has run and the lease was not given up since. */
  get active(): boolean {
    return this.#active;
  }

  /** Whether the holder is renewing after a failed renewal (no new job meanwhile). */
  get reacquiring(): boolean {
    return this.#suspect;
  }

  /** Whether the lease is this worker's now: held, and its last renewal recent enough. */
  get valid(): boolean {
    return this.#validUntil !== undefined && performance.now() < this.#validUntil;
  }

  start(): void {
    this.#o.heldGauge?.set(0);
    this.#loop ??= this.#run();
  }

  /** Stop: `onLost` if active, release the lease, close the connection. Idempotent. */
  async stop(): Promise<void> {
    this.#stop.abort(new Error("lease stopped"));
    await this.#loop;
  }

  /** Run one statement on the lease connection, opened when needed; a failure drops it. */
  async #query(sql: string, values: unknown[]): Promise<unknown> {
    try {
      if (this.#conn === undefined) {
        const conn = await this.#o.connect();
        // A connection the server closes while idle reports an 'error' event; without a
        // listener it would end the process. The next query fails and says so.
        conn.on("error", () => {});
        this.#conn = conn;
        await conn.query({ sql: STRICT_SESSION_SQL, timeout: this.#o.pollMs });
      }
      const [result] = await this.#conn.query({ sql, timeout: this.#o.pollMs }, values);
      return result;
    } catch (err: unknown) {
      this.#dropConnection();
      throw err;
    }
  }

  /** An UPDATE of the row; true when it matched (mysql2 sets CLIENT_FOUND_ROWS). */
  async #update(set: string, where: string, values: unknown[]): Promise<boolean> {
    const result = await this.#query(
      `UPDATE ${TABLE} SET ${set}, renewals = renewals + 1, renewed_at = UNIX_TIMESTAMP() ` +
        `WHERE name = ? AND ${where}`,
      values,
    );
    return (result as { affectedRows?: number }).affectedRows === 1;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      let again = false;
      try {
        if (this.#validUntil === undefined) await this.#compete();
        else again = await this.#renew();
      } catch (err: unknown) {
        if (signal.aborted) break;
        // Waiting: a failed read or take-over is tried again next poll. Failures of a holder
        // are handled in #renew. What was seen, and since when, stays: every UPDATE of the row
        // raises `renewals`, so the next read tells whether the holder renewed meanwhile.
        log.debug("db: lease attempt failed", { lease: this.#o.name, error: errorMessage(err) });
      }
      // Not awaited: starting a consumer may take longer than the validity (a RabbitMQ URL whose
      // first brokers do not answer), and the lease must be renewed meanwhile.
      if (
        this.#validUntil !== undefined && !this.#active && this.#starting === undefined &&
        !signal.aborted
      ) {
        this.#starting = this.#start().finally(() => (this.#starting = undefined));
      }
      if (again) continue;
      // Poll, but wake in time to give the lease up before its validity ends.
      const left = (this.#validUntil ?? Infinity) - performance.now();
      if (!(await sleepUnlessAborted(Math.max(0, Math.min(this.#o.pollMs, left)), signal))) break;
    }
    await this.#lose(true);
  }

  /** A waiting worker: read the row; take it when it is free, ours, or silent for the term. */
  async #compete(): Promise<void> {
    const o = this.#o;
    if (!this.#rowEnsured) {
      await this.#query(`INSERT IGNORE INTO ${TABLE} (name) VALUES (?)`, [o.name]);
      this.#rowEnsured = true;
    }
    const rows = await this.#query(
      `SELECT holder, CAST(renewals AS CHAR) AS renewals FROM ${TABLE} WHERE name = ?`,
      [o.name],
    ) as { holder: string; renewals: string }[];
    const now = performance.now();
    const row = rows[0];
    if (row === undefined) {
      this.#rowEnsured = false;
      return;
    }
    let seen = this.#seen;
    if (seen?.holder !== row.holder || seen.renewals !== row.renewals) {
      seen = { holder: row.holder, renewals: row.renewals, since: now };
      this.#seen = seen;
    }
    const free = row.holder === "" || row.holder === o.holder;
    if (!free && now - seen.since < o.termMs) return;
    const sent = performance.now();
    const won = await this.#update("holder = ?", "holder = ? AND renewals = ?", [
      o.holder,
      o.name,
      row.holder,
      row.renewals,
    ]);
    this.#seen = undefined;
    if (!won) return;
    this.#validUntil = this.#validity(sent);
    if (free) {
      log.info("db: in-order lease taken", { lease: o.name, holder: o.holder });
    } else {
      o.takeovers?.inc();
      log.warn("db: in-order lease taken over from a holder silent for its whole term", {
        lease: o.name,
        holder: o.holder,
        previous_holder: row.holder,
        term_ms: o.termMs,
      });
    }
  }

  /** One renewal of a holder; true to try again at once (the first after one failed). */
  async #renew(): Promise<boolean> {
    const o = this.#o;
    if (!this.valid) {
      log.warn(
        "db: in-order lease not renewed within its validity; stopping the in-order queues " +
          "(their job in flight goes back to the broker) before another worker may take it",
        { lease: o.name, term_ms: o.termMs },
      );
      await this.#lose();
      return false;
    }
    const sent = performance.now();
    let ours: boolean;
    try {
      ours = await this.#update("holder = holder", "holder = ?", [o.name, o.holder]);
    } catch (err: unknown) {
      if (this.#stop.signal.aborted || this.#suspect || !this.#active) return false;
      this.#suspect = true;
      log.warn(
        "db: in-order lease renewal failed; keeping the in-order queues' job in flight, " +
          "admitting no new one, and renewing on a new connection",
        { lease: o.name, error: errorMessage(err) },
      );
      o.onSuspect?.();
      return true;
    }
    if (this.#stop.signal.aborted) return false;
    if (!ours) {
      log.warn("db: in-order lease held by another worker; stopping the in-order queues", {
        lease: o.name,
      });
      await this.#lose();
      return false;
    }
    this.#validUntil = this.#validity(sent);
    if (this.#suspect) {
      this.#suspect = false;
      log.info("db: in-order lease renewed again; the in-order queues go on", { lease: o.name });
    }
    // Also after a job found the validity nearly out and waited for this renewal.
    o.onRegained?.();
    return false;
  }

  /** Until when a lease renewed or taken by a statement sent at `sent` is ours. */
  #validity(sent: number): number {
    const o = this.#o;
    return sent + o.termMs - o.drainMs - 2 * o.pollMs;
  }

  async #start(): Promise<void> {
    try {
      await this.#o.onHeld(this.#stop.signal);
      this.#active = true;
      this.#o.heldGauge?.set(1);
    } catch (err: unknown) {
      // Ended by the stop: nothing to retry.
      if (this.#stop.signal.aborted) return;
      log.error("db: in-order lease held, but consuming could not start; retrying", {
        lease: this.#o.name,
        error: errorMessage(err),
      });
    }
  }

  #dropConnection(): void {
    const conn = this.#conn;
    this.#conn = undefined;
    // destroy: a connection that timed out may never answer an orderly QUIT.
    conn?.destroy();
  }

  async #lose(release = false): Promise<void> {
    this.#suspect = false;
    this.#validUntil = undefined;
    // A consumer being started is stopped once it is up (the lease, invalid now, admits no job).
    await this.#starting;
    if (this.#active) {
      this.#active = false;
      this.#o.heldGauge?.set(0);
      // First stop consuming: only then may anyone else take the lease (see the caller).
      await this.#o.onLost();
    }
    if (!release) return;
    if (this.#o.releasable?.() === false) {
      log.warn(
        "db: in-order lease not released: a downtime statement of this worker still runs; " +
          "another worker takes the lease after its term",
        { lease: this.#o.name, term_ms: this.#o.termMs },
      );
    } else if (this.#rowEnsured) {
      try {
        // Harmless when another worker holds it: the row must still name this one.
        if (await this.#update("holder = ''", "holder = ?", [this.#o.name, this.#o.holder])) {
          log.info("db: in-order lease released", { lease: this.#o.name });
        }
      } catch {
        // The others take it over after its term.
      }
    }
    this.#dropConnection();
  }
}
