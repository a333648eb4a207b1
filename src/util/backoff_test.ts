import assert from "node:assert/strict";
import { Backoff } from "./backoff.ts";

Deno.test("backoff: delays double from the initial value up to the cap", () => {
  const b = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 0 });
  assert.deepEqual([1, 2, 3, 4, 5].map(() => b.next()), [100, 200, 400, 800, 1000]);
  b.reset();
  assert.equal(b.next(), 100);
});

Deno.test("backoff: jitter spreads each delay within ±jitter of its base", () => {
  const low = new Backoff({ initialMs: 1000, maxMs: 1000, jitter: 0.2 }, () => 0);
  const high = new Backoff({ initialMs: 1000, maxMs: 1000, jitter: 0.2 }, () => 0.999999);
  assert.equal(low.next(), 800);
  assert.ok(Math.abs(high.next() - 1200) < 0.01);
});

Deno.test("backoff: nonsensical schedules are refused", () => {
  assert.throws(() => new Backoff({ initialMs: 0, maxMs: 10 }), RangeError);
  assert.throws(() => new Backoff({ initialMs: 10, maxMs: 5 }), RangeError);
  assert.throws(() => new Backoff({ initialMs: 10, maxMs: 10, jitter: 1 }), RangeError);
});
