/**
 * GET /ws end to end (issue 7): real WebSocket clients against a
 * worker started in-process, fed through a private gearmand into a scratch database.
 */
import assert from "node:assert/strict";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { type Gearmand, startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { type LogLine, withLogs } from "./helpers/logs.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import type { RunningWorker, WorkerConfig } from "../src/daemon/mod.ts";
import { QUEUE_NAMES, type QueueName } from "../src/events/queues.ts";
import {
  MAX_CLIENT_TOPICS,
  MAX_TOPIC_CHARS,
  TOO_MANY_TOPICS,
  TOPIC_TOO_LONG,
  WebSocketHub,
  type WebSocketHubOptions,
} from "../src/http/ws_hub.ts";
import {
  startWebSocketServer,
  type WebSocketServer,
  type WebSocketServerOptions,
} from "../src/http/ws_server.ts";
import { configureLogging, resetLogging } from "../src/log.ts";
import { createMetrics } from "../src/metrics/registry.ts";
import { registrySum } from "./helpers/metric_registry.ts";
import { hasCode } from "../src/util/errors.ts";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const KEYS = ["key-one", "key-two"];

/** A `/ws` server of the test's own for `hub`, on a free loopback port, taking {@link KEYS}. */
function serveHub(
  hub: WebSocketHub,
  options: Pick<WebSocketServerOptions, "metrics" | "idleTimeoutSeconds"> = {},
): Promise<WebSocketServer> {
  return startWebSocketServer({ hostname: "127.0.0.1", port: 0, apiKeys: KEYS, hub, ...options });
}

function fixture(queue: QueueName): string {
  return Deno.readTextFileSync(new URL(`${queue}.job`, FIXTURES));
}

/** The events of a job body as the stream must carry them: `messages[i]` or the document. */
function eventsOf(text: string): unknown[] {
  const doc = JSON.parse(text);
  return Array.isArray(doc.messages) ? doc.messages : [doc];
}

interface Env extends AsyncDisposable {
  readonly gearmand: Gearmand;
  readonly db: ScratchDatabase;
  readonly worker: RunningWorker;
  readonly port: number;
}

async function startEnv(
  overrides: Partial<WorkerConfig> = {},
  apiKeys: readonly string[] = KEYS,
): Promise<Env> {
  const gearmand = await startGearmand();
  const db = await createScratchDatabase();
  try {
    await createSchema(db.url);
    const worker = await startTestWorker(testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      websocket: { hostname: "127.0.0.1", port: 0, apiKeys },
      ...overrides,
    }));
    const port = worker.websocketPort;
    assert.ok(port !== null && port > 0);
    return {
      gearmand,
      db,
      worker,
      port,
      async [Symbol.asyncDispose]() {
        await worker.stop();
        await db[Symbol.asyncDispose]();
        await gearmand[Symbol.asyncDispose]();
      },
    };
  } catch (err: unknown) {
    await db[Symbol.asyncDispose]();
    await gearmand[Symbol.asyncDispose]();
    throw err;
  }
}

interface Frame {
  readonly topic: string;
  readonly payload: unknown[];
}

/** A real WebSocket client that records every frame it receives. */
interface Client extends AsyncDisposable {
  readonly ws: WebSocket;
  /** Event frames, in arrival order. */
  readonly frames: Frame[];
  /** Error frames (answers to invalid control frames). */
  readonly errors: Record<string, unknown>[];
  /** Raw text of every frame. */
  readonly raw: string[];
  readonly closed: Promise<CloseEvent>;
  /** Send a control frame and wait until the server has processed it (see below). */
  control(frame: unknown): Promise<void>;
}

async function openClient(
  port: number,
  options: { query?: string; headers?: Record<string, string> } = {},
): Promise<Client> {
  const url = `ws://127.0.0.1:${port}/ws${options.query ?? ""}`;
  const ws = new WebSocket(url, { headers: options.headers ?? {} });
  const frames: Frame[] = [];
  const errors: Record<string, unknown>[] = [];
  const raw: string[] = [];
  ws.onmessage = (e: MessageEvent<unknown>) => {
    const text = String(e.data);
    raw.push(text);
    const doc = JSON.parse(text);
    if ("error" in doc) errors.push(doc);
    else frames.push(doc);
  };
  const closed = new Promise<CloseEvent>((resolve) => {
    ws.addEventListener("close", (e) => resolve(e), { once: true });
  });
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve(), { once: true });
    ws.addEventListener("error", () => reject(new Error(`${url}: handshake refused`)), {
      once: true,
    });
  });
  return {
    ws,
    frames,
    errors,
    raw,
    closed,
    async control(frame: unknown) {
      // The server handles a client's messages in order and answers an invalid one with an
      // error frame: once that answer is back, the control frame before it was applied.
      const before = errors.length;
      ws.send(JSON.stringify(frame));
      ws.send("sync");
      await waitFor(() => errors.length > before, { message: "sync error frame" });
      errors.splice(before, 1);
    },
    async [Symbol.asyncDispose]() {
      if (ws.readyState !== WebSocket.CLOSED) ws.close();
      await closed;
    },
  };
}

