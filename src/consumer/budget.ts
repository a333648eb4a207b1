/**
 * What a queue may hold in memory: a number of jobs (the per-queue cap,
 * docs/consumption.md#jobs-in-flight) and a share of the process-wide payload bytes
 * (`--max-in-flight-bytes`).
 *
 * A {@link Grant} is taken before a job can arrive — before a Gearman grab is
 * sent, before a RabbitMQ delivery is handed to its handler — and released
 * when the job was answered or given up. One {@link QueueBudget} per queue is
 * shared by every link of the queue (all job servers, D9) and every
 * generation of a link, so handlers still running for a dead connection keep
 * counting and `statusngin_downtimes` with one slot stays strictly serial
 * across servers and reconnects (docs/consumption.md#downtimes-in-order).
 *
 * Bytes: Gearman tells a job's size only when the job arrives, after the grab
 * that committed us to take it. A grab therefore reserves an estimate — the
 * largest of the queue's recent jobs, at least {@link MIN_ESTIMATE_BYTES} —
 * and the reservation becomes the real size on arrival. Until a queue has
 * shown one job, it probes with a single grab that reserves an equal share
 * of the limit, so a worker restarted in front of a backlog of 20 MiB jobs
 * takes one per queue before it knows better, not eight, and the first wave
 * overshoots only by what the first jobs exceed their share. What the
 * estimate cannot prevent is a queue whose jobs suddenly grow: then its
 * outstanding grabs may overshoot the limit by their number times the
 * growth, once (bench/memory.ts measures the bound).
 *
 * Grants go to waiters first-come first-served, per queue and across queues
 * for bytes, so a backlog on one server or one queue cannot starve another.
 *
 * @module
 */

/** Reservation of a grab whose queue has shown no job yet, and the floor of every estimate. */
export const MIN_ESTIMATE_BYTES = 64 * 1024;

/** Job sizes remembered per queue for the estimate. */
const SIZE_HISTORY = 16;

/** Cancels a pending {@link QueueBudget.waitFor} registration. */
export type CancelWait = () => void;

/** The process-wide bound on payload bytes held by jobs in flight. */
export class ByteBudget {
  /** The limit in bytes (`--max-in-flight-bytes`). */
  readonly limit: number;
  #used = 0;
  #queues = 0;
  readonly #blocked: QueueBudget[] = [];

