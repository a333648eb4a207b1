/**
 * Every place where the worker reaches into mysql2 past its public API, in one module, so that a
 * mysql2 upgrade is checked here and nowhere else (docs/toolchain.md#upgrading-mysql2; `deno task
 * canary`). Checked against mysql2 3.24.6, the version deno.json pins exactly. Each contact
 * degrades to mysql2's own behaviour when the part it needs is missing:
 *
 * - the execute command (`Execute.prototype.start` and what it uses): the bulk INSERTs' packets
 *   are encoded by execute_packet.ts in a fraction of mysql2's CPU; else mysql2 encodes them;
 * - a connection's prepared-statement cache (`_statements`): placeholder descriptions that carry
 *   nothing are dropped; else they are kept;
 * - a connection's socket (`stream`): `destroy()` only half-closes it and still waits for the
 *   statement in flight; a stopped `cleanup` drops the link at once;
 * - the pool's `releaseConnection` and `_freeConnections`: after a move to another MySQL host
 *   (failover.ts) the connections to the one left are closed; else they end when their host
 *   drops them;
 * - the pool's `connection` event, which passes the core (callback-API) connection whatever the
 *   pool's flavour: each new connection runs the strict-mode statement first (connect.ts); else
 *   an error is logged for each and the server's mode applies;
 * - the config a pool hands each new connection (a copy per connection): a TLS connection to
 *   another host of the list checks that host's certificate; else the first host's name.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import mysql from "mysql2";
import type { SqlValue } from "../events/mod.ts";
import { CLIENT_QUERY_ATTRIBUTES, encodeExecutePacket, TYPE_NULL } from "./execute_packet.ts";

// ---------------------------------------------------------------------------------------------
// The execute command: the bulk INSERTs' own encoder

/** Stand-ins mysql2 is given for the parameters of a bulk INSERT, and those parameters. */
const BULK = new WeakMap<readonly unknown[], readonly unknown[]>();

/**
 * An empty stand-in for the parameters of a bulk INSERT, which the hook replaces with `values`
 * when the command starts: mysql2 checks every parameter with a callback before it queues a
 * command (30,100 calls for a 700-row servicestatus INSERT); the encoder checks them anyway.
 */
export function bulkParameters(values: readonly unknown[]): readonly unknown[] {
  if (installed !== "yes") return values;
  const standIn: unknown[] = [];
  BULK.set(standIn, values);
  return standIn;
}

interface ExecuteCommand {
  parameters: unknown;
  statement?: { id: number; parameters?: unknown };
  _executeOptions?: { attributes?: unknown };
  _connection: unknown;
  options: unknown;
  queryTimeout: ReturnType<typeof setTimeout> | null;
  onResult?: (err: unknown) => void;
  emit(event: string, ...args: unknown[]): boolean;
  _setTimeout(): void;
}

interface ExecuteConnection {
  config: { clientFlags: number; charsetNumber: number };
  serverCapabilityFlags?: number;
  writePacket(packet: unknown): void;
}

type Start = (this: ExecuteCommand, packet: unknown, connection: ExecuteConnection) => unknown;

interface ExecutePrototype {
  start: Start;
  resultsetHeader: unknown;
  _setTimeout: unknown;
}

