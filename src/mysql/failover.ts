/**
 * Several MySQL hosts in `--mysql-url`: which one the daemon's connections go to, and when they
 * move (docs/running.md#mysql-hosts). Every connection the daemon opens asks this class where to
 * go, so a switch moves everything at once and no caller knows there is more than one host.
 *
 * @module
 */
import net from "node:net";
import { getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";
import { DenoSocket, type DenoSocketTarget } from "../util/deno_socket.ts";
import type { RowDataPacket } from "mysql2/promise";
import { deadline } from "../util/async.ts";
import { hasCode, WorkerError } from "../util/errors.ts";
import { closeMysqlNow, connectMysql, endMysql, noHostAnswers, unlessAborted } from "./connect.ts";
import { aimConnectionConfig, retireConnections } from "./mysql2_internals.ts";
import {
  hostLabel,
  type MysqlHost,
  mysqlHosts,
  type MysqlUrlOptions,
  onHost,
} from "../util/mysql_url.ts";

const log = getLogger("db");

/** Bound on one probe of a host (connect and one SELECT). */
const PROBE_TIMEOUT_MS = 2_000;
const FAILBACK_PROBE_INTERVAL_MS = 5_000;
/**
 * After a check of the host in use, further failures within this time start no new check: a
 * failing host makes every writer fail at once, and one check answers for all of them.
 */
const RECHECK_AFTER_MS = 1_000;

export interface MysqlHostsOptions {
  /** `--mysql-failback-after`: how long an earlier host must answer before it is used again. */
  readonly failbackAfterMs: number;
  readonly metrics?: Pick<Metrics, "mysqlHostInUse" | "mysqlHostSwitches"> | undefined;
  /** Default `performance.now` (tests pass a fake one). */
  readonly now?: () => number;
  /** Does this host answer within `timeoutMs`; default: connect, probe and close. */
  readonly probe?: (options: MysqlUrlOptions, timeoutMs: number) => Promise<void>;
}

/**
 * mysql2's `stream` option: each new connection over `Deno.connect` ({@link DenoSocket}), as a
 * bulk INSERT is one write and one read, and a write through Deno's `net.Socket` cost several times
 * the CPU (docs/writers.md). mysql2's config always holds the host and port (3306 if the URL names
 * none). TLS stays with `net.Socket`, which mysql2 upgrades.
 */
export function denoSocketStream(opts: { readonly config: DenoSocketTarget }): DenoSocket {
  return new DenoSocket(opts.config);
}

/** Errno of a write refused by a read-only server; classified like a lost connection (errors.ts). */
const READ_ONLY_ERRNO = 1290;

/**
 * A host answers when it connects, passes the probe and takes writes: a read-only server (a
 * replica, an old primary come back as one) answers every SELECT but refuses each write with
 * 1290, so the worker must neither keep it nor move back to it while another host takes writes.
 */
async function answersProbe(options: MysqlUrlOptions, timeoutMs: number): Promise<void> {
  using limit = deadline(timeoutMs);
  try {
    const { connection } = await connectMysql(options, { timeoutMs, signal: limit.signal });
    try {
      const query = connection.query<RowDataPacket[]>("SELECT @@read_only AS ro");
      const [rows] = await unlessAborted(query, limit.signal, () => closeMysqlNow(connection));
      if (Number(rows[0]?.ro ?? 0) !== 0) {
        const err = new Error("the server is read-only (read_only=ON): it refuses the writes");
        throw Object.assign(err, { errno: READ_ONLY_ERRNO });
      }
    } finally {
      // A connection closed at the deadline gets no polite COM_QUIT: nothing would answer it.
      if (limit.signal.aborted) closeMysqlNow(connection);
      else await endMysql(connection);
    }
  } catch (err: unknown) {
    throw hasCode(err, "interrupted")
      ? new WorkerError("TimedOut", `no answer within ${timeoutMs} ms`)
      : err;
  }
}

export class MysqlHosts {
  readonly #options: MysqlUrlOptions;
  readonly #hosts: readonly MysqlHost[];
  readonly #o: MysqlHostsOptions;
  readonly #now: () => number;
  readonly #probe: (options: MysqlUrlOptions, timeoutMs: number) => Promise<void>;
  /** Which host each socket of the pool leads to. */
  readonly #sockets = new WeakMap<object, number>();
  readonly #sweeps: ((busyToo: boolean) => void)[] = [];
  #index = 0;
  #checking: Promise<Error | undefined> | undefined;
  #checkedAt = Number.NEGATIVE_INFINITY;
  /** Per earlier host: since when it has answered every fail-back probe. */
  #answeringSince = new Map<number, number>();
  #timer: ReturnType<typeof setInterval> | undefined;
  #failingBack: Promise<void> | undefined;

  constructor(options: MysqlUrlOptions, o: MysqlHostsOptions) {
    this.#options = options;
    this.#hosts = mysqlHosts(options);
    this.#o = o;
    this.#now = o.now ?? (() => performance.now());
    this.#probe = o.probe ?? answersProbe;
    if (this.several) this.#publish();
  }

  /** More than one host: otherwise this class does nothing. */
  get several(): boolean {
    return this.#hosts.length > 1;
  }

  /** `host:port` of the host in use (for `/readyz` and the logs); the socket path for a socket. */
  get label(): string {
    const h = this.#hosts[this.#index];
    return h === undefined ? (this.#options.socketPath ?? "") : hostLabel(h);
  }

  /** Options of a connection to the host in use (a dedicated connection, the probe). */
  get inUse(): MysqlUrlOptions {
    const h = this.#hosts[this.#index];
    return this.several && h !== undefined ? onHost(this.#options, h) : this.#options;
  }

  /**
   * mysql2's `stream` option for the writers' pool: each new connection goes to the host in use
   * (Deno's socket, or Node's for TLS, which mysql2 upgrades).
   */
  readonly stream = (opts: { readonly config: DenoSocketTarget }): object => {
    const index = this.#index;
    const h = this.#hosts[index];
    if (h === undefined) return denoSocketStream(opts);
    // Else a TLS upgrade checks the certificate of this host against the first host's name.
    aimConnectionConfig(opts, h.host, h.port);
    const socket = this.#options.ssl === undefined
      ? denoSocketStream(opts)
      : net.connect(h.port, h.host);
    this.#sockets.set(socket, index);
    return socket;
  };

  /**
   * Close the connections of `pool` (made with {@link stream}) to a host left: idle ones at a
   * switch; busy ones at once when that host stopped answering, else when their statement returns
   * (mysql2_internals.ts).
   */
  attach(pool: unknown): void {
    if (!this.several) return;
    const sweep = retireConnections(pool, (socket) => {
      const index = typeof socket === "object" && socket !== null
        ? this.#sockets.get(socket)
        : undefined;
      return index !== undefined && index !== this.#index;
    });
    if (sweep !== undefined) this.#sweeps.push(sweep);
  }

  /**
   * A statement or the idle probe found MySQL unavailable: check the host in use, unless that
   * was just done, and move to the first host that answers when it does not. Never waits.
   */
  suspect(): void {
    if (!this.several || this.#checking !== undefined) return;
    if (this.#now() - this.#checkedAt < RECHECK_AFTER_MS) return;
    void this.check();
  }

  /**
   * Keep the host in use if it answers a probe, else move to the first host of the list that
   * answers (none: stay, and return why, {@link noHostAnswers}). Shared by concurrent callers.
   */
  check(): Promise<Error | undefined> {
    if (!this.several) return Promise.resolve(undefined);
    this.#checking ??= this.#check().finally(() => {
      this.#checkedAt = this.#now();
      this.#checking = undefined;
    });
    return this.#checking;
  }

  async #check(): Promise<Error | undefined> {
    const current = this.#index;
    if (await this.#answers(current)) return undefined;
    const failures = new Map<number, unknown>();
    const answers = await Promise.all(this.#hosts.map((_, i) => this.#answers(i, failures)));
    const first = answers.indexOf(true);
    if (first < 0) {
      return noHostAnswers(
        this.#hosts.map((h, i) => ({ host: hostLabel(h), err: failures.get(i) })),
      );
    }
    if (first === current || this.#index !== current) return undefined;
    // Its busy connections are closed now: without --mysql-statement-timeout, a statement a
    // frozen host never answers would hold its writer for ever. Each is sent again to the new
    // host, as after any lost connection.
    this.#switchTo(first, "the host in use does not answer", true);
    return undefined;
  }

  /** Start probing the earlier hosts while a later one is in use. */
  start(): void {
    if (!this.several || this.#timer !== undefined) return;
    const failbackAfterMs = this.#o.failbackAfterMs;
    // Several probes within the delay, so that "answered every probe" means something.
    const interval = Math.max(100, Math.min(FAILBACK_PROBE_INTERVAL_MS, failbackAfterMs / 2));
    this.#timer = setInterval(() => {
      if (this.#index === 0 || this.#failingBack !== undefined) return;
      this.#failingBack = this.failBack().finally(() => (this.#failingBack = undefined));
    }, interval);
  }

  /** Stop probing; waits for a probe in flight (bounded by its timeout). */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#failingBack;
    await this.#checking;
  }

  /** Fail-back: the first earlier host that answered every probe for the delay is used again. */
  async failBack(): Promise<void> {
    const current = this.#index;
    const earlier = this.#hosts.slice(0, current);
    const answers = await Promise.all(earlier.map((_, i) => this.#answers(i)));
    const now = this.#now();
    for (const [i, answered] of answers.entries()) {
      if (!answered) this.#answeringSince.delete(i);
      else if (!this.#answeringSince.has(i)) this.#answeringSince.set(i, now);
    }
    if (this.#index !== current) return;
    for (const [i, since] of this.#answeringSince) {
      if (i < current && now - since >= this.#o.failbackAfterMs) {
        this.#switchTo(i, "an earlier host of the list answers again");
        return;
      }
    }
  }

  async #answers(index: number, failures?: Map<number, unknown>): Promise<boolean> {
    const h = this.#hosts[index];
    if (h === undefined) return false;
    try {
      await this.#probe(onHost(this.#options, h), PROBE_TIMEOUT_MS);
      return true;
    } catch (err: unknown) {
      failures?.set(index, err);
      return false;
    }
  }

  #switchTo(index: number, reason: string, busyToo = false): void {
    const from = this.label;
    const back = index < this.#index;
    this.#index = index;
    this.#answeringSince = new Map();
    this.#o.metrics?.mysqlHostSwitches.inc();
    this.#publish();
    const fields = { from, to: this.label, reason };
    if (back) log.info("db: MySQL connections move back to an earlier host", fields);
    else log.warn("db: MySQL connections move to another host", fields);
    for (const sweep of this.#sweeps) sweep(busyToo);
  }

  #publish(): void {
    for (const [i, h] of this.#hosts.entries()) {
      this.#o.metrics?.mysqlHostInUse.set({ host: hostLabel(h) }, i === this.#index ? 1 : 0);
    }
  }
}
