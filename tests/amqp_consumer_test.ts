/**
 * The RabbitMQ consumer against the real broker of the tests
 * (`STATUSENGINE_TEST_RABBITMQ_URL`, default amqp://guest:guest@127.0.0.1:5672/;
 * a test that cannot reach it fails). Every test uses queues with a random
 * suffix and deletes them; a TCP proxy cuts the link where a test needs a
 * lost connection (there is no management API to force-close one).
 */
import assert from "node:assert/strict";
import { AMQPClient } from "@cloudamqp/amqp-client";
import { RabbitMqConsumer, type RabbitMqConsumerOptions } from "../src/amqp/consumer.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { AmqpSession, consumerTag, useDenoSocket } from "../src/amqp/session.ts";
import { parseAmqpUrl } from "../src/util/amqp_url.ts";
import { DenoSocket } from "../src/util/deno_socket.ts";
import {
  type Acknowledgement,
  type Delivery,
  type DeliveryScope,
  type Job,
  NOOP_OBSERVER,
} from "../src/consumer/contract.ts";
import { DeliveryEngine } from "../src/consumer/delivery.ts";
import { ByteBudget, QueueBudget } from "../src/consumer/budget.ts";
import type { ConsumedQueue } from "../src/consumer/consumer.ts";
import { configureLogging, getLogger, resetLogging } from "../src/log.ts";
import { freePort } from "./helpers/gearmand.ts";
import { selfSignedIdentity, startTcpProxy } from "./helpers/tcp_proxy.ts";
import { RecordingObserver } from "./helpers/recording_observer.ts";
import { track, waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";
import { TEST_QUEUE_DURABILITY, testRabbitMqUrl } from "./helpers/worker.ts";
import { hasCode } from "../src/util/errors.ts";

const decoder = new TextDecoder();
const BROKER_URL = testRabbitMqUrl();

/** `count` queue names unique to one test. */
function queueNames(count: number): string[] {
  const id = crypto.randomUUID().slice(0, 8);
  return Array.from({ length: count }, (_, i) => `se_test_amqp_${id}_${i}`);
}

/** The broker's `host:port`, for a proxy in front of it. */
function brokerAddr(): string {
  const u = new URL(BROKER_URL);
  return `${u.hostname}:${u.port || "5672"}`;
}

/** The test URL pointed at another `host:port`, credentials and vhost kept. */
function urlVia(addr: string): string {
  const u = new URL(BROKER_URL);
  u.host = addr;
  return u.href;
}

/** A publisher that deletes the test's queues when disposed. */
async function publisherFor(queues: readonly string[]): Promise<AmqpPublisher> {
  const publisher = await AmqpPublisher.connect(BROKER_URL, TEST_QUEUE_DURABILITY);
  const close = publisher.close.bind(publisher);
  return Object.assign(publisher, {
    async [Symbol.asyncDispose]() {
      for (const q of queues) await publisher.deleteQueue(q).catch(() => {});
      await close();
    },
  });
}

/**
 * Start `c`, run `body`, and stop `c` whatever `body` did; `release` (a handler the test holds)
 * is resolved before the stop.
 */
async function whileRunning(
  c: RabbitMqConsumer,
  body: () => Promise<void>,
  release?: PromiseWithResolvers<void>,
): Promise<void> {
  await c.start();
  try {
    await body();
  } finally {
    release?.resolve();
    await c.stop();
  }
}

/**
 * A consumer of the test broker. A queue given by name is in order, one message at a time
 * (as statusngin_downtimes); pass `{ name, inOrder: false }` for a queue handled several at once.
 */
function consumer(
  options:
    & Partial<Omit<RabbitMqConsumerOptions, "queues">>
    & Pick<RabbitMqConsumerOptions, "handler">
    & { readonly queues: readonly (string | ConsumedQueue)[] },
): { consumer: RabbitMqConsumer; observer: RecordingObserver } {
  const observer = new RecordingObserver();
  const c = new RabbitMqConsumer({
    url: BROKER_URL,
    prefetch: 10,
    ...TEST_QUEUE_DURABILITY,
    observer,
    reconnectIntervalMs: 100,
    drainTimeoutMs: 2000,
    statsIntervalMs: 0,
    ...options,
    queues: options.queues.map((q) => (typeof q === "string" ? { name: q, inOrder: true } : q)),
  });
  return { consumer: c, observer };
}

Deno.test("rabbitmq consumer: a published message reaches the handler as raw bytes and is acked exactly once (D1)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  const payloads: Uint8Array[] = [];
  const jobs: Job[] = [];
  const { consumer: c, observer } = consumer({
    queues: [q],
    handler: (job) => {
      jobs.push(job);
      // A copy: the payload is freed once the delivery has ended.
      payloads.push(job.payload.slice());
      return Promise.resolve();
    },
  });
  await whileRunning(c, async () => {
    assert.equal(observer.connected(q), true, "queue_connected 1 once consume-ok arrived");
    const depth = await publisher.depth(q);
    assert.equal(depth.consumers, 1, "one consumer per queue");
    // Not valid UTF-8: the bytes must reach the handler untouched (the pipeline repairs them
    // later).
    const raw = new Uint8Array([0x7b, 0xff, 0xfe, 0x41, 0x7d]);
    await publisher.publish(q, [raw]);
    await waitFor(() => observer.completed(q) === 1, { message: "one completion" });
    assert.deepEqual(payloads, [raw]);
    assert.ok(payloads[0] instanceof Uint8Array);
    assert.equal(jobs[0]?.queue, q);
    assert.equal(jobs[0]?.server, brokerAddr());
  });
  assert.equal(observer.connected(q), false, "stop sets queue_connected to 0");
  // An unacknowledged message would be back in the queue once the channel closed.
  assert.deepEqual(await publisher.depth(q), { ready: 0, consumers: 0 });
  assert.equal(payloads.length, 1, "handled once");
  assert.equal(observer.done.get(q)?.abandoned ?? 0, 0);
});

