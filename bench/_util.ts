/** Shared helpers of the end-to-end benchmarks (printing, medians, publishing). */
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
