/**
 * What the daemon opens besides MySQL and the broker: the dead-letter file (D7), the perfdata
 * backends and the `/ws` hub, for the pipeline to write into; then the HTTP surfaces, each refusing
 * the start when its address is taken, naming the setting to change.
 *
 * @module
 */
import {
  DeadLetterFile,
  DeadLetters,
  fileErrorMessage,
  outsideWritablePaths,
} from "../pipeline/dead_letter.ts";
import { GraphiteClient } from "../perfdata/graphite.ts";
import { InfluxDbClient } from "../perfdata/influxdb.ts";
import { RemoteWriteClient } from "../perfdata/remote_write.ts";
import { DROP_REASONS, type SinkObserver } from "../perfdata/sink.ts";
import type { PerfdataSink } from "../pipeline/handler.ts";
import { redactUrl } from "../util/redact.ts";
import {
  type HttpServer,
  type Readiness,
  startMetricsServer,
  startWebSocketServer,
  type WebSocketHub,
  type WebSocketServer,
} from "../http/mod.ts";
import {
  COMMAND_QUEUE,
  type CommandPublisher,
  RawCommandAllowlist,
  startCommandServer,
} from "../commands/mod.ts";
import { DENIED_RAW_COMMANDS } from "../config/mod.ts";
import type { QueueBackend } from "./consumers.ts";
import type { Metrics } from "../metrics/registry.ts";
import { dirname } from "node:path";
import { errorMessage, getLogger } from "../log.ts";
import { type PerfdataBackend, served, type WorkerConfig } from "./config.ts";
import { WorkerError } from "../util/errors.ts";
import { joinHostPort } from "../util/address.ts";

const log = getLogger("worker");

/**
 * Open the dead-letter file now, so a bad path refuses the start instead of the first bad
 * payload; with an explicit empty path dead letters are only counted and logged.
 *
 * @throws {WorkerError} (code `startup`) When the file cannot be opened.
 */
export async function openDeadLetters(
  config: WorkerConfig,
  metrics: Metrics,
): Promise<DeadLetters> {
  const path = config.deadLetterFile;
  if (path === null) {
    log.warn("worker: dead-letter file disabled; undecodable payloads are only counted and logged");
    return new DeadLetters(null, metrics);
  }
  const refused = `Cannot start: dead-letter file "${path}"`;
  // Before the directory: creating it would not help a path the binary may never write.
  const outside = outsideWritablePaths(path);
  if (outside !== undefined) {
    throw new WorkerError(
      "startup",
      `${refused} is outside what this process may write: ${outside}. Choose a ` +
        `--dead-letter-file there (or "" to disable it)`,
    );
  }
  await ensureDirectory(path);
  const file = new DeadLetterFile(path);
  await file.open().catch((err: unknown) => {
    throw new WorkerError(
      "startup",
      `${refused} cannot be opened: ${fileErrorMessage(err)} (--dead-letter-file: a writable ` +
        `path, or "" to disable it)`,
      { cause: err },
    );
  });
  log.info("worker: dead-letter file", { path });
  return new DeadLetters(file, metrics);
}

/** Create the dead-letter file's directory when missing: outside the packaged unit nothing else would. */
async function ensureDirectory(path: string): Promise<void> {
  const directory = dirname(path);
  // Anything but "missing" (a permission problem) shows when the file is opened.
  const missing = await Deno.stat(directory).then(
    () => false,
    (err: unknown) =>
      err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory,
  );
  if (!missing) return;
  // Group-readable like the unit's UMask=0027 leaves it; the worker's own user owns it.
  await Deno.mkdir(directory, { recursive: true, mode: 0o750 }).catch((err: unknown) => {
    throw new WorkerError(
      "startup",
      `Cannot start: the directory "${directory}" of the dead-letter file does not exist and ` +
        `cannot be created: ${fileErrorMessage(err)}. Create it for the ` +
        `user the worker runs as (install -d -o <user> "${directory}"; the packaged unit's ` +
        `StateDirectory= does this), or choose another --dead-letter-file ("" disables it)`,
      { cause: err },
    );
  });
  log.info("worker: created the dead-letter file's directory", { path: directory });
}

/** The perfdata backends besides MySQL, as one sink; dispose drops what they still hold. */
export interface PerfdataOutputs extends PerfdataSink, AsyncDisposable {
  /** Send what is buffered within `budgetMs`, then stop. */
  close(budgetMs: number): Promise<void>;
}

/** One backend's perfdata series, created at 0 (gauge 1), and Graphite's own `graphite_*` ones. */
export function perfdataObserver(metrics: Metrics, backend: PerfdataBackend): SinkObserver {
  const labels = { backend };
  const graphite = backend === "graphite";
  metrics.perfdataPointsWritten.inc(labels, 0);
  metrics.perfdataWriteRetries.inc(labels, 0);
  for (const reason of DROP_REASONS) metrics.perfdataDropped.inc({ backend, reason }, 0);
  metrics.perfdataBackendAvailable.set(labels, 1);
  return {
    written: (points) => {
      metrics.perfdataPointsWritten.inc(labels, points);
      if (graphite) {
        metrics.graphiteMetricsWritten.inc(points);
        metrics.graphiteFlushes.inc();
      }
    },
    dropped: (points, reason) => {
      metrics.perfdataDropped.inc({ backend, reason }, points);
      if (graphite) metrics.graphiteMetricsDropped.inc(points);
    },
    available: (up) => {
      metrics.perfdataBackendAvailable.set(labels, up ? 1 : 0);
      if (graphite) metrics.graphiteAvailable.set(up ? 1 : 0);
    },
    retried: () => metrics.perfdataWriteRetries.inc(labels),
    failed: () => metrics.pipelineErrors.inc({ component: backend }),
  };
}

