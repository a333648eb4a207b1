/**
 * Where a worker's main thread spent its CPU, read from a V8 tick log
 * (`--prof`). Node's `--prof-process` does not read the logs of the V8 in
 * Deno 2, so this reads them itself: every sample (`tick`) is attributed to
 * the code object its program counter lies in, and to the first JavaScript
 * function on its stack (an interpreted function's own code is a shared
 * bytecode handler, so the stack names it).
 *
 *   deno run -A bench/pipeline.ts --rounds 1 --batches 700 --tables statusengine_hostchecks \
 *     --gearman-only --worker-v8-flags "--prof,--prof-sampling-interval=100,--logfile=/tmp/v8-%p.log,--no-logfile-per-isolate"
 *   deno run -A bench/v8_ticks.ts /tmp/v8-1234.log [--last-ms 1500] [--top 40]
 *   deno run -A bench/v8_ticks.ts OLD.log,OLD2.log --against NEW.log,NEW2.log --from decodeJob
 *
 * `--last-ms` keeps the samples of the last milliseconds of the log only (a
 * drain's end is the end of the log, its start-up is not of interest).
 * `--from NAME` keeps each log's samples from the first one with the function
 * NAME on its stack on (`decodeJob`: the drain's first job).
 * `--against LOGS` compares two versions: the samples of both lists (logs
 * separated by commas, e.g. one per round of `bench/pipeline.ts --baseline`)
 * by first JavaScript function, its position and tier cut off so the same
 * function matches across checkouts and re-optimisations. On the same drain
 * the difference in samples is the difference in main-thread CPU.
 * Only the main thread is sampled: garbage collection on V8's helper threads
 * is missing here (and included in the CPU time the pipeline bench prints).
 */
import { report } from "./_util.ts";

const VM_STATES = [
  "JS",
  "GC",
  "PARSER",
  "BYTECODE_COMPILER",
  "COMPILER",
  "OTHER",
  "EXTERNAL",
  "ATOMICS_WAIT",
  "IDLE",
  "LOGGING",
  "IDLE_EXTERNAL",
];

interface CodeEntry {
  start: number;
  size: number;
  name: string;
  /** A JavaScript function (not a builtin, stub or bytecode handler). */
  js: boolean;
}

function option(name: string, fallback: number): number {
  const i = Deno.args.indexOf(name);
  return i === -1 ? fallback : Number(Deno.args[i + 1]);
}

/** Splits a log line into fields; names are quoted when they hold a comma. */
export function fields(line: string): string[] {
  if (!line.includes('"')) return line.split(",");
  const out: string[] = [];
  let i = 0;
  while (i <= line.length) {
    if (line[i] === '"') {
      let j = i + 1;
      let text = "";
      while (j < line.length && line[j] !== '"') {
        if (line[j] === "\\" && j + 1 < line.length) j++;
        text += line[j++];
      }
      out.push(text);
      i = j + 2;
    } else {
      const j = line.indexOf(",", i);
      const end = j === -1 ? line.length : j;
      out.push(line.slice(i, end));
      i = end + 1;
    }
  }
  return out;
}

/** Code objects ordered by start address; lookups by binary search. */
class CodeMap {
  readonly #entries: CodeEntry[] = [];
  readonly #libraries: { start: number; end: number; name: string }[] = [];

