/**
 * The `/ws` hub: fans each job's events out to the subscribed clients without ever making the
 * pipeline wait for one. Every buffer is bounded, what is lost is counted, and a client that stops
 * reading is closed (limits and reasons: docs/http.md#ws). It works on the {@link HubSocket}
 * subset of a WebSocket, so unit tests can drive it with fakes.
 *
 * @module
 */
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("websocket");

/** Frames the shared inbound buffer holds; a frame beyond it is lost for everyone. */
export const HUB_BUFFER_FRAMES = 1024;
/** Frames one client's send buffer holds; beyond it the frame is lost for that client. */
export const CLIENT_BUFFER_FRAMES = 256;
/**
 * Distinct topics one client may subscribe to: the queues are a dozen, and a set without a bound
 * is memory any key holder (or a dashboard subscribing in a loop) could fill.
 */
export const MAX_CLIENT_TOPICS = 64;
/** Characters of one topic name (the longest queue name has 36), so 64 names stay small too. */
export const MAX_TOPIC_CHARS = 128;
/** The error frame's (and the refused handshake's) text when a client would exceed them. */
export const TOO_MANY_TOPICS =
  `too many topics: a client subscribes to at most ${MAX_CLIENT_TOPICS}`;
export const TOPIC_TOO_LONG = `topic name over ${MAX_TOPIC_CHARS} characters`;

/** Why a client may not hold `topics` (too many, or a name too long), or null. */
export function topicSetProblem(topics: ReadonlySet<string>): string | null {
  if (topics.size > MAX_CLIENT_TOPICS) return TOO_MANY_TOPICS;
  for (const t of topics) if (t.length > MAX_TOPIC_CHARS) return TOPIC_TOO_LONG;
  return null;
}

/** The hub's limits; {@link WebSocketHubOptions} may override each (tests shorten them). */
const DEFAULT_LIMITS = {
  /** Characters of frame text a client's buffer holds; one larger frame still fits an empty one. */
  clientBufferBytes: 16 * 1024 * 1024,
  /** Unsent bytes of all sockets; beyond it only a socket with nothing unsent gets a frame. */
  socketBudgetBytes: 16 * 1024 * 1024,
  /** A client losing frames whose socket makes no progress for this long is closed. */
  slowClientCloseMs: 2_000,
  /** Unsent bytes a socket may hold: `send()` never blocks, so the runtime would buffer unbounded. */
  highWaterBytes: 256 * 1024,
  /** Bytes handed over and not confirmed read (pong): what a stalled client makes kernels hold. */
  unreadBytes: 512 * 1024,
  /** A socket whose unsent bytes make no progress for this long is closed (Go: write deadline). */
  writeTimeoutMs: 10_000,
};
type HubLimits = typeof DEFAULT_LIMITS;
/** How often a stalled socket is re-checked: {@link HubSocket} has no "drained" event. */
const STALL_POLL_MS = 10;
/** Frames dispatched per timer turn, so a burst does not hold the event loop. */
const DRAIN_BATCH_FRAMES = 128;
const OPEN = 1;

/** The part of a WebSocket the hub uses. */
export interface HubSocket {
  readonly readyState: number;
  /** Bytes handed to `send` and not yet written to the connection. */
  readonly bufferedAmount: number;
  /** `written` is called once: with an error when the frame never will be written. */
  send(data: string, written: (err?: Error | null) => void): void;
  /** A ping behind the frames sent so far; its pong goes to {@link HubClient.pong}. */
  ping(data: string): void;
  close(code?: number, reason?: string): void;
}

