/**
 * Fault injection: a backlog of 100,000 events, a fault mid-drain, the worker
 * left (or restarted) to finish, then the losstest check: no event missing
 * (D1, D7). Real gearmand, real MariaDB, TCP proxies in between.
 *
 * These are the long tests of the suite; `deno task test:quick` leaves them out,
 * `deno task test` (and CI) runs them.
 */
import assert from "node:assert/strict";
import { createScratchDatabase, type ScratchDatabase } from "../helpers/mysql.ts";
import { startGearmand } from "../helpers/gearmand.ts";
import { startMysqlProxy, startTcpProxy } from "../helpers/tcp_proxy.ts";
import { track, waitFor } from "../helpers/wait.ts";
import { createSchema, jobsAtGearmand, TEST_QUEUE_DURABILITY } from "../helpers/worker.ts";
import { seriesValue, startWorkerProcess, type WorkerProcess } from "../helpers/worker_process.ts";
import { GearmanClient } from "../../src/gearman/client.ts";
import { AmqpPublisher } from "../../src/amqp/publisher.ts";
import { createScratchVhost } from "../helpers/rabbitmq.ts";
import {
  formatRanges,
  LOSSTEST_QUEUE,
  losstestJobs,
  parseLossMarker,
  verifyRows,
} from "../../src/cli/losstest.ts";
import {
  assertNothingMissing,
  BACKLOG_EVENTS,
  committed,
  drained,
  publishBacklog,
} from "../helpers/backlog.ts";

const EVENTS = BACKLOG_EVENTS;
const QUEUE = LOSSTEST_QUEUE;

async function midDrain(db: ScratchDatabase, runId: string): Promise<void> {
  await waitFor(async () => (await committed(db, runId)) >= EVENTS / 5, {
    timeoutMs: 120_000,
    intervalMs: 50,
    message: "a fifth of the backlog to be committed",
  });
}

async function setup(options: { sqlite?: boolean } = {}) {
  const sqliteDir = options.sqlite ? await Deno.makeTempDir({ prefix: "se-gm-" }) : undefined;
  const gearmand = await startGearmand(
    sqliteDir === undefined ? {} : { sqliteFile: `${sqliteDir}/queue.db` },
  );
  const db = await createScratchDatabase("se_fault");
  await createSchema(db.url);
  return {
    gearmand,
    db,
    async [Symbol.asyncDispose]() {
      await gearmand.stop();
      await db.drop();
      if (sqliteDir !== undefined) await Deno.remove(sqliteDir, { recursive: true });
    },
  };
}

function exitedCleanly(worker: WorkerProcess, status: Deno.CommandStatus): void {
  assert.equal(status.code, 0, `${worker.lines().slice(-20).join("\n")}\n${worker.stderr()}`);
}

Deno.test("fault: SIGTERM mid-drain, restart: no event missing", async () => {
  await using env = await setup();
  await publishBacklog(env.gearmand.addr, "term");
  {
    await using worker = await startWorkerProcess({
      gearmanAddr: env.gearmand.addr,
      mysqlUrl: env.db.url,
    });
    await midDrain(env.db, "term");
    worker.kill("SIGTERM");
    exitedCleanly(worker, await worker.status);
  }
  await using _again = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: env.db.url,
  });
  await drained(env.gearmand);
  await assertNothingMissing(env.db, "term");
});

Deno.test("fault: SIGKILL mid-drain, restart: no event missing (D1)", async () => {
  await using env = await setup();
  await publishBacklog(env.gearmand.addr, "kill");
  {
    await using worker = await startWorkerProcess({
      gearmanAddr: env.gearmand.addr,
      mysqlUrl: env.db.url,
    });
    await midDrain(env.db, "kill");
    worker.kill("SIGKILL");
    assert.equal((await worker.status).signal, "SIGKILL");
  }
  await using _again = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: env.db.url,
  });
  await drained(env.gearmand);
  await assertNothingMissing(env.db, "kill");
});

