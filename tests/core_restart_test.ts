/**
 * Core restart end to end: gearmand → startWorker → MariaDB (D4, P7,
 * D.1).
 *
 * What would break without it: the Go worker's DELETE is not scoped by node and
 * wipes every other node's status rows in a shared database; a DELETE that does
 * not first commit what the status writer holds lets stale rows written just
 * before the restart survive it; a DELETE by the worker's clock instead of the
 * message's timestamp removes rows written after the restart, and a late-handled message
 * without a timestamp must not delete what the core sent after it.
 */
import assert from "node:assert/strict";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { lockTables, waitForBlocked } from "./helpers/mysql_lock.ts";
import { configureLogging, resetLogging } from "../src/log.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { adjustRow } from "../src/mysql/values.ts";
import type { Row } from "../src/events/types.ts";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const HOSTSTATUS = "statusengine_hoststatus";
const SERVICESTATUS = "statusengine_servicestatus";
const HOST_QUEUE = "statusngin_hoststatus";
const RESTART_QUEUE = "statusngin_core_restart";

/** Rows written straight into a status table (columns not given take their D6 defaults). */
async function insertRows(
  db: ScratchDatabase,
  table: typeof HOSTSTATUS | typeof SERVICESTATUS,
  rows: readonly Row[],
): Promise<void> {
  const values = rows.flatMap((r) => adjustRow(table, r).values);
  await db.query(insertStatement(TABLES[table], rows.length), values);
}

/** A hoststatus bulk job from the fixture with one event per (host, timestamp). */
function hostStatusJob(events: readonly { host: string; ts: number }[]): string {
  const doc = JSON.parse(Deno.readTextFileSync(new URL(`${HOST_QUEUE}.job`, FIXTURES)));
  const template = doc.messages[0];
  doc.messages = events.map(({ host, ts }) => {
    const m = structuredClone(template);
    m.timestamp = ts;
    m.hoststatus.name = host;
    return m;
  });
  return JSON.stringify(doc);
}

async function hostRows(db: ScratchDatabase): Promise<string[]> {
  const rows = await db.query<{ hostname: string; node_name: string; t: number }[]>(
    `SELECT hostname, node_name, status_update_time AS t FROM ${HOSTSTATUS} ORDER BY hostname`,
  );
  return rows.map((r) => `${r.hostname}@${r.node_name}:${Number(r.t)}`);
}

async function serviceRows(db: ScratchDatabase): Promise<string[]> {
  const rows = await db.query<{ service_description: string; node_name: string; t: number }[]>(
    `SELECT service_description, node_name, status_update_time AS t FROM ${SERVICESTATUS} ` +
      "ORDER BY service_description",
  );
  return rows.map((r) => `${r.service_description}@${r.node_name}:${Number(r.t)}`);
}

Deno.test("core restart: deletes only this node's status rows older than the message timestamp, after committing what the status writer held (D4, P7)", async () => {
  const cutoff = 1_760_000_000; // the message's timestamp; the worker's clock is far later
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertRows(db, HOSTSTATUS, [
    { hostname: "old-N", node_name: "N", status_update_time: cutoff - 100 },
    { hostname: "edge-N", node_name: "N", status_update_time: cutoff },
    { hostname: "new-N", node_name: "N", status_update_time: cutoff + 100 },
    { hostname: "old-OTHER", node_name: "OTHER", status_update_time: cutoff - 100 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "h", service_description: "old-N", node_name: "N", status_update_time: cutoff - 1 },
    { hostname: "h", service_description: "new-N", node_name: "N", status_update_time: cutoff + 1 },
    {
      hostname: "h",
      service_description: "old-OTHER",
      node_name: "OTHER",
      status_update_time: cutoff - 1000,
    },
  ]);
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
  );
  const hostWriter = worker.pipeline.writers[HOSTSTATUS];
  // Rows the table's writers hold, buffered or in a statement held by the lock.
  const held = () => hostWriter.shards.reduce((n, s) => n + s.buffered + s.statementRows, 0);

  const lock = await lockTables(db, [HOSTSTATUS]);
  try {
    // One status statement in flight (held by the lock) ...
    await publish(gearmand.addr, HOST_QUEUE, [
      hostStatusJob([{ host: "in-flight", ts: cutoff + 10 }]),
    ]);
    await waitForBlocked(db, "INSERT INTO `statusengine_hoststatus`%");
    // ... and two status rows held behind it, one of them older than the restart.
    await publish(gearmand.addr, HOST_QUEUE, [
      hostStatusJob([{ host: "held-old", ts: cutoff - 50 }, { host: "held-new", ts: cutoff + 50 }]),
    ]);
    await waitFor(() => held() === 3, { message: "three status rows held by the writers" });
    // The restart arrives while the writer still holds them.
    await publish(gearmand.addr, RESTART_QUEUE, [
      JSON.stringify({ object_type: 102, timestamp: cutoff }),
    ]);
    await waitFor(
      async () =>
        (await metricValue(worker, "statusengine_queue_jobs_in_flight", {
          queue_name: RESTART_QUEUE,
        })) === 1,
      { message: "restart job in its handler" },
    );
    // (The table cannot be read while the test holds its WRITE lock; the writers say the
    // rows are still uncommitted.)
    assert.equal(held(), 3);
  } finally {
    await lock.unlock();
  }
  await waitFor(async () =>
    (await jobsAtGearmand(gearmand.addr, RESTART_QUEUE)) === 0 &&
    (await jobsAtGearmand(gearmand.addr, HOST_QUEUE)) === 0 &&
    (await metricValue(worker, "statusengine_queue_jobs_total", {
        queue_name: RESTART_QUEUE,
        result: "completed",
      })) === 1, { message: "restart and status jobs completed" });

  assert.deepEqual(await hostRows(db), [
    `edge-N@N:${cutoff}`, // not older than the cutoff
    `held-new@N:${cutoff + 50}`,
    `in-flight@N:${cutoff + 10}`,
    `new-N@N:${cutoff + 100}`,
    `old-OTHER@OTHER:${cutoff - 100}`, // another node's row is never touched
  ]);
  assert.deepEqual(await serviceRows(db), [
    `new-N@N:${cutoff + 1}`,
    `old-OTHER@OTHER:${cutoff - 1000}`,
  ]);
  assert.equal(
    await metricValue(worker, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
});

Deno.test("core restart: without a timestamp the job's receive time is the cutoff, still scoped to this node (D4, D.1)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const now = Math.floor(Date.now() / 1000);
  await insertRows(db, HOSTSTATUS, [
    { hostname: "stale-N", node_name: "N", status_update_time: now - 3600 },
    { hostname: "ahead-N", node_name: "N", status_update_time: now + 3600 },
    { hostname: "stale-OTHER", node_name: "OTHER", status_update_time: now - 3600 },
  ]);
  await insertRows(db, SERVICESTATUS, [
    { hostname: "h", service_description: "stale-N", node_name: "N", status_update_time: now - 60 },
    { hostname: "h", service_description: "ahead-N", node_name: "N", status_update_time: now + 60 },
  ]);
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
  );
  // The fixture: {"object_type": 102, "timestamp": 0} — 0 means "not provided".
  await publish(gearmand.addr, RESTART_QUEUE, [
    await Deno.readTextFile(new URL(`${RESTART_QUEUE}.job`, FIXTURES)),
  ]);
  await waitFor(async () =>
    (await metricValue(worker, "statusengine_queue_jobs_total", {
      queue_name: RESTART_QUEUE,
      result: "completed",
    })) === 1, { message: "restart job completed" });
  assert.deepEqual(await hostRows(db), [
    `ahead-N@N:${now + 3600}`,
    `stale-OTHER@OTHER:${now - 3600}`,
  ]);
  assert.deepEqual(await serviceRows(db), [`ahead-N@N:${now + 60}`]);
});

