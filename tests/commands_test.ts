/**
 * `POST /commands` end to end (docs/operations.md#commands): a real in-process worker
 * with command keys, a private gearmand (or the test RabbitMQ broker), and
 * the jobs read back from `statusngin_cmd` the way the broker module would
 * receive them.
 */
import assert from "node:assert/strict";
import { AMQPClient } from "@cloudamqp/amqp-client";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { takeJobs } from "./helpers/gearman_jobs.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { cutAmqpAtFirstDeclare, startTcpPeer, startTcpProxy } from "./helpers/tcp_proxy.ts";
import { track, waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "./helpers/worker.ts";
import type { RunningWorker, WorkerConfig } from "../src/daemon/mod.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { hasCode } from "../src/util/errors.ts";
import {
  COMMAND_NAMES,
  COMMAND_QUEUE,
  MAX_BODY_BYTES,
  MAX_JSON_DEPTH,
  rabbitMqCommandPublisher,
  REJECT_REASONS,
} from "../src/commands/mod.ts";
import {
  ALLOW_ALL,
  ConfigError,
  DEFAULT_ALLOWED_RAW_COMMANDS,
  DENIED_RAW_COMMANDS,
  loadSettings,
} from "../src/config/mod.ts";

const KEY = "command-key-0123456789";
const OTHER_KEY = "second-command-key";
/** What a /ws key looks like to this endpoint: a key that is not a command key. */
const WS_KEY = "ws-read-only-key";

type Overrides = Partial<WorkerConfig>;

async function withWorker(
  overrides: Overrides,
  fn: (worker: RunningWorker, url: string) => Promise<void>,
): Promise<void> {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    mysqlUrl: db.url,
    commands: { hostname: "127.0.0.1", port: 0, apiKeys: [KEY, OTHER_KEY] },
    ...overrides,
  }));
  assert.ok(worker.commandsPort !== null, "the command endpoint is served");
  await fn(worker, `http://127.0.0.1:${worker.commandsPort}/commands`);
}

interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly headers: Headers;
}

async function post(
  url: string,
  body: BodyInit | null,
  headers: Record<string, string> = { authorization: `Bearer ${KEY}` },
  method = "POST",
): Promise<Answer> {
  const res = await fetch(url, { method, body, headers });
  assert.equal(res.headers.get("content-type"), "application/json", `${method} ${url}`);
  return { status: res.status, body: await res.json(), headers: res.headers };
}

function postJson(url: string, value: unknown, headers?: Record<string, string>) {
  return post(url, JSON.stringify(value), headers);
}

function rejected(worker: RunningWorker, reason: string): Promise<number> {
  return metricValue(worker, "statusengine_commands_rejected_total", { reason });
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

Deno.test("commands: a valid command lands in gearmand's statusngin_cmd queue with the exact bytes the broker module expects", async () => {
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
    const before = Math.floor(Date.now() / 1000);
    // Single raw command without the timestamp: the API adds "[now] ".
    let a = await postJson(url, { Command: "raw", Data: "SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1" });
    const after = Math.floor(Date.now() / 1000);
    assert.equal(a.status, 202);
    assert.deepEqual(a.body, { accepted: 1 });
    // An object command, keys out of order and with whitespace: re-serialised compactly.
    a = await post(
      url,
      '{ "Data": {"host_name": "web01", "service_description": "HTTP", "schedule_time": 1767225660},\n' +
        '  "Command": "schedule_check", "ignored": [1, 2] }',
      { authorization: KEY }, // bare Authorization
    );
    assert.equal(a.status, 202);
    // A bulk of 50 mixed commands is one job and counts 50.
    const messages = Array.from(
      { length: 50 },
      (_, i) =>
        i % 2 === 0
          ? { Command: "check_result", Data: { host_name: `h${i}`, output: "OK", return_code: 0 } }
          : { Command: "raw", Data: `[1700000000] ACKNOWLEDGE_HOST_PROBLEM;h${i};1;1;0;a;b` },
    );
    a = await postJson(url, { messages }, { "x-api-key": OTHER_KEY });
    assert.equal(a.status, 202);
    assert.deepEqual(a.body, { accepted: 50 });
    // A body of exactly the size limit is accepted (padding after the object is ignored).
    const small = '{"Command":"raw","Data":"[1] DISABLE_HOST_NOTIFICATIONS;web01"}';
    a = await post(url, small + " ".repeat(MAX_BODY_BYTES - small.length));
    assert.equal(a.status, 202);

    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), 4, "one job per request");
    const jobs = (await takeJobs(gearmand.addr, COMMAND_QUEUE, 4)).map(text);
    const m = /^\{"Command":"raw","Data":"\[(\d+)\] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1"\}$/
      .exec(jobs[0] ?? "");
    assert.ok(m, jobs[0]);
    const ts = Number(m[1]);
    assert.ok(ts >= before && ts <= after, `timestamp ${ts} is the time of the request`);
    assert.equal(
      jobs[1],
      '{"Command":"schedule_check","Data":{"host_name":"web01","service_description":"HTTP",' +
        '"schedule_time":1767225660}}',
    );
    assert.equal(jobs[2], JSON.stringify({ messages }));
    assert.equal(jobs[3], small);

    assert.equal(await metricValue(worker, "statusengine_commands_published_total"), 4);
    const received = (command: string) =>
      metricValue(worker, "statusengine_commands_received_total", { command });
    assert.equal(await received("raw"), 1 + 25 + 1);
    assert.equal(await received("check_result"), 25);
    assert.equal(await received("schedule_check"), 1);
    assert.equal(await received("delete_downtime"), 0);
    for (const reason of REJECT_REASONS) assert.equal(await rejected(worker, reason), 0);
    assert.equal(await metricValue(worker, "statusengine_commands_publish_errors_total"), 0);
  });
});

