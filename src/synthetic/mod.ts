/**
 * Realistic synthetic events for the twelve consumed queues, for the `publish` tool, load tests
 * and the decoder tests. Pure: no I/O, no clock of its own (the caller passes `now`), and a
 * seeded PRNG, so the same seed and `now` always give the same events.
 *
 * What "realistic" means here (docs/tables.md#queues):
 * - every payload field of the queue, with the envelope `type`/`flags`/`attr`/`timestamp`/
 *   `timestamp_usec` in the broker's key order;
 * - a small monitored world: host names like `web-017.example.com` and openITCOCKPIT-style UUIDs,
 *   services such as `Disk Usage /var`, `Datenträger C:`, `Прочее`, `監視 HTTP`, each object with a
 *   state that evolves like a core's (soft attempts, then hard), plugin outputs and perfdata
 *   strings that the perfdata parser (docs/perfdata.md#parsing) parses without skipping a gauge,
 *   and now and then a multi-line long output of a few KB;
 * - host and service variants of every queue that carries both, with the discriminators of
 *   docs/tables.md#host-or-service; downtimes as consistent lifecycles (ADD→START→STOP→DELETE, and
 *   ADD→DELETE before the window began); core restarts as `{"object_type":102,"timestamp":0}`.
 *
 * Time and key uniqueness: event `i` of a run happens at a distinct microsecond inside the minute
 * before `now` (offset by up to one second derived from the seed), so status events are never stale
 * (docs/tables.md#stale-status) and every history key (object, time, `*_usec`) is unique within a
 * run; runs at different times, or with different seeds, do not collide in practice. Downtime ids
 * start at a seed-derived base.
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

/**
 * A fresh random seed, for callers that want runs to differ and to print the seed so a run can
 * be repeated.
 *
 * @returns A seed in [0, 2^32).
 */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] ?? 0;
}

/**
 * Lazily generate `count` realistic events for a queue. Nothing is buffered: a caller can
 * stream a million events through {@linkcode jobsFor} in constant memory.
 *
 * @param queue One of the twelve queues.
 * @param count Number of events, ≥ 1. Downtime lifecycles and 604/605 pairs are cut at `count`.
 * @param options Seed and "now" (epoch ms).
 * @returns An iterator of events; the same seed and `now` give the same events.
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