export interface WebSocketHubOptions extends Partial<Readonly<HubLimits>> {
  /** The `statusengine_websocket_*` metrics and `pipeline_errors_total`. */
  readonly metrics?: Metrics;
  /** Interval of the `websocket: hub stats` line; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number | undefined;
}

/** A subscription change sent by a client: additions are applied before removals. */
export interface ControlFrame {
  readonly subscribe: readonly string[];
  readonly unsubscribe: readonly string[];
}

export type ControlParse =
  | { readonly ok: true; readonly value: ControlFrame }
  | { readonly ok: false; readonly error: string };

/**
 * Parse a client's text frame: `{"subscribe":[…]}`, `{"unsubscribe":[…]}` or both. Topic names
 * are not validated (an unknown one simply never matches, as in Go).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseControlFrame } from "./ws_hub.ts";
 * const r = parseControlFrame('{"subscribe":["statusngin_hostchecks"]}');
 * assert.ok(r.ok && r.value.subscribe[0] === "statusngin_hostchecks");
 * ```
 */
export function parseControlFrame(text: string): ControlParse {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return { ok: false, error: "not valid JSON" };
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    return { ok: false, error: 'expected an object {"subscribe":[…]} or {"unsubscribe":[…]}' };
  }
  const o = doc as Record<string, unknown>;
  if (!("subscribe" in o) && !("unsubscribe" in o)) {
    return { ok: false, error: 'expected a "subscribe" or "unsubscribe" member' };
  }
  for (const key of ["subscribe", "unsubscribe"]) {
    const v = o[key];
    if (v !== undefined && (!Array.isArray(v) || !v.every((t) => typeof t === "string"))) {
      return { ok: false, error: `"${key}" must be an array of topic names` };
    }
  }
  const value = { subscribe: o["subscribe"] ?? [], unsubscribe: o["unsubscribe"] ?? [] };
  return { ok: true, value: value as ControlFrame };
}

/** The initial topics of `?topics=a,b` (trimmed, empty entries ignored); empty means all. */
export function parseTopicsParam(value: string | null): string[] {
  if (value === null) return [];
  return value.split(",").map((t) => t.trim()).filter((t) => t.length > 0);
}

interface PendingFrame {
  readonly topic: string;
  readonly events: readonly unknown[];
}

interface OutboundFrame {
  readonly data: string;
  /** Events in the frame; 0 for an error frame (not counted in any metric). */
  readonly events: number;
}

/**
 * The hub-wide count of bytes handed to sockets and not yet written, as each client last saw its
 * `bufferedAmount`. An idle client is not looked at again, so while over the limit the total is
 * refreshed from every socket, at most once per poll interval.
 */
class SocketBudget {
  /** Kept up to date by each client's {@link HubClient.observe}. */
  total = 0;
  readonly #limit: number;
  readonly #clients: ReadonlySet<HubClient>;
  #refreshedAt = -Infinity;

  constructor(limit: number, clients: ReadonlySet<HubClient>) {
    this.#limit = limit;
    this.#clients = clients;
  }

