/**
 * Perfdata through Prometheus remote write, end to end against the real servers (gearmand →
 * worker → MariaDB and Prometheus 2.x with its remote-write receiver / VictoriaMetrics), read
 * back through the Prometheus query API: values, labels, timestamps and hostile names; samples
 * Prometheus refuses; and the server killed mid-stream.
 */
import assert from "node:assert/strict";
import { type PromServer, startPrometheus, startVictoriaMetrics } from "./helpers/tsdb.ts";
import {
  hostileChecks,
  killBackendMidStream,
  PERFDATA_QUEUE,
  perfdataEnv,
  perfdataJob,
  recentSeconds,
} from "./helpers/perfdata_env.ts";
import { publish } from "./helpers/worker.ts";
import { waitFor } from "./helpers/wait.ts";
import SnappyJS from "snappyjs";
import { encodeWriteRequest, remotePoint } from "../src/perfdata/remote_write.ts";

const METRIC = "statusengine_perfdata_value";
const remoteWrite = (url: string) => ({ url, batchSize: 500 });
const labels = { backend: "prometheus" };

async function series(server: PromServer & { flush?: () => Promise<void> }, t: number) {
  let found: Awaited<ReturnType<PromServer["queryRange"]>> = [];
  await waitFor(async () => {
    await server.flush?.();
    found = await server.queryRange(METRIC, t, t);
    return found.length === 4;
  }, { message: "four series readable", timeoutMs: 30_000 });
  return found;
}

for (
  const [name, start] of [["Prometheus", startPrometheus], [
    "VictoriaMetrics",
    startVictoriaMetrics,
  ]] as const
) {
  Deno.test(`remote write: hostile names, values and check times arrive in ${name} as written`, async () => {
    await using server = await start();
    await using env = await perfdataEnv(["mysql", "prometheus"], {
      prometheusRemoteWrite: remoteWrite(server.remoteWriteUrl),
    });
    const t = recentSeconds();
    await publish(env.gearmand.addr, PERFDATA_QUEUE, [perfdataJob(hostileChecks(t))]);
    await waitFor(
      async () => (await env.metric("statusengine_perfdata_points_written_total", labels)) === 4,
      { message: "four samples written" },
    );
    const found = await series(server, t);
    const byLabel = new Map(found.map((s) => [s.metric.label, s]));
    // Label values carry any text: nothing is escaped or replaced; the plugin's quotes are not
    // part of the label.
    assert.deepEqual(byLabel.get("C:\\ used %"), {
      metric: {
        __name__: METRIC,
        hostname: "web 01,dc=eu",
        service_description: 'Disk "C:\\" usage',
        label: "C:\\ used %",
        unit: "%",
      },
      values: [[t, "42.5"]],
    });
    assert.deepEqual(byLabel.get("temp, inner"), {
      metric: {
        __name__: METRIC,
        hostname: "köln-ü.example",
        service_description: "Temperatur ☃\nKüche",
        label: "temp, inner",
        unit: "C",
      },
      values: [[t, "-3.7"]],
    });
    // The servers print the value differently (1e-07, 0.0000001); the number is the same.
    assert.deepEqual(byLabel.get("x")?.values.map(([at, v]) => [at, Number(v)]), [[t, 1e-7]]);
    assert.equal(byLabel.get("x")?.metric.unit, undefined, "no unit, no label");
    assert.equal(byLabel.get("a")?.metric.hostname, "trailing\\");
    assert.equal(await env.mysqlRows(), 4);
  });
}

