/**
 * The one place that sorts MySQL failures into what the writers do about them (D7,
 * docs/writers.md#retry-policy): a row error taken for `unavailable` stalls its table forever; an
 * outage taken for `row` dead-letters good rows. Pinned errno by errno in
 * tests/mysql/errors_test.ts.
 *
 * @module
 */

/**
 * What a writer does about a failed statement: `lock` retried, then held; `unavailable` held
 * until MySQL takes it; `row` split by halves down to the rejected rows, which are dead-lettered;
 * `statement` split like `row`, but held when both halves fail alike (writer.ts).
 */
export type MysqlErrorKind = "lock" | "unavailable" | "row" | "statement";

const numbers = (...groups: string[]): ReadonlySet<number> =>
  new Set(groups.join(" ").split(" ").map(Number));
const words = (list: string): ReadonlySet<string> => new Set(list.split(" "));

/**
 * Deadlock (1213) and lock wait timeout (1205) roll back one statement; 1615 (prepared statement
 * needs to be re-prepared) comes from DDL such as `cleanup`'s partition changes on the table in the
 * middle of the statement. All timing-dependent and about no row: sent again, never dead-lettered.
 */
const LOCK_ERRNOS = numbers("1205 1213 1615");

/** Server errnos that say "not now" whatever the rows are (each explained in errors_test.ts). */
const UNAVAILABLE_ERRNOS = numbers(
  // Connection: too many, limits per user, shutdown, killed, interrupted, network errors the
  // server reports, gone away / lost (client numbers, in case a driver reports them).
  "1040 1203 1226 1053 1927 1317 1158 1159 1160 1161 2006 2013",
  // A Galera node not ready for clients (wsrep_ready OFF): down for this worker until it is
  // Synced again (docs/running.md#galera).
  "1047",
  "1290 1836 1792", // read-only: read_only, InnoDB read-only, read-only transaction (a proxy)
  "1114 1021 1026 1037 1038 1041 1135 1461", // space and resources (disk, memory, threads)
  "1142 1143 1044 1045 1227 1130 1129 1820 1862 4151", // privileges, login, expired, locked
  "1969 3024", // statement timeout: max_statement_time (MariaDB), max_execution_time (MySQL)
);

/**
 * Row errors whose SQL state is not of class 22 or 23 (row errors by definition): truncated,
 * invalid string, wrong value, check constraint, no partition, row too large, a trigger's `SIGNAL`
 * (a check of its row; as a statement error, two refused rows, one in each half, would hold the
 * batch for ever: docs/writers.md#retry-policy); and errors of the statement's size that smaller
 * statements cure (halving ends at the one row too big on its own): packet too large, binlog cache
 * too small, too many placeholders. Not 1364 (a column without a default got no value): the writers
 * name every column they know, so only a column added to the schema, whatever the rows, is missing.
 */
const ROW_ERRNOS = numbers("1265 1300 1411 3819 1526 1118 1644", "1153 1197 1390");

const STATEMENT_TIMEOUT_CODE = "STATEMENT_TIMEOUT";

/** Codes of a connection that failed or got no answer (Node-style and Deno-style names). */
const SOCKET_CODES = "ECONNREFUSED ECONNRESET ETIMEDOUT EPIPE EHOSTUNREACH ENETUNREACH ENOTFOUND " +
  "EAI_AGAIN PROTOCOL_CONNECTION_LOST PROTOCOL_SEQUENCE_TIMEOUT ConnectionRefused " +
  "ConnectionReset BrokenPipe NotConnected TimedOut";

/** Driver/socket codes meaning the connection failed or did not answer in time. */
const UNAVAILABLE_CODES = words(
  `${SOCKET_CODES} ER_CON_COUNT_ERROR ER_SERVER_SHUTDOWN ER_CONNECTION_KILLED POOL_CLOSED ` +
    `POOL_ENQUEUELIMIT ${STATEMENT_TIMEOUT_CODE}`,
);

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

  constructor(timeoutMs: number) {
    super(`MySQL did not answer the statement within ${timeoutMs / 1000} s`);
    this.name = "StatementTimeoutError";
    this.timeoutMs = timeoutMs;
  }
}

/** Classify an error thrown by mysql2 (or by the executor around it). */
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
  // Any other server errno with a SQL state: deterministic, but not necessarily about its rows.
  if (errno !== undefined && errno > 0 && sqlState !== undefined) return "statement";
  // Errors the driver flags fatal leave the connection unusable (socket-level).
  if (e.fatal === true) return "unavailable";
  // Raised before the statement reached the server (an unbindable value, a bug building the
  // rows): about the rows sent, never held, so such a bug cannot stall a table.
  return "row";
}

