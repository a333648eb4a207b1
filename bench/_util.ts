/** Shared helpers of the end-to-end benchmarks (printing, medians, publishing, /proc readings). */
import { GearmanClient } from "../src/gearman/client.ts";

/** Median of a list of numbers. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? sorted[mid] as number
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Print one line (benchmarks are scripts; stdout is their report). */
export function report(line: string): void {
  Deno.stdout.writeSync(new TextEncoder().encode(`${line}\n`));
}

/** Submit `count` copies of a payload as background jobs, pipelined. */
export async function submitMany(
  addr: string,
  fn: string,
  count: number,
  payload: (i: number) => string | Uint8Array,
): Promise<void> {
  await using client = await GearmanClient.connect(addr, { window: 200 });
  const inFlight: Promise<string>[] = [];
  for (let i = 0; i < count; i++) {
    inFlight.push(client.submitBackground(fn, payload(i)));
    if (inFlight.length >= 1000) await Promise.all(inFlight.splice(0));
  }
  await Promise.all(inFlight);
}

/** `1234.5` → `1,235`. */
export function fmt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

/** The number after flag `name` on the command line (`--events 50000`), or `fallback`. */
export function arg(name: string, fallback: number): number {
  const i = Deno.args.indexOf(name);
  return i === -1 ? fallback : Number(Deno.args[i + 1]);
}

/** What a benchmark ran on, for the header of its results. */
export interface MachineInfo {
  /** When the run started. */
  readonly date: Date;
  /** CPU model name from /proc/cpuinfo, or `unknown CPU`. */
  readonly cpu: string;
  /** Logical CPUs the process may use. */
  readonly cpus: number;
  /** Total memory in bytes. */
  readonly memoryBytes: number;
  /** Kernel release. */
  readonly os: string;
  /** Deno version. */
  readonly deno: string;
  /** Short commit of the checkout, or `unknown`. */
  readonly commit: string;
}

/**
 * The one-line header of a benchmark's results: results are only comparable within one machine,
 * so every table of docs/performance.md carries its date and machine, copied from this line.
 */
export function formatMachine(info: MachineInfo): string {
  const date = info.date.toISOString().slice(0, 16).replace("T", " ");
  const gib = (info.memoryBytes / 2 ** 30).toFixed(0);
  return `measured ${date} UTC on ${info.cpus} × ${info.cpu}, ${gib} GiB RAM, Linux ` +
    `${info.os}, Deno ${info.deno}, commit ${info.commit}`;
}

/** Read {@linkcode MachineInfo} of this machine and checkout (needs read and run permission). */
export async function machineInfo(): Promise<MachineInfo> {
  let cpu = "unknown CPU";
  try {
    const model = /^model name\s*:\s*(.+)$/m.exec(await Deno.readTextFile("/proc/cpuinfo"));
    if (model?.[1] !== undefined) cpu = model[1].trim();
  } catch {
    // Not Linux, or /proc not readable: the header says so instead of failing the bench.
  }
  let commit = "unknown";
  try {
    const out = await new Deno.Command("git", {
      args: ["rev-parse", "--short", "HEAD"],
      cwd: new URL("..", import.meta.url),
      stdout: "piped",
      stderr: "null",
    }).output();
    if (out.success) commit = new TextDecoder().decode(out.stdout).trim();
  } catch {
    // No git (an unpacked archive): the commit stays unknown.
  }
  return {
    date: new Date(),
    cpu,
    cpus: navigator.hardwareConcurrency,
    memoryBytes: Deno.systemMemoryInfo().total,
    os: Deno.osRelease(),
    deno: Deno.version.deno,
    commit,
  };
}

/** CPU seconds (user + system) a process has used so far, from `/proc` (Linux). */
export function cpuSeconds(pid: number | "self"): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  // Fields after the command name, which is in parentheses and may contain spaces; utime and
  // stime are fields 14 and 15 of the whole line, in clock ticks (100 per second).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** A process's peak resident memory (`VmHWM`) in MB. */
export function peakRssMb(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) / 1024;
}

/** The machine's 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them. */
export function loadAverage(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}