Deno.test("fault: RabbitMQ backend, SIGKILL mid-drain, restart: no event missing (D1)", async () => {
  await using vhost = await createScratchVhost("se_fault");
  await using db = await createScratchDatabase("se_fault");
  await createSchema(db.url);
  {
    await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
    await publisher.declare(QUEUE);
    const batch: (string | Uint8Array)[] = [];
    for (const job of losstestJobs("rkill", EVENTS)) {
      batch.push(job.payload);
      if (batch.length >= 200) await publisher.publish(QUEUE, batch.splice(0));
    }
    await publisher.publish(QUEUE, batch);
  }
  const args = ["--consumer", "rabbitmq", "--rabbitmq-url", vhost.url];
  {
    await using worker = await startWorkerProcess({ gearmanAddr: "", mysqlUrl: db.url, args });
    await midDrain(db, "rkill");
    worker.kill("SIGKILL");
    assert.equal((await worker.status).signal, "SIGKILL");
  }
  // Whatever was delivered but not acknowledged went back to the queue with the connection.
  await using _again = await startWorkerProcess({ gearmanAddr: "", mysqlUrl: db.url, args });
  await waitFor(async () => (await committed(db, "rkill")) >= EVENTS, {
    timeoutMs: 180_000,
    intervalMs: 200,
    message: "the RabbitMQ backlog to drain",
  });
  await assertNothingMissing(db, "rkill");
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  assert.equal((await publisher.depth(QUEUE)).ready, 0);
});

for (const seconds of [1, 20]) {
  Deno.test(`fault: the worker's connections to gearmand cut for ${seconds} s mid-drain: no event missing`, async () => {
    await using env = await setup();
    await using proxy = await startTcpProxy(env.gearmand.addr);
    const runId = `cut${seconds}`;
    await publishBacklog(env.gearmand.addr, runId);
    await using worker = await startWorkerProcess({
      gearmanAddr: proxy.addr,
      mysqlUrl: env.db.url,
    });
    await midDrain(env.db, runId);
    proxy.block();
    await waitFor(async () =>
      seriesValue(await worker.metrics(), "statusengine_queue_connected", {
        queue_name: QUEUE,
      }) === 0, { message: "queue_connected 0" });
    await new Promise((r) => setTimeout(r, seconds * 1000));
    proxy.unblock();
    await drained(env.gearmand);
    await assertNothingMissing(env.db, runId);
    const text = await worker.metrics();
    assert.equal(seriesValue(text, "statusengine_queue_connected", { queue_name: QUEUE }), 1);
    assert.ok(seriesValue(text, "statusengine_queue_reconnects_total", { queue_name: QUEUE }) >= 1);
  });
}

Deno.test("fault: gearmand restarted mid-drain (persistent sqlite queue): no event missing", async () => {
  await using env = await setup({ sqlite: true });
  await publishBacklog(env.gearmand.addr, "gmrestart");
  await using worker = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: env.db.url,
  });
  await midDrain(env.db, "gmrestart");
  const before = await committed(env.db, "gmrestart");
  await env.gearmand.restart();
  // What gearmand replays from its store is what it still owed; anything it
  // lost would be broker loss (its builtin queue keeps nothing over a restart).
  const replayed = await jobsAtGearmand(env.gearmand.addr, QUEUE);
  assert.ok(replayed > 0, "gearmand replayed the unfinished jobs from its persistent queue");
  await drained(env.gearmand);
  const rows = await env.db.query<{ hostname: string }[]>(
    "SELECT hostname FROM statusengine_hostchecks WHERE hostname LIKE 'lt-gmrestart-%'",
  );
  const report = verifyRows(
    rows.map((r) => parseLossMarker("gmrestart", r.hostname) ?? -1).filter((s) => s >= 0),
    EVENTS,
  );
  assert.equal(
    report.missing,
    0,
    `missing ${report.missing} (committed before the restart: ${before}, ` +
      `jobs replayed by gearmand: ${replayed}): ${formatRanges(report.missingRanges)}`,
  );
  assert.ok(
    seriesValue(await worker.metrics(), "statusengine_queue_reconnects_total", {
      queue_name: QUEUE,
    }) >= 1,
  );
});

