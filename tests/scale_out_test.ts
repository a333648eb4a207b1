/**
 * Several job servers and several workers: what an operator scaling out must be told, and the
 * guarantees that must hold when they do.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import {
  createSchema,
  jobsAtGearmand,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import {
  downtimeJobsCompleted,
  holdsInOrderLease,
  seriesValue,
  startWorkerProcess,
  type WorkerProcess,
} from "./helpers/worker_process.ts";
import { waitFor } from "./helpers/wait.ts";
import { type LogLine, withLogs } from "./helpers/logs.ts";

// The broker module publishes every message to every job server it names; a worker given
// both servers of such a broker wrote every event twice, silently.
Deno.test("scale-out: two job servers log one start-up warning that every event may be processed twice", async () => {
  await using a = await startGearmand();
  await using b = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await withLogs(async (logs) => {
    {
      await using _one = await startTestWorker(
        testConfig({ gearmanServers: [a.addr], mysqlUrl: db.url }),
      );
    }
    const twice = (l: LogLine) => l.message.startsWith("worker: several Gearman job servers");
    assert.equal(logs.filter(twice).length, 0, "one server: no warning");
    {
      await using _two = await startTestWorker(
        testConfig({ gearmanServers: [a.addr, b.addr], mysqlUrl: db.url }),
      );
    }
    const lines = logs.filter(twice);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.level, "warn");
    assert.equal(lines[0]?.properties["servers"], `${a.addr},${b.addr}`);
    assert.match(lines[0]?.message ?? "", /processed once per server/);
  });
});

const DOWNTIMES = "statusngin_downtimes";
const E = 1_760_000_000;
const [ADD, DELETE, START, STOP] = [1100, 1101, 1103, 1104];

interface Step {
  readonly type: number;
  readonly ts: number;
  readonly attr?: number;
}

/** One host downtime: its events before and after the holder is killed, and its end state. */
interface Lifecycle {
  readonly host: string;
  readonly id: number;
  readonly start: number;
  readonly before: readonly Step[];
  readonly after: readonly Step[];
  /** [was_started, actual_start_time, actual_end_time, was_cancelled], null = no row. */
  readonly history: readonly number[] | null;
  /** [was_started, actual_start_time], null = no row. */
  readonly scheduled: readonly number[] | null;
}

// Every end state depends on the order: a STOP before its START, a DELETE before its ADD or a
// START after its STOP each leave other rows.
const LIFECYCLES: readonly Lifecycle[] = Array.from({ length: 8 }, (_, i) => {
  const host = `so-host-${i}`;
  const id = 500 + i;
  const t = E + i * 100;
  switch (i % 4) {
    case 0: // runs and ends across the kill
      return {
        host,
        id,
        start: t + 20,
        before: [{ type: ADD, ts: t + 10 }, { type: START, ts: t + 20 }],
        after: [{ type: STOP, ts: t + 30, attr: 1 }, { type: DELETE, ts: t + 30 }],
        history: [1, t + 20, t + 30, 0],
        scheduled: null,
      };
    case 1: // still running at the end
      return {
        host,
        id,
        start: t + 20,
        before: [{ type: ADD, ts: t + 10 }],
        after: [{ type: START, ts: t + 20 }],
        history: [1, t + 20, 0, 0],
        scheduled: [1, t + 20],
      };
    case 2: // deleted before its window: leaves nothing
      return {
        host,
        id,
        start: t + 50,
        before: [{ type: ADD, ts: t + 10 }],
        after: [{ type: DELETE, ts: t + 20 }],
        history: null,
        scheduled: null,
      };
    default: // scheduled and cancelled entirely after the kill
      return {
        host,
        id,
        start: t + 20,
        before: [],
        after: [
          { type: ADD, ts: t + 10 },
          { type: START, ts: t + 20 },
          { type: STOP, ts: t + 25, attr: 2 },
          { type: DELETE, ts: t + 25 },
        ],
        history: [1, t + 20, t + 25, 1],
        scheduled: null,
      };
  }
});

function downtimeJob(l: Lifecycle, step: Step): string {
  return JSON.stringify({
    type: step.type,
    flags: 0,
    attr: step.attr ?? 0,
    timestamp: step.ts,
    timestamp_usec: 0,
    downtime: {
      host_name: l.host,
      service_description: null,
      author_name: "admin",
      comment_data: `downtime ${l.id}`,
      downtime_type: 2,
      entry_time: E,
      start_time: l.start,
      end_time: l.start + 3600,
      triggered_by: 0,
      downtime_id: l.id,
      fixed: 1,
      duration: 3600,
    },
  });
}

