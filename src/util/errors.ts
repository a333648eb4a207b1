/**
 * The text of an error, one way everywhere: in log properties, in messages printed by the
 * commands, and in the dead-letter file.
 *
 * @module
 */

/**
 * Text of an error: its message and up to three causes that add something, no stack.
 *
 * @param err Anything thrown.
 * @returns E.g. `Connection to job server h:4730 lost: read failed: Connection reset by peer`.
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
