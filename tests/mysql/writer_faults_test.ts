/**
 * TableWriter against a private MariaDB (tests/helpers/mariadbd.ts) that is
 * made read-only, filled up, stripped of a privilege or frozen while rows are
 * being written: every one of these is MySQL unable to take writes, not a
 * fault of the rows. The rows must be held (`db_available` 0) and committed
 * once the server is healthy again; not one may be dead-lettered (D7).
 *
 * The writer connects as a user without SUPER or READ ONLY ADMIN, as a
 * production worker does, so `read_only` applies to it; its write privileges
 * are granted per table, so a REVOKE takes effect on its open connections.
 */
import { registryValue } from "../helpers/metric_registry.ts";
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  createWorkerUser,
  type Mariadbd,
  startMariadbd,
  WORKER_USER,
} from "../helpers/mariadbd.ts";
import { waitFor } from "../helpers/wait.ts";
import { TableWriter } from "../../src/mysql/writer.ts";
import { TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { Row } from "../../src/events/types.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { JobTracker } from "../../src/mysql/job_tracker.ts";
import { DeadLetterFile, DeadLetters } from "../../src/pipeline/dead_letter.ts";
import { deadline } from "../../src/util/async.ts";
import { errorMessage } from "../../src/util/errors.ts";
import { configureLogging, resetLogging } from "../../src/log.ts";

const LOG = "statusengine_logentries";
const LOG_QUEUE = "statusngin_logentries";
const DB = "se";
const USER = WORKER_USER.user;

interface Fixture extends AsyncDisposable {
  readonly server: Mariadbd;
  readonly metrics: Metrics;
  readonly writer: TableWriter;
  readonly deadLetterPath: string;
  /** Distinct `logentry_data` values of the rows matching `where`. */
  distinct(where: string): Promise<number>;
}

async function setup(options: { statementTimeoutMs?: number } = {}): Promise<Fixture> {
  const server = await startMariadbd();
  const cleanups: (() => Promise<void>)[] = [() => server.stop()];
  const undo = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    await server.query(`CREATE DATABASE ${DB} CHARACTER SET utf8mb4`);
    await server.query(
      createTableStatement(TABLES[LOG], { collation: "utf8mb4_general_ci" }),
      [],
      DB,
    );
    // One data file for the table, so "full" is about one file (see the 1114 test).
    await server.query(`ALTER TABLE ${DB}.${LOG} REMOVE PARTITIONING`);
    await createWorkerUser(server, DB, [LOG]);
    const pool = mysql.createPool({
      host: server.host,
      port: server.port,
      ...WORKER_USER,
      database: DB,
      charset: "utf8mb4",
      connectionLimit: 4,
      connectTimeout: 2_000,
    });
    cleanups.push(() => pool.end());
    const deadLetterPath = await Deno.makeTempFile({ suffix: ".ndjson" });
    cleanups.push(() => Deno.remove(deadLetterPath));
    const metrics = createMetrics();
    const deadLetters = new DeadLetters(new DeadLetterFile(deadLetterPath), metrics);
    cleanups.push(() => deadLetters.close());
    const writer = new TableWriter({
      table: TABLES[LOG],
      batchSize: 20,
      executor: poolExecutor(pool, {
        ...(options.statementTimeoutMs === undefined
          ? {}
          : { statementTimeoutMs: options.statementTimeoutMs }),
      }),
      availability: new DbAvailability(metrics.dbAvailable),
      deadLetters,
      metrics,
    });
    cleanups.push(async () => {
      using budget = deadline(2_000);
      await writer.close(budget.signal);
    });
    return {
      server,
      metrics,
      writer,
      deadLetterPath,
      async distinct(where) {
        const rows = await server.query<{ n: number }[]>(
          `SELECT COUNT(DISTINCT logentry_data) AS n FROM ${DB}.${LOG} WHERE ${where}`,
        );
        return Number(rows[0]?.n ?? 0);
      },
      [Symbol.asyncDispose]: undo,
    };
  } catch (err: unknown) {
    await undo();
    throw err;
  }
}

let seq = 0;
function rows(n: number, marker: string): Row[] {
  return Array.from({ length: n }, (_, i) => {
    seq++;
    return {
      entry_time: 1_700_000_000 + seq,
      logentry_type: 262144,
      logentry_data: `${marker}-${i}`,
      node_name: "N",
    };
  });
}

