/**
 * Perfdata to Prometheus-compatible stores through remote write 1.0 (docs/perfdata.md#prometheus):
 * a snappy-compressed protobuf `WriteRequest` per batch, POSTed with
 * `X-Prometheus-Remote-Write-Version: 0.1.0`. One series per gauge, named
 * {@link REMOTE_WRITE_METRIC}, with the labels `hostname`, `service_description`, `label` and
 * `unit` (when not empty); each sample carries the check's time.
 *
 * @module
 */
import protobuf from "protobufjs";
import SnappyJS from "snappyjs";
import type { Row } from "../events/mod.ts";
import { redactUrl } from "../util/redact.ts";
import type { Transport } from "./sink.ts";
import { type HttpClientOptions, HttpPerfdataClient, post, requestHeaders } from "./http.ts";

/**
 * The metric name of every perfdata series. One name, with the gauge's label as a label value,
 * rather than one metric per perfdata label: labels such as `/var used` or `'C:\ used %'` keep
 * their exact text (metric names allow only `[a-zA-Z0-9_:]`, so names derived from labels
 * would collide), and a dashboard selects a gauge with `{label="rta"}`.
 */
const REMOTE_WRITE_METRIC = "statusengine_perfdata_value";

// The remote write 1.0 messages (prometheus/prompb types.proto and remote.proto), reduced to the
// fields written here.
const ROOT = protobuf.Root.fromJSON({
  nested: {
    prometheus: {
      nested: {
        WriteRequest: {
          fields: { timeseries: { rule: "repeated", type: "TimeSeries", id: 1 } },
        },
        TimeSeries: {
          fields: {
            labels: { rule: "repeated", type: "Label", id: 1 },
            samples: { rule: "repeated", type: "Sample", id: 2 },
          },
        },
        Label: { fields: { name: { type: "string", id: 1 }, value: { type: "string", id: 2 } } },
        Sample: {
          fields: { value: { type: "double", id: 1 }, timestamp: { type: "int64", id: 2 } },
        },
      },
    },
  },
});
const WRITE_REQUEST = ROOT.lookupType("prometheus.WriteRequest");

/** One series: its labels, built once. */
export interface RemoteSeries {
  /** The series' labels, sorted by name (the protocol requires it). */
  readonly labels: readonly { readonly name: string; readonly value: string }[];
  /** The `unit` label's value ('' = none). */
  readonly unit: string;
}

/** One sample of one series. */
export interface RemotePoint {
  /** The series (one object per series, so it also serves as its identity). */
  readonly series: RemoteSeries;
  readonly value: number;
  /** Milliseconds. */
  readonly timestampMs: number;
}

/**
 * The remote-write point of a `statusengine_perfdata` row, or undefined without a finite value.
 *
 * @param row The row.
 * @returns Its series, value and time in ms.
 */
export function remotePoint(row: Row): RemotePoint | undefined {
  const value = row["value"];
  if (typeof value !== "number" || !Number.isFinite(value)) return undefined;
  return {
    series: seriesOf(row),
    value,
    timestampMs: Math.floor(Number(row["timestamp_unix"] ?? 0)) * 1000,
  };
}

// The same services report every few minutes: their labels are built once, not per sample, and
// looked up by host, service and label in turn (building one key string per sample was the
// largest single cost of a sample in a profile). The cache is emptied when it holds
// SERIES_CACHE_MAX series, which bounds its memory whatever the number of series.
const seriesCache = new Map<string, Map<string, Map<string, RemoteSeries>>>();
const SERIES_CACHE_MAX = 100_000;
let cachedSeries = 0;

function seriesOf(row: Row): RemoteSeries {
  const host = text(row["hostname"]);
  const service = text(row["service_description"]);
  const label = text(row["label"]);
  const unit = text(row["unit"]);
  let services = seriesCache.get(host);
  if (services === undefined) {
    if (cachedSeries >= SERIES_CACHE_MAX) {
      seriesCache.clear();
      cachedSeries = 0;
    }
    services = new Map();
    seriesCache.set(host, services);
  }
  let labels = services.get(service);
  if (labels === undefined) {
    labels = new Map();
    services.set(service, labels);
  }
  let series = labels.get(label);
  // A gauge whose unit changed is another series; the cache keeps the latest.
  if (series === undefined || series.unit !== unit) {
    if (series === undefined) cachedSeries++;
    series = { labels: seriesLabels(host, service, label, unit), unit };
    labels.set(label, series);
  }
  return series;
}

