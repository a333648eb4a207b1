import assert from "node:assert/strict";
import { abortable } from "./async.ts";

/** Counts the "abort" listeners added to a signal. */
function countingSignal(): { controller: AbortController; added: () => number } {
  const controller = new AbortController();
  const signal = controller.signal;
  let added = 0;
  const add = signal.addEventListener.bind(signal);
  Object.defineProperty(signal, "addEventListener", {
    value: (...args: Parameters<AbortSignal["addEventListener"]>) => {
      if (args[0] === "abort") added++;
      add(...args);
    },
  });
  return { controller, added: () => added };
}

Deno.test("abortable: waits under one signal share one listener; an abort rejects those still pending with its reason", async () => {
  const { controller, added } = countingSignal();
  const gates = Array.from({ length: 100 }, () => Promise.withResolvers<number>());
  const waits = gates.map((g) => abortable(g.promise, controller.signal));
  assert.equal(added(), 1, "one listener for 100 waits");
  // Half settle first: their waits resolve, and the abort must not touch them.
  for (let i = 0; i < 50; i++) gates[i]?.resolve(i);
  const reason = new Error("stop");
  await Promise.resolve();
  controller.abort(reason);
  const outcomes = await Promise.allSettled(waits);
  outcomes.slice(0, 50).forEach((o, i) => assert.deepEqual(o, { status: "fulfilled", value: i }));
  for (const o of outcomes.slice(50)) assert.deepEqual(o, { status: "rejected", reason });
  // After the abort a new wait is refused at once, and late settlements change nothing.
  for (let i = 50; i < 100; i++) gates[i]?.resolve(i);
  await assert.rejects(abortable(Promise.resolve(1), controller.signal), (e) => e === reason);
});

Deno.test("abortable: a rejection passes through, and later waits reuse the signal's one listener", async () => {
  const { controller, added } = countingSignal();
  const failure = new Error("failed");
  await assert.rejects(abortable(Promise.reject(failure), controller.signal), (e) => e === failure);
  for (let round = 0; round < 3; round++) {
    assert.equal(await abortable(Promise.resolve(round), controller.signal), round);
  }
  assert.equal(added(), 1);
  // An abort after every wait settled has nobody left to reject.
  controller.abort(new Error("late"));
});
