/**
 * The RabbitMQ backend end to end, each test on its own virtual host so the
 * real queue names can be used in parallel: every fixture into MariaDB, the
 * broker closing the worker's connection mid-stream, and the `publish` and
 * `losstest` tools with `--consumer rabbitmq` proving it.
 */
import assert from "node:assert/strict";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { runPublishCommand } from "../src/cli/publish.ts";
import { lossMarker, runLosstestCommand } from "../src/cli/losstest.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { waitFor } from "./helpers/wait.ts";
import { startTcpProxy } from "./helpers/tcp_proxy.ts";
import { AMQPClient } from "@cloudamqp/amqp-client";
import { capture } from "./helpers/capture.ts";
import { assertFixtureRows, fixture } from "./helpers/fixture_rows.ts";
import {
  createSchema,
  metricValue,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "./helpers/worker.ts";

Deno.test("amqp e2e: every fixture published to RabbitMQ produces exactly its rows, column by column", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(
    testConfig({
      consumer: "rabbitmq",
      rabbitmq: { url: vhost.url, prefetch: 100, ...TEST_QUEUE_DURABILITY },
      mysqlUrl: db.url,
    }),
  );
  const queues = QUEUE_NAMES.filter((q) => q !== "statusngin_core_restart");
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  for (const q of queues) await publisher.publish(q, [fixture(q)]);
  for (const q of queues) {
    await waitFor(
      async () =>
        (await metricValue(worker, "statusengine_queue_jobs_total", {
          queue_name: q,
          result: "completed",
        })) === 1,
      { message: `${q}: job completed` },
    );
  }
  // Acked only after the commit (D1): the rows are there the moment the job counts as done.
  await assertFixtureRows(db, queues);
  for (const q of queues) assert.equal((await publisher.depth(q)).ready, 0, q);
});

Deno.test("amqp e2e: the broker closes the worker's connection mid-stream: gauge 1→0→1, one reconnect, and losstest finds nothing missing (D1)", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const count = 30_000;
  const base = { runId: "rc", count, gearmanAddr: [], rabbitmqUrl: vhost.url, mysqlUrl: db.url };
  const published = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "publish" }, published.io),
    0,
    published.err.join("\n"),
  );
  assert.match(
    published.out.at(-1) ?? "",
    /^published 300 jobs \(30000 events\) to statusngin_hostchecks on RabbitMQ amqp:\/\/guest:\*\*\*\*@127\.0\.0\.1:5672\//,
  );
  const before = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "verify" }, before.io), 1);
  assert.ok(
    before.out.some((l) =>
      l.startsWith("messages still queued at RabbitMQ") &&
      l.endsWith(
        "for statusngin_hostchecks: 300 ready (about 30000 events; not loss), 0 consumers attached",
      )
    ),
    before.out.join("\n"),
  );

  const Q = "statusngin_hostchecks";
  await using worker = await startTestWorker(
    testConfig({
      consumer: "rabbitmq",
      // A small prefetch keeps most of the backlog at the broker when the link goes.
      rabbitmq: { url: vhost.url, prefetch: 10, ...TEST_QUEUE_DURABILITY },
      // Long enough for the poll below to see the gauge at 0.
      reconnectIntervalMs: 1_000,
      mysqlUrl: db.url,
      queues: [Q],
    }),
  );
  const gauge: number[] = [];
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const v = await metricValue(worker, "statusengine_queue_connected", { queue_name: Q });
      if (gauge.at(-1) !== v) gauge.push(v);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  const rows = async () => {
    const [r] = await db.query<{ n: number }[]>(
      "SELECT COUNT(*) AS n FROM statusengine_hostchecks",
    );
    return Number(r?.n);
  };
  await waitFor(async () => (await rows()) >= 3_000, { message: "a tenth committed" });
  await vhost.closeConnections();
  await waitFor(
    async () =>
      (await metricValue(worker, "statusengine_queue_reconnects_total", { queue_name: Q })) ===
        1 &&
      (await metricValue(worker, "statusengine_queue_connected", { queue_name: Q })) === 1,
    { message: "reconnected", timeoutMs: 30_000 },
  );
  await waitFor(async () => (await rows()) >= count, {
    message: "the whole backlog committed",
    timeoutMs: 120_000,
  });
  watching = false;
  await watcher;
  assert.deepEqual(gauge, [1, 0, 1]);

  const after = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "verify" }, after.io),
    0,
    after.out.join("\n"),
  );
  assert.ok(after.out.includes("missing: 0"), after.out.join("\n"));
  assert.ok(after.out.includes(`PASS: all ${count} events present`));
  // Redelivered messages were written again (docs/consumption.md#every-job-may-arrive-twice); the
  // markers are still unique.
  assert.ok(!after.out.some((l) => l.startsWith("duplicate rows")), after.out.join("\n"));
  const [marker] = await db.query<{ hostname: string }[]>(
    "SELECT hostname FROM statusengine_hostchecks WHERE hostname = ?",
    [lossMarker("rc", count - 1)],
  );
  assert.equal(marker?.hostname, lossMarker("rc", count - 1));
});

