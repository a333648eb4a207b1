/**
 * Give-back (docs/retries.md#give-back): a worker whose MySQL cannot take writes hands the jobs it
 * holds back to the broker when another worker consumes the same queue, instead of holding them
 * until its MySQL returns; alone, it holds them as before.
 *
 * Each worker writes to a private MariaDB of its own, so "nothing lost" is checked over both
 * servers together and "nothing twice" on each. Across them, a row may be on both servers without
 * a fault: a statement that committed on the first server as it was killed, without an answer, or a
 * job only partly committed (docs/retries.md#give-back). What must not happen is the first worker
 * writing rows of jobs it gave back once its MySQL returns: its server is reached through a proxy
 * that stays shut after the restart until the test has read what the server holds, and no row of
 * the backlog it gave back may be added after that.
 */
import assert from "node:assert/strict";
import { startGearmand } from "../helpers/gearmand.ts";
import { type Mariadbd, WORKER_USER } from "../helpers/mariadbd.ts";
import { waitFor } from "../helpers/wait.ts";
import { startTcpProxy, type TcpProxy } from "../helpers/tcp_proxy.ts";
import { jobsAtGearmand, TEST_QUEUE_DURABILITY } from "../helpers/worker.ts";
import { createScratchVhost } from "../helpers/rabbitmq.ts";
import { AmqpPublisher } from "../../src/amqp/publisher.ts";
import { seriesSum, startWorkerProcess, type WorkerProcess } from "../helpers/worker_process.ts";
import {
  committed,
  committedSequences,
  drained,
  publishBacklog,
  serverDb,
  startWorkerServer,
} from "../helpers/backlog.ts";
import { LOSSTEST_QUEUE, losstestJobs, verifyRows } from "../../src/cli/losstest.ts";

const EVENTS = 20_000;
const DB = "statusengine";
const GIVEN_BACK = "statusengine_queue_jobs_given_back_total";
/** Short, so the test does not wait the default 10 s. */
const GIVE_BACK_ARGS = ["--mysql-give-back-after", "2s"];

function workerUrl(server: Mariadbd | TcpProxy): string {
  const { user, password } = WORKER_USER;
  return `mysql://${user}:${password}@127.0.0.1:${server.port}/${DB}`;
}

/**
 * Restart `server` while `proxy` (the worker's way to it) refuses connections, and read the run's
 * rows before the worker can write again: what the server held when it was killed.
 */
async function restartUnseen(server: Mariadbd, proxy: TcpProxy, runId: string): Promise<number[]> {
  await server.restart();
  const before = await committedSequences(db(server), runId);
  proxy.unblock();
  return before;
}

/** The rows of `runId` on `server` that were not there before. */
async function addedSince(server: Mariadbd, runId: string, before: number[]): Promise<number[]> {
  const had = new Set(before);
  return (await committedSequences(db(server), runId)).filter((s) => !had.has(s));
}

const db = (server: Mariadbd) => serverDb(server, DB);

async function readyz(worker: WorkerProcess): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
  await res.body?.cancel();
  return res.status;
}

async function givenBack(worker: WorkerProcess): Promise<number> {
  return seriesSum(await worker.metrics(), GIVEN_BACK);
}

