/**
 * The one place that sorts MySQL failures into what the writers do about
 * them (D7):
 *
 * - `lock`: retried a few times, then held;
 * - `unavailable`: the server cannot take writes right now (unreachable,
 *   shutting down, read-only, full, privileges revoked, statement timeout):
 *   held and retried until it can or the process stops, `db_available` 0;
 * - `row`: the server (or the driver) refused values of the rows sent: the
 *   batch is split by halves until the offending rows are isolated and
 *   dead-lettered;
 * - `statement`: the server refused the statement for a reason that names
 *   neither the rows nor its own state (unknown column, missing table, …).
 *   The batch is split like for `row`, but when both halves of a split fail
 *   with the same such error it is not the rows' fault: the batch is held
 *   like for `unavailable` (see writer.ts).
 *
 * Both wrong directions are harmful. A row error taken for `unavailable`
 * is retried forever and stalls its table; an outage taken for `row`
 * dead-letters good rows (a 15 s read-only window once dead-lettered
 * thousands). The tables below are pinned errno by errno in tests/mysql/errors_test.ts.
 *
 * @module
 */

/** What a writer does about a failed statement. */
export type MysqlErrorKind = "lock" | "unavailable" | "row" | "statement";

/** Deadlock (1213) and lock wait timeout (1205): roll back one statement; timing-dependent. */
const LOCK_ERRNOS: ReadonlySet<number> = new Set([1205, 1213]);

/**
 * Server errnos that say "not now" whatever the rows are. Each is explained
 * in tests/mysql/errors_test.ts; the groups:
 * - connection: 1040 too many connections, 1203 max_user_connections,
 *   1226 max_queries_per_hour & co., 1053 server shutdown, 1927 connection
 *   killed, 1317 query interrupted (KILL QUERY), 1158–1161 network
 *   read/write errors reported by the server, 2006/2013 gone away / lost (client
 *   numbers, in case a driver reports them);
 * - Galera: 1047, which MariaDB's Galera node answers to every statement while it is not ready
 *   for clients (`wsrep_ready` OFF: not in the primary component, or still joining); the node
 *   is down for this worker until it is `Synced` again (docs/running.md#galera);
 * - read-only: 1290 read_only / super_read_only, 1836 InnoDB read-only mode,
 *   1792 read-only transaction (a proxy routing writes to a replica);
 * - space and resources: 1114 table full (disk or tablespace limit), 1021 disk
 *   full, 1026 error writing a file, 1037/1038/1041 out of memory / resources,
 *   1135 cannot create a thread, 1461 max_prepared_stmt_count reached;
 * - privileges: 1142/1143 table/column access denied, 1044 database access
 *   denied, 1045 login refused, 1227 missing privilege, 1130 host not allowed,
 *   1129 host blocked, 1820/1862 password expired, 4151 account locked;
 * - statement timeout: 1969 max_statement_time (MariaDB), 3024
 *   max_execution_time (MySQL).
 */
const UNAVAILABLE_ERRNOS: ReadonlySet<number> = new Set([
  1040,
  1203,
  1226,
  1053,
  1927,
  1317,
  1158,
  1159,
  1160,
  1161,
  2006,
  2013,
  1047,
  1290,
  1836,
  1792,
  1114,
  1021,
  1026,
  1037,
  1038,
  1041,
  1135,
  1461,
  1142,
  1143,
  1044,
  1045,
  1227,
  1130,
  1129,
  1820,
  1862,
  4151,
  1969,
  3024,
]);

/**
 * Row errors whose SQL state is not of class 22 (data exception) or 23
 * (integrity constraint), which are row errors by definition: 1364 no
 * default for a field, 1265 data truncated, 1300 invalid character string,
 * 1411 wrong value for a type, 3819 check constraint (MySQL), 1526 no
 * partition for the value, 1118 row size too large; and errors of the
 * statement's size that smaller statements cure (halving ends at the one
 * row too big on its own): 1153 packet larger than max_allowed_packet, 1197
 * binlog cache too small, 1390 too many placeholders.
 */
const ROW_ERRNOS: ReadonlySet<number> = new Set([
  1364,
  1265,
  1300,
  1411,
  3819,
  1526,
  1118,
  1153,
  1197,
  1390,
]);

/** Code of {@link StatementTimeoutError}. */
const STATEMENT_TIMEOUT_CODE = "STATEMENT_TIMEOUT";

