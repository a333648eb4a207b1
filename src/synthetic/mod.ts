/**
 * Realistic synthetic events for the twelve consumed queues (docs/tables.md#queues), for the
 * `publish` tool, load tests and the decoder tests. Pure: the same seed and `now` always give
 * the same events. Each event has its own microsecond in the minute before `now` (world.ts), so
 * status events are never stale and every history key (object, time, `*_usec`) is unique.
 *
 * @module
 */

import { QUEUE_NAMES, type QueueName } from "../events/mod.ts";
import { GENERATORS, type SyntheticEvent } from "./queues.ts";
import { World } from "./world.ts";

export type { JsonValue, SyntheticEvent } from "./queues.ts";

interface SyntheticOptions {
  /** PRNG seed (any safe integer); default: a random one, so runs differ. */
  readonly seed?: number;
  /** "Now" in epoch milliseconds; events fall into the minute before it. Default `Date.now()`. */
  readonly now?: number;
}

/** A random seed in [0, 2^32), printed by runs so that they can be repeated. */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] ?? 0;
}

/**
 * Lazily generate `count` (≥ 1) events for a queue (downtime lifecycles and 604/605 pairs are cut
 * at `count`): a million events stream through {@linkcode jobsFor} in constant memory.
 *
 * @throws {RangeError} For an unknown queue, a bad count or a seed that is not a safe integer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { syntheticEvents } from "./mod.ts";
 * const [ev] = syntheticEvents("statusngin_hostchecks", 1, { seed: 1, now: 1785470668000 });
 * assert.ok(ev?.type === 801);
 * ```
 */
export function* syntheticEvents(
  queue: QueueName,
  count: number,
  options: SyntheticOptions = {},
): Generator<SyntheticEvent> {
  if (!QUEUE_NAMES.includes(queue)) {
    throw new RangeError(`Cannot generate events for queue "${queue}": not a consumed queue`);
  }
  checkCount("count", count);
  const seed = options.seed ?? randomSeed();
  if (!Number.isSafeInteger(seed)) {
    throw new RangeError(`Cannot generate events: seed must be a safe integer, got ${seed}`);
  }
  const now = options.now ?? Date.now();
  if (!Number.isFinite(now)) {
    throw new RangeError(`Cannot generate events: now must be epoch milliseconds, got ${now}`);
  }
  yield* GENERATORS[queue](new World(seed, now, count)).take(count);
}

/** Payload shape of a job (docs/tables.md#bulk-and-single-form). */
export type JobForm = "bulk" | "single";

interface JobOptions {
  /** Default {@linkcode defaultForm}. */
  readonly form?: JobForm;
  /** Ignored for the single form; default 100, the Go publishers' (docs/operations.md#publish). */
  readonly eventsPerJob?: number;
}

/**
 * The four queues the broker's sample configuration leaves unbatched; the other eight are bulk,
 * notifications as in the fixture captured from a broker (docs/tables.md#bulk-and-single-form).
 */
export const SINGLE_FORM_QUEUES: readonly QueueName[] = Object.freeze([
  "statusngin_acknowledgements",
  "statusngin_contactnotificationmethod",
  "statusngin_downtimes",
  "statusngin_core_restart",
]);

export function defaultForm(queue: QueueName): JobForm {
  return SINGLE_FORM_QUEUES.includes(queue) ? "single" : "bulk";
}

/** An event as the broker writes it: `/` (only in strings) as `\/`; docs/tables.md#envelope. */
export function encodeEvent(event: SyntheticEvent): string {
  return JSON.stringify(event).replaceAll("/", "\\/");
}

function checkCount(what: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Cannot generate jobs: ${what} must be a positive integer, got ${value}`);
  }
}

/**
 * Turn events into job payloads, lazily: bulk jobs of `eventsPerJob` events (the last one may
 * be smaller) or one job per event.
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
  const perJob = options.eventsPerJob ?? 100;
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