Deno.test("give-back: two workers on one gearmand, the first one's MySQL killed while it holds jobs: the second writes them while the first's MySQL is down; 0 lost, none written twice", async () => {
  await using gearmand = await startGearmand();
  const first = await startWorkerServer(DB);
  await using _first = { [Symbol.asyncDispose]: () => first.stop() };
  const second = await startWorkerServer(DB);
  await using _second = { [Symbol.asyncDispose]: () => second.stop() };
  const runId = `gb${Date.now().toString(36)}`;
  await publishBacklog(gearmand.addr, runId, EVENTS);

  await using proxy = await startTcpProxy(`127.0.0.1:${first.port}`);
  await using a = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: workerUrl(proxy),
    args: GIVE_BACK_ARGS,
  });
  await waitFor(async () => (await committed(db(first), runId)) >= EVENTS / 10, {
    timeoutMs: 120_000,
    intervalMs: 50,
    message: "a tenth of the backlog committed by the first worker",
  });
  await first.down("SIGKILL");
  proxy.block();
  assert.ok((await jobsAtGearmand(gearmand.addr, LOSSTEST_QUEUE)) > 0, "a backlog is left");
  // The second worker joins while the first holds jobs.
  await using b = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: workerUrl(second),
    args: GIVE_BACK_ARGS,
  });
  const killedAt = performance.now();

  // The first MySQL stays dead until the backlog is gone: the old code held the first worker's
  // jobs (running at gearmand) until it returned, so this never drained.
  await drained(gearmand, 90_000);
  const drainedAfterS = (performance.now() - killedAt) / 1000;
  assert.ok(drainedAfterS < 60, `drained ${drainedAfterS.toFixed(1)} s after the kill`);
  assert.ok((await givenBack(a)) > 0, "the first worker gave jobs back");
  assert.equal(await givenBack(b), 0, "the second worker, whose MySQL is up, gave none back");
  assert.ok(
    a.lines().some((l) => l.includes("jobs given back to the broker")),
    "the give-back is logged",
  );
  assert.equal(seriesSum(await a.metrics(), "statusengine_dead_letters_total"), 0);
  // Not consuming and MySQL down: /readyz says so, and why.
  const res = await fetch(`http://127.0.0.1:${a.metricsPort}/readyz`);
  assert.equal(res.status, 503);
  assert.match(await res.text(), /jobs given back until MySQL answers: statusngin_hostchecks/);

  // The first MySQL returns: the first worker takes jobs again, and writes nothing it gave back.
  const atKill = await restartUnseen(first, proxy, runId);
  await waitFor(() => a.lines().some((l) => l.includes("taking jobs again")), {
    timeoutMs: 30_000,
    message: "the first worker to take jobs again",
  });
  const moreId = `${runId}m`;
  const MORE = 4_000;
  await publishBacklog(gearmand.addr, moreId, MORE);
  await drained(gearmand, 90_000);

  const onFirst = await committedSequences(db(first), runId);
  const onSecond = await committedSequences(db(second), runId);
  assert.equal(verifyRows(onFirst, EVENTS).duplicates, 0, "nothing twice on the first server");
  assert.equal(verifyRows(onSecond, EVENTS).duplicates, 0, "nothing twice on the second server");
  assert.deepEqual(
    await addedSince(first, runId, atKill),
    [],
    "the first worker wrote no row of the jobs it gave back once its MySQL returned",
  );
  assert.equal(verifyRows([...onFirst, ...onSecond], EVENTS).missing, 0, "nothing lost");
  const more = verifyRows(
    [
      ...await committedSequences(db(first), moreId),
      ...await committedSequences(db(second), moreId),
    ],
    MORE,
  );
  assert.equal(more.missing + more.duplicates, 0, "the later backlog once");
  // Connected and writing again: /readyz is 200 once the queue is consumed and MySQL answers.
  await waitFor(
    async () => (await readyz(a)) === 200,
    { timeoutMs: 30_000, message: "the first worker to be ready again" },
  );
  a.kill("SIGTERM");
  b.kill("SIGTERM");
  assert.equal((await a.status).code, 0);
  assert.equal((await b.status).code, 0);
});

Deno.test("give-back: a worker alone holds its jobs while its MySQL is down and writes every one once it returns", async () => {
  await using gearmand = await startGearmand();
  const node = await startWorkerServer(DB);
  await using _node = { [Symbol.asyncDispose]: () => node.stop() };
  const runId = `ga${Date.now().toString(36)}`;
  await publishBacklog(gearmand.addr, runId, EVENTS);
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: workerUrl(node),
    args: GIVE_BACK_ARGS,
  });
  await waitFor(async () => (await committed(db(node), runId)) >= EVENTS / 10, {
    timeoutMs: 120_000,
    intervalMs: 50,
    message: "a tenth of the backlog committed",
  });
  await node.down("SIGKILL");
  // Several give-back periods with no other worker: nothing goes back, the jobs stay held.
  await new Promise((r) => setTimeout(r, 8_000));
  assert.equal(await givenBack(worker), 0, "no other worker: nothing given back");
  const status = await jobsAtGearmand(gearmand.addr, LOSSTEST_QUEUE);
  assert.ok(status > 0, "jobs wait at gearmand");
  await node.restart();
  await drained(gearmand, 120_000);
  const rows = verifyRows(await committedSequences(db(node), runId), EVENTS);
  assert.equal(rows.missing, 0, "nothing lost");
  assert.equal(rows.duplicates, 0, "nothing twice");
  assert.equal(await givenBack(worker), 0);
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0);
});