/**
 * Driver/socket codes meaning the connection failed or did not answer in time
 * (docs/writers.md#retry-policy).
 */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "PROTOCOL_CONNECTION_LOST",
  "PROTOCOL_SEQUENCE_TIMEOUT",
  "ER_CON_COUNT_ERROR",
  "ER_SERVER_SHUTDOWN",
  "ER_CONNECTION_KILLED",
  "POOL_CLOSED",
  "POOL_ENQUEUELIMIT",
  "ConnectionRefused",
  "ConnectionReset",
  "BrokenPipe",
  "NotConnected",
  "TimedOut",
  STATEMENT_TIMEOUT_CODE,
]);

interface MysqlLikeError {
  readonly code?: unknown;
  readonly errno?: unknown;
  readonly fatal?: unknown;
  readonly sqlState?: unknown;
}

/**
 * A statement did not finish within `--mysql-statement-timeout` (raised by the executor).
 * A class, not a `WorkerError` code: availability.ts branches on it and logs its `timeoutMs`.
 */
export class StatementTimeoutError extends Error {
  /** Driver-style code, classified `unavailable`. */
  readonly code = STATEMENT_TIMEOUT_CODE;
  readonly timeoutMs: number;

  /** @param timeoutMs The bound that was exceeded. */
  constructor(timeoutMs: number) {
    super(`MySQL did not answer the statement within ${timeoutMs / 1000} s`);
    this.name = "StatementTimeoutError";
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Classify an error thrown by mysql2 (or by the executor around it).
 *
 * @param err Anything a query rejected with.
 * @returns What the writers do about it.
 */
export function classifyMysqlError(err: unknown): MysqlErrorKind {
  if (typeof err !== "object" || err === null) return "row";
  const e = err as MysqlLikeError;
  const errno = typeof e.errno === "number" ? e.errno : undefined;
  const code = typeof e.code === "string" ? e.code : undefined;
  const sqlState = typeof e.sqlState === "string" ? e.sqlState : undefined;
  if (errno !== undefined && LOCK_ERRNOS.has(errno)) return "lock";
  if (errno !== undefined && UNAVAILABLE_ERRNOS.has(errno)) return "unavailable";
  if (errno !== undefined && ROW_ERRNOS.has(errno)) return "row";
  if (sqlState !== undefined && /^2[23]/.test(sqlState)) return "row";
  if (code !== undefined && UNAVAILABLE_CODES.has(code)) return "unavailable";
  // Any other server errno with a SQL state is the server's verdict on the
  // statement: deterministic, but not necessarily about its rows.
  if (errno !== undefined && errno > 0 && sqlState !== undefined) return "statement";
  // Errors the driver flags fatal leave the connection unusable (socket-level).
  if (e.fatal === true) return "unavailable";
  // Raised before the statement reached the server (a value the driver
  // cannot bind, a bug in building the rows): about the rows sent. Never
  // held, so such a bug cannot stall a table.
  return "row";
}

/**
 * Whether two failures are the same error (same errno or driver code), for
 * the "both halves failed alike" test.
 *
 * @param a One failure.
 * @param b The other.
 * @returns True when their codes match and neither is `unknown`.
 */
export function sameMysqlError(a: MysqlWriteError, b: MysqlWriteError): boolean {
  return a.code === b.code && a.code !== "unknown";
}

/**
 * A statement failed; carries the table and the classification. A class, not a `WorkerError`
 * code: the writer, the retry loop and the downtime writer branch on it and on its `kind`.
 */
export class MysqlWriteError extends Error {
  readonly table: string;
  readonly kind: MysqlErrorKind;
  /** MySQL errno or driver code, for logs. */
  readonly code: string;

  /**
   * @param table Table the statement wrote to.
   * @param cause The driver's error.
   */
  constructor(table: string, cause: unknown) {
    const kind = classifyMysqlError(cause);
    const e = (typeof cause === "object" && cause !== null ? cause : {}) as MysqlLikeError;
    const code = typeof e.errno === "number" && e.errno > 0
      ? String(e.errno)
      : typeof e.code === "string"
      ? e.code
      : "unknown";
    super(
      `Cannot write to "${table}" (${kind}, ${code}): ${
        cause instanceof Error ? cause.message : String(cause)
      }`,
      { cause },
    );
    this.name = "MysqlWriteError";
    this.table = table;
    this.kind = kind;
    this.code = code;
  }
}

/**
 * Why MySQL could not be used at all when a command or the daemon first connected: each
 * needs a different fix, so each gets its own words (a wrong password is not an outage).
 *
 * - `unknown_database`: the server answered, the database in the URL does not exist;
 * - `access_denied`: the server answered and refused the user (password, host, grants);
 * - `unreachable`: nothing answered (refused, reset, name not resolved, timeout);
 * - `failed`: the server answered with another error.
 */
export type MysqlConnectProblem = "unknown_database" | "access_denied" | "unreachable" | "failed";

/** 1049 unknown database. */
const UNKNOWN_DATABASE_ERRNO = 1049;

/**
 * The server refused this user: 1045 wrong password, 1044 no access to the database, 1698
 * access denied (unix_socket plugin), 1130 host not allowed, 1820/1862 password expired,
 * 4151 account locked.
 */
const ACCESS_DENIED_ERRNOS: ReadonlySet<number> = new Set([
  1044,
  1045,
  1698,
  1130,
  1820,
  1862,
  4151,
]);

/** Codes of a connection that never got an answer (Node-style and Deno-style names). */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
  "PROTOCOL_CONNECTION_LOST",
  "PROTOCOL_SEQUENCE_TIMEOUT",
  "ConnectionRefused",
  "ConnectionReset",
  "ConnectionAborted",
  "BrokenPipe",
  "NotConnected",
  "TimedOut",
  "AddrNotAvailable",
]);