Deno.test("rabbitmq consumer: a handler that never resolves keeps its message unacked, and it is redelivered after stop (D1)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  let calls = 0;
  const { consumer: c, observer } = consumer({
    queues: [q],
    drainTimeoutMs: 200,
    handler: () => {
      calls++;
      return new Promise<void>(() => {});
    },
  });
  await c.start();
  try {
    await publisher.publish(q, ["stuck"]);
    await waitFor(() => calls === 1, { message: "handler called" });
    assert.equal((await publisher.depth(q)).ready, 0, "delivered, not yet acknowledged");
  } finally {
    // The handler never resolves: stop returns only because the drain timeout ends the wait.
    const stopped = track(c.stop());
    await waitFor(() => stopped.settled, { message: "stop to return after the drain timeout" });
  }
  assert.equal(observer.done.get(q)?.abandoned, 1);
  assert.equal(observer.completed(q), 0);
  await waitFor(async () => (await publisher.depth(q)).ready === 1, {
    message: "message back in the queue",
  });
});

Deno.test("rabbitmq consumer: prefetch keeps the backlog at the broker while a handler is stuck (docs/consumption.md#rabbitmq-channels)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  const release = Promise.withResolvers<void>();
  let calls = 0;
  const { consumer: c, observer } = consumer({
    queues: [q],
    prefetch: 5,
    drainTimeoutMs: 200,
    handler: async () => {
      calls++;
      await release.promise;
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(q, Array.from({ length: 200 }, (_, i) => `m${i}`));
    await waitFor(() => calls === 1, { message: "first handler running" });
    // With prefetch 5 the broker pushes exactly 5 and keeps 195 ready;
    // without it, all 200 would be pushed into process memory.
    await waitFor(async () => (await publisher.depth(q)).ready === 195, {
      message: "195 of 200 ready at the broker",
    });
    const ready = (await publisher.depth(q)).ready;
    assert.ok(ready >= 185, `ready at the broker: ${ready}`);
    assert.equal(calls, 1, "one handler at a time");
    assert.equal(observer.inFlightNow.get(q), 1);
  }, release);
});

