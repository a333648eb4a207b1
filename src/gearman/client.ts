/**
 * Background submissions, pipelined and matched to answers by position
 * (docs/gearman-protocol.md#submitting).
 *
 * @module
 */
import { argText, encodePacket, PACKET, type Packet, packetName } from "./codec.ts";
import { connectionLost, type ConnectOptions, GearmanConnection } from "./connection.ts";
import { WorkerError } from "../util/errors.ts";

export interface ClientOptions extends Omit<ConnectOptions, "onPacket"> {
  /** Submissions awaiting JOB_CREATED at once (pipelining window); default 100. */
  readonly window?: number;
}

/** A submitting connection to one job server. */
export class GearmanClient implements AsyncDisposable {
  readonly server: string;
  readonly #window: number;
  readonly #conn: GearmanConnection;
  readonly #pending: Pick<PromiseWithResolvers<string>, "resolve" | "reject">[] = [];
  readonly #roomWaiters: (() => void)[] = [];

  private constructor(server: string, conn: GearmanConnection, window: number) {
    this.server = server;
    this.#conn = conn;
    this.#window = window;
    void conn.closed.then((reason) => {
      const err = reason ?? connectionLost(server, "connection closed");
      // A submission written before the loss has an unknown outcome: reject, never resubmit.
      for (const p of this.#pending.splice(0)) p.reject(err);
      for (const w of this.#roomWaiters.splice(0)) w();
    });
  }

  /** @throws {WorkerError} (code `connect_failed`) When the server cannot be reached. */
  static async connect(server: string, options: ClientOptions = {}): Promise<GearmanClient> {
    const conn = await GearmanConnection.connect(server, {
      ...options,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 0,
      // Nothing arrives before the first submission, made once `client` exists.
      onPacket: (p) => client.#onPacket(p),
    });
    const client = new GearmanClient(server, conn, options.window ?? 100);
    return client;
  }

  /**
   * Submit one normal-priority background job, waiting while the window is full; resolves with its
   * handle. The default unique id is empty: it never coalesces on the builtin queue.
   *
   * @throws {WorkerError} (code `submit_refused`) When the server answers ERROR.
   * @throws {WorkerError} (code `connection_lost` or `connect_failed`) When the connection is lost before the answer.
   */
  async submitBackground(
    fn: string,
    payload: string | Uint8Array,
    options: { unique?: string } = {},
  ): Promise<string> {
    const conn = this.#conn;
    while (this.#pending.length >= this.#window && !conn.isClosed) {
      await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
    }
    if (conn.isClosed) throw connectionLost(this.server, "connection is closed");
    const packet = encodePacket("REQ", PACKET.SUBMIT_JOB_BG, [fn, options.unique ?? "", payload]);
    return await new Promise<string>((resolve, reject) => {
      this.#pending.push({ resolve, reject });
      conn.send(packet);
    });
  }

  /** Whether the connection is known to be closed (nothing submitted now is written). */
  get isClosed(): boolean {
    return this.#conn.isClosed;
  }

  /** Close the connection (idempotent). */
  close(): Promise<void> {
    return this.#conn.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #onPacket(packet: Packet): void {
    if (packet.type !== PACKET.JOB_CREATED && packet.type !== PACKET.ERROR) {
      void this.#conn.close();
      const err = connectionLost(this.server, `unexpected ${packetName(packet.type)} on client`);
      for (const p of this.#pending.splice(0)) p.reject(err);
      return;
    }
    const pending = this.#pending.shift();
    this.#roomWaiters.shift()?.();
    if (pending === undefined) return;
    if (packet.type === PACKET.JOB_CREATED) return pending.resolve(argText(packet.args[0]));
    // The server answered ERROR, e.g. `QUEUE_ERROR` after maxqueue.
    const error = `${argText(packet.args[0])} ${argText(packet.args[1])}`;
    pending.reject(new WorkerError("submit_refused", `Job server refused submission: ${error}`));
  }
}
