import assert from "node:assert/strict";
import { formatMachine, machineInfo } from "./_util.ts";

Deno.test("bench header: date, machine, Deno and commit in one line", () => {
  const line = formatMachine({
    date: new Date("2026-12-03T14:02:20Z"),
    cpu: "AMD EPYC",
    cpus: 2,
    memoryBytes: 23 * 2 ** 30,
    os: "6.1.0-28-cloud-amd64",
    deno: "2.9.6",
    commit: "a40e4f8",
  });
  assert.equal(
    line,
    "measured 2026-12-03 14:02 UTC on 2 × AMD EPYC, 23 GiB RAM, Linux 6.1.0-28-cloud-amd64, " +
      "Deno 2.9.6, commit a40e4f8",
  );
});

Deno.test("bench header: read from this machine and checkout", async () => {
  const info = await machineInfo();
  assert.ok(info.cpus >= 1);
  assert.ok(info.memoryBytes > 0);
  assert.match(info.commit, /^([0-9a-f]{7,}|unknown)$/);
});
