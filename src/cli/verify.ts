/**
 * The `verify` subcommand: a read-only parity diff of the newest rows of two Statusengine
 * databases, table by table and column by column (docs/operations.md#verify, after the Go
 * `db_verifier`), for shadow tests in which two workers consume the same stream.
 *
 * @module
 */
import {
  endMysql,
  isTableName,
  makeSessionReadOnly,
  type NewestRows,
  selectNewestRows,
  type Table,
  TABLE_NAMES,
  type TableName,
  TABLES,
} from "../mysql/mod.ts";
import { type Io, openDatabase } from "./io.ts";
import { errorMessage } from "../log.ts";
import { redactText, redactUrl } from "../util/redact.ts";

/**
 * Options of the `verify` command: database A (e.g. the legacy worker's) and B (e.g. ours);
 * `tables` default {@linkcode DEFAULT_VERIFY_TABLES}; `limit` newest rows per table and
 * database; `ignoreColumns` entries `column` (every table) or `table.column`.
 */
interface VerifyCommandOptions {
  readonly mysqlUrlA: string;
  readonly mysqlUrlB: string;
  readonly tables?: readonly string[] | undefined;
  readonly limit: number;
  readonly ignoreColumns?: readonly string[];
}

/**
 * "Newest first" per table (docs/operations.md#verify): the time column and its microsecond
 * companion. The key columns follow as tie-breakers, so both databases cut their window at
 * the same row when times are equal. These 16 tables are compared by default, in this order.
 */
const DEFAULT_ORDER = {
  "statusengine_hoststatus": ["status_update_time"],
  "statusengine_servicestatus": ["status_update_time"],
  "statusengine_hostchecks": ["start_time", "start_time_usec"],
  "statusengine_servicechecks": ["start_time", "start_time_usec"],
  "statusengine_host_statehistory": ["state_time", "state_time_usec"],
  "statusengine_service_statehistory": ["state_time", "state_time_usec"],
  "statusengine_host_downtimehistory": ["entry_time", "entry_time_usec"],
  "statusengine_service_downtimehistory": ["entry_time", "entry_time_usec"],
  "statusengine_host_notifications": ["start_time", "start_time_usec"],
  "statusengine_service_notifications": ["start_time", "start_time_usec"],
  "statusengine_host_notifications_log": ["start_time", "start_time_usec"],
  "statusengine_service_notifications_log": ["start_time", "start_time_usec"],
  "statusengine_host_acknowledgements": ["entry_time", "entry_time_usec"],
  "statusengine_service_acknowledgements": ["entry_time", "entry_time_usec"],
  "statusengine_host_scheduleddowntimes": ["entry_time"],
  "statusengine_service_scheduleddowntimes": ["entry_time"],
} satisfies Partial<Record<TableName, readonly string[]>>;

/** Every table's order: the default ones, then those compared only when named. */
const VERIFY_ORDER: Readonly<Record<TableName, readonly string[]>> = {
  ...DEFAULT_ORDER,
  "statusengine_dbversion": ["id"],
  "statusengine_downtime_announcements": ["announced_at"],
  "statusengine_downtime_tombstones": ["end_time"],
  // Not `id`: the two databases number the same rows differently.
  "statusengine_logentries": ["entry_time"],
  "statusengine_nodes": ["node_start_time"],
  "statusengine_perfdata": ["timestamp"],
  "statusengine_tasks": ["entry_time"],
  "statusengine_users": [],
  "statusengine_worker_leases": ["name"],
};

const DEFAULT_VERIFY_TABLES = Object.keys(DEFAULT_ORDER) as TableName[];

const EXAMPLES_PER_TABLE = 5;
/** Significant digits at which DOUBLE values count as equal (PHP's `precision`, docs/tables.md#double-columns). */
const DOUBLE_DIGITS = 14;

/**
 * How rows are matched: the primary key; for a key containing an AUTO_INCREMENT column (`auto`:
 * ids differ between databases, never compared) or no key, every other column not `ignored`; for
 * `statusengine_perfdata` its metric index plus the time.
 */
