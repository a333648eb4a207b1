/**
 * The adaptive in-flight window of a whole worker against the real MariaDB:
 * it grows while a backlog cannot fill the statements, halves while MySQL is
 * slow (a table held with LOCK TABLES), and nothing is lost on the way. The
 * assertions read the window metric, never the clock.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { lockTables } from "./helpers/mysql_lock.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { fixture } from "./helpers/fixture_rows.ts";
import { INITIAL_WINDOW } from "../src/consumer/window.ts";

const Q = "statusngin_hostchecks";
const TABLE = "statusengine_hostchecks";

/** Bulk jobs of `perJob` host checks each, every event its own row. */
function jobs(prefix: string, count: number, perJob: number): string[] {
  const template = JSON.parse(fixture(Q)).messages[0];
  return Array.from({ length: count }, (_, j) => {
    const messages = Array.from({ length: perJob }, (_, k) => {
      const m = structuredClone(template);
      m.hostcheck.host_name = `${prefix}-${j}-${k}`;
      m.hostcheck.output = "OK";
      m.hostcheck.long_output = "";
      m.hostcheck.perf_data = "";
      return m;
    });
    return JSON.stringify({ format: "none", messages });
  });
}

Deno.test("window: a backlog whose jobs cannot fill the statements widens the queue's window; a slow MySQL (LOCK TABLES) halves it to one job; every row is written after", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // 8 jobs of 10 rows cannot give two writers two batches of 50 each: the window must grow.
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, batchSize: 50 }),
  );
  const window = () => metricValue(worker, "statusengine_queue_window", { queue_name: Q });
  assert.equal(await window(), INITIAL_WINDOW);
  assert.equal(
    await metricValue(worker, "statusengine_queue_window", { queue_name: "statusngin_downtimes" }),
    1,
  );

  await publish(gearmand.addr, Q, jobs("grow", 400, 10));
  await waitFor(async () => (await window()) > INITIAL_WINDOW, {
    message: `window above ${INITIAL_WINDOW} under the backlog`,
  });
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
    timeoutMs: 30_000,
    message: "first backlog drained",
  });
  const grown = await window();

  await using lock = await lockTables(db, [TABLE]);
  await publish(gearmand.addr, Q, jobs("slow", 400, 10));
  // The statements wait for the lock: once one has run far longer than usual, MySQL counts as
  // slow and the window halves on every tick, down to one job.
  await waitFor(() => worker.pipeline.pressure(Q).slow, {
    timeoutMs: 20_000,
    message: "a statement held by the lock is seen as slow MySQL",
  });
  await waitFor(async () => (await window()) === 1, {
    timeoutMs: 20_000,
    message: `window down from ${grown} to 1 while the table is locked`,
  });
  assert.equal(
    await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: Q,
      result: "abandoned",
    }),
    0,
  );
  await lock.unlock();

  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
    timeoutMs: 30_000,
    message: "second backlog drained after the unlock",
  });
  const [count] = await db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${TABLE}`);
  assert.equal(Number(count?.n), 8000, "every row of both backlogs");
  assert.equal(
    await metricValue(worker, "statusengine_queue_window", { queue_name: "statusngin_downtimes" }),
    1,
    "the in-order queue never had a window",
  );
});
