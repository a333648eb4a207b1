/**
 * The three HTTP listeners (metrics, /ws, /commands) under hostile clients: a
 * request head that never completes is cut after the header timeout, and
 * connections beyond the cap are closed at once and counted; a real worker
 * with all three listeners, a private gearmand and a scratch database.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { createSchema, metricValue, startTestWorker, testConfig } from "./helpers/worker.ts";
import type { RunningWorker } from "../src/daemon/mod.ts";
import type { HttpLimits, ListenerName } from "../src/http/listen.ts";
import { HEADER_TIMEOUT_MS, LISTENERS, MAX_CONNECTIONS } from "../src/http/listen.ts";
import { loadSettings } from "../src/config/mod.ts";
import { workerConfigFrom } from "../src/cli/run.ts";
import { withLogs } from "./helpers/logs.ts";

const WS_KEY = "ws-key";
const COMMAND_KEY = "command-key";

async function withWorker(
  http: HttpLimits,
  fn: (worker: RunningWorker, ports: Record<ListenerName, number>) => Promise<void>,
): Promise<void> {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    metrics: { hostname: "127.0.0.1", port: 0 },
    websocket: { hostname: "127.0.0.1", port: 0, apiKeys: [WS_KEY] },
    commands: { hostname: "127.0.0.1", port: 0, apiKeys: [COMMAND_KEY] },
    http,
  }));
  const ports = {
    metrics: worker.metricsPort,
    websocket: worker.websocketPort,
    commands: worker.commandsPort,
  };
  for (const [name, port] of Object.entries(ports)) assert.ok(port !== null, name);
  await fn(worker, ports as Record<ListenerName, number>);
}

/** A request that works on each listener. */
async function request(listener: ListenerName, port: number, host = "127.0.0.1"): Promise<number> {
  const base = `http://${host}:${port}`;
  const res = listener === "metrics"
    ? await fetch(`${base}/metrics`)
    : listener === "commands"
    ? await fetch(`${base}/commands`, {
      method: "POST",
      headers: { "x-api-key": COMMAND_KEY },
      body: '{"Command":"raw","Data":"DISABLE_HOST_CHECK;web01"}',
    })
    : await fetch(`${base}/ws`); // no key: 401 before the upgrade, a complete exchange
  await res.body?.cancel();
  return res.status;
}

const OK: Record<ListenerName, number> = { metrics: 200, commands: 202, websocket: 401 };

