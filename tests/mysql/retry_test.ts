/**
 * runWithRetry (docs/writers.md#retry-policy) with real MySQL failures: a duplicate key (1062,
 * permanent) from a scratch database and ECONNREFUSED from a port nobody listens on.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase } from "../helpers/mysql.ts";
import { freePort } from "../helpers/gearmand.ts";
import { runWithRetry } from "../../src/mysql/retry.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import { MysqlWriteError } from "../../src/mysql/errors.ts";
import { createMetrics } from "../../src/metrics/registry.ts";
import { deadline } from "../../src/util/async.ts";

// Without this, a deterministic error would be re-sent (triplicating the log
// line and slowing shutdown) or, worse, held forever as if MySQL were down.
Deno.test("runWithRetry: a rejected row is thrown after exactly one attempt (docs/writers.md#retry-policy)", async () => {
  await using db = await createScratchDatabase();
  await db.query("CREATE TABLE t (id int PRIMARY KEY)");
  await db.query("INSERT INTO t VALUES (1)");
  const metrics = createMetrics();
  let attempts = 0;
  using never = deadline(10_000);
  const failure = await runWithRetry(async () => {
    attempts++;
    await db.query("INSERT INTO t VALUES (1)");
  }, {
    table: "t",
    availability: new DbAvailability(metrics.dbAvailable),
    signal: never.signal,
    metrics,
  }).then(() => undefined, (err: unknown) => err);
  assert.ok(failure instanceof MysqlWriteError, String(failure));
  assert.equal(failure.kind, "row");
  assert.equal(failure.code, "1062");
  assert.equal(attempts, 1);
  assert.equal((await metrics.dbBatchRetries.get()).values[0]?.value ?? 0, 0);
  assert.equal((await metrics.dbConnectionRetries.get()).values[0]?.value ?? 0, 0);
});

Deno.test("runWithRetry: an unreachable server is held until the signal aborts, also mid-backoff (D1)", async () => {
  const port = freePort(); // nobody listens: every attempt is ECONNREFUSED
  const metrics = createMetrics();
  const availability = new DbAvailability(metrics.dbAvailable);
  const controller = new AbortController();
  let attempts = 0;
  let firstFailure: (() => void) | undefined;
  const failedOnce = new Promise<void>((resolve) => (firstFailure = resolve));
  const held = runWithRetry(async () => {
    attempts++;
    try {
      const conn = await mysql.createConnection({ host: "127.0.0.1", port, user: "root" });
      await conn.end();
    } finally {
      if (attempts === 2) firstFailure?.();
    }
  }, {
    table: "t",
    availability,
    signal: controller.signal,
    metrics,
  });
  const outcome = held.then(() => "resolved", (err: unknown) => err);
  await failedOnce;
  // One macrotask later the runner has classified the second failure and sits in its 200 ms back-off.
  await new Promise((r) => setTimeout(r, 0));
  assert.equal((await metrics.dbAvailable.get()).values[0]?.value, 0, "db_available 0 while held");
  controller.abort(new DOMException("shutdown", "AbortError"));
  // The runner sits in a 200 ms back-off: it must settle before even a 0 ms timer
  // set after the abort fires, i.e. the abort ends the back-off itself.
  const first = await Promise.race([
    outcome.then((r) => ({ settled: r })),
    new Promise<"timer">((r) => setTimeout(() => r("timer"), 0)),
  ]);
  assert.notEqual(first, "timer", "the back-off ended with the abort");
  const result = await outcome;
  assert.ok(result instanceof DOMException && result.name === "AbortError", String(result));
  assert.equal(attempts, 2);
  assert.ok(((await metrics.dbConnectionRetries.get()).values[0]?.value ?? 0) >= 1);
});
