/**
 * The grab/sleep state machine of {@link QueueWorker} against a scripted job
 * server that answers grabs with random interleavings of NO_JOB and
 * JOB_ASSIGN_UNIQ, after random delays, while jobs arrive in bursts.
 *
 * Why: with several grabs outstanding, a NO_JOB followed by jobs for the
 * remaining grabs once left a connection with no grab outstanding and no
 * PRE_SLEEP sent. gearmand sends NOOP only to a connection that sent
 * PRE_SLEEP, so the queue never grabbed again while its heartbeat kept the
 * link looking healthy (seen live with backlogs of 274 and 503 jobs).
 */
import assert from "node:assert/strict";
import { QueueWorker } from "../../src/gearman/worker.ts";
import { ByteBudget, QueueBudget } from "../../src/consumer/budget.ts";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import { NOOP_OBSERVER } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";
import { deadline } from "../../src/util/async.ts";
import { seededRandom, startScriptedJobServer } from "../helpers/scripted_job_server.ts";
import { waitFor } from "../helpers/wait.ts";
import { withLogs } from "../helpers/logs.ts";

/** Runs of the property; each is a different seed. */
const RUNS = 60;

async function runScript(seed: number): Promise<void> {
  const random = seededRandom(seed);
  const cap = 2 + Math.floor(random() * 7);
  await using server = startScriptedJobServer({
    fn: "q_prop",
    random,
    assignProbability: 0.3 + random() * 0.6,
    maxReplyDelayMs: Math.floor(random() * 3),
  });
  const budget = new QueueBudget("q_prop", cap, new ByteBudget(1 << 30));
  const engine = new DeliveryEngine({
    // Handlers finish at random times, as commits do.
    handler: () => new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 3))),
    observer: NOOP_OBSERVER,
    deadLetter: () => Promise.resolve(),
    name: "gearman",
    log: getLogger("gearman"),
  });
  const worker = await QueueWorker.open({
    queue: "q_prop",
    server: server.addr,
    budget,
    engine,
    // Neither safety net may hide a broken state machine.
    idlePollMs: 0,
    connect: { heartbeatIntervalMs: 0 },
  });
  const violations: string[] = [];
  // Between two events the worker must be asking for work: a grab
  // outstanding, or PRE_SLEEP sent (the server will NOOP), or every slot
  // taken (a finishing job grabs again).
  const check = setInterval(() => {
    const s = worker.state;
    if (!(s.grabsOutstanding > 0 || s.sleeping || s.waitingForBudget)) {
      violations.push(JSON.stringify(s));
    }
  }, 1);
  try {
    worker.start();
    let total = 0;
    const bursts = 3 + Math.floor(random() * 5);
    for (let b = 0; b < bursts; b++) {
      const n = 2 + Math.floor(random() * 6);
      server.add(Array.from({ length: n }, (_, i) => `s${seed}-b${b}-j${i}`));
      total += n;
      await waitFor(() => server.completed.length === total || violations.length > 0, {
        timeoutMs: 10_000,
        message: `seed ${seed}: burst ${b} of ${n} jobs completed (cap ${cap})`,
      });
      assert.deepEqual(violations.slice(0, 3), [], `seed ${seed}: the worker went quiet`);
    }
  } finally {
    clearInterval(check);
    using limit = deadline(2_000);
    await worker.drain(limit.signal);
  }
  assert.deepEqual(violations.slice(0, 3), [], `seed ${seed}: the worker went quiet`);
}

Deno.test("gearman worker: after any interleaving of NO_JOB and JOB_ASSIGN_UNIQ it has a grab outstanding or has sent PRE_SLEEP", async () => {
  for (let seed = 1; seed <= RUNS; seed++) await runScript(seed);
});

/** What a server that misroutes makes of a job's handle and function in its JOB_ASSIGN_UNIQ. */
const MISROUTED: [
  string,
  (job: { handle: string; fn: string }) => { handle: string; fn: string },
][] = [
  ["another function's job", ({ handle }) => ({ handle, fn: "statusngin_servicestatus" })],
  ["a handle whose job still runs", ({ fn }) => ({ handle: "H:1", fn })],
];

for (const [label, assignAs] of MISROUTED) {
  Deno.test(`gearman worker: ${label} is not run and no job is acknowledged for it; the link closes and the server is named in the log`, async () => {
    // Its WORK_COMPLETE would answer a job that was not committed (or a job of another queue,
    // dead-lettered as a bad shape of this one): gone from the server, never written.
    await withLogs(async (logs) => {
      await using server = startScriptedJobServer({
        fn: "q_misrouted",
        random: seededRandom(1),
        assignProbability: 1,
        maxReplyDelayMs: 0,
        assignAs,
      });
      const first = Promise.withResolvers<void>();
      const handled: string[] = [];
      const engine = new DeliveryEngine({
        // The first job is still being committed when the second arrives.
        handler: (
          job,
        ) => (handled.push(job.handle), handled.length === 1 ? first.promise : Promise.resolve()),
        observer: NOOP_OBSERVER,
        deadLetter: () => Promise.resolve(),
        name: "gearman",
        log: getLogger("gearman"),
      });
      const worker = await QueueWorker.open({
        queue: "q_misrouted",
        server: server.addr,
        budget: new QueueBudget("q_misrouted", 2, new ByteBudget(1 << 20)),
        engine,
        idlePollMs: 0,
        connect: { heartbeatIntervalMs: 0 },
      });
      try {
        worker.start();
        server.add(["a", "b"]);
        await waitFor(() => worker.state.dead || server.completed.length > 0, {
          timeoutMs: 10_000,
          message: "the link closed or acknowledged a job",
        });
        assert.deepEqual(server.completed, [], "no job acknowledged");
        assert.ok(handled.length <= 1, `only a job named right is run: ${handled}`);
        assert.equal(worker.state.dead, true);
        const line = logs.find((l) => l.level === "error" && l.properties.server === server.addr);
        assert.ok(line !== undefined, JSON.stringify(logs));
      } finally {
        first.resolve();
        await worker.abort();
      }
      await waitFor(() => server.waiting === 2, { message: "both jobs back on the server" });
    });
  });
}