/** What mysql2's `Connection.writePacket` needs of a packet. */
class EncodedPacket {
  readonly _name = "Execute";
  readonly buffer: Buffer;
  constructor(bytes: Uint8Array) {
    this.buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  length(): number {
    return this.buffer.length;
  }
  writeHeader(sequenceId: number): void {
    this.buffer[3] = sequenceId;
  }
}

/** Whether mysql2 would use the statement's placeholder descriptions as type hints. */
function hasHints(parameters: unknown): boolean {
  return Array.isArray(parameters) &&
    parameters.some((p) => (p as { columnType?: unknown } | null)?.columnType !== TYPE_NULL);
}

let installed: "yes" | "no" | undefined;
let originalStart: Start | undefined;
let encoded = 0;

/** Statements whose packet this encoder wrote (tests: the bulk INSERTs really take this path). */
export function bulkPacketsEncoded(): number {
  return encoded;
}

/** mysql2's execute command class, found by building one through `Connection.execute` without a connection. */
function findExecutePrototype(): ExecutePrototype | undefined {
  const commands: unknown[] = [];
  const fake = {
    config: {},
    _resolveNamedPlaceholders() {},
    addCommand(command: unknown) {
      commands.push(command);
    },
  };
  try {
    const execute = (mysql.Connection.prototype as unknown as {
      execute: (this: unknown, options: unknown, cb: () => void) => unknown;
    }).execute;
    execute.call(fake, { sql: "SELECT 1", values: [] }, () => {});
  } catch {
    return undefined;
  }
  const command = commands.find((c) =>
    (c as { constructor?: { name?: string } } | null)?.constructor?.name === "Execute"
  );
  if (command === undefined) return undefined;
  const proto = Object.getPrototypeOf(command) as Partial<ExecutePrototype>;
  const complete = typeof proto.start === "function" && proto.resultsetHeader !== undefined &&
    typeof proto._setTimeout === "function";
  return complete ? proto as ExecutePrototype : undefined;
}

/** Let this encoder write the marked bulk INSERTs of every mysql2 connection. Idempotent. */
export function installBulkExecuteEncoder(): boolean {
  if (installed !== undefined) return installed === "yes";
  const proto = findExecutePrototype();
  const queryOptions = ((mysql as unknown as { ConnectionConfig?: unknown }).ConnectionConfig as
    | { queryOptions?: (config: unknown, overrides: unknown) => unknown }
    | undefined)?.queryOptions;
  const charsets = mysql.CharsetToEncoding as unknown as readonly string[] | undefined;
  if (proto === undefined || typeof queryOptions !== "function" || !Array.isArray(charsets)) {
    installed = "no";
    return false;
  }
  const original = proto.start;
  originalStart = original;
  const resultsetHeader = proto.resultsetHeader;
  proto.start = function (this: ExecuteCommand, packet, connection) {
    const values = Array.isArray(this.parameters) ? BULK.get(this.parameters) : undefined;
    // mysql2's own encoder, when it has to take over, gets the real values.
    if (values !== undefined) this.parameters = values;
    if (
      values === undefined || this.statement === undefined ||
      hasHints(this.statement.parameters) || this._executeOptions?.attributes !== undefined ||
      charsets[connection.config.charsetNumber] !== "utf8"
    ) {
      return original.call(this, packet, connection);
    }
    // As mysql2's own start: options, timeout, one packet, then its result-set states.
    this._connection = connection;
    this.options = queryOptions(connection.config, this._executeOptions);
    this._setTimeout();
    const clientFlags = connection.config.clientFlags & (connection.serverCapabilityFlags ?? 0);
    try {
      const bytes = encodeExecutePacket(
        this.statement.id,
        values as SqlValue[],
        (clientFlags & CLIENT_QUERY_ATTRIBUTES) !== 0,
      );
      connection.writePacket(new EncodedPacket(bytes));
      encoded++;
    } catch (error: unknown) {
      if (this.queryTimeout !== null) {
        clearTimeout(this.queryTimeout);
        this.queryTimeout = null;
      }
      if (this.onResult !== undefined) this.onResult(error);
      else this.emit("error", error);
      return null;
    }
    return resultsetHeader;
  };
  installed = "yes";
  return true;
}

/**
 * The packet mysql2's own encoder writes for these values, header included (tests compare). A
 * payload of 16 MiB − 1 or more has no header of its own: the connection splits it into packets
 * with headers of theirs, so its first four bytes are left as mysql2 allocated them.
 */
export function mysql2ExecutePacket(
  statementId: number,
  values: readonly SqlValue[],
  queryAttributes: boolean,
): Uint8Array {
  if (!installBulkExecuteEncoder() || originalStart === undefined) {
    throw new Error("the bulk execute encoder is not installed");
  }
  let written: Uint8Array | undefined;
  const flags = queryAttributes ? CLIENT_QUERY_ATTRIBUTES : 0;
  const connection: ExecuteConnection = {
    config: { clientFlags: flags, charsetNumber: 224 },
    serverCapabilityFlags: flags,
    writePacket(packet: unknown) {
      const p = packet as { buffer: Uint8Array; writeHeader(seq: number): void };
      if (p.buffer.length - 4 < 0xffffff) p.writeHeader(0);
      written = new Uint8Array(p.buffer);
    },
  };
  const command = {
    parameters: values,
    statement: { id: statementId },
    _executeOptions: {},
    queryTimeout: null,
    emit: () => false,
    _setTimeout() {},
  } as unknown as ExecuteCommand;
  originalStart.call(command, undefined, connection);
  if (written === undefined) throw new Error("mysql2 wrote no packet");
  return written;
}

// ---------------------------------------------------------------------------------------------
// The prepared-statement cache of a connection
//
// mysql2 keeps the server's description of every placeholder of each prepared statement (30,100
// objects, about 6 MB, per 700-row servicestatus INSERT and connection) only as a type hint, and
// MariaDB describes them all as type NULL. Dropping those took peak RSS 232 → 201 MB
// (bench/pipeline.ts, servicestatus, batch 700, two writers); MySQL 8's real hints are kept.

interface CachedStatement {
  parameters?: unknown;
}

interface StatementCache {
  set(key: unknown, statement: CachedStatement): unknown;
  values(): Iterable<CachedStatement>;
}

function statementCacheOf(connection: unknown): Partial<StatementCache> | undefined {
  // A pool connection of the promise API wraps the core connection in `connection`.
  const core = (connection as { connection?: unknown } | null)?.connection ?? connection;
  return (core as { _statements?: Partial<StatementCache> } | null)?._statements;
}

/** Whether every placeholder description is type NULL (a non-empty array without a hint). */
export function hintsNothing(parameters: unknown): boolean {
  return Array.isArray(parameters) && parameters.length > 0 && !hasHints(parameters);
}

/**
 * From now on, drop the placeholder descriptions of every statement a new connection of `pool`
 * (a mysql2 pool of either flavour) prepares, when they hint nothing.
 */
export function dropEmptyParameterMetadata(
  pool: { on(event: "connection", listener: (connection: unknown) => void): unknown },
): void {
  pool.on("connection", (connection) => {
    const cache = statementCacheOf(connection);
    if (cache === undefined || typeof cache.set !== "function") return;
    const set = cache.set.bind(cache);
    cache.set = (key, statement) => {
      if (hintsNothing(statement.parameters)) statement.parameters = [];
      return set(key, statement);
    };
  });
}

/**
 * Run `sql` on every new connection of `pool` (a mysql2 pool of either flavour) before any
 * statement of a caller: mysql2 emits `connection` before it hands the connection out, and a
 * connection runs its commands in order. If it fails, `onError` is told and the socket destroyed,
 * so the caller's statement fails as a lost connection rather than run without it.
 */
export function runOnEachConnection(
  pool: { on(event: "connection", listener: (connection: unknown) => void): unknown },
  sql: string,
  onError: (err: unknown) => void,
): void {
  pool.on("connection", (connection) => {
    // The event passes the core connection even from the promise pool (its typings say not).
    const core = ((connection as { connection?: unknown } | null)?.connection ??
      connection) as Partial<CoreQueryConnection>;
    if (typeof core.query !== "function") {
      onError(new Error("mysql2's pool passed no connection to run the statement on"));
      return;
    }
    core.query(sql, (err) => {
      if (err === null || err === undefined) return;
      onError(err);
      core.stream?.destroy?.();
    });
  });
}

/** The callback API's query, of a core connection. */
interface CoreQueryConnection {
  query(sql: string, callback: (err: unknown) => void): unknown;
  stream?: { destroy?: () => void };
}

/** The statements a connection has cached (tests look at their placeholder descriptions). */
export function cachedStatements(connection: unknown): CachedStatement[] {
  const cache = statementCacheOf(connection);
  return typeof cache?.values === "function" ? [...cache.values()] : [];
}

// ---------------------------------------------------------------------------------------------
// The socket of a connection

interface CorePool {
  releaseConnection(connection: CorePoolConnection): void;
  _freeConnections?: { toArray(): CorePoolConnection[] };
  _allConnections?: { length: number; get(i: number): CorePoolConnection };
}

interface CorePoolConnection {
  _pool?: unknown;
  /** With TLS, `_parent` (of node:tls) is the socket the TLS socket wraps. */
  stream?: { destroy?: () => void; _parent?: unknown };
  destroy(): void;
}

function corePool(pool: unknown): Partial<CorePool> | undefined {
  return (pool as { pool?: Partial<CorePool> } | null)?.pool;
}

function allConnections(core: Partial<CorePool> | undefined): CorePoolConnection[] {
  const all = core?._allConnections;
  return all === undefined ? [] : Array.from({ length: all.length }, (_, i) => all.get(i));
}

/** Destroy the socket under a promise-API connection, abandoning whatever is in flight. */
export function destroySocket(conn: unknown): void {
  (conn as { connection?: CorePoolConnection } | null)?.connection?.stream?.destroy?.();
}

/**
 * Destroy the socket of every connection an ended pool still has: mysql2's `pool.end()` calls
 * back early (it counts ended ones while removing them), and a connection whose statement a frozen
 * MySQL never answers queues its COM_QUIT behind it, holding the event loop after shutdown.
 */
export function destroyPoolSockets(pool: unknown): void {
  for (const conn of allConnections(corePool(pool))) conn?.stream?.destroy?.();
}

/**
 * Close the pool's connections whose socket `stale` picks: each busy one when it is released, the
 * idle ones whenever the returned sweep runs, and with `busyToo` the busy ones then as well (their
 * socket destroyed: the statement fails as a lost connection). Undefined when the pool's internals
 * moved.
 */
export function retireConnections(
  pool: unknown,
  stale: (socket: unknown) => boolean,
): ((busyToo: boolean) => void) | undefined {
  const core = corePool(pool);
  const release = core?.releaseConnection;
  if (core === undefined || typeof release !== "function") return undefined;
  if (typeof core._freeConnections?.toArray !== "function") return undefined;
  // With TLS, mysql2 swaps `stream` for a TLS socket wrapping the one the `stream` option made.
  const staleConnection = (c: CorePoolConnection) => stale(c.stream) || stale(c.stream?._parent);
  core.releaseConnection = function (this: CorePool, connection: CorePoolConnection) {
    // destroy() takes it out of the pool and hands a waiting caller a new connection.
    if (connection._pool && staleConnection(connection)) connection.destroy();
    else release.call(this, connection);
  };
  return (busyToo) => {
    const free = core._freeConnections?.toArray() ?? [];
    for (const c of free) if (staleConnection(c)) c.destroy();
    if (!busyToo) return;
    for (const c of allConnections(core)) {
      // mysql2's destroy() only half-closes and would still wait for the answer.
      if (!free.includes(c) && staleConnection(c)) c.stream?.destroy?.();
    }
  };
}

/**
 * Make a new pool connection's config (mysql2's `stream` option gets it; the pool gives each
 * connection a copy) name the host its socket goes to: mysql2's TLS upgrade sends that name, checks
 * the certificate against it (`verifyIdentity`) and keys its session cache by it.
 */
export function aimConnectionConfig(opts: { config: object }, host: string, port: number): void {
  Object.assign(opts.config, { host, port });
}