  over(bytes: number): boolean {
    if (this.total + bytes <= this.#limit) return false;
    const now = performance.now();
    if (now - this.#refreshedAt >= STALL_POLL_MS) {
      this.#refreshedAt = now;
      for (const client of this.#clients) client.observe();
    }
    return this.total + bytes > this.#limit;
  }
}

/**
 * What {@link WebSocketHub.register} gives each client. `onDiscard` gets the events of frames lost
 * for the client, `onSent` those of a frame written; error frames count in neither.
 */
interface ClientOptions extends Readonly<HubLimits> {
  readonly topics: readonly string[];
  readonly budget: SocketBudget;
  /** `losing`: the client lost frames while stalled (else its socket made no progress at all). */
  readonly onWriteTimeout: (client: HubClient, losing: boolean) => void;
  readonly onDiscard: (events: number) => void;
  readonly onSent: (events: number) => void;
}

/** One connected client: its subscriptions, its send buffer and the pump that drains it. */
export class HubClient {
  readonly id: number;
  readonly #socket: HubSocket;
  #topics: Set<string>;
  readonly #queue: OutboundFrame[] = [];
  readonly #o: ClientOptions;
  /** Frames handed to the socket whose write the runtime has not reported yet. */
  #inFlight = 0;
  /** Called once the client is detached and no write is outstanding. */
  #onSettled: (() => void)[] = [];
  #pollTimer: ReturnType<typeof setTimeout> | undefined;
  /** The pump waits for the socket (or the budget): since when, at which unsent bytes. */
  #stalled = false;
  #stalledSince = 0;
  #stalledAt = 0;
  /** A frame was lost for this client while its socket made no progress. */
  #losingFrames = false;
  #queuedBytes = 0;
  /** The socket's unsent bytes when last looked at, as counted in the budget. */
  #unsent = 0;
  #droppedEvents = 0;
  #removed = false;
  /** Characters of frame text handed to the socket so far, and how many of them the peer read. */
  #handedOver = 0;
  #read = 0;
  /** The ping in flight: its data, and {@link #handedOver} when it was sent. */
  #probe: { readonly data: string; readonly mark: number } | undefined;
  #probes = 0;
  #probeScheduled = false;

  constructor(id: number, socket: HubSocket, options: ClientOptions) {
    this.id = id;
    this.#socket = socket;
    this.#topics = new Set(options.topics);
    this.#o = options;
  }

  /** Events lost for this client; final once {@link whenSettled} called back. */
  get droppedEvents(): number {
    return this.#droppedEvents;
  }

  get queuedEvents(): number {
    return this.#queue.reduce((n, frame) => n + frame.events, 0);
  }

  /** Characters of frame text handed to the socket that the peer has not confirmed reading. */
  get unreadBytes(): number {
    return this.#handedOver - this.#read;
  }

  /** The peer answered a ping; when it is the pump's, all handed over before it was read. */
  pong(data: string): void {
    const probe = this.#probe;
    if (probe === undefined || data !== probe.data || this.#removed) return;
    this.#probe = undefined;
    this.#read = probe.mark;
    this.#stalledSince = performance.now();
    this.#losingFrames = false;
    clearTimeout(this.#pollTimer);
    this.#pollTimer = undefined;
    this.#pump();
  }

  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /** The subscribed topics, sorted; empty means all. */
  get topics(): string[] {
    return [...this.#topics].sort();
  }

  /**
   * Whether a frame of `topic` goes to this client. An empty set means every topic, also
   * after unsubscribing from the last one (a quirk of the Go worker, kept).
   */
  wants(topic: string): boolean {
    return this.#topics.size === 0 || this.#topics.has(topic);
  }

  /**
   * Apply a subscription change; one that would leave a set {@link topicSetProblem} refuses
   * changes nothing and returns the error to answer.
   */
  apply(change: ControlFrame): string | null {
    const next = new Set(this.#topics);
    for (const t of change.subscribe) next.add(t);
    for (const t of change.unsubscribe) next.delete(t);
    const problem = topicSetProblem(next);
    if (problem !== null) return `${problem}; the subscription is unchanged`;
    this.#topics = next;
    return null;
  }

  /**
   * Answer an invalid control frame with `{"error":"…"}` (Go ignores it); lost silently when the
   * send buffer is full, as that client is not reading anyway.
   */
  sendError(message: string): void {
    const data = JSON.stringify({ error: message });
    if (this.#queue.length < CLIENT_BUFFER_FRAMES) {
      this.#queue.push({ data, events: 0 });
      this.#queuedBytes += data.length;
      this.#pump();
    }
  }

  /** Queue a frame; when the send buffer is full it is lost for this client (and counted). */
  offer(frame: OutboundFrame): void {
    const fits = this.#queue.length === 0 ||
      this.#queuedBytes + frame.data.length <= this.#o.clientBufferBytes;
    if (!fits || this.#queue.length >= CLIENT_BUFFER_FRAMES) {
      this.#discard(frame.events);
      if (this.#stalled) this.#losingFrames = true;
      return;
    }
    this.#queue.push(frame);
    this.#queuedBytes += frame.data.length;
    this.#pump();
  }

  /** The socket's unsent bytes, brought into the hub's budget. */
  observe(): number {
    const now = this.#removed ? 0 : this.#socket.bufferedAmount;
    this.#o.budget.total += now - this.#unsent;
    this.#unsent = now;
    return now;
  }

  /** Send a close frame (best effort) and stop the pump. */
  close(code: number, reason: string): void {
    this.detach();
    try {
      this.#socket.close(code, reason);
    } catch (err: unknown) {
      log.debug("websocket: close failed", { client: this.id, error: errorMessage(err) });
    }
  }

  /** Call `callback` once detached and every write was reported, i.e. the counts are final. */
  whenSettled(callback: () => void): void {
    if (this.#removed && this.#inFlight === 0) callback();
    else this.#onSettled.push(callback);
  }

  /** Stop the pump and release the buffered frames, counting their events as lost; idempotent. */
  detach(): void {
    this.#removed = true;
    clearTimeout(this.#pollTimer);
    this.#pollTimer = undefined;
    // The hub stops looking at this socket; what it still holds leaves the budget.
    this.#o.budget.total -= this.#unsent;
    this.#unsent = 0;
    const discarded = this.queuedEvents;
    this.#queue.length = 0;
    this.#queuedBytes = 0;
    this.#discard(discarded);
    this.#settleIfDone();
  }

  /** The runtime reported the write of a frame of `events` events: written, or never to be. */
  #written(events: number, err: Error | null | undefined): void {
    this.#inFlight--;
    if (err === undefined || err === null) {
      if (events > 0) this.#o.onSent(events);
    } else {
      // Lost with the connection; the client's total is logged once it is settled, not per frame.
      this.#discard(events);
    }
    this.#settleIfDone();
  }

  #settleIfDone(): void {
    if (!this.#removed || this.#inFlight > 0 || this.#onSettled.length === 0) return;
    const callbacks = this.#onSettled;
    this.#onSettled = [];
    for (const callback of callbacks) callback();
  }

  #discard(events: number): void {
    if (events === 0) return;
    this.#droppedEvents += events;
    this.#o.onDiscard(events);
  }

  /** Whether the socket may take `frame` now: within unread bound, high-water mark and budget. */
  #mayTake(unsent: number, frame: OutboundFrame): boolean {
    const unread = this.unreadBytes;
    if (unread > 0 && unread + frame.data.length > this.#o.unreadBytes) return false;
    if (unsent > this.#o.highWaterBytes) return false;
    return unsent === 0 || !this.#o.budget.over(frame.data.length);
  }

  #pump(): void {
    if (this.#pollTimer !== undefined || this.#removed) return;
    this.#handOver();
    // One ping behind the whole run of frames handed over in this turn (the hub dispatches a
    // batch of frames synchronously, one offer each), so that its pong frees all of them.
    if (this.#probe === undefined && !this.#probeScheduled && this.unreadBytes > 0) {
      this.#probeScheduled = true;
      queueMicrotask(() => {
        this.#probeScheduled = false;
        this.#probeUnread();
      });
    }
  }

  #handOver(): void {
    for (;;) {
      const frame = this.#queue[0];
      if (frame === undefined) return;
      if (this.#socket.readyState !== OPEN) return;
      const unsent = this.observe();
      if (!this.#mayTake(unsent, frame)) {
        if (!this.#stalled) {
          this.#stalled = true;
          this.#stalledSince = performance.now();
          this.#stalledAt = unsent;
        }
        this.#pollTimer = setTimeout(() => this.#poll(), STALL_POLL_MS);
        return;
      }
      this.#queue.shift();
      this.#queuedBytes -= frame.data.length;
      this.#inFlight++;
      try {
        // Counted when the runtime reports the write (a frame handed over is lost if the
        // connection goes first); the callback holds only the count, not the frame's text.
        const events = frame.events;
        this.#socket.send(frame.data, (err) => this.#written(events, err));
      } catch (err: unknown) {
        // The socket closed under us (its close event unregisters the client): the frame is lost.
        this.#inFlight--;
        log.debug("websocket: send failed", { client: this.id, error: errorMessage(err) });
        this.#discard(frame.events);
        return;
      }
      this.#handedOver += frame.data.length;
      this.#stalled = false;
      this.#losingFrames = false;
      this.observe();
    }
  }

  /** Ping behind what the peer has not confirmed reading, unless a ping is already out. */
  #probeUnread(): void {
    if (this.#probe !== undefined || this.unreadBytes === 0 || this.#removed) return;
    const probe = { data: `se${++this.#probes}`, mark: this.#handedOver };
    try {
      this.#socket.ping(probe.data);
    } catch (err: unknown) {
      // The socket closed under us; its close event unregisters the client.
      log.debug("websocket: ping failed", { client: this.id, error: errorMessage(err) });
      return;
    }
    this.#probe = probe;
  }

  #poll(): void {
    this.#pollTimer = undefined;
    if (this.#removed) return;
    const unsent = this.observe();
    // Progress restarts the clock: a slow reader is fine, only a stuck one is closed.
    if (unsent < this.#stalledAt) {
      this.#stalledAt = unsent;
      this.#stalledSince = performance.now();
      this.#losingFrames = false;
    }
    const frame = this.#queue[0];
    if (frame === undefined || this.#mayTake(unsent, frame)) {
      this.#pump();
      return;
    }
    // A client that already loses frames gets less time: it holds memory for nothing.
    const limit = this.#losingFrames ? this.#o.slowClientCloseMs : this.#o.writeTimeoutMs;
    if (performance.now() - this.#stalledSince >= limit) {
      this.#o.onWriteTimeout(this, this.#losingFrames);
      return;
    }
    this.#pollTimer = setTimeout(() => this.#poll(), STALL_POLL_MS);
  }
}

/** The hub: registered clients, the inbound buffer and its drain, the stats line. */
export class WebSocketHub {
  readonly #metrics: Metrics | undefined;
  readonly #clients = new Set<HubClient>();
  readonly #inbound: PendingFrame[] = [];
  readonly #limits: HubLimits;
  readonly #budget: SocketBudget;
  readonly #statsTimer: ReturnType<typeof setInterval> | undefined;
  #drainTimer: ReturnType<typeof setTimeout> | undefined;
  /** Per-interval counts of the stats line, in events. */
  #stats = { received: 0, dispatched: 0, dropped: 0, publishDropped: 0 };
  #nextId = 1;
  #closed = false;

  constructor(options: WebSocketHubOptions = {}) {
    const { metrics, statsIntervalMs = 30_000, ...limits } = options;
    this.#metrics = metrics;
    this.#limits = { ...DEFAULT_LIMITS, ...limits };
    this.#budget = new SocketBudget(this.#limits.socketBudgetBytes, this.#clients);
    this.#statsTimer = statsIntervalMs > 0
      ? setInterval(() => this.#logStats(), statsIntervalMs)
      : undefined;
  }

  /**
   * Whether some client wants frames of `topic`: the pipeline collects a job's events only then,
   * so dashboards watching other topics cost the ingestion nothing.
   */
  wants(topic: string): boolean {
    for (const client of this.#clients) if (client.wants(topic)) return true;
    return false;
  }

  get clients(): number {
    return this.#clients.size;
  }

  /** Bytes handed to sockets and not yet written, as last seen (the budget's count). */
  get unsentBytes(): number {
    return this.#budget.total;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Hand over one job's events; never blocks or throws (a full inbound buffer drops them). */
  publish(topic: string, events: readonly unknown[]): void {
    if (this.#clients.size === 0 || events.length === 0) return;
    this.#stats.received += events.length;
    if (this.#inbound.length >= HUB_BUFFER_FRAMES) {
      this.#stats.publishDropped += events.length;
      this.#metrics?.websocketPublishDropped.inc(events.length);
      return;
    }
    this.#inbound.push({ topic, events });
    this.#drainTimer ??= setTimeout(() => this.#drain(), 0);
  }

  /** Register an open socket; null after {@link close} (the socket is then closed). */
  register(socket: HubSocket, topics: readonly string[]): HubClient | null {
    const client = new HubClient(this.#nextId++, socket, {
      topics,
      ...this.#limits,
      budget: this.#budget,
      onWriteTimeout: (c, losing) => {
        log.warn(
          losing
            ? "websocket: client closed, it loses frames and its socket takes none"
            : "websocket: client closed, a write made no progress",
          {
            client: c.id,
            timeout_ms: losing ? this.#limits.slowClientCloseMs : this.#limits.writeTimeoutMs,
            hint: "a dashboard must keep reading its socket; it may reconnect",
          },
        );
        this.#metrics?.websocketSlowClientsClosed.inc();
        c.close(1008, losing ? "too slow" : "write timeout");
        this.unregister(c);
      },
      onDiscard: (events) => {
        this.#stats.dropped += events;
        this.#metrics?.websocketMessagesDropped.inc(events);
      },
      onSent: (events) => {
        this.#stats.dispatched += events;
        this.#metrics?.websocketFramesSent.inc();
        this.#metrics?.websocketMessagesBroadcasted.inc(events);
      },
    });
    if (this.#closed) {
      client.close(1001, "server shutting down");
      return null;
    }
    this.#clients.add(client);
    this.#metrics?.websocketClientsActive.inc();
    return client;
  }

  /** Forget a client (its socket closed, or the hub closed it). Idempotent. */
  unregister(client: HubClient): void {
    if (!this.#clients.delete(client)) return;
    client.detach();
    this.#metrics?.websocketClientsActive.dec();
    // Logged once the runtime has reported every write: the frames it still held when the
    // connection went are part of the total.
    client.whenSettled(() => {
      if (client.droppedEvents > 0) {
        log.warn("websocket: client disconnected after dropped events", {
          client: client.id,
          dropped_events: client.droppedEvents,
        });
      } else {
        log.info("websocket: client disconnected", { client: client.id });
      }
    });
  }

  /** Send every client a close frame (1001), refuse new ones, drop pending frames. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#statsTimer);
    clearTimeout(this.#drainTimer);
    this.#drainTimer = undefined;
    this.#inbound.length = 0;
    for (const client of [...this.#clients]) {
      client.close(1001, "server shutting down");
      this.unregister(client);
    }
    this.#logStats();
  }

  #drain(): void {
    this.#drainTimer = undefined;
    for (let n = 0; n < DRAIN_BATCH_FRAMES; n++) {
      const frame = this.#inbound.shift();
      if (frame === undefined) return;
      this.#dispatch(frame);
    }
    if (this.#inbound.length > 0) this.#drainTimer = setTimeout(() => this.#drain(), 0);
  }

  #dispatch(frame: PendingFrame): void {
    let out: OutboundFrame | null | undefined;
    for (const client of this.#clients) {
      if (!client.wants(frame.topic)) continue;
      // Encoded once per job, and only when somebody wants it.
      out ??= this.#encode(frame);
      if (out === null) return;
      client.offer(out);
    }
  }

  #encode(frame: PendingFrame): OutboundFrame | null {
    try {
      // Exactly {"topic":…,"payload":[…]}: clients rely on there being no other member.
      const data = `{"topic":${JSON.stringify(frame.topic)},"payload":${
        JSON.stringify(frame.events)
      }}`;
      return { data, events: frame.events.length };
    } catch (err: unknown) {
      this.#metrics?.pipelineErrors.inc({ component: "websocket" });
      log.error("websocket: frame could not be encoded", {
        topic: frame.topic,
        events: frame.events.length,
        error: errorMessage(err),
      });
      return null;
    }
  }

  #logStats(): void {
    const s = this.#stats;
    if (this.#clients.size === 0 && s.received === 0) return;
    log.info("websocket: hub stats", {
      clients: this.#clients.size,
      received: s.received,
      dispatched: s.dispatched,
      dropped: s.dropped,
      publish_dropped: s.publishDropped,
    });
    this.#stats = { received: 0, dispatched: 0, dropped: 0, publishDropped: 0 };
  }
}
