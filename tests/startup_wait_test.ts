/**
 * Start like it runs: at run time a lost gearmand or MySQL is waited for in the reconnect loop;
 * at start-up the same faults used to end the process ("no job server reachable", exit 1), which
 * systemd turns into a restart loop that `StartLimitBurst` can make a dead service. Now the worker
 * starts, serves /metrics and /readyz (503, naming what is missing) and connects when the servers
 * come; it exits at start only for what waiting cannot fix, saying so.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "./helpers/mysql.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { startMysqlProxy, startTcpPeer, startTcpProxy } from "./helpers/tcp_proxy.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { waitFor } from "./helpers/wait.ts";
import { createSchema, jobsAtGearmand, publish } from "./helpers/worker.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";

const HOSTCHECK = Deno.readTextFileSync(
  new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
);

async function readyz(port: number): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: await res.text() };
}

/** The worker's `statusengine_db_available`, read from its /metrics. */
async function dbAvailable(port: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return Number(/^statusengine_db_available (\S+)$/m.exec(text)?.[1]);
}

Deno.test("start-up: no job server yet: /readyz 503 names the queues, and the worker consumes once gearmand comes", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const port = freePort();
  await using worker = await startWorkerProcess({
    gearmanAddr: `127.0.0.1:${port}`,
    mysqlUrl: db.url,
    args: ["--queues", "statusngin_hostchecks"],
    waitUntil: "listening",
  });
  await waitFor(
    async () =>
      /not connected: statusngin_hostchecks/.test((await readyz(worker.metricsPort)).body),
    { message: "/readyz names the queue" },
  );
  assert.equal((await readyz(worker.metricsPort)).status, 503);
  await using gearmand = await startGearmand({ port });
  await waitFor(async () => (await readyz(worker.metricsPort)).status === 200, {
    message: "ready once gearmand is there",
    timeoutMs: 30_000,
  });
  await publish(gearmand.addr, "statusngin_hostchecks", [HOSTCHECK]);
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks")) === 0);
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

Deno.test("start-up: MySQL not reachable yet: /readyz 503 names MySQL, statusengine_db_available is 0, and the worker starts once it answers", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  proxy.block();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: proxy.url,
    args: ["--queues", "statusngin_hostchecks"],
    waitUntil: "listening",
  });
  await waitFor(
    async () => /MySQL at .* not reachable yet/.test((await readyz(worker.metricsPort)).body),
    {
      message: "/readyz names MySQL",
    },
  );
  assert.equal((await readyz(worker.metricsPort)).status, 503);
  assert.equal(await dbAvailable(worker.metricsPort), 0, "statusengine_db_available while waiting");
  proxy.unblock();
  await waitFor(async () => (await readyz(worker.metricsPort)).status === 200, {
    message: "ready once MySQL answers",
    timeoutMs: 30_000,
  });
  assert.equal(await dbAvailable(worker.metricsPort), 1, "statusengine_db_available once started");
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

Deno.test("start-up: SIGTERM while waiting for MySQL stops at once with exit 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await using proxy = await startMysqlProxy(db);
  proxy.block();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: proxy.url,
    waitUntil: "listening",
  });
  await waitFor(async () => /not reachable yet/.test((await readyz(worker.metricsPort)).body));
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

Deno.test("start-up: refused credentials end the start with exit 1 and say waiting cannot fix it", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const wrong = new URL(db.url);
  wrong.username = "se_no_such_user";
  wrong.password = "wrong-pw";
  await assert.rejects(
    startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: wrong.href }),
    /worker exited during start-up[\s\S]*refused the login[\s\S]*waiting cannot fix this/,
  );
});

