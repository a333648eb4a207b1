/**
 * Bursts of 2–7 jobs on every queue for 60 s against a real gearmand, the
 * traffic shape under which the lost wake-up was seen live: a connection with
 * several grabs out got NO_JOB for one and jobs for the others, and never
 * grabbed again. Ends with nothing waiting at gearmand. The idle poll and the
 * stall detector are switched off, so only the grab/sleep state machine can
 * make this pass.
 */
import assert from "node:assert/strict";
import { GearmanConsumer } from "../../src/gearman/consumer.ts";
import { adminStatus } from "../../src/gearman/admin.ts";
import { QUEUE_NAMES, QUEUES } from "../../src/events/queues.ts";
import { startGearmand } from "../helpers/gearmand.ts";
import { seededRandom } from "../helpers/scripted_job_server.ts";
import { RecordingObserver } from "../helpers/recording_observer.ts";
import { waitFor } from "../helpers/wait.ts";
import { publish } from "../helpers/worker.ts";

const DURATION_MS = 60_000;

Deno.test("fault: bursts of 2–7 jobs on every queue for 60 s leave nothing waiting at gearmand", async () => {
  await using gearmand = await startGearmand();
  const random = seededRandom(20261203);
  const observer = new RecordingObserver();
  const handled = new Map<string, number>();
  const consumer = new GearmanConsumer({
    servers: [gearmand.addr],
    queues: QUEUE_NAMES.map((name) => ({ name, inOrder: QUEUES[name].inOrder })),
    maxJobsPerQueue: 8,
    handler: async (job) => {
      // Jobs wait for their commit for a while, as with MySQL behind them.
      await new Promise((r) => setTimeout(r, Math.floor(random() * 8)));
      handled.set(job.queue, (handled.get(job.queue) ?? 0) + 1);
    },
    observer,
    reconnectIntervalMs: 100,
    drainTimeoutMs: 5_000,
    idlePollMs: 0,
    stallTimeoutMs: 0,
    statsIntervalMs: 0,
  });
  await consumer.start();
  const published = new Map<string, number>();
  try {
    const end = performance.now() + DURATION_MS;
    let burst = 0;
    while (performance.now() < end) {
      await Promise.all(QUEUE_NAMES.map(async (q) => {
        const n = 2 + Math.floor(random() * 6);
        await publish(gearmand.addr, q, Array.from({ length: n }, (_, i) => `${q}-${burst}-${i}`));
        published.set(q, (published.get(q) ?? 0) + n);
      }));
      burst++;
      // Quiet gaps long enough for connections to drain and go to sleep.
      await new Promise((r) => setTimeout(r, Math.floor(random() * 300)));
    }
    await waitFor(
      async () => (await adminStatus(gearmand.addr)).every((s) => s.total === 0),
      { timeoutMs: 30_000, message: "nothing waiting or running at gearmand" },
    );
    for (const q of QUEUE_NAMES) {
      assert.equal(handled.get(q), published.get(q), `${q}: every published job handled`);
    }
    assert.equal([...observer.reconnects.values()].reduce((a, b) => a + b, 0), 0);
  } finally {
    await consumer.stop();
  }
});
