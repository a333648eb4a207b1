/**
 * Drop the parameter metadata of cached prepared statements when it carries
 * nothing: the largest object the worker keeps alive while a backlog drains.
 *
 * mysql2 keeps, for every statement it prepared on a connection (up to 64 per
 * connection, src/mysql/executor.ts), the server's description of every
 * placeholder: 30,100 objects (about 6 MB) for one 700-row servicestatus
 * INSERT, per connection that ran it. They serve one purpose, a type hint
 * that lets an integer column receive a JavaScript number as an integer;
 * MariaDB describes every INSERT placeholder as type NULL, which hints
 * nothing, so mysql2 encodes the values exactly as it does without them. A
 * heap snapshot halfway through a drain at batch 700 found 20 of 51 MB live
 * in these objects, and V8 lets the heap grow to twice the live size before
 * a full collection: peak RSS 232 → 201 MB (bench/pipeline.ts, servicestatus,
 * batch 700, two writers). A server that does describe its placeholders
 * (MySQL 8 types them from the column) keeps them.
 *
 * mysql2 offers no option for this; the statement cache is reached through
 * each new connection of the pool (the public `connection` event) by
 * mysql2_internals.ts. If a mysql2 upgrade moves the cache, nothing is
 * dropped and nothing breaks.
 *
 * @module
 */
import { TYPE_NULL } from "./execute_packet.ts";
import { onStatementCached } from "./mysql2_internals.ts";

/** The part of a mysql2 pool this needs. */
export interface ConnectionEvents {
  on(event: "connection", listener: (connection: unknown) => void): unknown;
}

/**
 * Whether every placeholder description is type NULL (no hint in any of them).
 *
 * @param parameters A statement's `parameters` as mysql2 keeps them.
 * @returns True for a non-empty array of type-NULL descriptions.
 */
export function hintsNothing(parameters: unknown): boolean {
  if (!Array.isArray(parameters) || parameters.length === 0) return false;
  for (const p of parameters) {
    if ((p as { columnType?: unknown } | null)?.columnType !== TYPE_NULL) return false;
  }
  return true;
}

/**
 * From now on, drop the placeholder descriptions of every statement a new
 * connection of `pool` prepares, when they hint nothing.
 *
 * @param pool A mysql2 pool (promise or callback flavour).
 */
export function dropEmptyParameterMetadata(pool: ConnectionEvents): void {
  pool.on("connection", (connection) => {
    onStatementCached(connection, (statement) => {
      if (hintsNothing(statement.parameters)) statement.parameters = [];
    });
  });
}
