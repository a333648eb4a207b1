/**
 * mysql2's connection to the server over `Deno.connect`, in place of Node's `net.Socket`.
 *
 * mysql2 talks to its socket through a handful of stream methods and events; it accepts any
 * object offering them through its `stream` option. Deno implements `net.Socket` in JavaScript
 * on top of its own connections, and every write through it cost 26–40 µs of CPU where
 * `Deno.Conn.write` costs 3–10 µs (bench: 21-byte and 30 KB writes on loopback): a bulk INSERT
 * is one write and one read, so at the default batch of 100 rows that is about a tenth of the
 * worker's CPU per row. This class offers exactly what mysql2 uses:
 *
 * - `write(data, cb)`: queued in order, written by one loop (several queued packets in one
 *   write), `cb` called once written or failed; never refuses (mysql2 runs one command per
 *   connection at a time, so the queue stays short);
 * - events `data` (a fresh Buffer per read: mysql2's parser keeps parts of it), `end` (the
 *   server closed), `error`, `close` (once, last);
 * - `destroy()`, `end()`, `destroyed`, `pause()`/`resume()` (stop and restart reading),
 *   `setNoDelay()`, `setKeepAlive()`.
 *
 * Errors carry the `code` Node would give them (`ECONNREFUSED`, `ECONNRESET`, …), which
 * mysql2 and the error classes read. TLS stays with `net.Socket`: mysql2 upgrades a Node
 * socket, so connections with `ssl` are not given this stream.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import { concatBytes } from "../util/bytes.ts";

/** Where to connect. */
export interface DenoSocketTarget {
  readonly host?: string;
  readonly port?: number;
  readonly socketPath?: string;
}

/** Node's error code for Deno's error classes, for mysql2 and the error classification. */
const NODE_CODES: Readonly<Record<string, string>> = {
  ConnectionRefused: "ECONNREFUSED",
  ConnectionReset: "ECONNRESET",
  ConnectionAborted: "ECONNABORTED",
  BrokenPipe: "EPIPE",
  TimedOut: "ETIMEDOUT",
  NotConnected: "ENOTCONN",
  AddrNotAvailable: "EADDRNOTAVAIL",
  AddrInUse: "EADDRINUSE",
  NotFound: "ENOENT",
  PermissionDenied: "EACCES",
  UnexpectedEof: "ECONNRESET",
};

function withNodeCode(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const carrier = e as Error & { code?: unknown };
  if (typeof carrier.code !== "string") {
    const code = NODE_CODES[e.name];
    if (code !== undefined) carrier.code = code;
  }
  return e;
}

const READ_BUFFER_BYTES = 64 * 1024;
const ENCODER = new TextEncoder();

type WriteCallback = (err?: Error | null) => void;

/** A connection to MySQL for mysql2's `stream` option. */
export class DenoSocket extends EventEmitter {
  /** True once destroyed or closed; mysql2 reads it. */
  destroyed = false;
  #conn: Deno.Conn | undefined;
  #pending: Uint8Array[] = [];
  #callbacks: (WriteCallback | undefined)[] = [];
  #writing = false;
  #endAfterWrites = false;
  #paused = false;
  #resume: (() => void) | undefined;
  #closeEmitted = false;

  /** @param target Host and port, or a Unix socket path. */
  constructor(target: DenoSocketTarget) {
    super();
    const connecting = target.socketPath !== undefined && target.socketPath !== ""
      ? Deno.connect({ transport: "unix", path: target.socketPath })
      : Deno.connect({ hostname: target.host ?? "localhost", port: target.port ?? 3306 });
    connecting.then(
      (conn) => {
        if (this.destroyed) {
          conn.close();
          return;
        }
        this.#conn = conn;
        try {
          if ("setNoDelay" in conn) {
            (conn as Deno.TcpConn).setNoDelay(true);
            (conn as Deno.TcpConn).setKeepAlive(true);
          }
          this.emit("connect");
        } catch (err: unknown) {
          // Never an unhandled rejection: the connection ends as an error.
          this.#fail(err);
          return;
        }
        void this.#writeLoop();
        void this.#readLoop(conn);
      },
      (err: unknown) => this.#fail(err),
    );
  }

  /** No-op: TCP_NODELAY is always set. */
  setNoDelay(): this {
    return this;
  }

  /** Keep-alive as asked (TCP only). */
  setKeepAlive(enable = false): this {
    const conn = this.#conn;
    if (conn !== undefined && "setKeepAlive" in conn) (conn as Deno.TcpConn).setKeepAlive(enable);
    return this;
  }