async function clientsActive(worker: RunningWorker): Promise<number> {
  return await metricValue(worker, "statusengine_websocket_clients_active");
}

async function waitForClients(worker: RunningWorker, n: number): Promise<void> {
  await waitFor(async () => (await clientsActive(worker)) === n, { message: `${n} clients` });
}

async function drained(env: Env, queues: readonly string[]): Promise<void> {
  for (const q of queues) {
    await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, q)) === 0, { message: q });
  }
}

function topics(c: Client): string[] {
  return c.frames.map((f) => f.topic);
}

Deno.test("ws: a handshake without a valid key is refused with 401 before the upgrade", async () => {
  await using env = await startEnv();
  const base = `http://127.0.0.1:${env.port}/ws`;
  const attempts: [string, HeadersInit][] = [
    [base, {}],
    [base, { authorization: "Bearer wrong" }],
    [base, { "x-api-key": "key-one-but-longer" }],
    [`${base}?api_key=wrong`, {}],
    // A wrong header wins over a right query parameter (headers are the first source).
    [`${base}?api_key=key-one`, { authorization: "Bearer nope" }],
  ];
  for (const [url, headers] of attempts) {
    const res = await fetch(url, { headers });
    assert.equal(res.status, 401, `${url} ${JSON.stringify(headers)}`);
    assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
    assert.equal(await res.text(), "unauthorized");
  }
  assert.equal(
    await metricValue(env.worker, "statusengine_pipeline_errors_total", { component: "websocket" }),
    attempts.length,
  );
  // A real client without a key never opens.
  await assert.rejects(openClient(env.port), /handshake refused/);
  // The valid key on a request that is not a handshake: past authentication, the upgrade fails.
  const plain = await fetch(`${base}?api_key=key-one`);
  assert.equal(plain.status, 400);
  await plain.body?.cancel();
  const other = await fetch(`http://127.0.0.1:${env.port}/other?api_key=key-one`);
  assert.equal(other.status, 404);
  await other.body?.cancel();
  assert.equal(await clientsActive(env.worker), 0);
});

Deno.test("ws: the key is accepted from Authorization Bearer, X-Api-Key and ?api_key=", async () => {
  await using env = await startEnv();
  await using _bearer = await openClient(env.port, {
    headers: { authorization: "Bearer key-one" },
  });
  await using _bare = await openClient(env.port, { headers: { authorization: "key-two" } });
  await using _x = await openClient(env.port, { headers: { "x-api-key": "key-two" } });
  await using _query = await openClient(env.port, { query: "?api_key=key-one" });
  await waitForClients(env.worker, 4);
});

// Without keys a random key used to be generated and logged at WARN: a secret in the journal.
Deno.test("ws: without configured keys /ws is not served and no key is logged", async () => {
  const logs: { level: string; message: string; properties: Record<string, unknown> }[] = [];
  await configureLogging({
    level: "debug",
    format: "json",
    write: (line) => logs.push(JSON.parse(line)),
  });
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  try {
    await using worker = await startTestWorker(testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      websocket: { hostname: "127.0.0.1", port: 0, apiKeys: [] },
    }));
    assert.equal(worker.websocketPort, null);
    assert.ok(logs.some((l) => l.message.startsWith("websocket: GET /ws disabled")));
    for (const l of logs) {
      assert.ok(!("api_key" in l.properties), JSON.stringify(l));
      assert.doesNotMatch(JSON.stringify(l), /[0-9a-f]{64}/, "nothing that looks like a key");
    }
  } finally {
    await resetLogging();
  }
  await assert.rejects(
    startWebSocketServer({
      hostname: "127.0.0.1",
      port: 0,
      apiKeys: [""],
      hub: new WebSocketHub({ statsIntervalMs: 0 }),
    }),
    TypeError,
  );
});

Deno.test("ws: one frame per job, exactly {topic, payload[]}, carrying the job's events unchanged", async () => {
  await using env = await startEnv();
  // Nothing is encoded or kept while no client listens; a later client gets no replay.
  await publish(env.gearmand.addr, "statusngin_logentries", [fixture("statusngin_logentries")]);
  await drained(env, ["statusngin_logentries"]);
  assert.equal(await metricValue(env.worker, "statusengine_websocket_frames_sent_total"), 0);

  await using client = await openClient(env.port, { headers: { "x-api-key": "key-one" } });
  await waitForClients(env.worker, 1);
  // The core restart last: its cleanup would race with the status rows otherwise (irrelevant
  // here, but keeps the database quiet).
  const queues = QUEUE_NAMES.filter((q) => q !== "statusngin_core_restart");
  for (const q of queues) await publish(env.gearmand.addr, q, [fixture(q)]);
  // Three jobs of one queue: three frames, never merged.
  await publish(env.gearmand.addr, "statusngin_hostchecks", [
    fixture("statusngin_hostchecks"),
    fixture("statusngin_hostchecks"),
  ]);
  await drained(env, queues);
  await publish(env.gearmand.addr, "statusngin_core_restart", [fixture("statusngin_core_restart")]);
  await drained(env, ["statusngin_core_restart"]);
  const expected = queues.length + 2 + 1;
  await waitFor(() => client.frames.length === expected, {
    message: `${expected} frames, got ${client.frames.length}`,
  });

  for (const text of client.raw) {
    assert.deepEqual(Object.keys(JSON.parse(text)), ["topic", "payload"], text.slice(0, 200));
  }
  for (const q of QUEUE_NAMES) {
    const mine = client.frames.filter((f) => f.topic === q);
    assert.equal(mine.length, q === "statusngin_hostchecks" ? 3 : 1, q);
    for (const f of mine) {
      assert.ok(Array.isArray(f.payload) && f.payload.length > 0, q);
      assert.deepEqual(f.payload, eventsOf(fixture(q)), q);
    }
  }
  // The bulk fixtures travel as one frame each, with all their events.
  assert.equal(client.frames.find((f) => f.topic === "statusngin_logentries")?.payload.length, 3);
  assert.equal(await metricValue(env.worker, "statusengine_websocket_frames_sent_total"), expected);
  const events = QUEUE_NAMES.reduce((n, q) => n + eventsOf(fixture(q)).length, 0) + 2;
  assert.equal(
    await metricValue(env.worker, "statusengine_websocket_messages_broadcasted_total"),
    events,
  );
});

