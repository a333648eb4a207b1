/**
 * Weekly partition maintenance of the partitioned history tables (docs/retention.md): pure
 * planning, then {@linkcode CleanupSession}, the one connection of a `cleanup` run, which reads a
 * table's layout and carries a plan out.
 *
 * @module
 */
import type mysql from "mysql2/promise";
import {
  closeMysqlNow,
  connectMysql,
  endMysql,
  type MysqlConnection,
  unlessAborted,
} from "./connect.ts";
import {
  INITIAL_WEEKLY_PARTITIONS,
  mondayOf,
  quoteIdentifier,
  SECONDS_PER_DAY,
  type WeeklyPartition,
  weekName,
} from "./ddl.ts";
import { describePartitioning, samePartitioning } from "./schema.ts";
import { classifyMysqlError } from "./errors.ts";
import { MYSQL_HOLD } from "./retry.ts";
import { Backoff } from "../util/backoff.ts";
import { delay } from "../util/async.ts";
import { type TableName, TABLES } from "./catalogue.ts";
import { keyBound } from "./sql.ts";
import type { MysqlUrlOptions } from "../util/mysql_url.ts";
import { WorkerError } from "../util/errors.ts";

/**
 * The fewest weeks one repair step splits off `p_max`; a step takes half of what is left, so each
 * row is copied about twice in all (docs/retention.md#repair).
 */
const REPAIR_MIN_WEEKS_PER_STEP = 4;

/**
 * How far ahead of today the newest row of `p_max` may lie for the repair to lay out weeks up to
 * it: times are not bounded on decode, and one row from a wrong clock or a bad payload would
 * otherwise mean a partition per week up to it, past the 8192 a table may have: a repair that
 * fails every time (docs/retention.md#far-future).
 */
const REPAIR_HORIZON_DAYS = 366;

/** Unix seconds from which a row of `p_max` is too far ahead for the repair to lay out weeks to. */
export function repairHorizon(today: number): number {
  return (today + REPAIR_HORIZON_DAYS + 1) * SECONDS_PER_DAY;
}

/** What adding and dropping weekly partitions takes besides the worker's own privileges. */
const PARTITION_PRIVILEGES = ["ALTER", "DROP"] as const;

/** One `information_schema.PARTITIONS` row (one per subpartition); `name` null if unpartitioned. */
export interface PartitionInfo {
  readonly name: string | null;
  readonly method: string | null;
  readonly expression: string | null;
  /** The bound, `MAXVALUE` for the last range partition. */
  readonly description: string | null;
  readonly ordinal: number | null;
  /** `TABLE_ROWS`: the engine's estimate, not a count. */
  readonly rowsEstimate: number;
}

/** A range partition with a numeric bound: holds day numbers below `lessThan`. */
type BoundedPartition = WeeklyPartition & { readonly rowsEstimate: number };

/** The weekly layout of one table as `schema` creates it. */
export interface WeeklyLayout {
  /** In ascending order (usually one per ISO week). */
  readonly bounded: readonly BoundedPartition[];
  /** The `MAXVALUE` partition (normally `p_max`). */
  readonly max: { readonly name: string; readonly rowsEstimate: number } | null;
}

/** What a table's partitioning is, as far as retention is concerned. */
export type TableLayout =
  | { readonly kind: "unpartitioned" }
  | { readonly kind: "weekly"; readonly layout: WeeklyLayout }
  /** Partitioned some other way (see `schema --check`): cleaned by batched DELETE only. */
  | { readonly kind: "other"; readonly description: string };

/**
 * Classify a table's partitions (rows in any order): `weekly` only for a RANGE on `<column> DIV
 * 86400` with numeric bounds and at most a final `MAXVALUE` partition.
 */
