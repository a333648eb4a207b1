/**
 * The delivery engine under random orders of handler answers (success, a transient failure, a
 * programming error), dead-letter writes that succeed or fail, acknowledgements that are taken or
 * refused, at once or later, the link ending retries and the drain deadline aborting handlers, on
 * a fake clock. The model states the rule of docs/consumption.md (the delivery engine) plainly:
 *
 * - every delivery ends exactly once, `completed` or `abandoned`, never with a rejection, and is
 *   reported once as it ended; its in-flight count returns to zero;
 * - a job is acknowledged at most once, and only after an attempt succeeded or, after three
 *   programming errors, its dead-letter record was written; `completed` means the acknowledgement
 *   was taken;
 * - no attempt starts once the link ended retries or the handlers were aborted.
 */
import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import type { ConsumerDeadLetter, Job, JobResult } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const SEEDS = Array.from({ length: 30 }, (_, i) => i + 1);
const JOBS = 12;

interface JobModel {
  readonly job: Job;
  readonly attempts: PromiseWithResolvers<void>[];
  /** Outcomes of the attempts, in order: "ok", "transient", "bug". */
  readonly outcomes: string[];
  acks: number;
  ackTaken: boolean | undefined;
  deadLettered: boolean;
  received: number;
  inFlight: number;
  done: JobResult[];
  result: JobResult | "rejected" | undefined;
  /** Attempts started after retries ended or handlers were aborted. */
  lateAttempts: number;
}