/**
 * The configured perfdata backends other than MySQL, fed together (none connects before perfdata
 * is offered); undefined when there are none.
 *
 * @throws {WorkerError} (code `startup`) When a configured backend's URL cannot be used.
 */
export function perfdataOutputs(
  config: WorkerConfig,
  metrics: Metrics,
): PerfdataOutputs | undefined {
  const backends = config.perfdataBackends;
  const quotedLabels = config.perfdataLabelQuotes === "keep";
  const common = (backend: PerfdataBackend) => ({
    observer: perfdataObserver(metrics, backend),
    statsIntervalMs: config.statsIntervalMs,
  });
  const clients: (PerfdataSink & { close(budgetMs: number): Promise<void> })[] = [];
  if (backends.includes("graphite")) {
    clients.push(new GraphiteClient({ ...config.graphite, ...common("graphite") }));
  }
  if (backends.includes("influxdb")) {
    // The URL itself is checked with the setting (src/config), naming its source.
    const c = required(config.influxdb, "InfluxDB", "influxdb");
    clients.push(new InfluxDbClient({ ...c, quotedLabels, ...common("influxdb") }));
    log.info("worker: perfdata to InfluxDB", { url: redactUrl(c.url) });
  }
  if (backends.includes("prometheus")) {
    const c = required(config.prometheusRemoteWrite, "remote-write", "prometheus");
    clients.push(new RemoteWriteClient({ ...c, quotedLabels, ...common("prometheus") }));
    log.info("worker: perfdata to Prometheus remote write", { url: redactUrl(c.url) });
  }
  if (clients.length === 0) return undefined;
  const close = async (budgetMs: number) => {
    await Promise.all(clients.map((c) => c.close(budgetMs)));
  };
  return {
    offer(rows) {
      for (const c of clients) c.offer(rows);
    },
    close,
    [Symbol.asyncDispose]: () => close(0),
  };
}

/** A backend's settings, which a WorkerConfig built by hand may lack. */
function required<T>(settings: T | undefined, what: string, backend: PerfdataBackend): T {
  if (settings !== undefined) return settings;
  throw new WorkerError(
    "startup",
    `Cannot start: no ${what} settings (perfdata goes to ${backend})`,
  );
}

/** `/metrics`, `/healthz` and `/readyz`, when a metrics port is set. */
export async function serveMetrics(
  config: WorkerConfig,
  metrics: Metrics,
  readiness: () => Readiness,
): Promise<HttpServer | undefined> {
  if (config.metrics === null) return undefined;
  const { hostname, port } = config.metrics;
  const server = await startListener(
    `metrics listener ${joinHostPort(hostname, port)}`,
    "choose another port for /metrics with --metrics-port (STATUSENGINE_METRICS_PORT, " +
      "0 disables it) or another address with --metrics-host",
    () =>
      startMetricsServer({
        hostname,
        port,
        registry: metrics.registry,
        listenerMetrics: metrics,
        readiness,
        limits: config.http,
      }),
  );
  log.info("worker: metrics listening", { addr: joinHostPort(server.hostname, server.port) });
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
    `websocket listener ${joinHostPort(ws.hostname, ws.port)}`,
    "choose another address for GET /ws with --listen-addr (STATUSENGINE_LISTEN_ADDR)",
    () =>
      startWebSocketServer({
        hostname: ws.hostname,
        port: ws.port,
        apiKeys: ws.apiKeys,
        hub,
        metrics,
        limits: config.http,
      }),
  );
  log.info("websocket: listening", {
    addr: joinHostPort(server.hostname, server.port),
    path: "/ws",
  });
  return server;
}

/** The `/commands` listener and the publisher behind it; dispose stops both, listener first. */
export interface Commands extends AsyncDisposable {
  readonly server: HttpServer;
  readonly publisher: CommandPublisher;
}

/** `POST /commands` with the backend's command publisher, when command keys are configured. */
export async function serveCommands(
  config: WorkerConfig,
  metrics: Metrics,
  backend: QueueBackend,
): Promise<Commands | undefined> {
  const listen = config.commands;
  if (!served(listen)) {
    log.info("command: POST /commands disabled (no command API keys configured)");
    return undefined;
  }
  const allow = new RawCommandAllowlist(listen.allow);
  const publisher = backend.commandPublisher();
  const server = await startListener(
    `command listener ${joinHostPort(listen.hostname, listen.port)}`,
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
        limits: config.http,
      }),
  ).catch(async (err: unknown) => {
    await publisher.close();
    throw err;
  });
  log.info("command: listening", {
    addr: joinHostPort(server.hostname, server.port),
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
  return await start().catch((err: unknown) => {
    throw new WorkerError("startup", `Cannot start: ${what}: ${errorMessage(err)}; ${hint}`, {
      cause: err,
    });
  });
}
