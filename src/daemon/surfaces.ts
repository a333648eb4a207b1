/**
 * The daemon's HTTP surfaces: `/metrics` (with `/healthz`, `/readyz`), `GET /ws` and
 * `POST /commands`. Each refuses the start when its address is taken, naming the setting to change.
 *
 * @module
 */
import type { Metrics } from "../metrics/registry.ts";
import {
  type MetricsServer,
  type Readiness,
  startMetricsServer,
  startWebSocketServer,
  type WebSocketHub,
  type WebSocketServer,
} from "../http/mod.ts";
import {
  COMMAND_QUEUE,
  type CommandPublisher,
  type CommandServer,
  DENIED_RAW_COMMANDS,
  RawCommandAllowlist,
  startCommandServer,
} from "../commands/mod.ts";
import { errorMessage, getLogger } from "../log.ts";
import { type WorkerConfig } from "./config.ts";
import type { QueueBackend } from "./consumers.ts";
import { WorkerError } from "../util/errors.ts";

const log = getLogger("worker");

/** `/metrics`, `/healthz` and `/readyz`, when a metrics port is set. */
export async function serveMetrics(
  config: WorkerConfig,
  metrics: Metrics,
  readiness: () => Readiness,
): Promise<MetricsServer | undefined> {
  if (config.metrics === null) return undefined;
  const { hostname, port } = config.metrics;
  const server = await startListener(
    `metrics listener ${hostname}:${port}`,
    "choose another port for /metrics with --metrics-port (STATUSENGINE_METRICS_PORT, " +
      "0 disables it) or another address with --metrics-host",
    () =>
      startMetricsServer({
        hostname,
        port,
        registry: metrics.registry,
        listenerMetrics: metrics,
        readiness,
        ...(config.http === undefined ? {} : { limits: config.http }),
      }),
  );
  log.info("worker: metrics listening", { addr: `${server.hostname}:${server.port}` });
  return server;
}

/** `GET /ws`, when the stream is served. */
export async function serveWebSocket(
  config: WorkerConfig,
  hub: WebSocketHub | undefined,
  metrics: Metrics,
): Promise<WebSocketServer | undefined> {
  const ws = config.websocket;
  if (hub === undefined || !ws) {
    log.info("websocket: GET /ws disabled (no /ws API keys configured, or --listen-addr empty)");
    return undefined;
  }
  const server = await startListener(
    `websocket listener ${ws.hostname}:${ws.port}`,
    "choose another address for GET /ws with --listen-addr (STATUSENGINE_LISTEN_ADDR)",
    () =>
      startWebSocketServer({
        hostname: ws.hostname,
        port: ws.port,
        apiKeys: ws.apiKeys,
        hub,
        metrics,
        ...(config.http === undefined ? {} : { limits: config.http }),
      }),
  );
  log.info("websocket: listening", { addr: `${server.hostname}:${server.port}`, path: "/ws" });
  return server;
}

/** The `/commands` listener and the publisher behind it; dispose stops both, listener first. */
export interface Commands extends AsyncDisposable {
  readonly server: CommandServer;
  readonly publisher: CommandPublisher;
}

/** `POST /commands` with the backend's command publisher, when command keys are configured. */
export async function serveCommands(
  config: WorkerConfig,
  metrics: Metrics,
  backend: QueueBackend,
): Promise<Commands | undefined> {
  const listen = config.commands;
  if (!listen || !listen.apiKeys.some((k) => k !== "")) {
    log.info("command: POST /commands disabled (no command API keys configured)");
    return undefined;
  }
  const allow = new RawCommandAllowlist(listen.allow);
  const publisher = backend.commandPublisher();
  let server: CommandServer;
  try {
    server = await startListener(
      `command listener ${listen.hostname}:${listen.port}`,
      "choose another address for POST /commands with --command-listen-addr " +
        "(STATUSENGINE_COMMAND_LISTEN_ADDR)",
      () =>
        startCommandServer({
          hostname: listen.hostname,
          port: listen.port,
          apiKeys: listen.apiKeys,
          publisher,
          metrics,
          allow,
          ...(config.http === undefined ? {} : { limits: config.http }),
        }),
    );
  } catch (err: unknown) {
    await publisher.close();
    throw err;
  }
  log.info("command: listening", {
    addr: `${server.hostname}:${server.port}`,
    backend: publisher.backend,
    target: publisher.target,
    queue: COMMAND_QUEUE,
    denied: DENIED_RAW_COMMANDS.join(","),
    allowed: allow.all ? "all but the denied" : `${allow.names.length} raw commands`,
  });
  return {
    server,
    publisher,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await publisher.close();
    },
  };
}

/** Start one listener; a failure refuses the start naming `what` and the `hint` to change. */
async function startListener<T>(what: string, hint: string, start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (err: unknown) {
    throw new WorkerError("startup", `Cannot start: ${what}: ${errorMessage(err)}; ${hint}`, {
      cause: err,
    });
  }
}
