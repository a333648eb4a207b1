/**
 * End to end through RabbitMQ: broker → worker (consumer "rabbitmq") →
 * MariaDB, with the same assembly the `run` command uses. The worker consumes
 * the real queue name `statusngin_hostchecks` on the test broker, so each test
 * deletes that queue before and after itself (no other test file uses it).
 */
import assert from "node:assert/strict";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  metricValue,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
  testRabbitMqUrl,
} from "./helpers/worker.ts";
import type { RunningWorker } from "../src/daemon/mod.ts";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const Q = "statusngin_hostchecks";

function fixture(): string {
  return Deno.readTextFileSync(new URL(`${Q}.job`, FIXTURES));
}

/** A bulk job of 10 host checks with distinct host names. */
function job(i: number): string {
  const template = JSON.parse(fixture());
  const doc = structuredClone(template);
  doc.messages = Array.from({ length: 10 }, (_, j) => {
    const m = structuredClone(template.messages[0]);
    m.hostcheck.host_name = `amqp-${i}-${j}`;
    return m;
  });
  return JSON.stringify(doc);
}

/** A publisher that empties the shared queue name before and after the test. */
async function freshQueue(): Promise<AmqpPublisher> {
  const publisher = await AmqpPublisher.connect(testRabbitMqUrl(), TEST_QUEUE_DURABILITY);
  await publisher.deleteQueue(Q);
  await publisher.declare(Q);
  const close = publisher.close.bind(publisher);
  return Object.assign(publisher, {
    async [Symbol.asyncDispose]() {
      await publisher.deleteQueue(Q).catch(() => {});
      await close();
    },
  });
}

function completed(worker: RunningWorker): Promise<number> {
  return metricValue(worker, "statusengine_queue_jobs_total", {
    queue_name: Q,
    result: "completed",
  });
}

async function hostchecks(db: { query<T>(sql: string): Promise<T> }): Promise<number> {
  const [row] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_hostchecks WHERE hostname LIKE 'amqp-%'",
  );
  return Number(row?.n);
}

Deno.test("amqp pipeline: a fixture published to RabbitMQ is written to MariaDB and acked once committed; an undecodable one is dead-lettered and acked (D1, D7)", async () => {
  await using publisher = await freshQueue();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const deadLetterFile = await Deno.makeTempFile({ suffix: ".ndjson" });
  try {
    {
      await using worker = await startTestWorker(
        testConfig({ consumer: "rabbitmq", mysqlUrl: db.url, queues: [Q], deadLetterFile }),
      );
      assert.equal(await metricValue(worker, "statusengine_queue_connected", { queue_name: Q }), 1);
      assert.equal((await publisher.depth(Q)).consumers, 1);
      await publisher.publish(Q, [fixture(), "this is not json"]);
      await waitFor(async () => (await completed(worker)) === 2, { message: "two jobs acked" });
      // Acked only after the commit (D1): the row is there the moment the job counts as done.
      const rows = await db.query<Record<string, unknown>[]>(
        "SELECT hostname, start_time_usec, command FROM statusengine_hostchecks",
      );
      assert.equal(rows.length, 1);
      assert.equal(rows[0]?.["start_time_usec"], 701779);
      assert.equal(
        rows[0]?.["command"],
        "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
      );
      const letters = (await Deno.readTextFile(deadLetterFile)).trim().split("\n").map((l) =>
        JSON.parse(l)
      );
      assert.deepEqual(letters.map((l) => [l.queue, l.reason]), [[Q, "not_json"]]);
      assert.equal((await publisher.depth(Q)).ready, 0);
    }
    // After the worker stopped: nothing came back, both messages were acknowledged.
    assert.deepEqual(await publisher.depth(Q), { ready: 0, consumers: 0 });
  } finally {
    await Deno.remove(deadLetterFile);
  }
});

Deno.test("amqp pipeline: while MySQL is unreachable no message is acked and the backlog stays at the broker; nothing is lost after MySQL returns (D1)", async () => {
  await using publisher = await freshQueue();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(
    testConfig({
      consumer: "rabbitmq",
      rabbitmq: { url: testRabbitMqUrl(), prefetch: 5, ...TEST_QUEUE_DURABILITY },
      mysqlUrl: proxy.url,
      queues: [Q],
    }),
  );
  await publisher.publish(Q, Array.from({ length: 5 }, (_, i) => job(i)));
  await waitFor(async () => (await completed(worker)) === 5, { message: "5 jobs before the cut" });

  proxy.block();
  await publisher.publish(Q, Array.from({ length: 50 }, (_, i) => job(5 + i)));
  await waitFor(async () => (await metricValue(worker, "statusengine_db_available")) === 0, {
    message: "db_available 0",
  });
  await waitFor(
    async () =>
      (await metricValue(worker, "statusengine_queue_jobs_in_flight", { queue_name: Q })) > 0,
    { message: "jobs waiting for their commit" },
  );
  // Prefetch 5: five messages delivered, all unacked; 45 ready at the broker. How many of the
  // five are in their handlers depends on when the window saw MySQL slow and halved (to 1).
  await waitFor(async () => (await publisher.depth(Q)).ready === 45, {
    message: "45 of 50 still ready at the broker",
  });
  const inFlight = await metricValue(worker, "statusengine_queue_jobs_in_flight", {
    queue_name: Q,
  });
  assert.ok(inFlight >= 1 && inFlight <= 5, `jobs in flight: ${inFlight}`);
  assert.equal(await completed(worker), 5, "no job acked while MySQL was unreachable");

  proxy.unblock();
  await waitFor(async () => (await completed(worker)) === 55, {
    timeoutMs: 30_000,
    message: "backlog drained after the outage",
  });
  assert.equal((await publisher.depth(Q)).ready, 0);
  assert.equal(await hostchecks(db), 550);
  assert.equal(
    await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: Q,
      result: "abandoned",
    }),
    0,
  );
});

Deno.test("amqp pipeline: a worker stopped while MySQL is down acks nothing; the next worker writes every message (D1)", async () => {
  await using publisher = await freshQueue();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  const first = await startTestWorker(
    testConfig({
      consumer: "rabbitmq",
      rabbitmq: { url: testRabbitMqUrl(), prefetch: 5, ...TEST_QUEUE_DURABILITY },
      mysqlUrl: proxy.url,
      queues: [Q],
      drainTimeoutMs: 300,
      shutdownFlushTimeoutMs: 300,
    }),
  );
  try {
    proxy.block();
    await publisher.publish(Q, Array.from({ length: 20 }, (_, i) => job(i)));
    await waitFor(
      async () =>
        (await metricValue(first, "statusengine_queue_jobs_in_flight", { queue_name: Q })) > 0,
      { message: "a job waiting for its commit" },
    );
  } finally {
    await first.stop();
  }
  assert.equal(await completed(first), 0);
  await waitFor(async () => (await publisher.depth(Q)).ready === 20, {
    message: "every message back at the broker",
  });

  proxy.unblock();
  await using second = await startTestWorker(
    testConfig({ consumer: "rabbitmq", mysqlUrl: db.url, queues: [Q] }),
  );
  await waitFor(async () => (await completed(second)) === 20, {
    timeoutMs: 30_000,
    message: "20 jobs written by the next worker",
  });
  assert.equal(await hostchecks(db), 200);
  assert.equal((await publisher.depth(Q)).ready, 0);
});
