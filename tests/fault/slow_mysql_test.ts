/**
 * A MySQL that is slow, not down: every round trip takes most of a second, yet every statement
 * commits. It takes writes, so it is available (docs/guarantees.md): statusengine_db_available
 * stays 1, no job is given back, and every event is written.
 */
import assert from "node:assert/strict";
import { startGearmand } from "../helpers/gearmand.ts";
import { startMysqlProxy } from "../helpers/tcp_proxy.ts";
import { createScratchDatabase } from "../helpers/mysql.ts";
import {
  createSchema,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "../helpers/worker.ts";
import { waitFor } from "../helpers/wait.ts";

const QUEUE = "statusngin_logentries";

Deno.test("slow MySQL: a worker idle between bursts keeps MySQL available while it commits slowly", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using gearmand = await startGearmand();
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: proxy.url,
    queues: [QUEUE],
  }));
  const fixture = await Deno.readTextFile(
    new URL("../../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  const completed = () =>
    metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: QUEUE,
      result: "completed",
    });
  const availability: number[] = [];
  const sampler = setInterval(async () => {
    availability.push(await metricValue(worker, "statusengine_db_available"));
  }, 200);
  // Each chunk 700 ms late both ways: a statement takes about 1.5 s, a fresh connection more.
  proxy.delay(700);
  try {
    for (let burst = 1; burst <= 2; burst++) {
      await publish(gearmand.addr, QUEUE, Array(20).fill(fixture));
      await waitFor(async () => (await completed()) === 20 * burst, {
        timeoutMs: 60_000,
        message: `burst ${burst} committed through the slow MySQL`,
      });
      // Idle longer than the idle probe waits for a statement (5 s), as between bursts.
      await new Promise((r) => setTimeout(r, 9_000));
    }
  } finally {
    clearInterval(sampler);
    proxy.delay(0);
  }
  assert.ok(availability.length > 50, `sampled ${availability.length} times`);
  assert.deepEqual(
    availability.filter((v) => v !== 1).length,
    0,
    `statusengine_db_available while MySQL committed every statement: ${availability.join("")}`,
  );
  const rows = await db.query<{ n: number }[]>("SELECT COUNT(*) AS n FROM statusengine_logentries");
  // Three log entries a job.
  assert.equal(Number(rows[0]?.n), 120);
});
