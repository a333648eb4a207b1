/**
 * Scale-out on a Galera cluster (issue 32): the same hostchecks backlog drained, one after
 * another in one run, by
 *
 * - 1 worker on a single MariaDB (a private server with the Galera nodes' InnoDB settings),
 * - 1 worker on a 3-node Galera cluster (tools/galera_cluster.sh, its URL lists every node),
 * - 3 workers on the same cluster, each listing all nodes with its own node first,
 *
 * all worker processes (`main.ts run`, default settings) on one gearmand. A drain runs from the
 * first job published (the workers already ready and idle) to the last job acknowledged, which
 * is after its rows were committed (D1). Prints events/s and the ratio to the single server, the
 * CPU seconds per 100,000 events of each MySQL server and of the workers (from /proc/PID/stat,
 * over the drain), the load average before and after each drain, and what the per-node cost
 * says about separate hosts: every Galera node applies every write set, so a node's cost per
 * event, not the number of nodes, bounds the cluster's rate.
 *
 *   deno run -A bench/scale_out.ts [--events 50000] [--rounds 1]
 *
 * On one machine the three nodes and the workers share its cores: the cluster is slower than
 * one server here by construction (docs/performance.md#scale-out).
 */
import mysql from "mysql2/promise";
import { LOSSTEST_QUEUE, losstestJobs } from "../src/cli/losstest.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { startGaleraCluster } from "../tests/helpers/clusters.ts";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { startMariadbd } from "../tests/helpers/mariadbd.ts";
import { createSchema } from "../tests/helpers/worker.ts";
import {
  seriesValue,
  startWorkerProcess,
  type WorkerProcess,
} from "../tests/helpers/worker_process.ts";
import {
  arg,
  cpuSeconds,
  fmt,
  formatMachine,
  loadAverage,
  machineInfo,
  median,
  report,
} from "./_util.ts";

const EVENTS = arg("--events", 50_000);
const ROUNDS = arg("--rounds", 1);
const DATABASE = "se_scale_out";

/** One drain: its rate and the CPU of each MySQL server and of all workers per 100k events. */
interface Drain {
  readonly eventsPerSecond: number;
  readonly serverCpuPer100k: readonly number[];
  readonly workerCpuPer100k: number;
  readonly load: string;
}

async function completed(workers: readonly WorkerProcess[]): Promise<number> {
  let n = 0;
  for (const w of workers) {
    n += seriesValue(await w.metrics(), "statusengine_queue_jobs_total", {
      queue_name: LOSSTEST_QUEUE,
      result: "completed",
    });
  }
  return n;
}

/**
 * Drain the backlog with one worker per URL into a fresh schema, the servers' PIDs measured.
 *
 * @param gearmandAddr The shared job server (empty).
 * @param urls One `--mysql-url` per worker.
 * @param serverPids The MySQL servers whose CPU is measured.
 * @param admin URL of one server (no database) to recreate the schema on.
 */
async function drain(
  gearmandAddr: string,
  urls: readonly string[],
  serverPids: readonly number[],
  admin: string,
): Promise<Drain> {
  const conn = await mysql.createConnection({ uri: admin });
  await conn.query(`DROP DATABASE IF EXISTS ${DATABASE}`);
  await conn.query(`CREATE DATABASE ${DATABASE}`);
  await conn.end();
  await createSchema(`${admin}${DATABASE}`);
  const jobs = [...losstestJobs(`so${Date.now() % 100_000}`, EVENTS)];
  const workers = await Promise.all(urls.map((mysqlUrl) =>
    startWorkerProcess({
      gearmanAddr: gearmandAddr,
      mysqlUrl,
      args: ["--queues", LOSSTEST_QUEUE],
    })
  ));
  try {
    const loadBefore = loadAverage();
    const server0 = serverPids.map(cpuSeconds);
    const worker0 = workers.map((w) => cpuSeconds(w.pid));
    const t0 = performance.now();
    {
      await using client = await GearmanClient.connect(gearmandAddr, { window: 200 });
      await Promise.all(
        jobs.map((job) =>
          client.submitBackground(LOSSTEST_QUEUE, job.payload, { unique: crypto.randomUUID() })
        ),
      );
    }
    while ((await completed(workers)) < jobs.length) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - t0) / 1000;
    const per100k = (cpu: number) => cpu / EVENTS * 100_000;
    const workerCpu = workers.reduce((sum, w, i) => sum + cpuSeconds(w.pid) - (worker0[i] ?? 0), 0);
    const check = await mysql.createConnection({ uri: `${admin}${DATABASE}` });
    const [rows] = await check.query(
      "SELECT COUNT(*) AS n, COUNT(DISTINCT hostname) AS d FROM statusengine_hostchecks",
    );
    await check.end();
    const row = (rows as { n: number; d: number }[])[0];
    if (Number(row?.n) !== EVENTS || Number(row?.d) !== EVENTS) {
      throw new Error(`expected ${EVENTS} distinct rows, found ${row?.n} (${row?.d} distinct)`);
    }
    return {
      eventsPerSecond: EVENTS / seconds,
      serverCpuPer100k: serverPids.map((pid, i) => per100k(cpuSeconds(pid) - (server0[i] ?? 0))),
      workerCpuPer100k: per100k(workerCpu),
      load: `${loadBefore} → ${loadAverage()}`,
    };
  } finally {
    for (const w of workers) await w[Symbol.asyncDispose]();
  }
}

