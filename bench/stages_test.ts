import assert from "node:assert/strict";
import { stageCost, stageLines, timePerEvent, without } from "./stages.ts";

Deno.test("stages: every stage runs in every repetition, in turn, warm-ups not counted", () => {
  const order: string[] = [];
  const samples = timePerEvent([() => order.push("a"), () => order.push("b")], 10, 2, 1);
  assert.deepEqual(order, ["a", "b", "a", "b", "a", "b"]);
  assert.equal(samples.length, 2);
  for (const s of samples) {
    assert.equal(s.length, 2);
    for (const v of s) assert.ok(v >= 0 && Number.isFinite(v));
  }
});

Deno.test("stages: decoding is decodeJob less JSON.parse, repetition by repetition, never negative", () => {
  assert.deepEqual(without([5, 4, 1], [2, 1, 3]), [3, 3, 0]);
});

Deno.test("stages: the table gives the median, the range and the share of the sum", () => {
  const costs = [stageCost("parse", [3, 1, 2]), stageCost("fit", [1, 1, 1])];
  assert.deepEqual(costs[0], { stage: "parse", median: 2, min: 1, max: 3 });
  assert.deepEqual(stageLines(costs), [
    "| parse | 2.00 [1.00–3.00] | 67 % |",
    "| fit | 1.00 [1.00–1.00] | 33 % |",
    "| sum | 3.00 | 100 % |",
  ]);
});
