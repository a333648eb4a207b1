/**
 * Hold a statement "in flight" on the real server: `LOCK TABLES … WRITE` on a
 * connection of its own makes every other session's statement on those tables
 * wait for the metadata lock until `unlock()`. Tests use it to keep a writer's
 * statement in flight deterministically (instead of a fake executor or a sleep)
 * and wait for the blocked statement to show up in the process list.
 */
import mysql from "mysql2/promise";
import { connectionOptionsOf, type ScratchDatabase } from "./mysql.ts";
import { waitFor } from "./wait.ts";

/** A table lock held by a test. */
export interface TableLock extends AsyncDisposable {
  /** Release the lock (idempotent); blocked statements then run. */
  unlock(): Promise<void>;
}

/**
 * Take `LOCK TABLES <tables> WRITE` (or `READ`) on a dedicated connection.
 *
 * @example
 * ```ts ignore
 * await using lock = await lockTables(db, ["statusengine_logentries"]);
 * // … a writer's INSERT now waits …
 * await lock.unlock();
 * ```
 */
export async function lockTables(
  db: ScratchDatabase,
  tables: readonly string[],
  options: { readonly mode?: "READ" | "WRITE" } = {},
): Promise<TableLock> {
  // READ lets other sessions read the tables while their writes wait.
  const mode = options.mode ?? "WRITE";
  const conn = await mysql.createConnection({
    ...connectionOptionsOf(db),
  });
  try {
    await conn.query(`LOCK TABLES ${tables.map((t) => `\`${t}\` ${mode}`).join(", ")}`);
  } catch (err: unknown) {
    await conn.end();
    throw err;
  }
  let released: Promise<void> | undefined;
  const unlock = () => {
    released ??= (async () => {
      try {
        await conn.query("UNLOCK TABLES");
      } finally {
        await conn.end();
      }
    })();
    return released;
  };
  return { unlock, [Symbol.asyncDispose]: unlock };
}

/**
 * Statements of this scratch database currently waiting for a table lock.
 *
 * @param db The scratch database.
 * @param like SQL LIKE pattern the statement text must match (default: any).
 */
export async function blockedStatements(db: ScratchDatabase, like = "%"): Promise<number> {
  const rows = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
      "WHERE DB = ? AND STATE LIKE 'Waiting for table%lock' AND INFO LIKE ?",
    [db.name, like],
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Wait until `count` statements matching `like` are blocked on a table lock.
 *
 * @param db The scratch database.
 * @param like SQL LIKE pattern, e.g. `INSERT INTO \`statusengine_logentries\`%`.
 * @param count How many must be waiting (default 1).
 */
export async function waitForBlocked(db: ScratchDatabase, like: string, count = 1): Promise<void> {
  await waitFor(async () => (await blockedStatements(db, like)) >= count, {
    timeoutMs: 5_000,
    message: `${count} statement(s) like ${like} blocked on a table lock`,
  });
}
