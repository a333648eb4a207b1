/**
 * The worker's own process as the standard `process_*` series, read at scrape time. Not
 * prom-client's `collectDefaultMetrics`: it adds twenty `nodejs_*` series that describe Node, not
 * this runtime, and reads everything from /proc, which Deno allows only under `--allow-all`, so
 * the packaged worker (tools/compile.ts) would export zeros. Memory, CPU and start time come from
 * runtime APIs; what only /proc knows is absent (not 0) when it cannot be read.
 *
 * @module
 */
import process from "node:process";
import type { ProcessField } from "./catalogue.ts";

/** One reading of the process; a field is undefined when this process cannot know it. */
export type ProcessSample = { readonly [K in ProcessField]: number | undefined };

/**
 * The virtual memory size (field 23) of /proc/self/stat. The command name (field 2) may hold
 * spaces or parentheses, so fields are counted from the last `)`.
 */
export function virtualMemoryFromStat(stat: string): number | undefined {
  const close = stat.lastIndexOf(")");
  if (close < 0) return undefined;
  // After ")" field 3 (the state) comes first, so field n is at index n - 3.
  const value = Number(stat.slice(close + 1).trim().split(/\s+/)[23 - 3]);
  return Number.isFinite(value) ? value : undefined;
}

/** The soft limit of open files from /proc/self/limits (`unlimited` reads as +Inf). */
export function maxOpenFiles(limits: string): number | undefined {
  const match = /^Max open files\s+(\S+)/m.exec(limits);
  if (match?.[1] === undefined) return undefined;
  return match[1] === "unlimited" ? Infinity : Number(match[1]);
}

/** The process metrics' collect callbacks of one scrape arrive together and share one reading. */
export class ProcessReader {
  #pending: Promise<ProcessSample> | undefined;

  sample(): Promise<ProcessSample> {
    this.#pending ??= this.#read().finally(() => (this.#pending = undefined));
    return this.#pending;
  }

  async #read(): Promise<ProcessSample> {
    const cpu = process.cpuUsage();
    const [stat, limits, openFds] = await Promise.all([
      readProc("/proc/self/stat"),
      readProc("/proc/self/limits"),
      countOpenFds(),
    ]);
    return {
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
      residentMemoryBytes: Deno.memoryUsage().rss,
      // When the runtime started, which is when the process did.
      startTimeSeconds: performance.timeOrigin / 1000,
      virtualMemoryBytes: stat === undefined ? undefined : virtualMemoryFromStat(stat),
      openFds,
      maxFds: limits === undefined ? undefined : maxOpenFiles(limits),
    };
  }
}

/** A /proc file, or undefined where it cannot be read (not Linux, or not `--allow-all`). */
async function readProc(path: string): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return undefined;
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

/** Entries of /proc/self/fd less the one the listing itself held open; undefined if unreadable. */
async function countOpenFds(): Promise<number | undefined> {
  if (Deno.build.os !== "linux") return undefined;
  try {
    let n = 0;
    for await (const _ of Deno.readDir("/proc/self/fd")) n++;
    return Math.max(0, n - 1);
  } catch {
    return undefined;
  }
}
