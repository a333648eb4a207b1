/**
 * One generation of the RabbitMQ link: one connection, one channel and consumer per queue
 * (docs/consumption.md#rabbitmq-topology), deliveries handed to the engine in order as the queue's
 * budget grants slots, acked on the receiving channel (D1). A lost session is never repaired: the
 * supervisor opens a new one (docs/consumption.md#rabbitmq-reconnect).
 *
 * The connection goes over {@link DenoSocket}, not Node's `net.Socket`: every ack is one write,
 * and through `net.Socket` acks alone took about 6 % of a drain's CPU. Measured; keep.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import type { Socket } from "node:net";
import {
  type AMQPChannel,
  AMQPClient,
  type AMQPConsumer,
  type AMQPMessage,
} from "@cloudamqp/amqp-client";
import {
  type Acknowledgement,
  type DeliveryScope,
  type GiveBackReason,
  type Job,
  JobGivenBack,
  type Link,
} from "../consumer/contract.ts";
import { settleHandlers } from "../consumer/delivery.ts";
import type { LinkContext } from "../consumer/consumer.ts";
import type { Grant, QueueBudget } from "../consumer/budget.ts";
import type { AmqpUrl } from "../util/amqp_url.ts";
import { abortable, aborted, deadline, settledWithin } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";
import { DenoSocket } from "../util/deno_socket.ts";

const log = getLogger("rabbitmq");

const PROTOCOL_HEADER = new Uint8Array([65, 77, 81, 80, 0, 0, 9, 1]);

/**
 * Let `client` (not yet connected) connect over `Deno.connect` by replacing amqp-client's private
 * `connectSocket` with the same steps over a {@link DenoSocket}; framing, heartbeats and errors
 * stay the library's. Returns false (the library's own socket) for TLS or an unexpected shape.
 * The library's heartbeat check is the socket's idle timeout, so both sockets count reads only:
 * the worker's own writes (backlog questions every 10 s) would keep a silent broker looking alive.
 */
export function useDenoSocket(client: AMQPClient): boolean {
  const internals = client as unknown as { connectSocket?: unknown; onRead?: unknown };
  if (typeof internals.connectSocket !== "function" || typeof internals.onRead !== "function") {
    return false;
  }
  if (client.tls) {
    // Deno.connectTls cannot skip certificate checks (`?insecure`): node:tls stays.
    const connectTls = (internals.connectSocket as () => Socket).bind(client);
    internals.connectSocket = () => idleOnReadsOnly(connectTls());
    return false;
  }
  const onRead = (internals.onRead as (buf: Buffer) => unknown).bind(client);
  internals.connectSocket = () => {
    const socket = new DenoSocket({ host: client.host, port: client.port, idleOnReadsOnly: true });
    // A failed write destroys the socket, which the library hears as error and close.
    socket.once("connect", () => void client.send(PROTOCOL_HEADER).catch(() => {}));
    socket.on("data", onRead);
    return socket;
  };
  return true;
}

/** Make a Node socket's `setTimeout` (idle timeout) count what it reads, not what it writes. */
function idleOnReadsOnly(socket: Socket): Socket {
  let idleMs = 0;
  let lastRead = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = () => {
    const left = lastRead + idleMs - performance.now();
    timer = left > 0 ? setTimeout(check, left) : undefined;
    if (timer === undefined) socket.emit("timeout");
  };
  socket.setTimeout = ((ms: number) => {
    clearTimeout(timer);
    idleMs = ms;
    lastRead = performance.now();
    timer = ms > 0 ? setTimeout(check, ms) : undefined;
    return socket;
  }) as Socket["setTimeout"];
  socket.on("data", () => (lastRead = performance.now()));
  socket.once("close", () => clearTimeout(timer));
  return socket;
}

/**
 * A channel of its own for passive declarations: a declaration of a missing queue makes the
 * broker close the channel it was asked on. Kept between calls (opening one costs the broker about
 * 0.75 ms of CPU, paid by a drain polling every 25 ms) and reopened once the broker closed it.
 */
export class ProbeChannel {
  readonly #client: AMQPClient;
  #channel: AMQPChannel | undefined;
  #opening: Promise<AMQPChannel> | undefined;

  constructor(client: AMQPClient) {
    this.#client = client;
  }

  /** Declare `queue` passively; throws when it does not exist or the connection is gone. */
  async declare(queue: string): Promise<{ messageCount: number; consumerCount: number }> {
    const channel = this.#channel?.closed === false ? this.#channel : await this.#open();
    return await channel.queueDeclare(queue, { passive: true });
  }