Deno.test("rabbitmq consumer: one queue with every prefetched message stuck cannot starve another (docs/consumption.md#rabbitmq-window)", async () => {
  const [busy, other] = queueNames(2) as [string, string];
  await using publisher = await publisherFor([busy, other]);
  const release = Promise.withResolvers<void>();
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    queues: [busy, other],
    prefetch: 5,
    handler: async (job) => {
      if (job.queue === busy) await release.promise;
      else handled.push(decoder.decode(job.payload));
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(busy, Array.from({ length: 40 }, (_, i) => `b${i}`));
    await waitFor(() => observer.inFlightNow.get(busy) === 1, { message: "busy queue stuck" });
    await publisher.publish(other, ["o1", "o2"]);
    await waitFor(() => handled.length === 2, {
      timeoutMs: 3000,
      message: "the other queue's messages",
    });
    assert.deepEqual(handled, ["o1", "o2"]);
    assert.equal(observer.inFlightNow.get(busy), 1, "the busy queue still runs one handler");
  }, release);
});

Deno.test("rabbitmq consumer: an in-order queue runs one handler at a time, in delivery order, even with prefetch 20, while another runs several within the prefetch (docs/consumption.md#rabbitmq-window)", async () => {
  const [downtimes, other] = queueNames(2) as [string, string];
  await using publisher = await publisherFor([downtimes, other]);
  const running = new Map<string, number>();
  const maxRunning = new Map<string, number>();
  const order: string[] = [];
  const { consumer: c, observer } = consumer({
    queues: [{ name: downtimes, inOrder: true }, { name: other, inOrder: false }],
    prefetch: 20,
    handler: async (job) => {
      const now = (running.get(job.queue) ?? 0) + 1;
      running.set(job.queue, now);
      maxRunning.set(job.queue, Math.max(maxRunning.get(job.queue) ?? 0, now));
      if (job.queue === downtimes) order.push(decoder.decode(job.payload));
      await new Promise((r) => setTimeout(r, 5));
      running.set(job.queue, (running.get(job.queue) ?? 1) - 1);
    },
  });
  await whileRunning(c, async () => {
    const sent = Array.from({ length: 40 }, (_, i) => `d${i}`);
    await Promise.all([
      publisher.publish(downtimes, sent),
      publisher.publish(other, Array.from({ length: 40 }, (_, i) => `o${i}`)),
    ]);
    await waitFor(() => observer.completed(downtimes) === 40 && observer.completed(other) === 40, {
      message: "80 completions",
    });
    assert.equal(maxRunning.get(downtimes), 1);
    const several = maxRunning.get(other) ?? 0;
    assert.ok(several > 1 && several <= 20, `other queue: ${several} handlers at once`);
    assert.deepEqual(order, sent, "handled in delivery order");
  });
});

Deno.test("rabbitmq consumer: stop cancels first, then handles and acks what was already delivered; the rest stays ready (D1)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  const handled: string[] = [];
  const gate = Promise.withResolvers<void>();
  const { consumer: c, observer } = consumer({
    queues: [q],
    prefetch: 10,
    handler: async (job) => {
      // The gate opens once the broker saw the basic.cancel: every ack leaves after it, so no
      // delivery beyond the first 10 can follow.
      await gate.promise;
      handled.push(decoder.decode(job.payload));
    },
  });
  await c.start();
  await publisher.publish(q, Array.from({ length: 30 }, (_, i) => `m${i}`));
  await waitFor(async () => (await publisher.depth(q)).ready === 20, {
    message: "10 delivered, 20 ready",
  });
  const stopping = c.stop();
  await waitFor(async () => (await publisher.depth(q)).consumers === 0, {
    message: "the consumer cancelled at the broker",
  });
  gate.resolve();
  await stopping;
  // The 10 delivered before the cancel were worked through and acked, not dropped.
  assert.equal(observer.completed(q), 10);
  assert.equal(observer.done.get(q)?.abandoned ?? 0, 0);
  assert.deepEqual(handled, Array.from({ length: 10 }, (_, i) => `m${i}`));
  assert.deepEqual(await publisher.depth(q), { ready: 20, consumers: 0 });
});

