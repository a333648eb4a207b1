/**
 * The consumer core's link lifecycle under random orders of MySQL going away and answering, the
 * broker ending links or refusing new ones, slow answers to "how many workers consume the queue",
 * jobs finishing, time passing and a stop at any point (docs/consumption.md#rebuild,
 * docs/retries.md#give-back, docs/consumption.md#no-resume-during-shutdown). The model states the
 * rules plainly, checked after every step:
 *
 * - at most one link of the target consumes at a time, and `queue_connected` says whether one does;
 * - a link goes back only while MySQL has answered nothing for `--mysql-give-back-after`, and its
 *   jobs are counted as given back;
 * - after a give-back no link is built until MySQL answered after it;
 * - MySQL answering and the broker taking connections, a link consumes again within one check and
 *   a reconnect pause (nothing stays parked);
 * - stop resolves, leaves no link open and builds none afterwards, whatever it interrupts.
 *
 * The core's timers and `performance.now` are faked: a step is what the test says it is.
 */
import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { Consumer } from "../../src/consumer/consumer.ts";
import type { LinkTarget } from "../../src/consumer/contract.ts";
import { FakeLink } from "../helpers/fake_link.ts";
import { getLogger } from "../../src/log.ts";
import { RecordingObserver } from "../helpers/recording_observer.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const QUEUE = "q_lifecycle";
const AFTER_MS = 4_000;
const CHECK_MS = 2_000;
const RECONNECT_MS = 100;
/** One check, a reconnect pause with its jitter, and room for the broker's slowest answer. */
const RECOVERY_MS = CHECK_MS + 2 * RECONNECT_MS + 600;
const SEEDS = Array.from({ length: 40 }, (_, i) => i + 1);
const STEPS = 200;