Deno.test("commands: every refusal answers its status with a JSON error, counted per reason, and queues nothing", async () => {
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
    const ok = { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01" };
    const expectError = (a: Answer, status: number, pattern: RegExp) => {
      assert.equal(a.status, status, JSON.stringify(a.body));
      assert.deepEqual(Object.keys(a.body), ["error"]);
      assert.match(String(a.body.error), pattern);
    };

    // 404: any other path, whatever the method.
    const base = url.replace(/\/commands$/, "");
    for (const path of ["/", "/commands/", "/command", "/ws"]) {
      expectError(await postJson(base + path, ok), 404, /not found/);
    }
    // 405 before authentication, with Allow, not counted.
    for (const method of ["GET", "PUT", "DELETE"]) {
      const a = await post(url, null, {}, method);
      expectError(a, 405, /method not allowed/);
      assert.equal(a.headers.get("allow"), "POST");
    }

    // 401: missing, wrong, empty, a /ws key, and a key only in the query string. Without a key
    // in a header the answer names the headers; a key in the query string used to get the same
    // bare "unauthorized" as a wrong key, which sent people checking the key instead of moving it.
    const noKey =
      /^unauthorized: no API key; send it in a header \(Authorization: Bearer <key>, or X-Api-Key: <key>\)$/;
    expectError(await postJson(url, ok, {}), 401, noKey);
    expectError(await postJson(url, ok, { authorization: "Bearer nope" }), 401, /^unauthorized$/);
    expectError(await postJson(url, ok, { authorization: "Bearer " }), 401, noKey);
    expectError(await postJson(url, ok, { "x-api-key": WS_KEY }), 401, /^unauthorized$/);
    for (const param of ["api_key", "key", "apikey", "token", "access_token"]) {
      const a = await postJson(`${url}?${param}=${KEY}`, ok, {});
      expectError(
        a,
        401,
        /^unauthorized: the API key goes in a header \(Authorization: Bearer <key>, or X-Api-Key: <key>\); the query string is never read for it/,
      );
      assert.ok(!JSON.stringify(a.body).includes(KEY), "the answer never echoes the key");
    }
    // An Authorization header is the one used, even next to a valid X-Api-Key.
    expectError(
      await postJson(url, ok, { authorization: "wrong", "x-api-key": KEY }),
      401,
      /unauthorized/,
    );
    // Authentication comes before the body is looked at.
    expectError(await post(url, "not json", {}), 401, /unauthorized/);

    // 400 malformed.
    expectError(await post(url, "not json"), 400, /not a JSON object/);
    expectError(await post(url, ""), 400, /not a JSON object/);
    expectError(await post(url, new Uint8Array([0x7b, 0xff, 0x7d])), 400, /UTF-8/);
    expectError(await postJson(url, { Command: "raw" }), 400, /missing or empty "Data"/);
    expectError(
      await postJson(url, { Command: "raw", Data: "X", messages: [ok] }),
      400,
      /cannot be combined/,
    );
    expectError(
      await postJson(url, { messages: [ok, { messages: [ok] }] }),
      400,
      /^messages\[1\]: a bulk cannot contain another bulk/,
    );
    expectError(await postJson(url, { Command: "raw", Data: "   " }), 400, /empty/);
    expectError(
      await postJson(url, { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01\n" }),
      400,
      /control character/,
    );
    expectError(await postJson(url, { Command: "raw", Data: 1 }), 400, /JSON string/);
    // 400 unknown_command, naming the value, with the bulk index.
    expectError(
      await postJson(url, { Command: "reboot", Data: "now" }),
      400,
      /unknown command "reboot"/,
    );
    expectError(
      await postJson(url, { messages: [ok, ok, ok, { Command: "Raw", Data: "X" }] }),
      400,
      /^messages\[3\]: unknown command "Raw"/,
    );

    // 403 denied, in any spelling and behind a timestamp.
    for (const name of DENIED_RAW_COMMANDS) {
      expectError(await postJson(url, { Command: "raw", Data: name }), 403, new RegExp(name));
    }
    expectError(
      await postJson(url, { Command: "raw", Data: "[1700000000] shutdown_process" }),
      403,
      /SHUTDOWN_PROCESS/,
    );

    // 413: bulk over 1000, a declared body over 8 MiB, and a streamed one (no length).
    const bulk = Array.from({ length: 1001 }, () => ok);
    expectError(await postJson(url, { messages: bulk }), 413, /1001 commands/);
    const tooBig = new Uint8Array(MAX_BODY_BYTES + 1).fill(0x20);
    expectError(await post(url, tooBig), 413, /exceeds 8388608 bytes/);
    const chunk = new Uint8Array(1024 * 1024).fill(0x20);
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        // 33 MiB without a length: refused past 8 MiB, the rest read away so the 413 arrives.
        if (sent > 4 * MAX_BODY_BYTES) controller.close();
        else {
          sent += chunk.length;
          controller.enqueue(chunk);
        }
      },
    });
    expectError(await post(url, stream), 413, /exceeds 8388608 bytes/);

    assert.equal(await rejected(worker, "auth"), 11);
    assert.equal(await rejected(worker, "malformed"), 9);
    assert.equal(await rejected(worker, "unknown_command"), 2);
    assert.equal(await rejected(worker, "denied"), DENIED_RAW_COMMANDS.length + 1);
    assert.equal(await rejected(worker, "too_large"), 3);
    assert.equal(await metricValue(worker, "statusengine_commands_published_total"), 0);
    for (const command of COMMAND_NAMES) {
      assert.equal(
        await metricValue(worker, "statusengine_commands_received_total", { command }),
        0,
      );
    }
    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), 0, "nothing was queued");
  });
});

