/**
 * The `status` command: collect.ts gathers the report; this module prints it as JSON or as
 * the text screen.
 *
 * @module
 */
import type { Io } from "../io.ts";
import { collectStatus, type StatusCommandOptions, type StatusReport } from "./collect.ts";
import type { MysqlConnectProblem } from "../../mysql/mod.ts";
import { wrapWords } from "../../config/mod.ts";

/** Run `status`; exit 1 when a job server, MySQL or a given metrics URL is unreachable. */
export async function runStatusCommand(options: StatusCommandOptions, io: Io): Promise<number> {
  const report = await collectStatus(options);
  if (options.json) io.out(JSON.stringify(report, null, 2));
  else for (const line of formatStatusText(report)) io.out(line);
  return report.ok ? 0 : 1;
}

const SCREEN_WIDTH = 100;

/** The word for each way MySQL failed: only a server that does not answer is unreachable. */
const MYSQL_VERDICTS: Readonly<Record<MysqlConnectProblem, string>> = {
  unreachable: "UNREACHABLE",
  "access_denied": "ACCESS DENIED",
  "unknown_database": "NO DATABASE",
  failed: "FAILED",
};
/** Longest queue column; other functions' names are cut to it in text (JSON keeps them whole). */
const MAX_NAME_WIDTH = 40;
/** Marks a function gearmand knows that the worker does not consume. */
const OTHER_MARK = " *";

function fit(text: string, width: number): string {
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;
}

/** {@link wrapWords}, longer words cut; empty text is one empty line. */
function wrap(text: string, width: number): string[] {
  const lines = wrapWords(text, width);
  return (lines.length === 0 ? [""] : lines).map((l) => fit(l, width));
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

/** Cells padded to the widest, right-aligned (numbers) or `left`-aligned. */
function column(cells: readonly string[], left = false): string[] {
  const width = Math.max(...cells.map((c) => c.length));
  return cells.map((c) => left ? c.padEnd(width) : c.padStart(width));
}

/** Columns of equally many lines side by side. */
function sideBySide(columns: readonly (readonly string[])[], gap: string): string[] {
  return (columns[0] ?? []).map((_, r) => columns.map((c) => c[r]).join(gap));
}

/** A group's lines (caption, headers, a row per queue), all as wide as its caption line. */
function renderGroup(group: ColumnGroup): string[] {
  const columns = group.headers.map((h, i) => column([h, ...group.cells.map((r) => r[i] ?? "")]));
  const lines = sideBySide(columns, " ");
  const width = Math.max(lines[0]?.length ?? 0, group.caption.length);
  // A long caption widens the first column.
  return [group.caption.padEnd(width), ...lines.map((l) => l.padStart(width))];
}

/**
 * The text screen: job servers, MySQL and the worker (errors wrapped on their own lines), the
 * queue table (split where the job servers do not fit 100 columns), then the write rates.
 */
function formatStatusText(report: StatusReport): string[] {
  const lines: string[] = [];
  const labelWidth = Math.max(
    ...report.jobServers.map((s) => s.addr.length),
    report.mysql.url.length,
    report.worker?.url.length ?? 0,
  );
  // An error is wrapped on its own lines, not cut: the one thing the operator must read in full.
  const entry = (label: string, ok: boolean, detail: string, verdict = "UNREACHABLE") => {
    const head = `  ${label.padEnd(labelWidth)}  `;
    const wrapped = ok ? [] : wrap(detail, SCREEN_WIDTH - 4).map((l) => `    ${l}`);
    lines.push(ok ? `${head}ok  ${detail}` : `${head}${verdict}`.trimEnd(), ...wrapped);
  };
  lines.push(report.jobServers.some((s) => s.kind === "rabbitmq") ? "Broker" : "Job servers");
  for (const s of report.jobServers) {
    const what = s.kind === "rabbitmq" ? "RabbitMQ" : `gearmand ${s.version}`;
    entry(s.addr, s.ok, s.ok ? what : s.error ?? "");
  }
  lines.push("MySQL");
  const m = report.mysql;
  const mysqlAt = m.host === null ? "" : ` at ${m.host}`;
  const mysqlDetail = m.ok ? `${m.version}${mysqlAt} (${m.latencyMs} ms)` : m.error ?? "";
  entry(m.url, m.ok, mysqlDetail, MYSQL_VERDICTS[m.problem ?? "failed"]);
  const w = report.worker;
  if (w !== null) {
    lines.push("Worker");
    const stalled = w.dbAvailable === 0 ? " (MySQL writes stalled)" : "";
    const host = w.mysqlHost === null ? "" : `, MySQL host ${w.mysqlHost}`;
    const detail = w.ok ? `db_available ${count(w.dbAvailable)}${stalled}${host}` : w.error ?? "";
    // The local default may simply have no worker behind it: said, but not as a failure.
    const none = !w.ok && w.local && w.refused;
    const local = none
      ? " (the local default from --metrics-host/--metrics-port; pass --metrics-url for a worker elsewhere)"
      : "";
    entry(w.url, w.ok, `${detail}${local}`, none ? "NO WORKER" : undefined);
  }

  const names = report.queues.map((q) =>
    q.consumed ? q.name : `${fit(q.name, MAX_NAME_WIDTH - OTHER_MARK.length)}${OTHER_MARK}`
  );
  const nameColumn = column(["", "QUEUE", ...names], true);
  const nameWidth = nameColumn[0]?.length ?? 0;
  const workerGroups: ColumnGroup[] = w === null ? [] : [{
    caption: "worker",
    headers: ["IN-FLIGHT", "CONNECTED"],
    cells: report.queues.map((q) => [count(q.inFlight), count(q.connected)]),
  }];
  const serverGroups: ColumnGroup[] = report.jobServers.map((s, i) => ({
    caption: s.addr,
    headers: s.kind === "rabbitmq"
      ? ["READY", "UNACKED", "CONSUMERS"]
      : ["WAITING", "RUNNING", "WORKERS"],
    cells: report.queues.map((q) => {
      const at = q.servers[i];
      return [count(at?.waiting ?? null), count(at?.running ?? null), count(at?.workers ?? null)];
    }),
  }));
  // Pack groups left to right; a group that would pass 100 columns starts the next table.
  const tables: string[][][] = [[nameColumn]];
  let used = nameWidth;
  for (const group of [...workerGroups, ...serverGroups].map(renderGroup)) {
    const width = 2 + (group[0]?.length ?? 0);
    const current = tables[tables.length - 1] ?? [];
    if (current.length > 1 && used + width > SCREEN_WIDTH) {
      tables.push([nameColumn, group]);
      used = nameWidth + width;
    } else {
      current.push(group);
      used += width;
    }
  }
  for (const columns of tables) {
    lines.push("", ...sideBySide(columns, "  ").map((l) => l.trimEnd()));
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
  if (w?.ok) lines.push("");
  if (w?.ok && written.length === 0) lines.push("No rows written since the worker started");
  if (w !== null && written.length > 0) {
    const [header, ...rows] = sideBySide([
      column(["TABLE", ...written.map((t) => t.table)], true),
      column(["ROWS/S", ...written.map((t) => rate(t.rowsPerSecond))]),
      column(["WRITTEN", ...written.map((t) => String(t.written))]),
    ], "  ");
    lines.push(`${header}  (over ${(w.intervalSeconds ?? 0).toFixed(1)} s)`, ...rows);
    const idle = w.tables.length - written.length;
    if (idle > 0) {
      lines.push(`(${idle} more table(s) with nothing written since the worker started)`);
    }
  }
  return lines.map((l) => fit(l, SCREEN_WIDTH));
}