Deno.test("ws: a job's frame is streamed before its rows reach MySQL: it arrives while MySQL is unreachable and the job is unacknowledged", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: proxy.url,
    queues: ["statusngin_logentries"],
    websocket: { hostname: "127.0.0.1", port: 0, apiKeys: KEYS },
  }));
  await using client = await openClient(worker.websocketPort ?? 0, {
    headers: { "x-api-key": "key-one" },
  });
  await waitForClients(worker, 1);
  proxy.block();
  await publish(gearmand.addr, "statusngin_logentries", [fixture("statusngin_logentries")]);
  await waitFor(() => client.frames.length === 1, { message: "the frame" });
  // Streamed, yet neither committed nor acknowledged: the stream runs ahead of the database.
  const [row] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_logentries",
  );
  assert.equal(Number(row?.n), 0);
  assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_logentries"), 1);
  proxy.unblock();
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, "statusngin_logentries")) === 0, {
    message: "committed and acknowledged after MySQL returned",
    timeoutMs: 30_000,
  });
  assert.equal(client.frames.length, 1, "no second frame for the same job");
});

Deno.test("ws: stale status events are not streamed; a job left empty sends no frame (docs/payloads.md#stale-status)", async () => {
  await using env = await startEnv({ statusMaxAgeSeconds: 300 });
  await using client = await openClient(env.port, {
    query: "?api_key=key-one&topics=statusngin_hoststatus,statusngin_logentries",
  });
  await waitForClients(env.worker, 1);
  const template = eventsOf(fixture("statusngin_hoststatus"))[0] as Record<string, unknown>;
  const now = Math.floor(Date.now() / 1000);
  const fresh = { ...template, timestamp: now };
  // The fixture's events are months old: the whole job is stale.
  await publish(env.gearmand.addr, "statusngin_hoststatus", [fixture("statusngin_hoststatus")]);
  await drained(env, ["statusngin_hoststatus"]);
  await publish(env.gearmand.addr, "statusngin_hoststatus", [
    JSON.stringify({ messages: [template, fresh] }),
  ]);
  await drained(env, ["statusngin_hoststatus"]);
  // A marker on another topic: once it is here, every earlier frame has been delivered.
  await publish(env.gearmand.addr, "statusngin_logentries", [fixture("statusngin_logentries")]);
  await waitFor(() => topics(client).includes("statusngin_logentries"));
  assert.deepEqual(topics(client), ["statusngin_hoststatus", "statusngin_logentries"]);
  assert.deepEqual(client.frames[0]?.payload, [fresh]);
});

Deno.test("ws: ?topics= selects topics and subscribe/unsubscribe frames change them at run time", async () => {
  await using env = await startEnv();
  await using picky = await openClient(env.port, {
    query: "?api_key=key-one&topics= statusngin_logentries,,",
  });
  await using all = await openClient(env.port, { query: "?api_key=key-one" });
  await waitForClients(env.worker, 2);
  const round = async (n: number) => {
    await publish(env.gearmand.addr, "statusngin_logentries", [fixture("statusngin_logentries")]);
    await drained(env, ["statusngin_logentries"]);
    await publish(env.gearmand.addr, "statusngin_hostchecks", [fixture("statusngin_hostchecks")]);
    await drained(env, ["statusngin_hostchecks"]);
    // The unfiltered client sees both topics of every round.
    await waitFor(() => all.frames.length === 2 * n, { message: `round ${n}` });
  };
  await round(1);
  // Additions before removals, in one frame.
  await picky.control({
    subscribe: ["statusngin_hostchecks", "statusngin_logentries"],
    unsubscribe: ["statusngin_logentries"],
  });
  await round(2);
  // Unsubscribing from the last topic means all topics again (a Go quirk kept,
  // docs/operations.md#quirk-last-topic).
  await picky.control({ unsubscribe: ["statusngin_hostchecks"] });
  await round(3);
  await waitFor(() => picky.frames.length === 4);
  assert.deepEqual(topics(picky), [
    "statusngin_logentries",
    "statusngin_hostchecks",
    "statusngin_logentries",
    "statusngin_hostchecks",
  ]);
  assert.deepEqual(picky.errors, []);
});

