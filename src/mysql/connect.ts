/**
 * Reaching MySQL, one way everywhere: a dedicated connection that must answer within a deadline,
 * the same probe for the daemon's pool, a polite and a hard close; and the statements `verify`
 * and `losstest` run on their dedicated connection.
 *
 * @module
 */
import mysql from "mysql2/promise";
import { errorMessage } from "../log.ts";
import { waitingCannotFix } from "./errors.ts";
import type { TableName } from "./catalogue.ts";
import { type QueryConnection, quoteIdentifier } from "./ddl.ts";
import { destroyPoolSockets, destroySocket } from "./mysql2_internals.ts";
import { abortable, deadline, settledWithin } from "../util/async.ts";
import {
  driverOptions,
  hostLabel,
  mysqlHosts,
  type MysqlUrlOptions,
  onHost,
} from "../util/mysql_url.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

/**
 * Settle with `promise`, or reject with a `WorkerError` coded `interrupted` as soon as `signal`
 * aborts, calling `onAbort` first. The promise runs on ({@link abortable}).
 */
export async function unlessAborted<T>(
  promise: Promise<T>,
  signal: AbortSignal,
  onAbort: () => void,
): Promise<T> {
  try {
    return await abortable(promise, signal);
  } catch (err: unknown) {
    if (!signal.aborted || err !== signal.reason) throw err;
    onAbort();
    throw new WorkerError("interrupted", "Interrupted by a signal");
  }
}

/** A dedicated connection of its own (a tool's, the in-order lock's); never a pooled one. */
export type MysqlConnection = mysql.Connection;

/** Close politely (COM_QUIT: the server logs no aborted connection), else at once. */
export async function endMysql(conn: MysqlConnection): Promise<void> {
  await conn.end().catch(() => closeMysqlNow(conn));
}

/**
 * Close at once, abandoning the statement in flight (the server completes or rolls back that
 * autocommit statement): mysql2's `destroy()` only half-closes the socket and would still wait
 * for it (docs/operations.md#cleanup-exit). Idempotent.
 */
export function closeMysqlNow(conn: mysql.Connection): void {
  for (const close of [() => destroySocket(conn), () => conn.destroy()]) {
    try {
      close();
    } catch {
      // already closed
    }
  }
}

/**
 * End a pool: COM_QUIT on every connection within `timeoutMs`, then destroy the sockets still
 * open (a statement a frozen MySQL never answers), so nothing keeps the process alive.
 */
export async function endPool(pool: mysql.Pool, timeoutMs: number): Promise<void> {
  using limit = deadline(timeoutMs);
  await settledWithin(pool.end(), limit.signal);
  destroyPoolSockets(pool);
}

/** Its driver-style code sorts it with refused and reset connections (errors.ts). */
function noAnswer(timeoutMs: number): WorkerError {
  return new WorkerError("TimedOut", `no answer within ${timeoutMs} ms`);
}

export interface ConnectMysqlOptions {
  /** Bound on connect plus the first query, in milliseconds. */
  readonly timeoutMs: number;
  /** Abandons the attempt (the half-open connection is closed) when it aborts. */
  readonly signal?: AbortSignal;
  /** Values as stored, for tools that compare rows: big BIGINTs as strings, dates as text. */
  readonly exactValues?: boolean;
}

/** What the server said about itself when it first answered (the worker needs utf8mb4). */
export interface MysqlIdentity {
  readonly serverVersion: string;
  readonly charset: string;
  readonly collation: string;
}

export interface ConnectedMysql extends MysqlIdentity {
  readonly connection: mysql.Connection;
  /** `host:port` of the server that answered (the socket path for a socket). */
  readonly host: string;
}

/**
 * The first statement of every connection (the writers' pool, the leases', the tools'): strict
 * mode for the session whatever the server's global `sql_mode`, so that a value the writer could
 * not fit (a narrowed column, an emoji for a utf8mb3 column) is refused and dead-lettered (D6, D7)
 * rather than cut or replaced with a mere warning. The server's other modes stay. Not
 * STRICT_ALL_TABLES: on a MyISAM table it keeps the rows of a multi-row INSERT before the one
 * refused, and the writer's split would write them again. A session variable, in the
 * `CONCAT(@@sql_mode, …)` form ProxySQL tracks per client session.
 */
export const STRICT_SESSION_SQL =
  "SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES')";

