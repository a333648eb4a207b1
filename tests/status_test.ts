/**
 * The `status` command against a real gearmand, a scratch database and an in-process worker
 * with a metrics port; plus the Prometheus text parser it reads `/metrics` with. Needs
 * gearmand and MySQL; fails (never skips) without them.
 */
import assert from "node:assert/strict";
import type { StatusCommandOptions, StatusReport } from "../src/cli/status/collect.ts";
import { runStatusCommand } from "../src/cli/status/format.ts";
import { parsePrometheusText, sampleValue } from "../src/cli/status/parse.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { runCli } from "../src/cli/mod.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { waitFor } from "./helpers/wait.ts";
import { cutAmqpAtFirstDeclare, startTcpPeer } from "./helpers/tcp_proxy.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "./helpers/worker.ts";

const HOSTCHECKS_JOB = Deno.readTextFileSync(
  new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
);

interface Run {
  code: number;
  out: string[];
  err: string[];
}

async function status(options: StatusCommandOptions): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runStatusCommand(options, {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
  });
  return { code, out, err };
}

async function statusJson(options: Omit<StatusCommandOptions, "json">): Promise<
  { code: number; report: StatusReport }
> {
  const r = await status({ ...options, json: true });
  assert.equal(r.out.length, 1, "one JSON document");
  return { code: r.code, report: JSON.parse(r.out[0] ?? "") as StatusReport };
}

/** Everything that `status` reads, with a worker consuming all twelve queues. */
async function setUp() {
  const gearmand = await startGearmand();
  const db = await createScratchDatabase();
  try {
    await createSchema(db.url);
    const worker = await startTestWorker(
      testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        metrics: { hostname: "127.0.0.1", port: 0 },
      }),
    );
    await waitFor(async () => {
      const functions = await adminStatus(gearmand.addr);
      return QUEUE_NAMES.every((q) => functions.find((f) => f.function === q)?.workers === 1);
    }, { message: "all twelve queues registered at gearmand" });
    return {
      gearmand,
      db,
      worker,
      metricsUrl: `http://127.0.0.1:${worker.metricsPort}/metrics`,
      async [Symbol.asyncDispose]() {
        try {
          await worker.stop();
        } finally {
          try {
            await db.drop();
          } finally {
            await gearmand.stop();
          }
        }
      },
    };
  } catch (err: unknown) {
    await db.drop().finally(() => gearmand.stop());
    throw err;
  }
}

Deno.test("status: JSON lists every queue with one worker at the job server, MySQL ok and the worker's metrics", async () => {
  await using env = await setUp();
  // Rows written before the scrape show up as the worker's own counter value.
  await publish(env.gearmand.addr, "statusngin_hostchecks", [HOSTCHECKS_JOB]);
  await waitFor(async () =>
    (await jobsAtGearmand(env.gearmand.addr, "statusngin_hostchecks")) === 0
  );
  const written = await metricValue(env.worker, "statusengine_db_events_written_total", {
    table: "statusengine_hostchecks",
  });
  assert.ok(written > 0);
  // A function gearmand knows but the worker does not consume (the command queue).
  await publish(env.gearmand.addr, "statusngin_cmd", ["{}"]);

  const { code, report } = await statusJson({
    gearmanAddr: [env.gearmand.addr],
    mysqlUrl: env.db.url,
    metricsUrl: env.metricsUrl,
    rateIntervalMs: 200,
  });

  assert.equal(code, 0, JSON.stringify(report, null, 2));
  assert.equal(report.ok, true);
  assert.deepEqual(report.jobServers.map((s) => [s.addr, s.ok]), [[env.gearmand.addr, true]]);
  assert.match(report.jobServers[0]?.version ?? "", /^\d/);
  for (const name of QUEUE_NAMES) {
    const queue = report.queues.find((q) => q.name === name);
    assert.ok(queue !== undefined, name);
    assert.equal(queue.consumed, true);
    assert.deepEqual(queue.servers, [{
      addr: env.gearmand.addr,
      waiting: 0,
      running: 0,
      workers: 1,
    }], name);
    assert.equal(
      queue.inFlight,
      await metricValue(env.worker, "statusengine_queue_jobs_in_flight", { queue_name: name }),
    );
    assert.equal(queue.connected, 1, name);
  }
  assert.deepEqual(report.queues.slice(0, 12).map((q) => q.name), [...QUEUE_NAMES]);
  const cmd = report.queues.find((q) => q.name === "statusngin_cmd");
  assert.deepEqual(cmd && [cmd.consumed, cmd.servers[0]?.waiting, cmd.servers[0]?.workers], [
    false,
    1,
    0,
  ]);
  assert.equal(report.mysql.ok, true);
  assert.match(report.mysql.version ?? "", /^\d+\.\d+/);
  assert.equal(report.worker?.ok, true);
  assert.equal(report.worker?.dbAvailable, 1);
  assert.ok((report.worker?.intervalSeconds ?? 0) >= 0.2);
  const hostchecks = report.worker?.tables.find((t) => t.table === "statusengine_hostchecks");
  assert.equal(hostchecks?.written, written);
  assert.equal(hostchecks?.rowsPerSecond, 0);
  assert.equal(report.worker?.tables.length, 20); // the 18 written Statusengine tables, the downtime tombstones and announcements
});