Deno.test("commands: a client refused in a loop (wrong key, denied command) logs one warning per kind, not one per request", async () => {
  await using gearmand = await startGearmand();
  await withLogs(async (logs) => {
    await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
      const denied = { Command: "raw", Data: "SHUTDOWN_PROGRAM" };
      for (let i = 0; i < 50; i++) {
        assert.equal((await postJson(url, denied, { authorization: "Bearer wrong" })).status, 401);
        assert.equal((await postJson(url, denied)).status, 403);
      }
      // Every refusal still counts: the counter, not the journal, carries the rate.
      const rejected = (reason: string) =>
        metricValue(worker, "statusengine_commands_rejected_total", { reason });
      assert.equal(await rejected("auth"), 50);
      assert.equal(await rejected("denied"), 50);
    });
    const count = (m: RegExp) => logs.filter((l) => l.level === "warn" && m.test(l.message));
    assert.equal(count(/rejected unauthorized request/).length, 1);
    assert.equal(count(/rejected a denied external command/).length, 1);
  });
});

Deno.test("commands: gearmand down answers 503 within the publish budget, not a hang, and counts it", async () => {
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
    const ok = { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01" };
    // First a success, so the publisher holds a connection that then dies.
    assert.equal((await postJson(url, ok)).status, 202);
    await gearmand.stop();
    // Not a hang: the answer comes (under waitFor's deadline) and says the broker is away.
    const answer = postJson(url, ok);
    const answered = track(answer);
    await waitFor(() => answered.settled, { timeoutMs: 15_000, message: "the 503 answer" });
    const a = await answer;
    assert.equal(a.status, 503);
    assert.match(String(a.body.error), /broker could not be reached/);
    assert.equal(await metricValue(worker, "statusengine_commands_publish_errors_total"), 1);
    assert.equal(
      await metricValue(worker, "statusengine_pipeline_errors_total", { component: "command" }),
      1,
    );
    assert.equal(await metricValue(worker, "statusengine_commands_published_total"), 1);
    assert.equal(
      await metricValue(worker, "statusengine_commands_received_total", { command: "raw" }),
      1,
      "a 503 is not counted as received",
    );
  });
});

/**
 * The answer to a command whose message reached the broker but whose confirm was lost with the
 * connection: `sever` cuts the link once the broker holds the message and its answer is held back.
 */
