/**
 * The `status` subcommand: one screen answering "is the pipeline healthy right now?" —
 * queue depths and connected workers at every job server (admin protocol, gearman.md §5) or
 * at the RabbitMQ broker (passive declarations, `--consumer rabbitmq`),
 * whether MySQL answers, and, given a running worker's `/metrics`, its in-flight jobs,
 * connection state, MySQL availability and write rates per table (operations.md §2).
 *
 * @module
 */
import { adminStatus, adminVersion } from "../gearman/admin.ts";
import { AmqpPublisher } from "../amqp/publisher.ts";
import { parseAmqpUrl } from "../amqp/url.ts";
import { QUEUE_NAMES } from "../events/queues.ts";
import { errorMessage } from "../log.ts";
import { METRICS } from "../metrics/catalogue.ts";
import { mysqlOptionsFromUrl, redactUrl } from "../mysql/url.ts";
import { deadline, delay } from "../util/async.ts";
import { closeMysqlNow, connectMysql } from "./cleanup.ts";
import type { CommandIo } from "./schema.ts";

export type { CommandIo };

/** Options of the `status` command. */
export interface StatusCommandOptions {
  /** Job servers (`host:port`), each asked in parallel. Ignored with {@link rabbitmqUrl}. */
  readonly gearmanAddr: readonly string[];
  /** Ask this RabbitMQ broker for the queue depths instead (`--consumer rabbitmq`). */
  readonly rabbitmqUrl?: string | undefined;
  /** `--mysql-url`; shown redacted. */
  readonly mysqlUrl: string;
  /**
   * A running worker's metrics endpoint, e.g. `http://127.0.0.1:9105/metrics` (a URL without
   * a path gets `/metrics`). Absent: the worker section is left out.
   */
  readonly metricsUrl?: string | undefined;
  /** Print one JSON document instead of the text screen. */
  readonly json: boolean;
  /** Time between the two scrapes the write rates come from; default 1000 ms (tests). */
  readonly rateIntervalMs?: number;
}

/** One sample of the Prometheus text exposition format. */
export interface PrometheusSample {
  /** Metric name including any `_bucket`/`_sum`/`_count` suffix. */
  readonly name: string;
  /** Label pairs, unescaped. */
  readonly labels: Readonly<Record<string, string>>;
  /** Sample value (`+Inf`, `-Inf` and `NaN` included). */
  readonly value: number;
}

/** One job server (or the RabbitMQ broker) as `status` saw it. */
export interface JobServerStatus {
  /** `host:port`, or the broker URL with the password masked. */
  readonly addr: string;
  /** What was asked: a gearmand's admin port or the RabbitMQ broker. */
  readonly kind: "gearman" | "rabbitmq";
  /** Answered within the admin timeout. */
  readonly ok: boolean;
  /** gearmand's version (`1.1.20`); null for RabbitMQ and when unreachable. */
  readonly version: string | null;
  readonly error: string | null;
}

/** One queue at one job server; numbers are null when unreachable or the function is unknown there. */
export interface QueueAtServer {
  readonly addr: string;
  /** Jobs queued and not yet handed out: total − running (RabbitMQ: messages ready). */
  readonly waiting: number | null;
  /** Jobs handed to a worker and not yet completed (RabbitMQ: not reported, null). */
  readonly running: number | null;
  /** Connected workers that registered the function. */
  readonly workers: number | null;
}

/** One queue row of the report. */
export interface QueueStatus {
  readonly name: string;
  /** One of the twelve `statusngin_*` queues the worker consumes; false for other functions. */
  readonly consumed: boolean;
  /** One entry per job server, in `gearmanAddr` order. */
  readonly servers: readonly QueueAtServer[];
  /** `statusengine_queue_jobs_in_flight` of the worker; null without metrics. */
  readonly inFlight: number | null;
  /** `statusengine_queue_connected` of the worker; null without metrics or before the first connection. */
  readonly connected: number | null;
}

