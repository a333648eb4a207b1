/**
 * The one back-off primitive of the worker: exponential back-off with optional
 * jitter. Every layer that waits before trying again takes its delays from a
 * {@link Backoff} with its own parameters, a fixed interval being a first delay
 * equal to the cap; docs/retries.md lists every layer and its parameters.
 *
 * Jitter matters where retries are synchronised by their cause and many: a
 * MySQL outage makes every slot of every queue fail in the same millisecond,
 * and a gearmand restart drops every link at once. Without it they all come
 * back in lock-step and hit the recovering server together.
 *
 * @module
 */

/** Shape of a back-off schedule. */
export interface BackoffOptions {
  /** First delay in milliseconds (> 0). */
  readonly initialMs: number;
  /** Largest delay in milliseconds (≥ initialMs). */
  readonly maxMs: number;
  /** Each delay is multiplied by 1 ± jitter, at random; default 0.2. */
  readonly jitter?: number;
}

/** Delays of one retry sequence; {@link reset} starts over. */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #jitter: number;
  readonly #random: () => number;
  #nextMs: number;

  /**
   * @param options Initial delay, cap and jitter.
   * @param random Source of randomness in [0, 1) (tests).
   * @throws {RangeError} When the delays or the jitter are out of range.
   */
  constructor(options: BackoffOptions, random: () => number = Math.random) {
    const jitter = options.jitter ?? 0.2;
    if (!(options.initialMs > 0) || !(options.maxMs >= options.initialMs)) {
      throw new RangeError(
        `Cannot create back-off: need 0 < initial <= max, got ${options.initialMs} and ${options.maxMs} ms`,
      );
    }
    if (!(jitter >= 0 && jitter < 1)) {
      throw new RangeError(`Cannot create back-off: jitter must be in [0, 1), got ${jitter}`);
    }
    this.#initialMs = options.initialMs;
    this.#maxMs = options.maxMs;
    this.#jitter = jitter;
    this.#random = random;
    this.#nextMs = options.initialMs;
  }

  /**
   * The next delay, then double the base up to the cap.
   *
   * @returns Milliseconds to wait before the next attempt.
   */
  next(): number {
    const base = this.#nextMs;
    this.#nextMs = Math.min(this.#nextMs * 2, this.#maxMs);
    return base * (1 - this.#jitter + 2 * this.#jitter * this.#random());
  }

  /** Start the sequence over (after a success). */
  reset(): void {
    this.#nextMs = this.#initialMs;
  }
}
