/**
 * Peak resident memory (VmHWM) of a consumer process draining a backlog of
 * large jobs — 12 queues, 8 slots each, 20 MiB per job — with
 * `--max-in-flight-bytes` at its default (256 MiB) side by side with the
 * same consumer bounded only by its job slots (96 × 20 MiB in flight). The
 * handler parses each payload as JSON and holds it for 2 s, as a job waiting
 * for its commit to a slow MySQL does: that is when jobs pile up in flight.
 *
 *   deno run -A bench/large_jobs.ts [--jobs-per-queue 8] [--mib 20]
 *
 * The child mode (`--child <addr> <limit>`) is the measured process.
 */
import { GearmanConsumer } from "../src/gearman/consumer.ts";
import { NOOP_OBSERVER } from "../src/consumer/contract.ts";
import { DEFAULT_MAX_IN_FLIGHT_BYTES } from "../src/consumer/consumer.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { arg, fmt, peakRssMb, report, submitMany } from "./_util.ts";
import { V8_FLAGS } from "../tools/compile.ts";

const QUEUES = Array.from({ length: 12 }, (_, i) => `bench_large_${i}`);
const MIB = 1024 * 1024;

if (Deno.args[0] === "--child") {
  const addr = Deno.args[1] as string;
  const limit = Number(Deno.args[2]);
  let running = 0;
  let maxRunning = 0;
  const consumer = new GearmanConsumer({
    servers: [addr],
    queues: QUEUES.map((name) => ({ name, inOrder: false })),
    maxJobsPerQueue: 8,
    maxInFlightBytes: limit,
    handler: async (job) => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      const doc = JSON.parse(new TextDecoder().decode(job.payload));
      await new Promise((r) => setTimeout(r, 2_000));
      running--;
      if (doc === null) throw new Error("unreachable");
    },
    observer: NOOP_OBSERVER,
    reconnectIntervalMs: 500,
    drainTimeoutMs: 5_000,
    statsIntervalMs: 0,
    stallTimeoutMs: 0,
  });
  await consumer.start();
  Deno.stdout.writeSync(new TextEncoder().encode("started\n"));
  await new Promise<void>((resolve) => Deno.addSignalListener("SIGTERM", () => resolve()));
  await consumer.stop();
  Deno.stdout.writeSync(new TextEncoder().encode(`${maxRunning}\n`));
  Deno.exit(0);
}

const perQueue = arg("--jobs-per-queue", 8);
const mib = arg("--mib", 20);

/** A JSON bulk job of about `mib` MiB. */
function payload(): string {
  const entry = "x".repeat(64 * 1024);
  const n = Math.max(1, Math.floor((mib * MIB) / (entry.length + 40)));
  return `{"messages":[${Array.from({ length: n }, () => `{"logentry":"${entry}"}`).join(",")}]}`;
}

async function run(
  label: string,
  limit: number,
): Promise<{ peak: number; seconds: number; maxJobs: number }> {
  await using gearmand = await startGearmand();
  const body = payload();
  for (const q of QUEUES) await submitMany(gearmand.addr, q, perQueue, () => body);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      // The flags the compiled binary embeds, so the heap behaves as in production.
      `--v8-flags=${V8_FLAGS.join(",")}`,
      new URL(import.meta.url).pathname,
      "--child",
      gearmand.addr,
      String(limit),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.getReader();
  await reader.read();
  const t0 = performance.now();
  for (;;) {
    const rows = await adminStatus(gearmand.addr);
    if (rows.every((r) => r.total === 0)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const seconds = (performance.now() - t0) / 1000;
  const peak = peakRssMb(child.pid);
  child.kill("SIGTERM");
  let out = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    out += new TextDecoder().decode(value);
  }
  await child.status;
  const maxJobs = Number(out.trim().split("\n").at(-1));
  report(
    `large jobs: ${label}: drained in ${
      seconds.toFixed(1)
    } s, at most ${maxJobs} jobs in flight, peak RSS ${fmt(peak)} MB`,
  );
  return { peak, seconds, maxJobs };
}

report(
  `large jobs: ${QUEUES.length} queues × ${perQueue} jobs of ${mib} MiB, 8 slots per queue (${
    fmt(QUEUES.length * perQueue * mib)
  } MiB backlog)`,
);
const bounded = await run(
  `--max-in-flight-bytes ${DEFAULT_MAX_IN_FLIGHT_BYTES / MIB}MiB`,
  DEFAULT_MAX_IN_FLIGHT_BYTES,
);
const slotsOnly = await run("slots only (no byte bound)", Number.MAX_SAFE_INTEGER);
report("mode                   | jobs in flight | peak RSS MB | drain s | RSS vs slots only");
for (const [name, r] of [["byte-bounded (default)", bounded], ["slots only", slotsOnly]] as const) {
  report(
    `${name.padEnd(22)} | ${String(r.maxJobs).padStart(14)} | ${fmt(r.peak).padStart(11)} | ${
      r.seconds.toFixed(1).padStart(7)
    } | ${(r.peak / slotsOnly.peak).toFixed(2)}`,
  );
}
