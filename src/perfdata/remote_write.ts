/**
 * Perfdata to Prometheus-compatible stores through remote write 1.0: a snappy-compressed protobuf
 * `WriteRequest` per batch, one series per gauge (docs/perfdata.md#prometheus).
 *
 * @module
 */
import SnappyJS from "snappyjs";
import { plainLabel, type Row } from "../events/mod.ts";
import { PerfdataClient, SinkWriteError, type Transport } from "./sink.ts";
import { HTTP_RETRY, type HttpClientOptions, HttpEndpoint } from "./http.ts";

/**
 * The metric name of every perfdata series, the gauge's label a label value: a label's text does
 * not fit a metric name (docs/perfdata.md#prometheus, "Metric name rule").
 */
const REMOTE_WRITE_METRIC = "statusengine_perfdata_value";

// Encoded by hand into one byte array, each series' labels once: protobufjs' encode of an object
// per series, label and sample cost several times more (docs/perfdata.md#performance). The field
// tags (number × 8 + wire type) of prometheus/prompb types.proto and remote.proto; format_test.ts
// decodes the result with protobufjs from that schema.
const TIMESERIES_TAG = 1 * 8 + 2; // WriteRequest.timeseries: repeated TimeSeries
const LABELS_TAG = 1 * 8 + 2; // TimeSeries.labels: repeated Label
const SAMPLES_TAG = 2 * 8 + 2; // TimeSeries.samples: repeated Sample
const LABEL_NAME_TAG = 1 * 8 + 2; // Label.name: string
const LABEL_VALUE_TAG = 2 * 8 + 2; // Label.value: string
const VALUE_TAG = 1 * 8 + 1; // Sample.value: double (64-bit)
const TIMESTAMP_TAG = 2 * 8 + 0; // Sample.timestamp: int64 (varint)

export interface RemoteSeries {
  /** The encoded label fields of a `TimeSeries`, sorted by name (the protocol requires it). */
  readonly labels: Uint8Array;
  /** The `unit` label's value ('' = none). */
  readonly unit: string;
  /** The newest sample the server took (-Infinity: none) and its value, to sift a refusal. */
  newestMs: number;
  newestValue: number;
}

/** One sample of one series (one object per series, so it also serves as its identity). */
export interface RemotePoint {
  readonly series: RemoteSeries;
  readonly value: number;
  readonly timestampMs: number;
}

/** A perfdata row's point, undefined without a finite value; `quotedLabels`: strip the quotes. */
export function remotePoint(row: Row, quotedLabels = false): RemotePoint | undefined {
  const value = row["value"];
  if (typeof value !== "number" || !Number.isFinite(value)) return undefined;
  return {
    series: seriesOf(row, quotedLabels),
    value,
    timestampMs: Math.floor(Number(row["timestamp_unix"] ?? 0)) * 1000,
  };
}

// The same services report every few minutes: their labels are built once, not per sample, and
// looked up by host, service and label in turn (one key string per sample was a sample's largest
// cost in a profile). Emptied at SERIES_CACHE_MAX series, which bounds its memory.
const seriesCache = new Map<string, Map<string, Map<string, RemoteSeries>>>();
const SERIES_CACHE_MAX = 100_000;
let cachedSeries = 0;

function seriesOf(row: Row, quotedLabels: boolean): RemoteSeries {
  const host = text(row["hostname"]);
  const service = text(row["service_description"]);
  const label = quotedLabels ? plainLabel(text(row["label"])) : text(row["label"]);
  const unit = text(row["unit"]);
  if (cachedSeries >= SERIES_CACHE_MAX && !seriesCache.has(host)) {
    seriesCache.clear();
    cachedSeries = 0;
  }
  const labels = seriesCache.getOrInsertComputed(host, () => new Map())
    .getOrInsertComputed(service, () => new Map());
  let series = labels.get(label);
  // A gauge whose unit changed is another series; the cache keeps the latest.
  if (series === undefined || series.unit !== unit) {
    if (series === undefined) cachedSeries++;
    series = {
      labels: seriesLabels(host, service, label, unit),
      unit,
      newestMs: -Infinity,
      newestValue: NaN,
    };
    labels.set(label, series);
  }
  return series;
}

