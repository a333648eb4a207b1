/**
 * The job handler through the delivery engine, with a payload the engine owns and frees when the
 * delivery ends: what the handler reports after an await must not read the freed bytes.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { createSchema } from "../helpers/worker.ts";
import { testPipeline } from "../helpers/pipeline.ts";
import { withLogs } from "../helpers/logs.ts";
import { waitFor } from "../helpers/wait.ts";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import { type Job, NOOP_OBSERVER } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";

Deno.test("handler: an undecodable job given up while its dead-letter record is written logs its real size, not the freed buffer's", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 2 });
  const written = Promise.withResolvers<void>();
  const pipeline = testPipeline(pool, {
    // A slow disk: the record is written only after the drain deadline gave the job up.
    deadLetters: { write: () => written.promise, close: () => Promise.resolve() },
  });
  try {
    await withLogs(async (logs) => {
      const engine = new DeliveryEngine({
        handler: pipeline.handler,
        observer: NOOP_OBSERVER,
        deadLetter: () => Promise.resolve(),
        name: "test",
        log: getLogger("test"),
      });
      const payload = new TextEncoder().encode("this is not json");
      const job: Job = {
        queue: "statusngin_hostchecks",
        server: "s",
        handle: "H:1",
        unique: "",
        payload,
        receivedAt: Date.now(),
      };
      const abort = new AbortController();
      const delivered = engine.deliver({ job, ownsPayload: true }, { complete: () => true }, {
        abort: abort.signal,
        stopRetries: new AbortController().signal,
      });
      abort.abort(new DOMException("drain deadline reached", "TimeoutError"));
      assert.equal(await delivered, "abandoned");
      assert.equal(job.payload.length, 0, "the engine freed the payload");
      written.resolve();
      const logged = () => logs.find((l) => l.message.includes("undecodable payload written"));
      await waitFor(() => logged() !== undefined, { message: "the dead-letter log line" });
      const bytes = logged()?.properties["bytes"];
      assert.equal(bytes, 16, `logged bytes: ${bytes}`);
    });
  } finally {
    await pipeline.close(5_000);
    await pool.end();
  }
});