Deno.test("rabbitmq consumer: a transient handler failure is retried on the same channel", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  let failures = 0;
  const seen: string[] = [];
  const { consumer: c, observer } = consumer({
    queues: [q],
    retry: { initialMs: 10, maxMs: 100 },
    handler: (job) => {
      const text = decoder.decode(job.payload);
      seen.push(text);
      if (text === "flaky" && failures < 2) {
        failures++;
        return Promise.reject(new Error("MySQL went away"));
      }
      return Promise.resolve();
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(q, ["flaky", "fine"]);
    await waitFor(() => observer.completed(q) === 2, { message: "both completed" });
    assert.equal(observer.retried.get(q), 2);
    assert.deepEqual(seen, ["flaky", "flaky", "flaky", "fine"]);
  });
  assert.equal((await publisher.depth(q)).ready, 0, "nothing is requeued");
});

Deno.test("rabbitmq consumer: a severed connection is rebuilt, gauge 1→0→1, reconnects +1 per queue, and messages published after the cut are handled (docs/consumption.md#rabbitmq-reconnect)", async () => {
  const queues = queueNames(2);
  const [a, b] = queues as [string, string];
  await using publisher = await publisherFor(queues);
  await using proxy = await startTcpProxy(brokerAddr());
  const handled = new Set<string>();
  const { consumer: c, observer } = consumer({
    url: urlVia(proxy.addr),
    queues,
    handler: (job) => {
      handled.add(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(a, ["before"]);
    await waitFor(() => handled.has("before"), { message: "message before the cut" });
    proxy.sever();
    await waitFor(() => observer.connected(a) === false, { message: "gauge 0 after the cut" });
    await waitFor(() => observer.connected(a) === true && observer.connected(b) === true, {
      message: "reconnected",
    });
    const after = Array.from({ length: 20 }, (_, i) => `after-${i}`);
    await publisher.publish(a, after.slice(0, 10));
    await publisher.publish(b, after.slice(10));
    await waitFor(() => after.every((p) => handled.has(p)), { message: "messages after the cut" });
    for (const q of queues) {
      assert.deepEqual(observer.connectedHistory.get(q), [true, false, true], q);
      assert.equal(observer.reconnects.get(q), 1, `${q}: one reconnect`);
      assert.equal((await publisher.depth(q)).consumers, 1, `${q}: one consumer, no leftover`);
    }
  });
});

Deno.test("rabbitmq consumer: messages unacked when the link died are redelivered and handled after the reconnect (D1)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await using proxy = await startTcpProxy(brokerAddr());
  let gate = Promise.withResolvers<void>();
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    url: urlVia(proxy.addr),
    queues: [q],
    handler: async (job, signal) => {
      const text = decoder.decode(job.payload);
      if (text === "held") {
        await Promise.race([
          gate.promise,
          new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))),
        ]);
      }
      handled.push(text);
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(q, ["held"]);
    await waitFor(() => observer.inFlightNow.get(q) === 1, { message: "handler running" });
    proxy.sever();
    await waitFor(() => observer.connected(q) === false);
    // The handler finishes after the cut: its ack cannot reach the broker.
    gate.resolve();
    gate = Promise.withResolvers<void>();
    await waitFor(() => observer.connected(q) === true, { message: "reconnected" });
    gate.resolve();
    await waitFor(() => observer.completed(q) >= 1 && handled.length === 2, {
      message: "redelivered message handled",
    });
    assert.deepEqual(handled, ["held", "held"]);
    assert.equal(observer.done.get(q)?.abandoned, 1, "the first delivery was not acknowledged");
  });
  assert.equal((await publisher.depth(q)).ready, 0);
});

Deno.test("rabbitmq consumer: a silent link (no FIN, no RST) is detected by the AMQP heartbeat and rebuilt", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await using proxy = await startTcpProxy(brokerAddr());
  const url = new URL(urlVia(proxy.addr));
  url.searchParams.set("heartbeat", "1");
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    url: url.href,
    queues: [q],
    handler: (job) => {
      handled.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await whileRunning(c, async () => {
    proxy.freeze();
    await waitFor(() => observer.connected(q) === false, {
      timeoutMs: 5000,
      message: "the frozen link declared lost",
    });
    proxy.unblock();
    await waitFor(() => observer.connected(q) === true, { message: "reconnected" });
    await publisher.publish(q, ["after"]);
    await waitFor(() => handled.includes("after"), { message: "message after the silence" });
  });
});

