/**
 * The listener under peers that go away at the wrong moment: the process stays up and the
 * listener serves on.
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { type HttpLimits, listen } from "../../src/http/listen.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { registrySum } from "../helpers/metric_registry.ts";
import { waitFor } from "../helpers/wait.ts";

const PLAIN_REQUEST = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
// Any listener may get an upgrade request (`Upgrade: h2c`, or a WebSocket handshake).
const UPGRADE_REQUEST =
  "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";

/** A /metrics-like listener on a free loopback port, with `handler` as its one route. */
function listenMetrics(
  metrics: Metrics,
  handler: () => Response | Promise<Response>,
  limits?: HttpLimits,
) {
  return listen({
    name: "metrics",
    hostname: "127.0.0.1",
    port: 0,
    onError: () => new Response("internal error", { status: 500 }),
    metrics,
    limits,
  }, handler);
}

/** A raw client socket whose errors (the resets the tests cause) are ignored. */
async function connectPeer(port: number): Promise<Socket> {
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => resolve(s));
    s.once("error", reject);
  });
  socket.on("error", () => {});
  return socket;
}

Deno.test("listen: a peer that resets its connection while the handler of its upgrade request runs does not take the process down", async () => {
  const metrics = createMetrics();
  let entered = 0;
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => release = r);
  // Like /metrics: the handler awaits I/O (the /proc reads of a scrape) before it answers.
  await using server = await listenMetrics(metrics, async () => {
    entered++;
    await gate;
    return new Response("ok");
  });
  const open = () =>
    registrySum(metrics, "statusengine_http_connections_open").then((n) => n === 1);
  const socket = await connectPeer(server.port);
  socket.write(UPGRADE_REQUEST);
  await waitFor(() => entered === 1, { message: "the handler runs" });
  assert.ok(await open());
  // A reset, not a FIN: the server's socket reports ECONNRESET while the handler still waits.
  socket.resetAndDestroy();
  await waitFor(async () => !(await open()), { message: "the server saw the reset" });
  release();
  const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "ok");
});

// The answer of a handler that finished after its peer had gone was still read whole (a 1 MB
// /metrics body) and written to the dead socket, and on a plain request a 30 s response timer was
// armed that nothing cleared: aborted scrapes held their bodies for 30 s. The body's pull is the
// witness: it is called only when the listener reads the answer.
Deno.test("listen: the answer of a handler whose peer has gone is not read, on a plain request and on an upgrade", async () => {
  for (const upgrade of [false, true]) {
    const metrics = createMetrics();
    let entered = 0;
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => release = r);
    let pulled = false;
    let cancelled = false;
    await using server = await listenMetrics(metrics, async () => {
      entered++;
      await gate;
      const body = new ReadableStream<Uint8Array>({
        pull: (controller) => {
          pulled = true;
          controller.enqueue(new Uint8Array(1024));
          controller.close();
        },
        cancel: () => void (cancelled = true),
      }, { highWaterMark: 0 });
      return new Response(body);
    });
    const open = () => registrySum(metrics, "statusengine_http_connections_open");
    const socket = await connectPeer(server.port);
    socket.write(upgrade ? UPGRADE_REQUEST : PLAIN_REQUEST);
    await waitFor(() => entered === 1, { message: "the handler runs" });
    socket.resetAndDestroy();
    await waitFor(async () => (await open()) === 0, { message: "the server saw the reset" });
    release();
    await waitFor(() => pulled || cancelled, { message: "the answer is read or dropped" });
    assert.equal(pulled, false, `upgrade=${upgrade}: the answer for a gone peer was read`);
  }
});

// The response timeout (a peer that does not take its answer is closed) was armed only on a plain
// request: an answer to a request with an Upgrade header (`Upgrade: h2c` or `websocket` sent to
// /metrics, which anyone who reaches the port can send) that the peer never read held its
// connection, and a place under the cap, for as long as the peer liked.
Deno.test("listen: a peer that does not take its answer is closed after the response timeout, on a plain request and on an upgrade", async () => {
  for (const upgrade of [false, true]) {
    const metrics = createMetrics();
    let answered = 0;
    await using server = await listenMetrics(metrics, () => {
      answered++;
      // Far more than the kernels' buffers on both ends of a loopback connection take.
      return new Response(new Uint8Array(32 * 1024 * 1024));
    }, { responseTimeoutMs: 200 });
    const open = () => registrySum(metrics, "statusengine_http_connections_open");
    using conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await conn.write(new TextEncoder().encode(upgrade ? UPGRADE_REQUEST : PLAIN_REQUEST));
    await waitFor(() => answered === 1, { message: "the handler answers" });
    // The peer never reads: the listener gives up on it.
    await waitFor(async () => (await open()) === 0, {
      message: `upgrade=${upgrade}: the connection whose answer is not taken closed`,
    });
  }
});
