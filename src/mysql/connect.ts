/**
 * Reaching MySQL, one way everywhere: a dedicated connection that must answer within a
 * deadline (the command-line tools), the same "does it answer" probe for the daemon's pool,
 * a polite close and a hard close that abandons a statement in flight; and the statements
 * `verify` and `losstest` run on their dedicated connection.
 *
 * @module
 */
import mysql from "mysql2/promise";
import { errorMessage } from "../log.ts";
import { waitingCannotFix } from "./errors.ts";
import type { TableName } from "./catalogue.ts";
import { quoteIdentifier } from "./ddl.ts";
import { destroyPoolSockets, destroySocket } from "./mysql2_internals.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { driverOptions, hostLabel, mysqlHosts, type MysqlUrlOptions, onHost } from "./url.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

/**
 * Settle with `promise`, or reject with a `WorkerError` coded `interrupted` as soon as `signal`
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
    reject(new WorkerError("interrupted", "Interrupted by a signal"));
  };
  if (signal.aborted) listener();
  else signal.addEventListener("abort", listener, { once: true });
  try {
    return await Promise.race([promise, aborted]);
  } finally {
    signal.removeEventListener("abort", listener);
  }
}

/** A dedicated connection of its own (a tool's, the in-order lock's); never a pooled one. */
export type MysqlConnection = mysql.Connection;

/**
 * Close a connection politely (COM_QUIT, so the server logs no aborted connection), or at once
 * when that fails.
 *
 * @param conn The connection; unusable afterwards.
 */
