/**
 * Jobs/s consumed from a real gearmand: our client (one connection, grabs
 * pipelined up to the per-queue cap, D12) side by side with the `gearman`
 * command-line worker from Debian's gearman-tools (libgearman), in the same
 * run, against the same gearmand. Prints medians of 3 runs and the ratio.
 *
 *   deno run -A bench/gearman_consume.ts [--runs 3]
 *
 * Target (issue 2): ≥ 2× the libgearman worker for 100 B jobs, not slower for 20 KB.
 */
import { GearmanConsumer } from "../src/gearman/consumer.ts";
import { NOOP_OBSERVER } from "../src/consumer/contract.ts";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { fmt, median, report, submitMany } from "./_util.ts";

const runs = Number(Deno.args[Deno.args.indexOf("--runs") + 1] || 3) || 3;

async function ours(addr: string, fn: string, count: number): Promise<number> {
  let done = 0;
  const finished = Promise.withResolvers<void>();
  const consumer = new GearmanConsumer({
    servers: [addr],
    queues: [{ name: fn, inOrder: false }],
    maxJobsPerQueue: 8,
    handler: () => {
      if (++done === count) finished.resolve();
      return Promise.resolve();
    },
    observer: NOOP_OBSERVER,
    reconnectIntervalMs: 1000,
    drainTimeoutMs: 5000,
    statsIntervalMs: 0,
  });
  const t0 = performance.now();
  await consumer.start();
  await finished.promise;
  const seconds = (performance.now() - t0) / 1000;
  await consumer.stop();
  return count / seconds;
}

async function libgearman(addr: string, fn: string, count: number): Promise<number> {
  const [host, port] = addr.split(":") as [string, string];
  const t0 = performance.now();
  const out = await new Deno.Command("gearman", {
    args: ["-h", host, "-p", port, "-w", "-f", fn, "-c", String(count)],
    stdout: "null",
    stderr: "piped",
  }).output();
  const seconds = (performance.now() - t0) / 1000;
  if (!out.success) {
    throw new Error(`gearman worker failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return count / seconds;
}

report(`gearman_consume: ${runs} runs each, gearmand 1.1.20 (--threads=4), one connection`);
report("payload | jobs  | ours jobs/s | libgearman jobs/s | ratio");
await using gearmand = await startGearmand({ threads: 4 });
for (const [label, size, count] of [["100 B", 100, 20_000], ["20 KB", 20 * 1024, 5_000]] as const) {
  const payload = "x".repeat(size);
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < runs; r++) {
    const f1 = `bench_ours_${size}_${r}`;
    const f2 = `bench_lib_${size}_${r}`;
    await submitMany(gearmand.addr, f1, count, () => payload);
    a.push(await ours(gearmand.addr, f1, count));
    await submitMany(gearmand.addr, f2, count, () => payload);
    b.push(await libgearman(gearmand.addr, f2, count));
  }
  const ma = median(a);
  const mb = median(b);
  report(
    `${label.padEnd(7)} | ${String(count).padEnd(5)} | ${fmt(ma).padStart(11)} | ${
      fmt(mb).padStart(17)
    } | ${(ma / mb).toFixed(2)}x`,
  );
}