for (const tls of [false, true]) {
  Deno.test(`rabbitmq consumer: ${tls ? "over TLS too, " : ""}a silent link is detected by the heartbeat while the worker keeps writing to it (backlog probes)`, async () => {
    const [q] = queueNames(1) as [string];
    await using publisher = await publisherFor([q]);
    await publisher.declare(q);
    await using proxy = await startTcpProxy(
      brokerAddr(),
      tls ? { tls: await selfSignedIdentity() } : {},
    );
    const url = new URL(urlVia(proxy.addr));
    url.searchParams.set("heartbeat", "1");
    if (tls) {
      url.protocol = "amqps:";
      // The test's certificate is self-signed.
      url.searchParams.set("insecure", "");
    }
    const { consumer: c, observer } = consumer({
      url: url.href,
      queues: [q],
      // A backlog question far more often than the heartbeat: the worker writes, the broker is
      // silent.
      backlogIntervalMs: 100,
      handler: () => Promise.resolve(),
    });
    await whileRunning(c, async () => {
      // The probe channel is open: every later backlog question is one more write.
      await waitFor(() => observer.backlogHistory.get(q)?.includes(0) === true, {
        message: "a backlog read",
      });
      proxy.freeze();
      // Our own writes are no sign of life from the broker: only frames read from it are.
      await waitFor(() => observer.connected(q) === false, {
        timeoutMs: 5000,
        message: "the frozen link declared lost although the worker kept writing to it",
      });
      proxy.unblock();
      await waitFor(() => observer.connected(q) === true, { message: "reconnected" });
    });
  });
}

Deno.test("rabbitmq consumer: a consumer cancelled by the broker (queue deleted) rebuilds the session and declares the queue again", async () => {
  const [a, b] = queueNames(2) as [string, string];
  await using publisher = await publisherFor([a, b]);
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    queues: [a, b],
    handler: (job) => {
      handled.push(decoder.decode(job.payload));
      return Promise.resolve();
    },
  });
  await whileRunning(c, async () => {
    await publisher.deleteQueue(a);
    await waitFor(() => (observer.reconnects.get(a) ?? 0) === 1, { message: "a rebuild" });
    assert.deepEqual(observer.connectedHistory.get(b), [true, false, true]);
    await publisher.publish(a, ["again"]);
    await waitFor(() => handled.includes("again"), { message: "message to the new queue" });
  });
});

Deno.test("rabbitmq consumer: a session lost while its connection lives (another queue deleted) hands its prefetched messages back at once, so an in-order queue keeps its order (docs/consumption.md#rabbitmq-reconnect)", async () => {
  const [a, b] = queueNames(2) as [string, string];
  await using publisher = await publisherFor([a, b]);
  const gate = Promise.withResolvers<void>();
  const handled: string[] = [];
  const { consumer: c, observer } = consumer({
    queues: [a, b],
    handler: async (job) => {
      const text = decoder.decode(job.payload);
      if (job.queue === a && text === "a1" && !handled.includes("a1")) await gate.promise;
      if (job.queue === a) handled.push(text);
    },
  });
  await whileRunning(c, async () => {
    await publisher.publish(a, ["a1", "a2", "a3", "a4"]);
    await waitFor(() => observer.inFlightNow.get(a) === 1, { message: "a1 running" });
    // The broker cancels b's consumer: the session is rebuilt, its connection was never lost.
    await publisher.deleteQueue(b);
    await waitFor(() => (observer.reconnects.get(a) ?? 0) === 1, { message: "a rebuild" });
    await waitFor(() => observer.connected(a) === true, { message: "new session" });
    // Two, so that the broker's round robin hands one to the new consumer if the old one remains.
    await publisher.publish(a, ["a5", "a6"]);
    gate.resolve();
    const all = ["a1", "a2", "a3", "a4", "a5", "a6"];
    await waitFor(() => all.every((t) => handled.includes(t)), {
      message: "every message handled",
    });
    const firsts = handled.filter((t, i) => handled.indexOf(t) === i);
    assert.deepEqual(firsts, all, `handled: ${handled.join(",")}`);
  });
});