async function lostConfirm(
  url: string,
  proxy: { holdReplies(): void; sever(): void },
  queued: () => Promise<number>,
): Promise<Answer> {
  proxy.holdReplies();
  const answer = postJson(url, { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web02" });
  await waitFor(async () => (await queued()) === 2, { message: "the second command queued" });
  proxy.sever();
  return await answer;
}

Deno.test("commands: a gearman connection lost before JOB_CREATED is not retried: 504 says the command may be queued, and it is queued once", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  // The consumer's link is cut too, and reconnects; it reads no statusngin_cmd.
  await withWorker(
    { gearmanServers: [proxy.addr], queues: ["statusngin_core_restart"] },
    async (worker, url) => {
      const ok = { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01" };
      assert.equal((await postJson(url, ok)).status, 202);
      const queued = () => jobsAtGearmand(gearmand.addr, COMMAND_QUEUE);
      const a = await lostConfirm(url, proxy, queued);
      assert.equal(await queued(), 2, "the command is queued once, not retried");
      assert.equal(a.status, 504, JSON.stringify(a.body));
      assert.match(String(a.body.error), /may have been queued/);
      assert.equal(await metricValue(worker, "statusengine_commands_publish_errors_total"), 1);
    },
  );
});

Deno.test("commands: a rabbitmq connection lost before the publisher confirm is not retried: 504 says the command may be queued, and it is queued once", async () => {
  await using vhost = await createScratchVhost();
  await using admin = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  const rabbit = new URL(vhost.url);
  await using proxy = await startTcpProxy(rabbit.host);
  rabbit.host = proxy.addr;
  await withWorker({
    consumer: "rabbitmq",
    rabbitmq: { url: rabbit.href, prefetch: 100, ...TEST_QUEUE_DURABILITY },
    queues: ["statusngin_core_restart"],
  }, async (worker, url) => {
    const ok = { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01" };
    assert.equal((await postJson(url, ok)).status, 202);
    const queued = async () => (await admin.depth(COMMAND_QUEUE)).ready;
    const a = await lostConfirm(url, proxy, queued);
    assert.equal(await queued(), 2, "the command is queued once, not retried");
    assert.equal(a.status, 504, JSON.stringify(a.body));
    assert.match(String(a.body.error), /may have been queued/);
    assert.equal(await metricValue(worker, "statusengine_commands_publish_errors_total"), 1);
  });
});

Deno.test("commands: rabbitmq publishes that queued nothing are retried: a connection the broker closed, a queue deleted since its declaration", async () => {
  await using vhost = await createScratchVhost();
  await withWorker({
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 100, ...TEST_QUEUE_DURABILITY },
    queues: ["statusngin_core_restart"],
  }, async (worker, url) => {
    const ok = { Command: "raw", Data: "ENABLE_HOST_NOTIFICATIONS;web01" };
    assert.equal((await postJson(url, ok)).status, 202);
    // The broker closes every connection of the vhost: the publisher's is seen closed.
    await vhost.closeConnections();
    await using admin = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
    let a = await postJson(url, ok);
    assert.equal(a.status, 202, JSON.stringify(a.body));
    assert.equal((await admin.depth(COMMAND_QUEUE)).ready, 2);
    // Deleted: the broker returns the message, and the retry declares the queue again.
    await admin.deleteQueue(COMMAND_QUEUE);
    a = await postJson(url, ok);
    assert.equal(a.status, 202, JSON.stringify(a.body));
    assert.equal((await admin.depth(COMMAND_QUEUE)).ready, 1, "queued once, on the new queue");
    assert.equal(await metricValue(worker, "statusengine_commands_publish_errors_total"), 0);
  });
});

// The brokers of the URL were tried in order with no limit per broker: a first one that accepts
// the TCP connection and never answers the handshake used up the whole publish budget, so the
// second, healthy one was never tried and every command was refused with 503.
Deno.test("commands: a silent first broker of the URL does not use up the budget: the command is queued at the second", async () => {
  await using vhost = await createScratchVhost();
  await using silent = startTcpPeer();
  const real = new URL(vhost.url);
  const url =
    `amqp://${real.username}:${real.password}@${silent.addr},${real.host}${real.pathname}`;
  await using publisher = rabbitMqCommandPublisher(url, TEST_QUEUE_DURABILITY);
  await publisher.publish('{"messages":[]}');
  await using admin = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  assert.equal((await admin.depth(COMMAND_QUEUE)).ready, 1, "queued once, at the second broker");
  await silent.accepted;
});

// A broker that fell silent at the queue declaration, before the command was written: the budget
// ran out there, and the answer said the command may have been queued (504) though nothing was.
Deno.test("commands: a broker silent at the queue declaration queued nothing: command_publish, not unconfirmed", async () => {
  await using vhost = await createScratchVhost();
  using proxy = cutAmqpAtFirstDeclare("freeze");
  const url = new URL(vhost.url);
  url.host = `127.0.0.1:${proxy.port}`;
  await using publisher = rabbitMqCommandPublisher(url.href, TEST_QUEUE_DURABILITY);
  await assert.rejects(publisher.publish('{"messages":[]}'), (err: unknown) => {
    assert.ok(hasCode(err, "command_publish"), String(err));
    return true;
  });
  assert.ok(proxy.cut, "the connection fell silent at the declaration");
});

Deno.test("commands: with consumer rabbitmq the envelope is a transient application/json message in statusngin_cmd", async () => {
  // A vhost of its own: the real queue names on the shared "/" may have been declared with
  // other flags by another run.
  await using vhost = await createScratchVhost();
  await using admin = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  try {
    await withWorker({
      consumer: "rabbitmq",
      rabbitmq: { url: vhost.url, prefetch: 100, ...TEST_QUEUE_DURABILITY },
      // Any one queue: this test is about the command publisher, not consumption.
      queues: ["statusngin_core_restart"],
    }, async (worker, url) => {
      const messages = [
        { Command: "delete_downtime", Data: { host_name: "web01", comment: "x" } },
        { Command: "raw", Data: "DISABLE_HOST_CHECK;web01" },
      ];
      const before = Math.floor(Date.now() / 1000);
      const a = await postJson(url, { messages });
      const after = Math.floor(Date.now() / 1000);
      assert.equal(a.status, 202);
      assert.deepEqual(a.body, { accepted: 2 });
      assert.equal((await admin.depth(COMMAND_QUEUE)).ready, 1, "one message per request");

      const client = new AMQPClient(vhost.url);
      await client.connect();
      try {
        const ch = await client.channel();
        const msg = await ch.basicGet(COMMAND_QUEUE, { noAck: true });
        assert.ok(msg !== null);
        assert.equal(msg.exchange, "", "published to the default exchange");
        assert.equal(msg.routingKey, COMMAND_QUEUE);
        assert.equal(msg.properties.contentType, "application/json");
        assert.notEqual(msg.properties.deliveryMode, 2, "transient");
        const body = msg.bodyToString() ?? "";
        const m =
          /^\{"messages":\[\{"Command":"delete_downtime","Data":\{"host_name":"web01","comment":"x"\}\},\{"Command":"raw","Data":"\[(\d+)\] DISABLE_HOST_CHECK;web01"\}\]\}$/
            .exec(body);
        assert.ok(m, body);
        assert.ok(Number(m[1]) >= before && Number(m[1]) <= after);
        // Declared with the consumer's flags: a redeclaration with them is accepted (a
        // mismatch would close the channel with PRECONDITION_FAILED).
        await ch.queueDeclare(COMMAND_QUEUE, {
          durable: false,
          autoDelete: false,
          exclusive: false,
        });
      } finally {
        await client.close();
      }
      assert.equal(
        await metricValue(worker, "statusengine_commands_received_total", { command: "raw" }),
        1,
      );
      assert.equal(await metricValue(worker, "statusengine_commands_published_total"), 1);
    });
  } finally {
    await admin.deleteQueue(COMMAND_QUEUE).catch(() => {});
  }
});

Deno.test("commands: without command keys the endpoint is absent (connection refused) and its series are not pre-created", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const port = freePort();
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    commands: { hostname: "127.0.0.1", port, apiKeys: [] },
  }));
  assert.equal(worker.commandsPort, null);
  await assert.rejects(
    fetch(`http://127.0.0.1:${port}/commands`, { method: "POST", body: "{}" }),
    TypeError,
  );
  const text = await worker.metrics.registry.metrics();
  assert.ok(!/^statusengine_commands_received_total\{/m.test(text));
  assert.ok(!/^statusengine_commands_rejected_total\{/m.test(text));
});

