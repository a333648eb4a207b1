/**
 * `deno task bench`: every end-to-end benchmark, one after another (each
 * compares side by side within its own run and prints ratios), under one
 * header naming the date and the machine (docs/performance.md copies it).
 */
import { formatMachine, machineInfo, report } from "./_util.ts";

report(formatMachine(await machineInfo()));
const BENCHES = [
  "stages.ts",
  "gearman_consume.ts",
  "pipeline.ts",
  "statement_timeout.ts",
  "status_upsert.ts",
  "websocket.ts",
  "http_listen.ts",
  "shutdown.ts",
  "memory.ts",
  "live_rate.ts",
  "cleanup.ts",
  "perfdata_backends.ts",
  "scale_out.ts",
];

let failed = 0;
for (const name of BENCHES) {
  const { code } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", new URL(name, import.meta.url).pathname],
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (code !== 0) failed++;
  Deno.stdout.writeSync(new TextEncoder().encode("\n"));
}
Deno.exit(failed === 0 ? 0 : 1);
