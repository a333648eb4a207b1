/**
 * The narrow interface the writers need from MySQL, and the writers' pool. Bulk INSERTs run as
 * server-side prepared statements (`pool.execute`: measured 10–40 % more events/s than
 * client-side interpolation, bench/pipeline.ts; docs/writers.md#statement-shape); everything
 * else uses `pool.query`.
 *
 * @module
 */
import mysql, { type ExecuteValues, type Pool, type PoolConnection } from "mysql2/promise";
import { classifyMysqlError, StatementTimeoutError } from "./errors.ts";
import {
  bulkParameters,
  dropEmptyParameterMetadata,
  installBulkExecuteEncoder,
  runOnEachConnection,
} from "./mysql2_internals.ts";
import { STRICT_SESSION_SQL } from "./connect.ts";
import { errorMessage, getLogger } from "../log.ts";
import { denoSocketStream, type MysqlHosts } from "./failover.ts";
import { driverOptions, type MysqlUrlOptions } from "../util/mysql_url.ts";

const log = getLogger("db");

export interface ExecResult {
  /** Matched rows for an UPDATE: mysql2 sets CLIENT_FOUND_ROWS (D10). */
  readonly affectedRows: number;
  /** Result rows of a SELECT (empty otherwise). */
  readonly rows: readonly Record<string, unknown>[];
  /** {@link RunOptions.commitIf} matched no row: the statement was rolled back. */
  readonly rolledBack?: boolean;
}

/**
 * Prepared statements mysql2 keeps per connection (LRU; evicted ones are closed): 32 pooled
 * connections hold at most 2,048, far below MySQL's default max_prepared_stmt_count of 16,382
 * (beyond it every prepare fails with 1461).
 */
export const PREPARED_STATEMENTS_PER_CONNECTION = 64;

export type MysqlPool = Pool;

const POOL_CONNECT_TIMEOUT_MS = 5_000;

/**
 * The pool the table writers write through, also used by `dead-letters replay` so that a replayed
 * row takes the same connections and statement encoding. `hosts`: where each new connection goes
 * when the URL lists several (failover.ts).
 */
export function createWriterPool(
  urlOptions: MysqlUrlOptions,
  connections: number,
  hosts?: MysqlHosts,
): MysqlPool {
  const stream = hosts?.several === true
    ? { stream: hosts.stream }
    : urlOptions.ssl === undefined
    ? { stream: denoSocketStream }
    : {};
  const pool = mysql.createPool({
    ...driverOptions(urlOptions),
    connectionLimit: connections,
    maxIdle: connections,
    connectTimeout: urlOptions.connectTimeout ?? POOL_CONNECT_TIMEOUT_MS,
    enableKeepAlive: true,
    maxPreparedStatements: PREPARED_STATEMENTS_PER_CONNECTION,
    // Numbers stay numbers; bigint epoch seconds fit a double exactly (docs/tables.md#envelope).
    supportBigNumbers: true,
    bigNumberStrings: false,
    // mysql2 captures a stack trace on every call so that its errors can show the caller's;
    // ours carry their table or queue instead, and the capture cost ~1 % of a drain's CPU.
    trace: false,
    // Deno.connect instead of Node's net.Socket ({@link denoSocketStream}); TLS needs Node's.
    ...stream,
  });
  dropEmptyParameterMetadata(pool);
  runOnEachConnection(
    pool,
    STRICT_SESSION_SQL,
    (err) =>
      log.error("db: a new MySQL connection could not be put in strict mode", {
        error: errorMessage(err),
      }),
  );
  // The downtime statements' tombstone guard must lock what it reads (docs/downtimes.md#galera):
  // not READ COMMITTED, where a scheduled-row copy a worker gave up could commit after the new
  // lease holder's STOP and bring the ended downtime back. A statement of its own: MariaDB 10.11
  // and MySQL 8 name the session variable differently.
  runOnEachConnection(
    pool,
    "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    (err) =>
      log.error("db: a new MySQL connection could not be set to REPEATABLE READ", {
        error: errorMessage(err),
      }),
  );
  hosts?.attach(pool);
  return pool;
}

export interface RunOptions {
  /** Run as a server-side prepared statement (bulk INSERTs). */
  readonly prepared?: boolean;
  /**
   * An UPDATE run after the statement in the same transaction: the statement is committed only
   * when it matched exactly one row, else rolled back ({@link ExecResult.rolledBack}).
   */
  readonly commitIf?: { readonly sql: string; readonly values: readonly unknown[] };
}

/** Runs one statement (`?` placeholders, one value each). */
export interface SqlExecutor {
  run(sql: string, values?: readonly unknown[], options?: RunOptions): Promise<ExecResult>;
}

