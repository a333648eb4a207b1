import assert from "node:assert/strict";
import {
  BatchingSink,
  type DropReason,
  SinkWriteError,
  type Transport,
} from "../../src/perfdata/sink.ts";
import { recordTimers, turns, waitFor } from "../helpers/wait.ts";
import { seededRandom } from "../helpers/seeded_random.ts";
import { withLogs } from "../helpers/logs.ts";

/** A transport that answers from a script (one entry per write), then succeeds. */
function scripted(answers: (SinkWriteError | number)[]) {
  const writes: number[][] = [];
  const transport: Transport<number> = {
    backend: "test",
    target: "test",
    write(batch) {
      writes.push([...batch]);
      const a = answers.shift() ?? 0;
      return typeof a === "number" ? Promise.resolve(a) : Promise.reject(a);
    },
  };
  return { transport, writes };
}

function observer() {
  const o = {
    written: 0,
    dropped: new Map<DropReason, number>(),
    up: true,
    retries: 0,
    failures: 0,
  };
  return {
    o,
    observer: {
      written: (n: number) => void (o.written += n),
      dropped: (n: number, r: DropReason) => void o.dropped.set(r, (o.dropped.get(r) ?? 0) + n),
      available: (up: boolean) => void (o.up = up),
      retried: () => void o.retries++,
      failed: () => void o.failures++,
    },
  };
}

const retry = { retries: 3, backoff: { initialMs: 1, maxMs: 2, jitter: 0 } };
const temporary = () => new SinkWriteError("HTTP 503", { retryable: true });

Deno.test("sink: a temporary failure is retried with the same batch, then written", async () => {
  const { transport, writes } = scripted([temporary(), temporary()]);
  const { o, observer: obs } = observer();
  const sink = new BatchingSink({
    transport,
    batchSize: 3,
    retry,
    observer: obs,
    statsIntervalMs: 0,
  });
  sink.push([1, 2, 3]);
  await waitFor(() => o.written === 3);
  assert.deepEqual(writes, [[1, 2, 3], [1, 2, 3], [1, 2, 3]]);
  assert.equal(o.retries, 2);
  assert.equal(o.up, true);
  await sink.close(1000);
});

Deno.test("sink: the pauses between a batch's attempts come from its back-off, doubling to the cap", async () => {
  const { transport, writes } = scripted([temporary(), temporary(), temporary()]);
  const { observer: obs } = observer();
  // Waited on without waitFor, whose polling would show among the recorded timers.
  const written = Promise.withResolvers<void>();
  const sink = new BatchingSink({
    transport,
    batchSize: 1,
    retry: { retries: 3, backoff: { initialMs: 3, maxMs: 10, jitter: 0 } },
    observer: { ...obs, written: () => written.resolve() },
    statsIntervalMs: 0,
  });
  {
    using timers = recordTimers();
    sink.push([1]);
    await written.promise;
    assert.deepEqual(timers.requested, [3, 6, 10]);
  }
  assert.equal(writes.length, 4);
  await sink.close(1000);
});

Deno.test("sink: a refused batch (4xx) is dropped at once as rejected, never retried", async () => {
  const { transport, writes } = scripted([
    new SinkWriteError("HTTP 404 database not found", { retryable: false, reason: "rejected" }),
  ]);
  const { o, observer: obs } = observer();
  const sink = new BatchingSink({
    transport,
    batchSize: 2,
    retry,
    observer: obs,
    statsIntervalMs: 0,
  });
  sink.push([1, 2]);
  await waitFor(() => o.dropped.get("rejected") === 2);
  assert.equal(writes.length, 1);
  assert.equal(o.retries, 0);
  assert.equal(o.failures, 1);
  await sink.close(1000);
});

Deno.test("sink: after a batch used up its retries, the next batches get one attempt each until a write succeeds", async () => {
  const { transport, writes } = scripted([
    temporary(),
    temporary(),
    temporary(),
    temporary(), // batch 1: four attempts, dropped
    temporary(), // batch 2: one attempt, dropped
    0, // batch 3 written: retries are back
    temporary(),
    0, // batch 4: retried once, written
  ]);
  const { o, observer: obs } = observer();
  const sink = new BatchingSink({
    transport,
    batchSize: 1,
    retry,
    observer: obs,
    statsIntervalMs: 0,
  });
  sink.push([1, 2, 3, 4]);
  await waitFor(() => o.written === 2);
  assert.deepEqual(writes.map((w) => w[0]), [1, 1, 1, 1, 2, 3, 4, 4]);
  assert.equal(o.dropped.get("write_failed"), 2);
  assert.equal(o.up, true);
  await sink.close(1000);
});

