/**
 * What a queue may hold in memory: slots and a share of the process-wide payload bytes
 * (`--max-in-flight-bytes`). A {@link Grant} is taken before a job can arrive and released when it
 * was answered or given up. One {@link QueueBudget} spans every link and link generation of a queue,
 * so handlers of a dead connection keep counting and a one-slot queue stays serial. How a grab
 * reserves bytes before a Gearman job's size is known: docs/consumption.md#the-consumer-core-srcconsumer
 * (bench/memory.ts measures the bound). Waiters are served first-come first-served.
 *
 * @module
 */

/** Reservation of a grab whose queue has shown no job yet, and the floor of every estimate. */
export const MIN_ESTIMATE_BYTES = 64 * 1024;

const SIZE_HISTORY = 16;

/** Cancels a pending {@link QueueBudget.waitFor} registration. */
export type CancelWait = () => void;

/** The process-wide bound on payload bytes held by jobs in flight. */
export class ByteBudget {
  readonly limit: number;
  #used = 0;
  #queues = 0;
  readonly #blocked: QueueBudget[] = [];
  #waking = false;

  constructor(limit: number) {
    if (!Number.isSafeInteger(limit) || limit < 1) {
      throw new RangeError(`Cannot create byte budget: limit must be >= 1 byte, got ${limit}`);
    }
    this.limit = limit;
  }