/** Whether MySQL answers. */
export interface MysqlStatus {
  /** The URL with the password masked. */
  readonly url: string;
  readonly ok: boolean;
  /** `SELECT VERSION()`. */
  readonly version: string | null;
  /** Connect plus first query, in milliseconds. */
  readonly latencyMs: number | null;
  readonly error: string | null;
}

/** Writes of one table, from two scrapes of `statusengine_db_events_written_total`. */
export interface TableWriteRate {
  readonly table: string;
  /** Counter value at the second scrape. */
  readonly written: number;
  /** Rows per second between the scrapes; null when the counter went backwards (restart). */
  readonly rowsPerSecond: number | null;
}

/** The worker, from its `/metrics`. */
export interface WorkerStatus {
  readonly url: string;
  readonly ok: boolean;
  readonly error: string | null;
  /** `statusengine_db_available` (1 = flushes reach MySQL). */
  readonly dbAvailable: number | null;
  /** Seconds between the two scrapes. */
  readonly intervalSeconds: number | null;
  readonly tables: readonly TableWriteRate[];
}

/** Everything `status` reports; also the JSON document of `--json`. */
export interface StatusReport {
  /** False when a job server, MySQL or the given metrics URL is unreachable (exit 1). */
  readonly ok: boolean;
  readonly jobServers: readonly JobServerStatus[];
  readonly queues: readonly QueueStatus[];
  readonly mysql: MysqlStatus;
  /** Null when no metrics URL was given. */
  readonly worker: WorkerStatus | null;
}

/** gearman.md §5: cap the admin read time. */
const ADMIN_TIMEOUT_MS = 2_000;
/** Same bound as the worker's start-up ping. */
const MYSQL_TIMEOUT_MS = 5_000;
const SCRAPE_TIMEOUT_MS = 2_000;
const DEFAULT_RATE_INTERVAL_MS = 1_000;
const SCREEN_WIDTH = 100;
/** Longest queue column; other functions' names are cut to it in text (JSON keeps them whole). */
const MAX_NAME_WIDTH = 40;
/** Marks a function gearmand knows that the worker does not consume. */
const OTHER_MARK = " *";

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

function parseSampleValue(text: string): number {
  switch (text) {
    case "+Inf":
    case "Inf":
      return Number.POSITIVE_INFINITY;
    case "-Inf":
      return Number.NEGATIVE_INFINITY;
    case "NaN":
      return Number.NaN;
  }
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) return Number.NaN;
  return Number(text);
}

/**
 * Parse the Prometheus text exposition format (version 0.0.4): `# HELP`/`# TYPE` and other
 * comment lines are skipped; every sample line becomes one {@linkcode PrometheusSample}.
 * Label values may contain escaped `\\`, `\"` and `\n` and any other character, `,` and `}`
 * included; a trailing timestamp is accepted and ignored.
 *
 * @param text The body of a `/metrics` response.
 * @returns The samples in document order.
 * @throws {SyntaxError} For a malformed line, naming its number and text.
 *
 * @example Reading one labelled gauge
 * ```ts
 * import { parsePrometheusText } from "./status.ts";
 * const [sample] = parsePrometheusText('up{job="a"} 1\n');
 * if (sample?.labels.job !== "a" || sample.value !== 1) throw new Error();
 * ```
 */
