/**
 * The worker at a live rate rather than draining a backlog: a steady stream of
 * service status, check and perfdata events (by default 3,000 events/s, i.e.
 * 60,000 services checked once a minute, each check sending one event to each
 * of the three queues, in bulk jobs of 100 as the broker module sends them) is
 * published for a while, and the worker's resident memory (VmRSS) and CPU time
 * are read from `/proc` every second.
 *
 * Every worker runs at the same time, side by side, each with its own gearmand
 * and scratch database and the same stream, so a busy machine weighs on all of
 * them alike:
 *
 * - `default`: this checkout with its default settings and V8 flags;
 * - one column per `--variant "ARGS"` (extra worker arguments) and per
 *   `--v8-variant "FLAGS"` (V8 flags added after the default ones);
 * - `--baseline DIR`: the worker of another checkout (e.g. `git archive main`
 *   unpacked into DIR, `deno install` there) with its own defaults.
 *
 * Printed per worker: RSS when idle (before the stream starts), the median and
 * the highest RSS over the second half of the stream, and the CPU seconds per
 * 100,000 events over the whole stream; the ratios are against `default`.
 *
 *   deno run -A bench/live_rate.ts [--seconds 60] [--rate 3000] [--services 60000]
 *     [--variant "--mysql-max-open-conns 4"] [--v8-variant "--max-semi-space-size=1"]
 *     [--baseline DIR]
 */
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema, jobsAtGearmand } from "../tests/helpers/worker.ts";
import { startWorkerProcess, type WorkerProcess } from "../tests/helpers/worker_process.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { jobsFor, syntheticEvents } from "../src/synthetic/mod.ts";
import type { QueueName } from "../src/events/mod.ts";
import { V8_FLAGS } from "../tools/compile.ts";
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

const SECONDS = arg("--seconds", 60);
const RATE = arg("--rate", 3000);
const SERVICES = arg("--services", 60_000);
const PER_JOB = 100;
const QUEUES: readonly QueueName[] = [
  "statusngin_servicestatus",
  "statusngin_servicechecks",
  "statusngin_service_perfdata",
];

/** Every value after each occurrence of a flag. */
function all(name: string): string[] {
  const out: string[] = [];
  Deno.args.forEach((a, i) => {
    if (a === name && Deno.args[i + 1] !== undefined) out.push(Deno.args[i + 1] as string);
  });
  return out;
}

interface Contender {
  readonly label: string;
  readonly args: readonly string[];
  readonly v8Flags?: readonly string[];
  readonly main?: string;
}

const BASELINE = all("--baseline")[0];
const contenders: Contender[] = [
  { label: "default", args: [] },
  ...all("--variant").map((v) => ({ label: v, args: v.split(" ").filter((s) => s !== "") })),
  ...all("--v8-variant").map((v) => ({
    label: `V8 ${v}`,
    args: [],
    v8Flags: [...V8_FLAGS, ...v.split(",").filter((s) => s !== "")],
  })),
];
if (BASELINE !== undefined) {
  const dir = BASELINE.replace(/\/?$/, "/");
  const flags: readonly string[] =
    (await import(new URL("tools/compile.ts", `file://${dir}`).href)).V8_FLAGS;
  contenders.push({ label: "baseline", args: [], main: `${dir}main.ts`, v8Flags: flags });
}

function rssMb(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) / 1024;
}

/** One minute of the stream per queue: each service once, in bulk jobs, published in a loop. */
const jobs = new Map<QueueName, string[]>(
  QUEUES.map((q) => [q, [...jobsFor(q, syntheticEvents(q, SERVICES, { seed: 26 }), {
    eventsPerJob: PER_JOB,
  })]]),
);

report(formatMachine(await machineInfo()));
report(
  `live rate: ${fmt(RATE)} events/s (${QUEUES.join(", ")}; jobs of ${PER_JOB}) for ${SECONDS} s, ` +
    `${fmt(SERVICES)} services, ${contenders.length} workers side by side, load ${loadAverage()}`,
);

interface Running {
  readonly contender: Contender;
  readonly worker: WorkerProcess;
  readonly gearmanAddr: string;
  readonly client: GearmanClient;
  readonly idleRss: number;
  readonly samples: number[];
}

