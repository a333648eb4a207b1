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
  | "usage" // the command line is wrong: exit status 2
  | "startup" // `main` turns it into exit status 1
  | "internal" // can only be a bug: dead-lettered, never retried forever
  | "consumer_start" // a consumer cannot open any link at start-up
  | "rabbitmq_start" // the first RabbitMQ session cannot be built
  | "queue_declare" // RabbitMQ refused a queue declaration: waiting does not cure it
  | "in_order_lock_lost" // another worker took the lock; the waiting job goes back to the broker
  | "missing_tables"
  | "writer_closed"
  | "interrupted" // a signal aborted a MySQL wait; the statement in flight was abandoned
  | "TimedOut" // no answer from MySQL within a deadline (sorted with refused connections)
  | "WSREP_NOT_READY" // a Galera node is not Synced with wsrep_ready ON
  | "connection_lost" // a job server connection ended other than by `close()`
  | "connect_failed"
  | "heartbeat_timeout"
  | "submit_refused" // a job server answered a submission with ERROR
  | "gearman_protocol" // fatal for the connection
  | "command_publish" // the broker could not take a command; nothing was queued
  | "command_unconfirmed" // a command was sent but never confirmed: it may have been queued
  | "not_queued" // a publish known not to have been queued: the only kind worth a retry
  | "returned" // RabbitMQ returned a mandatory message: no queue to route it to
  | "statement_withdrawn" // every row of a held statement belongs to jobs given back
  | "cleanup_running"; // another `cleanup` run holds the database's named lock

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