export function classifyLayout(rows: readonly PartitionInfo[], column: string): TableLayout {
  // A subpartitioned table has a row per subpartition: each partition is taken once, with the
  // estimates of its subpartitions added up (a name twice in DROP PARTITION is refused).
  const byName = new Map<string, PartitionInfo>();
  for (const r of rows) {
    if (r.name === null) continue;
    const seen = byName.get(r.name);
    byName.set(r.name, { ...r, rowsEstimate: (seen?.rowsEstimate ?? 0) + r.rowsEstimate });
  }
  const partitions = [...byName.values()].sort((a, b) => (a.ordinal ?? 0) - (b.ordinal ?? 0));
  const first = partitions[0];
  if (first === undefined) return { kind: "unpartitioned" };
  const method = (first.method ?? "").toUpperCase();
  const expression = first.expression ?? "";
  const description = describePartitioning(method, expression);
  const weekly = { method: "RANGE", expression: `${column} DIV ${SECONDS_PER_DAY}` };
  if (!samePartitioning({ method, expression }, weekly)) return { kind: "other", description };
  const bounded: BoundedPartition[] = [];
  let max: WeeklyLayout["max"] = null;
  for (const [index, p] of partitions.entries()) {
    const bound = (p.description ?? "").trim();
    if (bound.toUpperCase() === "MAXVALUE") {
      if (index !== partitions.length - 1) return { kind: "other", description };
      max = { name: p.name ?? "", rowsEstimate: p.rowsEstimate };
      continue;
    }
    const lessThan = Number(bound);
    if (!Number.isSafeInteger(lessThan)) return { kind: "other", description };
    bounded.push({ name: p.name ?? "", lessThan, rowsEstimate: p.rowsEstimate });
  }
  return { kind: "weekly", layout: { bounded, max } };
}

/** Day number of an instant (UTC days, as `<time> DIV 86400` computes them). */
export function dayNumber(now: Date): number {
  return Math.floor(now.getTime() / 1000 / SECONDS_PER_DAY);
}

/** The top bound after every run, as `schema` lays out a table: no coming week's row in `p_max`. */
export function aheadTarget(today: number): number {
  return mondayOf(today) + 7 * INITIAL_WEEKLY_PARTITIONS;
}

/**
 * The weekly partitions that continue a layout from its top bound `from` up to `target`, each
 * named after the ISO week it covers. Without bounded partitions (`from` null) the first new one
 * is the week of `firstDay`.
 *
 * @throws {Error} When a generated name is taken (a layout that was edited by hand).
 */
export function weeksUpTo(
  from: number | null,
  firstDay: number,
  target: number,
  taken: ReadonlySet<string>,
): WeeklyPartition[] {
  const partitions: WeeklyPartition[] = [];
  // Without bounded partitions one is laid out whatever the target: a whole week, as the first
  // partition of a range layout has no lower end.
  let bound = from ?? mondayOf(firstDay);
  while (bound < target || (from === null && partitions.length === 0)) {
    const next = mondayOf(bound) + 7;
    partitions.push({ name: weekName(next - 7), lessThan: next });
    bound = next;
  }
  const clash = partitions.find((p) => taken.has(p.name.toLowerCase()));
  if (clash !== undefined) {
    throw new Error(
      `Cannot lay out partition ${clash.name}: a partition of that name exists with another range ` +
        "(a layout made by hand): rename it, or lay the table out in ISO weeks, Monday to Monday " +
        "(docs/retention.md#layout); until then old rows are deleted row by row",
    );
  }
  return partitions;
}

/** {@linkcode weeksUpTo} from a layout's top bound; names compared lower-cased, as MySQL does. */
function weeksAfter(layout: WeeklyLayout, firstDay: number, target: number): WeeklyPartition[] {
  const names = new Set(layout.bounded.map((p) => p.name.toLowerCase()));
  if (layout.max !== null) names.add(layout.max.name.toLowerCase());
  return weeksUpTo(layout.bounded.at(-1)?.lessThan ?? null, firstDay, target, names);
}

