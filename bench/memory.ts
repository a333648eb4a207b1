/**
 * Peak resident memory (VmHWM) of the worker process while a backlog of
 * 1,000,000 events drains; the requirement is < 200 MB. Printed next to the
 * same worker idle, so the figure reads as "what the backlog costs".
 *
 *   deno run -A bench/memory.ts [--events 1000000]
 */
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema, jobsAtGearmand } from "../tests/helpers/worker.ts";
import { startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { losstestJobs } from "../src/cli/losstest.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { fmt, report } from "./_util.ts";
import { V8_FLAGS } from "../tools/compile.ts";

const EVENTS = Number(Deno.args[Deno.args.indexOf("--events") + 1] || 1_000_000) || 1_000_000;
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
});
const idle = memory(worker.pid);
const t0 = performance.now();
{
  // Published far faster than it drains: the backlog builds up at gearmand.
  await using client = await GearmanClient.connect(gearmand.addr, { window: 200 });
  const pending: Promise<string>[] = [];
  for (const job of losstestJobs("mem", EVENTS)) {
    pending.push(client.submitBackground("statusngin_hostchecks", job.payload));
    if (pending.length >= 500) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
}
let samplePeak = 0;
while ((await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks")) > 0) {
  samplePeak = Math.max(samplePeak, memory(worker.pid).rss);
  await new Promise((r) => setTimeout(r, 250));
}
const seconds = (performance.now() - t0) / 1000;
const m = memory(worker.pid);
report(`memory: V8 flags ${v8Flags.length === 0 ? "(V8 defaults)" : v8Flags.join(",")}`);
report(
  `memory: ${fmt(EVENTS)} events backlog drained in ${seconds.toFixed(1)} s (${
    fmt(EVENTS / seconds)
  } events/s)`,
);
report("process                       | peak RSS (VmHWM) MB | limit MB | verdict");
report(`worker idle, before the backlog | ${idle.peak.toFixed(0).padStart(18)} |          |`);
report(
  `worker draining the backlog   | ${m.peak.toFixed(0).padStart(19)} | ${
    String(LIMIT_MB).padStart(8)
  } | ${m.peak < LIMIT_MB ? "ok" : "OVER"}`,
);
