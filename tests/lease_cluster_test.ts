/**
 * The in-order lease on a real 3-node Galera cluster (tools/galera_cluster.sh): two workers
 * writing through two different nodes never both consume the downtime queue, the one that
 * waits takes over after the holder is SIGKILLed, and the downtime rows stay those of the
 * core's order when the jobs of a downtime are applied through both nodes, one at a time, the
 * lease handed over in between, also when a statement of the old holder still runs on its node
 * (docs/downtimes.md#galera). With the old `GET_LOCK`, which each node keeps for itself, both
 * workers held the lock and both consumed. Part of the `test:cluster` stage (docs/testing.md).
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { startGaleraCluster } from "./helpers/clusters.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { orStuck, waitFor } from "./helpers/wait.ts";
import { checkEveryOrder } from "./helpers/downtime_order.ts";
import { createSchema, jobsAtGearmand, publish } from "./helpers/worker.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { ensureSchema } from "../src/mysql/schema.ts";
import { DowntimeExecutor } from "../src/mysql/downtime.ts";
import { createWriterPool, poolExecutor } from "../src/mysql/executor.ts";
import { DbAvailability } from "../src/mysql/availability.ts";
import { createMetrics } from "../src/metrics/registry.ts";
import { DeadLetters } from "../src/pipeline/dead_letter.ts";
import { type DowntimeEvent, downtimeStatements } from "../src/events/downtime.ts";
import { errorMessage } from "../src/log.ts";
import {
  downtimeJobsCompleted,
  holdsInOrderLease,
  seriesValue,
  startWorkerProcess,
  type WorkerProcess,
} from "./helpers/worker_process.ts";

const DOWNTIMES = "statusngin_downtimes";
const DATABASE = "se_lease";
const ADD = 1100;

function addJob(n: number): string {
  const t = 1_780_000_000 + n;
  return JSON.stringify({
    type: ADD,
    flags: 0,
    attr: 0,
    timestamp: t,
    timestamp_usec: 0,
    downtime: {
      host_name: `lease-host-${n}`,
      service_description: null,
      author_name: "admin",
      comment_data: `downtime ${n}`,
      downtime_type: 2,
      entry_time: t,
      start_time: t + 3600,
      end_time: t + 7200,
      triggered_by: 0,
      downtime_id: n,
      fixed: 1,
      duration: 3600,
    },
  });
}

/**
 * Downtime statements of a holder that lost the lease, still running on node 1 while the new
 * holder applies the downtime's STOP through node 2 (docs/downtimes.md#galera): the old holder's
 * scheduled-row copy of an ADD waits on a test transaction's lock on node 1 (its client gives it
 * up, or waits), the new holder takes the lease over on node 2, and the lock goes just as the
 * new holder's STOP runs. Row locks are node-local and certification compares only written rows,
 * so a copy that read the guard before the STOP reached node 1 committed after it. Returns the
 * trials that ended otherwise than in core order.
 */
