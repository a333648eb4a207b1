import assert from "node:assert/strict";
import { maxOpenFiles, ProcessReader, virtualMemoryFromStat } from "./registry.ts";
import { createMetrics } from "./registry.ts";

Deno.test("process: the virtual memory field is counted from the last parenthesis of the command name", () => {
  const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
  fields[23 - 3] = "123456789";
  assert.equal(virtualMemoryFromStat(`42 (a) (b c) ${fields.join(" ")}\n`), 123456789);
  assert.equal(virtualMemoryFromStat("garbage"), undefined);
});

Deno.test("process: the open-files limit is the soft limit; unlimited reads as +Inf", () => {
  const limits = (soft: string) =>
    "Limit                     Soft Limit           Hard Limit           Units     \n" +
    `Max open files            ${soft}                524288               files     \n`;
  assert.equal(maxOpenFiles(limits("1024")), 1024);
  assert.equal(maxOpenFiles(limits("unlimited")), Infinity);
  assert.equal(maxOpenFiles("Max processes 10 10\n"), undefined);
});

Deno.test("process: a scrape reads this process (tests run with --allow-all, so /proc too)", async () => {
  const before = Date.now() / 1000;
  const sample = await new ProcessReader().sample();
  assert.ok((sample.residentMemoryBytes ?? 0) > 1_000_000, "resident memory in bytes");
  assert.ok((sample.virtualMemoryBytes ?? 0) >= (sample.residentMemoryBytes ?? 0));
  assert.ok((sample.cpuSeconds ?? 0) > 0);
  const start = sample.startTimeSeconds ?? 0;
  assert.ok(start <= before && start > before - 3600, `started before now: ${start}`);
  assert.ok((sample.openFds ?? 0) > 2, "stdin, stdout, stderr at least");
  assert.ok((sample.maxFds ?? 0) >= (sample.openFds ?? 0));
  // An open file shows up in the count.
  const file = await Deno.open(new URL(import.meta.url).pathname);
  try {
    const after = await new ProcessReader().sample();
    assert.ok((after.openFds ?? 0) > (sample.openFds ?? 0), "the open file is counted");
  } finally {
    file.close();
  }
});

Deno.test("process: the registry exports the six process series and CPU seconds never go down", async () => {
  const metrics = createMetrics();
  const read = async () => {
    const values = new Map<string, number>();
    for (const line of (await metrics.registry.metrics()).split("\n")) {
      if (line.startsWith("process_")) {
        values.set(line.slice(0, line.indexOf(" ")), Number(line.slice(line.indexOf(" ") + 1)));
      }
    }
    return values;
  };
  const first = await read();
  assert.deepEqual([...first.keys()].sort(), [
    "process_cpu_seconds_total",
    "process_max_fds",
    "process_open_fds",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_virtual_memory_bytes",
  ]);
  let spin = 0;
  for (let i = 0; i < 5_000_000; i++) spin += i;
  assert.ok(spin > 0);
  const second = await read();
  assert.ok(
    (second.get("process_cpu_seconds_total") ?? 0) >= (first.get("process_cpu_seconds_total") ?? 0),
  );
  assert.equal(second.get("process_start_time_seconds"), first.get("process_start_time_seconds"));
});
