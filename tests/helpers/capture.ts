/** Output sinks for the command-line functions, recording what they print, and what a promise rejects with. */

/** Recorded lines of stdout and stderr, and the sinks that record them. */
export interface Captured {
  readonly out: string[];
  readonly err: string[];
  readonly io: { out(line: string): void; err(line: string): void };
}

/** Fresh sinks that record every line. */
export function capture(): Captured {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (l) => out.push(l), err: (l) => err.push(l) } };
}

/**
 * What `promise` rejects with, for a test to inspect the error's fields.
 *
 * @param promise The call that should fail.
 * @returns The rejection reason; undefined when the promise resolves.
 */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err: unknown) {
    return err;
  }
  return undefined;
}
