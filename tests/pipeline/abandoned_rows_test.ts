/**
 * A job given up at the drain deadline is not acknowledged and comes back from the broker: the
 * shutdown flush must not commit its rows as well (docs/writers.md#give-back).
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { createSchema } from "../helpers/worker.ts";
import { testPipeline } from "../helpers/pipeline.ts";
import { fixture } from "../helpers/fixture_rows.ts";
import { waitFor } from "../helpers/wait.ts";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import { type Job, NOOP_OBSERVER } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";

const Q = "statusngin_logentries";

Deno.test("abandoned rows: the shutdown flush drops the buffered rows of a job given up at the drain deadline (it is redelivered; a keyless table would get them twice)", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 2 });
  const pipeline = testPipeline(pool);
  const writer = pipeline.writers.statusengine_logentries;
  try {
    const engine = new DeliveryEngine({
      handler: pipeline.handler,
      observer: NOOP_OBSERVER,
      deadLetter: () => Promise.resolve(),
      name: "test",
      log: getLogger("test"),
    });
    const job: Job = {
      queue: Q,
      server: "s",
      handle: "H:1",
      unique: "",
      payload: new TextEncoder().encode(fixture(Q)),
      receivedAt: Date.now(),
    };
    // The writer sends nothing while paused: the job's rows wait in its buffer, as behind a slow
    // statement when the drain deadline comes.
    const resume = Promise.withResolvers<void>();
    const paused = writer.withPaused(() => resume.promise);
    const abort = new AbortController();
    const delivered = engine.deliver({ job, ownsPayload: true }, { complete: () => true }, {
      abort: abort.signal,
      stopRetries: new AbortController().signal,
    });
    await waitFor(() => writer.buffered > 0, { message: "the job's rows buffered" });
    abort.abort(new DOMException("drain deadline reached", "TimeoutError"));
    assert.equal(await delivered, "abandoned");
    resume.resolve();
    await paused;
    // The "flush writers" step.
    await pipeline.close(5_000);
    const [rows] = await pool.query("SELECT COUNT(*) AS n FROM statusengine_logentries");
    const n = Number((rows as { n: number }[])[0]?.n);
    assert.equal(n, 0, `rows of the abandoned job committed by the shutdown flush: ${n}`);
  } finally {
    await pipeline.close(5_000);
    await pool.end();
  }
});
