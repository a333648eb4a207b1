/**
 * The metrics surface of a fresh worker: every catalogue name with its type,
 * every documented pre-created series at its starting value, and the health
 * endpoints (docs/operations.md#metrics, D10).
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  publish,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "./helpers/worker.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { fixtureAged } from "./helpers/fixture_rows.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";
import { METRICS, type MetricSpec } from "../src/metrics/catalogue.ts";
import { createMetrics, precreateSeries } from "../src/metrics/registry.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";
import { INVALID_REASONS } from "../src/events/types.ts";
import { ADJUSTMENT_REASONS } from "../src/mysql/values.ts";
import { batchedTables, downtimeTables } from "../src/pipeline/pipeline.ts";
import { metricsObserver } from "../src/consumer/metrics_observer.ts";

function series(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

function key(name: string, labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return parts.length === 0 ? name : `${name}{${parts.join(",")}}`;
}

Deno.test("metrics: a fresh worker exports every catalogue metric with its type and every pre-created series", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /text\/plain/);
  const text = await res.text();
  for (const raw of Object.values(METRICS)) {
    const m: MetricSpec = raw;
    assert.ok(text.includes(`# TYPE ${m.name} ${m.type}\n`), `${m.name} is a ${m.type}`);
  }
  const values = series(text);
  const expect = (name: string, labels: Record<string, string>, value: number) => {
    const k = key(name, labels);
    assert.equal(values.get(k), value, `${k} = ${value}`);
  };
  const tables = [...batchedTables(), ...downtimeTables()].map((t) => t.name);
  assert.equal(tables.length, 20); // 14 batched, 4 downtime tables, the tombstones and the announcements
  assert.equal(batchedTables().length, 14);
  for (const q of QUEUE_NAMES) {
    expect("statusengine_queue_messages_received_total", { queue_name: q }, 0);
    expect("statusengine_queue_payloads_repaired_total", { queue_name: q }, 0);
    expect("statusengine_queue_jobs_in_flight", { queue_name: q }, 0);
    expect("statusengine_queue_reconnects_total", { queue_name: q }, 0);
    expect("statusengine_queue_handler_duration_seconds_count", { queue_name: q }, 0);
    for (const result of ["completed", "abandoned"]) {
      expect("statusengine_queue_jobs_total", { queue_name: q, result }, 0);
    }
    for (const reason of [...INVALID_REASONS, "sql_rejected"]) {
      expect("statusengine_dead_letters_total", { queue_name: q, reason }, 0);
    }
    // Connected for real by now: the series exists and reads 1.
    expect("statusengine_queue_connected", { queue_name: q }, 1);
  }
  const stale = [...values.keys()].filter((k) =>
    k.startsWith("statusengine_queue_events_discarded_stale_total")
  );
  assert.deepEqual(stale.sort(), [
    'statusengine_queue_events_discarded_stale_total{queue_name="statusngin_hoststatus"}',
    'statusengine_queue_events_discarded_stale_total{queue_name="statusngin_servicestatus"}',
  ]);
  for (const t of tables) expect("statusengine_db_events_written_total", { table: t }, 0);
  for (const t of batchedTables().map((b) => b.name)) {
    expect("statusengine_db_flushes_total", { table: t }, 0);
    expect("statusengine_db_batch_flush_duration_seconds_count", { table: t }, 0);
    for (const reason of ADJUSTMENT_REASONS) {
      expect("statusengine_db_values_adjusted_total", { table: t, reason }, 0);
    }
  }
  for (const t of downtimeTables().map((d) => d.name)) {
    assert.equal(values.has(key("statusengine_db_flushes_total", { table: t })), false);
  }
  for (const c of ["mysql", "websocket", "graphite", "queue", "command"]) {
    expect("statusengine_pipeline_errors_total", { component: c }, 0);
  }
  expect("statusengine_db_available", {}, 1);
  expect("statusengine_graphite_available", {}, 1);
  expect("statusengine_queue_downtime_updates_unmatched_total", {}, 0);
  const build = [...values.keys()].filter((k) => k.startsWith("statusengine_build_info"));
  assert.equal(build.length, 1, "exactly one build_info series");
  assert.match(
    build[0] ?? "",
    /version="[^"]+",deno_version="\d+\.\d+\.\d+",commit="([^"]+)",revision="\1"/,
    "revision (the Go worker's label) repeats commit",
  );
});

Deno.test("metrics: queue_connected is not pre-created, and pre-creation never resets a counter (D10)", async () => {
  const metrics = createMetrics();
  const values = {
    queues: QUEUE_NAMES,
    statusQueues: ["statusngin_hoststatus", "statusngin_servicestatus"],
    jobResults: ["completed", "abandoned"],
    deadLetterReasons: [...INVALID_REASONS, "sql_rejected"],
    tables: [...batchedTables(), ...downtimeTables()].map((t) => t.name),
    batchedTables: batchedTables().map((t) => t.name),
    adjustReasons: ADJUSTMENT_REASONS,
    components: ["mysql"],
  };
  precreateSeries(metrics, values);
  const text = await metrics.registry.metrics();
  assert.ok(!/^statusengine_queue_connected\{/m.test(text));
  metrics.queueMessagesReceived.inc({ queue_name: "statusngin_hostchecks" }, 5);
  precreateSeries(metrics, values);
  const after = series(await metrics.registry.metrics());
  assert.equal(
    after.get('statusengine_queue_messages_received_total{queue_name="statusngin_hostchecks"}'),
    5,
  );
});

Deno.test("metrics: /healthz answers while alive; /readyz only while MySQL is available and every queue connected", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: proxy.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  const get = async (path: string) => {
    const res = await fetch(`http://127.0.0.1:${worker.metricsPort}${path}`);
    return { status: res.status, text: await res.text() };
  };
  assert.equal((await get("/healthz")).status, 200);
  assert.equal((await get("/readyz")).status, 200);
  assert.equal((await get("/nope")).status, 404);

  await gearmand.stop();
  await waitFor(async () => (await get("/readyz")).status === 503, { message: "not ready" });
  assert.match((await get("/readyz")).text, /not connected: statusngin_/);
  assert.equal((await get("/healthz")).status, 200, "alive while not ready");
  await gearmand.restart();
  await waitFor(async () => (await get("/readyz")).status === 200, {
    message: "ready after reconnect",
  });

  // MySQL away: the first failed flush marks it unavailable.
  proxy.block();
  const { publish } = await import("./helpers/worker.ts");
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  await publish(gearmand.addr, "statusngin_logentries", [fixture]);
  await waitFor(async () => (await get("/readyz")).status === 503, { message: "MySQL down" });
  assert.match((await get("/readyz")).text, /MySQL unavailable/);
  proxy.unblock();
  await waitFor(async () => (await get("/readyz")).status === 200, { timeoutMs: 15_000 });
});

Deno.test("metrics: retries and stalls reported by a consumer reach statusengine_queue_jobs_retried_total and statusengine_queue_stalled", async () => {
  const metrics = createMetrics();
  const observer = metricsObserver(metrics);
  const q = "statusngin_hostchecks";
  observer.jobRetried(q);
  observer.jobRetried(q);
  observer.queueStalled(q, true);
  let text = series(await metrics.registry.metrics());
  assert.equal(text.get(key("statusengine_queue_jobs_retried_total", { queue_name: q })), 2);
  assert.equal(text.get(key("statusengine_queue_stalled", { queue_name: q })), 1);
  assert.ok(observer.stalled.has(q), "/readyz sees the stalled queue");
  observer.queueStalled(q, false);
  text = series(await metrics.registry.metrics());
  assert.equal(text.get(key("statusengine_queue_stalled", { queue_name: q })), 0);
  assert.ok(!observer.stalled.has(q));
});

Deno.test("metrics: a worker process under narrow permissions exports its memory, CPU and start time, and no made-up /proc series", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const startedBefore = Date.now() / 1000;
  // --allow-read without --allow-all, as the packaged binary: Deno refuses /proc then.
  await using worker = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url });
  const values = series(await worker.metrics());
  assert.ok((values.get("process_resident_memory_bytes") ?? 0) > 10_000_000);
  assert.ok((values.get("process_cpu_seconds_total") ?? 0) > 0);
  const start = values.get("process_start_time_seconds") ?? 0;
  assert.ok(
    start >= startedBefore - 1 && start <= Date.now() / 1000,
    `the worker's own start time (${start})`,
  );
  for (const name of ["process_open_fds", "process_max_fds", "process_virtual_memory_bytes"]) {
    assert.equal(values.has(name), false, `${name} is absent, not 0, when /proc is refused`);
  }
});

Deno.test("metrics: a flush is timed under its own table", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  const scrape = async () =>
    series(await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text());
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  await publish(gearmand.addr, "statusngin_logentries", [fixture]);
  const count = (table: string) =>
    key("statusengine_db_batch_flush_duration_seconds_count", { table });
  await waitFor(async () => (await scrape()).get(count("statusengine_logentries")) === 1, {
    message: "the logentries flush to be timed",
  });
  const values = await scrape();
  assert.equal(values.get(count("statusengine_hostchecks")), 0, "other tables untouched");
  assert.ok(
    (values.get(key("statusengine_db_batch_flush_duration_seconds_sum", {
      table: "statusengine_logentries",
    })) ?? 0) > 0,
  );
});

/** `statusengine_queue_backlog` of one queue, or undefined while the series is absent. */
async function backlogOf(port: number | null, queue: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return series(text).get(key("statusengine_queue_backlog", { queue_name: queue }));
}