export function parsePrometheusText(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  const lines = text.split("\n");
  for (const [index, raw] of lines.entries()) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    const fail = (detail: string): never => {
      throw new SyntaxError(
        `Cannot parse Prometheus text at line ${index + 1}: ${detail}: ${JSON.stringify(line)}`,
      );
    };
    let rest = line.trimStart();
    if (rest === "" || rest.startsWith("#")) continue;
    const name = METRIC_NAME.exec(rest)?.[0] ?? fail("expected a metric name");
    rest = rest.slice(name.length);
    const labels: Record<string, string> = {};
    const afterName = rest.replace(/^[ \t]+/, "");
    if (afterName.startsWith("{")) {
      rest = afterName.slice(1).trimStart();
      while (!rest.startsWith("}")) {
        const label = LABEL_NAME.exec(rest)?.[0] ?? fail("expected a label name");
        rest = rest.slice(label.length).trimStart();
        if (!rest.startsWith("=")) fail(`expected "=" after label ${label}`);
        rest = rest.slice(1).trimStart();
        if (!rest.startsWith('"')) fail(`expected a quoted value for label ${label}`);
        let value = "";
        let i = 1;
        for (;;) {
          const c = rest[i];
          if (c === undefined) fail(`unterminated value of label ${label}`);
          if (c === '"') break;
          if (c === "\\") {
            const next = rest[i + 1];
            if (next === "n") value += "\n";
            else if (next === "\\" || next === '"') value += next;
            else fail(`invalid escape in the value of label ${label}`);
            i += 2;
          } else {
            value += c;
            i++;
          }
        }
        if (Object.hasOwn(labels, label)) fail(`label ${label} given twice`);
        labels[label] = value;
        rest = rest.slice(i + 1).trimStart();
        if (rest.startsWith(",")) rest = rest.slice(1).trimStart();
        else if (!rest.startsWith("}")) fail(`expected "," or "}" after label ${label}`);
      }
      rest = rest.slice(1);
    } else if (!/^[ \t]/.test(rest)) {
      fail("expected whitespace before the value");
    }
    const fields = rest.trim().split(/[ \t]+/);
    if (fields.length > 2) fail("unexpected text after the timestamp");
    const [valueText = "", timestamp] = fields;
    const value = parseSampleValue(valueText);
    if (Number.isNaN(value) && valueText !== "NaN") fail(`invalid value "${valueText}"`);
    if (timestamp !== undefined && !/^-?\d+$/.test(timestamp)) {
      fail(`invalid timestamp "${timestamp}"`);
    }
    samples.push({ name, labels, value });
  }
  return samples;
}

/**
 * The value of the first sample with a name and (a superset of) the given labels.
 *
 * @param samples Parsed samples.
 * @param name Metric name.
 * @param labels Labels that must match exactly.
 * @returns The value, or null when there is no such series.
 *
 * @example
 * ```ts
 * import { parsePrometheusText, sampleValue } from "./status.ts";
 * const samples = parsePrometheusText('q{queue_name="a"} 3\nq{queue_name="b"} 4\n');
 * if (sampleValue(samples, "q", { queue_name: "b" }) !== 4) throw new Error();
 * ```
 */
