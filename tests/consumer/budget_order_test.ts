/**
 * The in-flight budget under random orders of grabs, arrivals, answers, cancelled waits and
 * window changes across three queues sharing one byte limit. Links and handlers call it in
 * whatever order their sockets and MySQL answer, so its bookkeeping must not depend on that
 * order. After every step: the bytes held are exactly those of the grants outstanding, no grant
 * overfills its queue or the limit, and (once pending callbacks ran) no waiter is left behind
 * while it could be served, unless it queues behind another queue that waits for bytes. At the
 * end, answering every job serves every waiter and leaves nothing held.
 */
import assert from "node:assert/strict";
import { ByteBudget, type Grant, QueueBudget } from "../../src/consumer/budget.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const KIB = 1024;

interface Held {
  readonly queue: number;
  readonly grant: Grant;
  settled: boolean;
}

interface Waiter {
  readonly queue: number;
  readonly cancel: () => void;
  granted: boolean;
  cancelled: boolean;
}

/** Let queued callbacks (the budget defers a grant to a fresh waiter) run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 4; i++) await Promise.resolve();
}

async function runCase(seed: number, steps: number): Promise<void> {
  const rnd = seededRandom(seed);
  const bytes = new ByteBudget((64 + rnd(512)) * KIB);
  const queues = [0, 1, 2].map((i) => new QueueBudget(`q${i}`, 1 + rnd(4), bytes));
  const held: Held[] = [];
  const waiters: Waiter[] = [];
  const trace: string[] = [];
  const where = (step: number) => `seed ${seed}, step ${step}:\n  ${trace.slice(-12).join("\n  ")}`;

  /** Record a grant; checked as it is handed out, before anything else can change. */
  const take = (queue: number, grant: Grant, step: number) => {
    const q = queues[queue] as QueueBudget;
    const before = bytes.used - grant.bytes;
    assert.ok(q.inUse <= q.capacity, `slot overfilled, ${where(step)}`);
    assert.ok(before === 0 || bytes.used <= bytes.limit, `bytes overfilled, ${where(step)}`);
    held.push({ queue, grant, settled: false });
  };
  const pending = (queue: number) =>
    waiters.some((w) => w.queue === queue && !w.granted && !w.cancelled);
  const check = (step: number) => {
    const sum = held.reduce((s, h) => s + h.grant.bytes, 0);
    assert.equal(bytes.used, sum, `bytes held, ${where(step)}`);
    for (const [i, q] of queues.entries()) {
      assert.equal(q.inUse, held.filter((h) => h.queue === i).length, `in use, ${where(step)}`);
    }
  };
  /** Queues that have shown no job yet: one grab probes the size before the next is let out. */
  const neverSized = new Set([0, 1, 2]);
  const probing = (i: number) => neverSized.has(i) && held.some((h) => h.queue === i && !h.settled);
  const fits = (i: number) =>
    bytes.used === 0 || bytes.used + (queues[i] as QueueBudget).estimate <= bytes.limit;
  /** Queue `i` has a free slot and is past its probe: only bytes can hold its waiter back. */
  const slotFree = (i: number) => (queues[i] as QueueBudget).hasRoom && !probing(i);

  for (let step = 0; step < steps; step++) {
    const i = rnd(3);
    const q = queues[i] as QueueBudget;
    const roll = rnd(100);
    if (roll < 25) {
      trace.push(`q${i} waits`);
      const waiter: Waiter = { queue: i, cancel: () => {}, granted: false, cancelled: false };
      const cancel = q.waitFor((grant) => {
        assert.ok(!waiter.cancelled, `a cancelled wait was served, ${where(step)}`);
        waiter.granted = true;
        take(i, grant, step);
      });
      waiters.push(Object.assign(waiter, { cancel }));
    } else if (roll < 35) {
      const grant = q.tryAcquire();
      trace.push(`q${i} tries: ${grant === undefined ? "nothing" : grant.bytes}`);
      if (grant !== undefined) {
        assert.ok(!pending(i), `a newcomer overtook a waiter, ${where(step)}`);
        take(i, grant, step);
      }
    } else if (roll < 42) {
      const open = waiters.filter((w) => w.queue === i && !w.granted && !w.cancelled);
      const w = open[rnd(Math.max(1, open.length))];
      if (w !== undefined) {
        trace.push(`q${i} cancels a wait`);
        w.cancelled = true;
        w.cancel();
      }
    } else if (roll < 65) {
      const mine = held.filter((h) => h.queue === i && !h.settled);
      const h = mine[rnd(Math.max(1, mine.length))];
      if (h !== undefined) {
        const size = 1 + rnd(rnd(4) === 0 ? 400 * KIB : 40 * KIB);
        trace.push(`q${i} job arrives: ${size} bytes`);
        h.settled = true;
        neverSized.delete(i);
        h.grant.settle(size);
        h.grant.settle(size + 1); // a second settle changes nothing
      }
    } else if (roll < 92) {
      const mine = held.filter((h) => h.queue === i);
      const h = mine[rnd(Math.max(1, mine.length))];
      if (h !== undefined) {
        trace.push(`q${i} job answered (${h.grant.bytes} bytes)`);
        held.splice(held.indexOf(h), 1);
        h.grant.release();
        h.grant.release(); // idempotent
      }
    } else {
      const capacity = 1 + rnd(4);
      trace.push(`q${i} window ${capacity}`);
      q.setCapacity(capacity);
    }
    check(step);
    if (rnd(3) === 0) {
      await flush();
      check(step);
      // Bytes are handed out oldest queue first, so a queue that fits may wait behind one that
      // does not; any other reason to wait while it could be served is a lost wake-up.
      const blockedOnBytes = [0, 1, 2].filter((j) => pending(j) && slotFree(j) && !fits(j));
      for (const j of [0, 1, 2]) {
        if (!pending(j) || !slotFree(j) || !fits(j)) continue;
        assert.ok(
          blockedOnBytes.length > 0,
          `q${j} waits although it could be served (${bytes.used} of ${bytes.limit} bytes held, ` +
            `estimate ${queues[j]?.estimate}), ${where(step)}`,
        );
      }
    }
  }
  // Answer every job, settling first, until nobody waits: every waiter gets its turn.
  for (let round = 0; round < 10_000 && (held.length > 0 || [0, 1, 2].some(pending)); round++) {
    const h = held.shift();
    if (h !== undefined) {
      if (!h.settled) h.grant.settle(1 + rnd(40 * KIB));
      h.grant.release();
    }
    await flush();
    check(steps);
  }
  assert.deepEqual([0, 1, 2].filter(pending), [], `waiters left at the end, seed ${seed}`);
  assert.equal(bytes.used, 0, `bytes left at the end, seed ${seed}`);
}

Deno.test("budget: random orders of grabs, arrivals, answers, cancels and window changes keep the books and serve every waiter", async () => {
  for (let seed = 1; seed <= 200; seed++) await runCase(seed, 400);
});