/** What one nightly run does to a weekly-partitioned table. */
export interface MaintenancePlan {
  /** Weeks to add ahead (split from an empty `p_max`, or added when there is none). */
  readonly add: readonly WeeklyPartition[];
  /** Partitions whose whole range is older than the cutoff: dropped in one statement. */
  readonly drop: readonly BoundedPartition[];
  /**
   * Where rows older than the cutoff can remain: the partition that straddles it, `"table"`
   * (when `p_max` holds rows, old rows may sit in it too), or null for nowhere.
   */
  readonly trim: string | "table" | null;
  /** Weeks not laid out because `p_max` holds rows (the explicit repair's job), else 0. */
  readonly blockedWeeks: number;
}

/**
 * Plan the nightly maintenance of one table: add ahead first (so the table never runs out of
 * weeks), then drop, then the batched DELETE inside `trim`.
 *
 * @param cutoff Unix seconds; rows strictly older go. Null when the table's age is 0 (only
 *   the weeks ahead are laid out).
 */
export function planMaintenance(
  layout: WeeklyLayout,
  today: number,
  cutoff: number | null,
  maxHasRows: boolean,
): MaintenancePlan {
  const needed = weeksAfter(layout, today, aheadTarget(today));
  const add = maxHasRows ? [] : needed;
  const blockedWeeks = maxHasRows ? needed.length : 0;
  if (cutoff === null) return { add, drop: [], trim: null, blockedWeeks };

  // On the layout after the weeks ahead were added: a partition holds times below its bound ×
  // 86400, so at or before the cutoff every row it can hold is older.
  const after = [...layout.bounded, ...add.map((p) => ({ ...p, rowsEstimate: 0 }))];
  let drop = after.filter((p) => p.lessThan * SECONDS_PER_DAY <= cutoff);
  // A table keeps at least one partition: without a MAXVALUE partition the newest bounded one
  // stays (and is trimmed instead).
  if (layout.max === null && drop.length === after.length) drop = drop.slice(0, -1);
  let trim: MaintenancePlan["trim"];
  if (maxHasRows) {
    trim = "table";
  } else {
    // Only the lowest partition left can hold older rows; its range starts at the last dropped
    // bound (nothing dropped: the first partition has no lower end).
    const first = after[drop.length]?.name ?? layout.max?.name ?? null;
    const lower = drop.at(-1)?.lessThan ?? null;
    trim = first === null || (lower !== null && lower * SECONDS_PER_DAY >= cutoff) ? null : first;
  }
  return { add, drop, trim, blockedWeeks };
}

/**
 * The existing partitions that hold, before the plan runs, the rows its DELETE will remove (what
 * a dry run counts): not the dropped ones, and the rows of a week to add are still in `p_max`.
 */
export function partitionsToTrim(layout: WeeklyLayout, plan: MaintenancePlan): string[] {
  const { trim } = plan;
  if (trim === null) return [];
  const max = layout.max === null ? [] : [layout.max.name];
  if (trim === "table") {
    const dropped = new Set(plan.drop.map((p) => p.name));
    return [...layout.bounded.filter((p) => !dropped.has(p.name)).map((p) => p.name), ...max];
  }
  if (layout.bounded.some((p) => p.name === trim) || max.includes(trim)) return [trim];
  return max;
}

/**
 * The next step of the repair: split the oldest weeks off `p_max` until the layout covers its
 * newest row and the weeks ahead. Each step is one atomic `REORGANIZE PARTITION`, so an
 * interrupted repair continues from the layout the server has.
 *
 * @param rowDays Oldest and newest day number of the rows in `p_max`, or null when it is empty.
 * @returns The step, or null when nothing is left to do.
 */
export function planRepairStep(
  layout: WeeklyLayout,
  today: number,
  rowDays: { readonly min: number; readonly max: number } | null,
): { readonly add: readonly WeeklyPartition[]; readonly weeksLeft: number } | null {
  let target = aheadTarget(today);
  if (rowDays !== null) target = Math.max(target, mondayOf(rowDays.max) + 7);
  const firstDay = Math.min(today, rowDays?.min ?? today);
  const weeks = weeksAfter(layout, firstDay, target);
  if (weeks.length === 0) return null;
  const add = weeks.slice(0, repairStepWeeks(weeks.length));
  return { add, weeksLeft: weeks.length - add.length };
}

