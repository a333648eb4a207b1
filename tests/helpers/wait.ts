/** Waiting helpers: tests wait for an event under a deadline, never sleep to synchronise. */

/**
 * Poll `predicate` until it returns true, failing after `timeoutMs`.
 *
 * @param predicate Condition to reach.
 * @param options Timeout (default 10 s), poll interval and a message for the failure.
 */
export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number; message?: string } = {},
): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const until = performance.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (performance.now() > until) {
      throw new Error(
        `Timed out after ${timeoutMs} ms waiting for ${options.message ?? "condition"}`,
      );
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 10));
  }
}

/**
 * Whether `p` has settled yet, readable without awaiting it: to show that something has NOT
 * happened yet (a stop still waiting), then wait for it with {@link waitFor}.
 *
 * @param p The promise to watch.
 * @returns A view whose `settled` turns true once `p` resolves or rejects.
 */
export function track(p: Promise<unknown>): { readonly settled: boolean } {
  const state = { settled: false };
  p.then(() => (state.settled = true), () => (state.settled = true));
  return state;
}

/**
 * `p`'s value, or "stuck" once `ms` passed first: for tests whose fault is a hang, bounded only
 * so that the test ends (the caller asserts the value is not "stuck").
 *
 * @param p The promise that must settle.
 * @param ms How long to wait for it (default 30 s).
 */
export async function orStuck<T>(p: Promise<T>, ms = 30_000): Promise<T | "stuck"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stuck = new Promise<"stuck">((resolve) => timer = setTimeout(() => resolve("stuck"), ms));
  return await Promise.race([p, stuck]).finally(() => clearTimeout(timer));
}

/**
 * Let pending 0 ms timers, promise callbacks and ready I/O callbacks run `n` times. Only for
 * showing that something does NOT happen while the test holds what would allow it.
 *
 * @param n Event-loop turns to let pass.
 */
export async function turns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 0));
}

/** The delays passed to `setTimeout` while a {@link recordTimers} recording is open. */
export interface TimerRecording extends Disposable {
  readonly requested: readonly number[];
}

/**
 * Record the delay of every `setTimeout` call until disposed (the timers still run as asked).
 * Shows which pauses code asked for without measuring how long it took.
 *
 * @returns The recording; dispose it (`using`) to restore `setTimeout`.
 */
export function recordTimers(): TimerRecording {
  const requested: number[] = [];
  const real = globalThis.setTimeout;
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
    requested.push(args[1] ?? 0);
    return real(...args);
  }) as typeof setTimeout;
  return {
    requested,
    [Symbol.dispose]() {
      globalThis.setTimeout = real;
    },
  };
}
