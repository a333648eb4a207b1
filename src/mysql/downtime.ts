/**
 * Executes the downtime lifecycle statements (docs/downtimes.md) one at a time, in order, under
 * the writers' retry policy (D7), and reports a START/STOP that could not be recorded.
 *
 * @module
 */
import { type TableName, TABLES } from "./catalogue.ts";
import type { TableWriterOptions } from "./writer.ts";
import { MysqlWriteError } from "./errors.ts";
import { type HoldScope, MYSQL_HOLD, pauseHeld, runWithRetry } from "./retry.ts";
import { heldLeaseUpdate, type LeaseIdentity } from "./lease.ts";
import type { ExecResult } from "./executor.ts";
import { WorkerError } from "../util/errors.ts";
import { Backoff } from "../util/backoff.ts";
import { adjustRow, fitKeyValue, type ValueAdjustment } from "./values.ts";
import { quoteIdentifier as quote } from "./ddl.ts";
import type { DowntimeMerge, DowntimeStatement, Row, SqlValue } from "../events/mod.ts";
import { getLogger } from "../log.ts";

const log = getLogger("db");

export interface BuiltStatement {
  readonly sql: string;
  readonly values: SqlValue[];
  /** The row's values changed to fit their columns (D6), counted like the writers' rows. */
  readonly adjustments?: readonly ValueAdjustment[];
}

function equalities(table: TableName, key: Row): { sql: string; values: SqlValue[] } {
  const cols = Object.keys(key);
  return {
    sql: cols.map((c) => `${quote(c)} = ?`).join(" AND "),
    values: cols.map((c) => fitKeyValue(table, c, key[c] ?? null)),
  };
}

/** The `ON DUPLICATE KEY UPDATE` assignment of one merge rule (see `DowntimeMerge`). */
function mergeAssignment(m: DowntimeMerge): string {
  const c = quote(m.column);
  const v = `VALUES(${c})`;
  switch (m.rule) {
    case "assign":
      return `${c} = ${v}`;
    case "max":
      return `${c} = GREATEST(${c}, ${v})`;
    case "earliest":
      // 0 is "not set yet" on either side, never a time.
      return `${c} = IF(${v} <> 0 AND (${c} = 0 OR ${v} < ${c}), ${v}, ${c})`;
    case "follows": {
      const of = quote(m.of);
      return `${c} = IF(VALUES(${of}) > ${of}, ${v}, IF(VALUES(${of}) = ${of}, GREATEST(${c}, ${v}), ${c}))`;
    }
  }
}

/** Build the SQL of one downtime statement from the decoder (docs/downtimes.md). */
export function buildDowntimeStatement(statement: DowntimeStatement): BuiltStatement {
  const table = statement.table;
  const t = TABLES[table];
  const cols = t.insertColumns.map(quote).join(", ");
  const placeholders = t.insertColumns.map(() => "?").join(", ");
  switch (statement.kind) {
    case "upsert": {
      const { values, adjustments } = adjustRow(t, statement.row);
      const guard = statement.guard;
      const where = equalities(guard.table, guard.key);
      const removed = guard.historyRemoved ? " AND `history_removed` = 1" : "";
      // A row that stays as it is still needs one assignment: the first key column to itself.
      const first = quote(t.primaryKey[0] ?? "");
      const update = statement.merge.length === 0
        ? `${first} = ${first}`
        : statement.merge.map(mergeAssignment).join(", ");
      return {
        sql: `INSERT INTO ${quote(table)} (${cols}) SELECT ${placeholders} FROM DUAL ` +
          `WHERE NOT EXISTS (SELECT 1 FROM ${quote(guard.table)} WHERE ${where.sql}${removed}) ` +
          `ON DUPLICATE KEY UPDATE ${update}`,
        values: [...values, ...where.values],
        adjustments,
      };
    }
    case "copy": {
      const guard = statement.guard;
      const where = equalities(statement.from, statement.key);
      const tombstone = equalities(guard.table, guard.key);
      // The target's columns are qualified: the history table has columns of the same names.
      const update = t.updateColumns
        .map((c) => `${quote(table)}.${quote(c)} = VALUES(${quote(c)})`)
        .join(", ");
      return {
        sql:
          `INSERT INTO ${quote(table)} (${cols}) SELECT ${
            t.insertColumns.map((c) => `h.${quote(c)}`).join(", ")
          } FROM ${quote(statement.from)} h WHERE ${where.sql} ` +
          `AND NOT EXISTS (SELECT 1 FROM ${quote(guard.table)} WHERE ${tombstone.sql}) ` +
          `ON DUPLICATE KEY UPDATE ${update}`,
        values: [...where.values, ...tombstone.values],
      };
    }
    case "tombstone": {
      const { values, adjustments } = adjustRow(t, statement.row);
      return {
        sql: `INSERT INTO ${quote(table)} (${cols}) VALUES (${placeholders}) ON DUPLICATE KEY ` +
          "UPDATE `history_removed` = GREATEST(`history_removed`, VALUES(`history_removed`)), " +
          "`end_time` = GREATEST(`end_time`, VALUES(`end_time`))",
        values,
        adjustments,
      };
    }
    case "delete": {
      const where = equalities(table, statement.key);
      return { sql: `DELETE FROM ${quote(table)} WHERE ${where.sql}`, values: where.values };
    }
  }
}

