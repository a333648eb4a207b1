/**
 * Several job servers and several workers: what an operator scaling out must be told, and the
 * guarantees that must hold when they do.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { createSchema, startTestWorker, testConfig } from "./helpers/worker.ts";
import { configureLogging, resetLogging } from "../src/log.ts";

interface LogLine {
  readonly level: string;
  readonly message: string;
  readonly properties: Record<string, unknown>;
}

async function withLogs<T>(fn: (logs: LogLine[]) => Promise<T>): Promise<T> {
  const logs: LogLine[] = [];
  await configureLogging({
    level: "info",
    format: "json",
    write: (line) => logs.push(JSON.parse(line)),
  });
  try {
    return await fn(logs);
  } finally {
    await resetLogging();
  }
}

// The broker module publishes every message to every job server it names; a worker given
// both servers of such a broker wrote every event twice, silently.
Deno.test("scale-out: two job servers log one start-up warning that every event may be processed twice", async () => {
  await using a = await startGearmand();
  await using b = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await withLogs(async (logs) => {
    {
      await using _one = await startTestWorker(
        testConfig({ gearmanServers: [a.addr], mysqlUrl: db.url }),
      );
    }
    const twice = (l: LogLine) => l.message.startsWith("worker: several Gearman job servers");
    assert.equal(logs.filter(twice).length, 0, "one server: no warning");
    {
      await using _two = await startTestWorker(
        testConfig({ gearmanServers: [a.addr, b.addr], mysqlUrl: db.url }),
      );
    }
    const lines = logs.filter(twice);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.level, "WARN");
    assert.equal(lines[0]?.properties["servers"], `${a.addr},${b.addr}`);
    assert.match(lines[0]?.message ?? "", /processed once per server/);
  });
});
