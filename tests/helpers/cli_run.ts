/** Running the command line in-process with everything it prints collected into one text. */
import { runCli } from "../../src/cli/mod.ts";
import type { Io } from "../../src/cli/io.ts";

/** An `Io` that collects lines. */
export function bufferIo(): Io & { readonly outLines: string[]; readonly errLines: string[] } {
  const outLines: string[] = [];
  const errLines: string[] = [];
  return {
    outLines,
    errLines,
    out: (line) => void outLines.push(line),
    err: (line) => void errLines.push(line),
  };
}

/** What one run of the command line left behind. */
export interface CliRun {
  code: number;
  /** stdout, stderr and every log line, one text. */
  text: string;
}

/**
 * Run the command line with `argv` and `env`, without signal handlers.
 *
 * @param argv Arguments.
 * @param env Environment.
 * @param signal Stops a running worker.
 * @returns The exit code and all output.
 */
export async function cliRun(
  argv: string[],
  env: Record<string, string>,
  signal?: AbortSignal,
): Promise<CliRun> {
  const io = bufferIo();
  const logs: string[] = [];
  const code = await runCli(argv, env, {
    io,
    signals: false,
    logWrite: (line) => logs.push(line),
    ...(signal === undefined ? {} : { signal }),
  });
  return { code, text: [...io.outLines, ...io.errLines, ...logs].join("\n") };
}