Deno.test("start-up: RabbitMQ not reachable yet: /readyz 503 names the queue, and the worker consumes once it answers", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using vhost = await createScratchVhost();
  const broker = new URL(vhost.url);
  await using proxy = await startTcpProxy(`${broker.hostname}:${broker.port || "5672"}`);
  proxy.block();
  broker.host = proxy.addr;
  await using worker = await startWorkerProcess({
    gearmanAddr: "",
    mysqlUrl: db.url,
    args: [
      "--consumer",
      "rabbitmq",
      "--rabbitmq-url",
      broker.href,
      "--rabbitmq-durable-queues=false",
      "--rabbitmq-reconnect-interval",
      "200ms",
      "--queues",
      "statusngin_hostchecks",
    ],
    waitUntil: "listening",
  });
  await waitFor(
    async () =>
      /not connected: statusngin_hostchecks/.test((await readyz(worker.metricsPort)).body),
    { message: "/readyz names the queue" },
  );
  proxy.unblock();
  await waitFor(async () => (await readyz(worker.metricsPort)).status === 200, {
    message: "ready once RabbitMQ answers",
    timeoutMs: 30_000,
  });
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

Deno.test("start-up: with several hosts, one refusing the login ends the start with exit 1 even when an earlier host is down", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const wrong = new URL(db.url);
  wrong.username = "se_no_such_user";
  wrong.password = "wrong-pw";
  // A dead port first, then the real server with a wrong password.
  const dead = `127.0.0.1:${await freePort()}`;
  const url = wrong.href.replace(`@${wrong.host}`, `@${dead},${wrong.host}`);
  await assert.rejects(
    startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: url }),
    new RegExp(
      `worker exited during start-up[\\s\\S]*refused the login \\(${wrong.host}: Access denied` +
        `[\\s\\S]*${dead}: [\\s\\S]*waiting cannot fix this`,
    ),
  );
});

// The steps after MySQL answered (schema check, drift check, node row) went on after SIGTERM:
// a MySQL that holds them up (a lock, a server frozen after the probe) kept the worker from
// stopping until the statement timed out (then exit 1, "run failed"), or for ever.
Deno.test("start-up: SIGTERM while MySQL holds up the start's node registration stops at once with exit 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // An uncommitted row of the worker's node (--node-name N): its registration waits for the lock.
  const holder = await mysql.createConnection(connectionOptionsOf(db));
  try {
    await holder.query("BEGIN");
    await holder.query(
      "INSERT INTO statusengine_nodes (node_name, node_version, node_start_time) VALUES ('N', 'x', 0)",
    );
    await using worker = await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: db.url,
      waitUntil: "listening",
    });
    await waitFor(async () => {
      const [rows] = await holder.query(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
          "WHERE DB = ? AND INFO LIKE 'INSERT INTO `statusengine_nodes`%'",
        [db.name],
      );
      return Number((rows as { n: number }[])[0]?.n) > 0;
    }, { message: "the worker's node registration waiting for the lock" });
    worker.kill("SIGTERM");
    const status = await worker.status;
    assert.equal(status.code, 0, `${worker.lines().slice(-5).join("\n")}\n${worker.stderr()}`);
    assert.ok(
      worker.lines().some((l) => l.includes("shutdown signal received during start-up")),
      worker.lines().slice(-5).join("\n"),
    );
  } finally {
    await holder.query("ROLLBACK").catch(() => {});
    await holder.end();
  }
});

// The consumer's first connection attempts were not ended by SIGTERM: a broker that accepts the
// connection and never answers held the start until its connect timeout, after which the worker
// went on starting (consumer started, READY=1) only to shut down again.
Deno.test("start-up: SIGTERM while the first connection to the broker waits for its answer ends the start with exit 0", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using silent = startTcpPeer();
  await using worker = await startWorkerProcess({
    gearmanAddr: "",
    mysqlUrl: db.url,
    args: [
      "--consumer",
      "rabbitmq",
      "--rabbitmq-url",
      `amqp://guest:guest@${silent.addr}/`,
      "--rabbitmq-durable-queues=false",
      "--queues",
      "statusngin_hostchecks",
    ],
    waitUntil: "listening",
  });
  await silent.accepted;
  worker.kill("SIGTERM");
  const status = await worker.status;
  const lines = worker.lines();
  assert.equal(status.code, 0, worker.stderr());
  assert.ok(
    lines.some((l) => l.includes("shutdown signal received during start-up")),
    lines.filter((l) => /signal|consumer|rabbitmq/.test(l)).join("\n"),
  );
  assert.ok(!lines.some((l) => l.includes("consumer started")), lines.slice(-5).join("\n"));
});
