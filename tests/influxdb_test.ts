/**
 * Perfdata to InfluxDB line protocol, end to end against the real servers (gearmand → worker →
 * MariaDB and InfluxDB 1.x / VictoriaMetrics), read back through each server's own query API:
 * values, tags, thresholds, timestamps and hostile names; and the server killed mid-stream.
 */
import assert from "node:assert/strict";
import { startInfluxd, startVictoriaMetrics } from "./helpers/tsdb.ts";
import {
  hostileChecks,
  killBackendMidStream,
  PERFDATA_QUEUE,
  type PerfdataEnv,
  perfdataEnv,
  perfdataJob,
  recentSeconds,
} from "./helpers/perfdata_env.ts";
import { publish } from "./helpers/worker.ts";
import { waitFor } from "./helpers/wait.ts";

const influxSettings = (url: string) => ({
  url,
  batchSize: 500,
});

/** Publish the hostile checks of time `t` and wait until the worker wrote their four points. */
async function writeHostileChecks(env: PerfdataEnv, t: number): Promise<void> {
  await publish(env.gearmand.addr, PERFDATA_QUEUE, [perfdataJob(hostileChecks(t))]);
  await waitFor(async () =>
    (await env.metric("statusengine_perfdata_points_written_total", {
      backend: "influxdb",
    })) === 4, { message: "four points written" });
}

Deno.test("influxdb: hostile names, values, thresholds and check times arrive in InfluxDB 1.x as written", async () => {
  await using influx = await startInfluxd();
  await using env = await perfdataEnv(["mysql", "influxdb"], {
    influxdb: influxSettings(influx.writeUrl),
  });
  const t = recentSeconds();
  await writeHostileChecks(env, t);
  const rows = await influx.query(
    'SELECT "value", "warn", "crit", "min", "max", "hostname", "service_description", "label", "unit" ' +
      "FROM perfdata ORDER BY time",
  );
  const byLabel = new Map(rows.map((r) => [r.label, r]));
  assert.equal(rows.length, 4, JSON.stringify(rows));
  // The plugin's quotes are not part of the label. A backslash before a space cannot be written in line protocol that InfluxDB 1.x reads: "/".
  assert.deepEqual(byLabel.get("C:/ used %"), {
    time: t,
    value: 42.5,
    warn: 80,
    crit: 90,
    min: 0,
    max: 100,
    hostname: "web 01,dc=eu",
    service_description: 'Disk "C:\\" usage',
    label: "C:/ used %",
    unit: "%",
  });
  // A line break ends a point in line protocol: it arrives as a space.
  assert.deepEqual(byLabel.get("temp, inner"), {
    time: t,
    value: -3.7,
    warn: null,
    crit: null,
    min: -40,
    max: 60,
    hostname: "köln-ü.example",
    service_description: "Temperatur ☃ Küche",
    label: "temp, inner",
    unit: "C",
  });
  assert.equal(byLabel.get("x")?.value, 0.0000001);
  assert.equal(byLabel.get("x")?.unit, null, "no unit, no tag");
  // A backslash at the end of a name cannot be written either.
  assert.equal(byLabel.get("a")?.hostname, "trailing/");
  assert.equal(byLabel.get("a")?.service_description, "back\\slash");
  assert.equal(await env.mysqlRows(), 4);
  assert.equal(
    await env.metric("statusengine_perfdata_backend_available", { backend: "influxdb" }),
    1,
  );
});

Deno.test("influxdb: VictoriaMetrics' line-protocol endpoint gets the same points", async () => {
  await using vm = await startVictoriaMetrics();
  await using env = await perfdataEnv(["influxdb"], {
    influxdb: influxSettings(vm.influxWriteUrl),
  });
  const t = recentSeconds();
  await writeHostileChecks(env, t);
  let series: Awaited<ReturnType<typeof vm.queryRange>> = [];
  await waitFor(async () => {
    await vm.flush();
    series = await vm.queryRange('{__name__=~"perfdata_.*"}', t, t);
    return series.length === 4 + 3 + 3; // 4 values, 2 gauges × (warn/crit/min/max present)
  }, { message: "the series searchable in VictoriaMetrics", timeoutMs: 30_000 });
  const value = series.find((s) =>
    s.metric.__name__ === "perfdata_value" && s.metric.label === "C:/ used %"
  );
  assert.deepEqual(value?.metric, {
    __name__: "perfdata_value",
    db: "statusengine",
    hostname: "web 01,dc=eu",
    service_description: 'Disk "C:\\" usage',
    label: "C:/ used %",
    unit: "%",
  });
  assert.deepEqual(value?.values[0], [t, "42.5"]);
  const temp = series.find((s) =>
    s.metric.__name__ === "perfdata_min" && s.metric.label === "temp, inner"
  );
  assert.equal(temp?.metric.hostname, "köln-ü.example");
  assert.equal(temp?.metric.service_description, "Temperatur ☃ Küche");
  assert.deepEqual(temp?.values[0], [t, "-40"]);
  assert.equal(await env.mysqlRows(), 0, "influxdb only: nothing in MySQL");
});

Deno.test("influxdb: InfluxDB killed mid-stream: MySQL gets every row, every job is acknowledged, every lost point is counted", async () => {
  const influx = await startInfluxd();
  try {
    await using env = await perfdataEnv(["mysql", "influxdb"], {
      influxdb: { ...influxSettings(influx.writeUrl), batchSize: 200 },
    });
    // 30,000 points after the kill: more than the buffer of 10,000.
    await killBackendMidStream(env, "influxdb", () => influx.kill(), 300, recentSeconds());
    assert.ok(
      (await env.metric("statusengine_perfdata_dropped_total", {
        backend: "influxdb",
        reason: "buffer_full",
      })) > 0,
      "a dead server fills the bounded buffer; what does not fit is dropped at once",
    );
    assert.ok(
      (await env.metric("statusengine_perfdata_dropped_total", {
        backend: "influxdb",
        reason: "write_failed",
      })) > 0,
    );
    assert.equal(
      await env.metric("statusengine_perfdata_backend_available", { backend: "influxdb" }),
      0,
    );
    assert.ok(
      (await env.metric("statusengine_perfdata_write_retries_total", {
        backend: "influxdb",
      })) > 0,
    );
    assert.ok(
      (await env.metric("statusengine_pipeline_errors_total", { component: "influxdb" })) > 0,
    );
  } finally {
    await influx.stop();
  }
});

Deno.test("influxdb: a refused write (unknown database) is counted as rejected and not retried", async () => {
  await using influx = await startInfluxd();
  await using env = await perfdataEnv(["mysql", "influxdb"], {
    influxdb: influxSettings(`${influx.url}/write?db=missing`),
  });
  await publish(env.gearmand.addr, PERFDATA_QUEUE, [perfdataJob(hostileChecks(recentSeconds()))]);
  await waitFor(async () =>
    (await env.metric("statusengine_perfdata_dropped_total", {
      backend: "influxdb",
      reason: "rejected",
    })) === 4, { message: "the batch counted as rejected" });
  assert.equal(
    await env.metric("statusengine_perfdata_write_retries_total", { backend: "influxdb" }),
    0,
  );
  assert.equal(await env.mysqlRows(), 4);
});