for (const quotes of ["keep", "strip"] as const) {
  Deno.test(`remote write: labels arrive without the plugin's quotes; MySQL ${quotes === "keep" ? "keeps them (default, as the PHP worker)" : "gets them without (--perfdata-label-quotes strip)"}`, async () => {
    await using prometheus = await startPrometheus();
    await using env = await perfdataEnv(["mysql", "prometheus"], {
      prometheusRemoteWrite: remoteWrite(prometheus.remoteWriteUrl),
      perfdataLabelQuotes: quotes,
    });
    const t = recentSeconds();
    await publish(env.gearmand.addr, PERFDATA_QUEUE, [
      perfdataJob([{
        host: "h",
        service: "s",
        perfData: `'memory used'=5MB 'it''s'=1 "dq label"=2 plain=3 a'b=4`,
        startTime: t,
      }]),
    ]);
    await waitFor(
      async () => (await env.metric("statusengine_perfdata_points_written_total", labels)) === 5,
      { message: "five samples written" },
    );
    const plain = ["a'b", "dq label", "it's", "memory used", "plain"];
    let found: Awaited<ReturnType<PromServer["queryRange"]>> = [];
    await waitFor(async () => {
      found = await prometheus.queryRange(METRIC, t, t);
      return found.length === 5;
    }, { message: "five series readable" });
    assert.deepEqual(found.map((s) => s.metric.label).sort(), plain);
    const rows = await env.db.query<{ label: string }[]>(
      "SELECT label FROM statusengine_perfdata ORDER BY label",
    );
    assert.deepEqual(
      rows.map((r) => r.label).sort(),
      quotes === "keep" ? ["'dq label'", "'it''s'", "'memory used'", "a'b", "plain"] : plain,
    );
  });
}

Deno.test("remote write: samples Prometheus refuses (older than the series' newest, repeated labels) are counted, not retried", async () => {
  await using prometheus = await startPrometheus();
  await using env = await perfdataEnv(["mysql", "prometheus"], {
    prometheusRemoteWrite: remoteWrite(prometheus.remoteWriteUrl),
  });
  const t = recentSeconds();
  const check = { host: "h", service: "s", startTime: t };
  // A check repeating a label: two values for one series and timestamp; the last one is sent.
  await publish(env.gearmand.addr, PERFDATA_QUEUE, [
    perfdataJob([{ ...check, perfData: "dup=1 dup=2" }]),
  ]);
  await waitFor(
    async () => (await env.metric("statusengine_perfdata_points_written_total", labels)) === 1,
    { message: "one sample written" },
  );
  assert.equal(
    await env.metric("statusengine_perfdata_dropped_total", { ...labels, reason: "out_of_order" }),
    1,
  );
  // An older check of the same series, in a request of its own: Prometheus answers 400.
  await publish(env.gearmand.addr, PERFDATA_QUEUE, [
    perfdataJob([{ ...check, perfData: "dup=3", startTime: t - 60 }]),
  ]);
  await waitFor(async () =>
    (await env.metric("statusengine_perfdata_dropped_total", {
      ...labels,
      reason: "out_of_order",
    })) === 2, { message: "the out-of-order sample counted" });
  assert.equal(await env.metric("statusengine_perfdata_write_retries_total", labels), 0);
  assert.equal(await env.metric("statusengine_perfdata_backend_available", labels), 1);
  const found = await prometheus.queryRange(METRIC, t, t);
  assert.deepEqual(found.map((s) => s.values), [[[t, "2"]]]);
  assert.equal(await env.mysqlRows(), 3, "MySQL keeps every gauge");
});