Deno.test("ws: an invalid control frame is answered with an error frame and the client stays connected", async () => {
  await using env = await startEnv();
  await using client = await openClient(env.port, {
    query: "?api_key=key-two&topics=statusngin_logentries",
  });
  await waitForClients(env.worker, 1);
  const invalid = [
    "not json",
    "[]",
    "{}",
    '{"subscribe":"statusngin_hostchecks"}',
    '{"unsubscribe":[1]}',
  ];
  for (const text of invalid) client.ws.send(text);
  await waitFor(() => client.errors.length === invalid.length);
  for (const e of client.errors) {
    assert.deepEqual(Object.keys(e), ["error"]);
    assert.equal(typeof e["error"], "string");
  }
  assert.equal(client.ws.readyState, WebSocket.OPEN);
  await publish(env.gearmand.addr, "statusngin_logentries", [fixture("statusngin_logentries")]);
  await waitFor(() => client.frames.length === 1);
  assert.equal(await clientsActive(env.worker), 1);
});

Deno.test("ws: a client message over 8192 bytes closes the connection (1009)", async () => {
  await using env = await startEnv();
  await using client = await openClient(env.port, { query: "?api_key=key-two" });
  await waitForClients(env.worker, 1);
  client.ws.send(JSON.stringify({ subscribe: ["x".repeat(8192)] }));
  const closed = await client.closed;
  assert.equal(closed.code, 1009);
  await waitForClients(env.worker, 0);
});

/**
 * A client that completes the handshake and then never reads: the hub hands its socket frames
 * up to the unread bound (which the kernel's buffers take), then its 256-frame send buffer fills.
 */
async function stalledClient(port: number, query = ""): Promise<Deno.TcpConn> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(
    new TextEncoder().encode(
      `GET /ws?api_key=key-one${query} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
        "Upgrade: websocket\r\n" +
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
        "Sec-WebSocket-Version: 13\r\n\r\n",
    ),
  );
  const buf = new Uint8Array(512);
  const n = await conn.read(buf);
  const head = new TextDecoder().decode(buf.subarray(0, n ?? 0));
  assert.match(head, /^HTTP\/1\.1 101 /);
  return conn;
}

Deno.test("ws: a stalled client drops frames in its own buffer, counted, and is closed, while another receives every frame", async () => {
  const warnings: { message: string; properties: Record<string, unknown> }[] = [];
  await configureLogging({
    level: "warn",
    format: "json",
    write: (line) => warnings.push(JSON.parse(line)),
  });
  try {
    await stalledClientScenario(warnings);
  } finally {
    await resetLogging();
  }
});

async function stalledClientScenario(
  warnings: readonly { message: string; properties: Record<string, unknown> }[],
): Promise<void> {
  await using env = await startEnv();
  await using fast = await openClient(env.port, { query: "?api_key=key-one" });
  const stalled = await stalledClient(env.port);
  // Disposed before the worker (declared after it), if the test did not close it already.
  using _closeStalled = {
    [Symbol.dispose]: () => {
      try {
        stalled.close();
      } catch {
        // Closed by the test.
      }
    },
  };
  await waitForClients(env.worker, 2);
  const JOBS = 600;
  const PER_JOB = 20;
  // 40 KB frames: 512 KiB handed to the socket and not read plus 256 frames in the client's
  // buffer are about 270 frames; 600 jobs overflow it by far.
  const template = eventsOf(fixture("statusngin_logentries"))[0] as Record<string, unknown>;
  const payloads: string[] = [];
  for (let j = 0; j < JOBS; j++) {
    const messages = [];
    for (let k = 0; k < PER_JOB; k++) {
      const entry = template["logentry"] as Record<string, unknown>;
      messages.push({
        ...template,
        logentry: { ...entry, logentry_data: `${j}/${k} ${"x".repeat(2000)}` },
      });
    }
    payloads.push(JSON.stringify({ messages }));
  }
  // In rounds the fast client can absorb (it shares this process, and the CPU, with the
  // worker): it keeps up by construction, so every frame must reach it.
  const ROUND = 100;
  for (let r = 0; r < JOBS; r += ROUND) {
    await publish(env.gearmand.addr, "statusngin_logentries", payloads.slice(r, r + ROUND));
    await waitFor(() => fast.frames.length === r + ROUND, {
      timeoutMs: 30_000,
      message: `${r + ROUND} frames at the fast client, got ${fast.frames.length}`,
    });
  }
  await drained(env, ["statusngin_logentries"]);
  const seen = fast.frames.map((f) => {
    const first = f.payload[0] as { logentry: { logentry_data: string } };
    assert.equal(f.payload.length, PER_JOB);
    return Number(first.logentry.logentry_data.split("/")[0]);
  });
  assert.deepEqual(seen.toSorted((a, b) => a - b), [...Array(JOBS).keys()]);
  const dropped = await metricValue(env.worker, "statusengine_websocket_messages_dropped_total");
  assert.ok(dropped > 0, "the stalled client lost frames");
  assert.equal(dropped % PER_JOB, 0, "drops move in whole jobs");
  assert.equal(
    await metricValue(env.worker, "statusengine_websocket_publish_dropped_total"),
    0,
    "the hub's inbound buffer never overflowed",
  );
  // Every job is in MySQL regardless of the stalled client.
  const [row] = await env.db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_logentries",
  );
  assert.equal(Number(row?.n), JOBS * PER_JOB);
  // It loses frames and its socket takes none: the hub closes it (1008) within seconds,
  // counted; the frames it still had are lost as well.
  await waitForClients(env.worker, 1);
  assert.equal(
    await metricValue(env.worker, "statusengine_websocket_slow_clients_closed_total"),
    1,
  );
  // Frames its socket still holds unwritten (none while the kernel took everything within the
  // unread bound) are lost when the peer goes (here with a reset: it read nothing). Then the
  // client's total is final and logged once, at WARN.
  stalled.close();
  const disconnected = () =>
    warnings.filter((w) => w.message === "websocket: client disconnected after dropped events");
  await waitFor(() => disconnected().length > 0, { message: "the stalled client's total" });
  const total = await metricValue(env.worker, "statusengine_websocket_messages_dropped_total");
  assert.ok(total >= dropped, "the frames its socket still held are dropped too");
  const gone = disconnected();
  assert.equal(gone.length, 1);
  assert.equal(gone[0]?.properties["dropped_events"], total);
  assert.equal(
    warnings.filter((w) => w.message.startsWith("websocket: client closed, it loses frames"))
      .length,
    1,
  );
}

Deno.test("ws: shutdown sends every client a close frame (1001)", async () => {
  await using env = await startEnv();
  const a = await openClient(env.port, { query: "?api_key=key-one" });
  const b = await openClient(env.port, { query: "?api_key=key-two&topics=statusngin_downtimes" });
  await waitForClients(env.worker, 2);
  await env.worker.stop();
  for (const c of [a, b]) {
    const e = await c.closed;
    assert.equal(e.code, 1001);
    assert.equal(e.reason, "server shutting down");
  }
  assert.equal(await clientsActive(env.worker), 0);
  await assert.rejects(openClient(env.port, { query: "?api_key=key-one" }));
});

Deno.test("ws server: connection attempts during shutdown are refused before the upgrade", async () => {
  const hub = new WebSocketHub({ statsIntervalMs: 0 });
  await using server = await serveHub(hub);
  await server.closeClients();
  const res = await fetch(`http://127.0.0.1:${server.port}/ws?api_key=key-one`);
  assert.equal(res.status, 503);
  await res.body?.cancel();
});

