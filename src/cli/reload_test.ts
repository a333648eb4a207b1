/**
 * The SIGHUP reload in-process: what it applies, what it only names, and that a broken file
 * keeps the settings in force (the process test is tests/reload_test.ts).
 */
import assert from "node:assert/strict";
import { reload, type ReloadableSettings } from "./mod.ts";
import { configureLogging, resetLogging } from "../log.ts";

async function reloadWith(
  before: ReloadableSettings,
  reread: () => Promise<ReloadableSettings>,
): Promise<{ lines: string[]; adopted: ReloadableSettings | undefined }> {
  const lines: string[] = [];
  const write = (l: string) => lines.push(l);
  await configureLogging({ level: before.logLevel ?? "info", format: "text", write });
  let adopted: ReloadableSettings | undefined;
  try {
    await reload({
      current: () => before,
      reread,
      adopt: (s) => (adopted = s),
      reopenDeadLetters: () => Promise.resolve("/var/lib/x/dead.ndjson"),
      logWrite: write,
    });
  } finally {
    await resetLogging();
  }
  return { lines, adopted };
}

Deno.test("reload: applies the log level, names other changes without their values", async () => {
  const { lines, adopted } = await reloadWith(
    { logLevel: "info", logFormat: "text", mysqlBatchSize: 100, mysqlUrl: "mysql://u:old@h/d" },
    () =>
      Promise.resolve({
        logLevel: "debug",
        logFormat: "text",
        mysqlBatchSize: 200,
        mysqlUrl: "mysql://u:new-secret@h/d",
      }),
  );
  const text = lines.join("");
  assert.equal(adopted?.logLevel, "debug");
  // Only what is applied changes; the rest waits for a restart.
  assert.equal(adopted?.mysqlBatchSize, 100);
  assert.match(text, /dead-letter file reopened/);
  assert.match(text, /settings=--mysql-batch-size,--mysql-url/);
  assert.match(text, /log_level=info->debug/);
  assert.ok(!text.includes("new-secret"));
});

Deno.test("reload: a settings file that no longer parses keeps the settings in force", async () => {
  const { lines, adopted } = await reloadWith(
    { logLevel: "info", logFormat: "text" },
    () => Promise.reject(new Error("config.yml: bad indentation")),
  );
  assert.equal(adopted, undefined);
  assert.match(lines.join(""), /cannot re-read the settings; keeping the current ones/);
  assert.match(lines.join(""), /bad indentation/);
});
