/**
 * The credentials of the perfdata backends (InfluxDB password and token, remote-write bearer
 * token and password, and passwords inside their URLs) never appear in what the worker prints:
 * start-up lines, write failures at debug level, `config`, `--help`.
 */
import assert from "node:assert/strict";
import { cliRun } from "./helpers/cli_run.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { createSchema, publish } from "./helpers/worker.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  hostileChecks,
  PERFDATA_QUEUE,
  perfdataJob,
  recentSeconds,
} from "./helpers/perfdata_env.ts";

const TAG = crypto.randomUUID().slice(0, 8);
const SECRETS = {
  influxUrlPassword: `SekretInfluxUrl${TAG}`,
  influxPassword: `SekretInfluxPw${TAG}`,
  influxToken: `SekretInfluxToken${TAG}`,
  remoteUrlPassword: `SekretRemoteUrl${TAG}`,
  remoteBearer: `SekretBearer${TAG}`,
  remotePassword: `SekretRemotePw${TAG}`,
};

function assertNoSecret(where: string, text: string): void {
  for (const [name, secret] of Object.entries(SECRETS)) {
    assert.ok(!text.includes(secret), `${name} appears in ${where}:\n${text.slice(0, 3000)}`);
  }
}

Deno.test("perfdata secrets: credentials of InfluxDB and remote write stay out of logs, failures, config and help", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Nothing listens on these ports: every write fails and is logged, with its URL.
  const influxPort = freePort();
  const remotePort = freePort();
  const metricsPort = freePort();
  const deadLetterFile = await Deno.makeTempFile({ prefix: "se-pd-secrets-" });
  const env = {
    STATUSENGINE_GEARMAN_ADDR: gearmand.addr,
    STATUSENGINE_MYSQL_URL: db.url,
    STATUSENGINE_QUEUES: PERFDATA_QUEUE,
    STATUSENGINE_LOG_LEVEL: "debug",
    STATUSENGINE_METRICS_PORT: String(metricsPort),
    STATUSENGINE_LISTEN_ADDR: `127.0.0.1:${freePort()}`,
    STATUSENGINE_DEAD_LETTER_FILE: deadLetterFile,
    STATUSENGINE_PERFDATA_BACKENDS: "mysql,influxdb,prometheus",
    STATUSENGINE_INFLUXDB_URL:
      `http://se:${SECRETS.influxUrlPassword}@127.0.0.1:${influxPort}/write?db=x`,
    STATUSENGINE_INFLUXDB_USER: "se",
    STATUSENGINE_INFLUXDB_PASSWORD: SECRETS.influxPassword,
    STATUSENGINE_INFLUXDB_TOKEN: SECRETS.influxToken,
    STATUSENGINE_PROMETHEUS_REMOTE_WRITE_URL:
      `http://se:${SECRETS.remoteUrlPassword}@127.0.0.1:${remotePort}/api/v1/write`,
    STATUSENGINE_PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN: SECRETS.remoteBearer,
    STATUSENGINE_PROMETHEUS_REMOTE_WRITE_USER: "se",
    STATUSENGINE_PROMETHEUS_REMOTE_WRITE_PASSWORD: SECRETS.remotePassword,
  };
  const stop = new AbortController();
  const running = cliRun(["run"], env, stop.signal);
  let metrics = "";
  try {
    await publish(gearmand.addr, PERFDATA_QUEUE, [perfdataJob(hostileChecks(recentSeconds()))]);
    // Both backends give up on the batch (retries included) and count it.
    await waitFor(async () => {
      try {
        const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
        metrics = await res.text();
      } catch {
        return false;
      }
      return ["influxdb", "prometheus"].every((b) =>
        new RegExp(
          `statusengine_perfdata_dropped_total\\{backend="${b}",reason="write_failed"\\} 4`,
        )
          .test(metrics)
      );
    }, { timeoutMs: 30_000, message: "both backends' batches counted as dropped" });
  } finally {
    stop.abort();
  }
  const run = await running;
  await Deno.remove(deadLetterFile);
  assert.equal(run.code, 0);
  assert.match(run.text, /write failed, points dropped/);
  assert.match(run.text, /\*\*\*\*/);
  assertNoSecret("the worker's output", run.text);
  assertNoSecret("/metrics", metrics);
  for (const argv of [["config"], ["run", "--help"]]) {
    const r = await cliRun(argv, env);
    assert.equal(r.code, 0, argv.join(" "));
    assertNoSecret(argv.join(" "), r.text);
  }
});
