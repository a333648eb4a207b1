/**
 * Give-back in the consumer core (docs/retries.md#give-back), on links the test builds: when a
 * link's jobs go back to the broker, when it is rebuilt, what is counted, and what a stop ends. The core's clock
 * (the 2 s give-back check, the reconnect pause, `performance.now`) is faked, so every step happens
 * when the test says, however slowly the machine runs.
 */
import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { Consumer } from "../../src/consumer/consumer.ts";
import {
  type ConsumerObserver,
  type LinkTarget,
  NOOP_OBSERVER,
} from "../../src/consumer/contract.ts";
import { type ConnectionState, metricsObserver } from "../../src/consumer/metrics_observer.ts";
import { createMetrics } from "../../src/metrics/registry.ts";
import { getLogger } from "../../src/log.ts";
import { RecordingObserver } from "../helpers/recording_observer.ts";
import { FakeLink } from "../helpers/fake_link.ts";

const QUEUE = "q_give_back";
const AFTER_MS = 10_000;
const CHECK_MS = 2_000;
const RECONNECT_MS = 100;

/** MySQL as the give-back policy sees it, on the faked clock. */
class FakeMysql {
  /** `performance.now()` when writers began holding rows; undefined while none holds. */
  holdingSince: number | undefined;
  lastAnswerAt = performance.now();

  answer(): void {
    this.lastAnswerAt = performance.now();
    this.holdingSince = undefined;
  }
}

interface Harness extends AsyncDisposable {
  readonly clock: ReturnType<typeof FakeTimers.install>;
  readonly consumer: Consumer;
  readonly observer: RecordingObserver;
  /** What `/readyz` reads (docs/retries.md#give-back). */
  readonly state: ConnectionState;
  readonly mysql: FakeMysql;
  /** The broker refuses new connections. */
  refuse: boolean;
  /** Every link the target opened, in order. */
  readonly links: FakeLink[];
  /** The broker's answer to "how many workers consume the queue" (this one included). */
  consumers: (signal: AbortSignal) => Promise<number | undefined>;
  /** Let timers due within `ms` and the promise callbacks they start run. */
  advance(ms: number): Promise<void>;
}

/** One link target per server, all for the one queue (like Gearman's job servers, D9). */
function harness(servers = 1, handshake?: Promise<void>): Harness {
  const clock = FakeTimers.install({
    toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"],
  });
  const observer = new RecordingObserver();
  const state = metricsObserver(createMetrics());
  // Both hear every event.
  const both = Object.fromEntries(
    Object.keys(NOOP_OBSERVER).map((name) => [name, (...args: unknown[]) => {
      for (const o of [observer, state]) {
        (o as unknown as Record<string, (...args: unknown[]) => void>)[name]?.(...args);
      }
    }]),
  ) as unknown as ConsumerObserver;
  let refuse = false;
  const mysql = new FakeMysql();
  const links: FakeLink[] = [];
  let consumers = (_signal: AbortSignal): Promise<number | undefined> => Promise.resolve(2);
  const targets = Array.from({ length: servers }, (_, i): LinkTarget => ({
    queues: [QUEUE],
    server: `broker:${i + 1}`,
    // `handshake`, when given, holds every open until it resolves.
    open: async () => {
      await handshake;
      if (refuse) throw new Error("connection refused");
      const link = new FakeLink(QUEUE, 3);
      links.push(link);
      return link;
    },
    backlog: () => Promise.resolve(undefined),
    consumers: (_queue, signal) => consumers(signal),
  }));
  const consumer = new Consumer({
    name: "test",
    log: getLogger("test"),
    queues: [{ name: QUEUE, inOrder: false }],
    maxJobsPerQueue: 4,
    handler: () => Promise.resolve(),
    observer: both,
    targets: () => targets,
    reconnectIntervalMs: RECONNECT_MS,
    drainTimeoutMs: 1_000,
    stallTimeoutMs: 0,
    statsIntervalMs: 0,
    backlogIntervalMs: 0,
    // As the daemon starts it: job servers not there yet are waited for.
    waitAtStart: true,
    giveBack: {
      afterMs: AFTER_MS,
      holdingForMs: () =>
        mysql.holdingSince === undefined ? 0 : performance.now() - mysql.holdingSince,
      answeredSince: (at) => mysql.lastAnswerAt > at,
    },
  });
  return {
    clock,
    consumer,
    observer,
    state,
    mysql,
    links,
    get refuse() {
      return refuse;
    },
    set refuse(value) {
      refuse = value;
    },
    get consumers() {
      return consumers;
    },
    set consumers(answer) {
      consumers = answer;
    },
    async advance(ms: number) {
      await clock.tickAsync(ms);
      // Promise callbacks started by the last timer.
      for (let i = 0; i < 20; i++) await Promise.resolve();
    },
    async [Symbol.asyncDispose]() {
      const stopped = consumer.stop();
      await clock.runToLastAsync();
      await stopped;
      clock.uninstall();
    },
  };
}

