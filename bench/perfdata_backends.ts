/**
 * Perfdata points per second and the worker's CPU per point, MySQL alone side by side with MySQL
 * plus each other backend (Graphite via a real carbon-cache, InfluxDB 1.x, Prometheus remote
 * write), all servers on this machine.
 *
 * One drain: the worker (as a process, default settings but the backends) is started and ready,
 * a backlog of perfdata jobs is submitted to gearmand, and the drain ends when every job is
 * acknowledged (so every MySQL row is committed) and the extra backend has written or counted
 * every point. Its time runs from the first submission; its CPU is the worker process's user +
 * system time over the same span (from /proc). The order of the variants rotates from round to
 * round; ratios to MySQL alone are taken within each round, then the medians are printed.
 *
 *   deno run -A bench/perfdata_backends.ts [--rounds 3] [--jobs 1000] [--checks-per-job 50]
 *     [--only "mysql;mysql,prometheus"] [--worker-v8-flags --prof,--logfile=/tmp/v8-%p.log]
 *     [--baseline DIR]
 *
 * `--only` runs the named variants alone; `--worker-v8-flags` adds V8 flags to the worker's (a tick
 * profile for bench/v8_ticks.ts). `--baseline DIR` runs every variant a second time in each round
 * with the worker of another checkout (`git archive <commit> | tar -x -C DIR`), named
 * `<variant> (baseline)`, and prints our CPU per point against the baseline's, paired per round.
 *
 * A point is one gauge (one row of statusengine_perfdata); each check has two. Every drain starts a
 * fresh worker, so its figures include the warm-up of the backend's code (protobuf encoder, HTTP
 * client): with 20,000 points per drain that warm-up was most of the difference to MySQL alone,
 * hence 100,000 by default.
 */
import mysql from "mysql2/promise";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema } from "../tests/helpers/worker.ts";
import { seriesSum, seriesValue, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { startCarbonCache, startInfluxd, startPrometheus } from "../tests/helpers/tsdb.ts";
import { PERFDATA_QUEUE, volumeJobs } from "../tests/helpers/perfdata_env.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import {
  arg,
  cpuSeconds,
  fmt,
  formatMachine,
  machineInfo,
  median,
  report,
  submitMany,
} from "./_util.ts";
import { V8_FLAGS } from "../tools/compile.ts";

const ROUNDS = arg("--rounds", 3);
const JOBS = arg("--jobs", 1000);
const CHECKS = arg("--checks-per-job", 50);
const POINTS = JOBS * CHECKS * 2;

function textArg(name: string): string | undefined {
  const i = Deno.args.indexOf(name);
  return i === -1 ? undefined : Deno.args[i + 1];
}
const ONLY = textArg("--only")?.split(";");
const EXTRA_V8_FLAGS = textArg("--worker-v8-flags")?.split(",") ?? [];
const BASELINE = textArg("--baseline")?.replace(/\/?$/, "/");
// The baseline's worker runs with the V8 flags of its own version.
const BASELINE_V8_FLAGS: readonly string[] = BASELINE === undefined
  ? []
  : (await import(new URL("tools/compile.ts", `file://${BASELINE}`).href)).V8_FLAGS;

report(formatMachine(await machineInfo()));
report(
  `perfdata backends: ${ROUNDS} rounds, ${JOBS} jobs × ${CHECKS} checks × 2 gauges = ` +
    `${fmt(POINTS)} points per drain`,
);

await using gearmand = await startGearmand();
await using db = await createScratchDatabase();
await createSchema(db.url);
await using carbon = await startCarbonCache();
await using influx = await startInfluxd();
await using prometheus = await startPrometheus();

interface Variant {
  readonly name: string;
  /** The backend besides MySQL whose written + dropped points end the drain. */
  readonly backend?: string;
  readonly args: string[];
  /** The baseline checkout's main.ts, for a variant run with the baseline's worker. */
  readonly main?: string;
}
const ALL_VARIANTS: Variant[] = [
  { name: "mysql", args: ["--perfdata-backends", "mysql"] },
  {
    name: "mysql,graphite",
    backend: "graphite",
    args: ["--perfdata-backends", "mysql,graphite", "--graphite-addr", carbon.addr],
  },
  {
    name: "mysql,influxdb",
    backend: "influxdb",
    args: ["--perfdata-backends", "mysql,influxdb", "--influxdb-url", influx.writeUrl],
  },
  {
    name: "mysql,prometheus",
    backend: "prometheus",
    args: [
      "--perfdata-backends",
      "mysql,prometheus",
      "--prometheus-remote-write-url",
      prometheus.remoteWriteUrl,
    ],
  },
];

const OWN_VARIANTS = ALL_VARIANTS.filter((v) => ONLY === undefined || ONLY.includes(v.name));
const VARIANTS = BASELINE === undefined ? OWN_VARIANTS : OWN_VARIANTS.flatMap((v) => [v, {
  ...v,
  name: `${v.name} (baseline)`,
  main: `${BASELINE}main.ts`,
}]);