async function runCase(seed: number): Promise<void> {
  const rnd = seededRandom(seed);
  const clock = FakeTimers.install({
    toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"],
  });
  // The reconnect pause's jitter draws from Math.random: from the seed too, so a case replays.
  const realRandom = Math.random;
  const jitter = seededRandom(seed + 7_919);
  Math.random = () => jitter(1_000_000) / 1_000_000;
  const trace: string[] = [];
  const where = () => `seed ${seed}, after:\n  ${trace.slice(-14).join("\n  ")}`;
  const violations: string[] = [];
  try {
    // MySQL: up (answers all the time) or down since `downSince`.
    let mysqlUp = true;
    let downSince = 0;
    const lastAnswer = () => (mysqlUp ? performance.now() : downSince);
    let brokerUp = true;
    let stopped: { settled: boolean } | undefined;
    const links: FakeLink[] = [];
    let expectedGivenBack = 0;
    /** The latest give-back not yet followed by a new link. */
    let parkedAt: number | undefined;

    const onGiveBack = (link: FakeLink) => {
      const now = performance.now();
      trace.push(`t=${now} give-back of link ${links.indexOf(link)} (${link.inFlight} jobs)`);
      if (mysqlUp || now - downSince < AFTER_MS) {
        violations.push(`given back at t=${now} while MySQL answered within give-back-after`);
      }
      expectedGivenBack += link.inFlight;
      parkedAt = now;
    };
    const target: LinkTarget = {
      queues: [QUEUE],
      server: "broker:1",
      // The handshake takes a while or not: a stop or a give-back check may come in between.
      open: async () => {
        const dialled = performance.now();
        if (stopped !== undefined) violations.push(`dialled at t=${dialled} after stop`);
        if (parkedAt !== undefined && lastAnswer() <= parkedAt) {
          violations.push(
            `dialled at t=${dialled}, given back at t=${parkedAt}, MySQL silent since`,
          );
        }
        parkedAt = undefined;
        await new Promise((resolve) => setTimeout(resolve, [0, 0, 30, 150, 400][rnd(5)]));
        const now = performance.now();
        if (!brokerUp) {
          trace.push(`t=${now} open refused`);
          throw new Error("connection refused");
        }
        const link = new FakeLink(QUEUE, rnd(4), {
          onGiveBack,
          afterStop: stopped !== undefined,
          violation: (what) => violations.push(`t=${performance.now()} ${what}`),
        });
        links.push(link);
        trace.push(`t=${now} link ${links.length - 1} opened (${link.inFlight} jobs)`);
        return Promise.resolve(link);
      },
      backlog: () => Promise.resolve(undefined),
      // Another worker or not, or the broker cannot tell; answered at once or after a while.
      consumers: () => {
        const answer = [2, 2, 1, undefined][rnd(4)];
        const ms = [0, 0, 300, 1_500][rnd(4)] as number;
        return new Promise((resolve) => setTimeout(() => resolve(answer), ms));
      },
    };
    const observer = new RecordingObserver();
    const consumer = new Consumer({
      name: "test",
      log: getLogger("test"),
      queues: [{ name: QUEUE, inOrder: false }],
      maxJobsPerQueue: 4,
      handler: () => Promise.resolve(),
      observer,
      targets: () => [target],
      reconnectIntervalMs: RECONNECT_MS,
      drainTimeoutMs: 1_000,
      stallTimeoutMs: 0,
      statsIntervalMs: 0,
      backlogIntervalMs: 0,
      waitAtStart: true,
      giveBack: {
        afterMs: AFTER_MS,
        holdingForMs: () => (mysqlUp ? 0 : performance.now() - downSince),
        answeredSince: (at) => lastAnswer() > at,
      },
    });

    const flush = async () => {
      for (let i = 0; i < 20; i++) await Promise.resolve();
    };
    const advance = async (ms: number) => {
      await clock.tickAsync(ms);
      await flush();
    };
    const check = () => {
      assert.deepEqual(violations, [], where());
      const consuming = links.filter((l) => l.consuming).length;
      assert.ok(consuming <= 1, `${consuming} links consume at once, ${where()}`);
      assert.equal(
        observer.connected(QUEUE) ?? false,
        consuming === 1,
        `queue_connected disagrees with the links, ${where()}`,
      );
      assert.equal(
        observer.givenBack.get(QUEUE) ?? 0,
        expectedGivenBack,
        `jobs counted as given back, ${where()}`,
      );
    };

    const starting = consumer.start();
    await advance(1_000);
    await starting;
    check();
    // A stop somewhere in the second half, or after the last step; whatever it interrupts.
    const stopAt = STEPS / 2 + rnd(STEPS / 2 + STEPS / 4);
    for (let step = 0; step < STEPS; step++) {
      const now = () => performance.now();
      const live = links.find((l) => l.consuming);
      if (step === stopAt) {
        // Often while a link is being rebuilt.
        if (live !== undefined && rnd(2) === 0) {
          trace.push(`t=${now()} broker ends link ${links.indexOf(live)}`);
          live.lose();
        }
        // At a moment of its own: also in the middle of a handshake or a check.
        setTimeout(() => {
          trace.push(`t=${now()} stop`);
          const state = { settled: false };
          void consumer.stop().then(
            () => (state.settled = true),
            (err: unknown) => violations.push(`stop rejected: ${err}`),
          );
          stopped = state;
        }, rnd(300));
      }
      switch (rnd(20)) {
        case 0:
        case 1:
          if (mysqlUp) {
            mysqlUp = false;
            downSince = now();
            trace.push(`t=${now()} MySQL away`);
          }
          break;
        case 2:
          if (!mysqlUp) {
            mysqlUp = true;
            trace.push(`t=${now()} MySQL answers`);
          }
          break;
        case 3:
          brokerUp = !brokerUp;
          trace.push(`t=${now()} broker ${brokerUp ? "takes" : "refuses"} connections`);
          break;
        case 4:
          if (live !== undefined) {
            trace.push(`t=${now()} broker ends link ${links.indexOf(live)}`);
            live.lose();
          }
          break;
        case 5:
        case 6:
          if (live !== undefined) {
            live.inFlight = rnd(4);
            trace.push(`t=${now()} link ${links.indexOf(live)} holds ${live.inFlight} jobs`);
          }
          break;
        case 7: {
          // Recovery: MySQL and the broker up for a while; something consumes again.
          mysqlUp = true;
          brokerUp = true;
          trace.push(`t=${now()} MySQL answers, broker takes connections, wait ${RECOVERY_MS} ms`);
          await advance(RECOVERY_MS);
          if (stopped === undefined) {
            assert.ok(
              links.some((l) => l.consuming),
              `no link consumes ${RECOVERY_MS} ms after MySQL and the broker came back, ${where()}`,
            );
          }
          break;
        }
        default: {
          const ms = [1, 50, RECONNECT_MS, 1_000, CHECK_MS, AFTER_MS][rnd(6)] as number;
          trace.push(`t=${now()} +${ms} ms`);
          await advance(ms);
        }
      }
      await flush();
      check();
    }
    if (stopped === undefined) {
      trace.push(`t=${performance.now()} stop`);
      const state = { settled: false };
      void consumer.stop().then(
        () => (state.settled = true),
        (err: unknown) => violations.push(`stop rejected: ${err}`),
      );
      stopped = state;
    }
    await advance(RECOVERY_MS);
    check();
    assert.ok(stopped.settled, `stop did not resolve, ${where()}`);
    assert.ok(links.every((l) => l.isClosed), `a link left open after stop, ${where()}`);
    assert.equal(observer.connected(QUEUE) ?? false, false, where());
  } finally {
    Math.random = realRandom;
    clock.uninstall();
  }
}

Deno.test("consumer lifecycle order: links, give-back, rebuild and stop keep their rules in every order", async () => {
  for (const seed of SEEDS) await runCase(seed);
});