export function sampleValue(
  samples: readonly PrometheusSample[],
  name: string,
  labels: Readonly<Record<string, string>> = {},
): number | null {
  const match = samples.find((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  );
  return match?.value ?? null;
}

/** What one probe found: the server, and each queue's numbers there. */
interface Probe {
  readonly server: JobServerStatus;
  /** Queues the server knows, by name. */
  readonly queues: ReadonlyMap<string, Omit<QueueAtServer, "addr">>;
}

async function probeJobServer(addr: string): Promise<Probe> {
  try {
    const [functions, version] = await Promise.all([
      adminStatus(addr, { timeoutMs: ADMIN_TIMEOUT_MS }),
      adminVersion(addr, { timeoutMs: ADMIN_TIMEOUT_MS }),
    ]);
    return {
      server: { addr, kind: "gearman", ok: true, version, error: null },
      queues: new Map(functions.map((f) => [f.function, {
        waiting: Math.max(0, f.total - f.running),
        running: f.running,
        workers: f.workers,
      }])),
    };
  } catch (err: unknown) {
    return {
      server: { addr, kind: "gearman", ok: false, version: null, error: errorMessage(err) },
      queues: new Map(),
    };
  }
}

/**
 * The consumed queues at the RabbitMQ broker, by passive declaration: ready messages and
 * consumers. Unacknowledged deliveries are not part of the answer (the management API
 * has them); a queue that does not exist yet is left empty.
 */
async function probeRabbitMq(url: string): Promise<Probe> {
  let addr = url;
  try {
    addr = parseAmqpUrl(url).display;
    using limit = deadline(ADMIN_TIMEOUT_MS);
    // Passive declarations only: the durability flag is not sent.
    const connecting = AmqpPublisher.connect(url, { durableQueues: false });
    const publisher = await Promise.race([
      connecting,
      new Promise<never>((_, reject) =>
        limit.signal.addEventListener(
          "abort",
          () => reject(new Error(`no answer within ${ADMIN_TIMEOUT_MS} ms`)),
        )
      ),
    ]).catch((err: unknown) => {
      connecting.then((p) => p.close(), () => {});
      throw err;
    });
    try {
      const queues = new Map<string, Omit<QueueAtServer, "addr">>();
      for (const name of QUEUE_NAMES) {
        try {
          const { ready, consumers } = await publisher.depth(name);
          queues.set(name, { waiting: ready, running: null, workers: consumers });
        } catch {
          // Not declared yet: no worker has started and the broker module has published nothing.
        }
      }
      return { server: { addr, kind: "rabbitmq", ok: true, version: null, error: null }, queues };
    } finally {
      await publisher.close();
    }
  } catch (err: unknown) {
    return {
      server: { addr, kind: "rabbitmq", ok: false, version: null, error: errorMessage(err) },
      queues: new Map(),
    };
  }
}

async function probeMysql(url: string): Promise<MysqlStatus> {
  const shown = redactUrl(url);
  let password: string | undefined;
  const started = performance.now();
  try {
    const options = mysqlOptionsFromUrl(url);
    password = options.password;
    const { connection, serverVersion } = await connectMysql(options, {
      timeoutMs: MYSQL_TIMEOUT_MS,
    });
    const latencyMs = Math.round(performance.now() - started);
    await connection.end().catch(() => closeMysqlNow(connection));
    return { url: shown, ok: true, version: serverVersion, latencyMs, error: null };
  } catch (err: unknown) {
    let error = errorMessage(err);
    if (password !== undefined && password !== "") error = error.replaceAll(password, "****");
    return { url: shown, ok: false, version: null, latencyMs: null, error };
  }
}

/** `http://host:port` alone means the worker's `/metrics`. */
function normaliseMetricsUrl(url: string): string {
  if (!URL.canParse(url)) return url;
  const parsed = new URL(url);
  if (parsed.pathname === "/" || parsed.pathname === "") parsed.pathname = "/metrics";
  return parsed.href;
}

async function scrape(url: string): Promise<{ samples: PrometheusSample[]; at: number }> {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new Error(`no answer within ${SCRAPE_TIMEOUT_MS} ms`)),
    SCRAPE_TIMEOUT_MS,
  );
  try {
    let response: Response;
    try {
      response = await fetch(url, { signal: controller.signal });
    } catch (err: unknown) {
      throw new Error(
        `Cannot scrape ${url}: ${
          controller.signal.aborted ? errorMessage(controller.signal.reason) : errorMessage(err)
        }`,
        { cause: err },
      );
    }
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`Cannot scrape ${url}: HTTP ${response.status}`);
    }
    const text = await response.text();
    const at = performance.now();
    const samples = parsePrometheusText(text);
    if (!samples.some((s) => s.name.startsWith("statusengine_"))) {
      throw new Error(`Cannot scrape ${url}: no statusengine_* metrics (not a worker?)`);
    }
    return { samples, at };
  } finally {
    clearTimeout(timer);
  }
}