await using stack = new AsyncDisposableStack();
const running: Running[] = [];
for (const contender of contenders) {
  const gearmand = stack.use(await startGearmand());
  const db = stack.use(await createScratchDatabase("se_bench"));
  await createSchema(db.url);
  const worker = stack.use(
    await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: db.url,
      args: contender.args,
      ...(contender.v8Flags === undefined ? {} : { v8Flags: contender.v8Flags }),
      ...(contender.main === undefined ? {} : { main: contender.main }),
    }),
  );
  const client = stack.use(await GearmanClient.connect(gearmand.addr, { window: 200 }));
  running.push({ contender, worker, gearmanAddr: gearmand.addr, client, idleRss: 0, samples: [] });
}
// Idle: every worker started and settled for a few seconds.
await new Promise((r) => setTimeout(r, 5000));
for (const r of running) (r as { idleRss: number }).idleRss = rssMb(r.worker.pid);

const cpuAtStart = running.map((r) => cpuSeconds(r.worker.pid));
const t0 = performance.now();
let jobsSent = 0;
let second = 0;
let nextReport = 10;
const publishing: Promise<unknown>[] = [];
const jobsPerSecond = RATE / PER_JOB;
for (;;) {
  const elapsed = (performance.now() - t0) / 1000;
  if (elapsed >= SECONDS) break;
  // Each tick publishes the jobs that are due by now, the same to every worker.
  const due = Math.floor(elapsed * jobsPerSecond);
  for (; jobsSent < due; jobsSent++) {
    const queue = QUEUES[jobsSent % QUEUES.length] as QueueName;
    const list = jobs.get(queue) as string[];
    const payload = list[Math.floor(jobsSent / QUEUES.length) % list.length] as string;
    for (const r of running) publishing.push(r.client.submitBackground(queue, payload));
  }
  if (publishing.length > 1000) await Promise.all(publishing.splice(0));
  if (elapsed >= second + 1) {
    second = Math.floor(elapsed);
    for (const r of running) r.samples.push(rssMb(r.worker.pid));
    if (second >= nextReport) {
      nextReport += 10;
      report(
        `  ${second} s: RSS ${
          running.map((r) => `${r.contender.label} ${rssMb(r.worker.pid).toFixed(0)} MB`).join(", ")
        }; load ${loadAverage()}`,
      );
    }
  }
  await new Promise((r) => setTimeout(r, 20));
}
await Promise.all(publishing);
const events = jobsSent * PER_JOB;
const cpu = running.map((r, i) => cpuSeconds(r.worker.pid) - (cpuAtStart[i] as number));
const seconds = (performance.now() - t0) / 1000;

const waiting = await Promise.all(
  running.map((r) =>
    Promise.all(QUEUES.map((q) => jobsAtGearmand(r.gearmanAddr, q))).then((n) =>
      n.reduce((a, b) => a + b, 0)
    )
  ),
);
report("");
if (events / seconds < RATE * 0.95 || waiting.some((n) => n > 3 * QUEUES.length)) {
  report(
    "  the machine did not keep the rate: fewer events were published than asked, or jobs " +
      "waited at the end (the figures are then partly a backlog's)",
  );
}
report(
  `${fmt(events)} events in ${seconds.toFixed(0)} s per worker (${fmt(events / seconds)}/s); ` +
    `load ${loadAverage()}`,
);
const header = [
  "worker",
  "idle RSS, MB",
  "RSS at the rate, MB: median (2nd half)",
  "max",
  "vs default",
  "CPU s / 100k events",
  "vs default",
  "jobs waiting at the end",
];
report(`| ${header.join(" | ")} |`);
report(`| ${header.map(() => "---").join(" | ")} |`);
const half = (xs: readonly number[]) => xs.slice(Math.floor(xs.length / 2));
const base = running[0] as Running;
const baseRss = median(half(base.samples));
const baseCpu = (cpu[0] as number) / events * 100_000;
running.forEach((r, i) => {
  const rss = median(half(r.samples));
  const perEvent = (cpu[i] as number) / events * 100_000;
  report(
    `| ${r.contender.label} | ${r.idleRss.toFixed(0)} | ${rss.toFixed(0)} | ${
      Math.max(...half(r.samples)).toFixed(0)
    } | ${(rss / baseRss * 100).toFixed(0)} % | ${perEvent.toFixed(2)} | ${
      (perEvent / baseCpu * 100).toFixed(0)
    } % | ${waiting[i]} |`,
  );
});
