import assert from "node:assert/strict";
import { ConsumerStats } from "./consumer.ts";
import type { ConsumerObserver } from "./contract.ts";
import type { Logger, LogProperties } from "../log.ts";

const QUEUES = Array.from({ length: 12 }, (_, i) => `statusngin_q${i}`);

function recordingLogger(): Logger & { readonly lines: LogProperties[] } {
  const lines: LogProperties[] = [];
  const keep = (_message: string, properties?: LogProperties) => void lines.push(properties ?? {});
  return { lines, debug: keep, info: keep, warn: keep, error: keep };
}

const IGNORE: ConsumerObserver = {
  jobReceived: () => {},
  inFlight: () => {},
  jobDone: () => {},
  jobRetried: () => {},
  queueConnected: () => {},
  queueReconnected: () => {},
  queueStalled: () => {},
  queueWindow: () => {},
  queueBacklog: () => {},
  jobsGivenBack: () => {},
  givenBackEnded: () => {},
};

// An idle worker used to write twelve all-zero lines every 30 s: 35,000 lines a day.
Deno.test("consumer stats: an idle interval logs nothing", () => {
  const stats = new ConsumerStats(QUEUES);
  const log = recordingLogger();
  for (let i = 0; i < 3; i++) stats.log(log, "consumer stats", () => ({}));
  assert.deepEqual(log.lines, []);
});

Deno.test("consumer stats: only the queues that did something get a line, once", () => {
  const stats = new ConsumerStats(QUEUES);
  const observer = stats.wrap(IGNORE);
  observer.jobDone("statusngin_q3", "completed", 0.01);
  observer.jobDone("statusngin_q3", "abandoned", 0.01);
  stats.reconnected("statusngin_q7");
  const log = recordingLogger();
  stats.log(log, "consumer stats", () => ({}));
  assert.deepEqual(log.lines.map((l) => [l.queue, l.processed, l.abandoned, l.reconnects]), [
    ["statusngin_q3", 1, 1, 0],
    ["statusngin_q7", 0, 0, 1],
  ]);
  stats.log(log, "consumer stats", () => ({}));
  assert.equal(log.lines.length, 2, "the counters start again after each line");
});

Deno.test("consumer stats: jobs still in flight keep their queue's line", () => {
  const stats = new ConsumerStats(QUEUES);
  const observer = stats.wrap(IGNORE);
  observer.inFlight("statusngin_q1", 1);
  observer.inFlight("statusngin_q1", 1);
  const log = recordingLogger();
  stats.log(log, "consumer stats", () => ({}));
  assert.deepEqual(log.lines.map((l) => [l.queue, l.in_flight]), [["statusngin_q1", 2]]);
});

Deno.test("consumer stats: the shutdown summary of an idle worker is one line for all queues", () => {
  const stats = new ConsumerStats(QUEUES);
  const log = recordingLogger();
  stats.log(log, "consumer stopped", () => ({}), true);
  assert.deepEqual(log.lines, [{ queues: 12, processed: 0 }]);
});
