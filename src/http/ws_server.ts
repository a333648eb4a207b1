/**
 * The `GET /ws` listener: authentication before the upgrade, the client's
 * control frames and limits; fan-out is the hub's job.
 *
 * Deviations from the Go worker, each deliberate:
 * - An invalid control frame is answered with `{"error":"…"}` and the connection stays
 *   open (issue 7); Go ignores it silently.
 * - Keep-alive: Deno's server WebSocket exposes no ping API, only `idleTimeout`: it pings
 *   after half the timeout without an inbound frame and closes when nothing arrives in the
 *   other half. {@link IDLE_TIMEOUT_SECONDS} = 108 pings after 54 s of silence as Go does, and
 *   closes a peer that has not answered 54 s later (Go: 60 s after its last pong).
 * - The 8192-byte limit on client messages is checked after the message was read: Deno
 *   has no per-socket read limit. An oversized message closes the connection (1009) as in Go.
 * - Connection attempts during or after shutdown get 503 before the upgrade.
 *
 * @module
 */
import { ApiKeySet, handshakeKey } from "./api_key.ts";
import { type HttpLimits, listen, type RequestInfo } from "./listen.ts";
import {
  type HubClient,
  parseControlFrame,
  parseTopicsParam,
  type WebSocketHub,
} from "./ws_hub.ts";
import type { Metrics } from "../metrics/registry.ts";
import { deadline } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("websocket");

/** Largest message a client may send. */
export const MAX_CLIENT_MESSAGE_BYTES = 8192;
/** See the module comment: ping after 54 s without an inbound frame. */
export const IDLE_TIMEOUT_SECONDS = 108;
/** How long shutdown waits for clients to acknowledge their close frames. */
const CLOSE_WAIT_MS = 2_000;

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/** Options of {@link startWebSocketServer}. */
export interface WebSocketServerOptions {
  readonly hostname: string;
  /** 0 picks a free port; the bound port is returned. */
  readonly port: number;
  /** Accepted keys; at least one usable key (the listener refuses to start without). */
  readonly apiKeys: readonly string[];
  readonly hub: WebSocketHub;
  /** For `pipeline_errors_total{component="websocket"}`. */
  readonly metrics?: Metrics;
  /** Default {@link IDLE_TIMEOUT_SECONDS} (tests shorten it). */
  readonly idleTimeoutSeconds?: number;
  /** Connection cap and timeouts; defaults of {@link listen}. */
  readonly limits?: HttpLimits;
}

/** A running `/ws` listener. */
export interface WebSocketServer extends AsyncDisposable {
  readonly hostname: string;
  /** The bound port. */
  readonly port: number;
  /**
   * Refuse new connections, send every client a close frame and wait (briefly) for them
   * to close. Idempotent.
   */
  closeClients(): Promise<void>;
  /** {@link closeClients}, then stop the listener. Idempotent. */
  shutdown(): Promise<void>;
}

/**
 * Start the `/ws` listener.
 *
 * @param options Address, keys, hub and metrics.
 * @returns The running server.
 * @throws {Deno.errors.AddrInUse} When the port is taken.
 * @throws {TypeError} When no usable key is given.
 */
