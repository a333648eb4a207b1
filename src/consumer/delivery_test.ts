import assert from "node:assert/strict";
import v8 from "node:v8";
import vm from "node:vm";
import { DeliveryEngine } from "./delivery.ts";
import {
  type Acknowledgement,
  type ConsumerDeadLetter,
  type DeliveryScope,
  type Job,
  NOOP_OBSERVER,
} from "./contract.ts";
import { getLogger } from "../log.ts";

function job(payload = new TextEncoder().encode('{"x":1}')): Job {
  return { queue: "q", server: "s", handle: "H:1", unique: "", payload, receivedAt: 0 };
}

function scope(): DeliveryScope {
  return { abort: new AbortController().signal, stopRetries: new AbortController().signal };
}

function engine(
  handler: (job: Job) => Promise<void>,
  deadLetters: ConsumerDeadLetter[] = [],
): DeliveryEngine {
  return new DeliveryEngine({
    handler,
    observer: NOOP_OBSERVER,
    deadLetter: (record) => {
      deadLetters.push(record);
      return Promise.resolve();
    },
    name: "test",
    log: getLogger("test"),
    retry: { initialMs: 1, maxMs: 1, jitter: 0 },
  });
}

/** An acknowledgement that answers at once, like Gearman's queued WORK_COMPLETE. */
function recordingAck(answer = true): Acknowledgement & { calls: number } {
  const ack = {
    calls: 0,
    complete: () => {
      ack.calls++;
      return answer;
    },
  };
  return ack;
}

Deno.test("delivery: a job whose handler resolves is answered through a synchronous acknowledgement", async () => {
  const ack = recordingAck();
  assert.equal(
    await engine(() => Promise.resolve()).deliver({ job: job(), ownsPayload: false }, ack, scope()),
    "completed",
  );
  assert.equal(ack.calls, 1);
  // A link that is gone answers false: the job is abandoned and redelivered by the broker.
  assert.equal(
    await engine(() => Promise.resolve()).deliver(
      { job: job(), ownsPayload: false },
      recordingAck(false),
      scope(),
    ),
    "abandoned",
  );
});

Deno.test("delivery: an asynchronous acknowledgement (AMQP's basic.ack) is awaited", async () => {
  let answered = false;
  const ack: Acknowledgement = {
    complete: () => Promise.resolve().then(() => (answered = true)),
  };
  assert.equal(
    await engine(() => Promise.resolve()).deliver({ job: job(), ownsPayload: false }, ack, scope()),
    "completed",
  );
  assert.equal(answered, true);
  const refused: Acknowledgement = { complete: () => Promise.resolve(false) };
  assert.equal(
    await engine(() => Promise.resolve()).deliver(
      { job: job(), ownsPayload: false },
      refused,
      scope(),
    ),
    "abandoned",
  );
});

Deno.test("delivery: the engine frees the payload of a delivery that owns it once the delivery ended, never before", async () => {
  let seenByHandler = "";
  const owned = job();
  const result = await engine((j) => {
    seenByHandler = new TextDecoder().decode(j.payload);
    return Promise.resolve();
  }).deliver({ job: owned, ownsPayload: true }, recordingAck(), scope());
  assert.equal(result, "completed");
  assert.equal(seenByHandler, '{"x":1}');
  assert.equal(owned.payload.length, 0, "an owned payload is freed when the delivery ends");
  const shared = job();
  await engine(() => Promise.resolve()).deliver(
    { job: shared, ownsPayload: false },
    recordingAck(),
    scope(),
  );
  assert.equal(
    new TextDecoder().decode(shared.payload),
    '{"x":1}',
    "a shared buffer is left alone",
  );
});

