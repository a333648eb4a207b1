/**
 * The in-order lock against a real MariaDB: one holder at a time; a holder whose connection
 * dies takes its own lock again and keeps its place, and gives up only when another
 * connection really holds the lock.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase } from "../helpers/mysql.ts";
import { waitFor } from "../helpers/wait.ts";
import { mysqlOptionsFromUrl } from "../../src/mysql/url.ts";
import { holderStateAfter, lockVerdict, NamedLock } from "../../src/mysql/named_lock.ts";

Deno.test("named lock: the re-acquire decision gives up only when another connection holds the lock", () => {
  // 1 = this connection's, 0 = another connection's, NULL = free (check) or failed (GET_LOCK).
  assert.equal(lockVerdict(1), "own");
  assert.equal(lockVerdict(0), "taken");
  assert.equal(lockVerdict(null), "unknown");
  assert.equal(lockVerdict(undefined), "unknown");
  assert.equal(
    lockVerdict(new Error("Connection lost: The server closed the connection.")),
    "unknown",
  );
  assert.equal(holderStateAfter("own"), "holding");
  // Own lock lost (connection died, query failed, lock free): keep the place, take it again.
  assert.equal(holderStateAfter("unknown"), "reacquiring");
  // Taken by another worker: hand the in-order queues over.
  assert.equal(holderStateAfter("taken"), "lost");
});

function recordingLock(
  options: mysql.ConnectionOptions,
  name: string,
  who: string,
  events: string[],
): NamedLock {
  return new NamedLock({
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
    onSuspect: () => events.push(`${who} suspect`),
    onRegained: () => events.push(`${who} regained`),
  });
}

async function holderId(admin: mysql.Connection, name: string): Promise<number> {
  const [rows] = await admin.query("SELECT IS_USED_LOCK(?) AS id", [name]);
  return Number((rows as { id: number | null }[])[0]?.id ?? 0);
}

async function isFree(options: mysql.ConnectionOptions, name: string): Promise<boolean> {
  const check = await mysql.createConnection(options);
  try {
    const [rows] = await check.query("SELECT IS_FREE_LOCK(?) AS free", [name]);
    return Number((rows as { free: number }[])[0]?.free) === 1;
  } finally {
    await check.end();
  }
}

// Before, any failed check counted as a loss: a lone worker whose lock connection dropped
// stopped its in-order consumer and handed its job in flight back to gearmand, which queued
// it behind the jobs published after it (a downtime's ADD behind its START).
Deno.test("named lock: a holder whose connection the server kills takes its lock again and stays active", async () => {
  await using db = await createScratchDatabase();
  const options = mysqlOptionsFromUrl(db.url);
  const name = `se_test_${crypto.randomUUID().slice(0, 8)}`;
  const events: string[] = [];
  const a = recordingLock(options, name, "A", events);
  const admin = await mysql.createConnection(options);
  try {
    a.start();
    await waitFor(() => a.active, { message: "A elected" });
    const before = await holderId(admin, name);
    assert.ok(before > 0);
    await admin.query(`KILL ${before}`);
    await waitFor(() => events.includes("A regained"), { message: "A took its lock again" });
    assert.deepEqual(events, ["A held", "A suspect", "A regained"]);
    assert.equal(a.active, true);
    assert.equal(a.reacquiring, false);
    const after = await holderId(admin, name);
    assert.ok(after > 0 && after !== before, "held on a new connection");
  } finally {
    await a.stop();
    await admin.end();
  }
  assert.deepEqual(events, ["A held", "A suspect", "A regained", "A lost"]);
  assert.ok(await isFree(options, name), "released on stop");
});

// Without the loss check and the grace, a holder whose lock connection was killed kept consuming
// while the next holder started: two workers applying downtimes at once
// (docs/consumption.md#downtimes-in-order).
Deno.test("named lock: a holder whose lock another connection took meanwhile stops before the next holder starts", async () => {
  await using db = await createScratchDatabase();
  const options = mysqlOptionsFromUrl(db.url);
  const name = `se_test_${crypto.randomUUID().slice(0, 8)}`;
  const events: string[] = [];
  const a = recordingLock(options, name, "A", events);
  const b = recordingLock(options, name, "B", events);
  const admin = await mysql.createConnection(options);
  const other = await mysql.createConnection(options);
  try {
    a.start();
    await waitFor(() => a.active, { message: "A elected" });
    const id = await holderId(admin, name);
    assert.ok(id > 0);
    // Another worker already waits for the lock: MySQL hands it over the moment A's
    // connection ends, before A can ask for it again.
    const [ownId] = await other.query("SELECT CONNECTION_ID() AS id");
    const otherId = Number((ownId as { id: number }[])[0]?.id);
    const taken = other.query("SELECT GET_LOCK(?, 30) AS v", [name]);
    await waitFor(async () => {
      const [rows] = await admin.query(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT GET_LOCK%'",
        [otherId],
      );
      return Number((rows as { n: number }[])[0]?.n) === 1;
    }, { message: "the other connection waits for the lock" });
    await admin.query(`KILL ${id}`);
    const [got] = await taken;
    assert.equal(Number((got as { v: number }[])[0]?.v), 1);
    await waitFor(() => events.includes("A lost"), { message: "A gave up" });
    assert.deepEqual(events, ["A held", "A suspect", "A lost"]);
    assert.equal(a.active, false);
    await a.stop();
    // The next worker gets it once the other connection lets go.
    b.start();
    await other.query("SELECT RELEASE_LOCK(?)", [name]);
    await waitFor(() => b.active, { message: "B took over" });
    assert.deepEqual(events, ["A held", "A suspect", "A lost", "B held"]);
  } finally {
    await a.stop();
    await b.stop();
    await admin.end();
    await other.end();
  }
  assert.deepEqual(events, ["A held", "A suspect", "A lost", "B held", "B lost"]);
  assert.ok(await isFree(options, name), "released on stop");
});