/** A connection that sends the start of a request head and then nothing. */
async function slowloris(port: number): Promise<Deno.TcpConn> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(new TextEncoder().encode("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  return conn;
}

/** Resolves once the server has closed the connection (EOF or reset); fails after 30 s. */
async function closedByServer(conn: Deno.TcpConn): Promise<void> {
  const buf = new Uint8Array(4096);
  const reading = (async () => {
    try {
      while (await conn.read(buf) !== null) {
        // Whatever the server says before closing does not matter.
      }
    } catch {
      // Reset: closed as well.
    }
    return true;
  })();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const closed = await Promise.race([
    reading,
    new Promise<false>((r) => timer = setTimeout(() => r(false), 30_000)),
  ]);
  clearTimeout(timer);
  if (!closed) {
    conn.close();
    await reading;
    throw new Error("the server kept the connection open for 30 s");
  }
}

function series(worker: RunningWorker, name: string, listener: ListenerName): Promise<number> {
  return metricValue(worker, name, { listener });
}

Deno.test("http: 100 connections that never finish their request head are closed after the header timeout on every listener, counted, and service goes on", async () => {
  await withWorker({ headerTimeoutMs: 300 }, async (worker, ports) => {
    for (const listener of LISTENERS) {
      const port = ports[listener];
      const conns = await Promise.all(Array.from({ length: 100 }, () => slowloris(port)));
      try {
        // Would wait forever without the timeout: Deno.serve never closes them.
        await Promise.all(conns.map(closedByServer));
      } finally {
        for (const c of conns) c.close();
      }
      await waitFor(
        async () =>
          await series(worker, "statusengine_http_header_timeouts_total", listener) === 100,
        { message: `100 header timeouts on ${listener}` },
      );
      await waitFor(
        async () => await series(worker, "statusengine_http_connections_open", listener) === 0,
        { message: `no connection left open on ${listener}` },
      );
      assert.equal(await request(listener, port), OK[listener], listener);
      assert.equal(
        await series(worker, "statusengine_http_connections_refused_total", listener),
        0,
      );
    }
  });
});

Deno.test("http: beyond the connection cap a connection is closed at once and counted, on every listener; freed places serve again", async () => {
  const CAP = 5;
  await withWorker({ maxConnections: CAP, headerTimeoutMs: 60_000 }, async (worker, ports) => {
    for (const listener of LISTENERS) {
      const port = ports[listener];
      const held = await Promise.all(Array.from({ length: CAP }, () => slowloris(port)));
      await waitFor(
        async () => await series(worker, "statusengine_http_connections_open", listener) === CAP,
        { message: `${CAP} open on ${listener}` },
      );
      const extra = await Promise.all(Array.from({ length: 3 }, () => slowloris(port)));
      await Promise.all(extra.map(closedByServer));
      for (const c of extra) c.close();
      assert.equal(
        await series(worker, "statusengine_http_connections_refused_total", listener),
        3,
        listener,
      );
      // A real client is refused too while the listener is full.
      await assert.rejects(request(listener, port));
      for (const c of held) c.close();
      await waitFor(
        async () => await series(worker, "statusengine_http_connections_open", listener) === 0,
        { message: `places freed on ${listener}` },
      );
      assert.equal(await request(listener, port), OK[listener], listener);
      // The other listeners were never affected.
      for (const other of LISTENERS.filter((l) => l !== listener)) {
        assert.equal(await request(other, ports[other]), OK[other], other);
      }
      assert.equal(await series(worker, "statusengine_http_header_timeouts_total", listener), 0);
    }
  });
});

Deno.test("http: open /ws streams count against the cap until they close, and keep working", async () => {
  const CAP = 3;
  await withWorker({ maxConnections: CAP }, async (worker, ports) => {
    const url = `ws://127.0.0.1:${ports.websocket}/ws?api_key=${WS_KEY}`;
    const sockets: WebSocket[] = [];
    for (let i = 0; i < CAP; i++) {
      const ws = new WebSocket(url);
      await new Promise<void>((resolve, reject) => {
        ws.onopen = () => resolve();
        ws.onerror = () => reject(new Error("handshake failed"));
      });
      sockets.push(ws);
    }
    assert.equal(await metricValue(worker, "statusengine_websocket_clients_active"), CAP);
    const refused = new WebSocket(url);
    const outcome = await new Promise<string>((resolve) => {
      refused.onopen = () => resolve("open");
      refused.onerror = () => resolve("refused");
    });
    assert.equal(outcome, "refused");
    assert.equal(
      await series(worker, "statusengine_http_connections_refused_total", "websocket"),
      1,
    );
    // The open streams still answer: an invalid control frame gets an error frame.
    const first = sockets[0] as WebSocket;
    const answer = new Promise<string>((r) => first.onmessage = (e) => r(String(e.data)));
    first.send("not json");
    assert.match(await answer, /"error"/);
    const closed = new Promise<void>((r) => first.onclose = () => r());
    first.close();
    await closed;
    await waitFor(
      async () => await series(worker, "statusengine_http_connections_open", "websocket") < CAP,
      { message: "the closed stream's place is free" },
    );
    const again = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      again.onopen = () => resolve();
      again.onerror = () => reject(new Error("handshake refused after a place was freed"));
    });
    sockets[0] = again;
    await Promise.all(sockets.map((ws) =>
      new Promise<void>((r) => {
        ws.onclose = () => r();
        ws.close();
      })
    ));
  });
});

Deno.test("http: every served listener has its connection series from the start; responses close the connection", async () => {
  await withWorker({}, async (worker, ports) => {
    const text = await worker.metrics.registry.metrics();
    for (const listener of LISTENERS) {
      for (
        const name of [
          "statusengine_http_connections_open",
          "statusengine_http_connections_refused_total",
          "statusengine_http_header_timeouts_total",
        ]
      ) {
        assert.match(text, new RegExp(`^${name}\\{listener="${listener}"\\} 0$`, "m"));
      }
    }
    const res = await fetch(`http://127.0.0.1:${ports.metrics}/healthz`);
    assert.equal(res.headers.get("connection"), "close");
    await res.body?.cancel();
  });
});

