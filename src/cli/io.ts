/**
 * Where commands print: the only module that writes to stdout/stderr
 * directly (everything else logs through src/log.ts or returns text).
 *
 * @module
 */

/** Output of a command: one line per call. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
}

const encoder = new TextEncoder();

function writeAll(stream: typeof Deno.stdout | typeof Deno.stderr, text: string): void {
  const bytes = encoder.encode(text);
  let off = 0;
  while (off < bytes.length) off += stream.writeSync(bytes.subarray(off));
}

/** stdout / stderr of the process. */
export const PROCESS_IO: Io = {
  out: (line) => writeAll(Deno.stdout, `${line}\n`),
  err: (line) => writeAll(Deno.stderr, `${line}\n`),
};

/**
 * The usage problem with a count given on the command line, if any.
 *
 * @param name What the number counts, for the message.
 * @param value The parsed value.
 * @returns `undefined` for a positive integer, else the message.
 */
export function positiveIntegerProblem(name: string, value: number): string | undefined {
  return Number.isSafeInteger(value) && value >= 1
    ? undefined
    : `${name} must be a positive integer, got ${value}`;
}