function text(v: unknown): string {
  return v === null || v === undefined ? "" : String(v);
}

function seriesLabels(host: string, service: string, label: string, unit: string): Uint8Array {
  // Sorted by name; an empty value is the same as no label in Prometheus, so it is left out.
  const labels: [string, string][] = [["__name__", REMOTE_WRITE_METRIC]];
  if (host !== "") labels.push(["hostname", host]);
  if (label !== "") labels.push(["label", label]);
  if (service !== "") labels.push(["service_description", service]);
  if (unit !== "") labels.push(["unit", unit]);
  // Each label: its tag, the Label message's length, then name and value (tag, length, UTF-8).
  const lengths = labels.map(([name, value]) =>
    fieldLength(LABEL_NAME_TAG, utf8Length(name)) + fieldLength(LABEL_VALUE_TAG, utf8Length(value))
  );
  const bytes = labelBytes(lengths.reduce((size, n) => size + fieldLength(LABELS_TAG, n), 0));
  let at = 0;
  labels.forEach(([name, value], i) => {
    at = writeVarint(bytes, at, LABELS_TAG);
    at = writeVarint(bytes, at, lengths[i] as number);
    at = writeString(bytes, at, LABEL_NAME_TAG, name);
    at = writeString(bytes, at, LABEL_VALUE_TAG, value);
  });
  return bytes;
}

// The labels of new series are cut from shared slabs: an array buffer of its own per series
// (about 150 bytes) cost more than encoding its labels, in allocation and in garbage collection.
const SLAB_BYTES = 64 * 1024;
let slab = new Uint8Array(SLAB_BYTES);
let slabUsed = 0;

function labelBytes(size: number): Uint8Array {
  if (size > SLAB_BYTES / 8) return new Uint8Array(size);
  if (slabUsed + size > SLAB_BYTES) {
    slab = new Uint8Array(SLAB_BYTES);
    slabUsed = 0;
  }
  slabUsed += size;
  return slab.subarray(slabUsed - size, slabUsed);
}

const UTF8 = new TextEncoder();

/** Writes a string field: its tag, its length in UTF-8, then the text; returns the next offset. */
function writeString(bytes: Uint8Array, at: number, tag: number, text: string): number {
  const length = utf8Length(text);
  at = writeVarint(bytes, at, tag);
  at = writeVarint(bytes, at, length);
  // Names are mostly ASCII, copied here: TextEncoder is a call into the runtime per string.
  if (length === text.length) {
    for (let i = 0; i < length; i++) bytes[at + i] = text.charCodeAt(i);
  } else UTF8.encodeInto(text, bytes.subarray(at, at + length));
  return at + length;
}

/** Finds text that is not all ASCII, whose UTF-8 length must be counted. */
const NON_ASCII = /[\u0080-\uffff]/;

/** Bytes of `text` in UTF-8 as TextEncoder writes it: a lone surrogate becomes U+FFFD (3 bytes). */
function utf8Length(text: string): number {
  // Names are mostly ASCII, counted here: TextEncoder is a call into the runtime per string.
  return NON_ASCII.test(text) ? UTF8.encode(text).length : text.length;
}

/**
 * A batch as one `WriteRequest`: samples grouped by series in time order. Of several samples
 * of one series at the same millisecond (a check that repeats a label), the last is kept:
 * Prometheus refuses a whole request that holds two different values for one timestamp.
 * Returns the uncompressed request and how many points were left out.
 */
