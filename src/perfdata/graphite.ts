/**
 * Perfdata to Graphite (Carbon plaintext, docs/perfdata.md#graphite-path) on the shared sink core.
 * A failed dial or write drops the whole batch and dials again on the next flush, without retry: a
 * partly written batch sent again would duplicate its first lines.
 *
 * @module
 */
import { positionalDecimal } from "../events/mod.ts";
import { parseServerAddress } from "../util/address.ts";
import { deadline } from "../util/async.ts";
import {
  DEFAULT_ILLEGAL_CHARACTERS,
  illegalCharactersPattern,
} from "../util/illegal_characters.ts";
import { PerfdataClient, type SinkObserver, type Transport } from "./sink.ts";

const encoder = new TextEncoder();
const DIAL_TIMEOUT_MS = 5_000;
const WRITE_TIMEOUT_MS = 5_000;

export interface GraphiteOptions {
  /** `host:port` of Carbon's plaintext listener. */
  readonly addr: string;
  /** Path prefix (sanitised here). */
  readonly prefix: string;
  /** Characters replaced by `_` in every path segment; default the legacy set. */
  readonly illegalCharacters?: RegExp;
  /** Metrics per write, 1..1000. */
  readonly batchSize: number;
  readonly observer?: SinkObserver;
  readonly statsIntervalMs?: number | undefined;
}

/** One lazily dialled TCP connection to Carbon's plaintext listener. */
class CarbonTransport implements Transport<string> {
  readonly backend = "graphite";
  #conn: Deno.TcpConn | undefined;

  constructor(readonly target: string) {}

  async write(batch: readonly string[], signal: AbortSignal): Promise<number> {
    if (this.#conn === undefined) {
      const { hostname, port } = parseServerAddress(this.target);
      using dial = deadline(DIAL_TIMEOUT_MS, signal);
      const conn = await Deno.connect({ hostname, port, signal: dial.signal });
      conn.setNoDelay(true);
      this.#conn = conn;
      this.#watch(conn);
    }
    const bytes = encoder.encode(batch.join(""));
    const conn = this.#conn;
    using limit = deadline(WRITE_TIMEOUT_MS, signal);
    const onTimeout = () => this.reset();
    limit.signal.addEventListener("abort", onTimeout, { once: true });
    try {
      let off = 0;
      while (off < bytes.length) off += await conn.write(bytes.subarray(off));
    } finally {
      limit.signal.removeEventListener("abort", onTimeout);
    }
    return 0;
  }

  /**
   * Carbon never sends anything: a read that ends means it closed the connection (a restart, an
   * idle timeout). The next write then dials again; written into, the closed socket would take
   * the batch and lose it when Carbon's reset comes back, with the points counted as written.
   */
  #watch(conn: Deno.TcpConn): void {
    void (async () => {
      const buffer = new Uint8Array(64);
      try {
        while ((await conn.read(buffer)) !== null) {
          // Whatever comes is ignored.
        }
      } catch {
        // Closed here (reset) or reset by Carbon.
      }
      if (this.#conn === conn) this.reset();
    })();
  }

  reset(): void {
    try {
      this.#conn?.close();
    } catch {
      // Already closed.
    }
    this.#conn = undefined;
  }
}

/** Sends perfdata to Carbon; structurally the pipeline's `PerfdataSink`. */
export class GraphiteClient extends PerfdataClient<string> {
  constructor(options: GraphiteOptions) {
    const illegal = options.illegalCharacters;
    const prefix = sanitizeSegment(options.prefix, illegal);
    super(
      new CarbonTransport(options.addr),
      (r) => {
        const value = r["value"];
        if (typeof value !== "number" || !Number.isFinite(value)) return undefined;
        const path = metricPath(
          prefix,
          String(r["hostname"] ?? ""),
          String(r["service_description"] ?? ""),
          String(r["label"] ?? ""),
          illegal,
        );
        return carbonLine(path, value, Number(r["timestamp_unix"] ?? 0));
      },
      options,
    );
  }
}

const DEFAULT_ILLEGAL = illegalCharactersPattern(DEFAULT_ILLEGAL_CHARACTERS);

/**
 * One path segment (or the prefix) with the `illegal` characters (`--graphite-illegal-characters`,
 * default the legacy set) replaced by `_`.
 *
 * @example
 * ```ts
 * import { sanitizeSegment } from "./graphite.ts";
 * sanitizeSegment("Disk Usage /var"); // "Disk_Usage__var"
 * ```
 */
export function sanitizeSegment(segment: string, illegal: RegExp = DEFAULT_ILLEGAL): string {
  return segment.replace(illegal, "_");
}

/** `<prefix>.<host>.<service>.<label>`, each segment but the (already sanitised) prefix sanitised. */
export function metricPath(
  prefix: string,
  host: string,
  service: string,
  label: string,
  illegal: RegExp = DEFAULT_ILLEGAL,
): string {
  return `${prefix}.${sanitizeSegment(host, illegal)}.${sanitizeSegment(service, illegal)}.${
    sanitizeSegment(label, illegal)
  }`;
}

/** One Carbon line: `path value seconds\n`. */
export function carbonLine(path: string, value: number, seconds: number): string {
  return `${path} ${positionalDecimal(value)} ${Math.floor(seconds)}\n`;
}
