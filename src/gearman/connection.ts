/**
 * One TCP connection to one gearmand: read loop, write path, heartbeat; reports its end once.
 *
 * @module
 */
import { argText, encodePacket, PACKET, type Packet, PacketParser } from "./codec.ts";
import { abortable, deadline, settledWithin } from "../util/async.ts";
import { concatBytes } from "../util/bytes.ts";
import { parseServerAddress } from "../util/address.ts";
import { errorMessage, hasCode, WorkerError } from "../util/errors.ts";

/** The connection ended for a reason other than a deliberate `close()`. */
export function connectionLost(server: string, message: string, cause?: unknown): WorkerError {
  const text = `Connection to job server ${server} lost: ${message}`;
  return new WorkerError("connection_lost", text, { cause });
}

/** Never established: "lost" would send the operator looking for a connection that never was. */
export function connectFailed(server: string, detail: string, cause?: unknown): WorkerError {
  const text = `Cannot connect to job server ${server}: ${detail}`;
  return new WorkerError("connect_failed", text, { cause });
}

/** Whether `err` ended or never opened a job server connection. */
export function isConnectionError(err: unknown): err is WorkerError {
  return hasCode(err, "connection_lost", "connect_failed", "heartbeat_timeout");
}

export interface ConnectOptions {
  readonly signal?: AbortSignal;
  /** Default 5000 ms. */
  readonly connectTimeoutMs?: number | undefined;
  readonly maxBodySize?: number | undefined;
  readonly truncateOversizeJobs?: boolean;
  /** ECHO_REQ probe after this much silence; 0 disables the heartbeat. */
  readonly heartbeatIntervalMs?: number | undefined;
  /** The peer is dead when nothing arrives this long after a probe. */
  readonly heartbeatTimeoutMs?: number | undefined;
  /** Every received packet except the connection's own ECHO_RES answers. */
  readonly onPacket: (packet: Packet) => void;
}

/** TCP keep-alive alone would notice a dead gearmand only after two hours. */
export const HEARTBEAT_INTERVAL_MS = 15_000;
/** gearmand answers ECHO_REQ at once: 5 s without any packet after a probe means dead. */
export const HEARTBEAT_TIMEOUT_MS = 5_000;

/**
 * A heartbeat tick this late means the whole process stood still (a long GC pause, a suspended
 * VM), not the timer's usual jitter: a reply that arrived meanwhile may still be unread.
 */
const STALLED_TICK_MS = 1_000;

const HEARTBEAT_TOKEN_PREFIX = "se-hb:";
const BARRIER_TOKEN_PREFIX = "se-echo:";
const READ_BUFFER_SIZE = 64 * 1024;

/**
 * One socket to one job server. Every write goes through a single pending write, so packets never
 * interleave; packets queued in the same tick are coalesced into one write (the Nagle/delayed-ACK
 * interaction costs three orders of magnitude otherwise, docs/gearman-protocol.md#throughput).
 */
export class GearmanConnection implements AsyncDisposable {
  readonly server: string;
  readonly #conn: Deno.TcpConn;
  readonly #parser: PacketParser;
  readonly #onPacket: (packet: Packet) => void;
  readonly #heartbeatIntervalMs: number;
  readonly #heartbeatTimeoutMs: number;
  #lastRxAt = performance.now();
  #probeSentAt = -1;
  /** The outstanding probe already got a second timeout after a stalled tick. */
  #probeExtended = false;
  #heartbeatDueAt = 0;
  #heartbeatTimer: ReturnType<typeof setTimeout> | undefined;
  #outbox: Uint8Array[] = [];
  #writing = false;
  #drainedWaiter: (() => void) | undefined;
  #done = false;
  #closing: Promise<void> | undefined;
  #readLoop: Promise<void> = Promise.resolve();
  #echoWaiters = new Map<string, () => void>();
  #echoSeq = 0;
  readonly #ended = Promise.withResolvers<Error | undefined>();