async function lateCopiesAcrossNodes(
  url1: string,
  url2: string,
  trials: number,
): Promise<string[]> {
  const name = "se_late_copy";
  const admin = await mysql.createConnection(mysqlOptionsFromUrl(url1));
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const options1 = mysqlOptionsFromUrl(`${url1}${name}`);
  const options2 = mysqlOptionsFromUrl(`${url2}${name}`);
  // Reads wait until their node applied every commit of the other one.
  const node1 = await mysql.createConnection(options1);
  const node2 = await mysql.createConnection(options2);
  const metrics = createMetrics();
  const deadLetters = new DeadLetters(null, metrics);
  const pools: mysql.Pool[] = [];
  const executor = (options: typeof options1, holder: string, statementTimeoutMs = 0) => {
    const pool = createWriterPool(options, 2);
    pools.push(pool);
    return new DowntimeExecutor({
      executor: poolExecutor(pool, { statementTimeoutMs }),
      availability: new DbAvailability(metrics.dbAvailable),
      deadLetters,
      metrics,
      lease: { name: "in-order:N", holder },
    });
  };
  const downtime = (id: number, type: number, timestamp: number, attr = 0): DowntimeEvent => ({
    type,
    attr,
    timestamp,
    timestampUsec: 1,
    downtimeType: 1,
    hostName: "web1",
    serviceDescription: "HTTP",
    downtimeId: id,
    startTime: T + 100,
    endTime: T + 700,
    entryTime: T + 50,
    authorName: "op",
    commentData: "maintenance",
    triggeredBy: 0,
    fixed: 1,
    duration: 600,
  });
  const count = async (conn: mysql.Connection, sql: string, values: unknown[]) =>
    Number(((await conn.query(sql, values))[0] as { n: number }[])[0]?.n);
  const onNode1 = (like: string, ms: number) =>
    count(
      node1,
      "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND " +
        "COMMAND = 'Query' AND INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%' AND TIME_MS > ?",
      [name, like, ms],
    );
  const failed: string[] = [];
  try {
    await ensureSchema(node1);
    for (const conn of [node1, node2]) await conn.query("SET SESSION wsrep_sync_wait = 1");
    await count(node2, "SELECT COUNT(*) AS n FROM statusengine_worker_leases", []);
    await node1.query("INSERT INTO statusengine_worker_leases (name) VALUES ('in-order:N')");
    // A's client gives its statement up (the statement timeout) in even trials, waits in odd ones.
    const givesUp = executor(options1, "A", 300);
    const waits = executor(options1, "A");
    const b = executor(options2, "B");
    for (let id = 1; id <= trials; id++) {
      const a = id % 2 === 0 ? givesUp : waits;
      await node1.query(
        "UPDATE statusengine_worker_leases SET holder = 'A', renewals = renewals + 1 WHERE name = 'in-order:N'",
      );
      const blocker = await mysql.createConnection(options1);
      try {
        // A gap lock on the empty scheduled table: every INSERT into it waits for the rollback.
        await blocker.query("BEGIN");
        await blocker.query("SELECT * FROM statusengine_service_scheduleddowntimes FOR UPDATE");
        const drain = new AbortController();
        const add = a.run(QUEUE, downtimeStatements(downtime(id, 1100, T + 50), "N"), drain.signal)
          .then(() => "done", (err: unknown) => errorMessage(err));
        await waitFor(async () => (await onNode1(SCHEDULED_INSERT, 50)) > 0, {
          message: "A's copy waiting on node 1",
        });
        if (a === givesUp) {
          drain.abort(new Error("drain deadline"));
          await add;
        }
        // B's take-over on node 2, as the lease's: the row names the holder it saw.
        const [taken] = await node2.query(
          "UPDATE statusengine_worker_leases SET holder = 'B', renewals = renewals + 1 " +
            "WHERE name = 'in-order:N' AND holder = 'A'",
        );
        assert.equal((taken as { affectedRows: number }).affectedRows, 1);
        const stop = b.run(
          QUEUE,
          downtimeStatements(downtime(id, 1104, T + 700, 1), "N"),
          AbortSignal.timeout(20_000),
        );
        // The lock goes while the STOP is under way: 0 to 4 ms after it was sent.
        await new Promise((r) => setTimeout(r, Math.max(0, (id % 7) - 2)));
        await blocker.query("ROLLBACK");
        await stop;
        const late = await orStuck(add);
        await waitFor(async () => (await onNode1("%", -1)) === 0, {
          message: "every statement A gave up ended on node 1",
        });
        const scheduled = "SELECT COUNT(*) AS n FROM statusengine_service_scheduleddowntimes " +
          "WHERE internal_downtime_id = ?";
        const rows = [await count(node1, scheduled, [id]), await count(node2, scheduled, [id])];
        if (rows.some((n) => n !== 0)) {
          failed.push(`trial ${id}: scheduled rows of the stopped downtime ${rows}, A: ${late}`);
        } else if (a === waits && !/in-order lease/.test(String(late))) {
          failed.push(`trial ${id}: A's ADD ended ${late}, not given back`);
        }
      } finally {
        await blocker.end().catch(() => {});
      }
    }
  } finally {
    await Promise.all(pools.map((p) => p.end()));
    await deadLetters.close();
    await node1.end();
    await node2.end();
  }
  return failed;
}

const QUEUE = "statusngin_downtimes";
const T = 1_760_000_000;
const SCHEDULED_INSERT = "INSERT INTO `statusengine_service_scheduleddowntimes`%";

