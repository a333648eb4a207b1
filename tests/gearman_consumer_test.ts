/**
 * The Gearman consumer against a real gearmand (started per test on a free
 * port), with a TCP proxy for severed and silent links.
 */
import assert from "node:assert/strict";
import v8 from "node:v8";
import vm from "node:vm";
import {
  GearmanConsumer,
  type GearmanConsumerOptions,
  statusSource,
} from "../src/gearman/consumer.ts";
import { BacklogMonitor } from "../src/consumer/backlog_monitor.ts";
import { getLogger } from "../src/log.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { type Job, type JobHandler } from "../src/consumer/contract.ts";
import { registeredFunctions, startGearmand } from "./helpers/gearmand.ts";
import { startTcpProxy } from "./helpers/tcp_proxy.ts";
import { RecordingObserver } from "./helpers/recording_observer.ts";
import { track, turns, waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";

const decoder = new TextDecoder();

function consumer(
  options: Partial<GearmanConsumerOptions> & Pick<GearmanConsumerOptions, "servers" | "handler">,
): { consumer: GearmanConsumer; observer: RecordingObserver } {
  const observer = new RecordingObserver();
  const c = new GearmanConsumer({
    queues: [{ name: "q_test", inOrder: false }],
    maxJobsPerQueue: 8,
    observer,
    reconnectIntervalMs: 100,
    drainTimeoutMs: 2000,
    statsIntervalMs: 0,
    ...options,
  });
  return { consumer: c, observer };
}

async function submit(addr: string, fn: string, payloads: string[]): Promise<void> {
  await using client = await GearmanClient.connect(addr);
  await Promise.all(payloads.map((p) => client.submitBackground(fn, p)));
}

async function queueDepth(addr: string, fn: string): Promise<{ total: number; running: number }> {
  const status = await adminStatus(addr);
  const row = status.find((s) => s.function === fn);
  return { total: row?.total ?? 0, running: row?.running ?? 0 };
}

Deno.test("consumer: every background job is handled and acknowledged exactly once (D1)", async () => {
  await using gearmand = await startGearmand();
  const seen = new Map<string, number>();
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    handler: (job) => {
      const key = decoder.decode(job.payload);
      seen.set(key, (seen.get(key) ?? 0) + 1);
      return Promise.resolve();
    },
  });
  await c.start();
  try {
    const payloads = Array.from({ length: 2000 }, (_, i) => `job-${i}`);
    await submit(gearmand.addr, "q_test", payloads);
    await waitFor(() => observer.completed("q_test") === 2000, { message: "2000 completions" });
    await waitFor(async () => (await queueDepth(gearmand.addr, "q_test")).total === 0, {
      message: "gearmand queue empty",
    });
    assert.equal(seen.size, 2000);
    assert.ok([...seen.values()].every((n) => n === 1), "no job was handled twice");
    assert.equal(observer.done.get("q_test")?.abandoned ?? 0, 0);
    assert.equal(observer.connected("q_test"), true);
  } finally {
    await c.stop();
  }
  assert.equal(observer.connected("q_test"), false, "stop sets queue_connected to 0");
});