/** MySQL stops answering now; returns once the writers have held rows for longer than give-back-after. */
async function mysqlGone(h: Harness): Promise<void> {
  h.mysql.holdingSince = performance.now();
  // The checks before give-back-after elapsed find nothing to give back.
  await h.advance(AFTER_MS - CHECK_MS / 2);
}

Deno.test("give-back: MySQL answering while the broker is asked for the queue's workers cancels the give-back", async () => {
  await using h = harness();
  await h.consumer.start();
  const link = h.links[0] as FakeLink;
  assert.equal(link.started, true);
  await mysqlGone(h);
  assert.deepEqual(link.givenBack, [], "nothing given back before give-back-after");
  // The broker's answer is held while MySQL comes back.
  const asked = Promise.withResolvers<number | undefined>();
  let questions = 0;
  h.consumers = () => {
    questions++;
    return asked.promise;
  };
  await h.advance(CHECK_MS);
  assert.equal(questions, 1, "the check asked the broker for the queue's workers");
  h.mysql.answer();
  asked.resolve(2);
  await h.advance(0);
  assert.deepEqual(
    link.givenBack,
    [],
    "jobs given back although MySQL answered before they went: they would have been acknowledged",
  );
  assert.equal(h.observer.givenBack.size, 0, "no give-back counted");
  assert.equal(h.observer.connected(QUEUE), true, "the link still consumes");
});

Deno.test("give-back: a link holding jobs goes back while MySQL stays away and is rebuilt only once MySQL answers", async () => {
  await using h = harness();
  await h.consumer.start();
  const first = h.links[0] as FakeLink;
  await mysqlGone(h);
  await h.advance(CHECK_MS);
  assert.deepEqual(first.givenBack, ["mysql_unavailable"]);
  assert.equal(h.observer.givenBack.get(QUEUE), 3, "the link's three jobs counted as given back");
  assert.equal(h.observer.connected(QUEUE), false, "the queue does not consume");
  // Checks and reconnect pauses pass: no link while MySQL is away.
  await h.advance(10 * CHECK_MS);
  assert.equal(h.links.length, 1, "a link was built while MySQL is away");
  h.mysql.answer();
  await h.advance(CHECK_MS);
  await h.advance(2 * RECONNECT_MS);
  assert.equal(h.links.length, 2, "no link rebuilt after MySQL answered");
  assert.equal((h.links[1] as FakeLink).started, true);
  assert.equal(h.observer.connected(QUEUE), true);
  assert.deepEqual(h.observer.connectedHistory.get(QUEUE), [true, false, true]);
});

Deno.test("give-back: the link rebuilt after MySQL answers is not counted as a reconnect; a link the broker ended is", async () => {
  await using h = harness();
  await h.consumer.start();
  await mysqlGone(h);
  await h.advance(CHECK_MS);
  assert.deepEqual((h.links[0] as FakeLink).givenBack, ["mysql_unavailable"]);
  h.mysql.answer();
  await h.advance(CHECK_MS);
  await h.advance(2 * RECONNECT_MS);
  assert.equal(h.links.length, 2, "no link rebuilt after MySQL answered");
  // statusengine_queue_reconnects_total: connections re-established after a loss. Nothing was
  // lost: the worker gave the jobs back itself (jobs_given_back_total counts that).
  assert.equal(h.observer.reconnects.get(QUEUE) ?? 0, 0, "a give-back counted as a reconnect");
  (h.links[1] as FakeLink).lose();
  await h.advance(2 * RECONNECT_MS);
  assert.equal(h.links.length, 3, "no link rebuilt after the broker ended one");
  assert.equal(h.observer.reconnects.get(QUEUE), 1, "a lost link's rebuild is a reconnect");
});

