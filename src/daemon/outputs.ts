/**
 * Where the pipeline writes besides MySQL, built before it: the dead-letter file (D7), the
 * Graphite client (F6) and the `/ws` hub. None of them opens a listener.
 *
 * @module
 */
import { DeadLetterFile, DeadLetters } from "../pipeline/dead_letter.ts";
import { GraphiteClient } from "../graphite/client.ts";
import { WebSocketHub } from "../http/mod.ts";
import type { Metrics } from "../metrics/registry.ts";
import { dirname } from "node:path";
import { errorMessage, getLogger } from "../log.ts";
import { StartupError, type WorkerConfig } from "./config.ts";

const log = getLogger("worker");

/**
 * Open the dead-letter file now, so a missing directory or a permission problem refuses the
 * start instead of the first bad payload; with an explicit empty path, dead letters are only
 * counted and logged.
 *
 * @param config The worker configuration.
 * @param metrics Counters of written records and failed writes.
 * @returns The one path every dead letter takes; dispose closes the file.
 * @throws {StartupError} When the file cannot be opened.
 */
export async function openDeadLetters(
  config: WorkerConfig,
  metrics: Metrics,
): Promise<DeadLetters & AsyncDisposable> {
  if (config.deadLetterFile === null) {
    log.warn(
      "worker: dead-letter file disabled; undecodable payloads are only counted and logged",
    );
    return disposable(new DeadLetters(null, metrics));
  }
  await ensureDirectory(config.deadLetterFile);
  const file = new DeadLetterFile(config.deadLetterFile);
  try {
    await file.open();
  } catch (err: unknown) {
    throw new StartupError(
      `Cannot start: dead-letter file "${config.deadLetterFile}" cannot be opened: ${
        errorMessage(err)
      }${notCapableHint(err)} (--dead-letter-file: a writable path, or "" to disable it)`,
      { cause: err },
    );
  }
  log.info("worker: dead-letter file", { path: config.deadLetterFile });
  return disposable(new DeadLetters(file, metrics));
}

/**
 * Create the dead-letter file's directory when it is missing: outside the packaged unit
 * (which has systemd create /var/lib/statusengine-worker) nothing else would, and the
 * default path lies there.
 *
 * @throws {StartupError} Saying how to create it when the worker cannot.
 */
async function ensureDirectory(path: string): Promise<void> {
  const directory = dirname(path);
  try {
    await Deno.stat(directory);
    return;
  } catch (err: unknown) {
    // Anything but "missing" (a permission problem) shows when the file is opened.
    const missing = err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory;
    if (!missing) return;
  }
  try {
    // Group-readable like the unit's UMask=0027 leaves it; the worker's own user owns it.
    await Deno.mkdir(directory, { recursive: true, mode: 0o750 });
  } catch (err: unknown) {
    throw new StartupError(
      `Cannot start: the directory "${directory}" of the dead-letter file does not exist and ` +
        `cannot be created: ${errorMessage(err)}${notCapableHint(err)}. Create it for the ` +
        `user the worker runs as (install -d -o <user> "${directory}"; the packaged unit's ` +
        `StateDirectory= does this), or choose another --dead-letter-file ("" disables it)`,
      { cause: err },
    );
  }
  log.info("worker: created the dead-letter file's directory", { path: directory });
}

/** A compiled binary refuses paths outside the state directory it was built for. */
function notCapableHint(err: unknown): string {
  return err instanceof Deno.errors.NotCapable
    ? "; this binary may write only below the state directory it was compiled for " +
      "(docs/operations.md#compiled-permissions)"
    : "";
}

function disposable(deadLetters: DeadLetters): DeadLetters & AsyncDisposable {
  return Object.assign(deadLetters, { [Symbol.asyncDispose]: () => deadLetters.close() });
}

/**
 * The Carbon client, built whatever the route (its availability gauge then reads 1); it
 * only dials when perfdata is offered.
 *
 * @param config The worker configuration.
 * @param metrics Its counters and gauge.
 * @returns The client; dispose drops what it still holds.
 */
export function graphiteClient(
  config: WorkerConfig,
  metrics: Metrics,
): GraphiteClient & AsyncDisposable {
  const graphite = new GraphiteClient({
    addr: config.graphite.addr,
    prefix: config.graphite.prefix,
    batchSize: config.graphite.batchSize,
    ...(config.graphite.illegalCharacters === undefined
      ? {}
      : { illegalCharacters: config.graphite.illegalCharacters }),
    metrics: {
      written: metrics.graphiteMetricsWritten,
      flushes: metrics.graphiteFlushes,
      dropped: metrics.graphiteMetricsDropped,
      available: metrics.graphiteAvailable,
      errors: metrics.pipelineErrors,
    },
    ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
  });
  return Object.assign(graphite, { [Symbol.asyncDispose]: () => graphite.close(0) });
}

/**
 * The `/ws` hub when the stream is served: built before the pipeline so the handler can
 * publish into it.
 *
 * @param config The worker configuration.
 * @param metrics Its counters.
 * @returns The hub, or undefined when `/ws` is not served.
 */
export function webSocketHub(config: WorkerConfig, metrics: Metrics): WebSocketHub | undefined {
  if (!config.websocket || !config.websocket.apiKeys.some((k) => k !== "")) return undefined;
  return new WebSocketHub({
    metrics,
    ...(config.statsIntervalMs === undefined ? {} : { statsIntervalMs: config.statsIntervalMs }),
  });
}
