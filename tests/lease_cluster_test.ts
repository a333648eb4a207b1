/**
 * The in-order lease on a real 3-node Galera cluster (tools/galera_cluster.sh): two workers
 * writing through two different nodes never both consume the downtime queue, the one that
 * waits takes over after the holder is SIGKILLed, and the downtime rows stay those of the
 * core's order when the jobs of a downtime are applied through both nodes, one at a time, the
 * lease handed over in between (docs/downtimes.md#galera). With the old `GET_LOCK`, which each
 * node keeps for itself, both workers held the lock and both consumed. Part of the
 * `test:cluster` stage (docs/testing.md).
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { startGaleraCluster } from "./helpers/clusters.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { checkEveryOrder } from "./helpers/downtime_order.ts";
import { createSchema, jobsAtGearmand, publish } from "./helpers/worker.ts";
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
