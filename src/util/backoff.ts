/**
 * The one back-off primitive: exponential with jitter (a fixed interval is a first delay equal to
 * the cap; docs/retries.md lists every user). Jitter keeps retries synchronised by one cause (a
 * MySQL outage, a gearmand restart) from hitting the recovering server in lock-step.
 *
 * @module
 */

/** Shape of a back-off schedule. */
export interface BackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Each delay is multiplied by 1 ± jitter, at random; default 0.2. */
  readonly jitter?: number;
}

/** Delays of one retry sequence; {@link reset} starts over. */
export class Backoff {
  readonly #o: Required<BackoffOptions>;
  readonly #random: () => number;
  #nextMs: number;

  /** @throws {RangeError} Unless 0 < initialMs <= maxMs and 0 <= jitter < 1. */
  constructor(options: BackoffOptions, random: () => number = Math.random) {
    const o = { jitter: 0.2, ...options };
    if (!(o.initialMs > 0) || !(o.maxMs >= o.initialMs)) {
      throw new RangeError(
        `Cannot create back-off: need 0 < initial <= max, got ${o.initialMs} and ${o.maxMs} ms`,
      );
    }
    if (!(o.jitter >= 0 && o.jitter < 1)) {
      throw new RangeError(`Cannot create back-off: jitter must be in [0, 1), got ${o.jitter}`);
    }
    this.#o = o;
    this.#random = random;
    this.#nextMs = o.initialMs;
  }

  /** The next delay, then double the base up to the cap. */
  next(): number {
    const base = this.#nextMs;
    const { maxMs, jitter } = this.#o;
    this.#nextMs = Math.min(base * 2, maxMs);
    return base * (1 - jitter + 2 * jitter * this.#random());
  }

  /** Start the sequence over (after a success). */
  reset(): void {
    this.#nextMs = this.#o.initialMs;
  }
}