  #index(address: number): number {
    let lo = 0;
    let hi = this.#entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.#entries[mid] as CodeEntry).start <= address) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1;
  }

  add(entry: CodeEntry): void {
    const i = this.#index(entry.start);
    if (i >= 0 && (this.#entries[i] as CodeEntry).start === entry.start) this.#entries[i] = entry;
    else this.#entries.splice(i + 1, 0, entry);
  }

  remove(start: number): CodeEntry | undefined {
    const i = this.#index(start);
    if (i < 0 || (this.#entries[i] as CodeEntry).start !== start) return undefined;
    return this.#entries.splice(i, 1)[0];
  }

  move(from: number, to: number): void {
    const entry = this.remove(from);
    if (entry !== undefined) this.add({ ...entry, start: to });
  }

  library(name: string, start: number, end: number): void {
    this.#libraries.push({ name: name.split("/").pop() ?? name, start, end });
  }

  find(address: number): CodeEntry | string | undefined {
    const i = this.#index(address);
    const entry = this.#entries[i];
    if (entry !== undefined && address < entry.start + entry.size) return entry;
    const library = this.#libraries.find((l) => address >= l.start && address < l.end);
    return library === undefined ? undefined : `[${library.name}]`;
  }
}

/** One sample: when, the VM state, the code its program counter was in, the JavaScript on its stack. */
export interface Tick {
  time: number;
  state: string;
  self: string;
  js: string | undefined;
  stack: string[];
}

/**
 * The samples of a V8 log, each attributed to the code it ran.
 *
 * @param log The log's text.
 * @returns The samples in log order.
 */
export function readTicks(log: string): Tick[] {
  const code = new CodeMap();
  const ticks: Tick[] = [];
  for (const line of log.split("\n")) {
    const f = fields(line);
    switch (f[0]) {
      case "shared-library":
        code.library(f[1] ?? "", Number(f[2]), Number(f[3]));
        break;
      case "code-creation":
        code.add({
          start: Number(f[4]),
          size: Number(f[5]),
          name: `${f[1] === "JS" ? "" : `${f[1]}: `}${f[6]}${f[8] ?? ""}`,
          js: f[1] === "JS",
        });
        break;
      case "code-move":
        code.move(Number(f[1]), Number(f[2]));
        break;
      case "code-delete":
        code.remove(Number(f[1]));
        break;
      case "tick": {
        const pc = code.find(Number(f[1]));
        const stack: string[] = [];
        let js = typeof pc === "object" && pc.js ? pc.name : undefined;
        for (let i = 6; i < f.length; i++) {
          const frame = code.find(Number(f[i]));
          if (typeof frame !== "object") continue;
          if (frame.js) {
            js ??= frame.name;
            stack.push(frame.name);
          }
        }
        ticks.push({
          time: Number(f[2]) / 1000,
          state: VM_STATES[Number(f[5])] ?? f[5] ?? "?",
          self: typeof pc === "object" ? pc.name : pc ?? "(unknown)",
          js,
          stack,
        });
        break;
      }
    }
  }
  return ticks;
}

function table(title: string, counts: Map<string, number>, total: number, top: number): void {
  report(`\n${title}`);
  const rows = [...counts].sort((a, b) => b[1] - a[1]).slice(0, top);
  for (const [name, n] of rows) {
    report(`${(100 * n / total).toFixed(1).padStart(6)} %  ${String(n).padStart(6)}  ${name}`);
  }
}

/**
 * The source file of a code object's name (npm packages by name and version), to compare
 * where two runs differ module by module.
 */
export function sourceOf(name: string): string {
  const m = /(file:\/\/\/\S+|ext:\S+|node:\S+)/.exec(name);
  if (m === null) return name.startsWith("[") ? name : "(other)";
  return (m[1] as string).replace(/:\d+:\d+.*$/, "").replace(/^.*\/registry\.npmjs\.org\//, "npm:");
}

/**
 * A JavaScript function's name and source file, without its position, its tier marker and the
 * checkout's directory (`f file:///a/src/x.ts:1:2*'` is `f src/x.ts`), so that one function
 * matches itself in another checkout or at another tier. Other code objects keep their name.
 */
export function functionOf(name: string): string {
  const m = /^(.*?) ?(?:file:\/\/\/|ext:|node:)\S+$/.exec(name);
  // A function built by `new Function` or `eval` has a position but no file.
  if (m === null) return name.replace(/ ?:\d+:\d+\W*$/, "");
  const file = sourceOf(name).replace(/^file:\/\/\/.*\/(?=(?:src|bench|tests|tools)\/)/, "");
  return `${m[1] === "" ? "(anonymous)" : m[1]} ${file}`;
}

/** The samples from the first one with the function `name` on its stack on. */
export function fromFirst(ticks: readonly Tick[], name: string): Tick[] {
  const first = ticks.findIndex((t) => t.stack.some((f) => f.startsWith(`${name} `)));
  return first === -1 ? [] : ticks.slice(first);
}

/** One function's samples in two sets: `a`, `b`. */
export interface Compared {
  name: string;
  a: number;
  b: number;
}

/**
 * Samples by first JavaScript function (see {@link functionOf}; garbage collection apart),
 * of two sets side by side, the largest difference first.
 */
export function compare(a: readonly Tick[], b: readonly Tick[]): Compared[] {
  const key = (t: Tick) =>
    t.state === "GC" ? "(garbage collection)" : functionOf(t.js ?? `(no JavaScript) ${t.self}`);
  const rows = new Map<string, Compared>();
  const row = (name: string) => {
    let r = rows.get(name);
    if (r === undefined) rows.set(name, r = { name, a: 0, b: 0 });
    return r;
  };
  for (const t of a) row(key(t)).a++;
  for (const t of b) row(key(t)).b++;
  return [...rows.values()].sort((x, y) => Math.abs(y.b - y.a) - Math.abs(x.b - x.a));
}

/**
 * The stages of the hot path (`bench/stages.ts` times them one by one), with the source files
 * whose code belongs to each; the first file of a sample's stack, innermost first, that is in
 * this list names its stage.
 */
const STAGE_FILES: readonly (readonly [string, RegExp])[] = [
  ["row → values (fit)", /\/src\/mysql\/values\.ts$/],
  ["wire packet", /\/src\/mysql\/(execute_packet|mysql2_internals)\.ts$/],
  ["decode (events → rows)", /\/src\/events\//],
  ["take job, ack (Gearman)", /\/src\/gearman\//],
  ["take job, ack (AMQP)", /\/src\/amqp\/|^npm:@cloudamqp\//],
  ["MySQL client (send, receive)", /\/src\/(mysql|util)\/deno_socket\.ts$|^npm:mysql2\//],
  ["writers (buffer, statement, commit)", /\/src\/mysql\//],
  ["handler, delivery", /\/src\/(pipeline|consumer)\//],
  ["metrics, log", /\/src\/(metrics\/|log\.ts$)|^npm:(prom-client|@logtape)\//],
];

/**
 * The stage of the hot path a sample belongs to: garbage collection on the main thread; the
 * UTF-8 decode or `JSON.parse` when native code, a builtin or the runtime's JavaScript runs
 * straight on behalf of `decodePayload` or `decodeJob`; otherwise the stage of the innermost function of a known
 * file ({@link STAGE_FILES}); the runtime (promises, timers, I/O ops of `ext:` and `node:`)
 * when no such function is on the stack; idle when V8 says so.
 */
export function stageOf(t: Tick): string {
  if (t.state === "GC") return "garbage collection (main thread)";
  if (t.state === "IDLE" || t.state === "IDLE_EXTERNAL") return "(idle)";
  const frames = t.js !== undefined && t.js !== t.stack[0] ? [t.js, ...t.stack] : t.stack;
  // The innermost function of our own or a package's code: the runtime's (`TextDecoder`'s
  // `decode`, an op) above it works on its behalf.
  const k = frames.findIndex((f) => !/^(ext|node):/.test(sourceOf(f)));
  const own = frames[k];
  if (own !== undefined && (k > 0 || t.self !== own)) {
    const name = functionOf(own);
    if (name === "decodePayload src/events/decode.ts") return "bytes → text (UTF-8)";
    if (name === "decodeJob src/events/decode.ts") return "text → JSON (`JSON.parse`)";
  }
  for (const frame of frames) {
    const file = sourceOf(frame);
    for (const [stage, pattern] of STAGE_FILES) if (pattern.test(file)) return stage;
  }
  return frames.length === 0 ? "(no JavaScript on the stack)" : "runtime (promises, timers, I/O)";
}

function count(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

if (import.meta.main) {
  const path = Deno.args.find((a, i) => !a.startsWith("--") && !Deno.args[i - 1]?.startsWith("--"));
  if (path === undefined) {
    report(
      "usage: deno run -A bench/v8_ticks.ts V8_LOG[,V8_LOG...] [--last-ms MS] [--from FUNCTION] " +
        "[--against V8_LOG[,V8_LOG...]] [--top N]",
    );
    Deno.exit(2);
  }
  const top = option("--top", 40);
  const lastMs = option("--last-ms", Infinity);
  const fromIndex = Deno.args.indexOf("--from");
  const from = fromIndex === -1 ? undefined : Deno.args[fromIndex + 1];
  const againstIndex = Deno.args.indexOf("--against");
  const against = againstIndex === -1 ? undefined : Deno.args[againstIndex + 1];
  const samplesOf = async (paths: string) => {
    const all: Tick[] = [];
    for (const p of paths.split(",")) {
      let ticks = readTicks(await Deno.readTextFile(p));
      if (from !== undefined) ticks = fromFirst(ticks, from);
      if (Number.isFinite(lastMs) && ticks.length > 0) {
        const end = (ticks[ticks.length - 1] as Tick).time;
        ticks = ticks.filter((t) => t.time >= end - lastMs);
      }
      all.push(...ticks);
    }
    return all;
  };
  const ticks = await samplesOf(path);
  if (against !== undefined) {
    const other = await samplesOf(against);
    const a = ticks.length;
    report(`${a} samples against ${other.length} (${(other.length / a).toFixed(3)}×)`);
    report("\nby first JavaScript function: samples, against, difference in % of the first");
    for (const r of compare(ticks, other).slice(0, top)) {
      const diff = `${r.b >= r.a ? "+" : ""}${(100 * (r.b - r.a) / a).toFixed(2)} %`;
      report(
        `${String(r.a).padStart(7)} ${String(r.b).padStart(7)} ${diff.padStart(9)}  ${r.name}`,
      );
    }
    Deno.exit(0);
  }
  const total = ticks.length;
  const states = new Map<string, number>();
  const self = new Map<string, number>();
  const jsSelf = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const t of ticks) {
    count(states, t.state);
    count(self, t.self);
    if (t.js !== undefined) count(jsSelf, t.js);
    for (const name of new Set(t.stack)) count(inclusive, name);
  }
  report(`${total} samples`);
  table("VM state", states, total, top);
  const stages = new Map<string, number>();
  for (const t of ticks) count(stages, stageOf(t));
  table("by stage of the hot path (bench/stages.ts)", stages, total, top);
  table("self, by code object", self, total, top);
  table("self, by first JavaScript function on the stack", jsSelf, total, top);
  table("inclusive, by JavaScript function", inclusive, total, top);
  const native = new Map<string, number>();
  const files = new Map<string, number>();
  for (const t of ticks) {
    if (t.self.startsWith("[")) {
      count(native, `${t.self} ${t.state} in ${t.js ?? "(no JavaScript)"}`);
    }
    count(files, t.state === "GC" ? "(garbage collection)" : sourceOf(t.js ?? t.self));
  }
  table("native code, by VM state and first JavaScript function", native, total, top);
  table("by source file of the first JavaScript function on the stack", files, total, top);
}
