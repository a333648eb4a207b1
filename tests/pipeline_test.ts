/**
 * End to end: gearmand → worker → MariaDB, with fixtures and synthetic
 * payloads, through the same assembly the `run` command uses.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";
import {
  assertFixtureRows,
  type DbRow,
  expectedRows,
  fixture,
  tableRows,
} from "./helpers/fixture_rows.ts";

Deno.test("pipeline: every fixture published through gearmand produces exactly its rows, column by column", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using _worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
  );
  const queues = QUEUE_NAMES.filter((q) => q !== "statusngin_core_restart");
  for (const q of queues) await publish(gearmand.addr, q, [fixture(q)]);
  for (const q of queues) {
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0, { message: q });
  }
  // Every job was acknowledged only after its rows were committed (D1): the rows are there now.
  await assertFixtureRows(db, queues);
  // Spot checks of the expected rows (docs/tables.md#appendix).
  const [hostcheck] = await db.query<DbRow[]>(
    "SELECT hostname, start_time_usec, is_hardstate, command FROM statusengine_hostchecks",
  );
  assert.equal(hostcheck?.["start_time_usec"], 701779);
  assert.equal(
    hostcheck?.["command"],
    "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
  );
  const nodes = await db.query<DbRow[]>("SELECT node_name FROM statusengine_nodes");
  assert.deepEqual(nodes.map((n) => n["node_name"]), ["N"], "node registered at start-up (D11)");
});

Deno.test("pipeline: the same jobs delivered twice leave every upsert table unchanged (docs/consumption.md#every-job-may-arrive-twice)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
  );
  const queues = QUEUE_NAMES.filter((q) =>
    q !== "statusngin_core_restart" && q !== "statusngin_logentries" &&
    q !== "statusngin_service_perfdata"
  );
  const snapshot = async () => {
    const out: Record<string, DbRow[]> = {};
    for (const q of queues) {
      for (const { table } of expectedRows(q)) out[table] = await tableRows(db, table);
    }
    return JSON.stringify(out);
  };
  for (const q of queues) await publish(gearmand.addr, q, [fixture(q)]);
  for (const q of queues) {
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0);
  }
  const first = await snapshot();
  for (const q of queues) await publish(gearmand.addr, q, [fixture(q)]);
  for (const q of queues) {
    await waitFor(async () =>
      (await jobsAtGearmand(gearmand.addr, q)) === 0 &&
      (await metricValue(worker, "statusengine_queue_jobs_total", {
          queue_name: q,
          result: "completed",
        })) === 2
    );
  }
  assert.equal(await snapshot(), first);
  assert.equal(
    await metricValue(worker, "statusengine_pipeline_errors_total", { component: "mysql" }),
    0,
  );
});

Deno.test("pipeline: malformed payloads are dead-lettered and counted, and the queue keeps flowing (D7)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const deadLetterFile = await Deno.makeTempFile({ suffix: ".ndjson" });
  try {
    await using worker = await startTestWorker(
      testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, deadLetterFile }),
    );
    const q = "statusngin_hostchecks";
    const good = JSON.parse(fixture(q));
    const withHost = (host: string, output?: string) => {
      const doc = structuredClone(good);
      doc.messages[0].hostcheck.host_name = host;
      if (output !== undefined) doc.messages[0].hostcheck.output = output;
      return JSON.stringify(doc);
    };
    const marked = withHost("umlaut-host", "Datentr#ger");
    const invalidUtf8 = new TextEncoder().encode(marked);
    invalidUtf8[marked.indexOf("Datentr#") + 7] = 0xe4; // a lone CP1252 "ä"
    const payloads: (string | Uint8Array)[] = [
      "this is not json",
      withHost("truncated").slice(0, 40),
      '{"messages":[{"type":801,"timestamp":"soon","hostcheck":{"host_name":5}}]}',
      "[1,2,3]",
      invalidUtf8,
      withHost("big-output", "x".repeat(10 * 1024 * 1024)),
      withHost("after-the-bad-ones"),
    ];
    await publish(gearmand.addr, q, payloads);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0, {
      timeoutMs: 30_000,
    });
    const hosts = (await db.query<DbRow[]>("SELECT hostname, output FROM statusengine_hostchecks"))
      .map((r) => [r["hostname"], String(r["output"]).length]);
    assert.deepEqual(
      hosts.map((h) => h[0]).sort(),
      ["after-the-bad-ones", "big-output", "umlaut-host"],
    );
    const big = hosts.find((h) => h[0] === "big-output");
    assert.equal(big?.[1], 1024, "a 10 MB output is truncated to the column (D6)");
    const [umlaut] = await db.query<DbRow[]>(
      "SELECT output FROM statusengine_hostchecks WHERE hostname = 'umlaut-host'",
    );
    assert.equal(umlaut?.["output"], "Datenträger");
    assert.equal(
      await metricValue(worker, "statusengine_queue_payloads_repaired_total", { queue_name: q }),
      1,
    );
    const letters = (await Deno.readTextFile(deadLetterFile)).trim().split("\n").map((l) =>
      JSON.parse(l)
    );
    assert.equal(letters.length, 4);
    assert.deepEqual(letters.map((l) => l.reason).sort(), [
      "bad_type",
      "not_json",
      "not_json",
      "not_object",
    ]);
    for (const l of letters) {
      assert.equal(l.queue, q);
      assert.ok(typeof l.time === "string" && typeof l.payload === "string");
    }
    const dead = await metricValue(worker, "statusengine_dead_letters_total", {
      queue_name: q,
      reason: "not_json",
    });
    assert.equal(dead, 2);
    assert.equal(
      await metricValue(worker, "statusengine_db_values_adjusted_total", {
        table: "statusengine_hostchecks",
        reason: "truncated",
      }),
      1,
    );
  } finally {
    await Deno.remove(deadLetterFile);
  }
});

Deno.test("pipeline: a job above the job size limit is dead-lettered unread as too_large with its size and first KiB, and the connection is kept", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const deadLetterFile = await Deno.makeTempFile({ suffix: ".ndjson" });
  try {
    await using worker = await startTestWorker(
      testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        deadLetterFile,
        maxJobSize: 256 * 1024,
      }),
    );
    const q = "statusngin_logentries";
    const oversize = `{"messages":[${"x".repeat(3 * 1024 * 1024)}]}`;
    await publish(gearmand.addr, q, [oversize, fixture(q)]);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0, {
      message: "both jobs acknowledged",
    });
    const [count] = await db.query<DbRow[]>("SELECT COUNT(*) AS n FROM statusengine_logentries");
    assert.ok(Number(count?.["n"]) > 0, "the job behind the oversize one was written");
    const letters = (await Deno.readTextFile(deadLetterFile)).trim().split("\n").map((l) =>
      JSON.parse(l)
    );
    assert.equal(letters.length, 1);
    assert.equal(letters[0].reason, "too_large");
    assert.equal(letters[0].queue, q);
    assert.equal(letters[0].bytes, oversize.length);
    assert.equal(letters[0].payload, oversize.slice(0, 1024));
    assert.equal(
      await metricValue(worker, "statusengine_dead_letters_total", {
        queue_name: q,
        reason: "too_large",
      }),
      1,
    );
    assert.equal(
      await metricValue(worker, "statusengine_queue_reconnects_total", { queue_name: q }),
      0,
      "the oversize job did not cost the connection",
    );
  } finally {
    await Deno.remove(deadLetterFile);
  }
});

Deno.test("pipeline: MySQL unreachable mid-stream holds every job until its rows are committed; nothing is lost (D1)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: proxy.url }),
  );
  const q = "statusngin_hostchecks";
  const template = JSON.parse(fixture(q));
  const job = (i: number) => {
    const doc = structuredClone(template);
    doc.messages = Array.from({ length: 10 }, (_, j) => {
      const m = structuredClone(template.messages[0]);
      m.hostcheck.host_name = `outage-${i}-${j}`;
      return m;
    });
    return JSON.stringify(doc);
  };
  await publish(gearmand.addr, q, Array.from({ length: 50 }, (_, i) => job(i)));
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0);
  assert.equal(await metricValue(worker, "statusengine_db_available"), 1);

  proxy.block();
  await publish(gearmand.addr, q, Array.from({ length: 200 }, (_, i) => job(50 + i)));
  await waitFor(async () => (await metricValue(worker, "statusengine_db_available")) === 0, {
    message: "db_available 0",
  });
  // An unreachable MySQL counts as slow: the queue's window shrinks to one job, and the jobs
  // already in flight wait for their commit.
  await waitFor(
    async () =>
      (await metricValue(worker, "statusengine_queue_window", { queue_name: q })) === 1 &&
      (await metricValue(worker, "statusengine_queue_jobs_in_flight", { queue_name: q })) > 0,
    { message: "window at one job, jobs waiting for their commit" },
  );
  // Nothing acknowledged while MySQL is away: every job is still at gearmand.
  const held = await jobsAtGearmand(gearmand.addr, q);
  assert.equal(held, 200, `jobs still at gearmand during the outage: ${held}`);
  const completedDuring = await metricValue(worker, "statusengine_queue_jobs_total", {
    queue_name: q,
    result: "completed",
  });
  assert.equal(completedDuring, 50, "no job completed while MySQL was unreachable");

  proxy.unblock();
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, q)) === 0, {
    timeoutMs: 30_000,
    message: "backlog drained after the outage",
  });
  assert.equal(await metricValue(worker, "statusengine_db_available"), 1);
  const [count] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_hostchecks WHERE hostname LIKE 'outage-%'",
  );
  assert.equal(Number(count?.n), 2500);
  assert.ok(await metricValue(worker, "statusengine_db_connection_retries_total") > 0);
});

Deno.test("pipeline: stale status snapshots are discarded and counted; history queues never age out (docs/payloads.md#stale-status)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // The fixtures are from July 2026: older than five minutes.
  await using worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, statusMaxAgeSeconds: 300 }),
  );
  for (const q of ["statusngin_hoststatus", "statusngin_hostchecks"] as const) {
    await publish(gearmand.addr, q, [fixture(q)]);
  }
  for (const q of ["statusngin_hoststatus", "statusngin_hostchecks"]) {
    await waitFor(async () =>
      (await metricValue(worker, "statusengine_queue_jobs_total", {
        queue_name: q,
        result: "completed",
      })) === 1
    );
  }
  assert.equal(
    await metricValue(worker, "statusengine_queue_events_discarded_stale_total", {
      queue_name: "statusngin_hoststatus",
    }),
    2,
  );
  const [status] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_hoststatus",
  );
  assert.equal(Number(status?.n), 0);
  const [checks] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_hostchecks",
  );
  assert.equal(Number(checks?.n), 1, "the equally old host check is history and is kept");
});

Deno.test("pipeline: a too_large job whose dead-letter record cannot be written is neither logged nor counted as written while it is retried", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await withLogs(async (logs) => {
    await using worker = await startTestWorker(
      testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        // Every write fails with ENOSPC: the job is retried and never acknowledged.
        deadLetterFile: "/dev/full",
        maxJobSize: 256 * 1024,
      }),
    );
    const q = "statusngin_logentries";
    await publish(gearmand.addr, q, [`{"messages":[${"x".repeat(512 * 1024)}]}`]);
    await waitFor(
      async () =>
        (await metricValue(worker, "statusengine_dead_letter_write_errors_total", {})) >= 2,
      { message: "two failed dead-letter writes" },
    );
    const claimed = logs.filter((l) => l.message.includes("job written to the dead-letter file"));
    const counted = await metricValue(worker, "statusengine_pipeline_errors_total", {
      component: "queue",
    });
    assert.deepEqual(
      [claimed.length, counted],
      [0, 0],
      `"written" log lines: ${claimed.length}, pipeline errors counted: ${counted}, records written: 0`,
    );
  });
});