Deno.test("commands: a served endpoint pre-creates every command and reject-reason series at 0", async () => {
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker) => {
    const text = await worker.metrics.registry.metrics();
    for (const command of COMMAND_NAMES) {
      assert.match(
        text,
        new RegExp(`^statusengine_commands_received_total\\{command="${command}"\\} 0$`, "m"),
      );
    }
    for (const reason of REJECT_REASONS) {
      assert.match(
        text,
        new RegExp(`^statusengine_commands_rejected_total\\{reason="${reason}"\\} 0$`, "m"),
      );
    }
  });
});

// --- the raw-line grammar against a real job server ---------------------------------------

/** `{now}` in `published` stands for the timestamp the API adds. */
interface RawCase {
  readonly why: string;
  readonly line: string;
  readonly status: 202 | 400 | 403;
  /** The `Data` that reaches statusngin_cmd, for a 202. */
  readonly published?: string;
}

const TS = "1700000000";

// Every line Naemon could read as a denied command must be refused, however it is dressed.
const RAW_CASES: readonly RawCase[] = [
  // The five bypasses of issue 12: Naemon skips the one character after "]".
  { why: "letter after ]", line: `[${TS}]XSHUTDOWN_PROGRAM`, status: 400 },
  { why: "; after ]", line: `[${TS}];SHUTDOWN_PROGRAM`, status: 400 },
  { why: "] after ]", line: `[${TS}]]RESTART_PROGRAM`, status: 400 },
  { why: "_ after ]", line: `[${TS}]_PROCESS_FILE;/tmp/evil;1`, status: 400 },
  { why: ". after ]", line: `[${TS}].SHUTDOWN_PROCESS`, status: 400 },
  // Separators.
  { why: "denied, canonical", line: `[${TS}] SHUTDOWN_PROGRAM`, status: 403 },
  { why: "denied, lower case", line: `[${TS}] shutdown_program`, status: 403 },
  { why: "denied, mixed case with args", line: `[${TS}] Restart_Process;x`, status: 403 },
  { why: "denied, empty args", line: "SHUTDOWN_PROCESS;", status: 403 },
  { why: "denied, no timestamp", line: "PROCESS_FILE;/tmp/evil;1", status: 403 },
  { why: "two spaces after ]", line: `[${TS}]  SHUTDOWN_PROGRAM`, status: 400 },
  { why: "TAB after ]", line: `[${TS}]\tSHUTDOWN_PROGRAM`, status: 400 },
  { why: "no space after ]", line: `[${TS}]SHUTDOWN_PROGRAM`, status: 400 },
  { why: "space before ;", line: `[${TS}] SHUTDOWN_PROGRAM ;x`, status: 400 },
  { why: "TAB before ;", line: `[${TS}] SHUTDOWN_PROGRAM\t;x`, status: 400 },
  { why: "; first", line: `[${TS}] ;SHUTDOWN_PROGRAM`, status: 400 },
  { why: "space inside the name", line: "SHUTDOWN PROGRAM", status: 400 },
  { why: "hyphen inside the name", line: "DISABLE-HOST-CHECK;web01", status: 400 },
  { why: "digit inside the name", line: "DISABLE_HOST_CHECK2;web01", status: 400 },
  // Brackets and timestamps.
  { why: "double timestamp", line: `[${TS}] [${TS}] SHUTDOWN_PROGRAM`, status: 400 },
  { why: "double timestamp, adjacent", line: `[${TS}][${TS}] SHUTDOWN_PROGRAM`, status: 400 },
  { why: "double [", line: `[[${TS}] SHUTDOWN_PROGRAM`, status: 400 },
  { why: "empty timestamp", line: "[] DISABLE_HOST_CHECK;web01", status: 400 },
  { why: "letters as timestamp", line: "[soon] DISABLE_HOST_CHECK;web01", status: 400 },
  { why: "negative timestamp", line: "[-1] DISABLE_HOST_CHECK;web01", status: 400 },
  { why: "space inside [ ]", line: `[ ${TS}] DISABLE_HOST_CHECK;web01`, status: 400 },
  { why: "unclosed [", line: `[${TS} DISABLE_HOST_CHECK;web01`, status: 400 },
  { why: "missing [", line: `${TS}] SHUTDOWN_PROGRAM`, status: 400 },
  { why: "] alone", line: "]SHUTDOWN_PROGRAM", status: 400 },
  // Unicode look-alikes: upper-casing some of them yields ASCII.
  { why: "long s (ſ → S)", line: "ſhutdown_program", status: 400 },
  { why: "dotless i (ı → I)", line: "D\u0131SABLE_HOST_CHECK;web01", status: 400 },
  { why: "Kelvin sign", line: "AC\u212ANOWLEDGE_HOST_PROBLEM;web01;1;1;1;a;b", status: 400 },
  { why: "Cyrillic S", line: "\u0405HUTDOWN_PROGRAM", status: 400 },
  { why: "fullwidth letters", line: "\uFF33\uFF28\uFF35\uFF34DOWN_PROGRAM", status: 400 },
  { why: "NBSP after ]", line: `[${TS}]\u00a0DISABLE_HOST_CHECK;web01`, status: 400 },
  { why: "zero-width space", line: "SHUTDOWN\u200B_PROGRAM", status: 400 },
  { why: "fullwidth digits", line: "[\uFF11] DISABLE_HOST_CHECK;web01", status: 400 },
  // Control characters, anywhere.
  { why: "NUL in the args", line: "DISABLE_HOST_CHECK;web01\u0000SHUTDOWN_PROGRAM", status: 400 },
  { why: "NUL after a denied name", line: "SHUTDOWN_PROGRAM\u0000", status: 400 },
  { why: "CR at the end", line: "DISABLE_HOST_CHECK;web01\r", status: 400 },
  {
    why: "LF and a second command",
    line: `DISABLE_HOST_CHECK;web01\n[${TS}] SHUTDOWN_PROGRAM`,
    status: 400,
  },
  { why: "CRLF at the end", line: "DISABLE_HOST_CHECK;web01\r\n", status: 400 },
  { why: "NEL (U+0085)", line: "DISABLE_HOST_CHECK;web01\u0085", status: 400 },
  { why: "lone surrogate", line: "ADD_HOST_COMMENT;web01;1;a;\ud800", status: 400 },
  { why: "empty", line: "", status: 400 },
  { why: "blank", line: " \t ", status: 400 },
  // Leading and trailing spaces or TABs are dropped.
  {
    why: "leading spaces",
    line: "   DISABLE_HOST_CHECK;web01",
    status: 202,
    published: "[{now}] DISABLE_HOST_CHECK;web01",
  },
  {
    why: "TABs around a timestamped line",
    line: `\t[${TS}] DISABLE_HOST_CHECK;web01\t `,
    status: 202,
    published: `[${TS}] DISABLE_HOST_CHECK;web01`,
  },
  { why: "leading spaces before a denied name", line: "  shutdown_program", status: 403 },
  // The allowlist.
  { why: "program-wide switch", line: "DISABLE_NOTIFICATIONS", status: 403 },
  { why: "not in the allowlist", line: `[${TS}] STOP_EXECUTING_SVC_CHECKS`, status: 403 },
  { why: "unknown name", line: "SHUTDOWN_PROGRAMS", status: 403 },
  // Accepted lines: the name upper-cased, the arguments untouched.
  {
    why: "lower case name",
    line: `[${TS}] schedule_forced_svc_check;web01;HTTP;${TS}`,
    status: 202,
    published: `[${TS}] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;${TS}`,
  },
  {
    why: "mixed case, ; inside the comment",
    line: "Acknowledge_Svc_Problem;web01;HTTP;2;1;1;admin;Looking into it; really",
    status: 202,
    published: "[{now}] ACKNOWLEDGE_SVC_PROBLEM;web01;HTTP;2;1;1;admin;Looking into it; really",
  },
  {
    why: "a denied line inside the arguments is text",
    line: `ADD_SVC_COMMENT;web01;HTTP;1;admin;[${TS}] SHUTDOWN_PROGRAM`,
    status: 202,
    published: `[{now}] ADD_SVC_COMMENT;web01;HTTP;1;admin;[${TS}] SHUTDOWN_PROGRAM`,
  },
  {
    why: "timestamp 0 kept",
    line: "[0] DEL_HOST_DOWNTIME;42",
    status: 202,
    published: "[0] DEL_HOST_DOWNTIME;42",
  },
  {
    why: "UTF-8 and a TAB in the arguments",
    line: "ADD_HOST_COMMENT;web01;1;admin;ünïcödé ✓\tok",
    status: 202,
    published: "[{now}] ADD_HOST_COMMENT;web01;1;admin;ünïcödé ✓\tok",
  },
  {
    why: "no arguments",
    line: "del_host_downtime",
    status: 202,
    published: "[{now}] DEL_HOST_DOWNTIME",
  },
];