Deno.test("ws: a taken --listen-addr refuses to start, naming the address and the setting", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  await assert.rejects(
    startTestWorker(testConfig({
      gearmanServers: ["127.0.0.1:1"],
      mysqlUrl: db.url,
      websocket: { hostname: "127.0.0.1", port, apiKeys: KEYS },
    })),
    (err: Error) => {
      assert.ok(hasCode(err, "startup"), String(err));
      assert.match(err.message, new RegExp(`websocket listener 127\\.0\\.0\\.1:${port}: `));
      assert.match(err.message, /--listen-addr \(STATUSENGINE_LISTEN_ADDR\)/);
      return true;
    },
  );
});

/** Text frames and the close code read from a raw connection until the server's close frame. */
async function readUntilClose(
  conn: Deno.TcpConn,
): Promise<{ frames: { payload: unknown[] }[]; closeCode: number }> {
  const frames: { payload: unknown[] }[] = [];
  let pending = new Uint8Array(0);
  const chunk = new Uint8Array(1 << 20);
  for (;;) {
    const n = await conn.read(chunk);
    if (n === null) throw new Error("EOF before the close frame");
    const joined = new Uint8Array(pending.length + n);
    joined.set(pending);
    joined.set(chunk.subarray(0, n), pending.length);
    pending = joined;
    for (;;) {
      // Server frames are unmasked: 2 header bytes, then 0, 2 or 8 length bytes.
      if (pending.length < 2) break;
      const opcode = (pending[0] as number) & 0x0f;
      let length = (pending[1] as number) & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (pending.length < 4) break;
        length = ((pending[2] as number) << 8) | (pending[3] as number);
        offset = 4;
      } else if (length === 127) {
        if (pending.length < 10) break;
        length = 0;
        for (let i = 2; i < 10; i++) length = length * 256 + (pending[i] as number);
        offset = 10;
      }
      if (pending.length < offset + length) break;
      const body = pending.subarray(offset, offset + length);
      if (opcode === 1) frames.push(JSON.parse(new TextDecoder().decode(body)));
      if (opcode === 8) {
        return { frames, closeCode: ((body[0] as number) << 8) | (body[1] as number) };
      }
      pending = pending.subarray(offset + length);
    }
  }
}

/** Jobs of {@link stallingJob}: 600 frames of about 40 KB, 24 MB, fewer frames than the hub buffers. */
const STALL_JOBS = 600;
const STALL_PER_JOB = 20;

/** The events of job `j` of a stalled client's test: 20 of about 2 KB. */
function stallingJob(j: number): { j: number; k: number; x: string }[] {
  return Array.from({ length: STALL_PER_JOB }, (_, k) => ({ j, k, x: "x".repeat(2000) }));
}

