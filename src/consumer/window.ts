/**
 * The adaptive in-flight window of a queue: how many of its jobs may be in flight, between 1 and
 * the hard cap, following the pressure on the writers it feeds (the rules and why:
 * docs/consumption.md#the-consumer-core-srcconsumer). The core knows nothing of MySQL: the
 * composition root passes the writers' state as a {@link PressureSignal}.
 *
 * @module
 */
import type { QueueBudget } from "./budget.ts";

/** What the writers behind a queue report. */
export interface QueuePressure {
  /** Rows in the statements in flight over the batch size, busiest table: below 1, more would fill them. */
  readonly fill: number;
  /** Rows of the queue already wait for buffer space in a writer. */
  readonly full: boolean;
  /** Jobs in flight beyond what keeps the writers fed. */
  readonly excess: number;
  /** MySQL is slow or unreachable: a statement has run far longer than usual. */
  readonly slow: boolean;
  /** How long a statement of these tables usually takes, ms (0: unknown yet). */
  readonly statementMs: number;
}

export type PressureSignal = (queue: string) => QueuePressure;

/** Window every queue starts with, capped by the hard cap. */
export const INITIAL_WINDOW = 8;

export const WINDOW_TICK_MS = 20;

/** Typical statements to wait after a change before the next one. */
const SETTLE_STATEMENTS = 2;

export class InFlightWindow {
  readonly queue: string;
  readonly #budget: QueueBudget;
  readonly #cap: number;
  /** The excess rule never shrinks below this; a slow MySQL does. */
  readonly #floor: number;
  readonly #pressure: () => QueuePressure;
  readonly #changed: (jobs: number) => void;
  readonly #now: () => number;
  /** No change but a halving before this `now()`: the last change has not shown yet. */
  #settledAt = 0;

  /** `budget`'s capacity is the window; `changed` hears every new size; `now` is for tests. */
  constructor(
    queue: string,
    budget: QueueBudget,
    cap: number,
    pressure: () => QueuePressure,
    changed: (jobs: number) => void,
    now: () => number = () => performance.now(),
  ) {
    this.queue = queue;
    this.#budget = budget;
    this.#cap = cap;
    this.#floor = Math.min(INITIAL_WINDOW, cap);
    this.#pressure = pressure;
    this.#changed = changed;
    this.#now = now;
  }

  get size(): number {
    return this.#budget.capacity;
  }

  tick(): void {
    const budget = this.#budget;
    const size = budget.capacity;
    const p = this.#pressure();
    const now = this.#now();
    let next = size;
    if (p.slow) {
      next = Math.max(1, Math.floor(size / 2));
    } else if (now < this.#settledAt) {
      // The last change has not shown in the statements yet: new jobs must arrive (or the
      // waiting ones drain) and the statements after them start.
    } else if (p.fill < 1 && !p.full && budget.inUse >= size && size < this.#cap) {
      // The window, not the broker or the byte budget, limits the queue: grow in
      // proportion to what the statements lack (a fill of 0.9 needs about 1/0.9 the jobs).
      next = Math.min(this.#cap, Math.max(size + 1, Math.ceil(size / Math.max(p.fill, 0.5))));
    } else if (p.fill >= 1 && p.excess > 0 && size > this.#floor) {
      // Full statements and jobs queueing for buffer space: those jobs only hold memory. Not
      // below the initial window: it costs little and keeps slack for jobs that arrive late.
      next = Math.max(this.#floor, size - Math.ceil(p.excess / 2));
    }
    if (next === size) return;
    this.#settledAt = now + SETTLE_STATEMENTS * p.statementMs;
    budget.setCapacity(next);
    this.#changed(next);
  }
}