export function encodeWriteRequest(
  batch: readonly RemotePoint[],
): { bytes: Uint8Array; duplicates: number } {
  // First every size, then one array written front to back.
  let duplicates = batch.length;
  let size = 0;
  const groups: { labels: Uint8Array; points: RemotePoint[]; length: number }[] = [];
  for (const points of inSeriesOrder(batch)) {
    duplicates -= points.length;
    const labels = (points[0] as RemotePoint).series.labels;
    let length = labels.length;
    for (const p of points) {
      length += fieldLength(SAMPLES_TAG, sampleLength(p.timestampMs));
    }
    groups.push({ labels, points, length });
    size += fieldLength(TIMESERIES_TAG, length);
  }
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  let at = 0;
  for (const g of groups) {
    at = writeVarint(bytes, at, TIMESERIES_TAG);
    at = writeVarint(bytes, at, g.length);
    bytes.set(g.labels, at);
    at += g.labels.length;
    for (const p of g.points) {
      at = writeVarint(bytes, at, SAMPLES_TAG);
      at = writeVarint(bytes, at, sampleLength(p.timestampMs));
      at = writeVarint(bytes, at, VALUE_TAG);
      view.setFloat64(at, p.value, true);
      at = writeVarint(bytes, at + 8, TIMESTAMP_TAG);
      at = writeInt64(bytes, at, p.timestampMs);
    }
  }
  return { bytes, duplicates };
}

/**
 * The points grouped by series in order of first appearance, each series' points in time order,
 * of several at one timestamp only the last.
 */
function inSeriesOrder(batch: readonly RemotePoint[]): RemotePoint[][] {
  return Array.from(Map.groupBy(batch, (p) => p.series).values(), (points) => {
    if (points.length === 1) return points;
    // A stable sort keeps the arrival order within one timestamp.
    const sorted = points.sort((a, b) => a.timestampMs - b.timestampMs);
    return sorted.filter((p, i) => sorted[i + 1]?.timestampMs !== p.timestampMs);
  });
}

/** Bytes of an encoded `Sample`: a double and an int64. */
function sampleLength(timestampMs: number): number {
  return varintLength(VALUE_TAG) + 8 + varintLength(TIMESTAMP_TAG) + int64Length(timestampMs);
}

/** Bytes of a length-delimited field: its tag, the length, then `length` bytes. */
function fieldLength(tag: number, length: number): number {
  return varintLength(tag) + varintLength(length) + length;
}

function varintLength(n: number): number {
  let length = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    length++;
  }
  return length;
}

/** Writes a non-negative integer (up to 2^53) as a varint; returns the next offset. */
function writeVarint(bytes: Uint8Array, at: number, n: number): number {
  while (n >= 128) {
    bytes[at++] = (n % 128) | 128;
    n = Math.floor(n / 128);
  }
  bytes[at++] = n;
  return at;
}

// A negative int64 is a varint of its 64-bit two's complement: always 10 bytes.
function int64Length(n: number): number {
  return n < 0 ? 10 : varintLength(n);
}

function writeInt64(bytes: Uint8Array, at: number, n: number): number {
  if (n >= 0) return writeVarint(bytes, at, n);
  let u = BigInt.asUintN(64, BigInt(n));
  for (let i = 0; i < 9; i++) {
    bytes[at++] = Number(u % 128n) | 128;
    u /= 128n;
  }
  bytes[at++] = Number(u);
  return at;
}

/** The `--prometheus-remote-write-*` settings. */
export interface RemoteWriteSettings {
  /** The receiver, e.g. `http://prometheus:9090/api/v1/write`. */
  readonly url: string;
  readonly bearerToken?: string;
  readonly user?: string;
  readonly password?: string;
  /** Samples per request; default {@link REMOTE_WRITE_BATCH_SIZE} (tests make it smaller). */
  readonly batchSize?: number;
}

/** Samples per write: Prometheus' own `max_samples_per_send` for remote write. */
export const REMOTE_WRITE_BATCH_SIZE = 2000;

