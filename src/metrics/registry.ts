/**
 * The catalogue's metrics on a fresh prom-client `Registry` (never the global one, so every test
 * can have its own), and the documented zero series. The `process_*` series are read at scrape
 * time, not by `collectDefaultMetrics`: that adds `nodejs_*` series and reads everything from
 * /proc, which Deno allows only under `--allow-all`. What only /proc knows is absent (not 0) when
 * it cannot be read.
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import {
  type LabelSet,
  type MetricKey,
  METRICS,
  type MetricSpec,
  type ProcessField,
} from "./catalogue.ts";
import process from "node:process";

type Spec<K extends MetricKey> = (typeof METRICS)[K];
type LabelsOf<K extends MetricKey> = Spec<K> extends { labels: readonly (infer L)[] } ? L & string
  : never;
type HandleOf<K extends MetricKey> = Spec<K>["type"] extends "counter" ? Counter<LabelsOf<K>>
  : Spec<K>["type"] extends "gauge" ? Gauge<LabelsOf<K>>
  : Histogram<LabelsOf<K>>;

/** Typed handles of every catalogue metric, plus the registry they live in. */
export type Metrics = { readonly [K in MetricKey]: HandleOf<K> } & { readonly registry: Registry };

/** The concrete label values of each pre-creation set (catalogue.ts's PRECREATED tells which). */
export interface LabelValues {
  readonly queues: readonly string[];
  readonly statusQueues: readonly string[];
  /** Queues whose jobs carry an event time (the status and check queues). */
  readonly eventLagQueues?: readonly string[];
  readonly jobResults: readonly string[];
  readonly deadLetterReasons: readonly string[];
  /** Why jobs go back to the broker (`statusengine_queue_jobs_given_back_total`); default none. */
  readonly giveBackReasons?: readonly string[];
  /** All 19 written tables (batched, downtime and the downtime tombstones). */
  readonly tables: readonly string[];
  readonly batchedTables: readonly string[];
  readonly adjustReasons: readonly string[];
  readonly components: readonly string[];
  readonly commands?: readonly string[];
  readonly commandRejectReasons?: readonly string[];
  readonly listeners?: readonly string[];
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  const handles: Record<string, unknown> = { registry };
  const reader = new ProcessReader();
  for (const [key, raw] of Object.entries(METRICS)) {
    const spec: MetricSpec = raw;
    const common = {
      name: spec.name,
      help: spec.help,
      labelNames: [...(spec.labels ?? [])],
      registers: [registry],
    };
    const collect = spec.process === undefined
      ? {}
      : { collect: readProcess(reader, spec.process) };
    if (spec.type === "counter") handles[key] = new Counter({ ...common, ...collect });
    else if (spec.type === "gauge") {
      const gauge = new Gauge({ ...common, ...collect });
      if (spec.initial !== undefined) gauge.set(spec.initial);
      handles[key] = gauge;
    } else {
      handles[key] = new Histogram({
        ...common,
        ...(spec.buckets === undefined ? {} : { buckets: [...spec.buckets] }),
      });
    }
  }
  return handles as Metrics;
}

/**
 * The collect callback of a `process_*` metric: the reading at scrape time, or no sample at all
 * while the process cannot tell (a 0 would read as "no memory" or "no descriptors").
 */
function readProcess(
  reader: ProcessReader,
  field: ProcessField,
): (this: Counter | Gauge) => Promise<void> {
  return async function (this: Counter | Gauge) {
    const value = (await reader.sample())[field];
    if (value === undefined) this.remove();
    else if (this instanceof Gauge) this.set(value);
    else {
      // A counter only goes up; it is set to the process's own running total.
      this.reset();
      this.inc(value);
    }
  };
}

function labelCombos(v: LabelValues): Record<LabelSet, Record<string, string>[]> {
  const each = (label: string, values: readonly string[] = []) =>
    values.map((x) => ({ [label]: x }));
  const cross = (rows: Record<string, string>[], label: string, values: readonly string[] = []) =>
    rows.flatMap((row) => values.map((x) => ({ ...row, [label]: x })));
  const queues = each("queue_name", v.queues);
  const batched = each("table", v.batchedTables);
  return {
    queues,
    "status_queues": each("queue_name", v.statusQueues),
    "event_lag_queues": each("queue_name", v.eventLagQueues),
    "queues_x_results": cross(queues, "result", v.jobResults),
    "queues_x_dead_letter_reasons": cross(queues, "reason", v.deadLetterReasons),
    "queues_x_give_back_reasons": cross(queues, "reason", v.giveBackReasons),
    tables: each("table", v.tables),
    "batched_tables": batched,
    "batched_tables_x_adjust_reasons": cross(batched, "reason", v.adjustReasons),
    components: each("component", v.components),
    commands: each("command", v.commands),
    "command_reject_reasons": each("reason", v.commandRejectReasons),
    listeners: each("listener", v.listeners),
    // Created with the backend's client (src/daemon/outputs.ts), which knows the drop reasons.
    "perfdata_backends": [],
    none: [],
  };
}

/**
 * Create the documented zero series (docs/operations.md#zero-series). Idempotent: it adds 0 and
 * never resets (a counter that goes backwards corrupts every `rate()`).
 */
export function precreateSeries(metrics: Metrics, values: LabelValues): void {
  const combos = labelCombos(values);
  for (const [key, raw] of Object.entries(METRICS)) {
    const spec: MetricSpec = raw;
    const handle = (metrics as unknown as Record<string, Counter | Gauge | Histogram>)[key];
    for (const labels of combos[spec.precreate ?? "none"]) {
      if (handle instanceof Histogram) handle.zero(labels);
      else handle?.inc(labels, 0);
    }
  }
}

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
      fromProc(() => Deno.readTextFile("/proc/self/stat")),
      fromProc(() => Deno.readTextFile("/proc/self/limits")),
      // The listing itself holds one descriptor open.
      fromProc(async () => {
        let n = 0;
        for await (const _ of Deno.readDir("/proc/self/fd")) n++;
        return Math.max(0, n - 1);
      }),
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

/** A /proc reading, or undefined where it cannot be read (not Linux, or not `--allow-all`). */
function fromProc<T>(read: () => Promise<T>): Promise<T | undefined> {
  if (Deno.build.os !== "linux") return Promise.resolve(undefined);
  return Promise.try(read).catch(() => undefined);
}
