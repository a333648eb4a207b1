/**
 * The graceful shutdown of a running worker (docs/shutdown.md#order-and-budgets): every step bounded, each
 * logged once with its duration, a failed step never skips the next.
 *
 * @module
 */
import type { Pipeline } from "../pipeline/pipeline.ts";
import type { DeadLetterSink } from "../mysql/mod.ts";
import type { MetricsServer, WebSocketServer } from "../http/mod.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { QueueConsumer } from "../consumer/contract.ts";
import type { Commands } from "./surfaces.ts";

const log = getLogger("worker");

/** Bound on each step that waits for a peer (MySQL pool, HTTP listeners). */
const CLOSE_TIMEOUT_MS = 5_000;

/** What a worker shuts down, in the order below. */
export interface ShutdownParts {
  /** The task queue poller and its publisher. */
  readonly tasks?: { close(): Promise<void> } | undefined;
  readonly consumer: QueueConsumer;
  readonly pipeline: Pipeline;
  /** Graphite, InfluxDB and remote write, when configured. */
  readonly perfdata?: { close(budgetMs: number): Promise<void> } | undefined;
  readonly deadLetters: DeadLetterSink;
  /** Ends the MySQL pool. */
  readonly database: AsyncDisposable;
  readonly commands?: Commands | undefined;
  readonly websocket?: WebSocketServer | undefined;
  readonly metricsServer?: MetricsServer | undefined;
  /** `--shutdown-flush-timeout`. */
  readonly flushTimeoutMs: number;
}

async function step(name: string, fn: () => PromiseLike<unknown>): Promise<void> {
  const started = performance.now();
  try {
    await fn();
  } catch (err: unknown) {
    log.error(`shutdown: ${name} failed`, { error: errorMessage(err) });
  }
  log.info(`shutdown: ${name} done`, { duration_ms: Math.round(performance.now() - started) });
}

/** Run `fn`, but stop waiting for it after {@link CLOSE_TIMEOUT_MS}. */
async function bounded(fn: () => Promise<unknown>): Promise<void> {
  using limit = deadline(CLOSE_TIMEOUT_MS);
  if (!(await settledWithin(fn(), limit.signal))) {
    throw new Error(`no answer within ${CLOSE_TIMEOUT_MS} ms`);
  }
}

/**
 * Shut a worker down: no new tasks, drain the consumer (D1), flush writers and perfdata within one
 * budget (docs/writers.md#shutdown-flush), close the dead-letter file, send `/ws` clients their
 * close frame, end the pool, then the HTTP listeners last, so `/metrics` shows the shutdown until
 * the end.
 *
 * @param parts What to shut down.
 */
export async function shutdown(parts: ShutdownParts): Promise<void> {
  const started = performance.now();
  const { tasks, commands, websocket, metricsServer } = parts;
  // A task being submitted is abandoned and stays in the table for the next start.
  if (tasks !== undefined) await step("stop task queue", () => tasks.close());
  // Running jobs get the drain timeout to commit and be acknowledged.
  await step("drain consumer", () => parts.consumer.stop());
  // Writers and the perfdata backends flush concurrently under the one budget.
  await step("flush writers", () =>
    Promise.all([
      parts.pipeline.close(parts.flushTimeoutMs),
      parts.perfdata?.close(parts.flushTimeoutMs),
    ]));
  await step("close dead-letter file", () => parts.deadLetters.close());
  if (websocket !== undefined) {
    await step("close websocket clients", () => Promise.resolve(websocket.closeClients()));
  }
  await step("close MySQL pool", () => parts.database[Symbol.asyncDispose]());
  // The command listener stops accepting before its publisher closes, so requests already
  // in flight can still publish.
  if (commands !== undefined) {
    await step("stop command server", () => bounded(() => commands.server.shutdown()));
    await step("close command publisher", () => commands.publisher.close());
  }
  if (websocket !== undefined) {
    await step("stop websocket server", () => bounded(() => websocket.shutdown()));
  }
  if (metricsServer !== undefined) {
    await step("stop metrics server", () => bounded(() => metricsServer.shutdown()));
  }
  log.info("shutdown complete", { duration_ms: Math.round(performance.now() - started) });
}
