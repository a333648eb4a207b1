/**
 * Job framing: events as the broker writes them, in bulk jobs or one per job
 * (docs/tables.md#bulk-and-single-form), and the shape of an event the generators build.
 *
 * @module
 */

import type { QueueName } from "../events/mod.ts";

/** A JSON value as the generator builds it. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** One event: envelope plus payload object (or the envelope-less core-restart message). */
export interface SyntheticEvent {
  readonly [key: string]: JsonValue;
}

/** Payload shape of a job (docs/tables.md#bulk-and-single-form). */
export type JobForm = "bulk" | "single";

/** Options of {@linkcode jobsFor}. */
export interface JobOptions {
  /** Bulk (`{"messages":[…],"format":"none"}`) or one event per job; default {@linkcode defaultForm}. */
  readonly form?: JobForm;
  /** Events per bulk job (ignored for the single form); default {@linkcode DEFAULT_EVENTS_PER_JOB}. */
  readonly eventsPerJob?: number;
}

/** Events per bulk job when nothing else is said: the Go publishers' value (docs/operations.md#publish). */
export const DEFAULT_EVENTS_PER_JOB = 100;

/**
 * The four queues the broker's sample configuration leaves unbatched
 * (docs/tables.md#bulk-and-single-form); the other eight are published in the bulk form by default.
 * Notifications are bulk here because the fixture, captured from a real broker, is.
 */
export const SINGLE_FORM_QUEUES: readonly QueueName[] = Object.freeze([
  "statusngin_acknowledgements",
  "statusngin_contactnotificationmethod",
  "statusngin_downtimes",
  "statusngin_core_restart",
]);

/** The default form of a queue's jobs: `"single"` for the four unbatched queues. */
export function defaultForm(queue: QueueName): JobForm {
  return SINGLE_FORM_QUEUES.includes(queue) ? "single" : "bulk";
}

/**
 * One event as job text, written the way the broker writes it: `/` escaped as `\/`
 * (docs/tables.md#envelope). `/` only ever occurs inside JSON strings, so the replacement cannot
 * touch the structure.
 */
export function encodeEvent(event: SyntheticEvent): string {
  return JSON.stringify(event).replaceAll("/", "\\/");
}

export function checkCount(what: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Cannot generate jobs: ${what} must be a positive integer, got ${value}`);
  }
}

/**
 * Turn events into job payloads, lazily: bulk jobs of `eventsPerJob` events (the last one may
 * be smaller) or one job per event; the queue decides the default form.
 *
 * @throws {RangeError} When `eventsPerJob` is not a positive integer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { jobsFor, syntheticEvents } from "./mod.ts";
 * const q = "statusngin_servicechecks";
 * const jobs = [...jobsFor(q, syntheticEvents(q, 250, { seed: 7 }), { eventsPerJob: 100 })];
 * assert.ok(jobs.length === 3 && jobs[0]?.startsWith('{"messages":['));
 * ```
 */
export function* jobsFor(
  queue: QueueName,
  events: Iterable<SyntheticEvent>,
  options: JobOptions = {},
): Generator<string> {
  const form = options.form ?? defaultForm(queue);
  const perJob = options.eventsPerJob ?? DEFAULT_EVENTS_PER_JOB;
  checkCount("eventsPerJob", perJob);
  if (form === "single") {
    for (const event of events) yield encodeEvent(event);
    return;
  }
  let parts: string[] = [];
  for (const event of events) {
    parts.push(encodeEvent(event));
    if (parts.length >= perJob) {
      yield bulkJob(parts);
      parts = [];
    }
  }
  if (parts.length > 0) yield bulkJob(parts);
}

/** `{"messages":[…],"format":"none"}` around already encoded events. */
function bulkJob(encodedEvents: readonly string[]): string {
  return `{"messages":[${encodedEvents.join(",")}],"format":"none"}`;
}