Deno.test("amqp e2e: stop under load acknowledges exactly what was committed and leaves the rest queued; a new worker finishes it (D1)", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const count = 30_000;
  const perJob = 100;
  const base = { runId: "st", count, gearmanAddr: [], rabbitmqUrl: vhost.url, mysqlUrl: db.url };
  assert.equal(await runLosstestCommand({ ...base, mode: "publish" }, capture().io), 0);
  const Q = "statusngin_hostchecks";
  const rows = async () => {
    const [r] = await db.query<{ n: number }[]>(
      "SELECT COUNT(*) AS n FROM statusengine_hostchecks",
    );
    return Number(r?.n);
  };
  const config = testConfig({
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 20, ...TEST_QUEUE_DURABILITY },
    mysqlUrl: db.url,
    queues: [Q],
  });
  {
    const worker = await startTestWorker(config);
    await waitFor(async () => (await rows()) >= count / 10, { message: "a tenth committed" });
    await worker.stop();
  }
  const committed = await rows();
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  const { ready, consumers } = await publisher.depth(Q);
  assert.equal(consumers, 0);
  assert.ok(ready > 0, "the backlog was not drained by the stop");
  // Every acknowledged message is committed, and nothing committed was left unacknowledged.
  assert.equal(committed, (count / perJob - ready) * perJob);

  await using _again = await startTestWorker(config);
  await waitFor(async () => (await rows()) >= count, {
    message: "the rest committed by the next worker",
    timeoutMs: 120_000,
  });
  const after = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "verify" }, after.io),
    0,
    after.out.join("\n"),
  );
});

Deno.test("amqp e2e: publish --consumer rabbitmq declares the queue like the worker and leaves one transient message per job", async () => {
  await using vhost = await createScratchVhost();
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_logentries",
    count: 250,
    eventsPerJob: 50,
    gearmanAddr: [],
    rabbitmqUrl: vhost.url,
    seed: 7,
  }, c.io);
  assert.equal(code, 0, c.err.join("\n"));
  assert.match(
    c.out.at(-1) ?? "",
    /^published 5 jobs \(250 events\) to statusngin_logentries on RabbitMQ amqp:\/\/guest:\*\*\*\*@/,
  );
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  // A passive declaration with other flags would fail: the worker's flags were used
  // (docs/consumption.md#rabbitmq-topology).
  await publisher.declare("statusngin_logentries");
  assert.deepEqual(await publisher.depth("statusngin_logentries"), { ready: 5, consumers: 0 });
});

Deno.test("amqp e2e: publish to an unreachable broker fails with exit 1 and masks the password", async () => {
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_logentries",
    count: 1,
    eventsPerJob: 1,
    gearmanAddr: [],
    rabbitmqUrl: "amqp://guest:topsecret@127.0.0.1:1/",
  }, c.io);
  assert.equal(code, 1);
  const text = c.err.join("\n");
  assert.match(
    text,
    /^Cannot publish to statusngin_logentries on RabbitMQ amqp:\/\/guest:\*\*\*\*@127\.0\.0\.1:1\//,
  );
  assert.ok(!text.includes("topsecret"));
});

// The incident: the broker module declares its queues non-durable by default (DurableQueues
// false, like the PHP worker's durable_queues: 0); a worker that always declared durable got
// 406 PRECONDITION_FAILED for every queue, and POST /commands answered 503.
Deno.test("rabbitmq: --rabbitmq-durable-queues matches the broker module's declaration; a mismatch refuses naming the setting", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const Q = "statusngin_logentries";
  // What the broker module does with its defaults: both queues non-durable.
  {
    await using broker = await AmqpPublisher.connect(vhost.url, { durableQueues: false });
    await broker.declare(Q);
    await broker.declare("statusngin_cmd");
  }
  const base = {
    consumer: "rabbitmq" as const,
    mysqlUrl: db.url,
    queues: [Q] as const,
    commands: { hostname: "127.0.0.1", port: 0, apiKeys: ["k"] },
  };
  await assert.rejects(
    startTestWorker(testConfig({
      ...base,
      rabbitmq: { url: vhost.url, prefetch: 10, durableQueues: true },
    })),
    (err: Error) => {
      assert.match(err.message, /Cannot declare queue "statusngin_logentries"/);
      assert.match(err.message, /PRECONDITION_FAILED/);
      assert.match(err.message, /declared durable because --rabbitmq-durable-queues/);
      assert.match(err.message, /rabbitmq_durable_queues/);
      return true;
    },
  );
  // The default (false) consumes, and /commands publishes into the broker's queue.
  await using worker = await startTestWorker(testConfig({
    ...base,
    rabbitmq: { url: vhost.url, prefetch: 10, ...TEST_QUEUE_DURABILITY },
  }));
  const res = await fetch(`http://127.0.0.1:${worker.commandsPort}/commands`, {
    method: "POST",
    headers: { authorization: "Bearer k" },
    body: JSON.stringify({ Command: "raw", Data: "DISABLE_HOST_CHECK;web01" }),
  });
  assert.equal(res.status, 202, await res.text());
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  assert.equal((await publisher.depth("statusngin_cmd")).ready, 1);
  await publisher.publish(Q, [fixture(Q)]);
  await waitFor(async () =>
    (await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: Q,
      result: "completed",
    })) === 1, { message: "the logentries job was consumed" });
});