/** A hub and `/ws` server of the test's own, and one client of it that never reads. */
async function serverWithStalledClient(
  options: Omit<WebSocketHubOptions, "metrics" | "statsIntervalMs">,
) {
  const metrics = createMetrics();
  const hub = new WebSocketHub({ metrics, statsIntervalMs: 0, ...options });
  const server = await serveHub(hub, { metrics });
  const conn = await stalledClient(server.port);
  await waitFor(() => hub.clients === 1);
  return {
    metrics,
    hub,
    server,
    conn,
    async [Symbol.asyncDispose]() {
      try {
        conn.close();
      } catch {
        // Closed by the test.
      }
      await server.shutdown();
    },
  };
}

Deno.test("ws server: a client closed for not reading gets every event it is not counted as dropped for", async () => {
  await using env = await serverWithStalledClient({ writeTimeoutMs: 1_000 });
  const { metrics, hub, conn } = env;
  // All in one go (fewer frames than the hub buffers): the hub then offers every one of them
  // to the client in its next few drain turns, long before the client can be closed; an
  // event the hub dispatches after the close was never the client's to receive or count.
  for (let j = 0; j < STALL_JOBS; j++) hub.publish("statusngin_logentries", stallingJob(j));
  // The client never reads: the hub closes it after the write timeout.
  await waitFor(() => hub.clients === 0, { message: "the stalled client closed by the hub" });
  const dropped = await registrySum(metrics, "statusengine_websocket_messages_dropped_total");
  // Now it reads what reached it: everything up to the close frame.
  const { frames, closeCode } = await readUntilClose(conn);
  assert.equal(closeCode, 1008);
  const received = frames.reduce((n, f) => n + f.payload.length, 0);
  assert.ok(received > 0 && dropped > 0, `received ${received}, dropped ${dropped}`);
  assert.equal(
    received + dropped,
    STALL_JOBS * STALL_PER_JOB,
    "every event is either received or counted",
  );
  // Broadcasted counts a frame once the runtime reports it written, which may be reported
  // after the client read it: wait for the count, which must then be exactly what arrived.
  const broadcasted = () =>
    registrySum(metrics, "statusengine_websocket_messages_broadcasted_total");
  await waitFor(async () => (await broadcasted()) >= received, { message: "writes reported" });
  assert.equal(
    await broadcasted(),
    received,
    "broadcasted counts the events written to the connection, which all arrived",
  );
  assert.equal(
    await registrySum(metrics, "statusengine_websocket_messages_dropped_total"),
    dropped,
    "nothing the client received is counted as dropped",
  );
});

/**
 * Bytes the kernel holds for the connections of `port`, from `ss`: the send queues of the
 * server's sockets and the receive queues of the clients' (both ends are on loopback).
 */