async function probeWorker(url: string, intervalMs: number): Promise<{
  worker: WorkerStatus;
  samples: readonly PrometheusSample[];
}> {
  const target = normaliseMetricsUrl(url);
  try {
    const first = await scrape(target);
    await delay(intervalMs);
    const second = await scrape(target);
    const seconds = (second.at - first.at) / 1000;
    const written = METRICS.dbEventsWritten.name;
    const tables = second.samples
      .filter((s) => s.name === written && s.labels.table !== undefined)
      .map((s): TableWriteRate => {
        const table = s.labels.table ?? "";
        const before = sampleValue(first.samples, written, { table });
        const delta = before === null ? null : s.value - before;
        return {
          table,
          written: s.value,
          rowsPerSecond: delta === null || delta < 0 || seconds <= 0 ? null : delta / seconds,
        };
      });
    return {
      worker: {
        url: target,
        ok: true,
        error: null,
        dbAvailable: sampleValue(second.samples, METRICS.dbAvailable.name),
        intervalSeconds: seconds,
        tables,
      },
      samples: second.samples,
    };
  } catch (err: unknown) {
    return {
      worker: {
        url: target,
        ok: false,
        error: errorMessage(err),
        dbAvailable: null,
        intervalSeconds: null,
        tables: [],
      },
      samples: [],
    };
  }
}

/**
 * Gather the report: every job server, MySQL and the worker's metrics, all in parallel
 * (admin calls 2 s each, MySQL 5 s, two scrapes about `rateIntervalMs` apart).
 *
 * @param options Servers, URL and metrics URL.
 * @returns The report; `ok` is false when anything asked for is unreachable.
 */
export async function collectStatus(options: StatusCommandOptions): Promise<StatusReport> {
  const [servers, mysql, worker] = await Promise.all([
    options.rabbitmqUrl === undefined
      ? Promise.all(options.gearmanAddr.map(probeJobServer))
      : Promise.all([probeRabbitMq(options.rabbitmqUrl)]),
    probeMysql(options.mysqlUrl),
    options.metricsUrl === undefined
      ? Promise.resolve(undefined)
      : probeWorker(options.metricsUrl, options.rateIntervalMs ?? DEFAULT_RATE_INTERVAL_MS),
  ]);
  const consumed: readonly string[] = QUEUE_NAMES;
  const others = [
    ...new Set(servers.flatMap((s) => [...s.queues.keys()])),
  ].filter((name) => !consumed.includes(name)).sort();
  const samples = worker?.samples ?? [];
  const metric = (name: string, queue: string): number | null =>
    worker === undefined ? null : sampleValue(samples, name, { queue_name: queue });
  const queues = [...consumed, ...others].map((name): QueueStatus => ({
    name,
    consumed: consumed.includes(name),
    servers: servers.map(({ server, queues }): QueueAtServer => ({
      addr: server.addr,
      waiting: queues.get(name)?.waiting ?? null,
      running: queues.get(name)?.running ?? null,
      workers: queues.get(name)?.workers ?? null,
    })),
    inFlight: metric(METRICS.queueJobsInFlight.name, name),
    connected: metric(METRICS.queueConnected.name, name),
  }));
  const jobServers = servers.map((s) => s.server);
  return {
    ok: jobServers.every((s) => s.ok) && mysql.ok && (worker?.worker.ok ?? true),
    jobServers,
    queues,
    mysql,
    worker: worker?.worker ?? null,
  };
}

function fit(text: string, width: number): string {
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;
}

/** Break text at spaces into lines of at most `width` characters (longer words are cut). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let current = "";
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (current === "") current = word;
    else if (current.length + 1 + word.length <= width) current += ` ${word}`;
    else {
      lines.push(current);
      current = word;
    }
  }
  if (current !== "" || lines.length === 0) lines.push(current);
  return lines.map((l) => fit(l, width));
}

function count(n: number | null): string {
  return n === null ? "-" : String(n);
}

function rate(n: number | null): string {
  if (n === null) return "-";
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

/** A group of right-aligned numeric columns under one caption. */
interface ColumnGroup {
  readonly caption: string;
  readonly headers: readonly string[];
  /** Cells per queue row, in `headers` order. */
  readonly cells: readonly (readonly string[])[];
}

function groupWidths(group: ColumnGroup): number[] {
  return group.headers.map((h, i) =>
    Math.max(h.length, ...group.cells.map((row) => row[i]?.length ?? 0))
  );
}