Deno.test("commands: a raw line reaches statusngin_cmd only in Naemon's grammar; every disguise of a denied command is refused (table of 58 lines)", async () => {
  assert.ok(RAW_CASES.length >= 40);
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
    const expected: RegExp[] = [];
    const before = Math.floor(Date.now() / 1000);
    for (const c of RAW_CASES) {
      const a = await postJson(url, { Command: "raw", Data: c.line });
      assert.equal(a.status, c.status, `${c.why}: ${JSON.stringify(c.line)} → ${a.body.error}`);
      if (c.status === 202) {
        const published = c.published ?? "";
        const escaped = JSON.stringify({ Command: "raw", Data: published })
          .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
          .replace("\\{now\\}", "(\\d+)");
        expected.push(new RegExp(`^${escaped}$`));
      }
    }
    const after = Math.floor(Date.now() / 1000);
    // Nothing else was queued: the refused lines never reached the broker.
    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), expected.length);
    const jobs = (await takeJobs(gearmand.addr, COMMAND_QUEUE, expected.length)).map(text);
    for (const [i, pattern] of expected.entries()) {
      const m = pattern.exec(jobs[i] ?? "");
      assert.ok(m, `job ${i}: ${jobs[i]} does not match ${pattern}`);
      if (m[1] !== undefined) assert.ok(Number(m[1]) >= before && Number(m[1]) <= after);
    }
    const count = (status: number) => RAW_CASES.filter((c) => c.status === status).length;
    assert.equal(await rejected(worker, "malformed"), count(400));
    assert.equal(await rejected(worker, "denied"), count(403));
    assert.equal(await metricValue(worker, "statusengine_commands_published_total"), count(202));
  });
});