  /** What a queue that has shown no job yet reserves for its probe: an equal share of the limit. */
  get probeReservation(): number {
    return Math.max(MIN_ESTIMATE_BYTES, Math.floor(this.limit / Math.max(1, this.#queues)));
  }

  /** @internal A queue budget joined. */
  register(): void {
    this.#queues++;
  }

  /** Bytes held now: reservations of outstanding grabs plus payloads of jobs in flight. */
  get used(): number {
    return this.#used;
  }

  /**
   * Whether `queue` may take `bytes` more: no other queue waits for bytes before it (else a queue
   * of small jobs takes back every byte it frees), and they fit; with nothing held anything does,
   * or one huge job would wedge its queue.
   */
  fits(queue: QueueBudget, bytes: number): boolean {
    if ((this.#blocked[0] ?? queue) !== queue) return false;
    return this.#used === 0 || this.#used + bytes <= this.limit;
  }

  /** @internal Change the held bytes; a decrease wakes blocked queues in order. */
  add(delta: number): void {
    this.#used += delta;
    if (delta < 0) this.#wake();
  }

  /** @internal Register a queue whose next grant waits for bytes. */
  block(queue: QueueBudget): void {
    if (!this.#blocked.includes(queue)) this.#blocked.push(queue);
  }

  /**
   * @internal Forget a queue that no longer waits for bytes (served, cancelled, or without a free
   * slot). The queues behind the first one waited only for their turn: they get it now.
   */
  unblock(queue: QueueBudget): void {
    const i = this.#blocked.indexOf(queue);
    if (i === -1) return;
    this.#blocked.splice(i, 1);
    if (i === 0) this.#wake();
  }

  #wake(): void {
    // Oldest first, stopping at the first that does not fit, so a large job is not overtaken
    // forever. A queue that is served or no longer waits leaves the list itself (unblock).
    if (this.#waking) return;
    this.#waking = true;
    try {
      for (let head = this.#blocked[0]; head !== undefined; head = this.#blocked[0]) {
        head.resume();
        if (this.#blocked[0] === head) break;
      }
    } finally {
      this.#waking = false;
    }
  }
}

/** The right to hold one job of a queue: a slot plus its bytes. Settle once, release once. */
export interface Grant {
  /** Bytes this grant holds now (the estimate until settled). */
  readonly bytes: number;
  /** The job arrived: hold its real size instead of the estimate. */
  settle(bytes: number): void;
  /** Give slot and bytes back (job answered, given up, or the grab came back empty). Idempotent. */
  release(): void;
}

/** Slots and bytes of one queue. */
export class QueueBudget {
  readonly queue: string;
  readonly #bytes: ByteBudget;
  #capacity: number;
  #inUse = 0;
  /** Grants whose job has not arrived yet (their bytes are an estimate). */
  #unsettled = 0;
  readonly #sizes: number[] = [];
  #waiters: ((grant: Grant) => void)[] = [];
  /** `performance.now()` when the queue last went from full to having a free slot. */
  #roomSince = performance.now();
  #released = 0;

  constructor(queue: string, capacity: number, bytes: ByteBudget) {
    QueueBudget.#checkCapacity(capacity);
    this.queue = queue;
    this.#capacity = capacity;
    this.#bytes = bytes;
    bytes.register();
  }

  static #checkCapacity(capacity: number): void {
    if (Number.isInteger(capacity) && capacity >= 1) return;
    throw new RangeError(
      `Cannot size queue budget: capacity must be an integer >= 1, got ${capacity}`,
    );
  }

  get capacity(): number {
    return this.#capacity;
  }

  /** Grants held now (jobs in flight plus grabs outstanding). */
  get inUse(): number {
    return this.#inUse;
  }

  get hasRoom(): boolean {
    return this.#inUse < this.#capacity;
  }

  /** `performance.now()` since which a slot has been free without interruption (stall detection). */
  get roomSince(): number {
    return this.#roomSince;
  }

  /** Every slot holds a job that arrived (a grab still waiting for its answer holds none). */
  get full(): boolean {
    return this.#inUse - this.#unsettled >= this.#capacity;
  }

  /** Grants given back so far: a full queue whose count stands still has finished no job (stall detection). */
  get released(): number {
    return this.#released;
  }

  /** Bytes a grant reserves before its job is known. */
  get estimate(): number {
    if (this.#sizes.length === 0) return this.#bytes.probeReservation;
    let max = MIN_ESTIMATE_BYTES;
    for (const s of this.#sizes) if (s > max) max = s;
    return max;
  }

  /** Change the number of slots (the adaptive window); grants already held stay valid. */
  setCapacity(capacity: number): void {
    QueueBudget.#checkCapacity(capacity);
    const hadRoom = this.hasRoom;
    this.#capacity = capacity;
    if (!hadRoom && this.hasRoom) this.#roomSince = performance.now();
    this.resume();
  }

  /** Take a grant now if a slot and the bytes are free and nobody waits before us. */
  tryAcquire(): Grant | undefined {
    if (this.#waiters.length > 0 || !this.#slotFree() || !this.#bytes.fits(this, this.estimate)) {
      return undefined;
    }
    return this.#grant();
  }

  /** Register for the next grant, handed to `onGrant` already taken (use or release it); returns a cancel. */
  waitFor(onGrant: (grant: Grant) => void): CancelWait {
    this.#waiters.push(onGrant);
    if (this.#waiters.length === 1 && this.#slotFree()) {
      if (!this.#bytes.fits(this, this.estimate)) this.#bytes.block(this);
      // Never call back before the caller has stored its cancel function.
      else queueMicrotask(() => this.resume());
    }
    return () => {
      const i = this.#waiters.indexOf(onGrant);
      if (i === -1) return;
      this.#waiters.splice(i, 1);
      if (this.#waiters.length === 0) this.#bytes.unblock(this);
    };
  }

  /** @internal Hand grants to waiters while their slots and bytes allow. */
  resume(): void {
    while (this.#waiters.length > 0 && this.#slotFree()) {
      if (!this.#bytes.fits(this, this.estimate)) return this.#bytes.block(this);
      const next = this.#waiters.shift() as (grant: Grant) => void;
      const grant = this.#grant();
      // Served: waiting again queues it behind the others, or it would keep the first place.
      this.#bytes.unblock(this);
      next(grant);
    }
    this.#bytes.unblock(this);
  }

  /** A slot is free, and a queue that has shown no job yet learns its size from one grab first. */
  #slotFree(): boolean {
    return this.#inUse < this.#capacity && (this.#sizes.length > 0 || this.#unsettled === 0);
  }

  #grant(): Grant {
    const bytes = this.#bytes;
    let held = this.estimate;
    let settled = false;
    let released = false;
    this.#inUse++;
    this.#unsettled++;
    bytes.add(held);
    return {
      get bytes() {
        return held;
      },
      settle: (size: number) => {
        if (settled || released) return;
        settled = true;
        this.#unsettled--;
        this.#sizes.push(size);
        if (this.#sizes.length > SIZE_HISTORY) this.#sizes.shift();
        bytes.add(size - held);
        held = size;
        // The first size of a queue ends its probe: waiters may now be served.
        this.resume();
      },
      release: () => {
        if (released) return;
        released = true;
        this.#released++;
        if (!settled) this.#unsettled--;
        const wasFull = !this.hasRoom;
        this.#inUse--;
        if (wasFull && this.hasRoom) this.#roomSince = performance.now();
        bytes.add(-held);
        this.resume();
      },
    };
  }
}
