/**
 * The Graphite (Carbon plaintext) sink for perfdata (F6). MySQL is the system
 * of record and must never wait for Graphite: `offer` never blocks, a full
 * buffer drops and counts (Q10), and a failed dial or write drops
 * the whole batch, closes the connection and dials again on the next flush.
 *
 * @module
 */
import type { Counter, Gauge } from "prom-client";
import type { Row } from "../events/mod.ts";
import { parseServerAddress } from "../util/address.ts";
import { carbonLine, metricPath, sanitizeSegment } from "./format.ts";
import { deadline, settledWithin } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("graphite");
const encoder = new TextEncoder();
const DIAL_TIMEOUT_MS = 5_000;
const WRITE_TIMEOUT_MS = 5_000;
const FLUSH_INTERVAL_MS = 250;
/** Lines buffered at most, in batches: beyond it new metrics are dropped, not queued. */
const BUFFER_BATCHES = 10;

/** Metric handles the client reports to. */
export interface GraphiteMetrics {
  readonly written: Counter;
  readonly flushes: Counter;
  readonly dropped: Counter;
  readonly available: Gauge;
  readonly errors: Counter<"component">;
}

/** Options of {@link GraphiteClient}. */
export interface GraphiteOptions {
  /** `host:port` of Carbon's plaintext listener. */
  readonly addr: string;
  /** Path prefix (sanitised here). */
  readonly prefix: string;
  /** Characters replaced by `_` in every path segment; default the legacy set. */
  readonly illegalCharacters?: RegExp;
  /** Metrics per write, 1..1000. */
  readonly batchSize: number;
  readonly metrics?: GraphiteMetrics;
  /** Interval of the write summary; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number;
}

/**
 * Sends perfdata metrics to Carbon, in batches on one lazily dialled connection. Structurally the
 * pipeline's `PerfdataSink` (`offer`); not declared with `implements`, because a sink must not
 * import the pipeline that feeds it.
 */
export class GraphiteClient {
  readonly #o: GraphiteOptions;
  readonly #prefix: string;
  readonly #illegal: RegExp | undefined;
  #lines: string[] = [];
  #conn: Deno.TcpConn | undefined;
  #flushing: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #statsTimer: ReturnType<typeof setInterval> | undefined;
  #closed = false;
  readonly #interval = { flushes: 0, metrics: 0 };
  #total = 0;

  /** @param options Address, prefix, batch size and metrics. */
  constructor(options: GraphiteOptions) {
    this.#o = options;
    this.#illegal = options.illegalCharacters;
    this.#prefix = sanitizeSegment(options.prefix, this.#illegal);
    const every = options.statsIntervalMs ?? 30_000;
    if (every > 0) this.#statsTimer = setInterval(() => this.#logStats(false), every);
  }

  /**
   * Accept perfdata rows (`hostname`, `service_description`, `label`, `value`,
   * `timestamp_unix`). Never waits.
   *
   * @param rows Rows of `statusengine_perfdata`.
   */
  offer(rows: readonly Row[]): void {
    if (this.#closed) return;
    const room = this.#o.batchSize * BUFFER_BATCHES - this.#lines.length;
    const accepted = Math.min(room, rows.length);
    for (let i = 0; i < accepted; i++) {
      const r = rows[i] as Row;
      const value = r["value"];
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      this.#lines.push(carbonLine(
        metricPath(
          this.#prefix,
          String(r["hostname"] ?? ""),
          String(r["service_description"] ?? ""),
          String(r["label"] ?? ""),
          this.#illegal,
        ),
        value,
        Number(r["timestamp_unix"] ?? 0),
      ));
    }
    if (accepted < rows.length) {
      this.#o.metrics?.dropped.inc(rows.length - accepted);
      this.#o.metrics?.available.set(0);
    }
    this.#schedule();
  }

  /**
   * Write what is buffered (within `budgetMs`), then close the connection. Idempotent.
   *
   * @param budgetMs Shutdown budget.
   */
  async close(budgetMs: number): Promise<void> {
    if (this.#statsTimer !== undefined) clearInterval(this.#statsTimer);
    this.#statsTimer = undefined;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (!this.#closed) {
      this.#closed = true;
      using limit = deadline(budgetMs);
      const drain = (async () => {
        while (this.#lines.length > 0 || this.#flushing !== undefined) {
          await (this.#flushing ?? this.#flush());
        }
      })();
      await settledWithin(drain, limit.signal);
      this.#disconnect();
      await drain.catch(() => {});
      this.#logStats(true);
    }
  }

  #schedule(): void {
    if (this.#flushing !== undefined) return;
    if (this.#lines.length >= this.#o.batchSize) {
      void this.#flush();
      return;
    }
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      if (this.#flushing === undefined && this.#lines.length > 0) void this.#flush();
    }, FLUSH_INTERVAL_MS);
  }

  #flush(): Promise<void> {
    const batch = this.#lines.splice(0, this.#o.batchSize);
    this.#flushing = this.#write(batch).finally(() => {
      this.#flushing = undefined;
      if (!this.#closed && this.#lines.length > 0) this.#schedule();
    });
    return this.#flushing;
  }

  async #write(batch: string[]): Promise<void> {
    if (batch.length === 0) return;
    const m = this.#o.metrics;
    let stage = "dial";
    try {
      if (this.#conn === undefined) {
        const { hostname, port } = parseServerAddress(this.#o.addr);
        using dial = deadline(DIAL_TIMEOUT_MS);
        this.#conn = await Deno.connect({ hostname, port, signal: dial.signal });
        this.#conn.setNoDelay(true);
      }
      stage = "write";
      const bytes = encoder.encode(batch.join(""));
      const conn = this.#conn;
      using limit = deadline(WRITE_TIMEOUT_MS);
      const onTimeout = () => this.#disconnect();
      limit.signal.addEventListener("abort", onTimeout, { once: true });
      let off = 0;
      while (off < bytes.length) off += await conn.write(bytes.subarray(off));
      limit.signal.removeEventListener("abort", onTimeout);
      m?.written.inc(batch.length);
      m?.flushes.inc();
      m?.available.set(1);
      this.#interval.flushes++;
      this.#interval.metrics += batch.length;
      this.#total += batch.length;
      log.debug("graphite: metrics flushed", { addr: this.#o.addr, metrics: batch.length });
    } catch (err: unknown) {
      // Drop, never hold (F6): an unreachable Carbon loses metrics, it never delays MySQL.
      this.#disconnect();
      m?.dropped.inc(batch.length);
      m?.available.set(0);
      m?.errors.inc({ component: "graphite" });
      log.error(`graphite: ${stage} failed, metrics dropped`, {
        addr: this.#o.addr,
        metrics: batch.length,
        error: errorMessage(err),
      });
    }
  }

  #disconnect(): void {
    try {
      this.#conn?.close();
    } catch {
      // already closed
    }
    this.#conn = undefined;
  }

  #logStats(final: boolean): void {
    const s = this.#interval;
    if (s.flushes === 0 && (!final || this.#total === 0)) return;
    log.info("graphite: write stats", {
      addr: this.#o.addr,
      flushes: s.flushes,
      metrics: s.metrics,
      metrics_per_flush: s.flushes === 0 ? 0 : Math.round((s.metrics / s.flushes) * 10) / 10,
      total_processed: this.#total,
    });
    s.flushes = 0;
    s.metrics = 0;
  }
}
