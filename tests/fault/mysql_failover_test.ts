/**
 * Several MySQL hosts in `--mysql-url` (docs/running.md#mysql-hosts): two independent private
 * MariaDB servers with the same schema stand in for the nodes of a cluster. A worker drains a
 * gearmand backlog into the first; the first is killed (SIGKILL) mid-drain and never restarted
 * until the backlog is gone, so every job still held or waiting is written through the second:
 * the bound is "while the first is dead", not a clock. Then the first comes back and the worker
 * moves back to it after `--mysql-failback-after`.
 *
 * Independent servers do not replicate: the rows the first committed before it died stay in its
 * data directory, so "nothing lost" is checked over both servers together, and "nothing twice"
 * on each (a cluster would hold one copy of each row; see docs/running.md#mysql-hosts for a
 * statement whose answer was lost).
 */
import assert from "node:assert/strict";
import { startGearmand } from "../helpers/gearmand.ts";
import { type Mariadbd, WORKER_USER } from "../helpers/mariadbd.ts";
import { waitFor } from "../helpers/wait.ts";
import { jobsAtGearmand } from "../helpers/worker.ts";
import { seriesSum, seriesValue, startWorkerProcess } from "../helpers/worker_process.ts";
import {
  committed,
  committedSequences,
  drained,
  publishBacklog,
  serverDb,
  startWorkerServer,
} from "../helpers/backlog.ts";
import { LOSSTEST_QUEUE, verifyRows } from "../../src/cli/losstest.ts";

const EVENTS = 30_000;
const AFTER_FAILBACK = 2_000;
const DB = "statusengine";

const db = (server: Mariadbd) => serverDb(server, DB);

Deno.test("fault: the first of two MySQL hosts killed mid-drain: everything is written through the second while the first is dead, then the worker moves back", async () => {
  await using gearmand = await startGearmand();
  const first = await startWorkerServer(DB);
  await using _first = { [Symbol.asyncDispose]: () => first.stop() };
  const second = await startWorkerServer(DB);
  await using _second = { [Symbol.asyncDispose]: () => second.stop() };
  const h1 = `127.0.0.1:${first.port}`;
  const h2 = `127.0.0.1:${second.port}`;
  const { user, password } = WORKER_USER;
  const url = `mysql://${user}:${password}@${h1},${h2}/${DB}`;
  const runId = `fo${Date.now().toString(36)}`;
  await publishBacklog(gearmand.addr, runId, EVENTS);

  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: url,
    args: ["--mysql-failback-after", "2s"],
  });
  let text = await worker.metrics();
  assert.equal(seriesValue(text, "statusengine_mysql_host_in_use", { host: h1 }), 1);
  assert.equal(seriesValue(text, "statusengine_mysql_host_in_use", { host: h2 }), 0);

  const db1 = { query: <T>(sql: string, p?: unknown[]) => first.query<T>(sql, p, DB) };
  await waitFor(async () => (await committed(db1, runId)) >= EVENTS / 10, {
    timeoutMs: 120_000,
    intervalMs: 50,
    message: "a tenth of the backlog committed on the first host",
  });
  await first.down("SIGKILL");
  assert.ok((await jobsAtGearmand(gearmand.addr, LOSSTEST_QUEUE)) > 0, "a backlog is left");

  // The first server stays dead until the backlog is gone: every job went through the second.
  await drained(gearmand);
  text = await worker.metrics();
  assert.equal(seriesValue(text, "statusengine_mysql_host_in_use", { host: h2 }), 1);
  assert.equal(seriesValue(text, "statusengine_mysql_host_in_use", { host: h1 }), 0);
  assert.equal(seriesValue(text, "statusengine_mysql_host_switches_total"), 1);
  assert.equal(seriesSum(text, "statusengine_dead_letters_total"), 0, "no row dead-lettered");
  const ready = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
  assert.equal(ready.status, 200);
  assert.match(await ready.text(), new RegExp(`MySQL host in use: ${h2.replaceAll(".", "\\.")}`));
  assert.ok(
    worker.lines().some((l) => l.includes("MySQL connections move to another host")),
    "the move is logged",
  );

  await first.restart();
  const onFirst = await committedSequences(db(first), runId);
  const onSecond = await committedSequences(db(second), runId);
  assert.ok(onSecond.length > 0, "the second host took the rest of the backlog");
  assert.equal(verifyRows(onFirst, EVENTS).duplicates, 0, "nothing twice on the first host");
  assert.equal(verifyRows(onSecond, EVENTS).duplicates, 0, "nothing twice on the second host");
  const union = verifyRows([...new Set([...onFirst, ...onSecond])], EVENTS);
  assert.equal(union.missing, 0, "every event is on one of the hosts");

  // Back to the first host once it has answered for --mysql-failback-after.
  await waitFor(
    async () =>
      seriesValue(await worker.metrics(), "statusengine_mysql_host_in_use", { host: h1 }) === 1,
    { timeoutMs: 60_000, message: "the worker to move back to the first host" },
  );
  text = await worker.metrics();
  assert.equal(seriesValue(text, "statusengine_mysql_host_in_use", { host: h2 }), 0);
  assert.equal(seriesValue(text, "statusengine_mysql_host_switches_total"), 2);
  const backId = `${runId}b`;
  await publishBacklog(gearmand.addr, backId, AFTER_FAILBACK);
  await drained(gearmand);
  assert.equal(
    (await committedSequences(db(first), backId)).length,
    AFTER_FAILBACK,
    "written to the first",
  );
  assert.equal(
    (await committedSequences(db(second), backId)).length,
    0,
    "nothing to the second any more",
  );
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0);
});