Deno.test("fault: MariaDB unreachable for 20 s mid-drain: held, nothing missing", async () => {
  await using env = await setup();
  await using proxy = await startMysqlProxy(env.db);
  await publishBacklog(env.gearmand.addr, "dbdown");
  await using worker = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: proxy.url,
  });
  await midDrain(env.db, "dbdown");
  proxy.block();
  await waitFor(
    async () => seriesValue(await worker.metrics(), "statusengine_db_available") === 0,
    {
      message: "db_available 0",
    },
  );
  await new Promise((r) => setTimeout(r, 20_000));
  const waiting = await jobsAtGearmand(env.gearmand.addr, QUEUE);
  assert.ok(waiting > 0, "the backlog waits at gearmand during the outage");
  proxy.unblock();
  await drained(env.gearmand);
  await assertNothingMissing(env.db, "dbdown");
  assert.equal(seriesValue(await worker.metrics(), "statusengine_db_available"), 1);
});

Deno.test("fault: SIGTERM while MariaDB is unreachable, restart: no event missing", async () => {
  await using env = await setup();
  await using proxy = await startMysqlProxy(env.db);
  await publishBacklog(env.gearmand.addr, "termdown");
  {
    await using worker = await startWorkerProcess({
      gearmanAddr: env.gearmand.addr,
      mysqlUrl: proxy.url,
      args: ["--drain-timeout", "3s", "--shutdown-flush-timeout", "2s"],
    });
    await midDrain(env.db, "termdown");
    proxy.block();
    await waitFor(
      async () => seriesValue(await worker.metrics(), "statusengine_db_available") === 0,
      {
        message: "db_available 0",
      },
    );
    worker.kill("SIGTERM");
    // Bounded shutdown even though nothing could be committed (no unbounded wait after the drain,
    // docs/decisions.md#stop-wait): the drain and flush budgets end it, not MySQL coming back.
    const exited = track(worker.status);
    await waitFor(() => exited.settled, {
      timeoutMs: 15_000,
      message: "shutdown to end within its budgets while MySQL is away",
    });
    exitedCleanly(worker, await worker.status);
  }
  proxy.unblock();
  await using _again = await startWorkerProcess({
    gearmanAddr: env.gearmand.addr,
    mysqlUrl: proxy.url,
  });
  await drained(env.gearmand);
  await assertNothingMissing(env.db, "termdown");
});

Deno.test("fault: 1 % malformed jobs: every good event arrives, every bad job is in the dead-letter file (D7)", async () => {
  await using env = await setup();
  const dir = await Deno.makeTempDir({ prefix: "se-dl-" });
  try {
    const bad: string[] = [];
    {
      await using client = await GearmanClient.connect(env.gearmand.addr, { window: 200 });
      const pending: Promise<string>[] = [];
      let i = 0;
      for (const job of losstestJobs("mixed", EVENTS)) {
        pending.push(client.submitBackground(QUEUE, job.payload));
        if (++i % 100 === 0) {
          const kinds = [
            `not json ${i}`,
            `{"messages":[{"type":801,"timestamp":"later","hostcheck":{"host_name":"bad-${i}"}}]}`,
            `[${i}]`,
            `{"messages":[{"type":801,"timestamp":1,"hostcheck":{"host_name":"bad-${i}","start_time":"x"}}]}`,
          ];
          const payload = kinds[(i / 100) % kinds.length] as string;
          bad.push(payload);
          pending.push(client.submitBackground(QUEUE, payload));
        }
        if (pending.length >= 500) await Promise.all(pending.splice(0));
      }
      await Promise.all(pending);
    }
    assert.equal(bad.length, 10, "1 % of 1,000 jobs");
    await using worker = await startWorkerProcess({
      gearmanAddr: env.gearmand.addr,
      mysqlUrl: env.db.url,
      args: ["--dead-letter-file", `${dir}/dead.ndjson`],
    });
    await drained(env.gearmand);
    await assertNothingMissing(env.db, "mixed");
    const letters = (await Deno.readTextFile(`${dir}/dead.ndjson`)).trim().split("\n").map((l) =>
      JSON.parse(l) as { payload: string; queue: string; reason: string }
    );
    assert.deepEqual(letters.map((l) => l.payload).sort(), [...bad].sort());
    assert.ok(letters.every((l) => l.queue === QUEUE && l.reason !== ""));
    const text = await worker.metrics();
    let dead = 0;
    for (const reason of ["not_json", "not_object", "bad_type", "missing_field", "bad_shape"]) {
      dead += seriesValue(text, "statusengine_dead_letters_total", {
        queue_name: QUEUE,
        reason,
      });
    }
    assert.equal(dead, 10);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
