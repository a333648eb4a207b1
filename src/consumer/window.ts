/**
 * The adaptive in-flight window of a queue: how many of its jobs may be in
 * flight at once, between 1 and the hard cap (`--gearman-max-concurrent-jobs-per-queue`
 * for Gearman, the prefetch for RabbitMQ), and always within the byte budget.
 *
 * With acknowledgements after the commit (D1) a queue feeds its tables at
 * most (jobs in flight × rows per job) rows at a time, and a writer sends
 * full statements back to back only while it holds two batches: one in its
 * statement, one waiting for the statement's end. A fixed cap of 8 jobs of
 * 100 events could never fill batch 700 (a drain reached 72 % of the
 * single-connection ceiling). So the window grows while the queue uses all of it and its
 * writers send statements smaller than a batch, in proportion to what they
 * lack; it shrinks when the statements are full and jobs queue for buffer
 * space, down to the initial window; after each change it waits for the effect (new jobs must arrive and
 * the next statements start). It so settles near the jobs that keep the
 * statements full: every job in flight holds its decoded rows, and the
 * garbage collector copies them on every young-generation pass. It halves
 * on every tick while MySQL is slow (a statement has run far longer than
 * usual, or MySQL is unreachable): more jobs in flight would only wait,
 * holding memory, growing what a crash hands back to the broker and what a
 * shutdown must drain, and a recovering server gets the backlog gradually.
 * In-order queues (docs/consumption.md#downtimes-in-order) have no window: one slot, always.
 *
 * The consumer core knows nothing of MySQL; the composition root passes the
 * writers' state in as a {@link PressureSignal}.
 *
 * @module
 */
import type { QueueBudget } from "./budget.ts";

/** What the writers behind a queue report. */
export interface QueuePressure {
  /**
   * Rows in the statements in flight over the batch size, for the busiest
   * table the queue feeds: below 1, more rows in flight would fill them.
   */
  readonly fill: number;
  /** Rows of the queue already wait for buffer space in a writer. */
  readonly full: boolean;
  /**
   * Jobs in flight beyond what keeps the writers fed: their rows wait for
   * buffer space behind one job per writer that does so anyway.
   */
  readonly excess: number;
  /** MySQL is slow or unreachable: a statement has run far longer than usual. */
  readonly slow: boolean;
  /** How long a statement of these tables usually takes, ms (0: unknown yet). */
  readonly statementMs: number;
}

/** Reads the pressure on the tables a queue feeds. */
export type PressureSignal = (queue: string) => QueuePressure;

/** Window every queue starts with (the fixed cap of earlier versions), capped by the hard cap. */
export const INITIAL_WINDOW = 8;

/** How often the windows are adjusted. */
export const WINDOW_TICK_MS = 20;

/** Typical statements to wait after a change before the next one. */
const SETTLE_STATEMENTS = 2;

/** The window of one queue. */
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

  /**
   * @param queue Queue name.
   * @param budget The queue's budget; its capacity is the window.
   * @param cap Hard cap, ≥ 1.
   * @param pressure The pressure on the queue's tables.
   * @param changed Told every new window size (metric).
   * @param now Clock in ms (tests); default `performance.now`.
   */
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

  /** Jobs allowed in flight now. */
  get size(): number {
    return this.#budget.capacity;
  }

  /** Adjust the window once to the writers' state. */
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
      // below the initial window, which costs nothing worth saving and keeps some slack for
      // jobs that arrive late.
      next = Math.max(this.#floor, size - Math.ceil(p.excess / 2));
    }
    if (next === size) return;
    this.#settledAt = now + SETTLE_STATEMENTS * p.statementMs;
    budget.setCapacity(next);
    this.#changed(next);
  }
}
