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
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #jitter: number;
  readonly #random: () => number;
  #nextMs: number;

  /** @throws {RangeError} Unless 0 < initialMs <= maxMs and 0 <= jitter < 1. */
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

  /** The next delay, then double the base up to the cap. */
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
