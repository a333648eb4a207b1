/**
 * Peak resident memory (VmHWM) of the worker process while a backlog of
 * 1,000,000 events drains; the requirement is < 200 MB. Printed next to the
 * same worker idle, so the figure reads as "what the backlog costs".
 *
 *   deno run -A bench/memory.ts [--events 1000000]
 *   deno run -A bench/memory.ts --all-queues [--events 240000] [--args "--flag value …"]
 *
 * `--all-queues` spreads the events over the twelve queues in jobs of 100
 * built from the fixtures in src/events/testdata/ (the core-restart queue
 * carries PROCESS_START events, which are read and ignored, so no status
 * sweep runs); `--args` passes worker flags, to see which setting buys what.
 */
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema, jobsAtGearmand } from "../tests/helpers/worker.ts";
import { seriesSum, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { losstestJobs } from "../src/cli/losstest.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { fmt, report } from "./_util.ts";
import { V8_FLAGS } from "../tools/compile.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";

const ALL_QUEUES = Deno.args.includes("--all-queues");
const EVENTS_DEFAULT = ALL_QUEUES ? 240_000 : 1_000_000;
const EVENTS = Deno.args.includes("--events")
  ? Number(Deno.args[Deno.args.indexOf("--events") + 1]) || EVENTS_DEFAULT
  : EVENTS_DEFAULT;
const ai = Deno.args.indexOf("--args");
const WORKER_ARGS = ai === -1 ? [] : (Deno.args[ai + 1] ?? "").split(" ").filter((a) => a);
const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const PER_JOB = 100;

/** Jobs of {@link PER_JOB} events for every queue, `events` in all, round robin. */
function* allQueueJobs(events: number): Generator<{ queue: string; payload: string }> {
  const templates = QUEUE_NAMES.map((queue) => {
    const doc = JSON.parse(Deno.readTextFileSync(new URL(`${queue}.job`, FIXTURES)));
    const one = Array.isArray(doc.messages) ? doc.messages : [doc];
    const events = queue === "statusngin_core_restart" ? [{ object_type: 100, timestamp: 0 }] : one;
    return { queue, events: events as unknown[] };
  });
  const jobsPerQueue = Math.ceil(events / PER_JOB / templates.length);
  for (let j = 0; j < jobsPerQueue; j++) {
    for (const t of templates) {
      const messages = Array.from({ length: PER_JOB }, (_, k) => t.events[k % t.events.length]);
      yield { queue: t.queue, payload: JSON.stringify({ messages }) };
    }
  }
}
const LIMIT_MB = 200;

function memory(pid: number): { rss: number; peak: number } {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = (key: string) =>
    Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

await using gearmand = await startGearmand();
await using db = await createScratchDatabase("se_bench");
await createSchema(db.url);
const v8i = Deno.args.indexOf("--v8-flags");
// Default: the flags the compiled binary embeds (tools/compile.ts); `--v8-flags ""` for V8's own.
const v8Flags = v8i === -1 ? [...V8_FLAGS] : (Deno.args[v8i + 1] ?? "").split(",").filter((f) => f);
await using worker = await startWorkerProcess({
  gearmanAddr: gearmand.addr,
  mysqlUrl: db.url,
  v8Flags,
  args: WORKER_ARGS,
});
const idle = memory(worker.pid);
const t0 = performance.now();
{
  // Published far faster than it drains: the backlog builds up at gearmand.
  await using client = await GearmanClient.connect(gearmand.addr, { window: 200 });
  const pending: Promise<string>[] = [];
  const jobs = ALL_QUEUES
    ? allQueueJobs(EVENTS)
    : Iterator.from(losstestJobs("mem", EVENTS)).map((j) => ({
      queue: "statusngin_hostchecks",
      payload: j.payload,
    }));
  for (const job of jobs) {
    pending.push(client.submitBackground(job.queue, job.payload));
    if (pending.length >= 500) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
}
let samplePeak = 0;
const queued = async () => {
  let n = 0;
  for (const q of ALL_QUEUES ? QUEUE_NAMES : ["statusngin_hostchecks"]) {
    n += await jobsAtGearmand(gearmand.addr, q);
  }
  return n;
};
while ((await queued()) > 0) {
  samplePeak = Math.max(samplePeak, memory(worker.pid).rss);
  await new Promise((r) => setTimeout(r, 250));
}
const seconds = (performance.now() - t0) / 1000;
const m = memory(worker.pid);
const deadLetters = seriesSum(await worker.metrics(), "statusengine_dead_letters_total");
report(`memory: V8 flags ${v8Flags.length === 0 ? "(V8 defaults)" : v8Flags.join(",")}`);
report(`memory: worker flags ${WORKER_ARGS.length === 0 ? "(defaults)" : WORKER_ARGS.join(" ")}`);
report(`memory: ${ALL_QUEUES ? "twelve queues, jobs of 100 fixture events" : "hostchecks"}`);
report(
  `memory: ${fmt(EVENTS)} events backlog drained in ${seconds.toFixed(1)} s (${
    fmt(EVENTS / seconds)
  } events/s), ${fmt(deadLetters)} dead letters`,
);
report("process                       | peak RSS (VmHWM) MB | limit MB | verdict");
report(`worker idle, before the backlog | ${idle.peak.toFixed(0).padStart(18)} |          |`);
report(
  `worker draining the backlog   | ${m.peak.toFixed(0).padStart(19)} | ${
    String(LIMIT_MB).padStart(8)
  } | ${m.peak < LIMIT_MB ? "ok" : "OVER"}`,
);