/**
 * Commit one row, break the server with `inject`, hand the writer 40 rows
 * (two statements), wait until they are held and retried, `heal`, and check
 * that all of them were committed and none dead-lettered.
 */
async function heldThroughFault(
  fx: Fixture,
  inject: () => Promise<void>,
  heal: () => Promise<void>,
): Promise<void> {
  const warm = new JobTracker(LOG_QUEUE, 1);
  await fx.writer.add(rows(1, "warm"), warm);
  await warm.done;
  await inject();
  const job = new JobTracker(LOG_QUEUE, 40);
  let settled = false;
  void job.done.then(() => (settled = true));
  const flushesBefore = await registryValue(fx.metrics, "statusengine_db_flushes_total", {
    table: LOG,
  });
  await fx.writer.add(rows(40, "fault"), job);
  try {
    await waitFor(
      async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0,
      { timeoutMs: 30_000, message: "db_available 0" },
    );
  } catch (err: unknown) {
    // What the writer saw, without asking the broken server: did statements commit after the
    // fault (then it did not take effect), and what state its process is in (T: stopped).
    const flushes = await registryValue(fx.metrics, "statusengine_db_flushes_total", {
      table: LOG,
    });
    const retries = await registryValue(fx.metrics, "statusengine_db_connection_retries_total");
    const stat = await Deno.readTextFile(`/proc/${fx.server.pid}/stat`).catch(() => ") gone");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    throw new Error(
      `${errorMessage(err)}; statements committed after the fault: ${flushes - flushesBefore}, ` +
        `connection retries: ${retries}, server process state: ${state}`,
      { cause: err },
    );
  }
  await waitFor(
    async () => (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 3,
    { timeoutMs: 30_000, message: "the held statement to be retried" },
  );
  assert.equal(settled, false, "a job resolved while MySQL could not take its rows");
  assert.equal(job.deadLettered, 0);
  await heal();
  await job.done;
  // Distinct: a statement given up after the timeout may still have run once the server resumed,
  // and logentries has no natural key to fold the retry into (docs/writers.md#upsert-or-insert).
  assert.equal(await fx.distinct("logentry_data LIKE 'fault-%'"), 40);
  assert.equal(job.deadLettered, 0);
  assert.equal((await Deno.readTextFile(fx.deadLetterPath)).trim(), "", "nothing dead-lettered");
  assert.equal(
    await registryValue(fx.metrics, "statusengine_dead_letters_total", {
      queue_name: LOG_QUEUE,
      reason: "sql_rejected",
    }),
    0,
  );
  assert.equal(
    await registryValue(fx.metrics, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
}

Deno.test("writer: a read-only server (1290) holds the rows and never dead-letters them (D7)", async () => {
  await using fx = await setup();
  await heldThroughFault(
    fx,
    () => fx.server.query("SET GLOBAL read_only = 1"),
    () => fx.server.query("SET GLOBAL read_only = 0"),
  );
});

Deno.test("writer: a revoked INSERT privilege (1142) holds the rows and never dead-letters them (D7)", async () => {
  await using fx = await setup();
  await heldThroughFault(
    fx,
    () => fx.server.query(`REVOKE INSERT ON ${DB}.${LOG} FROM '${USER}'@'%'`),
    () => fx.server.query(`GRANT INSERT ON ${DB}.${LOG} TO '${USER}'@'%'`),
  );
});

// A full disk, as InnoDB sees it: the table's data file cannot grow (the
// server's file size limit is set to the size of its largest file, which the
// table is made to be), so the next page it needs fails with 1114 "table is
// full"; lifting the limit is freeing the disk.
Deno.test("writer: a full table (1114, disk full) holds the rows and never dead-letters them (D7)", async () => {
  await using fx = await setup();
  const file = `${DB}/${LOG}.ibd`;
  // Grow the table until it is the server's largest file.
  await fx.server.query(
    `INSERT INTO ${DB}.${LOG} (entry_time, logentry_type, logentry_data, node_name) ` +
      "VALUES (1, 0, REPEAT('f', 2000), 'filler')",
  );
  for (;;) {
    const sizes = await fx.server.fileSizes();
    const own = sizes.get(file) ?? 0;
    const others = Math.max(...[...sizes].filter(([p]) => p !== file).map(([, s]) => s));
    if (own > others) break;
    await fx.server.query(
      `INSERT INTO ${DB}.${LOG} (entry_time, logentry_type, logentry_data, node_name) ` +
        `SELECT entry_time, logentry_type, logentry_data, node_name FROM ${DB}.${LOG} ` +
        "WHERE node_name = 'filler' LIMIT 2000",
    );
  }
  await heldThroughFault(
    fx,
    async () => {
      const sizes = await fx.server.fileSizes();
      await fx.server.limitFileSize(Math.max(...sizes.values()));
      // Use up the free pages inside the file, big rows first, then rows as small as the writer's.
      for (const pad of [2000, 200, 1]) {
        for (;;) {
          const full = await fx.server.query(
            `INSERT INTO ${DB}.${LOG} (entry_time, logentry_type, logentry_data, node_name) ` +
              `VALUES (1, 0, REPEAT('f', ${pad}), 'filler')`,
          ).then(() => false, (err: { errno?: number }) => {
            if (err.errno !== 1114) throw err;
            return true;
          });
          if (full) break;
        }
      }
    },
    () => fx.server.limitFileSize(undefined),
  );
});

Deno.test("writer: a frozen server (SIGSTOP) is unavailable once a statement outlives the statement timeout; rows held, one warning (docs/writers.md#retry-policy)", async () => {
  const logs: string[] = [];
  await configureLogging({ level: "info", format: "text", write: (line) => logs.push(line) });
  try {
    await using fx = await setup({ statementTimeoutMs: 1_000 });
    await heldThroughFault(
      fx,
      () => Promise.resolve(fx.server.pause()),
      () => Promise.resolve(fx.server.resume()),
    );
    const timeouts = logs.filter((l) => l.includes("--mysql-statement-timeout"));
    assert.equal(timeouts.length, 1, `one timeout warning per outage:\n${timeouts.join("\n")}`);
    assert.ok(
      logs.some((l) => l.includes("MySQL takes writes again")),
      "the end of the outage is logged",
    );
  } finally {
    await resetLogging();
  }
});

/** One row committed (the writer's connection is open), then the server refuses writes. */
async function connectedThenReadOnly(fx: Fixture): Promise<void> {
  const warm = new JobTracker(LOG_QUEUE, 1);
  await fx.writer.add(rows(1, "warm"), warm);
  await warm.done;
  await fx.server.query("SET GLOBAL read_only = 1");
}

Deno.test("writer: rows of jobs given back while held are dropped: the others are committed once MySQL takes writes, those never", async () => {
  await using fx = await setup();
  await connectedThenReadOnly(fx);
  let givenBack = false;
  const kept = new JobTracker(LOG_QUEUE, 10);
  const gone = new JobTracker(LOG_QUEUE, 10, () => givenBack);
  // Both jobs' rows share the held statement (batch size 20).
  await fx.writer.add(rows(10, "kept"), kept);
  await fx.writer.add(rows(10, "gone"), gone);
  await waitFor(
    async () => (await registryValue(fx.metrics, "statusengine_db_connection_retries_total")) >= 2,
    { timeoutMs: 30_000, message: "the statement to be held" },
  );
  givenBack = true;
  await fx.server.query("SET GLOBAL read_only = 0");
  await kept.done;
  assert.equal(await fx.distinct("logentry_data LIKE 'kept-%'"), 10);
  assert.equal(await fx.distinct("logentry_data LIKE 'gone-%'"), 0, "given-back rows not written");
  assert.equal(gone.pending, 10, "the given-back job is not told of a commit");
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
});

Deno.test("writer: a held statement whose every row was given back ends without MySQL, and its outage with it", async () => {
  await using fx = await setup();
  await connectedThenReadOnly(fx);
  let givenBack = false;
  const gone = new JobTracker(LOG_QUEUE, 30, () => givenBack);
  await fx.writer.add(rows(30, "all-gone"), gone);
  await waitFor(
    async () => (await registryValue(fx.metrics, "statusengine_db_available")) === 0,
    { timeoutMs: 30_000, message: "the statement to be held" },
  );
  givenBack = true;
  // Still read-only: the writer has nothing left to write and goes idle.
  using limit = deadline(15_000);
  await fx.writer.flush(limit.signal);
  assert.equal(await registryValue(fx.metrics, "statusengine_db_available"), 1);
  await fx.server.query("SET GLOBAL read_only = 0");
  assert.equal(await fx.distinct("logentry_data LIKE 'all-gone-%'"), 0);
  assert.equal(gone.pending, 30);
});