function rowKey(
  table: Table,
  auto: readonly string[],
  ignored: ReadonlySet<string>,
): readonly string[] {
  if (table.name === "statusengine_perfdata") {
    return ["hostname", "service_description", "label", "timestamp"];
  }
  if (table.primaryKey.length > 0 && !table.primaryKey.some((c) => auto.includes(c))) {
    return table.primaryKey;
  }
  // An ignored column kept in this key would still tell the rows apart.
  return table.columns.map((c) => c.name).filter((c) => !auto.includes(c) && !ignored.has(c));
}

/** A database value as compared: SQL NULL and `''` both become `''` (docs/operations.md#verify). */
function normalise(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  if (value instanceof Uint8Array) return value.toHex();
  return String(value);
}

/**
 * NULL equals `''`; DOUBLE/FLOAT values are equal when they agree at {@linkcode DOUBLE_DIGITS}
 * significant digits (rows written by the legacy worker); everything else must match exactly.
 */
function valuesEqual(a: unknown, b: unknown, isDouble: boolean): boolean {
  const x = normalise(a);
  const y = normalise(b);
  if (x === y) return true;
  if (!isDouble || x === "" || y === "") return false;
  const nx = Number(x);
  const ny = Number(y);
  if (!Number.isFinite(nx) || !Number.isFinite(ny)) return false;
  return nx.toPrecision(DOUBLE_DIGITS) === ny.toPrecision(DOUBLE_DIGITS);
}

/** A row as read: column name → value. */
type DbRow = Readonly<Record<string, unknown>>;

function show(value: unknown): string {
  if (value === null || value === undefined) return "NULL";
  const text = normalise(value);
  const cut = text.length > 80 ? `${text.slice(0, 77)}...` : text;
  return `'${cut.replaceAll("\n", "\\n")}'`;
}

function describeKey(row: DbRow, key: readonly string[]): string {
  const parts = key.map((c) => `${c}=${typeof row[c] === "number" ? row[c] : show(row[c])}`);
  return `(${parts.join(", ")})`;
}

/**
 * Match the rows of windows A and B by key and compare every column. Rows with the same key on
 * one side (possible only in keyless tables) are matched by occurrence. Rows in both are `equal`
 * or `different` (in one column at least); `columns` counts the rows differing per column, in
 * compare order; at most {@linkcode EXAMPLES_PER_TABLE} `examples`. `compared` are the columns
 * in print order; the DOUBLE ones are compared at {@linkcode DOUBLE_DIGITS} digits. A row
 * missing on the other side is not counted when it lies beyond that side's window
 * ({@linkcode beyondWindow}).
 */
function diffRows(
  windowA: NewestRows,
  windowB: NewestRows,
  key: readonly string[],
  compared: readonly string[],
  limit: number,
  time: string | undefined,
) {
  const doubles = new Set([...windowA.doubles, ...windowB.doubles]);
  const keyOf = (row: DbRow) => JSON.stringify(key.map((c) => normalise(row[c])));
  const index = (rows: readonly DbRow[]) => {
    const map = new Map<string, DbRow>();
    for (const row of rows) {
      const base = keyOf(row);
      let k = base;
      for (let n = 1; map.has(k); n++) k = `${base}#${n}`;
      map.set(k, row);
    }
    return map;
  };
  const a = index(windowA.rows);
  const b = index(windowB.rows);
  const beyondA = beyondWindow(windowA, a, b, limit, time);
  const beyondB = beyondWindow(windowB, b, a, limit, time);
  const columns = new Map<string, number>(compared.map((c) => [c, 0]));
  const examples: string[] = [];
  const example = (text: string) => {
    if (examples.length < EXAMPLES_PER_TABLE) examples.push(text);
  };
  let equal = 0;
  let different = 0;
  let onlyInA = 0;
  for (const [k, rowA] of a) {
    const rowB = b.get(k);
    if (rowB === undefined) {
      if (beyondB(k, rowA)) continue;
      onlyInA++;
      example(`${describeKey(rowA, key)} only in A`);
      continue;
    }
    let same = true;
    for (const c of compared) {
      const shown = (row: DbRow) => c in row ? show(row[c]) : "(no such column)";
      if (!(c in rowA) || !(c in rowB) || !valuesEqual(rowA[c], rowB[c], doubles.has(c))) {
        same = false;
        columns.set(c, (columns.get(c) ?? 0) + 1);
        example(`${describeKey(rowA, key)} column ${c}: A=${shown(rowA)} B=${shown(rowB)}`);
      }
    }
    if (same) equal++;
    else different++;
  }
  let onlyInB = 0;
  for (const [k, rowB] of b) {
    if (a.has(k) || beyondA(k, rowB)) continue;
    onlyInB++;
    example(`${describeKey(rowB, key)} only in B`);
  }
  return { equal, onlyInA, onlyInB, different, columns, examples };
}