Deno.test("rabbitmq consumer: stop while reconnect attempts keep failing returns promptly and dials no more", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await using proxy = await startTcpProxy(brokerAddr());
  const { consumer: c, observer } = consumer({
    url: urlVia(proxy.addr),
    queues: [q],
    reconnectIntervalMs: 50,
    handler: () => Promise.resolve(),
  });
  await withLogs(async (logs) => {
    await c.start();
    proxy.block();
    await waitFor(() => observer.connected(q) === false);
    // The loop is genuinely retrying once a reconnect attempt has failed (it logs the first).
    await waitFor(() => logs.some((l) => l.message.includes("reconnect failed, still retrying")), {
      message: "a failed reconnect attempt",
    });
    // Promptly: stop ends the loop's wait instead of waiting for it.
    const stopped = track(c.stop());
    await waitFor(() => stopped.settled, { message: "stop to return during the reconnect loop" });
  });
  const acceptedAtStop = proxy.accepted;
  proxy.unblock();
  // A reconnect timer or dial left running after stop would also fail the test's op sanitizer;
  // what the broker sees is checked here.
  assert.equal((await publisher.depth(q)).consumers, 0, "no consumer left at the broker");
  assert.equal(proxy.accepted, acceptedAtStop, "no reconnect attempt after stop");
  assert.deepEqual(observer.connectedHistory.get(q), [true, false]);
});

Deno.test("rabbitmq consumer: stop during a connection attempt that never completes returns promptly", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await using proxy = await startTcpProxy(brokerAddr());
  const { consumer: c, observer } = consumer({
    url: urlVia(proxy.addr),
    queues: [q],
    reconnectIntervalMs: 20,
    handler: () => Promise.resolve(),
  });
  await c.start();
  const acceptedBefore = proxy.accepted;
  // A silent peer: the next dial is accepted, its handshake never answered.
  proxy.freeze();
  proxy.sever();
  await waitFor(() => proxy.accepted > acceptedBefore, { message: "a reconnect attempt" });
  // The handshake is never answered: stop returns only because it abandons the attempt.
  const stopped = track(c.stop());
  await waitFor(() => stopped.settled, { message: "stop to return during the connection attempt" });
  assert.equal(observer.connected(q), false);
  proxy.unblock();
  await waitFor(async () => (await publisher.depth(q)).consumers === 0, {
    message: "no consumer at the broker",
  });
});

Deno.test("rabbitmq consumer: start fails fast on an unreachable broker and on a malformed URL", async () => {
  const [q] = queueNames(1) as [string];
  const unreachable = urlVia(`127.0.0.1:${freePort()}`);
  for (
    const url of [
      unreachable,
      "amqp://user:Sup3rS3cretPW@[not-a-host/",
      "http://user:Sup3rS3cretPW@127.0.0.1:5672/",
      "amqp://user:Sup3rS3cretPW@127.0.0.1:99999/",
    ]
  ) {
    const { consumer: c, observer } = consumer({
      url,
      queues: [q],
      handler: () => Promise.resolve(),
    });
    // Fast: start gives up instead of retrying (a start that kept retrying fails the wait).
    const starting = c.start();
    const started = track(starting);
    await waitFor(() => started.settled, { message: `start to fail for ${url}` });
    await assert.rejects(starting, (err: unknown) => {
      assert.ok(err instanceof Error);
      assert.ok(hasCode(err, "rabbitmq_start"), String(err));
      assert.ok(!err.message.includes("Sup3rS3cretPW"), `password in "${err.message}"`);
      return true;
    }, url);
    await c.stop();
    assert.equal(observer.connectedHistory.size, 0, "no gauge for a queue never connected");
  }
});

Deno.test("rabbitmq consumer: start fails on refused credentials, naming no password", async () => {
  const [q] = queueNames(1) as [string];
  const u = new URL(BROKER_URL);
  u.password = "Sup3rS3cretPW";
  const { consumer: c } = consumer({ url: u.href, queues: [q], handler: () => Promise.resolve() });
  await assert.rejects(c.start(), (err: unknown) => {
    assert.ok(err instanceof Error);
    assert.match(err.message, /ACCESS_REFUSED/);
    assert.match(err.message, /:\*\*\*\*@/);
    assert.ok(!err.message.includes("Sup3rS3cretPW"));
    return true;
  });
  await c.stop();
});

