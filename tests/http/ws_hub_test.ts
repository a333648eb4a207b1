/**
 * The hub against fake sockets: subscriptions, frame shape, the two bounded buffers and
 * their separate counters, the write timeout and shutdown.
 */
import assert from "node:assert/strict";
import {
  CLIENT_BUFFER_FRAMES,
  HUB_BUFFER_FRAMES,
  type HubSocket,
  parseControlFrame,
  parseTopicsParam,
  WebSocketHub,
  type WebSocketHubOptions,
} from "../../src/http/ws_hub.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { waitFor } from "../helpers/wait.ts";

class FakeSocket implements HubSocket {
  readyState = 1;
  bufferedAmount = 0;
  readonly sent: string[] = [];
  closedWith: { code?: number; reason?: string } | null = null;

  /** Frames handed over, written at once unless {@link holdWrites} is set. */
  send(data: string, written: (err?: Error | null) => void): void {
    this.sent.push(data);
    if (this.holdWrites) this.pendingWrites.push(written);
    else written();
  }

  /** While set, writes stay outstanding in {@link pendingWrites} until the test settles them. */
  holdWrites = false;
  readonly pendingWrites: ((err?: Error | null) => void)[] = [];

  /** The data of every ping sent; the hub's pongs are the test's to give. */
  readonly pings: string[] = [];

  ping(data: string): void {
    this.pings.push(data);
  }

  close(code?: number, reason?: string): void {
    this.readyState = 3;
    this.closedWith = { ...(code === undefined ? {} : { code }), ...(reason ? { reason } : {}) };
  }

  frames(): { topic: string; payload: unknown[] }[] {
    return this.sent.map((s) => JSON.parse(s));
  }
}

async function value(m: Metrics, key: keyof Metrics): Promise<number> {
  const metric = m[key];
  if (!("get" in metric)) throw new Error(`${String(key)} is not a metric`);
  const data = await metric.get();
  return data.values.reduce((n, v) => n + v.value, 0);
}

function hubWith(m: Metrics, options: Omit<WebSocketHubOptions, "metrics"> = {}): WebSocketHub {
  return new WebSocketHub({ metrics: m, statsIntervalMs: 0, ...options });
}

/** A socket whose reader stopped: everything sent stays unsent. */
class StuckSocket extends FakeSocket {
  override send(data: string, written: (err?: Error | null) => void): void {
    super.send(data, written);
    this.bufferedAmount += data.length;
  }
}

Deno.test("parseControlFrame: subscribe, unsubscribe or both; anything else is an error", () => {
  assert.deepEqual(parseControlFrame('{"subscribe":["a","b"]}'), {
    ok: true,
    value: { subscribe: ["a", "b"], unsubscribe: [] },
  });
  assert.deepEqual(parseControlFrame('{"unsubscribe":["a"],"subscribe":[]}'), {
    ok: true,
    value: { subscribe: [], unsubscribe: ["a"] },
  });
  for (const bad of ["nope", "[]", "null", "1", "{}", '{"subscribe":"a"}', '{"unsubscribe":[1]}']) {
    const r = parseControlFrame(bad);
    assert.equal(r.ok, false, bad);
    assert.ok(!r.ok && r.error.length > 0);
  }
});

Deno.test("parseTopicsParam: comma-separated, trimmed, empty entries ignored", () => {
  assert.deepEqual(parseTopicsParam(null), []);
  assert.deepEqual(parseTopicsParam(" a, ,b ,,"), ["a", "b"]);
});

Deno.test("hub: nothing is encoded while no client is connected", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  let encoded = 0;
  const event = {
    toJSON() {
      encoded++;
      return {};
    },
  };
  hub.publish("q", [event]);
  assert.equal(hub.wants("q"), false);
  const s = new FakeSocket();
  const client = hub.register(s, ["other"]);
  assert.ok(client);
  // The pipeline asks before collecting: a client of another topic does not make it collect.
  assert.equal(hub.wants("q"), false);
  assert.equal(hub.wants("other"), true);
  // A connected client that does not want the topic: still not encoded.
  hub.publish("q", [event]);
  // A later frame the client does want: once it arrived, the earlier one was dispatched.
  hub.publish("other", [1]);
  await waitFor(() => s.sent.length === 1);
  assert.equal(encoded, 0);
  hub.close();
});

