/**
 * The consumer contract, run against both backends — a private gearmand and
 * the test RabbitMQ broker — so the two transports of the one delivery engine
 * cannot drift apart again (they once had two retry loops, one with jitter
 * and one without).
 */
import assert from "node:assert/strict";
import { GearmanConsumer } from "../src/gearman/consumer.ts";
import { RabbitMqConsumer } from "../src/amqp/consumer.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import type {
  ConsumerDeadLetter,
  ConsumerObserver,
  Job,
  JobHandler,
} from "../src/consumer/contract.ts";
import type { ConsumedQueue, WindowOptions } from "../src/consumer/consumer.ts";
import { INITIAL_WINDOW, type QueuePressure } from "../src/consumer/window.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { type Gearmand, startGearmand } from "./helpers/gearmand.ts";
import { startTcpProxy, type TcpProxy } from "./helpers/tcp_proxy.ts";
import { RecordingObserver } from "./helpers/recording_observer.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  publish as gearmanPublish,
  TEST_QUEUE_DURABILITY,
  testRabbitMqUrl,
} from "./helpers/worker.ts";

const decoder = new TextDecoder();

/** Writers that always want more rows: the window grows whenever all of it is used. */
const STARVED: QueuePressure = { fill: 0, full: false, excess: 0, slow: false, statementMs: 0 };

/** What a contract case needs of a backend. */
interface Consumer {
  start(): Promise<void>;
  stop(): Promise<void>;
}

interface ConsumerSpec {
  readonly queues: readonly ConsumedQueue[];
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  readonly deadLetter?: (record: ConsumerDeadLetter) => Promise<void>;
  readonly maxJobsPerQueue?: number;
  /** The adaptive window; absent = a fixed number of jobs per queue. */
  readonly window?: WindowOptions;
  readonly maxJobSize?: number;
  readonly maxInFlightBytes?: number;
  readonly drainTimeoutMs?: number;
  /** Connect through the environment's proxy (for a severed link). */
  readonly viaProxy?: boolean;
}

interface Env extends AsyncDisposable {
  /** Queue names unique to this test. */
  queue(label: string): string;
  publish(queue: string, payloads: readonly (string | Uint8Array)[]): Promise<void>;
  /** Jobs of `queue` still at the broker, not handed to any consumer. */
  waiting(queue: string): Promise<number>;
  consumer(spec: ConsumerSpec): Consumer;
  readonly proxy: TcpProxy;
}

interface Backend {
  readonly name: "gearman" | "rabbitmq";
  env(): Promise<Env>;
}

const GEARMAN: Backend = {
  name: "gearman",
  async env() {
    const gearmand: Gearmand = await startGearmand();
    const proxy = await startTcpProxy(gearmand.addr);
    const id = crypto.randomUUID().slice(0, 8);
    return {
      queue: (label) => `se_contract_${id}_${label}`,
      publish: (queue, payloads) => gearmanPublish(gearmand.addr, queue, payloads),
      async waiting(queue) {
        const row = (await adminStatus(gearmand.addr)).find((r) => r.function === queue);
        return row === undefined ? 0 : row.total - row.running;
      },
      consumer: (spec) =>
        new GearmanConsumer({
          servers: [spec.viaProxy === true ? proxy.addr : gearmand.addr],
          queues: spec.queues,
          maxJobsPerQueue: spec.maxJobsPerQueue ?? 8,
          ...(spec.window === undefined ? {} : { window: spec.window }),
          handler: spec.handler,
          observer: spec.observer,
          ...(spec.deadLetter === undefined ? {} : { deadLetter: spec.deadLetter }),
          ...(spec.maxJobSize === undefined ? {} : { maxJobSize: spec.maxJobSize }),
          ...(spec.maxInFlightBytes === undefined
            ? {}
            : { maxInFlightBytes: spec.maxInFlightBytes }),
          retry: { initialMs: 10, maxMs: 50 },
          reconnectIntervalMs: 50,
          drainTimeoutMs: spec.drainTimeoutMs ?? 2_000,
          statsIntervalMs: 0,
        }),
      proxy,
      async [Symbol.asyncDispose]() {
        await proxy.close();
        await gearmand.stop();
      },
    };
  },
};