Deno.test("rabbitmq consumer: a queue declared with other flags fails start and the message names the durability mismatch (docs/consumption.md#rabbitmq-topology)", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  // A queue declared by someone else with other flags (auto-delete here: a
  // non-durable one is refused outright by RabbitMQ 4.x, so it cannot be the
  // example on every broker version the tests run against).
  const raw = new AMQPClient(BROKER_URL, undefined, null);
  await raw.connect();
  try {
    const ch = await raw.channel();
    await ch.queueDeclare(q, { durable: true, exclusive: false, autoDelete: true });
    const { consumer: c, observer } = consumer({ queues: [q], handler: () => Promise.resolve() });
    await assert.rejects(c.start(), /PRECONDITION_FAILED.*DurableQueues/s);
    await c.stop();
    assert.equal(observer.connectedHistory.size, 0);
  } finally {
    await raw.close().catch(() => {});
  }
  await publisher.deleteQueue(q).catch(() => {});
});

Deno.test("rabbitmq consumer: stop before start is safe, and start after stop is refused", async () => {
  const [q] = queueNames(1) as [string];
  const { consumer: c, observer } = consumer({ queues: [q], handler: () => Promise.resolve() });
  await c.stop();
  await c.stop();
  await assert.rejects(c.start(), /after stop/);
  assert.equal(observer.connectedHistory.size, 0);
});

Deno.test("rabbitmq consumer: the password never appears in a log line, through start, loss, reconnect, stats and stop (D8)", async () => {
  const queues = queueNames(1);
  const [q] = queues as [string];
  await using publisher = await publisherFor(queues);
  await using proxy = await startTcpProxy(brokerAddr());
  const lines: string[] = [];
  await configureLogging({ level: "debug", format: "text", write: (l) => lines.push(l) });
  try {
    const viaProxy = urlVia(proxy.addr);
    const password = decodeURIComponent(new URL(viaProxy).password);
    // One failure, so the retry warning is among the lines checked.
    let failed = false;
    const { consumer: c, observer } = consumer({
      url: viaProxy,
      queues,
      statsIntervalMs: 50,
      retry: { initialMs: 10, maxMs: 100 },
      handler: (job) => {
        if (decoder.decode(job.payload) !== "fail" || failed) return Promise.resolve();
        failed = true;
        return Promise.reject(new Error("bad"));
      },
    });
    await whileRunning(c, async () => {
      await publisher.publish(q, ["ok", "fail"]);
      await waitFor(() => observer.completed(q) === 2 && observer.retried.get(q) === 1);
      proxy.block();
      await waitFor(() => observer.connected(q) === false);
      await waitFor(() => lines.some((l) => l.includes("reconnect failed")), {
        message: "a failed reconnect logged",
      });
      proxy.unblock();
      await waitFor(() => observer.connected(q) === true, { message: "reconnected" });
      await waitFor(() => lines.some((l) => l.includes("consumer stats")));
    });
    // A wrong password on top: the refused start logs nothing that shows it.
    const wrong = new URL(viaProxy);
    wrong.password = "Sup3rS3cretPW";
    const { consumer: refused } = consumer({
      url: wrong.href,
      queues,
      handler: () => Promise.resolve(),
    });
    await assert.rejects(refused.start());
    await refused.stop();
    const text = lines.join("");
    assert.ok(text.includes("rabbitmq: consumer started"));
    assert.ok(text.includes("rabbitmq: connection lost"));
    assert.ok(text.includes("rabbitmq: reconnected"));
    assert.ok(text.includes(":****@"), "URLs are logged masked");
    for (const line of lines) {
      assert.ok(!line.includes(`:${password}@`), `password in: ${line}`);
      assert.ok(!line.includes("Sup3rS3cretPW"), `password in: ${line}`);
    }
  } finally {
    await resetLogging();
  }
});

Deno.test("rabbitmq consumer: the consumer tag names the queue (docs/consumption.md#rabbitmq-channels)", () => {
  assert.equal(consumerTag("statusngin_hostchecks"), "statusengine-worker.statusngin_hostchecks");
});