  private constructor(server: string, conn: Deno.TcpConn, options: ConnectOptions) {
    this.server = server;
    this.#conn = conn;
    this.#parser = new PacketParser({ ...options, expect: "RES" });
    this.#onPacket = options.onPacket;
    this.#heartbeatIntervalMs = options.heartbeatIntervalMs ?? HEARTBEAT_INTERVAL_MS;
    this.#heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? HEARTBEAT_TIMEOUT_MS;
  }

  /**
   * Open a connection (TCP_NODELAY and keepalive on) and start reading.
   *
   * @throws {WorkerError} (code `connection_lost` or `connect_failed`) When the server cannot be reached in time.
   * @throws {DOMException} `AbortError` when `options.signal` aborts first.
   */
  static async connect(server: string, options: ConnectOptions): Promise<GearmanConnection> {
    const { hostname, port } = parseServerAddress(server);
    const timeout = AbortSignal.timeout(options.connectTimeoutMs ?? 5000);
    const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
    const conn = await Deno.connect({ hostname, port, transport: "tcp", signal }).catch(
      (err: unknown) => {
        if (options.signal?.aborted) throw options.signal.reason;
        throw connectFailed(server, timeout.aborted ? "connect timed out" : errorMessage(err), err);
      },
    );
    if (options.signal?.aborted) {
      // docs/consumption.md#no-resume-during-shutdown
      conn.close();
      throw options.signal.reason;
    }
    conn.setNoDelay(true);
    conn.setKeepAlive(true);
    const connection = new GearmanConnection(server, conn, options);
    connection.#readLoop = connection.#read();
    connection.#armHeartbeat(connection.#heartbeatIntervalMs);
    return connection;
  }

  /** Settles once: `undefined` after a deliberate {@link close}, else the error that ended it. */
  get closed(): Promise<Error | undefined> {
    return this.#ended.promise;
  }

  get isClosed(): boolean {
    return this.#done;
  }