const RABBITMQ: Backend = {
  name: "rabbitmq",
  async env() {
    const url = testRabbitMqUrl();
    const u = new URL(url);
    const proxy = await startTcpProxy(`${u.hostname}:${u.port || "5672"}`);
    const viaProxy = new URL(url);
    viaProxy.host = proxy.addr;
    const publisher = await AmqpPublisher.connect(url, TEST_QUEUE_DURABILITY);
    const id = crypto.randomUUID().slice(0, 8);
    const used = new Set<string>();
    return {
      queue(label) {
        const q = `se_contract_${id}_${label}`;
        used.add(q);
        return q;
      },
      publish: (queue, payloads) => publisher.publish(queue, payloads),
      async waiting(queue) {
        return (await publisher.depth(queue)).ready;
      },
      consumer: (spec) =>
        new RabbitMqConsumer({
          url: spec.viaProxy === true ? viaProxy.href : url,
          queues: spec.queues,
          ...TEST_QUEUE_DURABILITY,
          prefetch: 50,
          ...(spec.window === undefined ? {} : { window: spec.window }),
          handler: spec.handler,
          observer: spec.observer,
          ...(spec.deadLetter === undefined ? {} : { deadLetter: spec.deadLetter }),
          ...(spec.maxJobSize === undefined ? {} : { maxJobSize: spec.maxJobSize }),
          ...(spec.maxInFlightBytes === undefined
            ? {}
            : { maxInFlightBytes: spec.maxInFlightBytes }),
          retry: { initialMs: 10, maxMs: 50 },
          reconnectIntervalMs: 50,
          drainTimeoutMs: spec.drainTimeoutMs ?? 2_000,
          statsIntervalMs: 0,
        }),
      proxy,
      async [Symbol.asyncDispose]() {
        for (const q of used) await publisher.deleteQueue(q).catch(() => {});
        await publisher.close();
        await proxy.close();
      },
    };
  },
};

/** What a dead-letter sink keeps of a record: the payload is freed once the delivery has ended. */
function keptRecord(record: ConsumerDeadLetter): ConsumerDeadLetter {
  return { ...record, job: { ...record.job, payload: record.job.payload.slice() } };
}

/** Declare the queue up front, so RabbitMQ keeps what is published before the consumer starts. */
async function declared(env: Env, queue: string): Promise<string> {
  await env.publish(queue, []);
  return queue;
}