Deno.test("consumer: a severed connection is rebuilt and jobs published after the cut are consumed (docs/consumption.md#lost-connection)", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    servers: [proxy.addr],
    handler: (job) => {
      handled.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await c.start();
  try {
    await submit(gearmand.addr, "q_test", ["before"]);
    await waitFor(() => handled.includes("before"));
    proxy.sever();
    await waitFor(() => (observer.reconnects.get("q_test") ?? 0) >= 1, {
      message: "a reconnect",
    });
    const after = Array.from({ length: 50 }, (_, i) => `after-${i}`);
    await submit(gearmand.addr, "q_test", after);
    await waitFor(() => after.every((p) => handled.includes(p)), { message: "jobs after the cut" });
    assert.deepEqual(observer.connectedHistory.get("q_test"), [true, false, true]);
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: gearmand killed and restarted on the same port is reconnected without a restart of the worker", async () => {
  await using gearmand = await startGearmand();
  const handled = new Set<string>();
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    handler: (job) => {
      handled.add(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await c.start();
  try {
    await gearmand.restart();
    await waitFor(() => observer.connected("q_test") === true && observer.reconnects.size > 0, {
      message: "reconnected after the restart",
    });
    await submit(gearmand.addr, "q_test", ["x1", "x2", "x3"]);
    await waitFor(() => handled.size === 3, { message: "jobs after the restart" });
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: links lost and rebuilt over many gearmand restarts leave nothing behind (each loss kept its error reachable until stop)", async () => {
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc") as () => void;
  await using gearmand = await startGearmand();
  const queues = Array.from({ length: 12 }, (_, i) => ({ name: `q_${i}`, inOrder: false }));
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    queues,
    handler: () => Promise.resolve(),
  });
  await c.start();
  let restarts = 0;
  const restart = async (times: number) => {
    for (let i = 0; i < times; i++) {
      await gearmand.restart();
      restarts++;
      await waitFor(
        () =>
          queues.every((q) =>
            observer.reconnects.get(q.name) === restarts && observer.connected(q.name) === true
          ),
        { timeoutMs: 30_000, message: `every queue reconnected after restart ${restarts}` },
      );
    }
  };
  const heapKiB = () => {
    gc();
    return Deno.memoryUsage().heapUsed / 1024;
  };
  try {
    // Warm-up: the first restarts compile and size what every later one reuses.
    await restart(20);
    const before = heapKiB();
    await restart(40);
    const grown = Math.round(heapKiB() - before);
    // About 4.5 KiB a lost link while each loss stayed reachable (2 MiB here); without, noise.
    assert.ok(grown < 1024, `heap grew by ${grown} KiB over 40 restarts of 12 links`);
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: stop during an active reconnect loop returns promptly and leaves no connection", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  const { consumer: c, observer } = consumer({
    servers: [proxy.addr],
    reconnectIntervalMs: 50,
    handler: () => Promise.resolve(),
  });
  await withLogs(async (logs) => {
    await c.start();
    proxy.block();
    await waitFor(() => observer.connected("q_test") === false);
    // The loop is genuinely retrying once a reconnect attempt has failed (it logs the first).
    await waitFor(() => logs.some((l) => l.message.includes("reconnect failed, still retrying")), {
      message: "a failed reconnect attempt",
    });
    // Promptly: stop ends the loop's wait instead of waiting for it (a stop that hung in the
    // loop fails here, whatever the machine's speed).
    const stopped = track(c.stop());
    await waitFor(() => stopped.settled, { message: "stop to return during the reconnect loop" });
  });
  const acceptedAtStop = proxy.accepted;
  proxy.unblock();
  // A reconnect timer or connect left running after stop would also fail the test's op
  // sanitizer; what gearmand sees is checked here.
  const workers = await registeredFunctions(gearmand.addr);
  assert.ok(
    !workers.some((functions) => functions.includes("q_test")),
    "no worker left registered",
  );
  assert.equal(proxy.accepted, acceptedAtStop, "no reconnect attempt after stop");
});

Deno.test("consumer: one queue with a backlog and every slot busy cannot starve another queue (docs/consumption.md#one-connection-per-queue)", async () => {
  await using gearmand = await startGearmand();
  const release = Promise.withResolvers<void>();
  const handledB: string[] = [];
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    queues: [{ name: "q_busy", inOrder: false }, { name: "q_other", inOrder: false }],
    maxJobsPerQueue: 4,
    handler: async (job) => {
      if (job.queue === "q_busy") await release.promise;
      else handledB.push(decoder.decode(job.payload));
    },
  });
  await c.start();
  try {
    await submit(gearmand.addr, "q_busy", Array.from({ length: 40 }, (_, i) => `b${i}`));
    await waitFor(() => observer.inFlightNow.get("q_busy") === 4, { message: "busy queue at cap" });
    await submit(gearmand.addr, "q_other", ["o1"]);
    await waitFor(() => handledB.includes("o1"), {
      timeoutMs: 3000,
      message: "the other queue's job",
    });
    assert.equal(observer.inFlightNow.get("q_busy"), 4, "the busy queue never exceeded its cap");
    const depth = await queueDepth(gearmand.addr, "q_busy");
    assert.equal(depth.running, 4, "surplus stays at gearmand, not in memory");
  } finally {
    release.resolve();
    await c.stop();
  }
});