Deno.test("in-order lease on Galera: workers on two nodes never both consume downtimes, the survivor takes over after SIGKILL, and the downtime rows keep the core's order across nodes", async (t) => {
  await using cluster = await startGaleraCluster();
  const [url1, , url3] = cluster.nodes.map((n) => n.url) as [string, string, string];

  await t.step(
    "the downtime order property with each trial's jobs applied one at a time through nodes 1 and 3, the lease handed over between them: the rows of the core's order",
    async () => {
      await checkEveryOrder({ concurrent: false, galeraNodes: [url1, url3], handOver: true });
    },
  );

  await t.step(
    "downtime statements of the old holder still running on node 1 when the new holder's STOP runs on node 2 commit only as the holder: no stopped downtime comes back",
    async () => {
      const [, url2] = cluster.nodes.map((n) => n.url) as [string, string];
      assert.deepEqual(await lateCopiesAcrossNodes(url1, url2, 40), []);
    },
  );

  await t.step(
    "two workers, on nodes 1 and 3: one holds the lease and consumes; after its SIGKILL the other takes over once the term ran out",
    async () => {
      const admin = await mysql.createConnection({ uri: url1 });
      await admin.query(`CREATE DATABASE ${DATABASE}`);
      await admin.end();
      await createSchema(`${url1}${DATABASE}`);
      await using gearmand = await startGearmand();
      const args = ["--queues", DOWNTIMES, "--drain-timeout", "1s"];
      await using w1 = await startWorkerProcess({
        gearmanAddr: gearmand.addr,
        mysqlUrl: `${url1}${DATABASE}`,
        args,
      });
      await using w3 = await startWorkerProcess({
        gearmanAddr: gearmand.addr,
        mysqlUrl: `${url3}${DATABASE}`,
        args,
      });
      const workers = [w1, w3];
      const holders = async () => {
        const flags = await Promise.all(workers.map(holdsInOrderLease));
        return workers.filter((_, i) => flags[i] === 1);
      };
      await waitFor(async () => (await holders()).length === 1, {
        timeoutMs: 30_000,
        message: "one worker holds the lease",
      });
      // With GET_LOCK both workers held it here: each node granted its own lock.
      for (let i = 0; i < 15; i++) {
        assert.equal((await holders()).length, 1, "exactly one holder across the two nodes");
        await new Promise((r) => setTimeout(r, 200));
      }
      const [holder] = await holders();
      assert.ok(holder !== undefined);
      const other = workers.find((w) => w !== holder) as WorkerProcess;

      const first = Array.from({ length: 20 }, (_, i) => addJob(i));
      await publish(gearmand.addr, DOWNTIMES, first);
      await waitFor(async () => (await downtimeJobsCompleted(holder)) === first.length, {
        timeoutMs: 30_000,
        message: "the holder applied the first jobs",
      });
      assert.equal(
        await downtimeJobsCompleted(other),
        0,
        "the worker without the lease consumed downtimes",
      );

      holder.kill("SIGKILL");
      await holder.status;
      const killedAt = performance.now();
      const second = Array.from({ length: 20 }, (_, i) => addJob(100 + i));
      await publish(gearmand.addr, DOWNTIMES, second);
      await waitFor(async () => (await holdsInOrderLease(other)) === 1, {
        timeoutMs: 45_000,
        message: "the other worker took the lease over",
      });
      const tookOverAfterMs = performance.now() - killedAt;
      // The term at the default 1 s poll and a 1 s drain is 16 s; the wait counts from the
      // holder's last renewal, at most a poll before the kill.
      assert.ok(tookOverAfterMs >= 14_000, `taken over after ${tookOverAfterMs} ms`);
      assert.equal(
        seriesValue(await other.metrics(), "statusengine_in_order_lease_takeovers_total"),
        1,
      );
      await waitFor(
        async () =>
          (await downtimeJobsCompleted(other)) === second.length &&
          (await jobsAtGearmand(gearmand.addr, DOWNTIMES)) === 0,
        { timeoutMs: 30_000, message: "the survivor applied the rest" },
      );
      const reader = await mysql.createConnection({ uri: `${url3}${DATABASE}` });
      try {
        await reader.query("SET SESSION wsrep_sync_wait = 1");
        const [rows] = await reader.query(
          "SELECT COUNT(*) AS n FROM statusengine_host_downtimehistory",
        );
        assert.equal(Number((rows as { n: number }[])[0]?.n), first.length + second.length);
        const [lease] = await reader.query(
          "SELECT holder FROM statusengine_worker_leases WHERE name = 'in-order:N'",
        );
        assert.match(
          String((lease as { holder: string }[])[0]?.holder),
          new RegExp(`^pid ${other.pid} `),
        );
      } finally {
        await reader.end();
      }
    },
  );
});