Deno.test("rabbitmq: a quorum queue declared by the operator is refused with 406 by the default declaration and consumed with --rabbitmq-declare passive; passive on a missing queue says to declare it", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const Q = "statusngin_logentries";
  const base = { consumer: "rabbitmq" as const, mysqlUrl: db.url, queues: [Q] as const };
  const passive = {
    url: vhost.url,
    prefetch: 10,
    durableQueues: true,
    declare: "passive",
  } as const;
  await assert.rejects(
    startTestWorker(testConfig({ ...base, rabbitmq: passive })),
    (err: Error) => {
      assert.match(err.message, /Cannot declare queue "statusngin_logentries"/);
      assert.match(err.message, /NOT_FOUND/);
      assert.match(
        err.message,
        /--rabbitmq-declare \(STATUSENGINE_RABBITMQ_DECLARE, rabbitmq_declare\) is passive/,
      );
      assert.match(err.message, /declare it on the broker first/);
      return true;
    },
  );

  const admin = new AMQPClient(vhost.url, undefined, null);
  await admin.connect();
  try {
    const channel = await admin.channel();
    await channel.queueDeclare(Q, { durable: true }, { "x-queue-type": "quorum" });
  } finally {
    await admin.close().catch(() => {});
  }
  await assert.rejects(
    startTestWorker(testConfig({
      ...base,
      rabbitmq: { url: vhost.url, prefetch: 10, durableQueues: true },
    })),
    (err: Error) => {
      assert.match(err.message, /PRECONDITION_FAILED/);
      assert.match(err.message, /needs --rabbitmq-declare passive/);
      return true;
    },
  );
  await using worker = await startTestWorker(testConfig({ ...base, rabbitmq: passive }));
  // The publish tool declares as the worker does: passively, into the quorum queue.
  await using publisher = await AmqpPublisher.connect(vhost.url, passive);
  await publisher.publish(Q, [fixture(Q)]);
  await waitFor(async () =>
    (await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: Q,
      result: "completed",
    })) === 1, { message: "the logentries job was consumed from the quorum queue" });
  assert.equal((await publisher.depth(Q)).ready, 0);
});

Deno.test("rabbitmq: --rabbitmq-url with several hosts: the first that answers is used, a lost broker is followed by the next of the list (round-robin, skipping one that refuses); host_in_use names it; publish uses the list", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Three "brokers": proxies in front of the one test broker, each cut or refused on its own.
  const live = new URL(vhost.url).host;
  await using a = await startTcpProxy(live);
  await using b = await startTcpProxy(live);
  await using c = await startTcpProxy(live);
  const url = vhost.url.replace(`@${live}/`, `@${a.addr},${b.addr},${c.addr}/`);
  assert.notEqual(url, vhost.url);
  const Q = "statusngin_hostchecks";

  a.block();
  const published = capture();
  assert.equal(
    await runPublishCommand(
      { queue: Q, count: 20, eventsPerJob: 1, gearmanAddr: [], rabbitmqUrl: url },
      published.io,
    ),
    0,
    published.err.join("\n"),
  );
  assert.equal(b.accepted, 1, "publish went to the second broker, the first refused");
  a.unblock();

  await using worker = await startTestWorker(testConfig({
    consumer: "rabbitmq",
    rabbitmq: { url, prefetch: 10, ...TEST_QUEUE_DURABILITY },
    mysqlUrl: db.url,
    queues: [Q],
  }));
  const inUse = async () => {
    const out: number[] = [];
    for (const p of [a, b, c]) {
      out.push(await metricValue(worker, "statusengine_rabbitmq_host_in_use", { host: p.addr }));
    }
    return out;
  };
  const reconnected = (n: number) =>
    waitFor(
      async () =>
        (await metricValue(worker, "statusengine_queue_reconnects_total", { queue_name: Q })) ===
          n &&
        (await metricValue(worker, "statusengine_queue_connected", { queue_name: Q })) === 1,
      { message: `reconnect ${n}`, timeoutMs: 30_000 },
    );
  assert.deepEqual(await inUse(), [1, 0, 0]);
  await waitFor(async () =>
    (await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: Q,
      result: "completed",
    })) === 20, { message: "the 20 jobs completed" });

  // The broker after the lost one is tried first; it refuses, so the third is used.
  b.block();
  a.sever();
  await reconnected(1);
  assert.deepEqual(await inUse(), [0, 0, 1]);
  // After the last broker of the list comes the first.
  c.sever();
  await reconnected(2);
  assert.deepEqual(await inUse(), [1, 0, 0]);
});