for (const backend of [GEARMAN, RABBITMQ]) {
  const name = backend.name;

  Deno.test(`contract (${name}): a job is acknowledged only once its handler resolved; an unfinished one is handed out again (D1)`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("ack"));
    const observer = new RecordingObserver();
    const never = Promise.withResolvers<void>();
    const first = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: () => never.promise,
      observer,
      drainTimeoutMs: 200,
    });
    await first.start();
    await env.publish(q, ["held"]);
    await waitFor(() => (observer.inFlightNow.get(q) ?? 0) === 1, { message: "job running" });
    await first.stop();
    assert.equal(observer.done.get(q)?.abandoned, 1, "abandoned at the drain deadline");
    assert.equal(observer.completed(q), 0);
    await waitFor(async () => (await env.waiting(q)) === 1, { message: "the job is back" });
    const seen: string[] = [];
    const second = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: (job) => {
        seen.push(decoder.decode(job.payload));
        return Promise.resolve();
      },
      observer: new RecordingObserver(),
    });
    await second.start();
    try {
      await waitFor(() => seen.length === 1, { message: "redelivered" });
      assert.deepEqual(seen, ["held"]);
    } finally {
      await second.stop();
    }
  });

  Deno.test(`contract (${name}): a transient failure is retried on the same link with back-off and counted`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("retry"));
    const observer = new RecordingObserver();
    let attempts = 0;
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler:
        () => (++attempts <= 2 ? Promise.reject(new Error("MySQL held")) : Promise.resolve()),
      observer,
    });
    await c.start();
    try {
      await env.publish(q, ["flaky"]);
      await waitFor(() => observer.completed(q) === 1, { message: "completed after retries" });
      assert.equal(attempts, 3);
      assert.equal(observer.retried.get(q), 2, "two retries counted");
      assert.equal(observer.reconnects.get(q) ?? 0, 0, "a handler failure is no link failure");
    } finally {
      await c.stop();
    }
    assert.equal(await env.waiting(q), 0);
  });

  Deno.test(`contract (${name}): a programming error is dead-lettered as internal after three attempts, acknowledged, and a one-slot queue moves on`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("internal"));
    const observer = new RecordingObserver();
    const dead: ConsumerDeadLetter[] = [];
    const handled: string[] = [];
    const c = env.consumer({
      queues: [{ name: q, inOrder: true }],
      handler: (job: Job) => {
        const text = decoder.decode(job.payload);
        if (text === "bug") {
          // deno-lint-ignore no-explicit-any
          (undefined as any).boom();
        }
        handled.push(text);
        return Promise.resolve();
      },
      observer,
      deadLetter: (record) => {
        dead.push(keptRecord(record));
        return Promise.resolve();
      },
    });
    await c.start();
    try {
      await env.publish(q, ["bug", "next"]);
      await waitFor(() => handled.includes("next"), { message: "the job behind it ran" });
      assert.equal(dead.length, 1);
      assert.equal(dead[0]?.reason, "internal");
      assert.equal(decoder.decode(dead[0]?.job.payload), "bug");
      assert.match(dead[0]?.error ?? "", /boom|undefined/);
      assert.equal(observer.retried.get(q), 2, "two retries before the third attempt gave up");
      assert.equal(observer.completed(q), 2, "both acknowledged");
    } finally {
      await c.stop();
    }
    assert.equal(await env.waiting(q), 0);
  });

  Deno.test(`contract (${name}): a job above the size limit is dead-lettered as too_large with its size and first KiB, acknowledged, and the link is kept`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("large"));
    const observer = new RecordingObserver();
    const dead: ConsumerDeadLetter[] = [];
    const handled: string[] = [];
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: (job) => {
        handled.push(decoder.decode(job.payload));
        return Promise.resolve();
      },
      observer,
      deadLetter: (record) => {
        dead.push(keptRecord(record));
        return Promise.resolve();
      },
      maxJobSize: 64 * 1024,
    });
    await c.start();
    try {
      const big = new Uint8Array(1024 * 1024).fill(0x78); // "xxx…"
      big.set(new TextEncoder().encode("BIG:"), 0);
      await env.publish(q, [big, "small"]);
      // Both are acknowledged once handled; RabbitMQ handles them at the same time.
      await waitFor(
        () => handled.includes("small") && dead.length === 1 && observer.completed(q) === 2,
        { message: "small handled, big dead-lettered, both acknowledged" },
      );
      assert.equal(dead[0]?.reason, "too_large");
      assert.equal(dead[0]?.bytes, 1024 * 1024);
      assert.ok((dead[0]?.job.payload.length ?? 0) <= 1024);
      assert.match(decoder.decode(dead[0]?.job.payload), /^BIG:x+$/);
      assert.deepEqual(handled, ["small"], "the big job never reached the handler");
      assert.equal(observer.reconnects.get(q) ?? 0, 0, "the link was kept");
      assert.deepEqual(observer.connectedHistory.get(q), [true]);
    } finally {
      await c.stop();
    }
    assert.equal(await env.waiting(q), 0);
  });

  Deno.test(`contract (${name}): a job's payload is freed once its delivery has ended, and the jobs read with it arrive intact`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("release"));
    const observer = new RecordingObserver();
    // Sizes around the parser's 1 KiB and a 64 KiB read, several jobs per read.
    const sizes = [200, 1024, 3000, 70_000];
    const payloads = Array.from({ length: 40 }, (_, i) => {
      const head = `job-${i}:`;
      return head +
        String.fromCharCode(97 + (i % 26)).repeat((sizes[i % 4] as number) - head.length);
    });
    const kept: { size: number; view: Uint8Array }[] = [];
    const wrong: string[] = [];
    const failed = new Set<number>();
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: async (job) => {
        const text = decoder.decode(job.payload);
        const i = Number(/^job-(\d+):/.exec(text)?.[1]);
        if (text !== payloads[i]) wrong.push(text.slice(0, 20));
        // A retry reads the payload again after the jobs read with it were freed.
        if (i % 4 === 2 && !failed.has(i)) {
          failed.add(i);
          throw new Error("transient");
        }
        kept.push({ size: job.payload.byteLength, view: job.payload });
        await new Promise((r) => setTimeout(r, i % 3));
      },
      observer,
    });
    await env.publish(q, payloads);
    await c.start();
    try {
      await waitFor(() => observer.completed(q) === 40, { message: "all 40 acknowledged" });
      assert.deepEqual(wrong, [], "every payload arrived as published");
      const large = kept.filter((k) => k.size >= 1024);
      assert.equal(large.length, 30, "30 payloads of 1 KiB and more");
      assert.deepEqual(
        large.map((k) => k.view.byteLength),
        large.map(() => 0),
        "each was freed when its delivery ended",
      );
    } finally {
      await c.stop();
    }
  });

  Deno.test(`contract (${name}): an in-order queue runs one handler at a time, in publish order`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("order"));
    const observer = new RecordingObserver();
    const order: string[] = [];
    let running = 0;
    let maxRunning = 0;
    const c = env.consumer({
      queues: [{ name: q, inOrder: true }],
      handler: async (job) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await new Promise((r) => setTimeout(r, Math.random() * 5));
        order.push(decoder.decode(job.payload));
        running--;
      },
      observer,
      maxJobsPerQueue: 8,
    });
    const payloads = Array.from({ length: 30 }, (_, i) => `d${i}`);
    await env.publish(q, payloads);
    await c.start();
    try {
      await waitFor(() => order.length === 30, { message: "all handled" });
      assert.equal(maxRunning, 1);
      assert.deepEqual(order, payloads);
    } finally {
      await c.stop();
    }
  });

  Deno.test(`contract (${name}): payload bytes being handled stay within --max-in-flight-bytes plus one job`, async () => {
    await using env = await backend.env();
    // Five queues: even one handler per queue (RabbitMQ) would hold more than the limit.
    const queues: string[] = [];
    for (const label of ["b0", "b1", "b2", "b3", "b4"]) {
      queues.push(await declared(env, env.queue(label)));
    }
    const observer = new RecordingObserver();
    const size = 256 * 1024;
    const limit = 1024 * 1024;
    let held = 0;
    let maxHeld = 0;
    const gate = Promise.withResolvers<void>();
    let handled = 0;
    const c = env.consumer({
      queues: queues.map((name) => ({ name, inOrder: false })),
      handler: async (job) => {
        held += job.payload.length;
        maxHeld = Math.max(maxHeld, held);
        await gate.promise;
        held -= job.payload.length;
        handled++;
      },
      observer,
      maxInFlightBytes: limit,
    });
    for (const q of queues) {
      await env.publish(q, Array.from({ length: 4 }, () => new Uint8Array(size).fill(0x61)));
    }
    await c.start();
    try {
      await waitFor(() => held >= limit, { message: "the budget fills" });
      assert.ok(maxHeld <= limit + size, `held ${maxHeld} bytes at once, limit ${limit}`);
      gate.resolve();
      await waitFor(() => handled === 20, { message: "every job handled after release" });
      assert.ok(maxHeld <= limit + size, `held ${maxHeld} bytes at once, limit ${limit}`);
    } finally {
      gate.resolve();
      await c.stop();
    }
  });

  // Queues waiting for bytes are served oldest first (docs/consumption.md, budgets). A queue with
  // small jobs used to take back every byte it freed itself (and, on Gearman, kept the first place
  // in line by waiting again at once), so a queue waiting for more than one of its jobs frees
  // (here: a first job, which reserves half the limit) waited as long as the other had a backlog.
  Deno.test(`contract (${name}): a queue waiting for more bytes than another frees per job is not overtaken by it`, async () => {
    await using env = await backend.env();
    const hog = await declared(env, env.queue("hog"));
    const late = await declared(env, env.queue("late"));
    const size = 64 * 1024;
    const limit = 1024 * 1024;
    const held: PromiseWithResolvers<void>[] = [];
    let lateHandled = false;
    const observer = new RecordingObserver();
    const c = env.consumer({
      queues: [{ name: hog, inOrder: false }, { name: late, inOrder: false }],
      handler: (job) => {
        if (job.queue === late) {
          lateHandled = true;
          return Promise.resolve();
        }
        const gate = Promise.withResolvers<void>();
        held.push(gate);
        return gate.promise;
      },
      observer,
      maxJobsPerQueue: 32,
      maxInFlightBytes: limit,
    });
    await env.publish(hog, Array.from({ length: 60 }, () => new Uint8Array(size).fill(0x61)));
    await c.start();
    try {
      await waitFor(() => held.length === limit / size, { message: "the hog fills the budget" });
      await env.publish(late, ["late"]);
      // One hog job at a time: each frees 64 KiB, the late queue's first grab wants 512 KiB.
      for (let answered = 1; answered <= 40 && !lateHandled && held.length > 0; answered++) {
        held.shift()?.resolve();
        await waitFor(() => observer.completed(hog) === answered, { message: "hog job answered" });
      }
      await waitFor(() => lateHandled, { message: "the late queue's job handled" });
    } finally {
      for (const gate of held) gate.resolve();
      await c.stop();
    }
  });

  // The core restart's cutoff is its job's receive time (docs/core-restart.md rule 1). Its grab
  // used to wait for the process-wide byte budget like any other: in a burst of status jobs the
  // restart job stayed at the broker, was received seconds late, and the late cutoff swept rows of
  // live objects.
  Deno.test(`contract (${name}): a receive-at-once queue is served while other queues hold the whole byte budget`, async () => {
    await using env = await backend.env();
    const big = await declared(env, env.queue("rao_big"));
    const restart = await declared(env, env.queue("rao_restart"));
    const size = 256 * 1024;
    const limit = 1024 * 1024;
    let held = 0;
    const gate = Promise.withResolvers<void>();
    let restartHandled = false;
    const c = env.consumer({
      queues: [{ name: big, inOrder: false }, {
        name: restart,
        inOrder: false,
        receiveAtOnce: true,
      }],
      handler: async (job) => {
        if (job.queue === restart) {
          restartHandled = true;
          return;
        }
        held += job.payload.length;
        await gate.promise;
        held -= job.payload.length;
      },
      observer: new RecordingObserver(),
      maxInFlightBytes: limit,
    });
    await env.publish(big, Array.from({ length: 8 }, () => new Uint8Array(size).fill(0x61)));
    await c.start();
    try {
      await waitFor(() => held >= limit, { message: "the big queue fills the byte budget" });
      await env.publish(restart, ['{"object_type":102}']);
      await waitFor(() => restartHandled, {
        message: "the restart job handled while the byte budget is full",
      });
      assert.ok(held >= limit, "the big queue still held the whole budget");
    } finally {
      gate.resolve();
      await c.stop();
    }
  });

  Deno.test(`contract (${name}): a queue's window grows past ${INITIAL_WINDOW} jobs while its writers are starved; an in-order queue stays at one job`, async () => {
    await using env = await backend.env();
    const ordered = await declared(env, env.queue("win_ordered"));
    const open = await declared(env, env.queue("win_open"));
    const observer = new RecordingObserver();
    const gate = Promise.withResolvers<void>();
    let running = 0;
    let maxOrdered = 0;
    const c = env.consumer({
      queues: [{ name: ordered, inOrder: true }, { name: open, inOrder: false }],
      handler: async (job) => {
        if (job.queue === ordered) maxOrdered = Math.max(maxOrdered, ++running);
        await gate.promise;
        if (job.queue === ordered) running--;
      },
      observer,
      maxJobsPerQueue: 24,
      window: { pressure: () => STARVED, tickMs: 5 },
    });
    await env.publish(ordered, Array.from({ length: 40 }, (_, i) => `o${i}`));
    await env.publish(open, Array.from({ length: 40 }, (_, i) => `w${i}`));
    await c.start();
    try {
      await waitFor(() => (observer.inFlightNow.get(open) ?? 0) > INITIAL_WINDOW, {
        message: `more than ${INITIAL_WINDOW} jobs of the open queue in flight`,
      });
      const sizes = observer.windowHistory.get(open) ?? [];
      assert.equal(sizes[0], INITIAL_WINDOW, "starts at the initial window");
      assert.ok((sizes.at(-1) ?? 0) > INITIAL_WINDOW, `window sizes ${sizes.join(",")}`);
      assert.ok(
        (observer.inFlightNow.get(open) ?? 0) <= (sizes.at(-1) ?? 0),
        "never more jobs than the window",
      );
      assert.deepEqual(
        observer.windowHistory.get(ordered),
        [1],
        "the in-order queue has no window",
      );
      assert.equal(observer.inFlightNow.get(ordered), 1);
    } finally {
      gate.resolve();
    }
    await waitFor(() => observer.completed(ordered) === 40 && observer.completed(open) === 40, {
      message: "every job handled",
    });
    await c.stop();
    assert.equal(maxOrdered, 1, "one in-order job at a time");
  });

  Deno.test(`contract (${name}): the byte budget bounds the window: starved writers grow no window the bytes do not allow`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("win_bytes"));
    const observer = new RecordingObserver();
    const size = 256 * 1024;
    const limit = 1024 * 1024;
    let held = 0;
    let maxHeld = 0;
    let ticks = 0;
    const gate = Promise.withResolvers<void>();
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: async (job) => {
        held += job.payload.length;
        maxHeld = Math.max(maxHeld, held);
        await gate.promise;
        held -= job.payload.length;
      },
      observer,
      maxJobsPerQueue: 24,
      maxInFlightBytes: limit,
      window: {
        pressure: () => {
          ticks++;
          return STARVED;
        },
        tickMs: 5,
      },
    });
    await env.publish(q, Array.from({ length: 12 }, () => new Uint8Array(size).fill(0x62)));
    await c.start();
    try {
      await waitFor(() => held >= limit, { message: "the byte budget fills" });
      // Ticks that find the budget short of bytes, not of slots, must not widen the window.
      const after = ticks;
      await waitFor(() => ticks >= after + 10, { message: "ten more window ticks" });
      assert.ok(maxHeld <= limit + size, `held ${maxHeld} bytes at once, limit ${limit}`);
      assert.deepEqual(observer.windowHistory.get(q), [INITIAL_WINDOW]);
    } finally {
      gate.resolve();
    }
    await waitFor(() => observer.completed(q) === 12, { message: "every job handled" });
    await c.stop();
    assert.ok(maxHeld <= limit + size, `held ${maxHeld} bytes at once, limit ${limit}`);
  });

  Deno.test(`contract (${name}): a severed link is rebuilt, queue_connected reads 1, 0, 1, and jobs after the cut are handled`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("sever"));
    const observer = new RecordingObserver();
    const handled = new Set<string>();
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: (job) => {
        handled.add(decoder.decode(job.payload));
        return Promise.resolve();
      },
      observer,
      viaProxy: true,
    });
    await c.start();
    try {
      await env.publish(q, ["before"]);
      await waitFor(() => handled.has("before"), { message: "before the cut" });
      env.proxy.sever();
      await waitFor(() => (observer.reconnects.get(q) ?? 0) === 1, { message: "reconnected" });
      const after = Array.from({ length: 20 }, (_, i) => `after-${i}`);
      await env.publish(q, after);
      await waitFor(() => after.every((p) => handled.has(p)), { message: "after the cut" });
      assert.deepEqual(observer.connectedHistory.get(q), [true, false, true]);
    } finally {
      await c.stop();
    }
  });

  Deno.test(`contract (${name}): stop lets running handlers finish and acknowledges them`, async () => {
    await using env = await backend.env();
    const q = await declared(env, env.queue("stop"));
    const observer = new RecordingObserver();
    const gate = Promise.withResolvers<void>();
    const c = env.consumer({
      queues: [{ name: q, inOrder: false }],
      handler: () => gate.promise,
      observer,
    });
    await c.start();
    await env.publish(q, ["one"]);
    await waitFor(() => (observer.inFlightNow.get(q) ?? 0) === 1, { message: "running" });
    const stopping = c.stop();
    gate.resolve();
    await stopping;
    assert.equal(observer.completed(q), 1);
    assert.equal(observer.done.get(q)?.abandoned ?? 0, 0);
    assert.equal(await env.waiting(q), 0);
    assert.deepEqual(observer.connectedHistory.get(q), [true, false]);
  });
}
