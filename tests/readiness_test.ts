/**
 * `statusengine_queue_connected`, `statusengine_queue_stalled` and `/readyz`
 * must mean "consuming works", not "a TCP connection exists".
 *
 * Why: a SIGSTOPped gearmand and a peer that accepts TCP but never answers
 * both left `/readyz` at 200 for 40 s (the kernel completes the handshake of
 * a stopped process), and a queue whose grab loop lost a wake-up looked
 * connected and healthy while its backlog grew.
 */
import assert from "node:assert/strict";
import { GearmanConsumer, type GearmanConsumerOptions } from "../src/gearman/consumer.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startTcpProxy } from "./helpers/tcp_proxy.ts";
import { startScriptedJobServer } from "./helpers/scripted_job_server.ts";
import { RecordingObserver } from "./helpers/recording_observer.ts";
import { waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";
import {
  createSchema,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startMariadbd } from "./helpers/mariadbd.ts";
import { seriesValue, startWorkerProcess } from "./helpers/worker_process.ts";

const decoder = new TextDecoder();

function consumer(
  options: Partial<GearmanConsumerOptions> & Pick<GearmanConsumerOptions, "servers">,
): { consumer: GearmanConsumer; observer: RecordingObserver; handled: string[] } {
  const observer = new RecordingObserver();
  const handled: string[] = [];
  const c = new GearmanConsumer({
    queues: [{ name: "q_ready", inOrder: false }],
    maxJobsPerQueue: 4,
    observer,
    handler: (job) => {
      handled.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
    reconnectIntervalMs: 50,
    drainTimeoutMs: 2_000,
    connectTimeoutMs: 500,
    statsIntervalMs: 0,
    ...options,
  });
  return { consumer: c, observer, handled };
}

Deno.test("readiness: a peer that accepts TCP but never answers is not a connected job server", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  proxy.freeze();
  const { consumer: c, observer } = consumer({ servers: [proxy.addr] });
  await assert.rejects(c.start(), /did not answer within 500 ms/);
  await c.stop();
  assert.equal(observer.connectedHistory.size, 0, "queue_connected never went to 1");
});

Deno.test("readiness: a SIGSTOPped gearmand drops queue_connected, and reconnects to it do not count until it answers again", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  const { consumer: c, observer, handled } = consumer({
    servers: [proxy.addr],
    heartbeatIntervalMs: 200,
    heartbeatTimeoutMs: 300,
  });
  await c.start();
  try {
    assert.equal(observer.connected("q_ready"), true);
    Deno.kill(gearmand.pid, "SIGSTOP");
    try {
      await waitFor(() => observer.connected("q_ready") === false, {
        message: "the heartbeat notices the stopped server",
      });
      // Every attempt reaches the stopped process's listen backlog and gets
      // no answer; none of them may report the queue connected.
      const before = proxy.accepted;
      await waitFor(() => proxy.accepted >= before + 3, {
        message: "three reconnect attempts to the stopped server",
      });
      assert.deepEqual(observer.connectedHistory.get("q_ready"), [true, false]);
    } finally {
      Deno.kill(gearmand.pid, "SIGCONT");
    }
    await waitFor(() => observer.connected("q_ready") === true, {
      message: "connected once the server answers again",
    });
    await publish(gearmand.addr, "q_ready", ["after"]);
    await waitFor(() => handled.includes("after"), { message: "a job after the stop" });
  } finally {
    await c.stop();
  }
});