Deno.test("hub: one frame per publish, exactly {topic, payload}, encoded once for all clients", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const a = new FakeSocket();
  const b = new FakeSocket();
  hub.register(a, []);
  hub.register(b, []);
  let encoded = 0;
  const ev = {
    type: 1,
    toJSON() {
      encoded++;
      return { type: 1 };
    },
  };
  hub.publish("statusngin_hostchecks", [ev, ev]);
  hub.publish("statusngin_logentries", [{ x: "ü" }]);
  await waitFor(() => a.sent.length === 2 && b.sent.length === 2);
  assert.deepEqual(a.frames(), [
    { topic: "statusngin_hostchecks", payload: [{ type: 1 }, { type: 1 }] },
    { topic: "statusngin_logentries", payload: [{ x: "ü" }] },
  ]);
  assert.deepEqual(Object.keys(JSON.parse(a.sent[0] ?? "{}")), ["topic", "payload"]);
  assert.equal(encoded, 2, "two events encoded once, not once per client");
  assert.equal(await value(m, "websocketFramesSent"), 4);
  assert.equal(await value(m, "websocketMessagesBroadcasted"), 6, "events per recipient");
  hub.close();
});

Deno.test("hub: an empty set means all topics, also after unsubscribing from the last (docs/operations.md#quirk-last-topic)", () => {
  const hub = hubWith(createMetrics());
  const s = new FakeSocket();
  const c = hub.register(s, ["a"]);
  assert.ok(c);
  assert.equal(c.wants("a"), true);
  assert.equal(c.wants("b"), false);
  // Additions before removals: subscribing and unsubscribing the same topic removes it.
  c.apply({ subscribe: ["b", "c"], unsubscribe: ["c"] });
  assert.deepEqual(c.topics, ["a", "b"]);
  c.apply({ subscribe: [], unsubscribe: ["a", "b"] });
  assert.deepEqual(c.topics, []);
  assert.equal(c.wants("anything"), true);
  hub.close();
});

Deno.test("hub: a full inbound buffer drops the frame for everyone, counted in events", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const s = new FakeSocket();
  hub.register(s, []);
  // publish() never yields, so the drain cannot run in between: the buffer fills.
  for (let i = 0; i < HUB_BUFFER_FRAMES + 5; i++) hub.publish("q", [1, 2, 3]);
  assert.equal(await value(m, "websocketPublishDropped"), 15);
  assert.equal(await value(m, "websocketMessagesDropped"), 0, "the per-client counter is separate");
  // The socket takes everything, so the client never drops while its buffer is drained.
  await waitFor(() => s.sent.length === HUB_BUFFER_FRAMES);
  hub.close();
});

Deno.test("hub: a stalled client loses frames in its own buffer while a fast one gets all", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const stalled = new FakeSocket();
  stalled.bufferedAmount = 10 * 1024 * 1024;
  const fast = new FakeSocket();
  const slowClient = hub.register(stalled, []);
  hub.register(fast, []);
  const total = CLIENT_BUFFER_FRAMES + 40;
  for (let i = 0; i < total; i++) {
    hub.publish("q", [i, i]);
    // Let the drain run, as the pipeline's awaits do between jobs.
    if (i % 50 === 0) await new Promise((r) => setTimeout(r, 0));
  }
  await waitFor(() => fast.sent.length === total);
  assert.equal(stalled.sent.length, 0);
  assert.equal(slowClient?.droppedEvents, 80);
  assert.equal(await value(m, "websocketMessagesDropped"), 80);
  assert.equal(await value(m, "websocketPublishDropped"), 0);
  // Once the socket drains, the buffered 256 frames follow in order.
  stalled.bufferedAmount = 0;
  await waitFor(() => stalled.sent.length === CLIENT_BUFFER_FRAMES);
  assert.deepEqual(stalled.frames()[0], { topic: "q", payload: [0, 0] });
  hub.close();
});

Deno.test("hub: a socket that makes no write progress is closed and unregistered", async () => {
  const m = createMetrics();
  const hub = hubWith(m, { writeTimeoutMs: 50 });
  const stalled = new FakeSocket();
  stalled.bufferedAmount = 10 * 1024 * 1024;
  hub.register(stalled, []);
  assert.equal(await value(m, "websocketClientsActive"), 1);
  hub.publish("q", [1]);
  await waitFor(() => stalled.closedWith !== null);
  assert.deepEqual(stalled.closedWith, { code: 1008, reason: "write timeout" });
  assert.equal(hub.clients, 0);
  assert.equal(await value(m, "websocketClientsActive"), 0);
  hub.close();
});