/**
 * Whether a row of the other side lies past this `window` that `limit` filled, so that this
 * database may hold it just beyond and its absence shows nothing. Where the other side holds
 * this window's last row, its own order (the same ORDER BY) says exactly which rows come after
 * it, at the same time too; otherwise a row older by the time column is past it.
 */
function beyondWindow(
  window: NewestRows,
  rows: ReadonlyMap<string, DbRow>,
  otherRows: ReadonlyMap<string, DbRow>,
  limit: number,
  time: string | undefined,
): (key: string, row: DbRow) => boolean {
  const oldest = window.rows.at(-1);
  if (oldest === undefined || window.rows.length < limit) return () => false;
  const otherKeys = [...otherRows.keys()];
  const cut = otherKeys.indexOf([...rows.keys()].at(-1) ?? "");
  if (cut >= 0) {
    const after = new Set(otherKeys.slice(cut + 1));
    return (key) => after.has(key);
  }
  if (time === undefined) return () => false;
  const edge = Number(oldest[time]);
  return (_key, row) => Number(row[time]) < edge;
}

/**
 * Parse `--ignore-columns` entries (`column`: in every table, or `table.column`), checked against
 * the catalogue so that a typo cannot silently hide nothing.
 */
function parseIgnoreColumns(specs: readonly string[]) {
  const everywhere = new Set<string>();
  const perTable = new Map<string, Set<string>>();
  for (const raw of specs) {
    const spec = raw.trim();
    if (spec === "") continue;
    const dot = spec.indexOf(".");
    if (dot < 0) {
      if (!TABLE_NAMES.some((t) => TABLES[t].columns.some((c) => c.name === spec))) {
        throw new RangeError(`ignored column "${spec}" is not a column of any Statusengine table`);
      }
      everywhere.add(spec);
      continue;
    }
    const table = spec.slice(0, dot);
    const column = spec.slice(dot + 1);
    if (!isTableName(table)) {
      throw new RangeError(`ignored column "${spec}" names unknown table "${table}"`);
    }
    if (!TABLES[table].columns.some((c) => c.name === column)) {
      throw new RangeError(`ignored column "${spec}": table ${table} has no column "${column}"`);
    }
    perTable.set(table, (perTable.get(table) ?? new Set<string>()).add(column));
  }
  return { everywhere, perTable };
}

/** The tables to compare: the default 16, or the given names de-duplicated and sorted. */
function selectTables(tables: readonly string[] | undefined): readonly TableName[] {
  if (tables === undefined) return DEFAULT_VERIFY_TABLES;
  const names = [...new Set(tables.map((t) => t.trim()).filter((t) => t !== ""))].sort();
  const unknown = names.filter((t) => !isTableName(t));
  if (unknown.length > 0) {
    const listed = unknown.map((t) => `"${t}"`).join(", ");
    const valid = `valid tables: ${TABLE_NAMES.join(", ")}`;
    throw new RangeError(`unknown table${unknown.length === 1 ? "" : "s"} ${listed}; ${valid}`);
  }
  if (names.length === 0) throw new RangeError("no table given");
  return names as TableName[];
}

/**
 * Open database A or B for reading only; `newest` reads a table's window, its errors named by
 * the side and without the password.
 */
async function open(name: "A" | "B", url: string, io: Io) {
  const opened = await openDatabase(url, `verify: database ${name}`, io, {
    exactValues: true,
    setting: `mysql-url-${name.toLowerCase()}`,
  });
  if (opened === undefined) return undefined;
  const { conn, password } = opened;
  try {
    // The tool must never write (docs/operations.md#verify); the server enforces it from here on.
    await makeSessionReadOnly(conn);
  } catch (err: unknown) {
    const why = errorMessage(err);
    io.err(`Cannot run verify: cannot make the session of database ${name} read-only: ${why}`);
    await endMysql(conn);
    return undefined;
  }
  const newest = (table: TableName, order: readonly string[], limit: number) =>
    selectNewestRows(conn, table, order, limit).catch((err: unknown) => {
      // No `cause`: errorMessage would append the cause's unmasked text to the masked one.
      throw new Error(`${name}: ${redactText(errorMessage(err), password)}`);
    });
  return { conn, newest };
}

