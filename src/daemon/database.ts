/**
 * The daemon's MySQL: the pool, the start-up probe (does it answer, and in utf8mb4), the
 * schema check for exactly the tables this configuration writes, and the node row (D11).
 *
 * @module
 */
import { denoSocketStream } from "../mysql/deno_socket.ts";
import mysql from "mysql2/promise";
import { type QueueName, QUEUES } from "../events/queues.ts";
import type { TableName } from "../mysql/catalogue.ts";
import { assertTablesExist } from "../mysql/schema.ts";
import { mysqlOptionsFromUrl, type MysqlUrlOptions, redactUrl } from "../mysql/url.ts";
import {
  poolExecutor,
  PREPARED_STATEMENTS_PER_CONNECTION,
  type SqlExecutor,
} from "../mysql/executor.ts";
import { probeMysql } from "../mysql/connect.ts";
import { registerNode } from "../mysql/nodes.ts";
import { dropEmptyParameterMetadata } from "../mysql/statement_metadata.ts";
import { batchedTables } from "../pipeline/pipeline.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { StartupError, type WorkerConfig } from "./config.ts";

const log = getLogger("worker");

/** Bound on the start-up probe and on closing the pool. */
const PING_TIMEOUT_MS = 5_000;

/** The open database of a running worker; disposing ends the pool (bounded). */
export interface Database extends AsyncDisposable {
  readonly pool: mysql.Pool;
  readonly executor: SqlExecutor;
  /** Connection options from the URL (dedicated connections, e.g. the in-order lock). */
  readonly urlOptions: MysqlUrlOptions;
}

/**
 * The tables a configuration writes: those of its queues, the node row, the task queue when
 * it is read, and no perfdata table when perfdata does not go to MySQL (an installation
 * may not have one).
 *
 * @param config The worker configuration.
 * @param queues The consumed queues.
 * @returns Table names, sorted.
 */
export function neededTables(config: WorkerConfig, queues: readonly QueueName[]): TableName[] {
  const needed = new Set<TableName>();
  for (const q of queues) for (const t of QUEUES[q].tables) needed.add(t as TableName);
  needed.add("statusengine_nodes");
  if (config.tasks) needed.add("statusengine_tasks");
  if (!config.perfdataBackends.includes("mysql")) needed.delete("statusengine_perfdata");
  return [...needed].sort();
}

/**
 * Open the pool, check that MySQL answers, that the tables exist, and register the node.
 *
 * @param config The worker configuration.
 * @param queues The consumed queues.
 * @param version The worker version for the node row.
 * @returns The open database.
 * @throws {StartupError} When MySQL does not answer or tables are missing.
 */
export async function openDatabase(
  config: WorkerConfig,
  queues: readonly QueueName[],
  version: string,
): Promise<Database> {
  const urlOptions = mysqlOptionsFromUrl(config.mysqlUrl);
  const pool = mysql.createPool({
    ...urlOptions,
    connectionLimit: config.mysqlMaxOpenConns,
    maxIdle: config.mysqlMaxOpenConns,
    connectTimeout: urlOptions.connectTimeout ?? PING_TIMEOUT_MS,
    enableKeepAlive: true,
    maxPreparedStatements: PREPARED_STATEMENTS_PER_CONNECTION,
    // Numbers stay numbers; bigint epoch seconds fit a double exactly (A.3).
    supportBigNumbers: true,
    bigNumberStrings: false,
    // mysql2 captures a stack trace on every call so that its errors can show the caller's;
    // ours carry their table or queue instead, and the capture cost ~1 % of a drain's CPU.
    trace: false,
    // Deno.connect instead of Node's net.Socket (src/mysql/deno_socket.ts); TLS needs Node's.
    ...(urlOptions.ssl === undefined ? { stream: denoSocketStream } : {}),
  });
  dropEmptyParameterMetadata(pool);
  const database: Database = {
    pool,
    executor: poolExecutor(pool, { statementTimeoutMs: config.mysqlStatementTimeoutMs }),
    urlOptions,
    async [Symbol.asyncDispose]() {
      // A hung MySQL must not hold the process.
      using limit = deadline(PING_TIMEOUT_MS);
      await settledWithin(pool.end(), limit.signal);
    },
  };
  try {
    await check(config, queues, version, database);
  } catch (err: unknown) {
    await database[Symbol.asyncDispose]();
    throw err;
  }
  return database;
}

async function check(
  config: WorkerConfig,
  queues: readonly QueueName[],
  version: string,
  database: Database,
): Promise<void> {
  const shown = redactUrl(config.mysqlUrl);
  try {
    const { charset, collation } = await probeMysql(database.pool, PING_TIMEOUT_MS);
    if (charset !== "utf8mb4") {
      log.warn("worker: MySQL connection character set is not utf8mb4", { charset, collation });
    }
    log.info("worker: MySQL connected", {
      url: shown,
      pool_size: config.mysqlMaxOpenConns,
      writers_per_table: config.mysqlWritersPerTable,
      charset,
      collation,
    });
    const writers = batchedTables().length * config.mysqlWritersPerTable;
    if (config.mysqlMaxOpenConns <= writers) {
      // W9: the final flush runs every writer at once; so may a backlog on many queues.
      log.warn(
        "worker: the MySQL pool has fewer connections than there are table writers; " +
          "statements wait for a free connection under load and in the final flush",
        { pool_size: config.mysqlMaxOpenConns, writers },
      );
    }
  } catch (err: unknown) {
    throw new StartupError(
      `Cannot start: MySQL at ${shown} does not answer: ${errorMessage(err)}`,
      {
        cause: err,
      },
    );
  }
  try {
    await assertTablesExist(database.pool, neededTables(config, queues));
  } catch (err: unknown) {
    throw new StartupError(`Cannot start: ${errorMessage(err)}`, { cause: err });
  }
  await registerNode(database.executor, {
    nodeName: config.nodeName,
    version,
    startTime: Math.floor(Date.now() / 1000),
  });
}