Deno.test("metrics: statusengine_queue_backlog shows the jobs waiting at gearmand, and is absent while gearmand cannot be asked", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  const q = "statusngin_logentries";
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: proxy.url,
    queues: [q],
    queueBacklogIntervalMs: 100,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  await waitFor(async () => (await backlogOf(worker.metricsPort, q)) === 0, {
    message: "an empty backlog read as 0",
  });
  // MySQL away: the worker holds what its window took, the rest waits at gearmand.
  proxy.block();
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  await publish(gearmand.addr, q, Array.from({ length: 3000 }, () => fixture));
  await waitFor(async () => ((await backlogOf(worker.metricsPort, q)) ?? 0) > 1000, {
    message: "the backlog to show the waiting jobs",
  });
  // The job server away: unknown, so absent (never a 0 that reads as "all written").
  await gearmand.stop();
  await waitFor(async () => (await backlogOf(worker.metricsPort, q)) === undefined, {
    message: "the backlog series to disappear",
  });
  await gearmand.restart();
  proxy.unblock();
  await waitFor(async () => (await backlogOf(worker.metricsPort, q)) === 0, {
    timeoutMs: 30_000,
    message: "the backlog to be read again",
  });
});

Deno.test("metrics: statusengine_queue_backlog shows the messages ready at RabbitMQ", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  const q = "statusngin_logentries";
  await using worker = await startTestWorker(testConfig({
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 100, ...TEST_QUEUE_DURABILITY },
    mysqlUrl: proxy.url,
    queues: [q],
    queueBacklogIntervalMs: 100,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  await waitFor(async () => (await backlogOf(worker.metricsPort, q)) === 0, {
    message: "an empty queue read as 0",
  });
  proxy.block();
  const fixture = await Deno.readTextFile(
    new URL("../src/events/testdata/statusngin_logentries.job", import.meta.url),
  );
  {
    await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
    await publisher.publish(q, Array.from({ length: 1000 }, () => fixture));
  }
  // The prefetch (100) is delivered and held; the rest is ready at the broker.
  await waitFor(async () => ((await backlogOf(worker.metricsPort, q)) ?? 0) >= 800, {
    message: "the ready messages to show as backlog",
  });
  proxy.unblock();
  await waitFor(async () => (await backlogOf(worker.metricsPort, q)) === 0, {
    timeoutMs: 60_000,
    message: "the backlog to drain",
  });
});

Deno.test("metrics: statusengine_queue_event_lag_seconds observes, at commit, the age of the newest status or check event of each job", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  const scrape = async () =>
    series(await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text());
  const lag = (queue: string, suffix: "count" | "sum") =>
    key(`statusengine_queue_event_lag_seconds_${suffix}`, { queue_name: queue });
  const before = await scrape();
  for (const q of lagQueues) assert.equal(before.get(lag(q, "count")), 0, `${q} pre-created`);
  assert.equal(before.has(lag("statusngin_logentries", "count")), false, "no event time there");

  const started = Date.now() / 1000;
  await publish(gearmand.addr, "statusngin_hoststatus", [
    fixtureAged("statusngin_hoststatus", 42),
  ]);
  await publish(gearmand.addr, "statusngin_servicechecks", [
    fixtureAged("statusngin_servicechecks", 300),
  ]);
  await waitFor(async () => {
    const v = await scrape();
    return v.get(lag("statusngin_hoststatus", "count")) === 1 &&
      v.get(lag("statusngin_servicechecks", "count")) === 1;
  }, { message: "one lag observation per job" });
  const after = await scrape();
  const waited = Date.now() / 1000 - started + 1;
  const host = after.get(lag("statusngin_hoststatus", "sum")) ?? 0;
  const service = after.get(lag("statusngin_servicechecks", "sum")) ?? 0;
  // The newest event's age, not the oldest's: the events of a job are seconds apart.
  assert.ok(host >= 41 && host <= 42 + waited, `hoststatus lag ${host}`);
  assert.ok(service >= 299 && service <= 300 + waited, `servicechecks lag ${service}`);
  assert.equal(after.get(lag("statusngin_hostchecks", "count")), 0);
});