  /** Close the channel if it is open; never rejects. */
  async close(): Promise<void> {
    const channel = this.#channel;
    this.#channel = undefined;
    if (channel !== undefined && !channel.closed) await channel.close().catch(() => {});
  }

  #open(): Promise<AMQPChannel> {
    this.#opening ??= this.#client.channel()
      .then((channel) => (this.#channel = channel))
      .finally(() => (this.#opening = undefined));
    return this.#opening;
  }
}

/** `--rabbitmq-declare`: create a missing queue, or only check that the operator declared it. */
export type QueueDeclareMode = "declare" | "passive";

/**
 * Declare `queue` as `--rabbitmq-declare` says. Passive accepts a queue of any type and arguments
 * (an operator's quorum queue) that a declaration with other arguments would be refused.
 *
 * @throws {WorkerError} (code `queue_declare`) When the broker refuses (it then closes `channel`).
 */
export async function declareQueue(
  channel: AMQPChannel,
  queue: string,
  { durableQueues: durable, declare: mode = "declare" }: QueueDeclaration,
): Promise<void> {
  try {
    // Declaring flags must match exactly, or RabbitMQ answers 406 PRECONDITION_FAILED.
    const flags = { passive: false, durable, exclusive: false, autoDelete: false };
    await channel.queueDeclare(queue, mode === "passive" ? { passive: true } : flags);
  } catch (cause: unknown) {
    const detail = errorMessage(cause);
    const hint = mode === "passive"
      ? /NOT_FOUND|\(404\)/.test(detail)
        ? ": the queue does not exist and --rabbitmq-declare (STATUSENGINE_RABBITMQ_DECLARE, " +
          "rabbitmq_declare) is passive, so the worker does not create it: declare it on the " +
          "broker first (for a quorum queue: durable, argument x-queue-type=quorum), or set " +
          "--rabbitmq-declare declare to let the worker create a classic queue"
        : ""
      : /PRECONDITION_FAILED|\(406\)/.test(detail)
      ? `: the queue exists with other flags; the likely cause is a durability mismatch: it ` +
        `was declared ${durable ? "durable" : "non-durable"} because --rabbitmq-durable-queues ` +
        `(STATUSENGINE_RABBITMQ_DURABLE_QUEUES, rabbitmq_durable_queues, legacy ` +
        `rabbitmq.durable_queues) is ${durable}; set it to match the broker module's ` +
        "DurableQueues, or delete the queue once with core and worker stopped; a queue " +
        "declared by the operator with arguments (a quorum queue) needs --rabbitmq-declare passive"
      : "";
    const message = `Cannot declare queue "${queue}": ${detail}${hint}`;
    throw new WorkerError("queue_declare", message, { cause });
  }
}

/**
 * The explicit consumer tag (docs/consumption.md#rabbitmq-channels): `basic.cancel` needs it, and
 * the management console shows which queue a consumer serves.
 */
export function consumerTag(queue: string): string {
  return `statusengine-worker.${queue}`;
}

/** How queues are declared: `--rabbitmq-durable-queues` and `--rabbitmq-declare`. */
export interface QueueDeclaration {
  readonly durableQueues: boolean;
  readonly declare?: QueueDeclareMode | undefined;
}

export interface AmqpSessionOptions extends QueueDeclaration, LinkContext {
  readonly url: AmqpUrl;
  readonly queues: readonly string[];
  /** `basic.qos` prefetch count per consumer (docs/consumption.md#rabbitmq-channels), 1..65535. */
  readonly prefetch: number;
  /** A message above this many bytes is dead-lettered (`too_large`) instead of handled. */
  readonly maxJobSize: number;
  /** Bound on dial, handshake, channels, declarations, qos and consume together. Default 10 s. */
  readonly connectTimeoutMs?: number | undefined;
  /** Connection name shown by the management console. */
  readonly connectionName?: string | undefined;
}

/** Workload bytes kept of a message above the size limit (for the dead-letter record). */
const TOO_LARGE_KEPT_BYTES = 1024;
const CANCEL_TIMEOUT_MS = 2_000;
const CLOSE_TIMEOUT_MS = 2_000;
const SOCKET_CLOSE_GRACE_MS = 1_000;

/** Hand a delivery never started back to the broker, in its place (a closed channel did already). */
function requeue(msg: AMQPMessage): void {
  msg.nack(true).catch(() => {});
}

/**
 * The deliveries of one queue, started in delivery order as the queue's budget grants slots
 * (docs/consumption.md#rabbitmq-window).
 */
class Lane {
  channel: AMQPChannel | undefined;
  consumer: AMQPConsumer | undefined;
  // Bounded by the prefetch count: the broker pushes no more unacked deliveries.
  readonly #buffer: AMQPMessage[] = [];
  #wake: (() => void) | undefined;
  #onEnd: (() => void) | undefined;
  #ending: "no" | "after-buffer" | "now" = "no";
  #handingBack = false;
  /** Deliveries started and not yet acknowledged: what a give-back hands back. */
  unanswered = 0;
  /** Deliveries being handled; the lane's loop ends only after its last one was answered. */
  readonly running = new Set<Promise<void>>();
  /** `performance.now()` of the last delivery, or of the session's start (stall detection). */
  receivedAt = performance.now();

  constructor(readonly queue: string) {}

  push(msg: AMQPMessage): void {
    this.receivedAt = performance.now();
    if (this.#handingBack) return void requeue(msg);
    // Not started, not answered: closing the channel hands it back to the broker.
    if (this.#ending !== "no") return;
    this.#buffer.push(msg);
    this.#wakeUp();
  }

  /** The next delivery, left in the buffer until {@link take}; undefined once the lane has ended. */
  async next(): Promise<AMQPMessage | undefined> {
    for (;;) {
      if (this.#ending === "now") return undefined;
      const msg = this.#buffer[0];
      if (msg !== undefined) return msg;
      if (this.#ending === "after-buffer") return undefined;
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
  }

  /** Remove the delivery {@link next} returned to start it; false once the lane has ended. */
  take(): boolean {
    return this.#ending !== "now" && this.#buffer.shift() !== undefined;
  }

  /** A slot of the queue's budget for the next delivery; undefined once the lane has ended. */
  grant(budget: QueueBudget): Promise<Grant | undefined> {
    if (this.#ending === "now") return Promise.resolve(undefined);
    const now = budget.tryAcquire();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve) => {
      const cancel = budget.waitFor((grant) => {
        this.#onEnd = undefined;
        resolve(grant);
      });
      this.#onEnd = () => {
        cancel();
        resolve(undefined);
      };
    });
  }

  /** Take nothing new; handle what was delivered before the cancel. */
  finishBuffered(): void {
    if (this.#ending === "no") this.#ending = "after-buffer";
    this.#wakeUp();
  }

  /**
   * The session is lost but its channel may live on while older handlers finish: stop consuming
   * and requeue what was not started, at once (the new session would get later messages first).
   */
  handBack(): void {
    this.#handingBack = true;
    this.endNow();
    void this.consumer?.cancel().catch(() => {});
    for (const msg of this.#buffer.splice(0)) requeue(msg);
  }

  /** Take nothing more; deliveries not started yet are left to the broker. */
  endNow(): void {
    this.#ending = "now";
    // Kept until the channel closes, for handBack.
    this.#wakeUp();
    // Neither callback re-enters this lane.
    this.#onEnd?.();
    this.#onEnd = undefined;
  }

  #wakeUp(): void {
    this.#wake?.();
    this.#wake = undefined;
  }
}

export class AmqpSession implements Link {
  readonly #options: AmqpSessionOptions;
  readonly #client: AMQPClient;
  readonly #lanes: Lane[];
  readonly #lost = Promise.withResolvers<Error | undefined>();
  #lostReason: Error | undefined;
  #draining = false;
  /** The messages went back to the broker: none is acknowledged any more. */
  #givenBack = false;
  #closing: Promise<void> | undefined;
  #socketClosed: Promise<void> | undefined;
  readonly #loops: Promise<void>[] = [];
  readonly #handlerAbort = new AbortController();
  readonly #stopRetries = new AbortController();
  readonly #scope: DeliveryScope = {
    abort: this.#handlerAbort.signal,
    stopRetries: this.#stopRetries.signal,
  };
  /** Epoch ms this session was built, just before it connects (Job.linkOpenedAt). */
  readonly #openedAt = Date.now();
  /** Asks the broker for a queue's ready messages and consumers (this session's included). */
  readonly probe: ProbeChannel;

  private constructor(options: AmqpSessionOptions) {
    this.#options = options;
    // Null logger: the library's own lines would bypass our format and policy.
    this.#client = new AMQPClient(options.url.href, undefined, null);
    useDenoSocket(this.#client);
    this.probe = new ProbeChannel(this.#client);
    if (options.connectionName !== undefined) this.#client.name = options.connectionName;
    this.#client.onerror = (err) => log.debug("rabbitmq: connection error", { error: err.message });
    this.#lanes = options.queues.map((q) => new Lane(q));
  }

  /**
   * Connect, and per queue open a channel, declare, set the prefetch and consume. Deliveries before
   * {@link start} wait in their lane. A failed or aborted attempt closes whatever it opened.
   *
   * @throws {WorkerError} (code `queue_declare`) When a queue declaration is refused.
   * @throws {Error} When the broker is unreachable, refuses the login or vhost, or is too slow.
   */
  static async open(options: AmqpSessionOptions, signal: AbortSignal): Promise<AmqpSession> {
    const session = new AmqpSession(options);
    const timeoutMs = options.connectTimeoutMs ?? 10_000;
    using limit = deadline(timeoutMs, signal);
    try {
      await abortable(session.#setUp(), limit.signal);
    } catch (err: unknown) {
      await session.close();
      if (signal.aborted) throw signal.reason;
      if (limit.signal.aborted) {
        throw new Error(`No answer from the broker within ${timeoutMs} ms`, { cause: err });
      }
      throw err;
    }
    return session;
  }

  async #setUp(): Promise<void> {
    const client = this.#client;
    const connecting = client.connect();
    const socket = client.socket;
    if (socket !== undefined) {
      this.#socketClosed = new Promise((resolve) => socket.once("close", () => resolve()));
    }
    await connecting;
    client.ondisconnect = (err) => this.#markLost(err ?? new Error("connection closed"));
    await Promise.all(this.#lanes.map((lane) => this.#openLane(lane)));
  }

  async #openLane(lane: Lane): Promise<void> {
    const o = this.#options;
    const channel = await this.#client.channel();
    lane.channel = channel;
    await declareQueue(channel, lane.queue, o);
    // global=false: the limit applies to the one consumer of this channel.
    await channel.basicQos(o.prefetch, 0, false);
    const consumer = await channel.basicConsume(
      lane.queue,
      { tag: consumerTag(lane.queue), noAck: false, exclusive: false },
      (msg) => lane.push(msg),
    );
    lane.consumer = consumer;
    // Rejects when the broker cancelled the consumer or closed its channel or connection.
    consumer.wait().catch((cause: unknown) => {
      const detail = errorMessage(cause);
      this.#markLost(new Error(`consumer of queue "${lane.queue}" ended: ${detail}`, { cause }));
    });
  }

  get closed(): Promise<Error | undefined> {
    return this.#lost.promise;
  }

  get inFlight(): number {
    return this.#lanes.reduce((jobs, lane) => jobs + lane.running.size, 0);
  }

  receivedAt(queue: string): number {
    // Per lane: another queue's deliveries say nothing about this one's.
    return this.#lanes.find((l) => l.queue === queue)?.receivedAt ?? 0;
  }

  start(): void {
    for (const lane of this.#lanes) {
      lane.receivedAt = performance.now();
      this.#loops.push(this.#runLane(lane));
    }
  }

  /** Messages wait but a lane with room receives none: the broker stopped delivering. Rebuild. */
  nudge(queue: string): void {
    this.#markLost(new Error(`queue "${queue}" stalled: messages wait but none are delivered`));
  }

  /**
   * Hand the messages back (docs/retries.md#give-back): abort the handlers, ack none, and close,
   * which requeues every unacknowledged message. Returns the messages being handled, per queue.
   */
  async giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>> {
    const given = new Map(
      this.#lanes.filter((l) => l.unanswered > 0).map((l) => [l.queue, l.unanswered] as const),
    );
    this.#givenBack = true;
    this.#handlerAbort.abort(new JobGivenBack(reason));
    await this.close();
    return given;
  }

  /**
   * Stop (docs/consumption.md#cancel-before-close): `basic.cancel` every consumer (at most 2 s),
   * handle what was delivered within `signal` (no more retries), close.
   */
  async drain(signal: AbortSignal): Promise<void> {
    this.#draining = true;
    this.#stopRetries.abort();
    using limit = deadline(CANCEL_TIMEOUT_MS);
    await Promise.all(this.#lanes.map(async (lane) => {
      const consumer = lane.consumer;
      if (consumer !== undefined && this.#lostReason === undefined) {
        const outcome = await Promise.race([
          consumer.cancel().then(() => "ok", (err: unknown) => errorMessage(err)),
          aborted(limit.signal).then(() => `no cancel-ok within ${CANCEL_TIMEOUT_MS} ms`),
        ]);
        if (outcome !== "ok") {
          log.debug("rabbitmq: basic.cancel failed", { queue: lane.queue, error: outcome });
        }
      }
      // Also after a failed cancel: later deliveries go back with the channel close.
      lane.finishBuffered();
    }));
    await this.settled(signal);
    await this.close();
  }

  /** Wait for every loop and handler; when `signal` aborts first, abort them (redelivered). */
  async settled(signal: AbortSignal): Promise<void> {
    await settleHandlers(() => this.#loops, signal, () => {
      this.#handlerAbort.abort(new DOMException("drain deadline reached", "TimeoutError"));
      for (const lane of this.#lanes) lane.endNow();
    });
  }

  abort(): Promise<void> {
    return this.close();
  }

  /** Close the channels, then the connection, each bounded; unacked messages requeue. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    for (const lane of this.#lanes) lane.endNow();
    this.#stopRetries.abort();
    if (this.#lostReason === undefined) this.#lost.resolve(undefined);
    const client = this.#client;
    if (!client.closed) {
      using limit = deadline(CLOSE_TIMEOUT_MS);
      const open = this.#lanes.flatMap(({ channel }) => channel?.closed === false ? [channel] : []);
      const closing = [...open.map((channel) => channel.close()), this.probe.close()];
      await settledWithin(Promise.allSettled(closing), limit.signal);
      if (!client.closed) {
        const closed = await settledWithin(client.close(), limit.signal);
        if (!closed) log.debug("rabbitmq: no close-ok from the broker, dropping the socket");
      }
    }
    // No close-ok, or aborted mid-handshake (the error also settles a pending connect()).
    client.socket?.destroy(new Error("connection closed by the worker"));
    if (this.#socketClosed !== undefined) {
      using grace = deadline(SOCKET_CLOSE_GRACE_MS);
      if (!(await settledWithin(this.#socketClosed, grace.signal))) {
        log.warn("rabbitmq: connection did not close", { url: this.#options.url.display });
      }
    }
  }

  #markLost(reason: Error): void {
    if (this.#lostReason !== undefined || this.#closing !== undefined) return;
    this.#lostReason = reason;
    this.#stopRetries.abort();
    for (const lane of this.#lanes) lane.handBack();
    this.#lost.resolve(reason);
  }

  async #runLane(lane: Lane): Promise<void> {
    const budget = this.#options.budget(lane.queue);
    try {
      for (;;) {
        const msg = await lane.next();
        if (msg === undefined) break;
        const grant = await lane.grant(budget);
        if (grant === undefined) break;
        if (!lane.take()) {
          grant.release();
          break;
        }
        const run = this.#deliver(lane, msg, grant);
        lane.running.add(run);
        void run.finally(() => lane.running.delete(run));
      }
      // Loops cover every handler: settled() waits for the loops alone.
      await Promise.allSettled([...lane.running]);
    } finally {
      if (!this.#draining && this.#closing === undefined && this.#lostReason === undefined) {
        // A queue that stopped consuming while the link looks healthy: rebuild.
        this.#markLost(new Error(`delivery loop of queue "${lane.queue}" ended`));
      }
    }
  }

  async #deliver(lane: Lane, msg: AMQPMessage, grant: Grant): Promise<void> {
    const o = this.#options;
    const body = msg.body ?? new Uint8Array(0);
    grant.settle(body.length);
    lane.unanswered++;
    let acked = false;
    const tooLarge = body.length > o.maxJobSize;
    const job: Job = {
      queue: lane.queue,
      server: o.url.server,
      handle: String(msg.deliveryTag),
      unique: msg.properties.messageId ?? "",
      // Raw bytes, as delivered: UTF-8 repair is the pipeline's job (docs/payloads.md#utf8-repair).
      payload: tooLarge ? body.subarray(0, TOO_LARGE_KEPT_BYTES) : body,
      receivedAt: Date.now(),
      linkOpenedAt: this.#openedAt,
    };
    const ack: Acknowledgement = {
      // On the channel that received it, the only one where the tag is valid.
      complete: () => {
        if (this.#givenBack) return false;
        // The ack goes out before any channel close: the broker takes it, nothing to hand back.
        acked = true;
        lane.unanswered--;
        return msg.ack().then(() => true, (err: unknown) => {
          log.warn("rabbitmq: acknowledgement failed, the message will be redelivered", {
            queue: lane.queue,
            delivery_tag: job.handle,
            error: errorMessage(err),
          });
          return false;
        });
      },
    };
    try {
      // The body is the library's own buffer, untouched after delivery: the engine may free it.
      const result = await o.engine.deliver(
        tooLarge ? { job, tooLarge: body.length, ownsPayload: true } : { job, ownsPayload: true },
        ack,
        this.#scope,
      );
      // The message goes back; handling its successors first would reorder the queue.
      if (result === "abandoned") lane.endNow();
    } finally {
      if (!acked) lane.unanswered--;
      grant.release();
    }
  }
}