Deno.test("readiness: a lost wake-up is detected as a stall, the queue is nudged, and it consumes again (queue_stalled 1 then 0)", async () => {
  // A server that never sends NOOP: after its first NO_JOB the worker sleeps,
  // and the jobs added later would wait forever without the stall detector
  // (the idle poll, the other safety net, is switched off).
  await using server = startScriptedJobServer({
    fn: "q_ready",
    random: Math.random,
    assignProbability: 1,
    maxReplyDelayMs: 0,
    wakeSleepers: false,
  });
  const { consumer: c, observer, handled } = consumer({
    servers: [server.addr],
    idlePollMs: 0,
    stallTimeoutMs: 300,
  });
  await c.start();
  try {
    await waitFor(() => server.noJobs >= 1, { message: "the worker found the queue empty" });
    server.add(["j1", "j2", "j3"]);
    await waitFor(() => handled.length === 3, { message: "jobs taken after the nudge" });
    await waitFor(() => observer.stalledHistory.get("q_ready")?.at(-1) === false, {
      message: "stall cleared",
    });
    assert.deepEqual(observer.stalledHistory.get("q_ready"), [true, false]);
  } finally {
    await c.stop();
  }
});

Deno.test("readiness: a job server that stops answering grabs, every slot held by one, is reported stalled and named", async () => {
  // Grabs are answered at once by gearmand; a server (a fork, a proxy) that holds them while jobs
  // wait left every slot asking, none free and none holding a job: connected, never stalled.
  let draw = 0; // 0: answer at once; 0.99: after about ten minutes, i.e. never in this test
  await using server = startScriptedJobServer({
    fn: "q_ready",
    random: () => draw,
    assignProbability: 1,
    maxReplyDelayMs: 600_000,
  });
  await withLogs(async (logs) => {
    const { consumer: c, observer, handled } = consumer({
      servers: [server.addr],
      idlePollMs: 0,
      stallTimeoutMs: 300,
    });
    await c.start();
    try {
      // Jobs first, so that the queue knows their size and grabs with every slot.
      server.add(["j1", "j2", "j3", "j4"]);
      await waitFor(() => handled.length === 4, { message: "the first jobs handled" });
      draw = 0.99;
      server.add(["j5", "j6", "j7", "j8", "j9"]);
      await waitFor(() => observer.stalledHistory.get("q_ready")?.at(-1) === true, {
        timeoutMs: 20_000,
        message: "the queue reported stalled",
      });
      const line = logs.find((l) => l.level === "error" && l.message.includes("stalled"));
      assert.equal(line?.properties.server, server.addr, JSON.stringify(line));
    } finally {
      await c.stop();
    }
  });
});

Deno.test("readiness: /readyz fails and names the queue while jobs wait that it does not take, and recovers", async () => {
  // A job server that keeps jobs waiting but answers every grab with NO_JOB.
  await using server = startScriptedJobServer({
    fn: "statusngin_logentries",
    random: Math.random,
    assignProbability: 0,
    maxReplyDelayMs: 0,
  });
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [server.addr],
    mysqlUrl: db.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
    queueStallTimeoutMs: 300,
  }));
  const readyz = async () => {
    const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
    return { status: res.status, text: await res.text() };
  };
  assert.equal((await readyz()).status, 200);
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  server.add([fixture]);
  await waitFor(async () => (await readyz()).status === 503, { message: "stalled" });
  assert.match((await readyz()).text, /stalled: statusngin_logentries/);
  server.setAssignProbability(1);
  await waitFor(async () => (await readyz()).status === 200, { message: "ready again" });
  await waitFor(() => server.completed.length === 1, { message: "the job was taken" });
});

// With MySQL SIGSTOPped on an idle worker /readyz said 200 for 30 s, until a statement ran into
// --mysql-statement-timeout; with nothing written no statement ran at all. The idle probe turns
// statusengine_db_available within seconds, as a writer does under traffic. The statement
// timeout is set far above the wait, so only the probe can be what noticed.
Deno.test("readiness: a frozen MySQL shows on an idle worker (db_available 0, /readyz 503) and recovers", async () => {
  await using server = await startMariadbd();
  await server.query("CREATE DATABASE se_probe CHARACTER SET utf8mb4");
  const url = server.url({ database: "se_probe" });
  await createSchema(url);
  await using gearmand = await startGearmand();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: url,
    args: ["--queues", "statusngin_hostchecks", "--mysql-statement-timeout", "10m"],
  });
  const available = async () => seriesValue(await worker.metrics(), "statusengine_db_available");
  const readyz = async () => {
    const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
    return { status: res.status, body: await res.text() };
  };
  assert.equal(await available(), 1);
  server.pause();
  try {
    await waitFor(async () => (await available()) === 0, {
      timeoutMs: 20_000,
      message: "statusengine_db_available 0 while MySQL is frozen",
    });
    const r = await readyz();
    assert.equal(r.status, 503);
    assert.match(r.body, /MySQL unavailable/);
  } finally {
    server.resume();
  }
  await waitFor(async () => (await available()) === 1 && (await readyz()).status === 200, {
    timeoutMs: 20_000,
    message: "available and ready again after SIGCONT",
  });
  assert.ok(
    worker.lines().some((l) => l.includes("does not answer the idle probe")),
    worker.lines().join("\n"),
  );
});