Deno.test("give-back: once MySQL answers, /readyz no longer blames it while the link cannot be rebuilt", async () => {
  await using h = harness();
  await h.consumer.start();
  await mysqlGone(h);
  await h.advance(CHECK_MS);
  assert.deepEqual((h.links[0] as FakeLink).givenBack, ["mysql_unavailable"]);
  assert.ok(h.state.givenBack.has(QUEUE), "/readyz: jobs given back until MySQL answers");
  assert.ok(!h.state.connected.has(QUEUE));
  // MySQL answers and the worker takes jobs again, but the broker refuses the new link.
  h.refuse = true;
  h.mysql.answer();
  await h.advance(CHECK_MS);
  await h.advance(10 * RECONNECT_MS);
  assert.equal(h.links.length, 1, "no link could be built");
  assert.ok(!h.state.connected.has(QUEUE), "the queue is not connected");
  assert.ok(
    !h.state.givenBack.has(QUEUE),
    "/readyz says the jobs are given back until MySQL answers, yet MySQL answers: the queue is " +
      "not connected",
  );
  h.refuse = false;
  await h.advance(2 * RECONNECT_MS);
  assert.equal(h.links.length, 2);
  assert.ok(h.state.connected.has(QUEUE));
});

Deno.test("give-back: a check under way when stop begins asks the broker nothing more", async () => {
  await using h = harness(2);
  await h.consumer.start();
  assert.equal(h.links.length, 2);
  await mysqlGone(h);
  const answers: PromiseWithResolvers<number | undefined>[] = [];
  const signals: AbortSignal[] = [];
  h.consumers = (signal) => {
    const answer = Promise.withResolvers<number | undefined>();
    answers.push(answer);
    signals.push(signal);
    return answer.promise;
  };
  await h.advance(CHECK_MS);
  assert.equal(answers.length, 1, "the check asks about the first link");
  const stopped = h.consumer.stop();
  await h.advance(0);
  await stopped;
  assert.equal(signals[0]?.aborted, true, "the question under way is ended by stop");
  (answers[0] as PromiseWithResolvers<number | undefined>).resolve(2);
  await h.advance(0);
  assert.equal(answers.length, 1, "the check went on asking the broker after stop returned");
  assert.deepEqual(h.links.map((l) => l.givenBack), [[], []]);
});

Deno.test("consumer: a stop during start-up leaves no check, window or summary timer behind, and start says so", async () => {
  const handshake = Promise.withResolvers<void>();
  await using h = harness(1, handshake.promise);
  let questions = 0;
  h.consumers = () => {
    questions++;
    return Promise.resolve(2);
  };
  const starting = h.consumer.start();
  starting.catch(() => {});
  await h.advance(0);
  const stopped = h.consumer.stop();
  await h.advance(0);
  await stopped;
  handshake.resolve();
  await h.advance(0);
  const outcome = await starting.then(() => "started", (err: unknown) => err);
  assert.equal(h.links.length, 1, "the handshake under way completed");
  assert.equal((h.links[0] as FakeLink).started, false, "a link opened after stop consumes");
  // Give-back checks after stop would ask the broker every 2 s.
  await mysqlGone(h);
  await h.advance(5 * CHECK_MS);
  assert.equal(questions, 0, "the give-back check runs after stop");
  assert.equal(h.clock.countTimers(), 0, "timers left running after stop");
  // The caller learns that nothing consumes (RabbitMqConsumer.start documents it).
  assert.match(String(outcome), /stopped during start-up/);
});
