/**
 * MySQL unable to take writes for a while, mid-drain: a backlog waits at a
 * private gearmand, the worker (its own process) drains it into a private
 * mariadbd, and the server is made read-only, filled up, stripped of the
 * INSERT privilege or frozen for some seconds. None of these is the rows'
 * fault: the worker must hold them (`db_available` 0, `/readyz` 503),
 * dead-letter none, and once the server is healthy finish with no event
 * missing (D1, D7).
 *
 * The worker connects as a user without SUPER or READ ONLY ADMIN, as in
 * production, so `read_only` applies to it; its write privileges are granted
 * per table, so a REVOKE takes effect on its open connections.
 */
import assert from "node:assert/strict";
import { type Gearmand, startGearmand } from "../helpers/gearmand.ts";
import {
  createWorkerUser,
  type Mariadbd,
  startMariadbd,
  WORKER_USER,
} from "../helpers/mariadbd.ts";
import { waitFor } from "../helpers/wait.ts";
import { createSchema, jobsAtGearmand } from "../helpers/worker.ts";
import {
  seriesSum,
  seriesValue,
  startWorkerProcess,
  type WorkerProcess,
} from "../helpers/worker_process.ts";
import {
  assertNothingMissing,
  committed,
  drained,
  publishBacklog,
  type Queryable,
} from "../helpers/backlog.ts";
import { LOSSTEST_QUEUE } from "../../src/cli/losstest.ts";
import { LOSSTEST_TABLE } from "../../src/mysql/mod.ts";
import { ALL_TABLES } from "../../src/mysql/catalogue.ts";

const EVENTS = 50_000;
const DB = "statusengine";
const USER = WORKER_USER.user;

interface Env extends AsyncDisposable {
  readonly gearmand: Gearmand;
  readonly server: Mariadbd;
  /** Root access to the worker's database. */
  readonly db: Queryable;
  /** The worker's URL (restricted user). */
  readonly url: string;
  readonly deadLetterPath: string;
}

async function setup(): Promise<Env> {
  const gearmand = await startGearmand();
  const cleanups: (() => Promise<void>)[] = [() => gearmand.stop()];
  const undo = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    const server = await startMariadbd();
    cleanups.push(() => server.stop());
    await server.query(`CREATE DATABASE ${DB} CHARACTER SET utf8mb4`);
    await createSchema(server.url({ database: DB }));
    await createWorkerUser(server, DB, ALL_TABLES.map((t) => t.name));
    const dir = await Deno.makeTempDir({ prefix: "se-dbfault-" });
    cleanups.push(() => Deno.remove(dir, { recursive: true }));
    return {
      gearmand,
      server,
      db: { query: <T>(sql: string, params?: unknown[]) => server.query<T>(sql, params, DB) },
      url: server.url({ ...WORKER_USER, database: DB }),
      deadLetterPath: `${dir}/dead.ndjson`,
      [Symbol.asyncDispose]: undo,
    };
  } catch (err: unknown) {
    await undo();
    throw err;
  }
}

async function readyz(worker: WorkerProcess): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
  return { status: res.status, text: await res.text() };
}

/**
 * Drain a backlog, `inject` the fault once a tenth is committed, check that
 * the worker holds (db_available 0, /readyz 503, retries climbing, backlog
 * waiting), `heal`, and check that nothing is missing and nothing was
 * dead-lettered.
 */
async function faultMidDrain(
  env: Env,
  runId: string,
  fault: { inject(): Promise<void>; heal(): Promise<void> },
  args: readonly string[] = [],
): Promise<WorkerProcess> {
  await publishBacklog(env.gearmand.addr, runId, EVENTS);
  const worker = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: env.url,
    args: ["--dead-letter-file", env.deadLetterPath, ...args],
  });
  try {
    await waitFor(async () => (await committed(env.db, runId)) >= EVENTS / 10, {
      timeoutMs: 120_000,
      intervalMs: 50,
      message: "a tenth of the backlog to be committed",
    });
    await fault.inject();
    await waitFor(
      async () => seriesValue(await worker.metrics(), "statusengine_db_available") === 0,
      { timeoutMs: 60_000, message: "db_available 0" },
    );
    const notReady = await readyz(worker);
    assert.equal(notReady.status, 503);
    assert.match(notReady.text, /MySQL unavailable/);
    // Held for several back-offs (100 ms doubling: about 6 s), not given up.
    await waitFor(
      async () =>
        seriesValue(await worker.metrics(), "statusengine_db_connection_retries_total") >= 7,
      { timeoutMs: 60_000, message: "the held rows retried for a while" },
    );
    assert.ok(
      (await jobsAtGearmand(env.gearmand.addr, LOSSTEST_QUEUE)) > 0,
      "the backlog waits at gearmand during the fault",
    );
    await fault.heal();
    await drained(env.gearmand);
    await assertNothingMissing(env.db, runId, EVENTS);
    const text = await worker.metrics();
    assert.equal(seriesValue(text, "statusengine_db_available"), 1);
    assert.equal(seriesSum(text, "statusengine_dead_letters_total"), 0, "no row dead-lettered");
    const letters = await Deno.readTextFile(env.deadLetterPath).catch(() => "");
    assert.equal(letters, "", "the dead-letter file is empty");
    assert.equal((await readyz(worker)).status, 200);
    return worker;
  } catch (err: unknown) {
    await worker[Symbol.asyncDispose]();
    throw err;
  }
}

