import assert from "node:assert/strict";
import { SlotPool } from "./slot_pool.ts";

Deno.test("slot pool: never hands out more slots than its capacity (G2)", () => {
  const pool = new SlotPool(3);
  assert.equal([1, 2, 3, 4].filter(() => pool.tryAcquire()).length, 3);
  assert.equal(pool.inUse, 3);
  pool.release();
  assert.equal(pool.inUse, 2);
});

Deno.test("slot pool: a released slot goes to the oldest waiter, not to a newcomer", () => {
  const pool = new SlotPool(1);
  assert.ok(pool.tryAcquire());
  const order: string[] = [];
  pool.waitForSlot(() => order.push("a"));
  pool.waitForSlot(() => order.push("b"));
  pool.release();
  assert.deepEqual(order, ["a"]);
  assert.equal(pool.tryAcquire(), false, "b is still waiting, so a newcomer gets nothing");
  pool.release();
  assert.deepEqual(order, ["a", "b"]);
  pool.release();
  assert.equal(pool.inUse, 0);
});

Deno.test("slot pool: a cancelled wait receives nothing", () => {
  const pool = new SlotPool(1);
  assert.ok(pool.tryAcquire());
  let got = false;
  const cancel = pool.waitForSlot(() => {
    got = true;
  });
  cancel();
  pool.release();
  assert.equal(got, false);
  assert.equal(pool.inUse, 0);
});

Deno.test("slot pool: capacity below 1 and double releases are refused", () => {
  assert.throws(() => new SlotPool(0), RangeError);
  const pool = new SlotPool(1);
  assert.throws(() => pool.release(), RangeError);
});