Deno.test("hub: an invalid control frame gets an error frame, no metric moves", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const s = new FakeSocket();
  const c = hub.register(s, []);
  c?.sendError("not valid JSON");
  assert.deepEqual(s.frames(), [{ error: "not valid JSON" }]);
  assert.equal(await value(m, "websocketFramesSent"), 0);
  hub.close();
});

Deno.test("hub: close sends every client a close frame and refuses new ones", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const a = new FakeSocket();
  const b = new FakeSocket();
  hub.register(a, []);
  hub.register(b, ["x"]);
  hub.publish("q", [1]);
  hub.close();
  assert.deepEqual(a.closedWith, { code: 1001, reason: "server shutting down" });
  assert.deepEqual(b.closedWith, { code: 1001, reason: "server shutting down" });
  assert.equal(await value(m, "websocketClientsActive"), 0);
  const late = new FakeSocket();
  assert.equal(hub.register(late, []), null);
  assert.deepEqual(late.closedWith, { code: 1001, reason: "server shutting down" });
  hub.close();
});

Deno.test("hub: frames still buffered when a client goes are counted as dropped, whichever way it goes", async () => {
  // Write timeout, the client's own disconnect, and shutdown: each discards the buffer.
  for (const way of ["write timeout", "disconnect", "shutdown"] as const) {
    const m = createMetrics();
    const hub = hubWith(m, { writeTimeoutMs: way === "write timeout" ? 50 : 60_000 });
    const stalled = new FakeSocket();
    stalled.bufferedAmount = 10 * 1024 * 1024;
    const client = hub.register(stalled, []);
    assert.ok(client !== null);
    client.sendError("error frames are not events");
    for (let i = 0; i < 10; i++) hub.publish("q", [i, i, i]);
    await waitFor(() => client.queuedEvents === 30);
    assert.equal(await value(m, "websocketMessagesDropped"), 0, way);
    assert.equal(await value(m, "websocketMessagesBroadcasted"), 0, "queued is not sent");
    if (way === "write timeout") await waitFor(() => hub.clients === 0);
    else if (way === "disconnect") hub.unregister(client);
    else hub.close();
    assert.equal(await value(m, "websocketMessagesDropped"), 30, way);
    assert.equal(client.droppedEvents, 30, way);
    // Once only: a second unregister or close finds nothing left.
    hub.unregister(client);
    hub.close();
    assert.equal(await value(m, "websocketMessagesDropped"), 30, way);
  }
});

Deno.test("hub: every event offered to a client is counted once, as sent or as dropped", async () => {
  // A client that reads a little, then stops: some frames reach the socket, some wait in
  // its buffer, the rest overflow it; then it goes. Each event lands in exactly one counter.
  for (const way of ["write timeout", "disconnect", "shutdown", "send fails"] as const) {
    const m = createMetrics();
    const hub = hubWith(m, { writeTimeoutMs: way === "write timeout" ? 50 : 60_000 });
    // Unsent bytes that shrink a little on every look while `trickle` is set: a slow reader
    // the write timeout spares until the test stops it.
    let trickle = true;
    let unsent = 0;
    const socket = new FakeSocket();
    Object.defineProperty(socket, "bufferedAmount", {
      get: () => (unsent -= trickle && unsent > 0 ? 1 : 0),
      set: (v: number) => (unsent = v),
    });
    const client = hub.register(socket, []);
    assert.ok(client !== null);
    let offered = 0;
    const JOBS = CLIENT_BUFFER_FRAMES + 100;
    for (let i = 0; i < JOBS; i++) {
      const events = Array.from({ length: 1 + (i % 7) }, (_, k) => k);
      hub.publish("q", events);
      offered += events.length;
      // The reader stops after 20 frames: the socket's unsent bytes stay above the mark.
      if (i === 19) socket.bufferedAmount = 10 * 1024 * 1024;
      await new Promise((r) => setTimeout(r, 0));
    }
    assert.ok(client.queuedEvents > 0);
    trickle = false;
    const sent = socket.frames().reduce((n, f) => n + f.payload.length, 0);
    if (way === "write timeout") await waitFor(() => hub.clients === 0);
    else if (way === "disconnect") hub.unregister(client);
    else if (way === "shutdown") hub.close();
    else {
      // The socket closes under the pump: the frame it refuses is lost, not sent.
      socket.send = () => {
        throw new Error("socket closed");
      };
      socket.bufferedAmount = 0;
      await waitFor(async () => await value(m, "websocketMessagesDropped") > 0);
      hub.unregister(client);
    }
    const broadcasted = await value(m, "websocketMessagesBroadcasted");
    const dropped = await value(m, "websocketMessagesDropped");
    assert.equal(broadcasted, sent, `${way}: broadcasted counts what reached the socket`);
    assert.equal(sent + dropped, offered, `${way}: sent + dropped = offered`);
    assert.equal(client.droppedEvents, dropped, way);
    assert.equal(await value(m, "websocketFramesSent"), socket.sent.length, way);
    hub.close();
  }
});