Deno.test("consumer: statusngin_downtimes never runs two handlers at once even with the cap at 8 (docs/consumption.md#downtimes-in-order)", async () => {
  await using gearmand = await startGearmand();
  let running = 0;
  let maxRunning = 0;
  let maxOther = 0;
  let runningOther = 0;
  const order: string[] = [];
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    queues: [
      { name: "statusngin_downtimes", inOrder: true },
      { name: "statusngin_hostchecks", inOrder: false },
    ],
    maxJobsPerQueue: 8,
    handler: async (job) => {
      if (job.queue === "statusngin_downtimes") {
        running++;
        maxRunning = Math.max(maxRunning, running);
        order.push(decoder.decode(job.payload));
        await new Promise((r) => setTimeout(r, 5));
        running--;
      } else {
        runningOther++;
        maxOther = Math.max(maxOther, runningOther);
        await new Promise((r) => setTimeout(r, 50));
        runningOther--;
      }
    },
  });
  assert.equal(c.capFor({ name: "statusngin_downtimes", inOrder: true }), 1);
  assert.equal(c.capFor({ name: "statusngin_hostchecks", inOrder: false }), 8);
  await c.start();
  try {
    const downtimes = Array.from({ length: 24 }, (_, i) => `d${i}`);
    await submit(gearmand.addr, "statusngin_downtimes", downtimes);
    await submit(
      gearmand.addr,
      "statusngin_hostchecks",
      Array.from({ length: 40 }, (_, i) => `h${i}`),
    );
    await waitFor(() => observer.completed("statusngin_downtimes") === 24, {
      message: "24 downtimes",
    });
    await waitFor(() => observer.completed("statusngin_hostchecks") === 40, {
      message: "40 checks",
    });
    assert.equal(maxRunning, 1);
    assert.deepEqual(order, downtimes, "processed in submission order");
    assert.equal(maxOther, 8, "other queues keep the configured cap");
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: a job whose handler never resolves is not acknowledged and is redelivered after the worker closes (D1)", async () => {
  await using gearmand = await startGearmand();
  const first = consumer({
    servers: [gearmand.addr],
    drainTimeoutMs: 200,
    handler: () => new Promise<void>(() => {}),
  });
  await first.consumer.start();
  await submit(gearmand.addr, "q_test", ["stuck"]);
  await waitFor(() => first.observer.inFlightNow.get("q_test") === 1);
  // The handler never resolves: stop returns only because the drain timeout ends the wait.
  const stopped = track(first.consumer.stop());
  await waitFor(() => stopped.settled, { message: "stop to return after the drain timeout" });
  assert.equal(first.observer.done.get("q_test")?.abandoned, 1);
  assert.equal(
    (await queueDepth(gearmand.addr, "q_test")).total,
    1,
    "the job is back in the queue",
  );

  const redelivered: string[] = [];
  const second = consumer({
    servers: [gearmand.addr],
    handler: (job) => {
      redelivered.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await second.consumer.start();
  try {
    await waitFor(() => redelivered.length === 1, { message: "redelivery" });
    assert.deepEqual(redelivered, ["stuck"]);
  } finally {
    await second.consumer.stop();
  }
});

Deno.test("consumer: jobs submitted to either of two job servers are consumed (D9)", async () => {
  await using g1 = await startGearmand();
  await using g2 = await startGearmand();
  const handled = new Set<string>();
  const { consumer: c, observer } = consumer({
    servers: [g1.addr, g2.addr],
    maxJobsPerQueue: 2,
    handler: (job) => {
      handled.add(`${job.server}/${decoder.decode(job.payload)}`);
      return Promise.resolve();
    },
  });
  await c.start();
  try {
    await submit(g1.addr, "q_test", Array.from({ length: 100 }, (_, i) => `a${i}`));
    await submit(g2.addr, "q_test", Array.from({ length: 100 }, (_, i) => `b${i}`));
    await waitFor(() => handled.size === 200, { message: "200 jobs from two servers" });
    assert.equal([...handled].filter((h) => h.startsWith(g1.addr)).length, 100);
    assert.equal([...handled].filter((h) => h.startsWith(g2.addr)).length, 100);
    assert.equal(observer.connected("q_test"), true);
    await g2.stop();
    await waitFor(() => observer.connected("q_test") === false, {
      message: "gauge drops when one of two servers is lost",
    });
    await submit(g1.addr, "q_test", ["still-served"]);
    await waitFor(() => handled.has(`${g1.addr}/still-served`), {
      message: "the remaining server keeps being served",
    });
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: a silent peer is detected by the ECHO heartbeat and the link rebuilt", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    servers: [proxy.addr],
    heartbeatIntervalMs: 200,
    heartbeatTimeoutMs: 200,
    handler: (job) => {
      handled.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await c.start();
  try {
    proxy.freeze();
    await waitFor(() => observer.connected("q_test") === false, {
      timeoutMs: 3000,
      message: "heartbeat timeout",
    });
    proxy.unblock();
    await waitFor(() => observer.connected("q_test") === true, { message: "reconnected" });
    await submit(gearmand.addr, "q_test", ["after-silence"]);
    await waitFor(() => handled.includes("after-silence"));
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: a transient handler failure is retried on the same connection, never failed (D1)", async () => {
  await using gearmand = await startGearmand();
  let attempts = 0;
  const { consumer: c, observer } = consumer({
    servers: [gearmand.addr],
    handler: () => {
      attempts++;
      return attempts < 3 ? Promise.reject(new Error("mysql unreachable")) : Promise.resolve();
    },
  });
  await c.start();
  try {
    await submit(gearmand.addr, "q_test", ["flaky"]);
    await waitFor(() => observer.completed("q_test") === 1, {
      message: "completion after retries",
    });
    assert.equal(attempts, 3);
    assert.equal(observer.retried.get("q_test"), 2);
    assert.equal((await queueDepth(gearmand.addr, "q_test")).total, 0);
  } finally {
    await c.stop();
  }
});

Deno.test("consumer: stop waits for running handlers and acknowledges them before closing (docs/consumption.md#orderly-stop)", async () => {
  await using gearmand = await startGearmand();
  const gate = Promise.withResolvers<void>();
  const started: Job[] = [];
  const handler: JobHandler = async (job) => {
    started.push(job);
    await gate.promise;
  };
  const { consumer: c, observer } = consumer({ servers: [gearmand.addr], handler });
  await c.start();
  await submit(gearmand.addr, "q_test", Array.from({ length: 20 }, (_, i) => `s${i}`));
  await waitFor(() => started.length === 8);
  const stopping = c.stop();
  const stopped = track(stopping);
  await turns();
  assert.equal(stopped.settled, false, "stop returned while handlers were running");
  gate.resolve();
  await stopping;
  assert.equal(observer.completed("q_test"), 8, "every running handler was acknowledged");
  const depth = await queueDepth(gearmand.addr, "q_test");
  assert.equal(depth.total, 12, "the rest waits at gearmand");
  assert.equal(depth.running, 0);
});

Deno.test("consumer: start fails when no job server is reachable, and refuses bad options", async () => {
  const { consumer: c } = consumer({ servers: ["127.0.0.1:1"], handler: () => Promise.resolve() });
  await assert.rejects(() => c.start(), /no job server reachable/);
  await c.stop();
  assert.throws(
    () => consumer({ servers: ["127.0.0.1:1"], queues: [], handler: () => Promise.resolve() }),
    /no queues/,
  );
  assert.throws(
    () =>
      consumer({ servers: ["127.0.0.1:1"], maxJobsPerQueue: 0, handler: () => Promise.resolve() }),
    /must be >= 1/,
  );
});

Deno.test("consumer backlog: one reading asks each job server once, over one admin connection, for every queue; the sums match gearmand", async () => {
  await using g1 = await startGearmand();
  await using g2 = await startGearmand();
  await using p1 = await startTcpProxy(g1.addr);
  await using p2 = await startTcpProxy(g2.addr);
  const queues = ["q_a", "q_b", "q_c"];
  await submit(g1.addr, "q_a", ["1", "2", "3"]);
  await submit(g2.addr, "q_a", ["4", "5", "6", "7", "8"]);
  await submit(g1.addr, "q_b", ["9", "10"]);
  const reports: [string, number | undefined][] = [];
  const monitor = new BacklogMonitor({
    sources: [statusSource(p1.addr, queues), statusSource(p2.addr, queues)],
    intervalMs: 60_000,
    report: (queue, jobs) => reports.push([queue, jobs]),
    name: "gearman",
    log: getLogger("test"),
  });
  await monitor.check();
  assert.deepEqual([p1.accepted, p2.accepted], [1, 1], "one admin connection per job server");
  const atGearmand = async (q: string) =>
    (await queueDepth(g1.addr, q)).total + (await queueDepth(g2.addr, q)).total;
  assert.deepEqual(reports.sort(), [
    ["q_a", await atGearmand("q_a")],
    ["q_b", await atGearmand("q_b")],
    ["q_c", 0],
  ]);
  assert.deepEqual(reports, [["q_a", 8], ["q_b", 2], ["q_c", 0]]);

  // A job server that does not answer makes every queue unknown, never a partial sum.
  p2.block();
  reports.length = 0;
  await monitor.check();
  assert.deepEqual(reports.sort(), [["q_a", undefined], ["q_b", undefined], ["q_c", undefined]]);
  assert.equal(p1.accepted, 2, "the next reading: one more admin connection");
});

Deno.test("consumer backlog: a running consumer reads every queue's backlog with one admin connection per job server", async () => {
  await using g1 = await startGearmand();
  await using g2 = await startGearmand();
  await using p1 = await startTcpProxy(g1.addr);
  await using p2 = await startTcpProxy(g2.addr);
  const queues = ["q_a", "q_b", "q_c"];
  const { consumer: c, observer } = consumer({
    servers: [p1.addr, p2.addr],
    queues: queues.map((name) => ({ name, inOrder: false })),
    handler: () => Promise.resolve(),
    // One reading, at the start, within the test.
    backlogIntervalMs: 60_000,
  });
  await c.start();
  try {
    await waitFor(() => queues.every((q) => observer.backlogHistory.get(q)?.length === 1), {
      message: "the first backlog reading",
    });
    await waitFor(() => queues.every((q) => observer.connected(q) === true), {
      message: "every link up",
    });
    assert.deepEqual(queues.map((q) => observer.backlogHistory.get(q)), [[0], [0], [0]]);
    // One worker connection per queue (docs/consumption.md#one-connection-per-queue) and one admin
    // connection, on each job server.
    assert.deepEqual([p1.accepted, p2.accepted], [queues.length + 1, queues.length + 1]);
  } finally {
    await c.stop();
  }
});
