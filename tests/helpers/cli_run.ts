/** Running the command line in-process with everything it prints collected into one text. */
import { runCli } from "../../src/cli/mod.ts";
import type { Io } from "../../src/cli/io.ts";
import { freePort } from "./gearmand.ts";

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

/** A `run` of the command line started by `startRun`, with its output collected. */
export interface StartedRun {
  /** The exit code, once the worker has ended. */
  readonly done: Promise<number>;
  readonly io: ReturnType<typeof bufferIo>;
  /** The log lines so far. */
  readonly logs: string[];
}

/** Options of `startRun`. */
export interface StartRunOptions {
  /** The dead-letter file; "" (the default) for none. */
  readonly deadLetterFile?: string;
  /** Further flags, after the others. */
  readonly args?: readonly string[];
  /** Stops the worker. */
  readonly signal?: AbortSignal;
}

/**
 * Start the worker (`run`) in-process without signal handlers, on the tables of `mysqlUrl` (create
 * them first) and the job server at `gearmanAddr`, with no metrics listener and a free `/ws` port
 * so that tests running in parallel do not collide.
 *
 * @param gearmanAddr The job server.
 * @param mysqlUrl The database.
 * @param options The dead-letter file, further flags and the signal that stops the worker.
 * @returns The exit code to come and the output so far.
 */
export function startRun(
  gearmanAddr: string,
  mysqlUrl: string,
  options: StartRunOptions = {},
): StartedRun {
  const io = bufferIo();
  const logs: string[] = [];
  const done = runCli(
    [
      "run",
      "--gearman-addr",
      gearmanAddr,
      "--mysql-url",
      mysqlUrl,
      "--metrics-port",
      "0",
      "--listen-addr",
      `127.0.0.1:${freePort()}`,
      "--dead-letter-file",
      options.deadLetterFile ?? "",
      ...(options.args ?? []),
    ],
    {},
    {
      io,
      signals: false,
      logWrite: (line) => void logs.push(line),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    },
  );
  return { done, io, logs };
}
