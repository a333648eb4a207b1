/** Output sinks for the command-line functions, recording what they print. */

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