Deno.test("remote write: one stale sample in a batch costs only itself: the good samples of every other series are readable, in a bounded number of requests", async () => {
  await using prometheus = await startPrometheus();
  await using env = await perfdataEnv(["mysql", "prometheus"], {
    prometheusRemoteWrite: remoteWrite(prometheus.remoteWriteUrl),
  });
  const t = recentSeconds();
  // A series whose newest sample this worker did not write (a worker before a restart did), and
  // one whose newest sample it wrote itself.
  await writeDirectly(prometheus.remoteWriteUrl, { hostname: "restarted", t });
  await publish(env.gearmand.addr, PERFDATA_QUEUE, [
    perfdataJob([{ host: "known", service: "s", perfData: "x=1", startTime: t }]),
  ]);
  await waitFor(
    async () => (await env.metric("statusengine_perfdata_points_written_total", labels)) === 1,
    { message: "the first sample written" },
  );
  let written = 1;
  for (
    const [stale, round, maxRequests] of [
      // Unknown to the worker: halved until the refused sample is alone, the first request and two
      // per halving, six halvings for one sample of 61.
      ["restarted", 1, 1 + 2 * Math.ceil(Math.log2(61))],
      // Known: left out before the batch is sent again, without halving.
      ["known", 2, 2],
    ] as const
  ) {
    const requestsBefore = await writeRequests(prometheus.url);
    // One job, so one batch: a check of the series older than its newest sample (what a
    // redelivered job brings), in the middle of 60 good checks of other series. Prometheus
    // refuses the whole request; the worker must send the good ones again without it.
    const good = Array.from({ length: 60 }, (_, i) => ({
      host: `good${round}-${i}`,
      service: "s",
      perfData: `x=${i}`,
      startTime: t,
    }));
    await publish(env.gearmand.addr, PERFDATA_QUEUE, [
      perfdataJob([
        ...good.slice(0, 30),
        { host: stale, service: "s", perfData: "x=0", startTime: t - 60 },
        ...good.slice(30),
      ]),
    ]);
    await waitFor(async () =>
      (await env.metric("statusengine_perfdata_dropped_total", {
        ...labels,
        reason: "out_of_order",
      })) === round, { message: `the stale sample of ${stale} counted` });
    written += 60;
    assert.equal(await env.metric("statusengine_perfdata_points_written_total", labels), written);
    const found = await prometheus.queryRange(`${METRIC}{hostname=~"good${round}-.*"}`, t, t);
    assert.deepEqual(
      found.map((s) => [s.metric.hostname, s.values]).sort(),
      good.map((g, i) => [g.host, [[t, String(i)]]]).sort(),
    );
    const requests = (await writeRequests(prometheus.url)) - requestsBefore;
    assert.ok(requests <= maxRequests, `${stale}: ${requests} requests`);
  }
  assert.equal(await env.metric("statusengine_perfdata_write_retries_total", labels), 0);
  assert.equal(await env.mysqlRows(), 1 + 2 * 61, "MySQL keeps every gauge");
});

/** One sample of `statusengine_perfdata_value{hostname,service_description="s",label="x"}`. */
async function writeDirectly(url: string, o: { hostname: string; t: number }): Promise<void> {
  const point = remotePoint({
    hostname: o.hostname,
    service_description: "s",
    label: "x",
    timestamp_unix: o.t,
    value: 1,
  });
  assert.ok(point !== undefined);
  const res = await fetch(url, {
    method: "POST",
    body: new Uint8Array(
      SnappyJS.compress(encodeWriteRequest([point]).bytes) as Uint8Array,
    ),
    headers: {
      "Content-Type": "application/x-protobuf",
      "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "0.1.0",
    },
  });
  assert.equal(res.status, 204, await res.text());
}

/** The remote-write requests Prometheus has answered, from its own metrics. */
async function writeRequests(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let total = 0;
  for (const line of text.split("\n")) {
    if (
      line.startsWith("prometheus_http_requests_total{") && line.includes('handler="/api/v1/write"')
    ) {
      total += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return total;
}

Deno.test("remote write: Prometheus killed mid-stream: MySQL gets every row, every job is acknowledged, every lost sample is counted", async () => {
  const prometheus = await startPrometheus();
  try {
    await using env = await perfdataEnv(["mysql", "prometheus"], {
      prometheusRemoteWrite: { ...remoteWrite(prometheus.remoteWriteUrl), batchSize: 200 },
    });
    await killBackendMidStream(env, "prometheus", () => prometheus.kill(), 100, recentSeconds());
    assert.ok(
      (await env.metric("statusengine_perfdata_dropped_total", {
        ...labels,
        reason: "write_failed",
      })) > 0,
    );
    assert.equal(await env.metric("statusengine_perfdata_backend_available", labels), 0);
    assert.ok(
      (await env.metric("statusengine_pipeline_errors_total", { component: "prometheus" })) > 0,
    );
  } finally {
    await prometheus.stop();
  }
});