const lagQueues = [
  "statusngin_hoststatus",
  "statusngin_servicestatus",
  "statusngin_hostchecks",
  "statusngin_servicechecks",
];

Deno.test("metrics: the event-time column of each lag queue is a number in the rows its fixture decodes to", async () => {
  const { decodePayload } = await import("../src/events/decode.ts");
  const { QUEUES } = await import("../src/events/queues.ts");
  const withColumn = QUEUE_NAMES.filter((q) => QUEUES[q].eventTimeColumn !== null);
  assert.deepEqual([...withColumn].sort(), [...lagQueues].sort());
  for (const q of withColumn) {
    const column = QUEUES[q].eventTimeColumn ?? "";
    const payload = await Deno.readFile(
      new URL(`../src/events/testdata/${q}.job`, import.meta.url),
    );
    const { job } = decodePayload(q, payload, {
      nodeName: "N",
      nowSeconds: 0,
      statusMaxAgeSeconds: 0,
      collectEvents: false,
    });
    assert.equal(job.kind, "rows");
    if (job.kind !== "rows") continue;
    assert.ok(job.rows.length > 0);
    for (const { row } of job.rows) {
      assert.equal(typeof row[column], "number", `${q}: ${column}`);
      assert.ok((row[column] as number) > 1_700_000_000, `${q}: ${column} is an epoch time`);
    }
  }
});

Deno.test("metrics: the event lag is taken when the rows are committed, not when the job arrives", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: proxy.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  const q = "statusngin_hoststatus";
  const scrape = async () =>
    series(await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text());
  proxy.block();
  await publish(gearmand.addr, q, [fixtureAged(q, 10)]);
  await waitFor(async () => (await scrape()).get(key("statusengine_db_available", {})) === 0, {
    message: "the job to be held while MySQL is away",
  });
  const held = await scrape();
  assert.equal(held.get(key("statusengine_queue_jobs_in_flight", { queue_name: q })), 1);
  assert.equal(held.get(key("statusengine_queue_event_lag_seconds_count", { queue_name: q })), 0);
  proxy.unblock();
  await waitFor(
    async () =>
      (await scrape()).get(key("statusengine_queue_event_lag_seconds_count", { queue_name: q })) ===
        1,
    { timeoutMs: 30_000, message: "the lag to be observed at commit" },
  );
});
