/**
 * Perfdata to InfluxDB in line protocol over HTTP, the 1.x `/write?db=…` or the 2.x
 * `/api/v2/write?org=…&bucket=…` API; the point format is in docs/perfdata.md#influxdb.
 *
 * @module
 */
import { perfdataThresholds, plainLabel, positionalDecimal, type Row } from "../events/mod.ts";
import { PerfdataClient, type Refusal, type Transport } from "./sink.ts";
import { errorMessage } from "../log.ts";
import { HTTP_RETRY, type HttpClientOptions, HttpEndpoint } from "./http.ts";

/** The `--influxdb-*` settings. */
export interface InfluxDbSettings {
  /** `…/write?db=…` or `…/api/v2/write?org=…&bucket=…`; may hold a secret: print `redactUrl`ed. */
  readonly url: string;
  readonly user?: string;
  readonly password?: string;
  /** InfluxDB 2.x API token (`Authorization: Token …`). */
  readonly token?: string;
  /** Points per request; default {@link INFLUXDB_BATCH_SIZE} (tests make it smaller). */
  readonly batchSize?: number;
}

/** Measurement of every point: the database or bucket in the URL keeps the points apart. */
export const INFLUXDB_MEASUREMENT = "perfdata";

/** Points per write: InfluxDB's own advice (each write costs 1.x a WAL sync). */
export const INFLUXDB_BATCH_SIZE = 5000;

// A line break ends a point: CR and LF in a name become a space (readable, the batch intact).
const LINE_BREAK = /[\r\n]/g;
const MEASUREMENT_SPECIAL = /[, ]/g;
const TAG_SPECIAL = /[,= ]/g;
// InfluxDB 1.x cannot take a backslash before a comma, `=` or space, or at the end of a name: it
// becomes `/` (docs/perfdata.md#influxdb).
const STUCK_BACKSLASH = /\\(?=[,= ]|$)/g;
const NEEDS_ESCAPE = /[,= \\\r\n]/;

/**
 * A measurement name escaped for line protocol: commas and spaces get a backslash, line breaks
 * become spaces, a backslash before one of them or at the end becomes `/`.
 */
export function escapeMeasurement(name: string, special = MEASUREMENT_SPECIAL): string {
  return name.replace(LINE_BREAK, " ").replace(STUCK_BACKSLASH, "/").replace(special, "\\$&");
}

/** A tag key, tag value or field key escaped for line protocol: as a measurement, and `=` too. */
export function escapeTag(text: string): string {
  // Most names need nothing: one scan instead of three replacements.
  return NEEDS_ESCAPE.test(text) ? escapeMeasurement(text, TAG_SPECIAL) : text;
}

/**
 * `measurement,hostname=…,label=…,service_description=…[,unit=…] value=…[,warn=…] <seconds>` of
 * a `statusengine_perfdata` row, or undefined when it has no finite value. `measurement` is
 * already escaped; with `quotedLabels` the plugin's quotes are stripped from the label.
 */
export function influxLine(
  measurement: string,
  row: Row,
  quotedLabels = false,
): string | undefined {
  const value = row["value"];
  if (typeof value !== "number" || !Number.isFinite(value)) return undefined;
  // Tags in key order (what InfluxDB sorts them into anyway); an empty tag value is not allowed.
  let line = measurement;
  for (
    const [key, v] of [
      ["hostname", row["hostname"]],
      ["label", quotedLabels ? plainLabel(String(row["label"] ?? "")) : row["label"]],
      ["service_description", row["service_description"]],
      ["unit", row["unit"]],
    ] as const
  ) {
    const text = v === null || v === undefined ? "" : String(v);
    if (text !== "") line += `,${key}=${escapeTag(text)}`;
  }
  line += ` value=${positionalDecimal(value)}`;
  const t = perfdataThresholds(row);
  for (const key of ["warn", "crit", "min", "max"] as const) {
    const v = t?.[key];
    if (v !== null && v !== undefined) line += `,${key}=${positionalDecimal(v)}`;
  }
  return `${line} ${Math.floor(Number(row["timestamp_unix"] ?? 0))}`;
}

/** `--influxdb-url` with `precision=s` (points carry whole seconds). */
export function influxWriteUrl(url: string): string {
  const u = new URL(url);
  u.searchParams.set("precision", "s");
  return u.toString();
}

class InfluxTransport extends HttpEndpoint implements Transport<string> {
  readonly backend = "influxdb";

  constructor(o: InfluxDbSettings) {
    super(
      o.url,
      influxWriteUrl(o.url),
      { "Content-Type": "text/plain; charset=utf-8" },
      "Token",
      o,
    );
  }

  async write(batch: readonly string[], signal: AbortSignal): Promise<number | Refusal> {
    let refused: Refusal | undefined;
    try {
      await this.post(batch.join("\n"), signal, (status, text) => {
        refused = status === 400 ? partialWriteDropped(text) : undefined;
        return refused?.reason === "out_of_order" ? "out_of_order" : "rejected";
      });
    } catch (err: unknown) {
      if (refused === undefined) throw err;
      return {
        ...refused,
        points: Math.min(refused.points, batch.length),
        error: errorMessage(err),
      };
    }
    return 0;
  }
}

/**
 * The points InfluxDB 1.x dropped of a write it answered `partial write: <reason> dropped=<n>`
 * (400), having stored the rest: points beyond the retention policy or a field type conflict
 * (`out_of_order`), or lines it could not parse (`rejected`), which it does not count in
 * `dropped=` but names one per line. Undefined for any other answer.
 */
export function partialWriteDropped(text: string): Refusal | undefined {
  let error = text;
  try {
    const answer: unknown = JSON.parse(text);
    if (typeof answer === "object" && answer !== null && "error" in answer) {
      error = String(answer.error);
    }
  } catch {
    // Not JSON: the text as it is.
  }
  const m = /partial write: ([^]*) dropped=(\d+)/.exec(error);
  if (m === null) return undefined;
  const dropped = Number(m[2]);
  if (dropped > 0) return { points: dropped, reason: "out_of_order" };
  // One `unable to parse '<line>': <why>` per refused line, each on a line of its own (a line
  // break in a name is written as a space, so a quoted line holds none).
  const unparsed = (m[1] ?? "").match(/(?:^|\n)unable to parse '/g)?.length ?? 0;
  return unparsed > 0 ? { points: unparsed, reason: "rejected" } : undefined;
}

/** Sends perfdata to InfluxDB; structurally the pipeline's `PerfdataSink`. */
export class InfluxDbClient extends PerfdataClient<string> {
  constructor(options: InfluxDbSettings & HttpClientOptions) {
    const measurement = escapeMeasurement(INFLUXDB_MEASUREMENT);
    const quoted = options.quotedLabels === true;
    super(new InfluxTransport(options), (row) => influxLine(measurement, row, quoted), {
      ...options,
      batchSize: options.batchSize ?? INFLUXDB_BATCH_SIZE,
      retry: HTTP_RETRY,
    });
  }
}