// The incident: a worker started 30 s after a core restart handled the restart message (no
// timestamp) by its own clock and deleted the fresh status rows the core had published after
// the restart, which it had received alongside. The cutoff is now the time the job was
// received, capped at the newest status already written for this node.
Deno.test("core restart: a worker started after the restart keeps the status rows published after it (late start, D.1)", async () => {
  const restart = Math.floor(Date.now() / 1000) - 30;
  const newestBefore = restart - 5;
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertRows(db, HOSTSTATUS, [
    { hostname: "removed-N", node_name: "N", status_update_time: restart - 100 },
    { hostname: "kept-N", node_name: "N", status_update_time: newestBefore },
    { hostname: "old-OTHER", node_name: "OTHER", status_update_time: restart - 100 },
  ]);
  // What the core sent while no worker ran: the restart (no timestamp), then fresh status.
  await publish(gearmand.addr, RESTART_QUEUE, [JSON.stringify({ object_type: 102 })]);
  await publish(gearmand.addr, HOST_QUEUE, [
    hostStatusJob([{ host: "kept-N", ts: restart + 10 }, { host: "new-N", ts: restart + 20 }]),
  ]);

  const logs: { message: string; properties: Record<string, unknown> }[] = [];
  await configureLogging({
    level: "info",
    format: "json",
    write: (line) => logs.push(JSON.parse(line)),
  });
  try {
    // Reads pass, writes wait: the fresh rows cannot commit before the cutoff is taken,
    // so the restart's flush is what commits them, right before its DELETE.
    const lock = await lockTables(db, [HOSTSTATUS], { mode: "READ" });
    await using worker = await startTestWorker(
      testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, statusMaxAgeSeconds: 300 }),
    );
    try {
      await waitForBlocked(db, "INSERT INTO `statusengine_hoststatus`%");
      await waitFor(
        () => logs.some((l) => l.message.startsWith("pipeline: monitoring core restarted")),
        { message: "restart cutoff taken" },
      );
    } finally {
      await lock.unlock();
    }
    await waitFor(async () =>
      (await metricValue(worker, "statusengine_queue_jobs_total", {
          queue_name: RESTART_QUEUE,
          result: "completed",
        })) === 1 &&
      (await metricValue(worker, "statusengine_queue_jobs_total", {
          queue_name: HOST_QUEUE,
          result: "completed",
        })) === 1, { message: "restart and status jobs completed" });
    const line = logs.find((l) => l.message.startsWith("pipeline: monitoring core restarted"));
    assert.equal(line?.properties["cutoff"], newestBefore);
  } finally {
    await resetLogging();
  }
  assert.deepEqual(await hostRows(db), [
    `kept-N@N:${restart + 10}`,
    `new-N@N:${restart + 20}`,
    `old-OTHER@OTHER:${restart - 100}`,
  ]);
});