Deno.test("give-back: RabbitMQ, two workers on one queue, the first one's MySQL killed while it holds messages: the second writes them while the first's MySQL is down", async () => {
  await using vhost = await createScratchVhost("se_giveback");
  const first = await startWorkerServer(DB);
  await using _first = { [Symbol.asyncDispose]: () => first.stop() };
  const second = await startWorkerServer(DB);
  await using _second = { [Symbol.asyncDispose]: () => second.stop() };
  const runId = `gr${Date.now().toString(36)}`;
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  await publisher.declare(LOSSTEST_QUEUE);
  const batch: (string | Uint8Array)[] = [];
  for (const job of losstestJobs(runId, EVENTS)) {
    batch.push(job.payload);
    if (batch.length >= 200) await publisher.publish(LOSSTEST_QUEUE, batch.splice(0));
  }
  await publisher.publish(LOSSTEST_QUEUE, batch);
  const args = ["--consumer", "rabbitmq", "--rabbitmq-url", vhost.url, ...GIVE_BACK_ARGS];

  await using proxy = await startTcpProxy(`127.0.0.1:${first.port}`);
  await using a = await startWorkerProcess({ gearmanAddr: "", mysqlUrl: workerUrl(proxy), args });
  await waitFor(async () => (await committed(db(first), runId)) >= EVENTS / 10, {
    timeoutMs: 120_000,
    intervalMs: 50,
    message: "a tenth of the backlog committed by the first worker",
  });
  await first.down("SIGKILL");
  proxy.block();
  assert.ok((await publisher.depth(LOSSTEST_QUEUE)).ready > 0, "a backlog is left");
  await using b = await startWorkerProcess({ gearmanAddr: "", mysqlUrl: workerUrl(second), args });

  // The old code kept the first worker's messages unacknowledged until its MySQL returned.
  const inFlight = async (w: WorkerProcess) =>
    seriesSum(await w.metrics(), "statusengine_queue_jobs_in_flight");
  await waitFor(
    async () =>
      (await publisher.depth(LOSSTEST_QUEUE)).ready === 0 && (await inFlight(a)) === 0 &&
      (await inFlight(b)) === 0,
    { timeoutMs: 90_000, intervalMs: 200, message: "every message written by the second worker" },
  );
  assert.ok((await givenBack(a)) > 0, "the first worker gave messages back");
  assert.equal(await givenBack(b), 0);
  const res = await fetch(`http://127.0.0.1:${a.metricsPort}/readyz`);
  assert.equal(res.status, 503, "the first worker is not ready while its MySQL is down");
  assert.match(
    await res.text(),
    /jobs given back until MySQL answers: [^\n]*statusngin_hostchecks/,
  );

  const atKill = await restartUnseen(first, proxy, runId);
  await waitFor(async () => (await readyz(a)) === 200, {
    timeoutMs: 30_000,
    message: "the first worker to be ready again",
  });
  const onFirst = await committedSequences(db(first), runId);
  const onSecond = await committedSequences(db(second), runId);
  assert.equal(verifyRows(onFirst, EVENTS).duplicates, 0, "nothing twice on the first server");
  assert.equal(verifyRows(onSecond, EVENTS).duplicates, 0, "nothing twice on the second server");
  assert.equal(verifyRows([...onFirst, ...onSecond], EVENTS).missing, 0, "nothing lost");
  assert.deepEqual(
    await addedSince(first, runId, atKill),
    [],
    "the first worker wrote no row of the messages it gave back once its MySQL returned",
  );
  a.kill("SIGTERM");
  b.kill("SIGTERM");
  assert.equal((await a.status).code, 0);
  assert.equal((await b.status).code, 0);
});
