/**
 * Executes the downtime lifecycle statements (C.3) one at a time, in
 * order, under the W5 retry policy (transient failures are held and retried,
 * never fail the job, D7), with the unmatched-update backstop of C.5.
 *
 * mysql2 sets CLIENT_FOUND_ROWS, so the affected-rows count of an UPDATE is
 * the number of rows *matched*: 0 proves the history row is missing, and a
 * redelivered START/STOP (same values again) still reports 1 (C.5.4, D10;
 * pinned by "downtimes: CLIENT_FOUND_ROWS makes a repeated UPDATE report 1").
 *
 * @module
 */
import { type TableName, TABLES } from "./catalogue.ts";
import type { SqlExecutor } from "./executor.ts";
import type { DbAvailability } from "./availability.ts";
import { MysqlWriteError } from "./errors.ts";
import { runWithRetry } from "./retry.ts";
import { adjustRow, truncateToCodePoints } from "./values.ts";
import type { Row, SqlValue } from "../events/types.ts";
import type { Metrics } from "../metrics/registry.ts";
import type { DeadLetterSink } from "./dead_letter_sink.ts";
import type { DowntimeStatement } from "../events/types.ts";
import { getLogger } from "../log.ts";

const log = getLogger("db");

/** A statement ready to send. */
export interface BuiltStatement {
  readonly sql: string;
  readonly values: SqlValue[];
}

function quote(name: string): string {
  return `\`${name}\``;
}

/** Fit one key/set value to its column (D6) without building a whole row. */
function fit(table: TableName, column: string, value: SqlValue): SqlValue {
  const limit = TABLES[table].charLimits[column];
  return typeof value === "string" && limit !== undefined
    ? truncateToCodePoints(value, limit)
    : value;
}

function assignments(
  table: TableName,
  row: Row,
  joiner: string,
  setOnce: readonly string[] = [],
): { sql: string; values: SqlValue[] } {
  const cols = Object.keys(row);
  return {
    sql: cols.map((c) =>
      setOnce.includes(c) ? `${quote(c)} = IF(${quote(c)} = 0, ?, ${quote(c)})` : `${quote(c)} = ?`
    ).join(joiner),
    values: cols.map((c) => fit(table, c, row[c] ?? null)),
  };
}

/**
 * Build the SQL of one downtime statement (C.3).
 *
 * @param statement From the decoder.
 * @returns Statement text and values.
 */
export function buildDowntimeStatement(statement: DowntimeStatement): BuiltStatement {
  const table = statement.table;
  switch (statement.kind) {
    case "upsert": {
      const t = TABLES[table];
      const { values } = adjustRow(t, statement.row);
      const cols = t.insertColumns.map(quote).join(", ");
      const placeholders = t.insertColumns.map(() => "?").join(", ");
      const once = statement.setOnce ?? [];
      const update = statement.updateColumns.map((c) =>
        once.includes(c)
          ? `${quote(c)} = IF(${quote(c)} = 0, VALUES(${quote(c)}), ${quote(c)})`
          : `${quote(c)} = VALUES(${quote(c)})`
      ).join(", ");
      return {
        sql: `INSERT INTO ${
          quote(table)
        } (${cols}) VALUES (${placeholders}) ON DUPLICATE KEY UPDATE ${update}`,
        values,
      };
    }
    case "update": {
      const set = assignments(table, statement.set, ", ", statement.setOnce);
      const where = assignments(table, statement.key, " AND ");
      return {
        sql: `UPDATE ${quote(table)} SET ${set.sql} WHERE ${where.sql}`,
        values: [...set.values, ...where.values],
      };
    }
    case "delete": {
      const where = assignments(table, statement.key, " AND ");
      return { sql: `DELETE FROM ${quote(table)} WHERE ${where.sql}`, values: where.values };
    }
  }
}

/** Options of {@link DowntimeExecutor}. */
export interface DowntimeExecutorOptions {
  readonly executor: SqlExecutor;
  readonly availability: DbAvailability;
  readonly deadLetters: DeadLetterSink;
  readonly metrics?: Metrics;
}

/** Runs downtime statements for the serialized `statusngin_downtimes` queue (G3). */
export class DowntimeExecutor {
  readonly #o: DowntimeExecutorOptions;

  /** @param options Executor and collaborators. */
  constructor(options: DowntimeExecutorOptions) {
    this.#o = options;
  }

  /**
   * Run the statements of one job in order. A transient failure holds until
   * MySQL is back or `signal` aborts (the job is then left unacknowledged); a
   * permanent failure dead-letters that statement and goes on (D7).
   *
   * @param queue Queue name (dead letters, metrics).
   * @param statements In the order they must run.
   * @param signal Gives up holding (drain deadline, shutdown).
   */
  async run(
    queue: string,
    statements: readonly DowntimeStatement[],
    signal: AbortSignal,
  ): Promise<void> {
    const m = this.#o.metrics;
    for (const statement of statements) {
      const built = buildDowntimeStatement(statement);
      let affected: number;
      try {
        const result = await runWithRetry(() => this.#o.executor.run(built.sql, built.values), {
          table: statement.table,
          availability: this.#o.availability,
          signal,
          ...(m === undefined
            ? {}
            : { lockRetries: m.dbBatchRetries, connectionRetries: m.dbConnectionRetries }),
        });
        affected = result.affectedRows;
      } catch (err: unknown) {
        if (!(err instanceof MysqlWriteError)) throw err;
        m?.pipelineErrors.inc({ component: "mysql" });
        log.error("db: downtime statement rejected, written to the dead-letter file", {
          table: statement.table,
          event: statement.event,
          error: err.message,
        });
        await this.#o.deadLetters.write({
          queue,
          reason: "sql_rejected",
          error: err.message,
          table: statement.table,
          row: statement.kind === "upsert"
            ? statement.row
            : { ...statement.key, ...(statement.kind === "update" ? statement.set : {}) },
        });
        continue;
      }
      m?.dbEventsWritten.inc({ table: statement.table });
      log.debug("db: downtime write", {
        table: statement.table,
        event: statement.event,
        kind: statement.kind,
        affected,
      });
      if (statement.kind === "update" && statement.detectUnmatched && affected === 0) {
        m?.queueDowntimeUpdatesUnmatched.inc();
        log.warn("db: downtime update matched no row, the event is lost", {
          table: statement.table,
          action: statement.event.toLowerCase(),
          host: statement.key["hostname"],
          service: statement.key["service_description"] ?? "",
          node_name: statement.key["node_name"],
          downtime_id: statement.key["internal_downtime_id"],
          scheduled_start_time: statement.key["scheduled_start_time"],
        });
      }
    }
  }
}
