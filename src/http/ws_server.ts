/**
 * The `GET /ws` listener: authentication before the upgrade, the client's control frames and
 * limits, keep-alive; fan-out is the hub's job. Deviations from the Go worker: docs/http.md#ws.
 *
 * @module
 */
import type { WebSocket as ServerWebSocket } from "ws";
import { ApiKeySet, handshakeKey } from "./api_key.ts";
import {
  type HttpServer,
  listen,
  type ListenAddress,
  MAX_WEBSOCKET_MESSAGE_BYTES,
  type RequestInfo,
  type WebSocketAccept,
} from "./listen.ts";
import {
  parseControlFrame,
  parseTopicsParam,
  topicSetProblem,
  type WebSocketHub,
} from "./ws_hub.ts";
import type { Metrics } from "../metrics/registry.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { errorMessage, getLogger, LogThrottle } from "../log.ts";

const log = getLogger("websocket");

/** Ping after half of it without an inbound frame (54 s, as Go), close after the other half. */
const IDLE_TIMEOUT_SECONDS = 108;
/** How long shutdown waits for clients to acknowledge their close frames. */
const CLOSE_WAIT_MS = 2_000;

const DECODER = new TextDecoder();

/** A failed upgrade is logged at most this often; the rest go to debug. */
const FAILED_UPGRADE_LOG_INTERVAL_MS = 60_000;

export interface WebSocketServerOptions extends ListenAddress {
  /** Accepted keys; at least one usable key. */
  readonly apiKeys: readonly string[];
  readonly hub: WebSocketHub;
  /** For `pipeline_errors_total{component="websocket"}`. */
  readonly metrics?: Metrics;
  /** Default {@link IDLE_TIMEOUT_SECONDS} (tests shorten it). */
  readonly idleTimeoutSeconds?: number;
}

/** A running `/ws` listener; `shutdown` runs {@link closeClients} first. */
export interface WebSocketServer extends HttpServer {
  /** Refuse new connections, send every client a close frame, wait briefly. Idempotent. */
  closeClients(): Promise<void>;
}

/**
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

  const countError = () => options.metrics?.pipelineErrors.inc({ component: "websocket" });
  // A proxy that drops the Upgrade header in front of a reconnecting dashboard fails every
  // request: the first line says why, the rest go to debug (and the error counter).
  const failedUpgrades = new LogThrottle<"upgrade">(FAILED_UPGRADE_LOG_INTERVAL_MS);

  function accept(req: Request, info: RequestInfo): Response | WebSocketAccept {
    const remote = info.remote;
    const url = new URL(req.url);
    if (url.pathname !== "/ws") return text(404, "not found");
    if (hub.closed) return text(503, "shutting down");
    if (!keys.matches(handshakeKey(req.headers, url))) {
      countError();
      log.debug("websocket: unauthorized handshake", { remote });
      return text(401, "unauthorized");
    }
    const failed = (status: number, body: string, error: string) => {
      countError();
      const skipped = failedUpgrades.due("upgrade");
      if (skipped === undefined) log.debug("websocket: upgrade failed", { remote, error });
      else log.error("websocket: upgrade failed", { remote, error, failures_not_logged: skipped });
      return text(status, body);
    };
    if (req.method !== "GET") return failed(405, "method not allowed", `method ${req.method}`);
    const notWs = "not a WebSocket handshake";
    if (!info.webSocket) return failed(400, `bad request: ${notWs}`, notWs);
    const topics = parseTopicsParam(url.searchParams.get("topics"));
    const problem = topicSetProblem(new Set(topics));
    if (problem !== null) return failed(400, `bad request: ${problem}`, problem);
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
    // binaryType "arraybuffer": text and binary messages alike arrive as bytes, and Go reads both.
    socket.on("message", (data: ArrayBuffer) => {
      if (client === null) return;
      const parsed = parseControlFrame(DECODER.decode(data));
      const error = parsed.ok ? client.apply(parsed.value) : parsed.error;
      if (error !== null) client.sendError(error);
    });
    // The hub's pings carry a token; their pongs say the client read what came before them.
    socket.on("pong", (data: Uint8Array | ArrayBuffer) => client?.pong(DECODER.decode(data)));
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
          limit_bytes: MAX_WEBSOCKET_MESSAGE_BYTES,
        });
      } else {
        log.debug("websocket: connection failed", { remote, error: errorMessage(err) });
      }
    });
  }

  const server = await listen({
    ...options,
    name: "websocket",
    onError: (err: unknown) => {
      log.error("websocket: request failed", { error: errorMessage(err) });
      return text(500, "internal error");
    },
    metrics: options.metrics,
  }, accept);

  let closingClients: Promise<void> | undefined;
  let stopping: Promise<void> | undefined;
  const closeClients = () => {
    closingClients ??= (async () => {
      // A socket leaves `open` on its close event, so each of them still has one to come.
      const closed = [...open].map((s) => new Promise((resolve) => s.once("close", resolve)));
      hub.close();
      // A client that stopped reading never answers its close frame: bounded wait.
      using limit = deadline(CLOSE_WAIT_MS);
      await settledWithin(Promise.all(closed), limit.signal);
      // Whoever has not answered by now loses the connection without the handshake.
      for (const s of open) s.terminate();
    })();
    return closingClients;
  };
  const shutdown = () => stopping ??= closeClients().then(() => server.shutdown());
  return { ...server, closeClients, shutdown, [Symbol.asyncDispose]: shutdown };
}

/** Ping after half of `idleTimeoutSeconds` of silence, close after the other; returns a stop. */
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
  for (const event of ["message", "pong", "ping"]) socket.on(event, heardFrom);
  return () => clearTimeout(timer);
}

function text(status: number, body: string): Response {
  return new Response(body, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
}