function text(v: unknown): string {
  return v === null || v === undefined ? "" : String(v);
}

function seriesLabels(host: string, service: string, label: string, unit: string) {
  const labels: { name: string; value: string }[] = [{
    name: "__name__",
    value: REMOTE_WRITE_METRIC,
  }];
  // Sorted by name; an empty value is the same as no label in Prometheus, so it is left out.
  for (
    const [name, value] of [
      ["hostname", host],
      ["label", label],
      ["service_description", service],
      ["unit", unit],
    ] as const
  ) {
    if (value !== "") labels.push({ name, value });
  }
  return labels;
}

/**
 * A batch as one `WriteRequest`: samples grouped by series in time order. Of several samples
 * of one series at the same millisecond (a check that repeats a label), the last is kept:
 * Prometheus refuses a whole request that holds two different values for one timestamp.
 *
 * @param batch Points.
 * @returns The encoded request (not compressed) and how many points were left out.
 */
export function encodeWriteRequest(
  batch: readonly RemotePoint[],
): { bytes: Uint8Array; duplicates: number } {
  const series = new Map<
    RemoteSeries,
    { labels: RemoteSeries["labels"]; samples: Map<number, number> }
  >();
  let duplicates = 0;
  for (const p of batch) {
    let s = series.get(p.series);
    if (s === undefined) {
      s = { labels: p.series.labels, samples: new Map() };
      series.set(p.series, s);
    }
    if (s.samples.has(p.timestampMs)) duplicates++;
    s.samples.set(p.timestampMs, p.value);
  }
  const timeseries = [...series.values()].map((s) => ({
    labels: s.labels,
    samples: [...s.samples].sort((a, b) => a[0] - b[0]).map(([timestamp, value]) => ({
      value,
      timestamp,
    })),
  }));
  // encode takes plain objects of the message's shape; fromObject would copy every sample again.
  const bytes = WRITE_REQUEST.encode({ timeseries }).finish();
  return { bytes, duplicates };
}

/** Where and how to send remote writes: the `--prometheus-remote-write-*` settings. */
export interface RemoteWriteSettings {
  /** The receiver, e.g. `http://prometheus:9090/api/v1/write`. */
  readonly url: string;
  readonly bearerToken?: string;
  readonly user?: string;
  readonly password?: string;
  /** Points per request. */
  readonly batchSize: number;
}

/** Options of {@link RemoteWriteClient}. */
export interface RemoteWriteOptions extends RemoteWriteSettings, HttpClientOptions {}

// Prometheus answers 400 for samples it will never take: older than the newest sample of the
// series (out of order), outside the head block (out of bounds), or a second value for one
// timestamp (duplicate); Mimir and Thanos spell it "out-of-order", "too old", "too far in the
// past". Sending them again cannot help.
const SAMPLE_REFUSED =
  /out[ -]of[ -]order|out[ -]of[ -]bounds|duplicate sample|too old|too far in the past/i;

class RemoteWriteTransport implements Transport<RemotePoint> {
  readonly backend = "prometheus";
  readonly target: string;
  readonly #url: string;
  readonly #headers: Record<string, string>;

  constructor(o: RemoteWriteOptions) {
    this.#url = o.url;
    this.target = redactUrl(o.url);
    this.#headers = requestHeaders({
      "Content-Type": "application/x-protobuf",
      "Content-Encoding": "snappy",
      "X-Prometheus-Remote-Write-Version": "0.1.0",
      "User-Agent": "statusengine-worker",
    }, {
      ...(o.bearerToken === undefined ? {} : { token: { scheme: "Bearer", value: o.bearerToken } }),
      basic: { user: o.user ?? "", password: o.password ?? "" },
    });
  }

  async write(batch: readonly RemotePoint[], signal: AbortSignal): Promise<number> {
    const { bytes, duplicates } = encodeWriteRequest(batch);
    const body = new Uint8Array(SnappyJS.compress(bytes) as Uint8Array);
    await post(
      this.#url,
      body,
      this.#headers,
      signal,
      (status, text) => status === 400 && SAMPLE_REFUSED.test(text) ? "out_of_order" : "rejected",
    );
    return duplicates;
  }
}

/** Sends perfdata through remote write; structurally the pipeline's `PerfdataSink`. */
export class RemoteWriteClient extends HttpPerfdataClient<RemotePoint> {
  /** @param options URL, credentials, batch size and observer. */
  constructor(options: RemoteWriteOptions) {
    super(new RemoteWriteTransport(options), remotePoint, options);
  }
}