Deno.test("fault: MariaDB read-only (1290) mid-drain: rows held, none dead-lettered, nothing missing", async () => {
  await using env = await setup();
  await using _worker = await faultMidDrain(env, "readonly", {
    inject: () => env.server.query("SET GLOBAL read_only = 1"),
    heal: () => env.server.query("SET GLOBAL read_only = 0"),
  });
});

Deno.test("fault: INSERT privilege revoked (1142) mid-drain: rows held, none dead-lettered, nothing missing", async () => {
  await using env = await setup();
  await using _worker = await faultMidDrain(env, "revoked", {
    inject: () => env.server.query(`REVOKE INSERT ON ${DB}.${LOSSTEST_TABLE} FROM '${USER}'@'%'`),
    heal: () => env.server.query(`GRANT INSERT ON ${DB}.${LOSSTEST_TABLE} TO '${USER}'@'%'`),
  });
});

// A full disk as InnoDB sees it: the table's data file may not grow. The
// table is made one file (no partitions) and the server's largest, then the
// server's file size limit is set to that size and the free pages left inside
// it are used up: the next page the worker needs fails with 1114 "table is
// full". Lifting the limit is freeing the disk.
Deno.test("fault: disk full (1114) mid-drain: rows held, none dead-lettered, nothing missing", async () => {
  await using env = await setup();
  const table = `${DB}.${LOSSTEST_TABLE}`;
  const file = `${DB}/${LOSSTEST_TABLE}.ibd`;
  await env.server.query(`ALTER TABLE ${table} REMOVE PARTITIONING`);
  const filler = (pad: number, from: string) =>
    `INSERT INTO ${table} (hostname, start_time, end_time, output, long_output) ` +
    `SELECT UUID(), 1, 1, 'filler', REPEAT('f', ${pad}) ${from}`;
  await env.server.query(filler(4000, ""));
  for (;;) {
    const sizes = await env.server.fileSizes();
    const own = sizes.get(file) ?? 0;
    const others = Math.max(...[...sizes].filter(([p]) => p !== file).map(([, s]) => s));
    if (own > others) break;
    await env.server.query(filler(4000, `FROM ${table} WHERE output = 'filler' LIMIT 2000`));
  }
  await using _worker = await faultMidDrain(env, "diskfull", {
    async inject() {
      const sizes = await env.server.fileSizes();
      await env.server.limitFileSize(Math.max(...sizes.values()));
      for (const pad of [4000, 400, 0]) {
        for (;;) {
          const full = await env.server.query(filler(pad, "")).then(
            () => false,
            (err: { errno?: number }) => {
              if (err.errno !== 1114) throw err;
              return true;
            },
          );
          if (full) break;
        }
      }
    },
    heal: () => env.server.limitFileSize(undefined),
  });
});

Deno.test("fault: MariaDB frozen (SIGSTOP) mid-drain: unavailable after --mysql-statement-timeout, one warning, nothing missing", async () => {
  await using env = await setup();
  await using worker = await faultMidDrain(env, "sigstop", {
    inject: () => Promise.resolve(env.server.pause()),
    heal: () => Promise.resolve(env.server.resume()),
  }, ["--mysql-statement-timeout", "2s"]);
  const warnings = worker.lines().filter((l) => l.includes("--mysql-statement-timeout"));
  assert.equal(warnings.length, 1, `one timeout warning per outage:\n${warnings.join("\n")}`);
});