Deno.test("status: the text screen shows every queue's workers, in-flight and connection in 100 columns", async () => {
  await using env = await setUp();
  await publish(env.gearmand.addr, "some_other_function", ["x"]);
  await publish(env.gearmand.addr, "statusngin_hostchecks", [HOSTCHECKS_JOB]);
  await waitFor(async () =>
    (await jobsAtGearmand(env.gearmand.addr, "statusngin_hostchecks")) === 0
  );
  const written = await metricValue(env.worker, "statusengine_db_events_written_total", {
    table: "statusengine_hostchecks",
  });

  const r = await status({
    gearmanAddr: [env.gearmand.addr],
    mysqlUrl: env.db.url,
    metricsUrl: env.metricsUrl,
    json: false,
    rateIntervalMs: 100,
  });

  const screen = r.out.join("\n");
  assert.equal(r.code, 0, screen);
  for (const line of r.out) assert.ok(line.length <= 100, `too wide: ${line}`);
  for (const name of QUEUE_NAMES) {
    // QUEUE  IN-FLIGHT CONNECTED  WAITING RUNNING WORKERS
    const line = r.out.find((l) => l.startsWith(`${name} `));
    assert.ok(line !== undefined, `${name} missing:\n${screen}`);
    assert.deepEqual(line.slice(name.length).trim().split(/\s+/), ["0", "1", "0", "0", "1"], line);
  }
  assert.match(screen, /^QUEUE +IN-FLIGHT CONNECTED +WAITING RUNNING WORKERS$/m);
  assert.ok(r.out.some((l) => l.includes(env.gearmand.addr) && l.includes("ok")), screen);
  assert.ok(
    r.out.some((l) => l.includes(env.db.url.replace(/\/$/, "")) && /\bok\b/.test(l)),
    screen,
  );
  assert.match(screen, /^some_other_function \* +- +- +1 +0 +0$/m);
  assert.match(screen, /^\* known to a job server, not consumed by statusengine-worker$/m);
  assert.match(screen, new RegExp(`^statusengine_hostchecks +0\\.0 +${written}$`, "m"));
  assert.match(screen, /^\(19 more table\(s\) with nothing written since the worker started\)$/m);
  assert.match(screen, /db_available 1/);
});

Deno.test("status: an unreachable job server makes the exit code 1 and is shown next to the reachable one", async () => {
  await using env = await setUp();

  const { code, report } = await statusJson({
    gearmanAddr: [env.gearmand.addr, "127.0.0.1:1"],
    mysqlUrl: env.db.url,
  });

  assert.equal(code, 1);
  assert.equal(report.ok, false);
  assert.deepEqual(report.jobServers.map((s) => s.ok), [true, false]);
  assert.match(report.jobServers[1]?.error ?? "", /127\.0\.0\.1:1/);
  for (const name of QUEUE_NAMES) {
    const queue = report.queues.find((q) => q.name === name);
    assert.equal(queue?.servers[0]?.workers, 1, name);
    assert.deepEqual(queue?.servers[1], {
      addr: "127.0.0.1:1",
      waiting: null,
      running: null,
      workers: null,
    });
  }
  assert.equal(report.mysql.ok, true);
  assert.equal(report.worker, null);
  assert.equal(report.queues[0]?.inFlight, null);

  const text = await status({
    gearmanAddr: [env.gearmand.addr, "127.0.0.1:1", env.gearmand.addr],
    mysqlUrl: env.db.url,
    metricsUrl: env.metricsUrl,
    json: false,
    rateIntervalMs: 10,
  });
  assert.equal(text.code, 1);
  for (const line of text.out) assert.ok(line.length <= 100, `too wide: ${line}`);
  assert.ok(text.out.some((l) => l.includes("127.0.0.1:1") && l.includes("UNREACHABLE")));
  // Three servers and the worker do not fit side by side: the queue table is split.
  assert.ok(text.out.filter((l) => /^QUEUE /.test(l)).length >= 2, text.out.join("\n"));
});