export async function startWebSocketServer(
  options: WebSocketServerOptions,
): Promise<WebSocketServer> {
  const keys = new ApiKeySet(options.apiKeys);
  // A key generated per run would have to be logged to be of use, i.e. written into the journal;
  // the daemon does not start /ws without keys (docs/operations.md#ws).
  if (keys.size === 0) throw new TypeError("GET /ws needs at least one API key");
  const hub = options.hub;
  const idleTimeout = options.idleTimeoutSeconds ?? IDLE_TIMEOUT_SECONDS;
  const open = new Set<WebSocket>();
  let refusing = false;

  const countError = () => options.metrics?.pipelineErrors.inc({ component: "websocket" });

  function accept(req: Request, info: RequestInfo): Response {
    const remote = info.remote;
    const url = new URL(req.url);
    if (url.pathname !== "/ws") return text(404, "not found");
    if (refusing || hub.closed) return text(503, "shutting down");
    if (!keys.matches(handshakeKey(req.headers, url))) {
      countError();
      log.debug("websocket: unauthorized handshake", { remote });
      return text(401, "unauthorized");
    }
    if (req.method !== "GET") {
      countError();
      log.error("websocket: upgrade failed", { remote, error: `method ${req.method}` });
      return text(405, "method not allowed");
    }
    const topics = parseTopicsParam(url.searchParams.get("topics"));
    let upgraded: { socket: WebSocket; response: Response };
    try {
      upgraded = Deno.upgradeWebSocket(req, { idleTimeout });
    } catch (err: unknown) {
      countError();
      log.error("websocket: upgrade failed", { remote, error: errorMessage(err) });
      return text(400, "bad request: not a WebSocket handshake");
    }
    const { socket, response } = upgraded;
    socket.binaryType = "arraybuffer";
    let client: HubClient | null = null;
    open.add(socket);
    // The connection counts against the listener's cap for as long as the socket lives.
    info.hold(
      new Promise<void>((r) => socket.addEventListener("close", () => r(), { once: true })),
    );
    socket.onopen = () => {
      client = hub.register(socket, topics);
      if (client !== null) {
        log.info("websocket: client connected", {
          client: client.id,
          remote,
          topics: topics.length === 0 ? "all" : topics.join(","),
        });
      }
    };
    socket.onmessage = (e: MessageEvent<unknown>) => {
      if (client !== null) onClientMessage(hub, client, e.data);
    };
    socket.onclose = () => {
      open.delete(socket);
      if (client !== null) hub.unregister(client);
    };
    // A close event always follows an error event; the hub is told there.
    socket.onerror = () => {};
    return response;
  }

  const server = await listen({
    name: "websocket",
    hostname: options.hostname,
    port: options.port,
    onError: (err: unknown) => {
      log.error("websocket: request failed", { error: errorMessage(err) });
      return text(500, "internal error");
    },
    ...options.limits,
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
  }, accept);

  let closingClients: Promise<void> | undefined;
  let stopping: Promise<void> | undefined;
  const closeClients = () => {
    closingClients ??= (async () => {
      refusing = true;
      const closed = [...open].map((s) =>
        new Promise<void>((r) => {
          if (s.readyState === WebSocket.CLOSED) r();
          else s.addEventListener("close", () => r(), { once: true });
        })
      );
      hub.close();
      // A client that stopped reading never answers its close frame: bounded wait.
      using limit = deadline(CLOSE_WAIT_MS);
      await Promise.race([
        Promise.all(closed),
        new Promise<void>((r) => limit.signal.addEventListener("abort", () => r())),
      ]);
    })();
    return closingClients;
  };
  const shutdown = () => {
    stopping ??= (async () => {
      await closeClients();
      await server.shutdown();
    })();
    return stopping;
  };
  return {
    hostname: server.addr.hostname,
    port: server.addr.port,
    closeClients,
    shutdown,
    [Symbol.asyncDispose]: shutdown,
  };
}

function onClientMessage(hub: WebSocketHub, client: HubClient, data: unknown): void {
  let textData: string;
  if (typeof data === "string") {
    // UTF-16 length bounds the UTF-8 size from below and 3× from above: encode only in between.
    if (
      data.length > MAX_CLIENT_MESSAGE_BYTES ||
      (data.length * 3 > MAX_CLIENT_MESSAGE_BYTES &&
        ENCODER.encode(data).length > MAX_CLIENT_MESSAGE_BYTES)
    ) {
      tooBig(hub, client);
      return;
    }
    textData = data;
  } else if (data instanceof ArrayBuffer) {
    if (data.byteLength > MAX_CLIENT_MESSAGE_BYTES) {
      tooBig(hub, client);
      return;
    }
    // Go reads text and binary messages alike.
    textData = DECODER.decode(data);
  } else {
    return;
  }
  const parsed = parseControlFrame(textData);
  if (parsed.ok) client.apply(parsed.value);
  else client.sendError(parsed.error);
}

function tooBig(hub: WebSocketHub, client: HubClient): void {
  log.warn("websocket: client message too large, closing", {
    client: client.id,
    limit_bytes: MAX_CLIENT_MESSAGE_BYTES,
  });
  client.close(1009, "message too big");
  hub.unregister(client);
}

function text(status: number, body: string): Response {
  return new Response(body, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
}
