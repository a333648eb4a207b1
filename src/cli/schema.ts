/**
 * The `schema` subcommand: create what is missing, report every difference (D2).
 *
 * @module
 */
import {
  ALL_TABLES,
  connectMysql,
  createDatabase,
  databaseExists,
  describeDifferences,
  describeMysqlConnectFailure,
  diffSchema,
  endMysql,
  ensureSchema,
  type MysqlConnection,
  mysqlOptionsFromUrl,
  type MysqlUrlOptions,
  TABLE_CHARSET,
  useDatabase,
} from "../mysql/mod.ts";
import { errorMessage } from "../util/errors.ts";
import { redactText, redactUrl } from "../util/redact.ts";
import type { Io } from "./io.ts";

/** Options of the `schema` command. */
export interface SchemaCommandOptions {
  readonly mysqlUrl: string;
  readonly check: boolean;
  readonly createDatabase: boolean;
  /** Clock for the weekly partitions of new tables (tests); defaults to now. */
  readonly now?: Date;
}

/**
 * Run the `schema` command. Without `check`: create the database (if `createDatabase` and it
 * is missing) and every missing table, print the differences left in existing tables (never
 * altered); exit 0, or 1 when the server cannot be reached or something cannot be created.
 * With `check`: change nothing, print every difference, exit 1 if there is any (or on failure).
 * The URL is printed only through `redactUrl` (D8).
 */
export async function runSchemaCommand(options: SchemaCommandOptions, io: Io): Promise<number> {
  const shownUrl = redactUrl(options.mysqlUrl);
  let connectionOptions: MysqlUrlOptions;
  try {
    connectionOptions = mysqlOptionsFromUrl(options.mysqlUrl);
  } catch (err: unknown) {
    // mysqlOptionsFromUrl already shows the URL redacted.
    io.err(errorMessage(err));
    return 1;
  }
  const { database, ...server } = connectionOptions;
  // A driver error should never echo the password, but the output must not depend on that; a
  // short one is masked only where it stands (redactText), not inside the words of the message.
  const scrub = (text: string): string => redactText(text, server.password);
  if (database === undefined) {
    io.err(`Cannot run schema: the MySQL URL "${shownUrl}" names no database (…/<database>)`);
    return 1;
  }

  let conn: MysqlConnection;
  try {
    ({ connection: conn } = await connectMysql(server, { timeoutMs: 10_000 }));
  } catch (err: unknown) {
    io.err(scrub(`Cannot run schema: ${describeMysqlConnectFailure(err, shownUrl)}`));
    return 1;
  }
  let step = "inspect the server";
  try {
    if (!(await databaseExists(conn, database))) {
      if (options.check) {
        io.out(`database ${database}: does not exist (${ALL_TABLES.length} tables missing)`);
        return 1;
      }
      if (!options.createDatabase) {
        io.err(
          `Cannot run schema: database "${database}" does not exist at "${shownUrl}": create it or pass --create-database`,
        );
        return 1;
      }
      step = `create database "${database}"`;
      const collation = await createDatabase(conn, database);
      io.out(`Created database ${database} (${TABLE_CHARSET}, ${collation})`);
    }
    step = `use database "${database}"`;
    await useDatabase(conn, database);

    if (!options.check) {
      step = `create missing tables in "${database}"`;
      const result = await ensureSchema(conn, { now: options.now });
      for (const table of result.created) io.out(`Created table ${table}`);
      if (result.created.length === 0) io.out(`No table was missing in ${database}`);
      const { written, version: v } = result.dbversion;
      if (written) io.out(`Recorded schema version ${v} in statusengine_dbversion`);
      else io.out(`statusengine_dbversion already holds version ${v ?? "(none)"}; left as it is`);
    }

    step = `compare the schema of "${database}"`;
    const differences = await diffSchema(conn);
    for (const line of describeDifferences(differences)) io.out(line);
    if (differences.length === 0) {
      io.out(`Schema of ${database} matches the ${ALL_TABLES.length} tables the worker needs`);
      return 0;
    }
    if (options.check) {
      io.out(`${differences.length} difference(s) in ${database}`);
      return 1;
    }
    // D2: existing tables are never altered, so what is left is for the operator to judge.
    io.out(
      `${differences.length} difference(s) remain in ${database}; existing tables are never altered`,
    );
    return 0;
  } catch (err: unknown) {
    io.err(scrub(`Cannot ${step} at "${shownUrl}": ${errorMessage(err)}`));
    return 1;
  } finally {
    await endMysql(conn);
  }
}