function groupWidth(group: ColumnGroup): number {
  const widths = groupWidths(group);
  return Math.max(widths.reduce((a, b) => a + b, 0) + widths.length - 1, group.caption.length);
}

/** One aligned table: queue names, then the groups side by side. */
function renderQueueTable(names: readonly string[], groups: readonly ColumnGroup[]): string[] {
  const nameWidth = Math.max("QUEUE".length, ...names.map((n) => n.length));
  const gap = "  ";
  const captions = [" ".repeat(nameWidth)];
  const headers = ["QUEUE".padEnd(nameWidth)];
  const rows = names.map((n) => [n.padEnd(nameWidth)]);
  for (const group of groups) {
    const widths = groupWidths(group);
    const total = groupWidth(group);
    // Extra width from a long caption goes to the first column.
    const first = (widths[0] ?? 0) + total -
      (widths.reduce((a, b) => a + b, 0) + widths.length - 1);
    const adjusted = widths.map((w, i) => (i === 0 ? first : w));
    captions.push(fit(group.caption, total).padEnd(total));
    headers.push(group.headers.map((h, i) => h.padStart(adjusted[i] ?? 0)).join(" "));
    group.cells.forEach((cells, r) => {
      rows[r]?.push(cells.map((c, i) => c.padStart(adjusted[i] ?? 0)).join(" "));
    });
  }
  return [captions, headers, ...rows].map((parts) => parts.join(gap).trimEnd());
}

/**
 * The text screen: sections for job servers, MySQL and the worker (errors wrapped on their
 * own lines), then the queue table (split into several tables when the job servers do not
 * fit 100 columns side by side), then the write rates of the tables the worker has written
 * to since it started.
 *
 * @param report A collected report.
 * @returns The lines to print, none wider than 100 columns.
 *
 * @example
 * ```ts ignore
 * for (const line of formatStatusText(await collectStatus(options))) io.out(line);
 * ```
 */