export interface PoolExecutorOptions {
  /**
   * `--mysql-statement-timeout`, waiting for a connection included ({@link StatementTimeoutError});
   * 0 or absent = unbounded.
   */
  readonly statementTimeoutMs?: number;
  /** Told of every statement that failed as unavailable: with several hosts, the cue to check. */
  readonly onUnavailable?: () => void;
}

/** Read-only errors that drop the connection, as mysql2's pool does: the primary may have moved. */
const READ_ONLY_ERRNOS: ReadonlySet<number> = new Set([1290, 1792, 1836]);

/** Adapt a mysql2 promise pool. */
export function poolExecutor(pool: Pool, options: PoolExecutorOptions = {}): SqlExecutor {
  const timeoutMs = options.statementTimeoutMs ?? 0;
  installBulkExecuteEncoder();
  return {
    async run(sql, values, runOptions) {
      const prepared = runOptions?.prepared === true;
      const parameters = prepared && values !== undefined ? bulkParameters(values) : values;
      const commitIf = runOptions?.commitIf;
      let result: unknown;
      let rolledBack = false;
      const one = async (c: PoolConnection) =>
        (prepared
          ? await c.execute(sql, parameters as ExecuteValues[] | undefined)
          : await c.query(sql, parameters as unknown[] | undefined))[0];
      try {
        if (commitIf !== undefined) {
          // One connection for the transaction; a failed one is closed, never returned open.
          result = await runBounded(pool, timeoutMs, true, async (c) => {
            await c.query("BEGIN");
            const done = await one(c);
            const [decided] = await c.query(commitIf.sql, commitIf.values as unknown[]);
            rolledBack = (decided as { affectedRows?: number }).affectedRows !== 1;
            await c.query(rolledBack ? "ROLLBACK" : "COMMIT");
            return done;
          });
        } else if (timeoutMs > 0) {
          result = await runBounded(pool, timeoutMs, false, one);
        } else {
          result = (prepared
            ? await pool.execute(sql, parameters as ExecuteValues[] | undefined)
            : await pool.query(sql, parameters as unknown[] | undefined))[0];
        }
      } catch (err: unknown) {
        if (classifyMysqlError(err) === "unavailable") options.onUnavailable?.();
        throw err;
      }
      return Array.isArray(result)
        ? { affectedRows: 0, rows: result as Record<string, unknown>[] }
        : {
          affectedRows: (result as { affectedRows?: number }).affectedRows ?? 0,
          rows: [],
          ...(rolledBack ? { rolledBack } : {}),
        };
    },
  };
}

/**
 * `work` on its own pooled connection, given up after `timeoutMs` (0: never): its connection is
 * then destroyed (never returned with an unanswered command on it); one acquired later goes back.
 * Not mysql2's `timeout`: it leaves the connection busy, and its clock does not include waiting
 * for a connection, which is where a frozen server keeps every later statement. A `transaction`
 * that failed destroys its connection too: a lock wait timeout rolls back only the statement.
 */
async function runBounded(
  pool: Pool,
  timeoutMs: number,
  transaction: boolean,
  work: (conn: PoolConnection) => Promise<unknown>,
): Promise<unknown> {
  let conn: PoolConnection | undefined;
  let expired = false;
  const statement = (async () => {
    const c = await pool.getConnection();
    if (expired) {
      c.release();
      return undefined;
    }
    conn = c;
    let failed: unknown;
    try {
      return await work(c);
    } catch (err: unknown) {
      failed = err;
      throw err;
    } finally {
      if (!expired) {
        const errno = (failed as { errno?: unknown } | undefined)?.errno;
        if (
          (transaction && failed !== undefined) ||
          (typeof errno === "number" && READ_ONLY_ERRNOS.has(errno))
        ) {
          c.destroy();
        } else c.release();
      }
    }
  })();
  const timeout = Promise.withResolvers<never>();
  const timer = timeoutMs > 0
    ? setTimeout(() => {
      expired = true;
      conn?.destroy();
      timeout.reject(new StatementTimeoutError(timeoutMs));
    }, timeoutMs)
    : undefined;
  try {
    return await Promise.race([statement, timeout.promise]);
  } finally {
    clearTimeout(timer);
    // Settles (or never does) after the deadline; nobody waits for it then.
    statement.catch(() => {});
  }
}

/** The worker's row in `statusengine_nodes` (D11), as the legacy worker registers itself. */
export async function registerNode(
  executor: SqlExecutor,
  node: { readonly nodeName: string; readonly version: string; readonly startTime: number },
): Promise<void> {
  await executor.run(
    "INSERT INTO `statusengine_nodes` (`node_name`, `node_version`, `node_start_time`) " +
      "VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE `node_version` = VALUES(`node_version`), " +
      "`node_start_time` = VALUES(`node_start_time`)",
    [node.nodeName, node.version, node.startTime],
  );
}
