import assert from "node:assert/strict";
import {
  BacklogMonitor,
  type BacklogSource,
  perQueueSources,
  StallDetector,
} from "../../src/consumer/backlog_monitor.ts";
import { ByteBudget, QueueBudget } from "../../src/consumer/budget.ts";
import { FakeLink } from "../helpers/fake_link.ts";
import type { LinkTarget } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";
import { waitFor } from "../helpers/wait.ts";

/** A target whose broker answers `answer` (a number, unknown, an error, or never). */
function target(
  server: string,
  queues: readonly string[],
  answer: () => Promise<number | undefined>,
): LinkTarget {
  return {
    queues,
    server,
    open: () => Promise.reject(new Error("not opened in this test")),
    backlog: () => answer(),
    consumers: () => Promise.resolve(undefined),
  };
}

function monitor(targets: readonly LinkTarget[], intervalMs = 60_000) {
  return monitorOf(perQueueSources(targets), intervalMs);
}

function monitorOf(sources: readonly BacklogSource[], intervalMs = 60_000) {
  const reports: [string, number | undefined][] = [];
  const m = new BacklogMonitor({
    sources,
    intervalMs,
    report: (queue, jobs) => reports.push([queue, jobs]),
    name: "test",
    log: getLogger("test"),
  });
  return { m, reports };
}

Deno.test("backlog monitor: a queue's backlog is the sum over its job servers, reported once per round", async () => {
  const { m, reports } = monitor([
    target("a", ["q1"], () => Promise.resolve(3)),
    target("b", ["q1"], () => Promise.resolve(4)),
    target("a", ["q2"], () => Promise.resolve(0)),
  ]);
  await m.check();
  assert.deepEqual(reports.sort(), [["q1", 7], ["q2", 0]]);
});

Deno.test("backlog monitor: one server that cannot tell makes the queue unknown, never a partial sum or 0", async () => {
  const { m, reports } = monitor([
    target("a", ["q1"], () => Promise.resolve(3)),
    target("b", ["q1"], () => Promise.reject(new Error("connection refused"))),
    target("a", ["q2"], () => Promise.resolve(undefined)),
    target("a", ["q3"], () => Promise.resolve(5)),
  ]);
  await m.check();
  assert.deepEqual(reports.sort(), [["q1", undefined], ["q2", undefined], ["q3", 5]]);
});

Deno.test("backlog monitor: a broker that never answers cannot hold a round beyond its interval", async () => {
  const { m, reports } = monitor([
    target("hung", ["q1"], () => new Promise(() => {})),
    target("ok", ["q2"], () => Promise.resolve(1)),
  ], 50);
  await m.check();
  assert.deepEqual(reports.sort(), [["q1", undefined], ["q2", 1]]);
});

Deno.test("backlog monitor: it asks again every interval, and stopping reports every queue unknown", async () => {
  let n = 0;
  const { m, reports } = monitor([target("a", ["q1"], () => Promise.resolve(++n))], 10);
  m.start();
  await waitFor(() => reports.length >= 3, { message: "three rounds" });
  await m.stop();
  assert.deepEqual(reports.at(-1), ["q1", undefined]);
  const after = reports.length;
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(reports.length, after, "no round after stop");
  assert.deepEqual(reports.slice(0, 3), [["q1", 1], ["q1", 2], ["q1", 3]]);
});

// A second start() ran a second loop of rounds beside the first, and stop() cleared only one timer.
Deno.test("backlog monitor and stall detector: starting twice runs one loop, which stop ends", async () => {
  let asked = 0;
  const { m, reports } = monitor([target("a", ["q1"], () => Promise.resolve(++asked))]);
  m.start();
  m.start();
  await waitFor(() => reports.length >= 1, { message: "the first round" });
  await new Promise((r) => setTimeout(r, 50));
  m.start();
  await m.stop();
  assert.equal(asked, 1, "one round at start, not one per start()");
  const { d } = detector(() => 0);
  d.start();
  d.start();
  d.stop(); // the sanitizer fails the test on an interval left running
});

/** A source answering several queues with one question (gearmand's admin `status`). */
function source(
  server: string,
  queues: readonly string[],
  answer: () => Promise<ReadonlyMap<string, number | undefined>>,
): BacklogSource & { readonly asked: () => number } {
  let asked = 0;
  return {
    server,
    queues,
    read: () => {
      asked++;
      return answer();
    },
    asked: () => asked,
  };
}

Deno.test("backlog monitor: a source answering several queues is asked once per round; its queues sum over sources", async () => {
  const a = source("a", ["q1", "q2"], () => Promise.resolve(new Map([["q1", 3], ["q2", 0]])));
  const b = source("b", ["q1", "q2"], () => Promise.resolve(new Map([["q1", 4], ["q2", 2]])));
  const { m, reports } = monitorOf([a, b]);
  await m.check();
  assert.deepEqual(reports.sort(), [["q1", 7], ["q2", 2]]);
  assert.deepEqual([a.asked(), b.asked()], [1, 1]);
});

Deno.test("backlog monitor: a server that cannot tell makes every queue it serves unknown; a queue its answer leaves out is unknown", async () => {
  const { m, reports } = monitorOf([
    source("a", ["q1", "q2", "q3"], () => Promise.resolve(new Map([["q1", 3], ["q2", 1]]))),
    source("b", ["q1", "q2"], () => Promise.reject(new Error("connection refused"))),
    source("c", ["q4"], () => new Promise(() => {})),
  ], 50);
  await m.check();
  assert.deepEqual(reports.sort(), [
    ["q1", undefined],
    ["q2", undefined],
    ["q3", undefined],
    ["q4", undefined],
  ]);
});