function repairStepWeeks(left: number): number {
  return Math.max(REPAIR_MIN_WEEKS_PER_STEP, Math.ceil(left / 2));
}

/** How many `REORGANIZE PARTITION` steps a repair of `weeks` weeks takes. */
export function repairStepCount(weeks: number): number {
  let steps = 0;
  for (let left = weeks; left > 0; steps++) left -= repairStepWeeks(left);
  return steps;
}

/**
 * The statement that adds weeks above the top bound: a `REORGANIZE` of the MAXVALUE partition
 * into the new weeks and itself (cheap while it is empty), or `ADD PARTITION` without one.
 */
export function addPartitionsStatement(
  table: string,
  layout: WeeklyLayout,
  add: readonly WeeklyPartition[],
): string {
  const definitions = add.map((p) =>
    `PARTITION ${quoteIdentifier(p.name)} VALUES LESS THAN (${p.lessThan})`
  );
  if (layout.max === null) {
    return `ALTER TABLE ${quoteIdentifier(table)} ADD PARTITION (${definitions.join(", ")})`;
  }
  const max = quoteIdentifier(layout.max.name);
  return `ALTER TABLE ${quoteIdentifier(table)} REORGANIZE PARTITION ${max} INTO (${
    [...definitions, `PARTITION ${max} VALUES LESS THAN MAXVALUE`].join(", ")
  })`;
}

/** The one statement that drops expired partitions (a metadata operation, whatever they hold). */
export function dropPartitionsStatement(table: string, drop: readonly { name: string }[]): string {
  return `ALTER TABLE ${quoteIdentifier(table)} DROP PARTITION ${
    drop.map((p) => quoteIdentifier(p.name)).join(", ")
  }`;
}

// Carrying a plan out

/** A table and the time column (Unix seconds) its rows expire by. */
export interface RetentionTarget {
  readonly table: string;
  readonly column: string;
}

/** Start-up bound: connect plus `SELECT 1`. */
const PING_TIMEOUT_MS = 5_000;
/**
 * `lock_wait_timeout` (seconds) of the cleanup session. An `ALTER TABLE` waiting for a metadata
 * lock makes every later statement on that table wait behind it, the worker's inserts
 * included; giving up after a few seconds keeps the worker writing.
 */
const ALTER_LOCK_WAIT_SECONDS = 10;

/**
 * Attempts of one chunk's DELETE that meets a deadlock or lock wait timeout: the chunk walks the
 * week the worker writes into, whose inserts take the same gaps (docs/retention.md#bounded).
 */
const CHUNK_LOCK_ATTEMPTS = 10;

/** `DELETE …` or `SELECT …` restricted to some partitions, or over the whole table. */
function partitionClause(partitions: string | readonly string[]): string {
  return partitions === "table"
    ? ""
    : ` PARTITION (${[partitions].flat().map(quoteIdentifier).join(", ")})`;
}

/** One `cleanup` run's named lock per database (MySQL 8 refuses names over 64 characters). */
const RUN_LOCK = "LEFT(CONCAT('statusengine_cleanup.', DATABASE()), 64)";

/**
 * Another `cleanup` run holds the database's lock (docs/operations.md#cleanup-exit). The server
 * finishes a statement whose client went away: after a SIGTERM the lock stays with that
 * statement, which is what a rerun then meets.
 */
function cleanupRunning(database: string, holder: number | null): WorkerError {
  return new WorkerError(
    "cleanup_running",
    `Another cleanup is running on "${database}" (MySQL connection id ${
      holder ?? "unknown"
    }; a run stopped during an ALTER TABLE holds it until the server has finished that ` +
      "statement): not starting a second one",
  );
}

/**
 * The one dedicated connection of a `cleanup` run, opened on first use and reopened after
 * {@linkcode discard}; `signal` abandons the statement in flight (its connection is closed).
 * Table and partition names never come from configuration.
 */
