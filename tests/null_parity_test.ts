/**
 * Where the legacy worker writes SQL NULL and dashboards/queries built on its tables test
 * `IS NULL`: a notification without acknowledgement data (`ack_author`/`ack_data` JSON null,
 * what the core sends for every notification that is not an acknowledgement or custom one)
 * and a perfdata gauge without a unit. Real fixture payloads through the real pipeline into
 * MariaDB.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "./helpers/mysql.ts";
import { createSchema } from "./helpers/worker.ts";
import { fixture } from "./helpers/fixture_rows.ts";
import { testPipeline } from "./helpers/pipeline.ts";
import type { QueueName } from "../src/events/queues.ts";

/** The fixture with `ack_author` and `ack_data` set to JSON null in every event. */
function withoutAck(queue: QueueName, payloadKey: string): string {
  const doc = JSON.parse(fixture(queue));
  for (const m of doc.messages ?? [doc]) {
    m[payloadKey].ack_author = null;
    m[payloadKey].ack_data = null;
  }
  return JSON.stringify(doc);
}

Deno.test("null parity: ack_author/ack_data of the four notification tables and a missing perfdata unit are SQL NULL, as the legacy worker writes them", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const pool = mysql.createPool({ ...connectionOptionsOf(db), connectionLimit: 4 });
  const pipeline = testPipeline(pool);
  try {
    const jobs: [QueueName, string][] = [
      ["statusngin_notifications", withoutAck("statusngin_notifications", "notification_data")],
      [
        "statusngin_contactnotificationmethod",
        withoutAck("statusngin_contactnotificationmethod", "contactnotificationmethod"),
      ],
      // A host-side contact notification method as well, so all four tables get a row.
      [
        "statusngin_contactnotificationmethod",
        (() => {
          const doc = JSON.parse(
            withoutAck("statusngin_contactnotificationmethod", "contactnotificationmethod"),
          );
          for (const m of doc.messages ?? [doc]) {
            m.contactnotificationmethod.service_description = null;
          }
          return JSON.stringify(doc);
        })(),
      ],
      ["statusngin_service_perfdata", fixture("statusngin_service_perfdata")],
    ];
    let n = 0;
    for (const [queue, payload] of jobs) {
      await pipeline.handler({
        queue,
        server: "test",
        handle: `H:${++n}`,
        unique: "",
        payload: new TextEncoder().encode(payload),
        receivedAt: Date.now(),
      }, AbortSignal.timeout(30_000));
    }
    for (
      const table of [
        "statusengine_host_notifications",
        "statusengine_service_notifications",
        "statusengine_host_notifications_log",
        "statusengine_service_notifications_log",
      ]
    ) {
      const rows = await db.query<{ a: number; d: number; n: number }[]>(
        `SELECT SUM(ack_author IS NULL) AS a, SUM(ack_data IS NULL) AS d, COUNT(*) AS n FROM ${table}`,
      );
      const { a, d, n: count } = rows[0] ?? { a: 0, d: 0, n: 0 };
      assert.ok(Number(count) > 0, `${table} has rows`);
      assert.equal(Number(a), Number(count), `${table}.ack_author IS NULL`);
      assert.equal(Number(d), Number(count), `${table}.ack_data IS NULL`);
    }
    const units = await db.query<{ label: string; unit: string | null }[]>(
      "SELECT label, unit FROM statusengine_perfdata ORDER BY label",
    );
    assert.deepEqual(units.map((u) => [u.label, u.unit]), [
      ["pl", "%"],
      ["rta", "ms"],
      ["swap", "MB"],
      ["users", null],
    ]);
    // The fixture's own acknowledgement data is still written as sent (another key: the
    // tables ignore a second event of the same notification).
    const acknowledged = JSON.parse(fixture("statusngin_contactnotificationmethod"));
    for (const m of acknowledged.messages ?? [acknowledged]) m.timestamp_usec += 1;
    await pipeline.handler({
      queue: "statusngin_contactnotificationmethod",
      server: "test",
      handle: "H:ack",
      unique: "",
      payload: new TextEncoder().encode(JSON.stringify(acknowledged)),
      receivedAt: Date.now(),
    }, AbortSignal.timeout(30_000));
    const acked = await db.query<{ ack_author: string | null }[]>(
      "SELECT ack_author FROM statusengine_service_notifications WHERE ack_author IS NOT NULL",
    );
    assert.deepEqual(acked.map((r) => r.ack_author), ["Daniel Z"]);
  } finally {
    await pipeline.close(5_000);
    await pool.end();
  }
});
