/**
 * The in-order lock against a real MariaDB: one holder at a time, and a holder whose
 * connection the server killed stops before anyone else starts.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase } from "../../tests/helpers/mysql.ts";
import { waitFor } from "../../tests/helpers/wait.ts";
import { mysqlOptionsFromUrl } from "./url.ts";
import { NamedLock } from "./named_lock.ts";

// Without the loss check and the grace, a holder whose lock connection was killed kept
// consuming while the next holder started: two workers applying downtimes at once (G3).
Deno.test("named lock: a holder whose connection the server kills stops before the next holder starts", async () => {
  await using db = await createScratchDatabase();
  const options = mysqlOptionsFromUrl(db.url);
  const name = `se_test_${crypto.randomUUID().slice(0, 8)}`;
  const events: string[] = [];
  const lock = (who: string) =>
    new NamedLock({
      connect: () => mysql.createConnection(options),
      name,
      pollMs: 100,
      graceMs: 400,
      onHeld: () => {
        events.push(`${who} held`);
        return Promise.resolve();
      },
      onLost: () => {
        events.push(`${who} lost`);
        return Promise.resolve();
      },
    });
  const a = lock("A");
  const b = lock("B");
  try {
    a.start();
    await waitFor(() => a.active, { message: "A elected" });
    b.start();
    // B competes for a while (several polls) without getting it.
    const admin = await mysql.createConnection(options);
    try {
      const [rows] = await admin.query("SELECT IS_USED_LOCK(?) AS id", [name]);
      const id = Number((rows as { id: number }[])[0]?.id);
      assert.ok(id > 0);
      assert.deepEqual(events, ["A held"]);
      await admin.query(`KILL ${id}`);
    } finally {
      await admin.end();
    }
    await waitFor(() => b.active, { message: "B took over" });
    assert.deepEqual(events, ["A held", "A lost", "B held"]);
    assert.equal(a.active, false);
  } finally {
    await a.stop();
    await b.stop();
  }
  assert.deepEqual(events, ["A held", "A lost", "B held", "B lost"]);
  const check = await mysql.createConnection(options);
  try {
    const [rows] = await check.query("SELECT IS_FREE_LOCK(?) AS free", [name]);
    assert.equal(Number((rows as { free: number }[])[0]?.free), 1, "released on stop");
  } finally {
    await check.end();
  }
});