/**
 * Run the `verify` command. Prints per table `<table>: identical (<n> rows)`, or
 * `<table>: DIFFERENT: …` with `  column <c>: …` and `  example: …` lines, or
 * `ERROR verifying table <table>: …`; a last line sums up. Exit 0 when every table is
 * identical; 1 on any difference, table error or connection failure; 2 on a usage error.
 */
export async function runVerifyCommand(options: VerifyCommandOptions, io: Io): Promise<number> {
  let tables: readonly TableName[];
  let ignored: ReturnType<typeof parseIgnoreColumns>;
  try {
    tables = selectTables(options.tables);
    ignored = parseIgnoreColumns(options.ignoreColumns ?? []);
  } catch (err: unknown) {
    io.err(`Cannot run verify: ${errorMessage(err)}`);
    return 2;
  }

  const a = await open("A", options.mysqlUrlA, io);
  if (a === undefined) return 1;
  const b = await open("B", options.mysqlUrlB, io);
  if (b === undefined) {
    await endMysql(a.conn);
    return 1;
  }
  try {
    const plural = tables.length === 1 ? "" : "s";
    const urls = `A=${redactUrl(options.mysqlUrlA)} B=${redactUrl(options.mysqlUrlB)}`;
    io.out(`verify: ${urls}, newest ${options.limit} rows of ${tables.length} table${plural}`);
    const shownIgnored = [
      ...ignored.everywhere,
      ...[...ignored.perTable].flatMap(([t, cols]) => [...cols].map((c) => `${t}.${c}`)),
    ];
    if (shownIgnored.length > 0) io.out(`ignoring columns: ${shownIgnored.join(", ")}`);

    let identical = 0;
    let differing = 0;
    let errors = 0;
    for (const name of tables) {
      const ignoredHere = new Set([...ignored.everywhere, ...(ignored.perTable.get(name) ?? [])]);
      const auto = TABLES[name].columns.filter((c) => c.autoIncrement).map((c) => c.name);
      const key = rowKey(TABLES[name], auto, ignoredHere);
      const order = [...new Set([...VERIFY_ORDER[name], ...key])];
      let fa: NewestRows;
      let fb: NewestRows;
      try {
        [fa, fb] = await Promise.all([
          a.newest(name, order, options.limit),
          b.newest(name, order, options.limit),
        ]);
        const missingKey = key.filter((c) => !fa.columns.includes(c) || !fb.columns.includes(c));
        if (missingKey.length > 0) {
          throw new Error(`key column(s) ${missingKey.join(", ")} missing`);
        }
      } catch (err: unknown) {
        errors++;
        io.out(`ERROR verifying table ${name}: ${errorMessage(err)}`);
        continue;
      }
      const skip = new Set([...auto, ...ignoredHere]);
      const columns = [...new Set([...fa.columns, ...fb.columns])].filter((c) => !skip.has(c));
      const diff = diffRows(fa, fb, key, columns, options.limit, VERIFY_ORDER[name][0]);
      if (diff.onlyInA + diff.onlyInB + diff.different === 0) {
        identical++;
        io.out(`${name}: identical (${diff.equal} rows)`);
        continue;
      }
      differing++;
      io.out(
        `${name}: DIFFERENT: ${diff.equal} equal, ${diff.onlyInA} only in A, ${diff.onlyInB} only in B, ${diff.different} different (A ${fa.rows.length} rows, B ${fb.rows.length} rows)`,
      );
      for (const [column, n] of diff.columns) {
        if (n === 1) io.out(`  column ${column}: 1 row differs`);
        else if (n > 1) io.out(`  column ${column}: ${n} rows differ`);
      }
      for (const text of diff.examples) io.out(`  example: ${text}`);
    }
    const tally = `${identical} identical, ${differing} different, ${errors} error${
      errors === 1 ? "" : "s"
    }`;
    io.out(`verify: ${tables.length} table${plural}: ${tally}`);
    return differing + errors === 0 ? 0 : 1;
  } finally {
    await Promise.all([endMysql(a.conn), endMysql(b.conn)]);
  }
}