Deno.test("status: unreachable MySQL or metrics URL makes the exit code 1 without showing the password", async () => {
  await using gearmand = await startGearmand();

  const mysqlDown = await statusJson({
    gearmanAddr: [gearmand.addr],
    mysqlUrl: "mysql://root:s3cret-pw@127.0.0.1:1/statusengine",
  });
  assert.equal(mysqlDown.code, 1);
  assert.equal(mysqlDown.report.mysql.ok, false);
  assert.equal(mysqlDown.report.mysql.url, "mysql://root:****@127.0.0.1:1/statusengine");
  assert.ok(mysqlDown.report.mysql.error !== null);
  assert.ok(!JSON.stringify(mysqlDown.report).includes("s3cret-pw"));
  assert.equal(mysqlDown.report.jobServers[0]?.ok, true);

  await using db = await createScratchDatabase();
  const metricsDown = await statusJson({
    gearmanAddr: [gearmand.addr],
    mysqlUrl: db.url,
    metricsUrl: "http://127.0.0.1:1/metrics",
  });
  assert.equal(metricsDown.code, 1);
  assert.equal(metricsDown.report.mysql.ok, true);
  assert.equal(metricsDown.report.worker?.ok, false);
  assert.match(metricsDown.report.worker?.error ?? "", /127\.0\.0\.1:1/);

  const text = await status({
    gearmanAddr: [gearmand.addr],
    mysqlUrl: "mysql://root:s3cret-pw@127.0.0.1:1/statusengine",
    json: false,
  });
  assert.equal(text.code, 1);
  assert.ok(text.out.some((l) => l.includes("127.0.0.1:1") && l.includes("UNREACHABLE")));
  assert.ok(!text.out.join("\n").includes("s3cret-pw"));
});

Deno.test("status: the Prometheus text parser reads names, escaped labels, special values and timestamps", () => {
  const text = [
    "# HELP statusengine_queue_jobs_in_flight Jobs being handled now.",
    "# TYPE statusengine_queue_jobs_in_flight gauge",
    'statusengine_queue_jobs_in_flight{queue_name="statusngin_hoststatus"} 3',
    'statusengine_queue_jobs_in_flight{queue_name="statusngin_servicestatus",} 0',
    "statusengine_db_available 1",
    'weird{a="x,y}z",b="quote \\" backslash \\\\ newline \\n end"} -1.5e3 1712345678901',
    'h_bucket{le="+Inf"} +Inf',
    "nan_metric NaN",
    "neg_inf -Inf\r",
    "",
    "  # indented comment",
    'spaced { a = "1" , b="2" } 7',
    "colon:name_total 42",
  ].join("\n");

  const samples = parsePrometheusText(text);

  assert.deepEqual(samples.map((s) => s.name), [
    "statusengine_queue_jobs_in_flight",
    "statusengine_queue_jobs_in_flight",
    "statusengine_db_available",
    "weird",
    "h_bucket",
    "nan_metric",
    "neg_inf",
    "spaced",
    "colon:name_total",
  ]);
  assert.deepEqual(samples[3]?.labels, {
    a: "x,y}z",
    b: 'quote " backslash \\ newline \n end',
  });
  assert.equal(samples[3]?.value, -1500);
  assert.equal(samples[4]?.value, Number.POSITIVE_INFINITY);
  assert.ok(Number.isNaN(samples[5]?.value));
  assert.equal(samples[6]?.value, Number.NEGATIVE_INFINITY);
  assert.deepEqual(samples[7]?.labels, { a: "1", b: "2" });
  assert.equal(
    sampleValue(samples, "statusengine_queue_jobs_in_flight", {
      queue_name: "statusngin_hoststatus",
    }),
    3,
  );
  assert.equal(sampleValue(samples, "statusengine_db_available"), 1);
  assert.equal(sampleValue(samples, "absent"), null);
});

