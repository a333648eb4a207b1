/**
 * The seeded PRNG behind every synthetic value: the same seed gives the same events.
 *
 * @module
 */

/** mulberry32: tiny, fast, and good enough to vary test data; not for cryptography. */
export class Rng {
  #state: number;

  constructor(seed: number) {
    // Fold the high bits of a large seed in, so seeds that differ only above 2^32 differ.
    this.#state = (seed ^ Math.floor(seed / 0x1_0000_0000)) | 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) | 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  }

  /** Integer in [min, max], both inclusive. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** Double in [min, max), full precision: the broker's JSON carries up to 17 digits. */
  float(min: number, max: number): number {
    return min + this.next() * (max - min);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.next() * items.length)];
    if (item === undefined) throw new RangeError("Cannot pick from an empty list");
    return item;
  }

  /** Index chosen with the given relative weights. */
  weighted(weights: readonly number[]): number {
    let r = this.next() * weights.reduce((sum, w) => sum + w, 0);
    for (let i = 0; i < weights.length; i++) {
      r -= weights[i] ?? 0;
      if (r < 0) return i;
    }
    return weights.length - 1;
  }

  hex(digits: number): string {
    return Array.from({ length: digits }, () => this.int(0, 15).toString(16)).join("");
  }
}
