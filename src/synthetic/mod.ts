/**
 * Realistic synthetic events for the twelve consumed queues (docs/tables.md#queues), for the
 * `publish` tool, load tests and the decoder tests: every payload field in the broker's key order,
 * a small world of hosts and services (UTF-8 names, openITCOCKPIT-style UUIDs) whose states evolve
 * like a core's, perfdata the parser reads without skipping a gauge, host and service variants,
 * downtimes as consistent lifecycles. Pure: no I/O, no clock of its own, and a seeded PRNG, so the
 * same seed and `now` always give the same events.
 *
 * Event `i` of a run happens at a distinct microsecond inside the minute before `now` (offset by
 * up to a second derived from the seed), so status events are never stale and every history key
 * (object, time, `*_usec`) is unique within a run. Downtime ids start at a seed-derived base.
 *
 * @module
 */

import { QUEUE_NAMES, type QueueName } from "../events/mod.ts";
import type { SyntheticEvent } from "./framing.ts";
import { checkCount } from "./framing.ts";
import { GENERATORS } from "./queues.ts";
import { World } from "./world.ts";

export type { JsonValue, SyntheticEvent } from "./framing.ts";
export {
  DEFAULT_EVENTS_PER_JOB,
  defaultForm,
  encodeEvent,
  type JobForm,
  type JobOptions,
  jobsFor,
  SINGLE_FORM_QUEUES,
} from "./framing.ts";

/** Options of {@linkcode syntheticEvents}. */
export interface SyntheticOptions {
  /** PRNG seed (any safe integer); default: a random one, so runs differ. */
  readonly seed?: number;
  /** "Now" in epoch milliseconds; events fall into the minute before it. Default `Date.now()`. */
  readonly now?: number;
}

/** A fresh random seed in [0, 2^32), for runs that differ and print the seed to be repeated. */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] ?? 0;
}

/**
 * Lazily generate `count` (≥ 1) realistic events for a queue; downtime lifecycles and 604/605
 * pairs are cut at `count`. Nothing is buffered: a caller can stream a million events through
 * {@linkcode jobsFor} in constant memory.
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
  const world = new World(seed, now, count);
  let n = 0;
  for (const event of GENERATORS[queue](world)) {
    yield event;
    if (++n >= count) return;
  }
}
