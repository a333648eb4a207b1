/**
 * The `GET /ws` listener: authentication before the upgrade, the client's
 * control frames and limits; fan-out is the hub's job.
 *
 * Deviations from the Go worker, each deliberate:
 * - An invalid control frame is answered with `{"error":"…"}` and the connection stays
 *   open (issue 7); Go ignores it silently.
 * - Keep-alive: the server pings after half of {@link IDLE_TIMEOUT_SECONDS} without an
 *   inbound frame and closes when nothing arrives in the other half: 108 pings after 54 s of
 *   silence as Go does, and closes a peer that has not answered 54 s later (Go: 60 s after its
 *   last pong).
 * - The 8192-byte limit on client messages is enforced while reading (the `ws` library's
 *   `maxPayload`): an oversized message closes the connection (1009) as in Go.
 * - Connection attempts during or after shutdown get 503 before the upgrade.
 * - The hub pings behind the frames it sends and counts them as read at the pong: a client
 *   that stops reading holds at most 512 KiB in the kernels' buffers (docs/http.md#ws).
 *
 * @module
 */
import { ApiKeySet, handshakeKey } from "./api_key.ts";
import {
  type HttpLimits,
  listen,
  type RequestInfo,
  type ServerWebSocket,
  type WebSocketAccept,
} from "./listen.ts";
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
const MAX_CLIENT_MESSAGE_BYTES = 8192;
/** See the module comment: ping after 54 s without an inbound frame. */
const IDLE_TIMEOUT_SECONDS = 108;
/** How long shutdown waits for clients to acknowledge their close frames. */
const CLOSE_WAIT_MS = 2_000;

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
  const open = new Set<ServerWebSocket>();
  let refusing = false;

  const countError = () => options.metrics?.pipelineErrors.inc({ component: "websocket" });

  function accept(req: Request, info: RequestInfo): Response | WebSocketAccept {
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
    if (!info.webSocket) {
      countError();
      log.error("websocket: upgrade failed", { remote, error: "not a WebSocket handshake" });
      return text(400, "bad request: not a WebSocket handshake");
    }
    const topics = parseTopicsParam(url.searchParams.get("topics"));
    return {
      onOpen: (socket) => {
        open.add(socket);
        serveClient(socket, remote, topics);
      },
    };
  }

  function serveClient(socket: ServerWebSocket, remote: string, topics: readonly string[]): void {
    socket.binaryType = "arraybuffer";
    const client = hub.register(socket, topics);
    if (client !== null) {
      log.info("websocket: client connected", {
        client: client.id,
        remote,
        topics: topics.length === 0 ? "all" : topics.join(","),
      });
    }
    const stopIdleCheck = keepAlive(socket, idleTimeout);
    socket.on("message", (data: unknown, isBinary: boolean) => {
      if (client === null) return;
      onClientMessage(client, isBinary ? data : DECODER.decode(data as ArrayBuffer));
    });
    // The hub's pings carry a token; their pongs say the client read what came before them.
    socket.on("pong", (data: Uint8Array | ArrayBuffer) => {
      client?.pong(DECODER.decode(data));
    });
    socket.on("close", () => {
      stopIdleCheck();
      open.delete(socket);
      if (client !== null) hub.unregister(client);
    });
    socket.on("error", (err: Error & { code?: string }) => {
      // The close event follows and tells the hub.
      if (err.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") {
        log.warn("websocket: client message too large, closing", {
          ...(client === null ? {} : { client: client.id }),
          limit_bytes: MAX_CLIENT_MESSAGE_BYTES,
        });
      } else {
        log.debug("websocket: connection failed", { remote, error: errorMessage(err) });
      }
    });
  }

  const server = await listen({
    name: "websocket",
    hostname: options.hostname,
    port: options.port,
    onError: (err: unknown) => {
      log.error("websocket: request failed", { error: errorMessage(err) });
      return text(500, "internal error");
    },
    maxWebSocketMessageBytes: MAX_CLIENT_MESSAGE_BYTES,
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
          if (s.readyState === s.CLOSED) r();
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
      // Whoever has not answered by now loses the connection without the handshake.
      for (const s of open) s.terminate();
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

/**
 * Ping after half of `idleTimeoutSeconds` without an inbound frame; close the connection when
 * nothing (not even the pong) arrives in the other half.
 *
 * @returns Stops the checks (call on close).
 */
function keepAlive(socket: ServerWebSocket, idleTimeoutSeconds: number): () => void {
  const halfMs = (idleTimeoutSeconds * 1000) / 2;
  let pinged = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const silent = () => {
    if (pinged) {
      log.debug("websocket: no answer to a ping, closing");
      socket.terminate();
      return;
    }
    pinged = true;
    socket.ping();
    timer = setTimeout(silent, halfMs);
  };
  const heardFrom = () => {
    pinged = false;
    clearTimeout(timer);
    timer = setTimeout(silent, halfMs);
  };
  heardFrom();
  socket.on("message", heardFrom);
  socket.on("pong", heardFrom);
  socket.on("ping", heardFrom);
  return () => clearTimeout(timer);
}

function onClientMessage(client: HubClient, data: unknown): void {
  let textData: string;
  if (typeof data === "string") {
    textData = data;
  } else if (data instanceof ArrayBuffer) {
    // Go reads text and binary messages alike.
    textData = DECODER.decode(data);
  } else {
    return;
  }
  const parsed = parseControlFrame(textData);
  if (parsed.ok) client.apply(parsed.value);
  else client.sendError(parsed.error);
}

function text(status: number, body: string): Response {
  return new Response(body, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
}
