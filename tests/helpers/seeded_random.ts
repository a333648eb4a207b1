/**
 * A small deterministic generator for randomized tests: the same seed gives the same cases on
 * every run and machine, so a failure names a reproducible case.
 *
 * @param seed Start value.
 * @returns `rnd(n)`: an integer in [0, n).
 */
export function seededRandom(seed: number): (n: number) => number {
  let state = seed;
  return (n: number): number => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return state % n;
  };
}