export function formatStatusText(report: StatusReport): string[] {
  const lines: string[] = [];
  const labelWidth = Math.max(
    ...report.jobServers.map((s) => s.addr.length),
    report.mysql.url.length,
    report.worker?.url.length ?? 0,
  );
  // An error goes on its own lines below the entry, wrapped rather than cut: it is the one
  // thing the operator needs to read in full.
  const entry = (label: string, ok: boolean, detail: string) => {
    if (ok) {
      lines.push(fit(`  ${label.padEnd(labelWidth)}  ok  ${detail}`, SCREEN_WIDTH));
      return;
    }
    lines.push(`  ${label.padEnd(labelWidth)}  UNREACHABLE`.trimEnd());
    lines.push(...wrap(detail, SCREEN_WIDTH - 4).map((l) => `    ${l}`));
  };
  lines.push(report.jobServers.some((s) => s.kind === "rabbitmq") ? "Broker" : "Job servers");
  for (const s of report.jobServers) {
    const what = s.kind === "rabbitmq" ? "RabbitMQ" : `gearmand ${s.version}`;
    entry(s.addr, s.ok, s.ok ? what : s.error ?? "");
  }
  lines.push("MySQL");
  const m = report.mysql;
  entry(m.url, m.ok, m.ok ? `${m.version} (${m.latencyMs} ms)` : m.error ?? "");
  const w = report.worker;
  if (w !== null) {
    lines.push("Worker");
    const detail = w.ok
      ? `db_available ${count(w.dbAvailable)}${
        w.dbAvailable === 0 ? " (MySQL writes stalled)" : ""
      }`
      : w.error ?? "";
    entry(w.url, w.ok, detail);
  }

  const names = report.queues.map((q) =>
    q.consumed ? q.name : `${fit(q.name, MAX_NAME_WIDTH - OTHER_MARK.length)}${OTHER_MARK}`
  );
  const nameWidth = Math.max("QUEUE".length, ...names.map((n) => n.length));
  const workerGroup: ColumnGroup | undefined = w === null ? undefined : {
    caption: "worker",
    headers: ["IN-FLIGHT", "CONNECTED"],
    cells: report.queues.map((q) => [count(q.inFlight), count(q.connected)]),
  };
  const serverGroups: ColumnGroup[] = report.jobServers.map((s, i) => ({
    caption: s.addr,
    headers: s.kind === "rabbitmq" ? ["READY", "UNACKED", "CONSUMERS"] : [
      "WAITING",
      "RUNNING",
      "WORKERS",
    ],
    cells: report.queues.map((q) => {
      const at = q.servers[i];
      return [count(at?.waiting ?? null), count(at?.running ?? null), count(at?.workers ?? null)];
    }),
  }));
  // Pack groups left to right; a group that would pass 100 columns starts the next table.
  const tables: ColumnGroup[][] = [[]];
  let used = nameWidth;
  for (const group of workerGroup === undefined ? serverGroups : [workerGroup, ...serverGroups]) {
    const width = 2 + groupWidth(group);
    const current = tables[tables.length - 1] ?? [];
    if (current.length > 0 && used + width > SCREEN_WIDTH) {
      tables.push([group]);
      used = nameWidth + width;
    } else {
      current.push(group);
      used += width;
    }
  }
  for (const groups of tables) {
    lines.push("");
    lines.push(...renderQueueTable(names, groups));
  }
  if (report.queues.some((q) => !q.consumed)) {
    lines.push(`${OTHER_MARK.trim()} known to a job server, not consumed by statusengine-worker`);
  }
  if (report.jobServers.some((s) => s.kind === "rabbitmq")) {
    lines.push(
      "UNACKED is not reported by AMQP; rabbitmqctl list_queues messages_unacknowledged has it",
    );
  }

  // Tables the worker has not written to since it started would fill the screen with zeros.
  const written = w?.ok ? w.tables.filter((t) => t.written > 0) : [];
  if (w !== null && w.ok) {
    lines.push("");
    if (written.length === 0) lines.push("No rows written since the worker started");
  }
  if (w !== null && written.length > 0) {
    const tableWidth = Math.max("TABLE".length, ...written.map((t) => t.table.length));
    const rates = written.map((t) => rate(t.rowsPerSecond));
    const totals = written.map((t) => String(t.written));
    const rateWidth = Math.max("ROWS/S".length, ...rates.map((r) => r.length));
    const totalWidth = Math.max("WRITTEN".length, ...totals.map((r) => r.length));
    lines.push(
      `${"TABLE".padEnd(tableWidth)}  ${"ROWS/S".padStart(rateWidth)}  ${
        "WRITTEN".padStart(totalWidth)
      }  (over ${(w.intervalSeconds ?? 0).toFixed(1)} s)`,
    );
    written.forEach((t, i) => {
      lines.push(
        `${t.table.padEnd(tableWidth)}  ${(rates[i] ?? "").padStart(rateWidth)}  ${
          (totals[i] ?? "").padStart(totalWidth)
        }`,
      );
    });
    const idle = w.tables.length - written.length;
    if (idle > 0) {
      lines.push(`(${idle} more table(s) with nothing written since the worker started)`);
    }
  }
  return lines.map((l) => fit(l, SCREEN_WIDTH));
}

/**
 * Run the `status` command: collect, print as text or as one JSON document (`json`).
 *
 * @param options Job servers, MySQL URL, optional metrics URL, output form.
 * @param io Output sinks; the report goes to `out`, nothing to `err` unless printing fails.
 * @returns 1 when a job server or MySQL is unreachable, or the metrics URL is given and
 *   unreachable; else 0.
 */
export async function runStatusCommand(
  options: StatusCommandOptions,
  io: CommandIo,
): Promise<number> {
  const report = await collectStatus(options);
  if (options.json) io.out(JSON.stringify(report, null, 2));
  else for (const line of formatStatusText(report)) io.out(line);
  return report.ok ? 0 : 1;
}
