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
import { createSchema, startTestWorker, testConfig } from "./helpers/worker.ts";
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
  assert.equal(tables.length, 19); // 14 batched, 4 downtime tables and the tombstones
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