/** Round-robin over the lifecycles, each keeping its own order. */
function interleave(part: "before" | "after"): string[] {
  const out: string[] = [];
  for (let i = 0; LIFECYCLES.some((l) => l[part].length > i); i++) {
    for (const l of LIFECYCLES) {
      const step = l[part][i];
      if (step !== undefined) out.push(downtimeJob(l, step));
    }
  }
  return out;
}

async function submitInOrder(addr: string, jobs: readonly string[]): Promise<void> {
  // One at a time: gearmand queues them in exactly this order.
  for (const job of jobs) await publish(addr, DOWNTIMES, [job]);
}

async function holders(workers: readonly WorkerProcess[]): Promise<WorkerProcess[]> {
  const flags = await Promise.all(workers.map(holdsInOrderLease));
  return workers.filter((_, i) => flags[i] === 1);
}

// The incident class this prevents: two workers on one job server each took downtime jobs, and
// their concurrent, reordered application corrupted history rows and left ghost scheduled rows
// (docs/consumption.md#downtimes-in-order). With the lock only one of them consumes the in-order
// queue; when it dies another takes over within seconds, and nothing is lost.
Deno.test("scale-out: three workers on one job server, one consumes downtimes; SIGKILL of it hands over in order, nothing lost (D1)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const args = ["--queues", DOWNTIMES, "--drain-timeout", "1s"];
  await using w1 = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url, args });
  await using w2 = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url, args });
  await using w3 = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url, args });
  const workers = [w1, w2, w3];
  await waitFor(async () => (await holders(workers)).length === 1, {
    timeoutMs: 30_000,
    message: "one worker elected",
  });
  const [holder] = await holders(workers);
  assert.ok(holder !== undefined);
  const others = workers.filter((w) => w !== holder);

  const before = interleave("before");
  await submitInOrder(gearmand.addr, before);
  await waitFor(async () => (await downtimeJobsCompleted(holder)) === before.length, {
    timeoutMs: 30_000,
    message: "the first half applied by the holder",
  });
  for (const w of others) {
    assert.equal(await downtimeJobsCompleted(w), 0, "a non-holder consumed downtimes");
  }
  assert.equal((await holders(workers)).length, 1);

  holder.kill("SIGKILL");
  await holder.status;
  const after = interleave("after");
  await submitInOrder(gearmand.addr, after);
  await waitFor(async () => (await holders(others)).length === 1, {
    timeoutMs: 30_000,
    message: "another worker took the lock over",
  });
  await waitFor(
    async () =>
      (await jobsAtGearmand(gearmand.addr, DOWNTIMES)) === 0 &&
      (await downtimeJobsCompleted(others[0] as WorkerProcess)) +
            (await downtimeJobsCompleted(others[1] as WorkerProcess)) ===
        after.length,
    { timeoutMs: 30_000, message: "the second half applied" },
  );
  const [next] = await holders(others);
  assert.equal(
    await downtimeJobsCompleted(next as WorkerProcess),
    after.length,
    "one worker did it all",
  );

  const history = await db.query<Record<string, number | string>[]>(
    "SELECT hostname, was_started, actual_start_time, actual_end_time, was_cancelled " +
      "FROM statusengine_host_downtimehistory ORDER BY hostname",
  );
  const scheduled = await db.query<Record<string, number | string>[]>(
    "SELECT hostname, was_started, actual_start_time FROM statusengine_host_scheduleddowntimes " +
      "ORDER BY hostname",
  );
  assert.deepEqual(
    history.map((r) => [
      r.hostname,
      Number(r.was_started),
      Number(r.actual_start_time),
      Number(r.actual_end_time),
      Number(r.was_cancelled),
    ]),
    LIFECYCLES.filter((l) => l.history !== null).map((l) => [l.host, ...(l.history ?? [])]),
  );
  assert.deepEqual(
    scheduled.map((r) => [r.hostname, Number(r.was_started), Number(r.actual_start_time)]),
    LIFECYCLES.filter((l) => l.scheduled !== null).map((l) => [l.host, ...(l.scheduled ?? [])]),
  );
  // Nothing lost and nothing unmatched: every START/STOP found its row.
  for (const w of others) {
    assert.equal(
      seriesValue(await w.metrics(), "statusengine_queue_downtime_updates_unmatched_total"),
      0,
    );
  }
});
