import assert from "node:assert/strict";
import { CANARY_TESTS, canaryConfig } from "./canary.ts";

Deno.test("canary: only the mysql2 imports move, the lock file is off, every listed test exists", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../deno.json", import.meta.url)));
  const canary = canaryConfig(config, "3") as { imports: Record<string, string>; lock: unknown };
  assert.equal(canary.imports["mysql2"], "npm:mysql2@3");
  assert.equal(canary.imports["mysql2/promise"], "npm:mysql2@3/promise");
  for (const [name, target] of Object.entries(config.imports as Record<string, string>)) {
    if (!name.startsWith("mysql2")) assert.equal(canary.imports[name], target, name);
  }
  assert.equal(canary.lock, false);
  for (const test of CANARY_TESTS) {
    await Deno.stat(new URL(`../${test}`, import.meta.url));
  }
});
