/**
 * The per-queue cap on jobs in flight (G2), shared by every connection of the
 * queue: all job servers (D9) and all generations, so handlers still running
 * for a dead connection keep counting (G2 port decision) and
 * `statusngin_downtimes` with one slot stays strictly serial across servers
 * and reconnects (G3).
 *
 * A slot is taken before a grab is sent and covers the job that answers it
 * (D12: grabs never exceed free slots, so a grabbed job always has room).
 * Released slots go to waiting connections first-come first-served, so a
 * backlog on one server cannot starve another server's connection.
 *
 * @module
 */

/** Cancels a pending {@link SlotPool.waitForSlot} registration. */
export type CancelWait = () => void;

/** A counting semaphore with FIFO hand-over. */
export class SlotPool {
  /** Maximum slots. */
  readonly capacity: number;
  #free: number;
  #waiters: (() => void)[] = [];

  /**
   * @param capacity Slots, ≥ 1.
   * @throws {RangeError} When capacity is not an integer ≥ 1.
   */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `Cannot create slot pool: capacity must be an integer >= 1, got ${capacity}`,
      );
    }
    this.capacity = capacity;
    this.#free = capacity;
  }

  /** Slots currently taken. */
  get inUse(): number {
    return this.capacity - this.#free;
  }

  /** Take a slot if one is free and nobody is waiting for one. */
  tryAcquire(): boolean {
    if (this.#free === 0 || this.#waiters.length > 0) return false;
    this.#free--;
    return true;
  }

  /**
   * Register for the next released slot. The callback runs with the slot
   * already taken on the caller's behalf; it must use or release it.
   *
   * @param onSlot Receives the slot.
   * @returns Cancels the registration (no-op once the slot was handed over).
   */
  waitForSlot(onSlot: () => void): CancelWait {
    this.#waiters.push(onSlot);
    return () => {
      const i = this.#waiters.indexOf(onSlot);
      if (i !== -1) this.#waiters.splice(i, 1);
    };
  }

  /**
   * Give a slot back; hands it to the oldest waiter if there is one.
   *
   * @throws {RangeError} On a release without a matching acquire (a bookkeeping bug).
   */
  release(): void {
    const next = this.#waiters.shift();
    if (next !== undefined) {
      next();
      return;
    }
    if (this.#free >= this.capacity) {
      throw new RangeError("Cannot release slot: no slot is in use");
    }
    this.#free++;
  }
}