Deno.test("commands: with --command-allow * any well-formed command passes, the denylist still refuses", async () => {
  await using gearmand = await startGearmand();
  await withWorker({
    gearmanServers: [gearmand.addr],
    commands: { hostname: "127.0.0.1", port: 0, apiKeys: [KEY], allow: [ALLOW_ALL] },
  }, async (_worker, url) => {
    assert.equal(
      (await postJson(url, { Command: "raw", Data: "disable_notifications" })).status,
      202,
    );
    for (const name of DENIED_RAW_COMMANDS) {
      assert.equal((await postJson(url, { Command: "raw", Data: name })).status, 403, name);
    }
    assert.equal(
      (await postJson(url, { Command: "raw", Data: "[1]XSHUTDOWN_PROGRAM" })).status,
      400,
    );
    const jobs = (await takeJobs(gearmand.addr, COMMAND_QUEUE, 1)).map(text);
    assert.match(jobs[0] ?? "", /^\{"Command":"raw","Data":"\[\d+\] DISABLE_NOTIFICATIONS"\}$/);
    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), 0);
  });
});

Deno.test("commands: a replaced allowlist passes only its names", async () => {
  await using gearmand = await startGearmand();
  await withWorker({
    gearmanServers: [gearmand.addr],
    commands: {
      hostname: "127.0.0.1",
      port: 0,
      apiKeys: [KEY],
      allow: ["enable_notifications"],
    },
  }, async (_worker, url) => {
    const a = await postJson(url, { Command: "raw", Data: "DISABLE_HOST_CHECK;web01" });
    assert.equal(a.status, 403);
    assert.match(String(a.body.error), /not in the allowlist of this API \(--command-allow\)/);
    assert.equal(
      (await postJson(url, { Command: "raw", Data: "ENABLE_NOTIFICATIONS" })).status,
      202,
    );
    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), 1);
  });
});