Deno.test("status: the Prometheus text parser rejects malformed lines with their line number", () => {
  for (
    const [bad, detail] of [
      ['m{a="1"', /line 2: unterminated|expected/],
      ["m{a=1} 2", /line 2: expected a quoted value/],
      ['m{a="\\x"} 1', /line 2: invalid escape/],
      ["m one", /line 2: invalid value "one"/],
      ["m 1 2 3", /line 2: unexpected text/],
      ['m{a="1",a="2"} 1', /line 2: label a given twice/],
      ["m", /line 2: expected whitespace/],
      ["1m 1", /line 2: expected a metric name/],
    ] as const
  ) {
    assert.throws(() => parsePrometheusText(`ok 1\n${bad}\n`), (err: unknown) => {
      assert.ok(err instanceof SyntaxError);
      assert.match(err.message, detail);
      return true;
    }, bad);
  }
});

Deno.test("status --consumer rabbitmq: ready messages and consumers per queue from the broker, with a worker attached", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  {
    await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
    await publisher.publish("statusngin_logentries", ["a", "b", "c"]);
  }
  await using worker = await startTestWorker(testConfig({
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 10, ...TEST_QUEUE_DURABILITY },
    mysqlUrl: db.url,
    queues: ["statusngin_hostchecks"],
  }));
  await waitFor(
    async () =>
      (await metricValue(worker, "statusengine_queue_connected", {
        queue_name: "statusngin_hostchecks",
      })) === 1,
  );
  const { code, report } = await statusJson({
    gearmanAddr: ["127.0.0.1:1"],
    rabbitmqUrl: vhost.url,
    mysqlUrl: db.url,
  });
  assert.equal(code, 0, JSON.stringify(report.jobServers));
  assert.deepEqual(report.jobServers, [{
    addr: `amqp://guest:****@127.0.0.1:5672/${vhost.name}`,
    kind: "rabbitmq",
    ok: true,
    version: null,
    error: null,
  }]);
  const at = (name: string) => report.queues.find((q) => q.name === name)?.servers[0];
  assert.deepEqual(at("statusngin_logentries")?.waiting, 3);
  assert.deepEqual(at("statusngin_logentries")?.workers, 0);
  assert.deepEqual(at("statusngin_hostchecks")?.workers, 1);
  assert.equal(at("statusngin_hostchecks")?.running, null, "AMQP does not report unacked");
  // Never declared: neither by a worker nor by a publisher.
  assert.equal(at("statusngin_downtimes")?.waiting, null);

  const text = await status({
    gearmanAddr: [],
    rabbitmqUrl: vhost.url,
    mysqlUrl: db.url,
    json: false,
  });
  assert.ok(text.out.includes("Broker"), text.out.join("\n"));
  assert.ok(
    text.out.some((l) => l.includes("READY") && l.includes("CONSUMERS")),
    text.out.join("\n"),
  );
});

Deno.test("status --consumer rabbitmq: an unreachable broker makes the exit code 1 and masks the password", async () => {
  await using db = await createScratchDatabase();
  const { code, report } = await statusJson({
    gearmanAddr: [],
    rabbitmqUrl: "amqp://guest:topsecret@127.0.0.1:1/",
    mysqlUrl: db.url,
  });
  assert.equal(code, 1);
  assert.equal(report.jobServers[0]?.ok, false);
  assert.equal(report.jobServers[0]?.addr, "amqp://guest:****@127.0.0.1:1/");
  assert.ok(!JSON.stringify(report).includes("topsecret"));
});

Deno.test("status --consumer rabbitmq: a URL that does not parse is shown with the password masked", async () => {
  await using db = await createScratchDatabase();
  for (
    const url of ["amqp://guest:topsecret@127.0.0.1:0/", "amqp://guest:topsecret@h/?heartbeat=x"]
  ) {
    const { code, report } = await statusJson({
      gearmanAddr: [],
      rabbitmqUrl: url,
      mysqlUrl: db.url,
    });
    assert.equal(code, 1);
    assert.match(report.jobServers[0]?.error ?? "", /Cannot parse AMQP URL/);
    assert.ok(!JSON.stringify(report).includes("topsecret"), JSON.stringify(report.jobServers));
  }
});