  /** Queue bytes; those queued in the same tick go out in one write. False when closed. */
  send(bytes: Uint8Array): boolean {
    if (this.#done) return false;
    this.#outbox.push(bytes);
    if (!this.#writing) {
      this.#writing = true;
      queueMicrotask(() => void this.#flushOutbox());
    }
    return true;
  }

  /**
   * Round trip an ECHO_REQ. Replies are ordered, so the answer proves every packet sent before it
   * was processed (docs/gearman-protocol.md#graceful-stop).
   *
   * @throws {WorkerError} (code `connection_lost` or `connect_failed`) If the connection ends first; the signal's reason if it aborts.
   */
  async echo({ signal }: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.#done) throw connectionLost(this.server, "connection is closed");
    signal?.throwIfAborted();
    const token = `${BARRIER_TOKEN_PREFIX}${++this.#echoSeq}`;
    const answer = Promise.withResolvers<void>();
    this.#echoWaiters.set(token, answer.resolve);
    void this.#ended.promise.then((reason) =>
      answer.reject(reason ?? connectionLost(this.server, "connection closed"))
    );
    this.send(encodePacket("REQ", PACKET.ECHO_REQ, [token]));
    try {
      await (signal === undefined ? answer.promise : abortable(answer.promise, signal));
    } finally {
      this.#echoWaiters.delete(token);
    }
  }

  /** Close, after writing what is queued (a lost WORK_COMPLETE is a redelivery). Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown(undefined);
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #read(): Promise<void> {
    try {
      // One read buffer for the connection's lifetime (the parser copies what it keeps): a
      // fresh 64 KiB buffer per read cost more than the copy at 20k small jobs/s. Measured.
      const buf = new Uint8Array(READ_BUFFER_SIZE);
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) {
          this.#fail(connectionLost(this.server, "server closed the connection (EOF)"));
          return;
        }
        if (n === 0) continue; // not EOF: only null is
        this.#lastRxAt = performance.now();
        this.#probeSentAt = -1;
        const packets = this.#parser.push(buf.subarray(0, n), { transient: true });
        for (const packet of packets) {
          if (this.#done) return;
          if (packet.type === PACKET.ECHO_RES && this.#consumeEcho(packet)) continue;
          this.#onPacket(packet);
        }
      }
    } catch (err: unknown) {
      if (this.#done) return; // our own close() interrupted the read
      this.#fail(
        isConnectionError(err) ? err : connectionLost(this.server, errorMessage(err), err),
      );
    }
  }

  #consumeEcho(packet: Packet): boolean {
    const token = argText(packet.args[0]);
    if (token.startsWith(HEARTBEAT_TOKEN_PREFIX)) return true;
    const waiter = this.#echoWaiters.get(token);
    if (waiter === undefined) return false;
    waiter();
    return true;
  }

  async #flushOutbox(): Promise<void> {
    try {
      while (this.#outbox.length > 0 && !this.#done) {
        const parts = this.#outbox;
        this.#outbox = [];
        const bytes = concatBytes(parts);
        let written = 0;
        while (written < bytes.length) {
          written += await this.#conn.write(bytes.subarray(written));
        }
      }
    } catch (err: unknown) {
      if (!this.#done) {
        this.#fail(connectionLost(this.server, `write failed: ${errorMessage(err)}`, err));
      }
    } finally {
      this.#writing = false;
      this.#drainedWaiter?.();
    }
  }

  #armHeartbeat(delayMs: number): void {
    if (this.#heartbeatIntervalMs <= 0 || this.#done) return;
    this.#heartbeatDueAt = performance.now() + Math.max(0, delayMs);
    this.#heartbeatTimer = setTimeout(() => this.#heartbeatTick(), Math.max(0, delayMs));
  }

  #heartbeatTick(): void {
    this.#heartbeatTimer = undefined;
    if (this.#done) return;
    const now = performance.now();
    const silentMs = now - this.#lastRxAt;
    if (this.#probeSentAt >= 0) {
      const waitedMs = now - this.#probeSentAt;
      if (
        waitedMs >= this.#heartbeatTimeoutMs && !this.#probeExtended &&
        now - this.#heartbeatDueAt >= STALLED_TICK_MS
      ) {
        // No verdict from a tick the process held up: the answer may be waiting in the socket.
        // Once per probe, so a process that keeps stalling still notices a dead peer.
        this.#probeExtended = true;
        this.#probeSentAt = now;
        this.#armHeartbeat(this.#heartbeatTimeoutMs);
        return;
      }
      if (waitedMs >= this.#heartbeatTimeoutMs) {
        const silent = `no data for ${Math.round(silentMs)} ms, ECHO probe unanswered`;
        const text = `Connection to job server ${this.server} lost: ${silent}`;
        this.#fail(new WorkerError("heartbeat_timeout", text));
        return;
      }
      this.#armHeartbeat(this.#heartbeatTimeoutMs - waitedMs);
      return;
    }
    if (silentMs < this.#heartbeatIntervalMs) {
      this.#armHeartbeat(this.#heartbeatIntervalMs - silentMs);
      return;
    }
    this.#probeSentAt = now;
    this.#probeExtended = false;
    const token = `${HEARTBEAT_TOKEN_PREFIX}${++this.#echoSeq}`;
    this.send(encodePacket("REQ", PACKET.ECHO_REQ, [token]));
    this.#armHeartbeat(this.#heartbeatTimeoutMs);
  }

  #fail(reason: Error): void {
    if (this.#closing === undefined) this.#closing = this.#shutdown(reason);
  }

  async #shutdown(reason: Error | undefined): Promise<void> {
    if (reason === undefined && this.#writing) {
      // Let queued acks reach the kernel, but never wait on a peer that stopped reading.
      using limit = deadline(2000);
      await settledWithin(new Promise<void>((r) => (this.#drainedWaiter = r)), limit.signal);
    }
    this.#done = true;
    if (this.#heartbeatTimer !== undefined) clearTimeout(this.#heartbeatTimer);
    this.#heartbeatTimer = undefined;
    this.#outbox = [];
    try {
      this.#conn.close();
    } catch {
      // Already closed by the peer; nothing left to release.
    }
    this.#ended.resolve(reason);
    await this.#readLoop;
  }
}
