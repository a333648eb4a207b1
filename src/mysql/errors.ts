/**
 * The one place that sorts MySQL failures into what the writers do about
 * them (W5): `lock` is retried a few times, `connection` is held and retried
 * until MySQL is back or shutdown, `permanent` is never retried (the batch is
 * split to isolate the bad rows, D7).
 *
 * Widening `connection` is the dangerous direction: a misclassified permanent
 * error would be retried forever and stall the pipeline. The table is pinned
 * by `errors_test.ts`.
 *
 * @module
 */

/** What a writer does about a failed statement. */
export type MysqlErrorKind = "lock" | "connection" | "permanent";

/** Deadlock (1213) and lock wait timeout (1205): roll back one statement; timing-dependent. */
const LOCK_ERRNOS: ReadonlySet<number> = new Set([1205, 1213]);

/**
 * Server errnos meaning "not reachable right now": 1040 too many connections,
 * 1053 server shutdown, 1927 connection killed (MariaDB), 2006/2013 gone
 * away / lost (client library numbers, in case a driver reports them), 1317
 * query interrupted (a KILL QUERY during shutdown of the server).
 */
const CONNECTION_ERRNOS: ReadonlySet<number> = new Set([1040, 1053, 1927, 2006, 2013, 1317]);

/** Driver/socket codes meaning the connection failed (W5 port note). */
const CONNECTION_CODES: ReadonlySet<string> = new Set([
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
]);

interface MysqlLikeError {
  readonly code?: unknown;
  readonly errno?: unknown;
  readonly fatal?: unknown;
  readonly sqlState?: unknown;
}

/**
 * Classify an error thrown by mysql2.
 *
 * @param err Anything a query rejected with.
 * @returns `lock`, `connection` or `permanent`.
 */
export function classifyMysqlError(err: unknown): MysqlErrorKind {
  if (typeof err !== "object" || err === null) return "permanent";
  const e = err as MysqlLikeError;
  const errno = typeof e.errno === "number" ? e.errno : undefined;
  const code = typeof e.code === "string" ? e.code : undefined;
  if (errno !== undefined && LOCK_ERRNOS.has(errno)) return "lock";
  if (errno !== undefined && CONNECTION_ERRNOS.has(errno)) return "connection";
  if (code !== undefined && CONNECTION_CODES.has(code)) return "connection";
  // A server errno with a SQL state is the server's verdict on the statement:
  // deterministic, whatever else the driver says.
  if (errno !== undefined && errno > 0 && typeof e.sqlState === "string") return "permanent";
  // Errors the driver flags fatal leave the connection unusable (socket-level).
  if (e.fatal === true) return "connection";
  return "permanent";
}

/** A statement failed; carries the table and the classification. */
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