async function kernelQueuedBytes(port: number): Promise<number> {
  const out = await new Deno.Command("ss", {
    args: ["-tnH", `( sport = :${port} or dport = :${port} )`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  let total = 0;
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const [, recvQ, sendQ] = line.trim().split(/\s+/);
    if (sendQ !== undefined) total += Number(recvQ) + Number(sendQ);
  }
  return total;
}

Deno.test("ws server: a client that stops reading makes the kernel hold at most the unread bound, and is closed", async () => {
  const UNREAD = 512 * 1024;
  await using env = await serverWithStalledClient({ unreadBytes: UNREAD });
  const { metrics, hub, server, conn } = env;
  // 24 MB: without the bound the kernels' buffers on loopback take several megabytes of it
  // before the runtime holds any.
  const frame = JSON.stringify({ topic: "statusngin_logentries", payload: stallingJob(0) })
    .length;
  for (let j = 0; j < STALL_JOBS; j++) hub.publish("statusngin_logentries", stallingJob(j));
  // It loses frames and has not read what it holds: closed (1008) within seconds, counted.
  await waitFor(() => hub.clients === 0, { message: "the client that stopped reading closed" });
  assert.equal(await registrySum(metrics, "statusengine_websocket_slow_clients_closed_total"), 1);
  // What the kernel holds for it now is all it ever got: the client has read nothing.
  const held = await kernelQueuedBytes(server.port);
  assert.ok(held <= UNREAD + frame + 4096, `the kernel holds ${held} bytes for the client`);
  // Reading it all: the frames handed over before the bound, then the close frame.
  const { frames, closeCode } = await readUntilClose(conn);
  assert.equal(closeCode, 1008);
  const received = frames.reduce((n, f) => n + JSON.stringify(f).length, 0);
  assert.ok(received > 0, "it got frames before the bound");
  assert.ok(received <= UNREAD + frame, `${received} bytes of frames reached the client`);
});

Deno.test("ws server: a silent client is pinged after half the idle timeout and closed when it does not answer; one that answers stays", async () => {
  const hub = new WebSocketHub({ statsIntervalMs: 0 });
  await using server = await serveHub(hub, { idleTimeoutSeconds: 0.4 });
  // Deno's client answers every ping on its own.
  const answering = new WebSocket(`ws://127.0.0.1:${server.port}/ws?api_key=key-one`);
  await new Promise<void>((resolve, reject) => {
    answering.onopen = () => resolve();
    answering.onerror = () => reject(new Error("handshake failed"));
  });
  const silent = await stalledClient(server.port);
  const opcodes: number[] = [];
  const buf = new Uint8Array(4096);
  try {
    for (;;) {
      const n = await silent.read(buf);
      if (n === null) break;
      // Each ping is one small frame per read here: its first byte carries the opcode.
      opcodes.push((buf[0] as number) & 0x0f);
    }
  } catch {
    // Reset: closed as well.
  } finally {
    silent.close();
  }
  assert.equal(opcodes[0], 0x9, "a ping before the close");
  await waitFor(() => hub.clients === 1, { message: "only the silent client closed" });
  assert.equal(answering.readyState, WebSocket.OPEN);
  const closed = new Promise<void>((r) => answering.onclose = () => r());
  answering.close();
  await closed;
});

Deno.test("ws server: a client that stops reading and resets its connection: the frames the runtime never wrote count as dropped", async () => {
  await withLogs(resetWithFramesUnsent);
});

async function resetWithFramesUnsent(lines: readonly LogLine[]): Promise<void> {
  const metrics = createMetrics();
  // Limits far above what the test sends: the hub hands every frame to the socket at once,
  // so no frame waits or is lost in the hub. What the peer's reset loses is lost inside the
  // runtime, in frames already handed to the socket.
  const hub = new WebSocketHub({
    metrics,
    statsIntervalMs: 0,
    highWaterBytes: 1 << 30,
    socketBudgetBytes: 1 << 30,
    unreadBytes: 1 << 30,
  });
  await using server = await serveHub(hub, { metrics });
  const conn = await stalledClient(server.port, "&topics=statusngin_logentries");
  await using marker = await openClient(server.port, { query: "?api_key=key-two&topics=marker" });
  await waitFor(() => hub.clients === 2);
  // 600 frames of about 40 KB, 24 MB: far more than the loopback's kernel buffers take.
  const JOBS = 600;
  const PER_JOB = 20;
  for (let j = 0; j < JOBS; j++) {
    const events = Array.from({ length: PER_JOB }, (_, k) => ({ j, k, x: "x".repeat(2000) }));
    hub.publish("statusngin_logentries", events);
  }
  // Frames are dispatched in order and, under these limits, handed to the socket as they are
  // dispatched: once the marker arrives at the other client, the stalled one's socket has
  // been handed all 600 frames. Its peer read none of them.
  hub.publish("marker", [{ marker: true }]);
  await waitFor(() => marker.frames.length === 1, { message: "the marker frame" });
  // Unread data in its receive buffer: closing sends a reset, not a FIN.
  conn.close();
  await waitFor(() => hub.clients === 1, { message: "the reset client unregistered" });
  // Its total is logged once the runtime has reported every frame handed to its socket.
  const gone = () =>
    lines.filter((l) =>
      l.message.startsWith("websocket: client disconnected") && l.properties["client"] === 1
    );
  await waitFor(() => gone().length === 1, { message: "the reset client's disconnect line" });
  // The marker client's one event is written too (it arrived); then the counts are final.
  const offered = JOBS * PER_JOB;
  const broadcasted = () =>
    registrySum(metrics, "statusengine_websocket_messages_broadcasted_total");
  const dropped = () => registrySum(metrics, "statusengine_websocket_messages_dropped_total");
  await waitFor(async () => (await broadcasted()) + (await dropped()) === offered + 1, {
    message: "every write reported",
  });
  const sent = (await broadcasted()) - 1;
  const lost = await dropped();
  const figures = `offered ${offered}, sent ${sent}, dropped ${lost} events`;
  assert.ok(
    lost > 0,
    `the frames the runtime still held when the peer reset are dropped: ${figures}`,
  );
  assert.ok(sent > 0, `the frames written before the reset are sent: ${figures}`);
  assert.equal(sent + lost, offered, `sent + dropped = offered, exactly: ${figures}`);
  assert.equal(lost % PER_JOB, 0, "whole frames are lost");
  const [line] = gone();
  assert.equal(line?.message, "websocket: client disconnected after dropped events");
  assert.equal(line?.properties["dropped_events"], lost);
  assert.equal(
    await registrySum(metrics, "statusengine_websocket_frames_sent_total"),
    sent / PER_JOB + 1,
  );
}

/** The status line of a raw `/ws` handshake with `query` appended to the key, and `headers`. */
async function handshakeStatus(port: number, query: string, headers = ""): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(
        `GET /ws?api_key=key-one${query} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${headers}` +
          "Upgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      ),
    );
    const buf = new Uint8Array(512);
    const n = await conn.read(buf);
    return new TextDecoder().decode(buf.subarray(0, n ?? 0)).split("\r\n")[0] ?? "";
  } finally {
    conn.close();
  }
}

