/**
 * The narrow interface the writers need from MySQL, so they can be driven by
 * a mysql2 pool in production and by the same pool through a TCP proxy in
 * tests. Only `pool.query` is used: client-side interpolation has no
 * placeholder limit and no prepared-statement cache to exhaust (W3 port
 * notes), and mysql2's pool handles a connection dying underneath it.
 *
 * @module
 */
import type { Pool } from "mysql2/promise";

/** Outcome of one statement. */
export interface ExecResult {
  /** Affected rows of an INSERT/UPDATE/DELETE (matched rows for UPDATE: mysql2 sets CLIENT_FOUND_ROWS, D10). */
  readonly affectedRows: number;
  /** Result rows of a SELECT (empty otherwise). */
  readonly rows: readonly Record<string, unknown>[];
}

/** Runs one statement. */
export interface SqlExecutor {
  /**
   * @param sql Statement text with `?` placeholders.
   * @param values One value per placeholder.
   * @returns Affected rows and result rows.
   */
  run(sql: string, values?: readonly unknown[]): Promise<ExecResult>;
}

/**
 * Adapt a mysql2 promise pool.
 *
 * @param pool The pool.
 * @returns An executor using `pool.query`.
 */
export function poolExecutor(pool: Pool): SqlExecutor {
  return {
    async run(sql, values) {
      const [result] = await pool.query(sql, values as unknown[] | undefined);
      if (Array.isArray(result)) {
        return { affectedRows: 0, rows: result as Record<string, unknown>[] };
      }
      const header = result as { affectedRows?: number };
      return { affectedRows: header.affectedRows ?? 0, rows: [] };
    },
  };
}