async function truncate(): Promise<void> {
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    await conn.query("TRUNCATE TABLE statusengine_perfdata");
  } finally {
    await conn.end();
  }
}

async function queued(): Promise<number> {
  return (await adminStatus(gearmand.addr)).find((s) => s.function === PERFDATA_QUEUE)?.total ??
    0;
}

interface Drain {
  pointsPerSecond: number;
  cpuMicrosPerPoint: number;
  dropped: number;
}

async function drain(v: Variant, round: number): Promise<Drain> {
  await truncate();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: db.url,
    args: ["--queues", PERFDATA_QUEUE, ...v.args],
    ...(v.main === undefined
      ? (EXTRA_V8_FLAGS.length === 0 ? {} : { v8Flags: [...V8_FLAGS, ...EXTRA_V8_FLAGS] })
      : { main: v.main, v8Flags: [...BASELINE_V8_FLAGS, ...EXTRA_V8_FLAGS] }),
  });
  // Every round's checks are newer than the last round's: Prometheus refuses older samples.
  const payloads = volumeJobs(JOBS, CHECKS, Math.floor(Date.now() / 1000) - 600 + round * 10);
  const cpu0 = cpuSeconds(worker.pid);
  const t0 = performance.now();
  await submitMany(gearmand.addr, PERFDATA_QUEUE, JOBS, (i) => payloads[i] as string);
  let dropped = 0;
  for (;;) {
    if ((await queued()) === 0) {
      if (v.backend === undefined) break;
      const text = await worker.metrics();
      const written = seriesValue(text, "statusengine_perfdata_points_written_total", {
        backend: v.backend,
      });
      dropped = seriesSum(text, "statusengine_perfdata_dropped_total");
      if (written + dropped >= POINTS) break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(worker.pid) - cpu0;
  worker.kill("SIGTERM");
  await worker.status;
  return { pointsPerSecond: POINTS / seconds, cpuMicrosPerPoint: (cpu / POINTS) * 1e6, dropped };
}

const results = new Map<string, Drain[]>(VARIANTS.map((v) => [v.name, []]));
for (let round = 0; round < ROUNDS; round++) {
  const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length] as Variant);
  for (const v of order) {
    const d = await drain(v, round * VARIANTS.length + order.indexOf(v));
    results.get(v.name)?.push(d);
    report(
      `  round ${round + 1} ${v.name.padEnd(28)} ${fmt(d.pointsPerSecond).padStart(8)} points/s  ` +
        `${d.cpuMicrosPerPoint.toFixed(1).padStart(6)} µs CPU/point` +
        (d.dropped > 0 ? `  (${fmt(d.dropped)} dropped)` : ""),
    );
  }
}

report("");
report("variant                      points/s (median)  ×mysql   µs CPU/point  ×mysql");
for (const v of VARIANTS) {
  // A baseline variant against the baseline's MySQL alone when it ran.
  const base = (v.main === undefined ? undefined : results.get("mysql (baseline)")) ??
    results.get("mysql") ?? [];
  const r = results.get(v.name) ?? [];
  const rate = median(r.map((d) => d.pointsPerSecond));
  const cpu = median(r.map((d) => d.cpuMicrosPerPoint));
  // Ratios within each round, then their median.
  const rateRatio = median(r.map((d, i) => d.pointsPerSecond / (base[i]?.pointsPerSecond ?? NaN)));
  const cpuRatio = median(
    r.map((d, i) => d.cpuMicrosPerPoint / (base[i]?.cpuMicrosPerPoint ?? NaN)),
  );
  report(
    `${v.name.padEnd(28)} ${fmt(rate).padStart(17)}  ${rateRatio.toFixed(2).padStart(6)}  ` +
      `${cpu.toFixed(1).padStart(12)}  ${cpuRatio.toFixed(2).padStart(6)}`,
  );
}

if (BASELINE !== undefined) {
  report("");
  report("variant             µs CPU/point  baseline  ×baseline (median of rounds)");
  for (const v of OWN_VARIANTS) {
    const ours = results.get(v.name) ?? [];
    const theirs = results.get(`${v.name} (baseline)`) ?? [];
    const ratio = median(
      ours.map((d, i) => d.cpuMicrosPerPoint / (theirs[i]?.cpuMicrosPerPoint ?? NaN)),
    );
    report(
      `${v.name.padEnd(19)} ${
        median(ours.map((d) => d.cpuMicrosPerPoint)).toFixed(1).padStart(12)
      }` +
        `  ${median(theirs.map((d) => d.cpuMicrosPerPoint)).toFixed(1).padStart(8)}` +
        `  ${ratio.toFixed(2).padStart(9)}`,
    );
  }
}