async function runCase(seed: number): Promise<void> {
  const rnd = seededRandom(seed);
  const clock = FakeTimers.install({ toFake: ["setTimeout", "clearTimeout", "performance"] });
  const realRandom = Math.random;
  const jitter = seededRandom(seed + 104_729);
  Math.random = () => jitter(1_000_000) / 1_000_000;
  const trace: string[] = [];
  const where = (i: number) => `seed ${seed}, job ${i}:\n  ${trace.slice(-12).join("\n  ")}`;
  try {
    const abort = new AbortController();
    const stopRetries = new AbortController();
    const models = new Map<string, JobModel>();
    const pendingSinks: { record: ConsumerDeadLetter; answer: PromiseWithResolvers<void> }[] = [];
    const model = (queue: string) => models.get(queue) as JobModel;
    const engine = new DeliveryEngine({
      handler: (job) => {
        const m = model(job.queue);
        if (abort.signal.aborted || stopRetries.signal.aborted) m.lateAttempts++;
        const attempt = Promise.withResolvers<void>();
        m.attempts.push(attempt);
        return attempt.promise;
      },
      observer: {
        jobReceived: (q) => model(q).received++,
        inFlight: (q, delta) => (model(q).inFlight += delta),
        jobDone: (q, result) => model(q).done.push(result),
        jobRetried: () => {},
      },
      deadLetter: (record) => {
        const answer = Promise.withResolvers<void>();
        pendingSinks.push({ record, answer });
        return answer.promise;
      },
      name: "test",
      log: getLogger("test"),
      retry: { initialMs: 10, maxMs: 80, jitter: 0.2 },
    });
    const deliveries: Promise<void>[] = [];
    for (let i = 0; i < JOBS; i++) {
      // One queue name per job: the observer's reports land on the job's own model.
      const job: Job = {
        queue: `q${i}`,
        server: "s",
        handle: `H:${i}`,
        unique: "",
        payload: new Uint8Array([i]),
        receivedAt: 0,
      };
      const m: JobModel = {
        job,
        attempts: [],
        outcomes: [],
        acks: 0,
        ackTaken: undefined,
        deadLettered: false,
        received: 0,
        inFlight: 0,
        done: [],
        result: undefined,
        lateAttempts: 0,
      };
      models.set(job.queue, m);
      const answer = [true, false, "later-true", "later-false"][rnd(4)];
      deliveries.push(
        engine.deliver({ job, ownsPayload: false }, {
          complete: () => {
            m.acks++;
            m.ackTaken = answer === true || answer === "later-true";
            if (typeof answer === "boolean") return answer;
            return new Promise((resolve) => setTimeout(() => resolve(m.ackTaken === true), 5));
          },
        }, { abort: abort.signal, stopRetries: stopRetries.signal }).then(
          (result) => void (m.result = result),
          () => void (m.result = "rejected"),
        ),
      );
    }
    const flush = async () => {
      for (let i = 0; i < 10; i++) await Promise.resolve();
    };
    await flush();
    for (let step = 0; step < 300; step++) {
      const choice = rnd(20);
      if (choice < 10) {
        // Settle an attempt still open.
        const open = [...models.values()].flatMap((m) =>
          m.attempts.length > m.outcomes.length ? [m] : []
        );
        const m = open[rnd(open.length)];
        if (m !== undefined) {
          const outcome = ["ok", "transient", "transient", "transient", "bug", "bug"][
            rnd(6)
          ] as string;
          const attempt = m.attempts[m.outcomes.length] as PromiseWithResolvers<void>;
          m.outcomes.push(outcome);
          trace.push(`${m.job.queue} attempt ${m.outcomes.length}: ${outcome}`);
          if (outcome === "ok") attempt.resolve();
          else if (outcome === "transient") attempt.reject(new Error("MySQL away"));
          else attempt.reject(new TypeError("bug"));
        }
      } else if (choice < 13) {
        const sink = pendingSinks.shift();
        if (sink !== undefined) {
          const m = model(sink.record.job.queue);
          const written = rnd(2) === 0;
          trace.push(`${m.job.queue} dead-letter ${written ? "written" : "failed"}`);
          if (written) {
            m.deadLettered = true;
            sink.answer.resolve();
          } else {
            sink.answer.reject(new Error("disk full"));
          }
        }
      } else if (choice === 13 && step > 80 && rnd(4) === 0) {
        trace.push("link ends retries");
        stopRetries.abort();
      } else if (choice === 14 && step > 120 && rnd(4) === 0) {
        trace.push("drain deadline: handlers aborted");
        abort.abort(new DOMException("drain deadline reached", "TimeoutError"));
      } else {
        const ms = [1, 10, 50, 100][rnd(4)] as number;
        await clock.tickAsync(ms);
      }
      await flush();
    }
    // The end of the link: retries end, then the drain deadline; every delivery must end.
    trace.push("end: retries end, handlers aborted");
    stopRetries.abort();
    abort.abort(new DOMException("drain deadline reached", "TimeoutError"));
    for (const sink of pendingSinks.splice(0)) sink.answer.reject(new Error("closed"));
    await clock.runAllAsync();
    await Promise.all(deliveries);
    for (const [i, m] of [...models.values()].entries()) {
      assert.ok(m.result === "completed" || m.result === "abandoned", `${m.result}, ${where(i)}`);
      assert.deepEqual(m.done, [m.result], `reported as it ended, once, ${where(i)}`);
      assert.equal(m.received, 1, where(i));
      assert.equal(m.inFlight, 0, `in flight after the end, ${where(i)}`);
      assert.ok(m.acks <= 1, `acknowledged ${m.acks} times, ${where(i)}`);
      assert.equal(m.lateAttempts, 0, `attempt after retries ended, ${where(i)}`);
      const succeeded = m.outcomes.includes("ok");
      const bugs = m.outcomes.filter((o) => o === "bug").length;
      if (m.acks === 1) {
        assert.ok(
          succeeded || (m.deadLettered && bugs >= 3),
          `acknowledged without success or dead-letter after three bugs, ${where(i)}`,
        );
      }
      assert.equal(
        m.result === "completed",
        m.acks === 1 && m.ackTaken === true,
        `completed iff the acknowledgement was taken, ${where(i)}`,
      );
    }
  } finally {
    Math.random = realRandom;
    clock.uninstall();
  }
}

Deno.test("delivery order: every job ends once, acknowledged only after success or its dead-letter, in every order", async () => {
  for (const seed of SEEDS) await runCase(seed);
});
