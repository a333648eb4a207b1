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
