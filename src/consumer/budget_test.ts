import assert from "node:assert/strict";
import { ByteBudget, type Grant, MIN_ESTIMATE_BYTES, QueueBudget } from "./budget.ts";

const KIB = 1024;
const MIB = 1024 * KIB;

/** A budget whose queue has already shown jobs of `size` bytes (past the probe). */
function warmed(capacity: number, bytes: ByteBudget, size: number, name = "q"): QueueBudget {
  const q = new QueueBudget(name, capacity, bytes);
  const g = q.tryAcquire() as Grant;
  g.settle(size);
  g.release();
  return q;
}

Deno.test("budget: never grants more jobs than the queue's capacity (docs/consumption.md#jobs-in-flight)", () => {
  const q = warmed(3, new ByteBudget(1 << 30), 100);
  const grants = [1, 2, 3, 4].map(() => q.tryAcquire());
  assert.equal(grants.filter((g) => g !== undefined).length, 3);
  assert.equal(q.inUse, 3);
  assert.equal(q.hasRoom, false);
  grants[0]?.release();
  assert.equal(q.inUse, 2);
});

Deno.test("budget: a released slot goes to the oldest waiter, not to a newcomer", async () => {
  const q = warmed(1, new ByteBudget(1 << 30), 100);
  const held = q.tryAcquire() as Grant;
  const order: string[] = [];
  const grants: Grant[] = [];
  q.waitFor((g) => {
    order.push("a");
    grants.push(g);
  });
  q.waitFor((g) => {
    order.push("b");
    grants.push(g);
  });
  held.release();
  assert.deepEqual(order, ["a"]);
  assert.equal(q.tryAcquire(), undefined, "b is still waiting, so a newcomer gets nothing");
  grants[0]?.release();
  assert.deepEqual(order, ["a", "b"]);
  grants[1]?.release();
  await Promise.resolve();
  assert.equal(q.inUse, 0);
});

Deno.test("budget: a cancelled wait receives nothing and a double release is harmless", () => {
  const q = warmed(1, new ByteBudget(1 << 30), 100);
  const held = q.tryAcquire() as Grant;
  let got = false;
  const cancel = q.waitFor(() => {
    got = true;
  });
  cancel();
  held.release();
  held.release();
  assert.equal(got, false);
  assert.equal(q.inUse, 0);
});

Deno.test("budget: a grant is never handed over before the caller has its cancel function", async () => {
  const q = warmed(2, new ByteBudget(1 << 30), 100);
  const box: { cancel?: () => void } = {};
  let calledWithCancelSet = false;
  box.cancel = q.waitFor((g) => {
    calledWithCancelSet = box.cancel !== undefined;
    g.release();
  });
  await Promise.resolve();
  assert.equal(calledWithCancelSet, true);
});

Deno.test("budget: grants wait while the bytes held would exceed the limit, and resume when bytes are freed", () => {
  const bytes = new ByteBudget(4 * MIB);
  const q = warmed(8, bytes, 1 * MIB);
  const held = [1, 2, 3, 4, 5].map(() => q.tryAcquire());
  assert.equal(held.filter((g) => g !== undefined).length, 4, "4 × 1 MiB fit in 4 MiB");
  let got: Grant | undefined;
  q.waitFor((g) => {
    got = g;
  });
  assert.equal(got, undefined);
  held[0]?.release();
  assert.notEqual(got, undefined, "freed bytes admit the waiter");
  assert.equal(bytes.used, 4 * MIB);
});

Deno.test("budget: with nothing held, one job is let through however large (else it would wedge its queue)", () => {
  const bytes = new ByteBudget(1 * MIB);
  const q = warmed(4, bytes, 10 * MIB);
  const g = q.tryAcquire();
  assert.notEqual(g, undefined);
  assert.equal(q.tryAcquire(), undefined, "but only one");
});

Deno.test("budget: the estimate follows the largest recent job and a settled grant holds the real size", () => {
  const bytes = new ByteBudget(1 << 30);
  const q = warmed(4, bytes, 10 * KIB);
  assert.equal(q.estimate, MIN_ESTIMATE_BYTES, "small jobs still reserve the floor");
  const g = q.tryAcquire() as Grant;
  assert.equal(bytes.used, MIN_ESTIMATE_BYTES);
  g.settle(3 * MIB);
  assert.equal(bytes.used, 3 * MIB);
  assert.equal(q.estimate, 3 * MIB);
  g.release();
  assert.equal(bytes.used, 0);
});

Deno.test("budget: a queue that has shown no job probes with one grab reserving an equal share of the limit", () => {
  const bytes = new ByteBudget(12 * MIB);
  const queues = Array.from({ length: 3 }, (_, i) => new QueueBudget(`q${i}`, 8, bytes));
  const q = queues[0] as QueueBudget;
  const probe = q.tryAcquire() as Grant;
  assert.equal(probe.bytes, 4 * MIB);
  assert.equal(q.tryAcquire(), undefined, "no second grab before the first size is known");
  let second: Grant | undefined;
  q.waitFor((g) => {
    second = g;
  });
  probe.settle(1 * MIB);
  assert.notEqual(second, undefined, "the size is known: waiters are served");
});

Deno.test("budget: bytes freed by one queue go to the queue that waited for them first", () => {
  const bytes = new ByteBudget(2 * MIB);
  const a = warmed(4, bytes, 1 * MIB, "a");
  const b = warmed(4, bytes, 1 * MIB, "b");
  const c = warmed(4, bytes, 1 * MIB, "c");
  const ga = a.tryAcquire() as Grant;
  const gb = b.tryAcquire() as Grant;
  const order: string[] = [];
  c.waitFor(() => order.push("c"));
  a.waitFor(() => order.push("a"));
  gb.release();
  assert.deepEqual(order, ["c"]);
  ga.release();
  assert.deepEqual(order, ["c", "a"]);
});

Deno.test("budget: a larger capacity serves waiters at once; room is tracked for stall detection", () => {
  const q = warmed(1, new ByteBudget(1 << 30), 100);
  const g = q.tryAcquire() as Grant;
  assert.equal(q.hasRoom, false);
  let got = false;
  q.waitFor(() => {
    got = true;
  });
  q.setCapacity(2);
  assert.equal(got, true);
  g.release();
  assert.ok(q.roomSince <= performance.now());
});

Deno.test("budget: nonsensical capacities and limits are refused", () => {
  const bytes = new ByteBudget(1);
  assert.throws(() => new QueueBudget("q", 0, bytes), RangeError);
  assert.throws(() => new QueueBudget("q", 1.5, bytes), RangeError);
  assert.throws(() => new ByteBudget(0), RangeError);
});