Deno.test("commands: --command-allow refuses a denied name at start-up and defaults to the built-in list", async () => {
  const refused = loadSettings("run", {
    argv: ["--command-allow", "disable_notifications,Shutdown_Program"],
    env: {},
  });
  await assert.rejects(refused, (err: Error) => {
    assert.ok(err instanceof ConfigError);
    assert.match(err.message, /--command-allow/);
    assert.match(err.message, /"Shutdown_Program" is not one of the external command names/);
    return true;
  });
  const all = await loadSettings("run", { argv: ["--command-allow", "*"], env: {} });
  assert.deepEqual(all.settings.commandAllow, ["*"]);
  const fallback = await loadSettings("run", { argv: [], env: {} });
  assert.deepEqual(fallback.settings.commandAllow, [...DEFAULT_ALLOWED_RAW_COMMANDS]);
});

Deno.test("commands: Data below 32 levels and text after the object are 400; 32 levels reach statusngin_cmd intact", async () => {
  await using gearmand = await startGearmand();
  await withWorker({ gearmanServers: [gearmand.addr] }, async (worker, url) => {
    // Envelope level 1, Data level 2, Data.x level 3: n nested objects put the scalar at 3 + n.
    const chain = (n: number): unknown => n === 0 ? 1 : { a: chain(n - 1) };
    const envelope = (n: number) => ({
      Command: "check_result",
      Data: { host_name: "web01", output: "OK", x: chain(n) },
    });
    const deepest = envelope(MAX_JSON_DEPTH - 3);
    assert.equal((await postJson(url, deepest)).status, 202);
    const tooDeep = await postJson(url, envelope(MAX_JSON_DEPTH - 2));
    assert.equal(tooDeep.status, 400);
    assert.match(String(tooDeep.body.error), /nested deeper than 32 levels/);
    const bulk = await postJson(url, { messages: [envelope(MAX_JSON_DEPTH - 4)] });
    assert.equal(bulk.status, 400, "a bulk puts Data two levels lower");

    const single = JSON.stringify({ Command: "raw", Data: "DISABLE_HOST_CHECK;web01" });
    for (const tail of [single, " x", "]", "\u00a0"]) {
      const a = await post(url, single + tail);
      assert.equal(a.status, 400, JSON.stringify(tail));
      assert.match(String(a.body.error), /text after the JSON object/);
    }
    assert.equal(await rejected(worker, "malformed"), 6);
    assert.equal(await jobsAtGearmand(gearmand.addr, COMMAND_QUEUE), 1);
    const [job] = (await takeJobs(gearmand.addr, COMMAND_QUEUE, 1)).map(text);
    assert.equal(job, JSON.stringify(deepest));
  });
});
