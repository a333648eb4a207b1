/**
 * Reaching MySQL, one way everywhere: a dedicated connection that must answer within a
 * deadline (the command-line tools), the same "does it answer" probe for the daemon's pool,
 * and a hard close that abandons a statement in flight.
 *
 * @module
 */
import mysql from "mysql2/promise";
import { errorMessage } from "../log.ts";
import { destroyPoolSockets, destroySocket } from "./mysql2_internals.ts";
import { deadline, settledWithin } from "../util/async.ts";
import type { MysqlUrlOptions } from "./url.ts";

/** The caller's signal aborted the wait; the statement in flight was abandoned. */
class MysqlInterrupted extends Error {
  constructor() {
    super("Interrupted by a signal");
    this.name = "MysqlInterrupted";
  }
}

/**
 * Settle with `promise`, or reject with {@linkcode MysqlInterrupted} as soon as `signal`
 * aborts, calling `onAbort` first. The losing promise keeps its handler from `Promise.race`,
 * so its late rejection is not unhandled.
 */
export async function unlessAborted<T>(
  promise: Promise<T>,
  signal: AbortSignal,
  onAbort: () => void,
): Promise<T> {
  const { promise: aborted, reject } = Promise.withResolvers<never>();
  const listener = () => {
    onAbort();
    reject(new MysqlInterrupted());
  };
  if (signal.aborted) listener();
  else signal.addEventListener("abort", listener, { once: true });
  try {
    return await Promise.race([promise, aborted]);
  } finally {
    signal.removeEventListener("abort", listener);
  }
}

/**
 * Close a connection at once, abandoning whatever statement is in flight (a `cleanup` stopped
 * by a signal, docs/operations.md#cleanup-exit). mysql2's
 * `destroy()` only half-closes the socket (`stream.end()`), so it would still wait for the
 * server to finish the statement; destroying the stream itself drops the link. The server
 * then completes or rolls back that single autocommit statement on its own.
 *
 * @param conn The connection; unusable afterwards. Calling it twice is harmless.
 */
export function closeMysqlNow(conn: mysql.Connection): void {
  try {
    destroySocket(conn);
  } catch {
    // already closed
  }
  try {
    conn.destroy();
  } catch {
    // already closed
  }
}

/**
 * End a pool: a polite COM_QUIT on every connection within `timeoutMs`, then the sockets of the
 * connections still open are destroyed (a statement a frozen MySQL never answers is abandoned), so
 * that nothing of the pool keeps the process alive once it has ended.
 *
 * @param pool The pool; unusable afterwards.
 * @param timeoutMs Bound on the polite part.
 */
export async function endPool(pool: mysql.Pool, timeoutMs: number): Promise<void> {
  using limit = deadline(timeoutMs);
  await settledWithin(pool.end(), limit.signal);
  destroyPoolSockets(pool);
}

/**
 * MySQL gave no answer within a deadline; its code sorts it with the refused and reset
 * connections (`unreachable`, see errors.ts), not with errors the server sent.
 */
class MysqlNoAnswerError extends Error {
  readonly code = "TimedOut";

  /** @param timeoutMs The deadline that passed. */
  constructor(timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
    this.name = "MysqlNoAnswerError";
  }
}

/** Options of {@linkcode connectMysql}. */
export interface ConnectMysqlOptions {
  /** Bound on connect plus the first query, in milliseconds. */
  readonly timeoutMs: number;
  /** Abandons the attempt (the half-open connection is closed) when it aborts. */
  readonly signal?: AbortSignal;
}

/** What the server said about itself when it first answered. */
export interface MysqlIdentity {
  /** `VERSION()`, e.g. `10.11.6-MariaDB-0+deb12u1`. */
  readonly serverVersion: string;
  /** `@@character_set_client` of the session (the worker needs utf8mb4). */
  readonly charset: string;
  /** `@@collation_connection` of the session. */
  readonly collation: string;
}

/** A connection that has answered its first query. */
export interface ConnectedMysql extends MysqlIdentity {
  readonly connection: mysql.Connection;
}

/** Anything that runs a query: a connection or a pool. */
export interface Queryable {
  query: mysql.Connection["query"];
}

const PROBE_SQL = "SELECT VERSION() AS version, @@character_set_client AS cs, " +
  "@@collation_connection AS co";

/**
 * Ask a connection or a pool who it is, within a deadline: the one "does MySQL answer"
 * probe of the daemon (its pool) and the tools (their connection).
 *
 * @param target Connection or pool.
 * @param timeoutMs Bound on the answer (and, for a pool, on getting a connection).
 * @returns Version, character set and collation.
 * @throws {Error} `no answer within … ms`, or the driver's error.
 */
export async function probeMysql(target: Queryable, timeoutMs: number): Promise<MysqlIdentity> {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new MysqlNoAnswerError(timeoutMs)),
    timeoutMs,
  );
  try {
    const [rows] = await unlessAborted(
      target.query<mysql.RowDataPacket[]>(PROBE_SQL),
      controller.signal,
      () => {},
    );
    return {
      serverVersion: String(rows[0]?.version ?? ""),
      charset: String(rows[0]?.cs ?? "unknown"),
      collation: String(rows[0]?.co ?? "unknown"),
    };
  } catch (err: unknown) {
    if (err instanceof MysqlInterrupted) throw controller.signal.reason;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Open a dedicated MySQL connection that answers the probe within a deadline: the
 * "does MySQL answer" probe of `cleanup` (5 s, docs/operations.md#cleanup-settings) and `status`. A
 * connection that completes after the deadline or an abort is closed as soon as it exists.
 *
 * @param options Connection options from {@linkcode mysqlOptionsFromUrl}.
 * @param limits Deadline and abort signal.
 * @returns The open connection and the server version; the caller closes it.
 * @throws {Error} `Cannot reach MySQL: no answer within … ms` on timeout, the driver's error
 *   when the server refuses or is unreachable; when `signal` aborts, an error the caller
 *   recognises by `signal.aborted`.
 */
export async function connectMysql(
  options: MysqlUrlOptions & mysql.ConnectionOptions,
  limits: ConnectMysqlOptions,
): Promise<ConnectedMysql> {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new MysqlNoAnswerError(limits.timeoutMs)),
    limits.timeoutMs,
  );
  const connecting = mysql.createConnection({
    ...options,
    connectTimeout: Math.min(options.connectTimeout ?? limits.timeoutMs, limits.timeoutMs),
  });
  let conn: mysql.Connection | undefined;
  const abandon = () => {
    if (conn !== undefined) closeMysqlNow(conn);
    // A connection that completes after we gave up is closed as soon as it exists.
    else void connecting.then(closeMysqlNow, () => {});
  };
  const signal = limits.signal === undefined
    ? controller.signal
    : AbortSignal.any([limits.signal, controller.signal]);
  try {
    conn = await unlessAborted(connecting, signal, abandon);
    const [rows] = await unlessAborted(
      conn.query<mysql.RowDataPacket[]>(PROBE_SQL),
      signal,
      abandon,
    );
    return {
      connection: conn,
      serverVersion: String(rows[0]?.version ?? ""),
      charset: String(rows[0]?.cs ?? "unknown"),
      collation: String(rows[0]?.co ?? "unknown"),
    };
  } catch (err: unknown) {
    if (err instanceof MysqlInterrupted && !(limits.signal?.aborted ?? false)) {
      throw new Error(`Cannot reach MySQL: ${errorMessage(controller.signal.reason)}`, {
        cause: controller.signal.reason,
      });
    }
    if (conn !== undefined) closeMysqlNow(conn);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