Deno.test("sink: push never waits; beyond the buffer points are dropped as buffer_full; close counts what is left", async () => {
  // A write that only ends when the sink gives up on it (the close budget).
  const transport: Transport<number> = {
    backend: "test",
    target: "test",
    write: (_batch, signal) =>
      new Promise((_, reject) =>
        signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true })
      ),
  };
  const { o, observer: obs } = observer();
  const sink = new BatchingSink({ transport, batchSize: 2_000, observer: obs, statsIntervalMs: 0 });
  sink.push(Array.from({ length: 25_000 }, (_, i) => i));
  assert.equal(o.dropped.get("buffer_full"), 5_000, "ten batches of 2,000 fit");
  assert.equal(o.up, false);
  await sink.close(50);
  assert.equal(o.dropped.get("write_failed"), 20_000, "the batch in flight and the buffer");
  assert.equal(o.written, 0);
});

Deno.test("sink: a transport's refused points are counted as out_of_order, the rest as written", async () => {
  const { transport } = scripted([1]);
  const { o, observer: obs } = observer();
  const sink = new BatchingSink({ transport, batchSize: 3, observer: obs, statsIntervalMs: 0 });
  sink.push([1, 2, 3]);
  await waitFor(() => o.written === 2);
  assert.equal(o.dropped.get("out_of_order"), 1);
  await sink.close(1000);
});

Deno.test("sink: a backend slower than the points arrive: buffer_full is logged once a minute, not a recovery line per batch", async () => {
  // Writes that succeed when the test lets them: a healthy but slow backend.
  const held: (() => void)[] = [];
  const transport: Transport<number> = {
    backend: "test",
    target: "test",
    write: (_batch, signal) =>
      new Promise((resolve, reject) => {
        held.push(() => resolve(0));
        signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
      }),
  };
  const { o, observer: obs } = observer();
  await withLogs(async (logs) => {
    const sink = new BatchingSink({ transport, batchSize: 1, observer: obs, statsIntervalMs: 0 });
    const overflow = Array.from({ length: 10_001 }, (_, i) => i);
    for (let cycle = 1; cycle <= 5; cycle++) {
      sink.push(overflow);
      await waitFor(() => held.length === 1, { message: `write ${cycle} in flight` });
      held.shift()?.();
      await waitFor(() => o.written === cycle, { message: `write ${cycle} done` });
    }
    assert.ok((o.dropped.get("buffer_full") ?? 0) > 0);
    const lines = logs.filter((l) => l.properties["target"] === "test");
    const drops = lines.filter((l) =>
      l.level.startsWith("warn") && l.properties["reason"] === "buffer_full"
    );
    const recoveries = lines.filter((l) => l.message.includes("succeed again"));
    assert.equal(drops.length, 1, "the drops are logged, once: " + JSON.stringify(lines));
    assert.ok(recoveries.length <= 1, `${recoveries.length} recovery lines for 5 batches`);
    // The rest is dropped at close; the write in flight ends with the budget.
    await sink.close(0);
  });
});

Deno.test("sink: property: whatever the answers, their order and the moment of close, every pushed point is counted once, written or dropped", async () => {
  const seed = 7_2026;
  const rnd = seededRandom(seed);
  for (let round = 0; round < 25; round++) {
    // Each write answers at random: taken, some points refused, a temporary or a final failure.
    let taken = 0;
    const transport: Transport<number> = {
      backend: "test",
      target: "test",
      write(batch) {
        switch (rnd(4)) {
          case 0:
            return Promise.reject(temporary());
          case 1:
            return Promise.reject(new SinkWriteError("HTTP 400", { retryable: false }));
          default: {
            const refused = rnd(2) === 0 ? 0 : rnd(batch.length + 1);
            taken += batch.length - refused;
            return Promise.resolve(refused);
          }
        }
      },
    };
    const { o, observer: obs } = observer();
    const sink = new BatchingSink({
      transport,
      batchSize: 1 + rnd(500),
      retry: rnd(2) === 0 ? retry : { ...retry, retries: 0 },
      observer: obs,
      statsIntervalMs: 0,
    });
    let pushed = 0;
    for (let i = rnd(8); i > 0; i--) {
      const n = rnd(2) === 0 ? rnd(50) : rnd(12_000);
      sink.push(Array.from({ length: n }, (_, k) => k));
      pushed += n;
      await turns(rnd(3));
    }
    await sink.close(rnd(2) === 0 ? 0 : 1000);
    let dropped = 0;
    for (const n of o.dropped.values()) dropped += n;
    const what = `seed ${seed}, round ${round}`;
    assert.equal(o.written, taken, `${what}: written is what the transport took`);
    assert.equal(o.written + dropped, pushed, `${what}: every point counted once`);
  }
});