/** The first error in the cause chain that carries an errno or a code. */
function driverError(err: unknown): MysqlLikeError | undefined {
  let current: unknown = err;
  for (let depth = 0; depth < 4 && typeof current === "object" && current !== null; depth++) {
    const e = current as MysqlLikeError & { cause?: unknown };
    if (typeof e.errno === "number" || typeof e.code === "string") return e;
    current = e.cause;
  }
  return undefined;
}

/**
 * MySQL errors that waiting does not cure: the credentials, the grants for this host, the
 * database name or the connection's security settings are wrong and stay wrong until someone
 * changes them. Everything else (refused or silent port, timeout, too many connections, a
 * server shutting down, an unresolvable host name) is waited for.
 */
const WAITING_CANNOT_FIX_ERRNOS: ReadonlySet<number> = new Set([
  1044, // access denied to the database
  1045, // login refused
  1049, // unknown database
  1130, // host not allowed to connect
  1251, // client does not support the authentication protocol
  1698, // access denied (unix socket authentication)
  3159, // secure transport required
]);

/**
 * Whether a failure to connect is one that waiting for MySQL cannot fix (the daemon's start
 * ends on it instead of waiting); looks through the causes, so a "no host of the list answers"
 * error counts when a host refused the login.
 *
 * @param err What the connection attempt or the first query rejected with.
 * @returns True for a refusal that stays until someone changes the configuration.
 */
export function waitingCannotFix(err: unknown): boolean {
  const errno = driverError(err)?.errno;
  return typeof errno === "number" && WAITING_CANNOT_FIX_ERRNOS.has(errno);
}

/**
 * Sort a failure to connect (or of the first query) into what the operator has to fix.
 *
 * @param err What the connection attempt rejected with.
 * @returns The problem.
 */
export function mysqlConnectProblem(err: unknown): MysqlConnectProblem {
  const e = driverError(err);
  if (e === undefined) return "failed";
  if (e.errno === UNKNOWN_DATABASE_ERRNO) return "unknown_database";
  if (typeof e.errno === "number" && ACCESS_DENIED_ERRNOS.has(e.errno)) return "access_denied";
  if (typeof e.code === "string" && UNREACHABLE_CODES.has(e.code)) return "unreachable";
  // A socket error with a negative errno (Node's -111) and no server SQL state.
  if (e.fatal === true && e.sqlState === undefined) return "unreachable";
  return "failed";
}

/**
 * One sentence for an operator: what happened at which server, and what to do about it.
 *
 * @param err What the connection attempt rejected with.
 * @param shownUrl The MySQL URL with its password masked.
 * @returns E.g. `database "se" does not exist at mysql://…/se: create it with …`.
 */
export function describeMysqlConnectFailure(err: unknown, shownUrl: string): string {
  const detail = err instanceof Error ? err.message : String(err);
  switch (mysqlConnectProblem(err)) {
    case "unknown_database": {
      const name = /Unknown database '([^']*)'/.exec(detail)?.[1];
      return `database ${
        name === undefined ? "" : `"${name}" `
      }does not exist at ${shownUrl}: create it with ` +
        `"statusengine-worker schema --create-database" (same --mysql-url), or correct the ` +
        `database name in --mysql-url`;
    }
    case "access_denied":
      return `MySQL at ${shownUrl} refused the login (${detail}): check the user and password ` +
        `in --mysql-url (STATUSENGINE_MYSQL_URL) and the user's grants on the database`;
    case "unreachable":
      return `MySQL at ${shownUrl} does not answer (${detail}): check that it runs and that ` +
        `host and port in --mysql-url are right`;
    case "failed":
      return `MySQL at ${shownUrl} refused the connection: ${detail}`;
  }
}