Deno.test("rabbitmq client: connects over Deno.connect (a DenoSocket) and carries messages both ways; a TLS URL keeps Node's socket", async () => {
  const [queue] = queueNames(1) as [string];
  const client = new AMQPClient(parseAmqpUrl(BROKER_URL).href, undefined, null);
  assert.equal(useDenoSocket(client), true);
  await client.connect();
  try {
    assert.ok(client.socket instanceof DenoSocket, "the connection's socket is a DenoSocket");
    const channel = await client.channel();
    await channel.queueDeclare(queue, { durable: false, autoDelete: true }, {});
    const body = "x".repeat(300_000);
    await channel.basicPublish("", queue, body);
    await waitFor(async () =>
      (await channel.queueDeclare(queue, { passive: true })).messageCount === 1
    );
    const got = await channel.basicGet(queue, { noAck: false });
    assert.equal(got?.bodyToString(), body);
    await got?.ack();
    await channel.queueDelete(queue);
  } finally {
    await client.close();
  }
  assert.equal(
    useDenoSocket(new AMQPClient("amqps://guest:guest@127.0.0.1/", undefined, null)),
    false,
  );
});

Deno.test("rabbitmq session: a message whose ack is already on the wire at give-back is not counted as given back", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.publish(q, ["one"]);
  let given: Promise<ReadonlyMap<string, number>> | undefined;
  // The give-back comes right after the acknowledgement was sent: the ack frame goes out before
  // the channel close, so the broker takes it and the message is not handed back.
  class GiveBackAfterAck extends DeliveryEngine {
    override deliver(delivery: Delivery, ack: Acknowledgement, scope: DeliveryScope) {
      return super.deliver(delivery, {
        complete: () => {
          const answered = ack.complete();
          given = session.giveBack("mysql_unavailable");
          return answered;
        },
      }, scope);
    }
  }
  const engine = new GiveBackAfterAck({
    handler: () => Promise.resolve(),
    observer: NOOP_OBSERVER,
    deadLetter: () => Promise.resolve(),
    name: "test",
    log: getLogger("test"),
  });
  const bytes = new ByteBudget(1 << 20);
  const session = await AmqpSession.open({
    url: parseAmqpUrl(BROKER_URL),
    queues: [q],
    prefetch: 1,
    maxJobSize: 1 << 20,
    ...TEST_QUEUE_DURABILITY,
    engine,
    budget: (queue) => new QueueBudget(queue, 1, bytes),
  }, AbortSignal.timeout(10_000));
  session.start();
  await session.closed;
  await waitFor(() => given !== undefined, { message: "the give-back" });
  const counted = await given;
  const client = new AMQPClient(parseAmqpUrl(BROKER_URL).href, undefined, null);
  await client.connect();
  try {
    const channel = await client.channel();
    const back = (await channel.queueDeclare(q, { passive: true })).messageCount;
    assert.equal(back, 0, "the broker took the acknowledgement");
    assert.deepEqual(
      [...(counted ?? new Map())],
      [],
      `given back: ${JSON.stringify([...(counted ?? new Map())])}, at the broker again: ${back}`,
    );
  } finally {
    await client.close();
  }
});

// The stall detector's full-queue check is the core's, whatever the backend: a RabbitMQ queue
// whose every slot (the prefetch) holds a message that never finishes is stalled, and clears once
// one finishes.
Deno.test("rabbitmq consumer: a queue whose every slot holds a message that never finishes is stalled, and clears once one finishes", async () => {
  const [q] = queueNames(1) as [string];
  await using publisher = await publisherFor([q]);
  await publisher.declare(q);
  const release = Promise.withResolvers<void>();
  const { consumer: c, observer } = consumer({
    queues: [{ name: q, inOrder: false }],
    prefetch: 2,
    stallTimeoutMs: 300,
    handler: () => release.promise,
  });
  await whileRunning(c, async () => {
    await publisher.publish(q, ["m1", "m2", "m3"]);
    await waitFor(() => observer.stalledHistory.get(q)?.at(-1) === true, {
      message: "queue_stalled 1 while every slot holds a message that never finishes",
    });
    release.resolve();
    await waitFor(() => observer.completed(q) === 3, { message: "every message done" });
    await waitFor(() => observer.stalledHistory.get(q)?.at(-1) === false, {
      message: "stall cleared once a message finished",
    });
  }, release);
});