export class CleanupSession {
  readonly #options: MysqlUrlOptions;
  readonly #signal: AbortSignal;
  #conn: MysqlConnection | undefined;
  /** Server ids of this run's connections, the open one and those it gave up. */
  readonly #ownIds = new Set<number>();

  constructor(options: MysqlUrlOptions, signal: AbortSignal) {
    this.#options = options;
    this.#signal = signal;
  }

  /** Connect and answer within the bound (the connection is reused afterwards). */
  async open(): Promise<MysqlConnection> {
    if (this.#conn !== undefined) return this.#conn;
    const { connection } = await connectMysql(this.#options, {
      timeoutMs: PING_TIMEOUT_MS,
      signal: this.#signal,
    });
    this.#conn = connection;
    await connection.query(`SET SESSION lock_wait_timeout = ${ALTER_LOCK_WAIT_SECONDS}`);
    await this.#lockRun(connection);
    return connection;
  }

  /**
   * One run per database at a time: a second one would plan from a layout the first is changing
   * and fail on its ALTERs. The lock is the connection's, so it also outlives an abandoned ALTER
   * the server is still running. Per node on Galera; refused (1235): the run goes unguarded.
   */
  async #lockRun(connection: MysqlConnection): Promise<void> {
    let row: mysql.RowDataPacket | undefined;
    try {
      [[row]] = await connection.query<mysql.RowDataPacket[]>(
        `SELECT GET_LOCK(${RUN_LOCK}, 0) AS got, IS_USED_LOCK(${RUN_LOCK}) AS holder, ` +
          "DATABASE() AS db, CONNECTION_ID() AS id",
      );
    } catch (err: unknown) {
      if ((err as { errno?: unknown } | null)?.errno === 1235) return;
      throw err;
    }
    this.#ownIds.add(Number(row?.id));
    if (Number(row?.got) === 1) return;
    // Held by a connection this run gave up (the server still runs what it left): the run goes
    // on unguarded, as it would without the lock.
    if (this.#ownIds.has(Number(row?.holder))) return;
    this.discard();
    throw cleanupRunning(
      String(row?.db),
      row?.holder === null || row?.holder === undefined ? null : Number(row.holder),
    );
  }