Deno.test("hub: one client's send buffer is bounded in bytes as well as in frames", async () => {
  const m = createMetrics();
  const hub = hubWith(m, {
    clientBufferBytes: 1_000_000,
    slowClientCloseMs: 60_000,
    writeTimeoutMs: 60_000,
  });
  const stalled = new FakeSocket();
  stalled.bufferedAmount = 10 * 1024 * 1024;
  const client = hub.register(stalled, []);
  assert.ok(client !== null);
  const big = "x".repeat(100_000);
  for (let i = 0; i < 30; i++) {
    hub.publish("q", [big]);
    await new Promise((r) => setTimeout(r, 0));
  }
  await waitFor(() => client.queuedEvents + client.droppedEvents === 30, {
    message: "every frame queued or dropped",
  });
  assert.ok(client.queuedBytes <= 1_000_000, `${client.queuedBytes} characters queued`);
  assert.equal(await value(m, "websocketMessagesDropped"), 21, "9 frames of 100,000 fit");
  // A frame larger than the whole buffer still goes through an empty buffer.
  const fresh = new FakeSocket();
  const other = hub.register(fresh, []);
  stalled.close();
  hub.unregister(client);
  hub.publish("q", ["y".repeat(2_000_000)]);
  await waitFor(() => fresh.sent.length === 1);
  assert.equal(other?.droppedEvents, 0);
  hub.close();
});

Deno.test("hub: the bytes held for all stalled sockets stay within the budget plus one frame each", async () => {
  const m = createMetrics();
  const BUDGET = 1_000_000;
  const FRAME = 100_000;
  const hub = hubWith(m, { socketBudgetBytes: BUDGET, slowClientCloseMs: 60_000 });
  const sockets = Array.from({ length: 20 }, () => new StuckSocket());
  for (const s of sockets) hub.register(s, []);
  const payload = "x".repeat(FRAME);
  for (let i = 0; i < 10; i++) {
    hub.publish("q", [payload]);
    await new Promise((r) => setTimeout(r, 0));
  }
  await waitFor(() => sockets.every((s) => s.sent.length > 0), { message: "one frame each" });
  const held = sockets.reduce((n, s) => n + s.bufferedAmount, 0);
  // Without the budget each socket takes frames up to its 256 KiB mark: 20 × 3 frames.
  assert.ok(held <= BUDGET + sockets.length * (FRAME + 100), `${held} bytes unsent`);
  assert.equal(hub.unsentBytes, held, "the budget counts what the sockets hold");
  // A client that reads again gets its frames; the budget follows.
  const first = sockets[0] as StuckSocket;
  const before = first.sent.length;
  first.bufferedAmount = 0;
  await waitFor(() => first.sent.length > before);
  hub.close();
  assert.equal(hub.unsentBytes, 0, "closed clients leave the budget");
});