/** A stall detector over one fake link whose broker reports `waiting()` jobs. */
function detector(waiting: () => number) {
  const link = new FakeLink("q", 0);
  const budget = new QueueBudget("q", 4, new ByteBudget(1024 * 1024));
  const transitions: boolean[] = [];
  const d = new StallDetector({
    links: [{
      target: target("a", ["q"], () => Promise.resolve(waiting())),
      queue: "q",
      current: () => link,
      budget,
    }],
    timeoutMs: 20,
    name: "test",
    log: getLogger("test"),
    onQueueStalled: (_, stalled) => transitions.push(stalled),
  });
  return { d, link, transitions };
}

// With several workers on a queue, the jobs a stalled link did not take are taken by another:
// the queue stayed "stalled" (/readyz 503, StatusengineQueueStalled) while nothing waited, until
// this link happened to receive a job, hours later on a quiet queue.
Deno.test("stall detector: a stalled queue is no longer stalled once no job waits, though its link took none", async () => {
  let waiting = 3;
  const { d, link, transitions } = detector(() => waiting);
  try {
    await waitFor(() => (d.check(), d.stalled("q")), { message: "stalled with 3 jobs waiting" });
    // Another worker took them; this link received nothing.
    waiting = 0;
    await waitFor(() => (d.check(), !d.stalled("q")), {
      timeoutMs: 2_000,
      message: "not stalled once the backlog is 0",
    });
    assert.equal(link.lastReceivedAt, 0, "the link took no job");
    assert.deepEqual(transitions, [true, false]);
  } finally {
    d.stop();
  }
});

Deno.test("stall detector: a stalled queue stays stalled while jobs still wait and its link takes none", async () => {
  let asked = 0;
  const { d, transitions } = detector(() => (asked++, 3));
  try {
    await waitFor(() => (d.check(), d.stalled("q")), { message: "stalled with 3 jobs waiting" });
    // While stalled, the broker is asked again: three more answers of 3.
    const before = asked;
    await waitFor(() => (d.check(), asked >= before + 3), { message: "three more answers" });
    assert.equal(d.stalled("q"), true);
    assert.deepEqual(transitions, [true]);
  } finally {
    d.stop();
  }
});

// RabbitMQ's nudge rebuilds the session, and the new link cleared the stall at the next check
// although it took nothing: statusengine_queue_stalled read 1 for one check in every ~70 s, so the
// shipped alert (== 1 for 1 min) never fired on a broker that never delivered again.
Deno.test("stall detector: a link rebuilt by the nudge keeps the queue stalled until it takes a job", async () => {
  let asked = 0;
  let link = new FakeLink("q", 0);
  const budget = new QueueBudget("q", 4, new ByteBudget(1024 * 1024));
  const transitions: boolean[] = [];
  const d = new StallDetector({
    links: [{
      target: target("a", ["q"], () => (asked++, Promise.resolve(3))),
      queue: "q",
      current: () => link,
      budget,
    }],
    timeoutMs: 20,
    name: "test",
    log: getLogger("test"),
    onQueueStalled: (_, stalled) => transitions.push(stalled),
  });
  try {
    await waitFor(() => (d.check(), d.stalled("q")), { message: "stalled with 3 jobs waiting" });
    // The rebuilt session: started now, and the broker delivers nothing to it either.
    link = new FakeLink("q", 0);
    link.lastReceivedAt = performance.now();
    const before = asked;
    await waitFor(() => (d.check(), asked >= before + 3), { message: "three more answers" });
    assert.equal(d.stalled("q"), true, "still stalled: the new link took no job");
    assert.deepEqual(transitions, [true]);
    // Its first job ends the stall.
    link.lastReceivedAt = performance.now() + 1;
    d.check();
    assert.equal(d.stalled("q"), false);
    assert.deepEqual(transitions, [true, false]);
  } finally {
    d.stop();
  }
});

// One RabbitMQ session serves every queue. Its one receipt time made a queue that took nothing
// look busy as long as any other queue of the session took jobs: with the status queues always
// busy, a stuck lane of another queue was never reported.
Deno.test("stall detector: a queue of a link serving several queues is stalled although the link's other queues take jobs", async () => {
  const received = new Map([["busy", performance.now()], ["stuck", performance.now()]]);
  const link = Object.assign(new FakeLink("busy", 0), {
    receivedAt: (queue: string) => received.get(queue) ?? 0,
  });
  const bytes = new ByteBudget(1024 * 1024);
  const target2 = target("a", ["busy", "stuck"], () => Promise.resolve(3));
  const d = new StallDetector({
    links: ["busy", "stuck"].map((queue) => ({
      target: target2,
      queue,
      current: () => link,
      budget: new QueueBudget(queue, 4, bytes),
    })),
    timeoutMs: 20,
    name: "test",
    log: getLogger("test"),
    onQueueStalled: () => {},
  });
  try {
    await waitFor(() => {
      received.set("busy", performance.now());
      d.check();
      return d.stalled("stuck");
    }, { timeoutMs: 2_000, message: "the queue that takes nothing is stalled" });
    assert.equal(d.stalled("busy"), false);
  } finally {
    d.stop();
  }
});