  /** On abort the connection is closed and the call rejects at once (`interrupted`). */
  async #query<T extends mysql.RowDataPacket[] | mysql.ResultSetHeader>(
    sql: string,
    params: unknown[] = [],
  ): Promise<T> {
    const conn = await this.open();
    const [result] = await unlessAborted(
      conn.query<T>(sql, params),
      this.#signal,
      () => this.discard(),
    );
    return result;
  }

  /** The partitions of one table from `information_schema`. */
  async readLayout(target: RetentionTarget): Promise<TableLayout> {
    const rows = await this.#query<mysql.RowDataPacket[]>(
      `SELECT PARTITION_NAME AS name, PARTITION_METHOD AS method,
            PARTITION_EXPRESSION AS expression, PARTITION_DESCRIPTION AS description,
            PARTITION_ORDINAL_POSITION AS ordinal, TABLE_ROWS AS est
       FROM information_schema.PARTITIONS
      WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
      [target.table],
    );
    // No row: the table is missing; this fails with the error naming it.
    if (rows.length === 0) {
      await this.#query(`SELECT 1 FROM ${quoteIdentifier(target.table)} LIMIT 0`);
    }
    const text = (v: unknown) => v === null ? null : String(v);
    const info: PartitionInfo[] = rows.map((r) => ({
      name: text(r.name),
      method: text(r.method),
      expression: text(r.expression),
      description: text(r.description),
      ordinal: r.ordinal === null ? null : Number(r.ordinal),
      rowsEstimate: Number(r.est ?? 0),
    }));
    return classifyLayout(info, target.column);
  }

  /** Whether a partition holds at least one row (reads one row, never counts). */
  async partitionHasRows(table: string, partition: string): Promise<boolean> {
    const rows = await this.#query<mysql.RowDataPacket[]>(
      `SELECT 1 FROM ${quoteIdentifier(table)} PARTITION (${quoteIdentifier(partition)}) LIMIT 1`,
    );
    return rows.length > 0;
  }

  /** How many rows older than the cutoff the partitions hold, counting at most `limit`. */
  async countOlder(
    target: RetentionTarget,
    partitions: string | "table" | readonly string[],
    cutoff: number,
    limit?: number,
  ): Promise<number> {
    if (partitions !== "table" && partitions.length === 0) return 0;
    const rows = await this.#query<mysql.RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM (SELECT 1 FROM ${quoteIdentifier(target.table)}${
        partitionClause(partitions)
      } WHERE ${quoteIdentifier(target.column)} < ?${
        limit === undefined ? "" : ` LIMIT ${limit}`
      }) AS old_rows`,
      [cutoff],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /**
   * Delete the rows older than the cutoff of the next chunk of `batchSize` rows along the primary
   * key (after `after`), inside one partition or the whole table: one statement reads the chunk's
   * last key, one deletes the old rows up to it (docs/retention.md#bounded). The PARTITION clause
   * keeps it inside the straddling week: MySQL cannot prune `start_time < ?` through
   * `start_time DIV 86400`.
   *
   * @returns Rows deleted, and the key to continue after; `undefined` once the walk is done.
   */
  async deleteOlderChunk(
    target: RetentionTarget,
    partition: string | "table",
    cutoff: number,
    batchSize: number,
    after: readonly unknown[] | undefined,
  ): Promise<{ deleted: number; next: readonly unknown[] | undefined }> {
    const def = (TABLES as Partial<Record<string, (typeof TABLES)[TableName]>>)[target.table];
    const key = def?.primaryKey ?? [];
    const table = `${quoteIdentifier(target.table)}${partitionClause(partition)}`;
    // Without a key, or with an index led by the time column (logentries, the tombstones), which
    // takes the old rows as a range, a plain `DELETE … LIMIT n` examines only them.
    if (key.length === 0 || def?.indexes.some((i) => i.columns[0] === target.column)) {
      const deleted = await this.#delete(
        `DELETE FROM ${table} WHERE ${quoteIdentifier(target.column)} < ? LIMIT ${batchSize}`,
        [cutoff],
      );
      return { deleted, next: deleted < batchSize ? undefined : [] };
    }
    const columns = key.map(quoteIdentifier).join(", ");
    const from = after === undefined ? undefined : keyBound(key, "", ">", after);
    const read = await this.#query<mysql.RowDataPacket[]>(
      `SELECT ${columns} FROM ${table}${from === undefined ? "" : ` WHERE ${from.sql}`} ` +
        `ORDER BY ${columns} LIMIT 1 OFFSET ${batchSize - 1}`,
      from?.values ?? [],
    );
    const last = read[0];
    const lastKey = last === undefined ? undefined : key.map((c) => last[c]);
    const upTo = lastKey === undefined ? undefined : keyBound(key, "", "<=", lastKey);
    const range = [from, upTo].filter((b) => b !== undefined);
    const deleted = await this.#delete(
      `DELETE FROM ${table} WHERE ${quoteIdentifier(target.column)} < ?${
        range.map((b) => ` AND ${b.sql}`).join("")
      }`,
      [cutoff, ...range.flatMap((b) => b.values)],
    );
    return { deleted, next: lastKey };
  }

  /**
   * A DELETE, sent again when a lock conflict with a writer rolled it back (the first time at
   * once, as the writers do): deleting old rows again is harmless, and one conflict must not
   * leave the table's old rows for the next night with exit 1.
   */
  async #delete(sql: string, params: unknown[]): Promise<number> {
    const pause = new Backoff(MYSQL_HOLD);
    for (let attempt = 1;; attempt++) {
      try {
        return (await this.#query<mysql.ResultSetHeader>(sql, params)).affectedRows;
      } catch (err: unknown) {
        if (classifyMysqlError(err) !== "lock" || attempt === CHUNK_LOCK_ATTEMPTS) throw err;
        if (attempt > 1) await delay(pause.next(), { signal: this.#signal });
      }
    }
  }

  /** Oldest and newest day number in a partition, and its newest time (Unix s); null if empty. */
  async rowDaysIn(
    target: RetentionTarget,
    partition: string,
  ): Promise<{ min: number; max: number; newest: number } | null> {
    const column = quoteIdentifier(target.column);
    const rows = await this.#query<mysql.RowDataPacket[]>(
      `SELECT MIN(${column}) AS lo, MAX(${column}) AS hi FROM ${quoteIdentifier(target.table)}
      PARTITION (${quoteIdentifier(partition)})`,
    );
    const row = rows[0];
    if (row === undefined || row.lo === null || row.hi === null) return null;
    return {
      min: Math.floor(Number(row.lo) / SECONDS_PER_DAY),
      max: Math.floor(Number(row.hi) / SECONDS_PER_DAY),
      newest: Number(row.hi),
    };
  }

  /** {@linkcode addPartitionsStatement} */
  async addPartitions(
    table: string,
    layout: WeeklyLayout,
    add: readonly WeeklyPartition[],
  ): Promise<void> {
    await this.#query(addPartitionsStatement(table, layout, add));
  }

  /** {@linkcode dropPartitionsStatement} */
  async dropPartitions(table: string, drop: readonly { name: string }[]): Promise<void> {
    await this.#query(dropPartitionsStatement(table, drop));
  }

  /**
   * Which of {@link PARTITION_PRIVILEGES} the session's account (as GRANT names it) lacks on one
   * of `tables`, from the global, database and table grants `information_schema` lists, and the
   * GRANT that adds them. Grants through a role or a database pattern are not seen: the answer
   * is advice.
   */
  async missingPartitionPrivileges(
    tables: readonly string[],
  ): Promise<{ account: string; database: string; missing: string[]; grant: string }> {
    const rows = await this.#query<mysql.RowDataPacket[]>(
      `SELECT g.account, DATABASE() AS db, p.priv, p.tbl FROM
         (SELECT CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                        SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') AS account) AS g
       LEFT JOIN (
         SELECT GRANTEE AS grantee, PRIVILEGE_TYPE AS priv, NULL AS tbl
           FROM information_schema.USER_PRIVILEGES
         UNION ALL
         SELECT GRANTEE, PRIVILEGE_TYPE, NULL FROM information_schema.SCHEMA_PRIVILEGES
          WHERE TABLE_SCHEMA = DATABASE()
         UNION ALL
         SELECT GRANTEE, PRIVILEGE_TYPE, TABLE_NAME FROM information_schema.TABLE_PRIVILEGES
          WHERE TABLE_SCHEMA = DATABASE()
       ) AS p ON p.grantee = g.account`,
    );
    const everywhere = new Set<string>();
    const perTable = new Map<string, Set<string>>();
    for (const r of rows) {
      if (r.priv === null) continue;
      const priv = String(r.priv).toUpperCase();
      if (r.tbl === null) everywhere.add(priv);
      else perTable.set(priv, (perTable.get(priv) ?? new Set()).add(String(r.tbl)));
    }
    const missing = PARTITION_PRIVILEGES.filter((priv) =>
      !everywhere.has(priv) && !tables.every((t) => perTable.get(priv)?.has(t) === true)
    );
    const account = String(rows[0]?.account ?? "");
    const database = String(rows[0]?.db ?? "");
    const grant = `GRANT ${PARTITION_PRIVILEGES.join(", ")} ON \`${database}\`.* TO ${account}`;
    return { account, database, missing, grant };
  }

  /** Drop the connection: the next statement starts on a fresh one. */
  discard(): void {
    if (this.#conn !== undefined) closeMysqlNow(this.#conn);
    this.#conn = undefined;
  }

  /** Close politely; fall back to a hard close. */
  async close(): Promise<void> {
    const conn = this.#conn;
    this.#conn = undefined;
    if (conn !== undefined) await endMysql(conn);
  }
}