Deno.test("delivery: a failed first attempt is retried, and a programming error is dead-lettered after three", async () => {
  let calls = 0;
  const flaky = engine(() =>
    ++calls < 3 ? Promise.reject(new Error("MySQL away")) : Promise.resolve()
  );
  assert.equal(
    await flaky.deliver({ job: job(), ownsPayload: false }, recordingAck(), scope()),
    "completed",
  );
  assert.equal(calls, 3);
  const deadLetters: ConsumerDeadLetter[] = [];
  let bugCalls = 0;
  const buggy = engine(() => {
    bugCalls++;
    // Thrown, not rejected: a handler that throws synchronously counts as a failed attempt too.
    throw new TypeError("bug");
  }, deadLetters);
  const ack = recordingAck();
  assert.equal(await buggy.deliver({ job: job(), ownsPayload: false }, ack, scope()), "completed");
  assert.equal(bugCalls, 3);
  assert.deepEqual(deadLetters.map((d) => d.reason), ["internal"]);
  assert.equal(ack.calls, 1);
});

Deno.test("delivery: a job is answered within two microtask turns of its handler resolving (docs/architecture.md#the-hot-path)", async () => {
  // The hops between the handler's promise and WORK_COMPLETE are the hot path's awaits: each one
  // is a turn every job waits. Counted, not timed.
  let resolveHandler!: () => void;
  const ack = recordingAck();
  const delivered = engine(() => new Promise<void>((resolve) => (resolveHandler = resolve)))
    .deliver({ job: job(), ownsPayload: false }, ack, scope());
  await Promise.resolve();
  resolveHandler();
  let turns = 0;
  while (ack.calls === 0 && turns < 20) {
    await Promise.resolve();
    turns++;
  }
  assert.equal(ack.calls, 1);
  assert.ok(turns <= 2, `answered after ${turns} turns`);
  await delivered;
});

Deno.test("delivery: a retry the link ended during its back-off is not counted as retried", async () => {
  const stopRetries = new AbortController();
  const retried: string[] = [];
  let calls = 0;
  const engine = new DeliveryEngine({
    handler: () => {
      calls++;
      return Promise.reject(new Error("MySQL away"));
    },
    observer: { ...NOOP_OBSERVER, jobRetried: (queue) => retried.push(queue) },
    deadLetter: () => Promise.resolve(),
    name: "test",
    log: getLogger("test"),
    // Far longer than the test: the link ends while the job waits for its second attempt.
    retry: { initialMs: 60_000, maxMs: 60_000, jitter: 0 },
  });
  const delivered = engine.deliver(
    { job: job(), ownsPayload: false },
    recordingAck(),
    { abort: new AbortController().signal, stopRetries: stopRetries.signal },
  );
  // The failed first attempt settles in microtasks; a timer turn later the job sleeps.
  setTimeout(() => stopRetries.abort(), 0);
  assert.equal(await delivered, "abandoned");
  assert.equal(calls, 1, "no second attempt ran");
  assert.deepEqual(retried, [], `retries counted: ${retried.length}, attempts after the first: 0`);
});

Deno.test("delivery: jobs retried on one link leave nothing behind on its long-lived signals (a dependent signal per job stayed reachable from them)", async () => {
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc") as () => void;
  const failedOnce = new Set<string>();
  const engine = new DeliveryEngine({
    // Each job fails once, then succeeds: one back-off per job.
    handler: (j) => {
      if (failedOnce.delete(j.handle)) return Promise.resolve();
      failedOnce.add(j.handle);
      return Promise.reject(new Error("MySQL away"));
    },
    observer: NOOP_OBSERVER,
    deadLetter: () => Promise.resolve(),
    name: "test",
    log: getLogger("test"),
    retry: { initialMs: 0.001, maxMs: 0.001, jitter: 0 },
  });
  const link = scope();
  let next = 0;
  const deliver = async (jobs: number) => {
    for (let i = 0; i < jobs; i++) {
      const retried = { ...job(), handle: `H:${next++}` };
      assert.equal(
        await engine.deliver({ job: retried, ownsPayload: false }, recordingAck(), link),
        "completed",
      );
    }
  };
  const heapKiB = () => {
    gc();
    return Deno.memoryUsage().heapUsed / 1024;
  };
  await deliver(500);
  const before = heapKiB();
  const jobs = 2_000;
  await deliver(jobs);
  const grown = Math.round(heapKiB() - before);
  // About 2.5 KiB a job with AbortSignal.any (5 MB here); without, noise below 1 MB.
  assert.ok(grown < 2 * 1024, `heap grew by ${grown} KiB over ${jobs} retried jobs on one link`);
});