Deno.test("status: a refused login and an unknown database are not UNREACHABLE", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const denied = new URL(db.url);
  denied.username = "se_no_such_user";
  denied.password = "s3cret-pw";
  const login = await statusJson({ gearmanAddr: [gearmand.addr], mysqlUrl: denied.href });
  assert.equal(login.code, 1);
  assert.equal(login.report.mysql.problem, "access_denied");
  assert.match(login.report.mysql.error ?? "", /check the user and password/);
  assert.ok(!JSON.stringify(login.report).includes("s3cret-pw"));
  const loginText = await status({
    gearmanAddr: [gearmand.addr],
    mysqlUrl: denied.href,
    json: false,
  });
  assert.ok(loginText.out.some((l) => l.includes("ACCESS DENIED")), loginText.out.join("\n"));
  assert.ok(!loginText.out.some((l) => l.includes("UNREACHABLE")), loginText.out.join("\n"));

  const missing = new URL(db.url);
  missing.pathname = `${missing.pathname}_gone`;
  const nodb = await status({ gearmanAddr: [gearmand.addr], mysqlUrl: missing.href, json: false });
  assert.equal(nodb.code, 1);
  assert.ok(nodb.out.some((l) => l.includes("NO DATABASE")), nodb.out.join("\n"));
  assert.match(nodb.out.join(" "), /schema --create-database/);
  assert.ok(!nodb.out.some((l) => l.includes("UNREACHABLE")), nodb.out.join("\n"));
});

Deno.test("status: with several hosts, a login refused by one while an earlier one is down is ACCESS DENIED", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const denied = new URL(db.url);
  denied.username = "se_no_such_user";
  denied.password = "s3cret-pw";
  const dead = `127.0.0.1:${await freePort()}`;
  const url = denied.href.replace(`@${denied.host}`, `@${dead},${denied.host}`);
  const r = await statusJson({ gearmanAddr: [gearmand.addr], mysqlUrl: url });
  assert.equal(r.code, 1);
  assert.equal(r.report.mysql.problem, "access_denied");
  // The refusal leads; the dead host's failure follows.
  assert.match(
    r.report.mysql.error ?? "",
    new RegExp(`refused the login \\(${denied.host}: Access denied.*; ${dead}: .*check the user`),
  );
  assert.ok(!JSON.stringify(r.report).includes("s3cret-pw"));
});

async function statusCli(argv: string[]): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(["status", ...argv], {}, {
    io: { out: (l) => out.push(l), err: (l) => err.push(l) },
    signals: false,
    logWrite: () => {},
  });
  return { code, out, err };
}

Deno.test("status: without --metrics-url it reads the local worker at --metrics-host/--metrics-port", async () => {
  await using env = await setUp();
  const r = await statusCli([
    "--json",
    "--gearman-addr",
    env.gearmand.addr,
    "--mysql-url",
    env.db.url,
    "--metrics-port",
    String(env.worker.metricsPort),
  ]);
  assert.equal(r.code, 0, r.out.join("\n") + r.err.join("\n"));
  const report = JSON.parse(r.out[0] ?? "") as StatusReport;
  assert.equal(report.worker?.ok, true);
  assert.equal(report.worker?.local, true);
  assert.equal(report.worker?.url, `http://127.0.0.1:${env.worker.metricsPort}/metrics`);
  assert.equal(report.queues.find((q) => q.name === "statusngin_hostchecks")?.connected, 1);

  // No worker on this host: said, but the exit code is about the services.
  const none = await statusCli([
    "--gearman-addr",
    env.gearmand.addr,
    "--mysql-url",
    env.db.url,
    "--metrics-port",
    String(freePort()),
  ]);
  assert.equal(none.code, 0, none.out.join("\n"));
  assert.ok(none.out.some((l) => l.includes("NO WORKER")), none.out.join("\n"));
  assert.match(none.out.join(" "), /--metrics-url/);
});

Deno.test("status: the job servers are read at the second scrape of the worker, not before the first", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const queue = "statusngin_hostchecks";
  const jobs = 25;
  let scrapes = 0;
  // A stand-in for a worker's /metrics: while it answers its first scrape, jobs arrive.
  await using metrics = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async () => {
      scrapes++;
      if (scrapes === 1) await publish(gearmand.addr, queue, Array(jobs).fill(HOSTCHECKS_JOB));
      return new Response(
        `statusengine_db_available 1\nstatusengine_queue_jobs_in_flight{queue_name="${queue}"} 0\n`,
      );
    },
  );
  const { code, report } = await statusJson({
    gearmanAddr: [gearmand.addr],
    mysqlUrl: db.url,
    metricsUrl: `http://127.0.0.1:${metrics.addr.port}/metrics`,
    rateIntervalMs: 50,
  });
  assert.equal(code, 0, JSON.stringify(report, null, 2));
  assert.equal(scrapes, 2);
  assert.equal(report.queues.find((q) => q.name === queue)?.servers[0]?.waiting, jobs);
});