report(formatMachine(await machineInfo()));
report(
  `scale_out: ${fmt(EVENTS)} hostchecks (jobs of 100), ${ROUNDS} round(s), worker processes ` +
    "with default settings on one gearmand; medians",
);
// The single server gets the Galera nodes' InnoDB settings (tools/galera_cluster.sh), so the
// comparison is about replication, not configuration.
const INNODB = [
  "--innodb-buffer-pool-size=64M",
  "--innodb-flush-log-at-trx-commit=2",
  "--innodb-autoinc-lock-mode=2",
];
await using gearmand = await startGearmand();
await using single = await startMariadbd({ extraArgs: INNODB });
await using cluster = await startGaleraCluster();
const hosts = cluster.nodes.map((n) => `127.0.0.1:${n.port}`);
const clusterUrl = (first: number) =>
  `mysql://root@${[hosts[first], ...hosts.filter((_, j) => j !== first)].join(",")}/${DATABASE}`;
const clusterAdmin = cluster.nodes[0]?.url ?? "";
const nodePids = cluster.nodes.map((n) => n.pid);

const results: Record<string, Drain[]> = { single: [], galera1: [], galera3: [] };
for (let round = 0; round < ROUNDS; round++) {
  results.single?.push(
    await drain(gearmand.addr, [single.url({ database: DATABASE })], [single.pid], single.url()),
  );
  results.galera1?.push(await drain(gearmand.addr, [clusterUrl(0)], nodePids, clusterAdmin));
  results.galera3?.push(
    await drain(gearmand.addr, [0, 1, 2].map(clusterUrl), nodePids, clusterAdmin),
  );
}

const LABELS: Record<string, string> = {
  single: "1 worker, single MariaDB",
  galera1: "1 worker, 3-node Galera",
  galera3: "3 workers, 3-node Galera",
};
const base = median((results.single ?? []).map((d) => d.eventsPerSecond));
report(
  "setup                    | events/s | vs single | MySQL CPU s/100k per node | " +
    "workers CPU s/100k | load average (before → after)",
);
for (const [key, drains] of Object.entries(results)) {
  const rate = median(drains.map((d) => d.eventsPerSecond));
  const nodes = drains[0]?.serverCpuPer100k.map((_, i) =>
    median(drains.map((d) =>
      d.serverCpuPer100k[i] ?? NaN
    )).toFixed(1)
  ) ?? [];
  report(
    `${(LABELS[key] ?? key).padEnd(24)} | ${fmt(rate).padStart(8)} | ` +
      `${(rate / base).toFixed(2).padStart(9)} | ${nodes.join(" / ").padEnd(25)} | ` +
      `${median(drains.map((d) => d.workerCpuPer100k)).toFixed(1).padStart(18)} | ` +
      `${drains.map((d) => d.load).join("; ")}`,
  );
}
// Separate hosts: a node's own CPU per event bounds what the cluster can take, whatever the
// number of nodes (each applies every write set); the 3-worker split shares the executing.
const perNode = (key: string) =>
  Math.max(
    ...(results[key]?.[0]?.serverCpuPer100k ?? []).map((_, i) =>
      median((results[key] ?? []).map((d) => d.serverCpuPer100k[i] ?? NaN))
    ),
  );
for (const key of ["single", "galera1", "galera3"]) {
  report(
    `${LABELS[key]}: the busiest MySQL server spent ${perNode(key).toFixed(1)} CPU s per ` +
      `100k events: one core of its own takes at most ${fmt(100_000 / perNode(key))} events/s`,
  );
}