/** Same errno or driver code (neither `unknown`), for the "both halves failed alike" test. */
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

  constructor(table: string, cause: unknown) {
    const kind = classifyMysqlError(cause);
    const e = (typeof cause === "object" && cause !== null ? cause : {}) as MysqlLikeError;
    const code = typeof e.errno === "number" && e.errno > 0
      ? String(e.errno)
      : typeof e.code === "string"
      ? e.code
      : "unknown";
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(`Cannot write to "${table}" (${kind}, ${code}): ${detail}`, { cause });
    this.name = "MysqlWriteError";
    this.table = table;
    this.kind = kind;
    this.code = code;
  }
}

/**
 * Why MySQL could not be used at all when a command or the daemon first connected: each needs a
 * different fix, so each gets its own words (a wrong password is not an outage). `unreachable`:
 * nothing answered; `failed`: the server answered with another error.
 */
export type MysqlConnectProblem = "unknown_database" | "access_denied" | "unreachable" | "failed";

const UNKNOWN_DATABASE_ERRNO = 1049;

/** Wrong password, no access to the database or host, unix_socket plugin, expired, locked. */
const ACCESS_DENIED_ERRNOS = numbers("1044 1045 1698 1130 1820 1862 4151");

/** Codes of a connection that never got an answer. */
const UNREACHABLE_CODES = words(`${SOCKET_CODES} ConnectionAborted AddrNotAvailable`);

/** `err` and its causes, four deep at most. */
function* causes(err: unknown): Generator<object> {
  for (let depth = 0; depth < 4 && typeof err === "object" && err !== null; depth++) {
    yield err;
    err = (err as { cause?: unknown }).cause;
  }
}

/** The first error in the cause chain that carries an errno or a code. */
function driverError(err: unknown): MysqlLikeError | undefined {
  for (const e of causes(err) as Iterable<MysqlLikeError>) {
    if (typeof e.errno === "number" || typeof e.code === "string") return e;
  }
  return undefined;
}

/**
 * MySQL errors that waiting does not cure: the credentials, the grants for this host, the
 * database name or the connection's security settings are wrong and stay wrong until someone
 * changes them. Everything else (refused or silent port, timeout, too many connections, a
 * server shutting down, an unresolvable host name) is waited for.
 */
const WAITING_CANNOT_FIX_ERRNOS = numbers(
  "1044 1045 1049 1130 1698", // access denied, login refused, unknown database, host, unix socket
  "1251 3159", // authentication protocol not supported, secure transport required
);

/**
 * Whether a failure to connect is one that waiting for MySQL cannot fix (the daemon's start ends
 * on it instead of waiting); looks through the causes, so a "no host of the list answers" error
 * counts when a host refused the login.
 */
export function waitingCannotFix(err: unknown): boolean {
  if (deniedSocket(err) !== undefined) return true;
  const errno = driverError(err)?.errno;
  return typeof errno === "number" && WAITING_CANNOT_FIX_ERRNOS.has(errno);
}

/**
 * The Unix socket this process may not connect to, when Deno refused the connection itself: a
 * compiled binary gets no more permissions at run time, so this never passes by waiting.
 */
function deniedSocket(err: unknown): string | undefined {
  for (const e of causes(err)) {
    if (e instanceof Deno.errors.NotCapable) {
      return /access to "([^"]+)"/.exec(e.message)?.[1] ?? "";
    }
  }
  return undefined;
}

/** Sort a failure to connect (or of the first query) into what the operator has to fix. */
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
 * One sentence for an operator: what happened at which server (URL masked), and what to do.
 * `setting` names the flag and env var that hold the URL (verify's are --mysql-url-a and -b).
 */
export function describeMysqlConnectFailure(
  err: unknown,
  shownUrl: string,
  setting = { flag: "--mysql-url", env: "STATUSENGINE_MYSQL_URL" },
): string {
  const detail = err instanceof Error ? err.message : String(err);
  const { flag, env } = setting;
  const socket = deniedSocket(err);
  if (socket !== undefined) {
    return `this binary may not connect to the MySQL Unix socket "${socket}" of ${shownUrl}: ` +
      `it may use the usual distributions' sockets and those it was built for ` +
      `(STATUSENGINE_MYSQL_SOCKETS=${socket} deno task compile); or give host:port in ` +
      `${flag} instead (docs/operations.md#mysql-sockets)`;
  }
  switch (mysqlConnectProblem(err)) {
    case "unknown_database": {
      const name = /Unknown database '([^']*)'/.exec(detail)?.[1];
      const quoted = name === undefined ? "" : `"${name}" `;
      return `database ${quoted}does not exist at ${shownUrl}: create it with ` +
        `"statusengine-worker schema --create-database" (same ${flag}), or correct the ` +
        `database name in ${flag}`;
    }
    case "access_denied":
      return `MySQL at ${shownUrl} refused the login (${detail}): check the user and password ` +
        `in ${flag} (${env}) and the user's grants on the database`;
    case "unreachable":
      return `MySQL at ${shownUrl} does not answer (${detail}): check that it runs and that ` +
        `host and port in ${flag} are right`;
    case "failed":
      return `MySQL at ${shownUrl} refused the connection: ${detail}`;
  }
}