const PROBE_SQL = "SELECT VERSION() AS version, @@character_set_client AS cs, " +
  "@@collation_connection AS co";

function identity(rows: mysql.RowDataPacket[]): MysqlIdentity {
  return {
    serverVersion: String(rows[0]?.version ?? ""),
    charset: String(rows[0]?.cs ?? "unknown"),
    collation: String(rows[0]?.co ?? "unknown"),
  };
}

/**
 * Ask a connection or a pool who it is within `timeoutMs` (for a pool, getting a connection
 * included): the one "does MySQL answer" probe of the daemon and the tools.
 */
export async function probeMysql(
  target: QueryConnection,
  timeoutMs: number,
): Promise<MysqlIdentity> {
  using limit = deadline(timeoutMs);
  try {
    const query = target.query<mysql.RowDataPacket[]>(PROBE_SQL);
    return identity((await unlessAborted(query, limit.signal, () => {}))[0]);
  } catch (err: unknown) {
    throw hasCode(err, "interrupted") ? noAnswer(timeoutMs) : err;
  }
}

const GALERA_READY_SQL = "SHOW GLOBAL STATUS WHERE Variable_name IN " +
  "('wsrep_ready', 'wsrep_local_state_comment')";

/** Errno MariaDB's Galera node answers statements with while it is not ready (errors.ts). */
const WSREP_NOT_READY_ERRNO = 1047;

/**
 * A Galera node that answered but is not `Synced` with `wsrep_ready` ON: it refuses statements,
 * or is a donor or desynced and lags the cluster. Errno 1047 classifies it `unavailable`.
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
 * (docs/running.md#galera); elsewhere one cheap query. Asked once per new connection.
 */
async function checkGaleraReady(conn: QueryConnection): Promise<void> {
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
 * Open a dedicated connection that answers the probe within a deadline (the tools). Several hosts
 * are tried in the list's order, each within the deadline; the first that answers is used, else
 * {@link noHostAnswers}. On abort, the caller recognises the error by `signal.aborted`.
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
      return { ...(await connectOne(onHost(options, h), limits)), host: hostLabel(h) };
    } catch (err: unknown) {
      if (limits.signal?.aborted ?? false) throw err;
      failures.push({ host: hostLabel(h), err });
    }
  }
  throw noHostAnswers(failures);
}

/** Why one host (`host:port`) of `--mysql-url` could not be used. */
export interface HostFailure {
  readonly host: string;
  readonly err: unknown;
}

/**
 * The error of a host list none of whose hosts could be used, naming each host's failure. A
 * failure {@link waitingCannotFix} (a refused login) leads and is the cause: a dead first host
 * must not hide a wrong password, nor make a daemon wait for what waiting cannot fix.
 */
export function noHostAnswers(failures: readonly HostFailure[]): Error {
  const refused = failures.filter((f) => waitingCannotFix(f.err));
  const listed = [...refused, ...failures.filter((f) => !waitingCannotFix(f.err))]
    .map((f) => `${f.host}: ${errorMessage(f.err)}`)
    .join("; ");
  const cause = (refused[0] ?? failures[0])?.err;
  const text = refused.length > 0 ? listed : `no host of the list answers (${listed})`;
  return new Error(text, { cause });
}

async function connectOne(
  options: MysqlUrlOptions,
  limits: ConnectMysqlOptions,
): Promise<Omit<ConnectedMysql, "host">> {
  using limit = deadline(limits.timeoutMs, limits.signal);
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
  const { signal } = limit;
  try {
    conn = await unlessAborted(connecting, signal, abandon);
    await unlessAborted(conn.query(STRICT_SESSION_SQL), signal, abandon);
    const query = conn.query<mysql.RowDataPacket[]>(PROBE_SQL);
    const [rows] = await unlessAborted(query, signal, abandon);
    await unlessAborted(checkGaleraReady(conn), signal, abandon);
    return { connection: conn, ...identity(rows) };
  } catch (err: unknown) {
    if (hasCode(err, "interrupted") && !(limits.signal?.aborted ?? false)) {
      const timedOut = noAnswer(limits.timeoutMs);
      throw new Error(`Cannot reach MySQL: ${timedOut.message}`, { cause: timedOut });
    }
    if (conn !== undefined) closeMysqlNow(conn);
    throw err;
  }
}

/** Make the session refuse every write from here on (a tool that must never write). */
export async function makeSessionReadOnly(conn: MysqlConnection): Promise<void> {
  await conn.query("SET SESSION TRANSACTION READ ONLY");
}