// Something accepts at the local metrics port and never answers: a worker that hangs (or is
// stopped). It used to be shown as NO WORKER with exit 0, the verdict for an empty port.
Deno.test("status: a local metrics port that accepts but does not answer is a failure, not NO WORKER", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await using peer = startTcpPeer();
  const options = {
    gearmanAddr: [gearmand.addr],
    mysqlUrl: db.url,
    localMetricsUrl: `http://${peer.addr}/metrics`,
    rateIntervalMs: 10,
  };
  const { code, report } = await statusJson(options);
  assert.equal(report.worker?.ok, false);
  assert.match(report.worker?.error ?? "", /no answer within/);
  assert.equal(code, 1, JSON.stringify(report.worker));
  const text = await status({ ...options, json: false });
  assert.ok(!text.out.some((l) => l.includes("NO WORKER")), text.out.join("\n"));
});

for (const how of ["sever", "freeze"] as const) {
  Deno.test(`status --consumer rabbitmq: a broker connection that is ${how === "sever" ? "lost" : "silent"} during the depth checks is a failure, not an ok broker`, async () => {
    await using vhost = await createScratchVhost();
    await using db = await createScratchDatabase();
    using proxy = cutAmqpAtFirstDeclare(how);
    const url = new URL(vhost.url);
    url.host = `127.0.0.1:${proxy.port}`;
    const answered = statusJson({ gearmanAddr: [], rabbitmqUrl: url.href, mysqlUrl: db.url });
    // A hang is the fault: bounded here only so that the test ends.
    let hung: ReturnType<typeof setTimeout> | undefined;
    const { code, report } = await Promise.race([
      answered,
      new Promise<never>((_, reject) => {
        hung = setTimeout(() => reject(new Error("status hung on a silent broker")), 30_000);
      }),
    ]).finally(() => clearTimeout(hung));
    assert.ok(proxy.cut, "the connection was cut at a depth check");
    assert.equal(code, 1, JSON.stringify(report.jobServers));
    assert.equal(report.jobServers[0]?.ok, false);
    if (how === "freeze") assert.equal(report.jobServers[0]?.error, "no answer within 2000 ms");
  });
}

// The brokers of the URL were tried with one 2 s bound for them all: a first one that accepts and
// never answers the handshake used it up, and status called the cluster unreachable while the
// second broker was fine.
Deno.test("status --consumer rabbitmq: a silent first broker of the URL leaves time for the second", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await using silent = startTcpPeer();
  const real = new URL(vhost.url);
  const url =
    `amqp://${real.username}:${real.password}@${silent.addr},${real.host}${real.pathname}`;
  const { report } = await statusJson({ gearmanAddr: [], rabbitmqUrl: url, mysqlUrl: db.url });
  assert.equal(report.jobServers[0]?.ok, true, JSON.stringify(report.jobServers));
  await silent.accepted;
});

// A worker that sends its headers and then its body slowly (swapping, or a /metrics of many MB on
// a slow link): the scrape's limit ended the body read with "The operation was aborted due to
// timeout", which names neither the URL nor the limit, unlike a scrape with no answer at all.
Deno.test("status: a metrics body that does not arrive within the limit says so, naming the URL", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const encoder = new TextEncoder();
  let timer: ReturnType<typeof setInterval> | undefined;
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () =>
      new Response(
        new ReadableStream({
          start(c) {
            c.enqueue(encoder.encode("statusengine_db_available 1\n"));
            timer = setInterval(() => c.enqueue(encoder.encode("# more\n")), 100);
          },
          cancel: () => clearInterval(timer),
        }),
      ),
  );
  const url = `http://127.0.0.1:${server.addr.port}/metrics`;
  try {
    const { code, report } = await statusJson({
      gearmanAddr: [gearmand.addr],
      mysqlUrl: db.url,
      metricsUrl: url,
      rateIntervalMs: 10,
    });
    assert.equal(code, 1);
    assert.ok(
      report.worker?.error?.startsWith(`Cannot scrape ${url}: no answer within 2000 ms`),
      report.worker?.error ?? "",
    );
  } finally {
    clearInterval(timer);
  }
});