Deno.test("http: the defaults are 10 s for the head and 512 connections; /metrics binds to loopback unless told otherwise", async () => {
  assert.equal(HEADER_TIMEOUT_MS, 10_000);
  assert.equal(MAX_CONNECTIONS, 512);
  const defaults = await loadSettings("run", { argv: [], env: {} });
  assert.equal(defaults.settings.metricsHost, "127.0.0.1");
  assert.deepEqual(workerConfigFrom(defaults.settings).metrics, {
    hostname: "127.0.0.1",
    port: 9105,
  });
  // The Go worker's form still opens every interface when asked to.
  const goForm = await loadSettings("run", { argv: ["--metrics-listen-addr", ":9105"], env: {} });
  assert.equal(goForm.settings.metricsHost, "");
  const exposed = await loadSettings("run", {
    argv: [],
    env: { STATUSENGINE_METRICS_HOST: "0.0.0.0" },
  });
  assert.equal(exposed.settings.metricsHost, "0.0.0.0");
});

/** A port free on every interface, IPv4 and IPv6 (small race, as gearmand's freePort). */
function freeDualStackPort(): number {
  const listener = Deno.listen({ hostname: "::", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

function hasIpv6Loopback(): boolean {
  try {
    Deno.listen({ hostname: "::1", port: 0 }).close();
    return true;
  } catch {
    return false;
  }
}

// `:port` is the Go worker's "every interface", which Go binds on IPv4 and IPv6; it used to bind
// 0.0.0.0 only, so a Prometheus or UI reaching the worker over IPv6 got "connection refused".
Deno.test({
  name: "http: a :port listen address is reachable over IPv4 and IPv6 on every listener",
  ignore: !hasIpv6Loopback(),
  fn: async () => {
    const ports = { metrics: 0, websocket: 0, commands: 0 };
    for (const name of LISTENERS) ports[name] = freeDualStackPort();
    const { settings } = await loadSettings("run", {
      argv: [
        ...["--metrics-listen-addr", `:${ports.metrics}`],
        ...["--listen-addr", `:${ports.websocket}`],
        ...["--command-listen-addr", `:${ports.commands}`],
      ],
      env: { STATUSENGINE_API_KEYS: WS_KEY, STATUSENGINE_API_COMMAND_KEYS: COMMAND_KEY },
    });
    const { metrics, websocket, commands } = workerConfigFrom(settings);
    assert.ok(metrics && websocket && commands, "all three listeners are configured");
    await using gearmand = await startGearmand();
    await using db = await createScratchDatabase();
    await createSchema(db.url);
    await using _worker = await startTestWorker(testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      metrics,
      websocket,
      commands,
    }));
    for (const listener of LISTENERS) {
      for (const host of ["127.0.0.1", "[::1]"]) {
        assert.equal(await request(listener, ports[listener], host), OK[listener], host);
      }
    }
  },
});

// `::1:9105` reads as host ::1:9105 without a port as well as ::1 port 9105: it was what the
// listening lines and the port-taken error printed.
Deno.test({
  name: "http: IPv6 listen addresses are bracketed in the listening lines and the port-taken error",
  ignore: !hasIpv6Loopback(),
  fn: async () => {
    await using gearmand = await startGearmand();
    await using db = await createScratchDatabase();
    await createSchema(db.url);
    const v6 = { hostname: "::1", port: 0 };
    const listening = await withLogs(async (logs) => {
      await using worker = await startTestWorker(testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        metrics: v6,
        websocket: { ...v6, apiKeys: [WS_KEY] },
        commands: { ...v6, apiKeys: [COMMAND_KEY] },
      }));
      assert.ok(worker.metricsPort !== null);
      return logs.filter((l) => / listening$/.test(l.message)).map((l) => l.properties["addr"]);
    });
    assert.equal(listening.length, 3, JSON.stringify(listening));
    for (const addr of listening) assert.match(String(addr), /^\[::1\]:[0-9]+$/);

    using taken = Deno.listen({ hostname: "::1", port: 0 });
    const port = (taken.addr as Deno.NetAddr).port;
    await assert.rejects(
      startTestWorker(testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        metrics: { hostname: "::1", port },
      })),
      (err: Error) => {
        assert.match(
          err.message,
          new RegExp(`metrics listener \\[::1\\]:${port}: \\[::1\\]:${port}: `),
        );
        return true;
      },
    );
  },
});
