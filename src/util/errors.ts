/**
 * The worker's error type and the one way to print an error (logs, commands, dead letters).
 *
 * @module
 */

/**
 * Text of an error: its message and up to three causes that add something, no stack.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { errorMessage } from "./errors.ts";
 * const err = new Error("cannot publish", { cause: new Error("queue full") });
 * assert.ok(errorMessage(err) === "cannot publish: queue full");
 * ```
 */
export function errorMessage(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  let text = err.message;
  let cause: unknown = err.cause;
  for (let depth = 0; cause instanceof Error && depth < 3; depth++) {
    if (!text.includes(cause.message)) text += `: ${cause.message}`;
    cause = cause.cause;
  }
  return text;
}

/**
 * What went wrong, for the few callers that branch on it; the message says the rest. Two are
 * driver-style codes that src/mysql/errors.ts classifies like mysql2's own (`TimedOut`,
 * `WSREP_NOT_READY`).
 */
export type ErrorCode =
  /** The command line is wrong (unknown flag or command, stray argument): exit status 2. */
  | "usage"
  /** The worker cannot start: `main` turns it into exit status 1. */
  | "startup"
  /** A condition that can only be a bug in the worker: dead-lettered, never retried forever. */
  | "internal"
  /** A consumer cannot open any link at start-up. */
  | "consumer_start"
  /** The first RabbitMQ session cannot be built at start-up. */
  | "rabbitmq_start"
  /** RabbitMQ refused a queue declaration: waiting does not cure it. */
  | "queue_declare"
  /** Another worker took the in-order lock; the waiting job goes back to the broker. */
  | "in_order_lock_lost"
  /** Tables the worker writes are missing. */
  | "missing_tables"
  /** The table writer is closed. */
  | "writer_closed"
  /** The caller's signal aborted a MySQL wait; the statement in flight was abandoned. */
  | "interrupted"
  /** MySQL gave no answer within a deadline (sorted with refused connections). */
  | "TimedOut"
  /** A Galera node answered but is not Synced with wsrep_ready ON. */
  | "WSREP_NOT_READY"
  /** A job server connection ended other than by `close()`. */
  | "connection_lost"
  /** A job server connection was never established. */
  | "connect_failed"
  /** A job server stopped answering within the heartbeat timeout. */
  | "heartbeat_timeout"
  /** A job server answered a submission with ERROR. */
  | "submit_refused"
  /** A Gearman protocol violation; fatal for the connection. */
  | "gearman_protocol"
  /** The broker could not take a command; nothing is known to be queued. */
  | "command_publish";

/** The worker's one error type: a message for people and an {@link ErrorCode} for code. */
export class WorkerError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "WorkerError";
    this.code = code;
  }
}

/**
 * Whether `err` is a {@link WorkerError} with one of `codes`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { hasCode, WorkerError } from "./errors.ts";
 * assert.ok(hasCode(new WorkerError("startup", "cannot start"), "startup", "usage"));
 * assert.ok(!hasCode(new Error("cannot start"), "startup"));
 * ```
 */
export function hasCode(err: unknown, ...codes: ErrorCode[]): err is WorkerError {
  return err instanceof WorkerError && codes.includes(err.code);
}