  /**
   * Queue bytes for the server.
   *
   * @param data The bytes; not modified until `cb` ran (as with Node's sockets).
   * @param cb Called once written, or with the error that stopped it.
   * @returns Always true: nothing buffers beyond what mysql2 wrote.
   */
  write(data: Uint8Array | string, cb?: WriteCallback): boolean {
    const bytes = typeof data === "string" ? ENCODER.encode(data) : data;
    if (this.destroyed || this.#endAfterWrites) {
      const err = withNodeCode(Object.assign(new Error("This socket has been ended"), {
        code: "EPIPE",
      }));
      queueMicrotask(() => cb?.(err));
      return false;
    }
    this.#pending.push(bytes);
    this.#callbacks.push(cb);
    if (this.#conn !== undefined && !this.#writing) void this.#writeLoop();
    return true;
  }

  /** Close after what was written has gone out. */
  end(): this {
    if (this.destroyed) return this;
    this.#endAfterWrites = true;
    if (!this.#writing && this.#pending.length === 0) this.destroy();
    return this;
  }

  /** Close now; pending writes fail. */
  destroy(err?: Error): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    try {
      this.#conn?.close();
    } catch {
      // Already closed.
    }
    const callbacks = this.#callbacks;
    this.#pending = [];
    this.#callbacks = [];
    const failure = withNodeCode(
      err ?? Object.assign(new Error("socket destroyed"), {
        code: "ERR_STREAM_DESTROYED",
      }),
    );
    for (const cb of callbacks) cb?.(failure);
    this.#resume?.();
    // As Node's sockets: 'error' and 'close' after the caller's turn, never inside destroy().
    if (err !== undefined) queueMicrotask(() => this.emit("error", err));
    this.#emitClose();
    return this;
  }

  /** Stop reading until {@link resume}. */
  pause(): this {
    this.#paused = true;
    return this;
  }

  /** Read again after {@link pause}. */
  resume(): this {
    this.#paused = false;
    const resume = this.#resume;
    this.#resume = undefined;
    resume?.();
    return this;
  }

  async #writeLoop(): Promise<void> {
    const conn = this.#conn;
    if (conn === undefined || this.#writing) return;
    this.#writing = true;
    try {
      while (this.#pending.length > 0 && !this.destroyed) {
        const chunks = this.#pending;
        const callbacks = this.#callbacks;
        this.#pending = [];
        this.#callbacks = [];
        const data = concatBytes(chunks);
        try {
          let offset = 0;
          while (offset < data.length) offset += await conn.write(data.subarray(offset));
        } catch (err: unknown) {
          const e = withNodeCode(err);
          for (const cb of callbacks) cb?.(e);
          if (!this.destroyed) this.#fail(e);
          return;
        }
        for (const cb of callbacks) {
          try {
            cb?.(null);
          } catch (err: unknown) {
            this.#fail(err);
            return;
          }
        }
      }
    } finally {
      this.#writing = false;
    }
    if (this.#endAfterWrites && !this.destroyed) this.destroy();
  }

  async #readLoop(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(READ_BUFFER_BYTES);
    for (;;) {
      if (this.#paused && !this.destroyed) {
        await new Promise<void>((resolve) => (this.#resume = resolve));
      }
      if (this.destroyed) return;
      let n: number | null;
      try {
        n = await conn.read(buffer);
      } catch (err: unknown) {
        if (!this.destroyed) this.#fail(err);
        return;
      }
      if (this.destroyed) return;
      if (n === null) {
        this.emit("end");
        this.destroyed = true;
        try {
          conn.close();
        } catch {
          // Already closed.
        }
        this.#emitClose();
        return;
      }
      try {
        // A copy: mysql2's parser keeps references into what it was given.
        this.emit("data", Buffer.from(buffer.slice(0, n).buffer));
      } catch (err: unknown) {
        // A listener that throws ends this connection as an error, not the process.
        this.#fail(err);
        return;
      }
    }
  }

  #fail(err: unknown): void {
    this.destroy(withNodeCode(err));
  }

  #emitClose(): void {
    if (this.#closeEmitted) return;
    this.#closeEmitted = true;
    queueMicrotask(() => this.emit("close", false));
  }
}

/**
 * mysql2's `stream` option: a {@link DenoSocket} per new connection.
 *
 * @param opts What mysql2 passes: its connection config.
 * @returns The socket.
 */
export function denoSocketStream(
  opts: { readonly config: DenoSocketTarget },
): DenoSocket {
  return new DenoSocket({
    ...(opts.config.host === undefined ? {} : { host: opts.config.host }),
    ...(opts.config.port === undefined ? {} : { port: opts.config.port }),
    ...(opts.config.socketPath === undefined ? {} : { socketPath: opts.config.socketPath }),
  });
}
