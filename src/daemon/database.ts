/**
 * The daemon's MySQL: the pool, the start-up probe (does it answer, and in utf8mb4), the
 * schema check for exactly the tables this configuration writes, and the node row (D11).
 *
 * @module
 */
import {
  assertTablesExist,
  closeMysqlNow,
  connectMysql,
  createWriterPool,
  describeDifferences,
  describeMysqlConnectFailure,
  diffSchema,
  endMysql,
  endPool,
  MysqlHosts,
  mysqlOptionsFromUrl,
  type MysqlPool,
  poolExecutor,
  probeMysql,
  registerNode,
  type SqlExecutor,
  type TableName,
  waitingCannotFix,
} from "../mysql/mod.ts";
import { type QueueName, QUEUES } from "../events/mod.ts";
import { batchedTables } from "../pipeline/pipeline.ts";
import { abortable, deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";
import { Backoff } from "../util/backoff.ts";
import { redactUrl } from "../util/redact.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";
import { type WorkerConfig } from "./config.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** Bound on the start-up probe and on closing the pool. */
const PING_TIMEOUT_MS = 5_000;

/** How {@link openDatabase} waits for a MySQL that is not there yet. */
export interface WaitOptions {
  /** Ends the wait (the worker was told to stop while starting). */
  readonly signal?: AbortSignal;
  /** Told why MySQL is not usable yet (for `/readyz`), and `undefined` once it is. */
  readonly waiting?: (reason: string | undefined) => void;
  /** Which host of `--mysql-url` is in use, and the moves between them. */
  readonly metrics?: Pick<Metrics, "mysqlHostInUse" | "mysqlHostSwitches">;
}

/** The open database of a running worker; disposing ends the pool (bounded). */
export interface Database extends AsyncDisposable {
  readonly pool: MysqlPool;
  readonly executor: SqlExecutor;
  /** The hosts of the URL; every dedicated connection (the in-order lock) opens `hosts.inUse`. */
  readonly hosts: MysqlHosts;
  /** The idle probe, on a connection of its own (the pool's may all be busy), within `timeoutMs`. */
  ping(timeoutMs: number): Promise<void>;
}

/** The tables a configuration writes, sorted; no perfdata table unless perfdata goes to MySQL (it may not exist). */
function neededTables(config: WorkerConfig, queues: readonly QueueName[]): TableName[] {
  const needed = new Set<TableName>();
  for (const q of queues) for (const t of QUEUES[q].tables) needed.add(t as TableName);
  needed.add("statusengine_nodes");
  if (config.tasks) needed.add("statusengine_tasks");
  // The in-order lease, and the task queue's (src/daemon/start.ts).
  if (config.inOrderLock && (config.tasks || queues.some((q) => QUEUES[q].inOrder))) {
    needed.add("statusengine_worker_leases");
  }
  if (!config.perfdataBackends.includes("mysql")) needed.delete("statusengine_perfdata");
  return [...needed].sort();
}

/**
 * Open the pool, check that MySQL answers, that the tables exist, and register the node.
 *
 * @throws {WorkerError} (code `startup`) When MySQL refuses, the wait is aborted or tables are missing.
 */
export async function openDatabase(
  config: WorkerConfig,
  queues: readonly QueueName[],
  version: string,
  wait: WaitOptions = {},
): Promise<Database> {
  const urlOptions = mysqlOptionsFromUrl(config.mysqlUrl);
  const hosts = new MysqlHosts(urlOptions, {
    failbackAfterMs: config.mysqlFailbackAfterMs,
    metrics: wait.metrics,
  });
  const pool = createWriterPool(urlOptions, config.mysqlMaxOpenConns, hosts);
  const database: Database = {
    pool,
    executor: poolExecutor(pool, {
      statementTimeoutMs: config.mysqlStatementTimeoutMs,
      onUnavailable: () => hosts.suspect(),
    }),
    hosts,
    async ping(timeoutMs) {
      const { connection } = await connectMysql(hosts.inUse, { timeoutMs }).catch(
        (err: unknown) => {
          hosts.suspect();
          throw err;
        },
      );
      using limit = deadline(timeoutMs);
      // A polite COM_QUIT, so the server logs no aborted connection every few seconds.
      if (!(await settledWithin(endMysql(connection), limit.signal))) closeMysqlNow(connection);
    },
    async [Symbol.asyncDispose]() {
      // A hung MySQL must not hold the process, neither the shutdown nor the event loop after it.
      {
        using limit = deadline(PING_TIMEOUT_MS);
        await settledWithin(hosts.stop(), limit.signal);
      }
      await endPool(pool, PING_TIMEOUT_MS);
    },
  };
  try {
    await check(config, queues, version, database, wait);
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
  wait: WaitOptions,
): Promise<void> {
  const shown = redactUrl(config.mysqlUrl);
  // Start like it runs: a MySQL that is not there yet is waited for (serving /readyz 503), one
  // that refuses the credentials ends the start. Every reconnect interval, without jitter: one
  // probe per worker, not a crowd that would come back in lock-step.
  const every = config.reconnectIntervalMs;
  const interval = new Backoff({ initialMs: every, maxMs: every, jitter: 0 });
  const signal = wait.signal ?? new AbortController().signal;
  let mysql: Awaited<ReturnType<typeof probeMysql>>;
  for (let attempt = 1;; attempt++) {
    try {
      // The first host of the list that answers (docs/running.md#mysql-hosts).
      const none = await database.hosts.check();
      if (none !== undefined) throw none;
      mysql = await probeMysql(database.pool, PING_TIMEOUT_MS);
      break;
    } catch (err: unknown) {
      if (waitingCannotFix(err)) {
        throw cannotStart(
          `${describeMysqlConnectFailure(err, shown)} (waiting cannot fix this)`,
          err,
        );
      }
      wait.waiting?.(`MySQL at ${shown} not reachable yet: ${errorMessage(err)}`);
      if (attempt === 1) {
        log.warn("worker: MySQL not reachable at start-up, waiting for it", {
          url: shown,
          error: errorMessage(err),
          retry_interval_ms: config.reconnectIntervalMs,
        });
      }
      if (!(await sleepUnlessAborted(interval.next(), signal))) {
        throw cannotStart(`stopped while waiting for MySQL at ${shown}`, err);
      }
    }
  }
  wait.waiting?.(undefined);
  const { charset, collation } = mysql;
  if (charset !== "utf8mb4") {
    log.warn("worker: MySQL connection character set is not utf8mb4", { charset, collation });
  }
  log.info("worker: MySQL connected", {
    url: shown,
    ...(database.hosts.several ? { host: database.hosts.label } : {}),
    pool_size: config.mysqlMaxOpenConns,
    writers_per_table: config.mysqlWritersPerTable,
    charset,
    collation,
  });
  const writers = batchedTables().length * config.mysqlWritersPerTable;
  if (config.mysqlMaxOpenConns <= writers) {
    // The final flush runs every writer at once; so may a backlog on many queues.
    log.warn(
      "worker: the MySQL pool has fewer connections than there are table writers; " +
        "statements wait for a free connection under load and in the final flush",
      { pool_size: config.mysqlMaxOpenConns, writers },
    );
  }
  // MySQL answered, but each step below may wait on it again (a row lock, a server frozen after
  // the probe): a stop must end the start there too, and nothing after it may run.
  const step = <T>(promise: Promise<T>): Promise<T> =>
    abortable(promise, signal).catch((err: unknown) => {
      if (!signal.aborted) throw err;
      throw cannotStart(`stopped while checking MySQL at ${shown}`, err);
    });
  const needed = neededTables(config, queues);
  await step(
    assertTablesExist(database.pool, needed).catch((err: unknown) => {
      const why = hasCode(err, "missing_tables")
        ? err.message
        : `cannot look up the tables at ${shown}: ${errorMessage(err)}`;
      throw cannotStart(why, err);
    }),
  );
  await step(warnAboutSchemaDrift(database.pool, needed));
  database.hosts.start();
  await step(
    registerNode(database.executor, {
      nodeName: config.nodeName,
      version,
      startTime: Math.floor(Date.now() / 1000),
    }).catch((err: unknown) => {
      if (!PRIVILEGE_ERRNOS.has((err as { errno?: unknown } | null)?.errno as number)) throw err;
      // The first write: a read-only account is told what to grant, not just the raw MySQL error.
      const db = mysqlOptionsFromUrl(config.mysqlUrl).database ?? "statusengine";
      throw cannotStart(
        `MySQL at ${shown} does not let this account write (${errorMessage(err)}); the worker ` +
          `needs GRANT SELECT, INSERT, UPDATE, DELETE ON \`${db}\`.* (waiting cannot fix this)`,
        err,
      );
    }),
  );
}

/** A start-up refusal; every one begins "Cannot start:". */
function cannotStart(why: string, cause: unknown): WorkerError {
  return new WorkerError("startup", `Cannot start: ${why}`, { cause });
}

/** Table and column access denied: the account lacks a privilege on a table it must write. */
const PRIVILEGE_ERRNOS: ReadonlySet<number> = new Set([1142, 1143]);

/** How many differences the drift warning quotes; `schema --check` lists them all. */
const DRIFT_LISTED = 5;

/**
 * Warn once at start when the tables differ from the expected schema: an altered column may be
 * deliberate, so the worker starts, but the operator hears of it before the first dead letter.
 */
async function warnAboutSchemaDrift(pool: MysqlPool, needed: readonly TableName[]): Promise<void> {
  const differences = await diffSchema(pool).catch((err: unknown) => {
    log.warn("worker: cannot compare the schema with the expected one", {
      error: errorMessage(err),
    });
    return [];
  });
  const tables = new Set<string>(needed);
  const relevant = differences.filter((d) => tables.has(d.table));
  if (relevant.length === 0) return;
  log.warn(
    "worker: the tables differ from the schema this worker writes; rows may be cut or " +
      'refused. Run "statusengine-worker schema --check" for the full list and fix them',
    {
      differences: relevant.length,
      first: describeDifferences(relevant.slice(0, DRIFT_LISTED)).join("; "),
    },
  );
}