Deno.test("hub: a client that loses frames while its socket takes none is closed sooner, and counted", async () => {
  const m = createMetrics();
  const hub = hubWith(m, { writeTimeoutMs: 60_000, slowClientCloseMs: 50 });
  const stalled = new FakeSocket();
  stalled.bufferedAmount = 10 * 1024 * 1024;
  const reading = new FakeSocket();
  hub.register(stalled, []);
  hub.register(reading, []);
  for (let i = 0; i < CLIENT_BUFFER_FRAMES + 1; i++) hub.publish("q", [i]);
  await waitFor(() => stalled.closedWith !== null, { message: "the losing client closed" });
  assert.deepEqual(stalled.closedWith, { code: 1008, reason: "too slow" });
  assert.equal(await value(m, "websocketSlowClientsClosed"), 1);
  assert.equal(hub.clients, 1, "the reading client stays");
  assert.equal(reading.closedWith, null);
  hub.close();
});

Deno.test("hub: a frame handed to the socket counts as sent once written, as dropped when the connection goes first", async () => {
  const m = createMetrics();
  const hub = hubWith(m);
  const socket = new FakeSocket();
  socket.holdWrites = true;
  const client = hub.register(socket, []);
  assert.ok(client !== null);
  for (let i = 0; i < 5; i++) hub.publish("q", [i, i]);
  await waitFor(() => socket.sent.length === 5);
  // Handed over, not written yet: neither sent nor dropped.
  assert.equal(await value(m, "websocketMessagesBroadcasted"), 0);
  assert.equal(await value(m, "websocketMessagesDropped"), 0);
  for (const written of socket.pendingWrites.splice(0, 2)) written();
  assert.equal(await value(m, "websocketMessagesBroadcasted"), 4);
  assert.equal(await value(m, "websocketFramesSent"), 2);
  // The peer goes; the runtime then reports the other three as not written.
  hub.unregister(client);
  let settled = false;
  client.whenSettled(() => settled = true);
  assert.equal(settled, false, "writes are still outstanding");
  for (const written of socket.pendingWrites.splice(0)) written(new Error("EPIPE"));
  assert.equal(settled, true);
  assert.equal(await value(m, "websocketMessagesBroadcasted"), 4);
  assert.equal(await value(m, "websocketMessagesDropped"), 6);
  assert.equal(await value(m, "websocketFramesSent"), 2);
  assert.equal(client.droppedEvents, 6);
  hub.close();
});

Deno.test("hub: a client holds at most the unread bound until its pong; one that never answers is closed", async () => {
  const m = createMetrics();
  const UNREAD = 10_000;
  const hub = hubWith(m, { unreadBytes: UNREAD, writeTimeoutMs: 60_000, slowClientCloseMs: 50 });
  // The runtime writes every frame at once (bufferedAmount stays 0), as it does while the
  // kernel's buffers take them: only the peer's pong tells that it read them.
  const socket = new FakeSocket();
  const client = hub.register(socket, []);
  assert.ok(client !== null);
  const payload = "x".repeat(1_000);
  const frameLength = JSON.stringify({ topic: "q", payload: [payload] }).length;
  for (let i = 0; i < 30; i++) hub.publish("q", [payload]);
  await waitFor(() => client.queuedEvents + socket.sent.length === 30, {
    message: "every frame handed over or queued",
  });
  const handed = () => socket.sent.reduce((n, f) => n + f.length, 0);
  assert.equal(socket.sent.length, Math.floor(UNREAD / frameLength), "the pump stops at the bound");
  assert.ok(handed() <= UNREAD);
  assert.equal(client.unreadBytes, handed());
  assert.deepEqual(socket.pings.length, 1, "one ping behind the frames");
  // A pong of another ping (the keep-alive's) proves nothing.
  client.pong("");
  assert.equal(client.unreadBytes, handed());
  // The peer read up to the ping: as many frames again go out, behind a new ping.
  const before = socket.sent.length;
  client.pong(socket.pings[0] as string);
  assert.equal(socket.sent.length, 2 * before);
  assert.equal(client.unreadBytes, before * frameLength);
  await waitFor(() => socket.pings.length === 2, { message: "a ping behind the new frames" });
  // It answers no more and frames keep coming: it loses frames and is closed (1008), counted.
  for (let i = 0; i < CLIENT_BUFFER_FRAMES + 1; i++) hub.publish("q", [payload]);
  await waitFor(() => socket.closedWith !== null, {
    message: "the client that reads no more closed",
  });
  assert.deepEqual(socket.closedWith, { code: 1008, reason: "too slow" });
  assert.equal(await value(m, "websocketSlowClientsClosed"), 1);
  assert.ok(handed() <= 2 * UNREAD, `${handed()} characters handed over in all`);
  hub.close();
});