interface DowntimeExecutorOptions
  extends Pick<TableWriterOptions, "executor" | "availability" | "deadLetters" | "metrics"> {
  /**
   * The in-order lease the statements are applied under: each commits only while this worker
   * holds it (docs/downtimes.md#galera). Absent: they run on their own.
   */
  readonly lease?: LeaseIdentity | undefined;
}

/** Runs the statements of the serialized downtime queue (docs/consumption.md#downtimes-in-order). */
export class DowntimeExecutor {
  readonly #o: DowntimeExecutorOptions;

  constructor(options: DowntimeExecutorOptions) {
    this.#o = options;
  }

  /**
   * Run the statements of one job in order. A transient failure holds until MySQL is back or
   * `signal` aborts (the job stays unacknowledged); a permanent one is dead-lettered (D7). Rejects
   * with `in_order_lock_lost` when a statement found the lease another worker's.
   */
  async run(
    queue: string,
    statements: readonly DowntimeStatement[],
    signal: AbortSignal,
  ): Promise<void> {
    const m = this.#o.metrics;
    for (const statement of statements) {
      const built = buildDowntimeStatement(statement);
      for (const a of built.adjustments ?? []) {
        m?.dbValuesAdjusted.inc({ table: statement.table, reason: a.reason });
      }
      const scope = { table: statement.table, availability: this.#o.availability, signal };
      let result: ExecResult;
      try {
        result = await this.#runHeld(built, scope);
      } catch (err: unknown) {
        this.#o.availability.abandon(statement.table, scope);
        if (!(err instanceof MysqlWriteError)) throw err;
        m?.pipelineErrors.inc({ component: "mysql" });
        // A failed write rejects (the job is tried again): logged only once the file took it.
        await this.#o.deadLetters.write({
          queue,
          reason: "sql_rejected",
          error: err.message,
          table: statement.table,
          row: statement.kind === "delete" || statement.kind === "copy"
            ? statement.key
            : statement.row,
        });
        log.error("db: downtime statement rejected, written to the dead-letter file", {
          table: statement.table,
          event: statement.event,
          error: err.message,
        });
        continue;
      }
      if (result.rolledBack === true) {
        throw new WorkerError(
          "in_order_lock_lost",
          "a downtime statement found the in-order lease held by another worker and was rolled " +
            "back; the job goes back to the broker",
        );
      }
      const affected = result.affectedRows;
      m?.dbEventsWritten.inc({ table: statement.table });
      log.debug("db: downtime write", {
        table: statement.table,
        event: statement.event,
        kind: statement.kind,
        affected,
      });
      if (statement.kind === "upsert" && statement.detectUnmatched && affected === 0) {
        // With CLIENT_FOUND_ROWS an upsert that inserts or finds its row reports at least 1 (even
        // a redelivered START, docs/tables.md#found-rows, D10): 0 means the tombstone of a DELETE
        // before the window suppressed it, and the START or STOP cannot be recorded anywhere.
        m?.queueDowntimeUpdatesUnmatched.inc();
        log.warn(
          "db: downtime event for a downtime deleted before its window began, the event is lost",
          {
            table: statement.table,
            action: statement.event.toLowerCase(),
            host: statement.row["hostname"],
            service: statement.row["service_description"] ?? "",
            node_name: statement.row["node_name"],
            downtime_id: statement.row["internal_downtime_id"],
            scheduled_start_time: statement.row["scheduled_start_time"],
          },
        );
      }
    }
  }

  /**
   * Run one statement under the retry policy; returns the affected rows. A `statement` error is
   * held too: the text is fixed per kind and binds one event's values, so an error that names no
   * row (a renamed column, a missing table) is MySQL's, and dead-lettering it would dead-letter
   * every downtime event until the schema is repaired.
   */
  async #runHeld(built: BuiltStatement, scope: HoldScope): Promise<ExecResult> {
    const lease = this.#o.lease;
    // A statement its worker gave up may still run on the server after another worker took the
    // lease over; committed with an UPDATE of the lease row it cannot outlast the take-over.
    const options = lease === undefined ? undefined : { commitIf: heldLeaseUpdate(lease) };
    let hold: Backoff | undefined;
    for (;;) {
      try {
        return await runWithRetry(
          () => this.#o.executor.run(built.sql, built.values, options),
          { ...scope, holder: scope, metrics: this.#o.metrics },
        );
      } catch (err: unknown) {
        if (!(err instanceof MysqlWriteError) || err.kind !== "statement") throw err;
        if (hold === undefined) {
          hold = new Backoff(MYSQL_HOLD);
          log.warn("db: MySQL refuses the downtime statement whatever its values, holding it", {
            table: scope.table,
            error: err.message,
          });
        }
        scope.availability.unreachable(scope.table, err, scope);
        this.#o.metrics?.dbConnectionRetries.inc();
        await pauseHeld(hold, scope);
      }
    }
  }
}