/** MYSQL_TYPE_FLOAT and MYSQL_TYPE_DOUBLE. */
const FLOAT_TYPES: ReadonlySet<number> = new Set([4, 5]);

export interface NewestRows {
  readonly rows: Readonly<Record<string, unknown>>[];
  /** The result's columns, in the table's order. */
  readonly columns: readonly string[];
  /** The FLOAT and DOUBLE columns (compared with a tolerance). */
  readonly doubles: ReadonlySet<string>;
}

/**
 * Up to `limit` rows, sorted by `order` (not empty) descending, then by its bytes: values the
 * collation calls equal ('x' and 'X') would else leave the order, and so where two databases
 * holding the same rows cut their windows, to chance.
 */
export async function selectNewestRows(
  conn: MysqlConnection,
  table: TableName,
  order: readonly string[],
  limit: number,
): Promise<NewestRows> {
  const bytes = order.map((c) => `CAST(${quoteIdentifier(c)} AS BINARY)`);
  const orderBy = [...order.map(quoteIdentifier), ...bytes].map((c) => `${c} DESC`).join(", ");
  const sql = `SELECT * FROM ${quoteIdentifier(table)} ORDER BY ${orderBy} LIMIT ?`;
  const [rows, fields] = await conn.query<mysql.RowDataPacket[]>(sql, [limit]);
  return {
    rows,
    columns: fields.map((f) => f.name),
    doubles: new Set(
      fields.filter((f) => FLOAT_TYPES.has(f.columnType ?? f.type ?? -1)).map((f) => f.name),
    ),
  };
}

/**
 * The losstest markers are host names `<prefix><sequence number>` (`hostname`, the first key
 * column). LIKE compares in the table's collation (case- and accent-insensitive on MariaDB): run
 * ids differing only so address the same rows, in `losstest verify` and `cleanup` alike.
 */
export const LOSSTEST_TABLE = "statusengine_hostchecks";

/**
 * The run sizes a losstest run's events record: the distinct texts after `separator` in the
 * outputs starting with `outputPrefix`, which names the run (a run whose id extends this one's
 * has markers of this prefix too, but outputs of its own).
 */
export async function selectLosstestRunSizes(
  conn: MysqlConnection,
  separator: string,
  prefix: string,
  outputPrefix: string,
  timeoutMs: number,
): Promise<string[]> {
  const [rows] = await conn.query<mysql.RowDataPacket[]>({
    sql: `SELECT DISTINCT SUBSTRING_INDEX(output, ?, -1) AS c FROM ${LOSSTEST_TABLE}
  WHERE hostname LIKE ? AND output LIKE ?`,
    values: [separator, `${prefix}%`, `${outputPrefix}%`],
    timeout: timeoutMs,
  });
  return rows.map((r) => String(r.c));
}

/** One page of the rows per marker of a losstest run after host name `after`, in order. */
export async function countLosstestMarkers(
  conn: MysqlConnection,
  prefix: string,
  after: string,
  pageSize: number,
  timeoutMs: number,
): Promise<{ hostname: string; n: number }[]> {
  const [rows] = await conn.query<mysql.RowDataPacket[]>({
    sql: `SELECT hostname, COUNT(*) AS n FROM ${LOSSTEST_TABLE}
  WHERE hostname LIKE ? AND hostname > ? GROUP BY hostname ORDER BY hostname LIMIT ?`,
    values: [`${prefix}%`, after, pageSize],
    timeout: timeoutMs,
  });
  return rows.map((r) => ({ hostname: String(r.hostname), n: Number(r.n) }));
}

/**
 * Delete up to `batch` rows of a losstest run: host names of the prefix followed by digits only
 * (not a run whose id extends this one's). Returns how many went.
 */
export async function deleteLosstestBatch(
  conn: MysqlConnection,
  prefix: string,
  batch: number,
  timeoutMs: number,
): Promise<number> {
  const [result] = await conn.query<mysql.ResultSetHeader>({
    sql: `DELETE FROM ${LOSSTEST_TABLE}
  WHERE hostname LIKE ? AND SUBSTRING(hostname, CHAR_LENGTH(?) + 1) REGEXP '^[0-9]+$'
  LIMIT ${batch}`,
    values: [`${prefix}%`, prefix],
    timeout: timeoutMs,
  });
  return result.affectedRows;
}