// A worker whose in-order lease went to another worker stops consuming statusngin_downtimes on
// purpose; its queue_connected series stayed at 0 for good, so the shipped
// StatusengineQueueDisconnected alert (== 0 for 2 min) fired on a healthy standby worker.
Deno.test("readiness: a worker that lost the in-order lease drops queue_connected of the in-order queue instead of reporting it disconnected", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    queues: ["statusngin_downtimes", "statusngin_hostchecks"],
    inOrderLock: {},
  }));
  const connected = () => seriesOf(worker, "statusengine_queue_connected", "statusngin_downtimes");
  await waitFor(async () => (await connected()) === "1", { message: "downtimes consumed" });
  // Another worker's name in the row: the next renewal finds the lease is no longer ours.
  await db.query("UPDATE statusengine_worker_leases SET holder = 'another worker'");
  await waitFor(async () => (await metricValue(worker, "statusengine_in_order_lock_held")) === 0, {
    message: "the lease given up",
  });
  await waitFor(async () => (await connected()) !== "1", {
    message: "downtimes no longer consumed",
  });
  // Set to 0 as the in-order consumer stops; removed once it stopped.
  await waitFor(async () => (await connected()) === "absent", {
    timeoutMs: 3_000,
    message: "queue_connected of statusngin_downtimes removed, not left at 0",
  }).catch(async (err: unknown) => {
    throw new Error(`${err} (it reads ${await connected()})`);
  });
  assert.equal(await connected(), "absent");
  // The queues it still consumes keep their series.
  assert.equal(
    await seriesOf(worker, "statusengine_queue_connected", "statusngin_hostchecks"),
    "1",
  );
});