export async function endMysql(conn: MysqlConnection): Promise<void> {
  await conn.end().catch(() => closeMysqlNow(conn));
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
 * MySQL gave no answer within a deadline; its driver-style code sorts it with the refused and
 * reset connections (`unreachable`, see errors.ts), not with errors the server sent.
 */
function noAnswer(timeoutMs: number): WorkerError {
  return new WorkerError("TimedOut", `no answer within ${timeoutMs} ms`);
}

/** Options of {@linkcode connectMysql}. */
export interface ConnectMysqlOptions {
  /** Bound on connect plus the first query, in milliseconds. */
  readonly timeoutMs: number;
  /** Abandons the attempt (the half-open connection is closed) when it aborts. */
  readonly signal?: AbortSignal;
  /**
   * Values as stored, for tools that compare rows: BIGINT values beyond 2^53 arrive as exact
   * strings (smaller ones as numbers), dates and times as the server's text.
   */
  readonly exactValues?: boolean;
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
  /** `host:port` of the server that answered (the socket path for a socket). */
  readonly host: string;
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
    () => controller.abort(noAnswer(timeoutMs)),
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
    if (hasCode(err, "interrupted")) throw controller.signal.reason;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** What MariaDB's Galera node says of its readiness (SHOW GLOBAL STATUS names). */
const GALERA_READY_SQL = "SHOW GLOBAL STATUS WHERE Variable_name IN " +
  "('wsrep_ready', 'wsrep_local_state_comment')";

/** Errno MariaDB's Galera node answers statements with while it is not ready (errors.ts). */
const WSREP_NOT_READY_ERRNO = 1047;

/**
 * A Galera node that answered but is not `Synced` with `wsrep_ready` ON: it refuses
 * statements (1047), or is a donor or desynced and lags the cluster. Carries errno 1047 so that
 * errors.ts classifies it like the node's own refusal: `unavailable`.
 *
 * @param ready `wsrep_ready`.
 * @param state `wsrep_local_state_comment`.
 * @returns A `WSREP_NOT_READY` error.
 */
export function galeraNotReady(ready: string, state: string): WorkerError {
  const err = new WorkerError(
    "WSREP_NOT_READY",
    `the Galera node is not ready for writes (wsrep_ready=${ready}, ` +
      `wsrep_local_state_comment=${state}; needs ON and Synced)`,
  );
  return Object.assign(err, { errno: WSREP_NOT_READY_ERRNO });
}

/**
 * On a Galera node (`wsrep_on` ON), throw unless it is `Synced` with `wsrep_ready` ON
 * (docs/running.md#galera); on any other server, one cheap query and nothing else. Asked once
 * per new connection: the daemon's probes and every tool's connection go through it.
 *
 * @param conn A connection that has just answered.
 * @throws {WorkerError} (code `WSREP_NOT_READY`, errno 1047) When the node is not ready.
 */
async function checkGaleraReady(conn: Queryable): Promise<void> {
  // SHOW, not @@wsrep_on: MySQL has no such variable and would fail the SELECT.
  const [on] = await conn.query<mysql.RowDataPacket[]>("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'");
  if (String(on[0]?.Value ?? "OFF").toUpperCase() !== "ON") return;
  const [status] = await conn.query<mysql.RowDataPacket[]>(GALERA_READY_SQL);
  const value = (name: string) =>
    String(status.find((r) => r.Variable_name === name)?.Value ?? "unknown");
  const ready = value("wsrep_ready");
  const state = value("wsrep_local_state_comment");
  if (ready !== "ON" || state !== "Synced") throw galeraNotReady(ready, state);
}

/**
 * Open a dedicated MySQL connection that answers the probe within a deadline: the
 * "does MySQL answer" probe of `cleanup` (5 s, docs/operations.md#cleanup-settings) and `status`. A
 * connection that completes after the deadline or an abort is closed as soon as it exists.
 *
 * With several hosts in the URL, they are tried in the list's order, each within the deadline,
 * and the first that answers is used (what `schema`, `cleanup`, `status`, `verify` and
 * `losstest` connect to); when none answers, the error names each host's failure and is sorted
 * (mysqlConnectProblem) by a host's refusal of the login if any, else by the first host's
 * ({@link noHostAnswers}).
 *
 * @param options Connection options from {@linkcode mysqlOptionsFromUrl}.
 * @param limits Deadline and abort signal.
 * @returns The open connection, the server version and the host; the caller closes it.
 * @throws {Error} `Cannot reach MySQL: no answer within … ms` on timeout, the driver's error
 *   when the server refuses or is unreachable; when `signal` aborts, an error the caller
 *   recognises by `signal.aborted`.
 */
export async function connectMysql(
  options: MysqlUrlOptions,
  limits: ConnectMysqlOptions,
): Promise<ConnectedMysql> {
  const hosts = mysqlHosts(options);
  if (hosts.length < 2) {
    const host = hosts[0] === undefined ? (options.socketPath ?? "") : hostLabel(hosts[0]);
    return { ...(await connectOne(driverOptions(options), limits)), host };
  }
  const failures: HostFailure[] = [];
  for (const h of hosts) {
    try {
      return {
        ...(await connectOne(driverOptions(onHost(options, h)), limits)),
        host: hostLabel(h),
      };
    } catch (err: unknown) {
      if (limits.signal?.aborted ?? false) throw err;
      failures.push({ host: hostLabel(h), err });
    }
  }
  throw noHostAnswers(failures);
}

/** Why one host of `--mysql-url` could not be used. */
export interface HostFailure {
  /** `host:port`. */
  readonly host: string;
  /** What connecting to it (or probing it) rejected with. */
  readonly err: unknown;
}

/**
 * The error of a host list none of whose hosts could be used, naming each host's failure.
 * When a host refused the login (or another failure {@link waitingCannotFix}), that refusal leads
 * the message and is the cause, so it is sorted and reported like the refusal of a single host:
 * a dead first host must not hide a wrong password behind "does not answer", and a daemon
 * must not wait for what waiting cannot fix. Otherwise the first host's failure is the cause.
 *
 * @param failures Each host's failure, in the list's order.
 * @returns The error to throw.
 */
export function noHostAnswers(failures: readonly HostFailure[]): Error {
  const refused = failures.filter((f) => waitingCannotFix(f.err));
  const listed = [...refused, ...failures.filter((f) => !waitingCannotFix(f.err))]
    .map((f) => `${f.host}: ${errorMessage(f.err)}`)
    .join("; ");
  const cause = (refused[0] ?? failures[0])?.err;
  return refused.length > 0
    ? new Error(listed, { cause })
    : new Error(`no host of the list answers (${listed})`, { cause });
}

async function connectOne(
  options: MysqlUrlOptions,
  limits: ConnectMysqlOptions,
): Promise<Omit<ConnectedMysql, "host">> {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(noAnswer(limits.timeoutMs)),
    limits.timeoutMs,
  );
  const connecting = mysql.createConnection({
    ...options,
    ...(limits.exactValues === true
      ? { supportBigNumbers: true, bigNumberStrings: false, dateStrings: true }
      : {}),
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
    await unlessAborted(checkGaleraReady(conn), signal, abandon);
    return {
      connection: conn,
      serverVersion: String(rows[0]?.version ?? ""),
      charset: String(rows[0]?.cs ?? "unknown"),
      collation: String(rows[0]?.co ?? "unknown"),
    };
  } catch (err: unknown) {
    if (hasCode(err, "interrupted") && !(limits.signal?.aborted ?? false)) {
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

// What the tools read and delete on their dedicated connection.

/** Make the session refuse every write from here on (a tool that must never write). */
export async function makeSessionReadOnly(conn: MysqlConnection): Promise<void> {
  await conn.query("SET SESSION TRANSACTION READ ONLY");
}

/** Column type codes of MYSQL_TYPE_FLOAT and MYSQL_TYPE_DOUBLE in a result's field list. */
const FLOAT_TYPES: ReadonlySet<number> = new Set([4, 5]);

/** The newest rows of a table, as {@linkcode selectNewestRows} read them. */
export interface NewestRows {
  readonly rows: Readonly<Record<string, unknown>>[];
  /** The result's columns, in the table's order. */
  readonly columns: readonly string[];
  /** The FLOAT and DOUBLE columns (compared with a tolerance). */
  readonly doubles: ReadonlySet<string>;
}

/**
 * The newest rows of a table: every column, sorted by `order` descending.
 *
 * @param conn A connection.
 * @param table Table name from the catalogue.
 * @param order Columns that sort the rows, newest first; none reads the table's order.
 * @param limit Most rows.
 * @returns The rows, the result's columns and which of them hold floating-point numbers.
 */
export async function selectNewestRows(
  conn: MysqlConnection,
  table: TableName,
  order: readonly string[],
  limit: number,
): Promise<NewestRows> {
  const orderBy = order.map((c) => `${quoteIdentifier(c)} DESC`).join(", ");
  const sql = `SELECT * FROM ${quoteIdentifier(table)}${
    orderBy === "" ? "" : ` ORDER BY ${orderBy}`
  } LIMIT ?`;
  const [rows, fields] = await conn.query<mysql.RowDataPacket[]>(sql, [limit]);
  return {
    rows,
    columns: fields.map((f) => f.name),
    doubles: new Set(
      fields.filter((f) => FLOAT_TYPES.has(f.columnType ?? f.type ?? -1)).map((f) => f.name),
    ),
  };
}

// The losstest markers are host names `<prefix><sequence number>` in the host check table.
// The table's collation (utf8mb4_general_ci on MariaDB) compares case- and accent-
// insensitively, so run ids that differ only in that way address the same rows; LIKE is
// evaluated the same way, which keeps `losstest verify` and `cleanup` consistent with each other.

/**
 * The run sizes a losstest run's events record: the text after the last `separator` of each
 * distinct `losstest run …` output.
 *
 * @param conn A connection.
 * @param table The table the markers are in.
 * @param separator What precedes the size in the output.
 * @param prefix The run's host name prefix.
 * @param timeoutMs Bound on the statement.
 * @returns The distinct texts, unchecked.
 */
export async function selectLosstestRunSizes(
  conn: MysqlConnection,
  table: TableName,
  separator: string,
  prefix: string,
  timeoutMs: number,
): Promise<string[]> {
  const [rows] = await conn.query<mysql.RowDataPacket[]>({
    sql: `SELECT DISTINCT SUBSTRING_INDEX(output, ?, -1) AS c FROM ${table}
  WHERE hostname LIKE ? AND output LIKE 'losstest run %'`,
    values: [separator, `${prefix}%`],
    timeout: timeoutMs,
  });
  return rows.map((r) => String(r.c));
}

/** How many rows hold one losstest marker. */
export interface MarkerCount {
  readonly hostname: string;
  readonly n: number;
}

/**
 * One page of the rows per marker of a losstest run, in host name order.
 *
 * @param conn A connection.
 * @param table The table the markers are in.
 * @param prefix The run's host name prefix.
 * @param after The last host name of the previous page ("" for the first).
 * @param pageSize Most markers.
 * @param timeoutMs Bound on the statement.
 * @returns The markers after `after`; fewer than `pageSize` on the last page.
 */
export async function countLosstestMarkers(
  conn: MysqlConnection,
  table: TableName,
  prefix: string,
  after: string,
  pageSize: number,
  timeoutMs: number,
): Promise<MarkerCount[]> {
  const [rows] = await conn.query<mysql.RowDataPacket[]>({
    sql: `SELECT hostname, COUNT(*) AS n FROM ${table}
  WHERE hostname LIKE ? AND hostname > ? GROUP BY hostname ORDER BY hostname LIMIT ?`,
    values: [`${prefix}%`, after, pageSize],
    timeout: timeoutMs,
  });
  return rows.map((r) => ({ hostname: String(r.hostname), n: Number(r.n) }));
}

/**
 * Delete one batch of a losstest run's rows: those whose host name is the prefix followed by
 * digits only (not a run whose id extends this one's).
 *
 * @param conn A connection.
 * @param table The table the markers are in.
 * @param prefix The run's host name prefix.
 * @param batch Most rows deleted.
 * @param timeoutMs Bound on the statement.
 * @returns Rows deleted; fewer than `batch` once the run is gone.
 */
export async function deleteLosstestBatch(
  conn: MysqlConnection,
  table: TableName,
  prefix: string,
  batch: number,
  timeoutMs: number,
): Promise<number> {
  const [result] = await conn.query<mysql.ResultSetHeader>({
    sql: `DELETE FROM ${table}
  WHERE hostname LIKE ? AND SUBSTRING(hostname, CHAR_LENGTH(?) + 1) REGEXP '^[0-9]+$'
  LIMIT ${batch}`,
    values: [`${prefix}%`, prefix],
    timeout: timeoutMs,
  });
  return result.affectedRows;
}