  /**
   * @param limit Bytes, ≥ 1.
   * @throws {RangeError} When the limit is not a positive integer.
   */
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
   * Whether `bytes` more fit. With nothing held, anything fits: a single job
   * larger than the limit must still be taken, or it would wedge its queue.
   */
  fits(bytes: number): boolean {
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

  /** @internal Forget a queue that no longer waits. */
  unblock(queue: QueueBudget): void {
    const i = this.#blocked.indexOf(queue);
    if (i !== -1) this.#blocked.splice(i, 1);
  }

  #wake(): void {
    // Oldest first; stop at the first queue that still does not fit, so a
    // large job is not overtaken forever by a stream of small ones. Entries
    // are removed by identity: a grant handed out below may run code that
    // cancels other waits.
    for (;;) {
      const queue = this.#blocked[0];
      if (queue === undefined || !queue.resume()) return;
      this.unblock(queue);
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
  /** Queue name, for logs. */
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

  /**
   * @param queue Queue name.
   * @param capacity Jobs allowed at once, ≥ 1.
   * @param bytes The process-wide byte budget.
   * @throws {RangeError} When capacity is not an integer ≥ 1.
   */
  constructor(queue: string, capacity: number, bytes: ByteBudget) {
    QueueBudget.#checkCapacity(capacity);
    this.queue = queue;
    this.#capacity = capacity;
    this.#bytes = bytes;
    bytes.register();
  }

  static #checkCapacity(capacity: number): void {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `Cannot size queue budget: capacity must be an integer >= 1, got ${capacity}`,
      );
    }
  }

  /** Jobs allowed at once. */
  get capacity(): number {
    return this.#capacity;
  }

  /** Grants held now (jobs in flight plus grabs outstanding). */
  get inUse(): number {
    return this.#inUse;
  }

  /** A slot is free (bytes aside). */
  get hasRoom(): boolean {
    return this.#inUse < this.#capacity;
  }

  /** `performance.now()` since which a slot has been free without interruption (stall detection). */
  get roomSince(): number {
    return this.#roomSince;
  }

  /** Bytes a grant reserves before its job is known. */
  get estimate(): number {
    if (this.#sizes.length === 0) return this.#bytes.probeReservation;
    let max = MIN_ESTIMATE_BYTES;
    for (const s of this.#sizes) if (s > max) max = s;
    return max;
  }

  /**
   * Change the number of slots (the adaptive window); grants already held stay valid.
   *
   * @param capacity New capacity, ≥ 1.
   */
  setCapacity(capacity: number): void {
    QueueBudget.#checkCapacity(capacity);
    const hadRoom = this.hasRoom;
    this.#capacity = capacity;
    if (!hadRoom && this.hasRoom) this.#roomSince = performance.now();
    this.resume();
  }

  /**
   * Take a grant now if a slot and the bytes are free and nobody waits before us.
   *
   * @returns The grant, or undefined.
   */
  tryAcquire(): Grant | undefined {
    if (this.#waiters.length > 0 || !this.#canGrant()) return undefined;
    return this.#grant();
  }

  /**
   * Register for the next grant. The callback runs with the grant already
   * taken on the caller's behalf; it must use or release it.
   *
   * @param onGrant Receives the grant.
   * @returns Cancels the registration (a no-op once the grant was handed over).
   */
  waitFor(onGrant: (grant: Grant) => void): CancelWait {
    this.#waiters.push(onGrant);
    if (this.#waiters.length === 1) {
      if (this.#inUse < this.#capacity && this.#probeAllowed()) {
        if (!this.#bytes.fits(this.estimate)) this.#bytes.block(this);
        // Never call back before the caller has stored its cancel function.
        else queueMicrotask(() => this.resume());
      }
    }
    return () => {
      const i = this.#waiters.indexOf(onGrant);
      if (i === -1) return;
      this.#waiters.splice(i, 1);
      if (this.#waiters.length === 0) this.#bytes.unblock(this);
    };
  }

  /**
   * @internal Hand grants to waiters while possible.
   * @returns False when the head waiter is blocked on bytes (registered with the byte budget).
   */
  resume(): boolean {
    while (this.#waiters.length > 0) {
      if (this.#inUse >= this.#capacity || !this.#probeAllowed()) return true;
      if (!this.#bytes.fits(this.estimate)) {
        this.#bytes.block(this);
        return false;
      }
      const next = this.#waiters.shift() as (grant: Grant) => void;
      next(this.#grant());
    }
    return true;
  }

  #probeAllowed(): boolean {
    // A queue that has shown no job yet learns its size from one grab first.
    return this.#sizes.length > 0 || this.#unsettled === 0;
  }

  #canGrant(): boolean {
    return this.#inUse < this.#capacity && this.#probeAllowed() &&
      this.#bytes.fits(this.estimate);
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
        this.#remember(size);
        bytes.add(size - held);
        held = size;
        // The first size of a queue ends its probe: waiters may now be served.
        this.resume();
      },
      release: () => {
        if (released) return;
        released = true;
        if (!settled) this.#unsettled--;
        const wasFull = !this.hasRoom;
        this.#inUse--;
        if (wasFull && this.hasRoom) this.#roomSince = performance.now();
        bytes.add(-held);
        this.resume();
      },
    };
  }

  #remember(size: number): void {
    this.#sizes.push(size);
    if (this.#sizes.length > SIZE_HISTORY) this.#sizes.shift();
  }
}