/** The value of a series of one queue as text, or "absent". */
async function seriesOf(
  worker: { metrics: { registry: { metrics(): Promise<string> } } },
  name: string,
  queue: string,
): Promise<string> {
  const text = await worker.metrics.registry.metrics();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{queue_name="${queue}"}`));
  return line === undefined ? "absent" : (line.split(" ").at(-1) ?? "absent");
}

// Handlers that never finish (a bug, a hung promise, a backend awaited by mistake) held every slot
// of a queue while MySQL took writes: the stall detector only suspected a queue with a free slot,
// so nothing was logged, statusengine_queue_stalled stayed 0 and /readyz 200 while jobs piled up.
Deno.test("readiness: a queue whose every slot holds a job that never finishes is stalled, and clears once one finishes", async () => {
  await using gearmand = await startGearmand();
  const release = Promise.withResolvers<void>();
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    maxJobsPerQueue: 2,
    stallTimeoutMs: 300,
    handler: () => release.promise,
  });
  await withLogs(async (logs) => {
    await c.start();
    try {
      await publish(gearmand.addr, "q_ready", ["j1", "j2", "j3"]);
      await waitFor(() => observer.stalledHistory.get("q_ready")?.at(-1) === true, {
        message: "queue_stalled 1 while every slot holds a job that never finishes",
      });
      const line = logs.find((l) => l.level === "error" && /queue stalled/.test(l.message));
      assert.ok(line, JSON.stringify(logs));
      assert.equal(line.properties.queue, "q_ready");
      release.resolve();
      await waitFor(() => observer.completed("q_ready") === 3, { message: "all jobs done" });
      await waitFor(() => observer.stalledHistory.get("q_ready")?.at(-1) === false, {
        message: "stall cleared once a job finished",
      });
    } finally {
      release.resolve();
      await c.stop();
    }
  });
});

Deno.test("readiness: a full queue that finishes jobs slowly is not stalled", async () => {
  await using gearmand = await startGearmand();
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    maxJobsPerQueue: 1,
    stallTimeoutMs: 1_000,
    // Each job takes a fifth of the timeout: the queue is always full, and always progressing.
    handler: () => new Promise((r) => setTimeout(r, 200)),
  });
  await c.start();
  try {
    await publish(gearmand.addr, "q_ready", Array.from({ length: 15 }, (_, i) => `j${i}`));
    await waitFor(() => observer.completed("q_ready") === 15, {
      timeoutMs: 20_000,
      message: "every job done",
    });
    assert.equal(observer.stalledHistory.get("q_ready"), undefined);
  } finally {
    await c.stop();
  }
});

// MySQL that cannot take writes holds every job of the queues it feeds; statusengine_db_available
// 0 already says so, and the queues take jobs again once it answers.
Deno.test("readiness: a full queue is not stalled while MySQL is slow or unavailable, only once it was available for the timeout", async () => {
  await using gearmand = await startGearmand();
  let slow = true;
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    maxJobsPerQueue: 2,
    stallTimeoutMs: 200,
    handler: (_job, signal) =>
      new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))),
    window: {
      pressure: () => ({ fill: 0, full: false, excess: 0, slow, statementMs: 0 }),
    },
  });
  await c.start();
  try {
    await publish(gearmand.addr, "q_ready", ["j1", "j2", "j3"]);
    await waitFor(() => (observer.inFlightNow.get("q_ready") ?? 0) === 2, {
      message: "both slots taken",
    });
    // Five timeouts: at least one check sees the full queue (only absence can be shown here).
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(observer.stalledHistory.get("q_ready"), undefined);
    slow = false;
    await waitFor(() => observer.stalledHistory.get("q_ready")?.at(-1) === true, {
      message: "stalled once MySQL is available and still no job finishes",
    });
  } finally {
    await c.stop();
  }
});

// The same full queues with the real writers: jobs held by a frozen MySQL are not a stall of
// their queue (statusengine_db_available 0 says what is wrong), however long MySQL stays away.
Deno.test("readiness: jobs held by a frozen MySQL do not make their queue stalled", async () => {
  await using server = await startMariadbd();
  await server.query("CREATE DATABASE se_held CHARACTER SET utf8mb4");
  const url = server.url({ database: "se_held" });
  await createSchema(url);
  await using gearmand = await startGearmand();
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: url,
    queues: ["statusngin_logentries"],
    maxJobsPerQueue: 4,
    // Above the second after which a statement in flight counts as slow.
    queueStallTimeoutMs: 2_000,
    mysqlStatementTimeoutMs: 3_000,
  }));
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  const stalled = () =>
    metricValue(worker, "statusengine_queue_stalled", { queue_name: "statusngin_logentries" });
  server.pause();
  try {
    await publish(gearmand.addr, "statusngin_logentries", Array(40).fill(fixture));
    await waitFor(async () => (await metricValue(worker, "statusengine_db_available")) === 0, {
      timeoutMs: 20_000,
      message: "db_available 0 while MySQL is frozen",
    });
    // Three stall timeouts with every slot held (only absence can be shown here).
    for (let i = 0; i < 6; i++) {
      await new Promise((r) => setTimeout(r, 1_000));
      assert.equal(await stalled(), 0);
    }
  } finally {
    server.resume();
  }
  const completed = () =>
    metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: "statusngin_logentries",
      result: "completed",
    });
  await waitFor(async () => (await completed()) === 40, {
    timeoutMs: 30_000,
    message: "every job written once MySQL answers",
  });
  assert.equal(await stalled(), 0);
});