// Prometheus' 400 for samples it will never take (docs/perfdata.md#refused-samples), and how Mimir
// and Thanos spell it. Sending them again cannot help.
const SAMPLE_REFUSED =
  /out[ -]of[ -]order|out[ -]of[ -]bounds|duplicate sample|too old|too far in the past/i;

class RemoteWriteTransport extends HttpEndpoint implements Transport<RemotePoint> {
  readonly backend = "prometheus";

  constructor(o: RemoteWriteSettings) {
    super(
      o.url,
      o.url,
      {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
        "User-Agent": "statusengine-worker",
      },
      "Bearer",
      { token: o.bearerToken, user: o.user, password: o.password },
    );
  }

  async write(batch: readonly RemotePoint[], signal: AbortSignal): Promise<number> {
    try {
      return await this.#post(batch, signal);
    } catch (err: unknown) {
      if (!isSampleRefusal(err)) throw err;
      // Prometheus appends nothing of a request with one sample it cannot take: the refused
      // ones are isolated (docs/perfdata.md#refused-samples).
      const acceptable = batch.filter((p) =>
        p.timestampMs > p.series.newestMs ||
        (p.timestampMs === p.series.newestMs && p.value === p.series.newestValue)
      );
      // Enough to isolate 8 scattered samples; unbounded, stale samples cost 2 requests each.
      const budget = { splits: 8 * Math.ceil(Math.log2(Math.max(2, batch.length))) };
      const sendWhole = acceptable.length < batch.length;
      // In series order as the encoder keeps them: a halving may cut a series between two
      // samples at one time, and the first would be appended and the last refused.
      const ordered = inSeriesOrder(acceptable).flat();
      return batch.length - ordered.length +
        await this.#isolate(ordered, signal, budget, sendWhole);
    }
  }

  /**
   * Send `points`, halving every refused part until its refused samples are alone or the
   * budget of splits is spent; then the refused part is dropped whole.
   *
   * @returns The points left out: refused, and duplicates of one series and time.
   */
  async #isolate(
    points: readonly RemotePoint[],
    signal: AbortSignal,
    budget: { splits: number },
    sendWhole = false,
  ): Promise<number> {
    if (points.length === 0) return 0;
    if (sendWhole) {
      try {
        return await this.#post(points, signal);
      } catch (err: unknown) {
        if (!isSampleRefusal(err)) throw err;
      }
    }
    if (points.length === 1 || budget.splits === 0) return points.length;
    budget.splits--;
    const half = Math.ceil(points.length / 2);
    return await this.#isolate(points.slice(0, half), signal, budget, true) +
      await this.#isolate(points.slice(half), signal, budget, true);
  }

  /** One request; resolves with the duplicates left out of it. */
  async #post(points: readonly RemotePoint[], signal: AbortSignal): Promise<number> {
    const { bytes, duplicates } = encodeWriteRequest(points);
    const body = new Uint8Array(SnappyJS.compress(bytes) as Uint8Array);
    await this.post(
      body,
      signal,
      (status, text) => status === 400 && SAMPLE_REFUSED.test(text) ? "out_of_order" : "rejected",
    );
    // In arrival order, so of several samples at one time the last, the one sent, is kept.
    for (const p of points) {
      if (p.timestampMs >= p.series.newestMs) {
        p.series.newestMs = p.timestampMs;
        p.series.newestValue = p.value;
      }
    }
    return duplicates;
  }
}

function isSampleRefusal(err: unknown): boolean {
  return err instanceof SinkWriteError && err.reason === "out_of_order";
}

/** Sends perfdata through remote write; structurally the pipeline's `PerfdataSink`. */
export class RemoteWriteClient extends PerfdataClient<RemotePoint> {
  constructor(options: RemoteWriteSettings & HttpClientOptions) {
    const quoted = options.quotedLabels === true;
    super(new RemoteWriteTransport(options), (row) => remotePoint(row, quoted), {
      ...options,
      batchSize: options.batchSize ?? REMOTE_WRITE_BATCH_SIZE,
      retry: HTTP_RETRY,
    });
  }
}