Deno.test("ws server: a client's topic set is bounded in names and in their length: a subscribe beyond it is refused with an error frame and changes nothing, as is a handshake naming more", async () => {
  const hub = new WebSocketHub({ statsIntervalMs: 0 });
  await using server = await serveHub(hub);
  const names = (from: number, n: number) =>
    Array.from({ length: n }, (_, i) => `topic-${from + i}`);
  await using client = await openClient(server.port, { query: "?api_key=key-one&topics=topic-0" });
  await waitFor(() => hub.clients === 1);
  // Up to the bound: accepted, no error (control() fails on any error frame but its own).
  await client.control({ subscribe: names(1, MAX_CLIENT_TOPICS - 1) });
  assert.deepEqual(client.errors, []);
  // One more distinct topic, in a frame that also repeats a known one: refused whole.
  client.ws.send(JSON.stringify({ subscribe: ["topic-0", `topic-${MAX_CLIENT_TOPICS}`] }));
  client.ws.send("sync");
  await waitFor(() => client.errors.length >= 1, { message: "an answer to the subscribe" });
  assert.equal(client.errors[0]?.["error"], `${TOO_MANY_TOPICS}; the subscription is unchanged`);
  // Thousands of frames of new names: the set does not grow (an unbounded set is memory a
  // key holder or a buggy dashboard could fill).
  for (let f = 0; f < 50; f++) {
    client.ws.send(JSON.stringify({ subscribe: names(1000 + 500 * f, 500) }));
  }
  client.ws.send("sync");
  await waitFor(() => client.errors.length >= 53, { message: "every frame answered" });
  assert.equal(client.ws.readyState, WebSocket.OPEN, "the client stays connected");
  hub.publish(`topic-${MAX_CLIENT_TOPICS}`, [{ refused: true }]);
  hub.publish("topic-1000", [{ refused: true }]);
  hub.publish("topic-0", [{ marker: true }]);
  await waitFor(() => client.frames.length >= 1, { message: "the marker frame" });
  assert.deepEqual(client.frames.map((f) => f.topic), ["topic-0"]);
  // Unsubscribing makes room again.
  await client.control({ unsubscribe: ["topic-1"], subscribe: [`topic-${MAX_CLIENT_TOPICS}`] });
  // So is a name longer than any queue's: 64 names of 8 KiB would hold half a megabyte each.
  const long = "t".repeat(MAX_TOPIC_CHARS + 1);
  const before = client.errors.length;
  client.ws.send(JSON.stringify({ unsubscribe: ["topic-2"], subscribe: [long] }));
  client.ws.send("sync");
  await waitFor(() => client.errors.length > before, { message: "an answer to the long name" });
  assert.equal(
    client.errors[before]?.["error"],
    `${TOPIC_TOO_LONG}; the subscription is unchanged`,
  );
  assert.match(await handshakeStatus(server.port, `&topics=${long}`), /^HTTP\/1\.1 400 /);
  assert.match(
    await handshakeStatus(server.port, `&topics=${long.slice(1)}`),
    /^HTTP\/1\.1 101 /,
  );
  // A handshake naming more distinct topics than the bound is refused before the upgrade.
  const tooMany = names(0, MAX_CLIENT_TOPICS + 1).join(",");
  assert.match(await handshakeStatus(server.port, `&topics=${tooMany}`), /^HTTP\/1\.1 400 /);
  const atBound = `${names(0, MAX_CLIENT_TOPICS).join(",")},topic-0`;
  assert.match(await handshakeStatus(server.port, `&topics=${atBound}`), /^HTTP\/1\.1 101 /);
});

// A header that carries no key (an empty X-Api-Key a proxy sets from an unset variable, a bare
// "Authorization: Bearer") is no key, as /commands reads it, but on /ws it hid the browser's
// ?api_key= behind it: every handshake of that dashboard got 401 with the right key in its URL.
Deno.test("ws server: an empty key header does not hide the ?api_key= behind it; a key in a header still wins", async () => {
  const hub = new WebSocketHub({ statsIntervalMs: 0 });
  await using server = await serveHub(hub);
  for (const header of ["X-Api-Key: \r\n", "X-Api-Key:   \r\n", "Authorization: Bearer\r\n"]) {
    const status = await handshakeStatus(server.port, "", header);
    assert.match(status, /^HTTP\/1\.1 101 /, `${JSON.stringify(header)}: ${status}`);
  }
  // A wrong key in a header is a key: the query string behind it is not read.
  assert.match(
    await handshakeStatus(server.port, "", "X-Api-Key: wrong\r\n"),
    /^HTTP\/1\.1 401 /,
  );
});

// A proxy that drops the Upgrade header in front of a dashboard that reconnects every second
// made one ERROR line per request, for as long as both ran.
Deno.test("ws server: a client failing the upgrade in a loop logs one error (the rest at debug), each counted", async () => {
  const hub = new WebSocketHub({ statsIntervalMs: 0 });
  const metrics = createMetrics();
  await using server = await serveHub(hub, { metrics });
  const lines = await withLogs(async (lines) => {
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`http://127.0.0.1:${server.port}/ws?api_key=key-one`);
      assert.equal(res.status, 400);
      await res.body?.cancel();
    }
    return lines;
  });
  const failed = lines.filter((l) => l.message === "websocket: upgrade failed");
  assert.deepEqual(failed.map((l) => l.level), ["error"], "the rest at debug, not recorded here");
  assert.equal(
    await registrySum(metrics, "statusengine_pipeline_errors_total"),
    20,
  );
});
