/**
 * One queue (Gearman function) on one connection, a link of the consumer core: pipelined grabs
 * bounded by the queue's budget (D12), PRE_SLEEP/NOOP, and acks on this connection (D1). The
 * grab/sleep state machine and its invariant: docs/consumption.md#grab-state-machine.
 *
 * @module
 */
import { argText, encodePacket, PACKET, type Packet, packetName } from "./codec.ts";
import { connectFailed, type ConnectOptions, GearmanConnection } from "./connection.ts";
import {
  type Acknowledgement,
  type DeliveryScope,
  type GiveBackReason,
  type Job,
  JobGivenBack,
  type Link,
} from "../consumer/contract.ts";
import { type DeliveryEngine, settleHandlers } from "../consumer/delivery.ts";
import type { CancelWait, Grant, QueueBudget } from "../consumer/budget.ts";
import { errorMessage, getLogger, type LogProperties } from "../log.ts";
import { deadline } from "../util/async.ts";

const log = getLogger("gearman");
/** One packet for every grab: a queued packet is only read, never changed. */
const GRAB = encodePacket("REQ", PACKET.GRAB_JOB_UNIQ, []);

export interface QueueWorkerOptions {
  readonly queue: string;
  readonly server: string;
  readonly budget: QueueBudget;
  readonly engine: DeliveryEngine;
  /** Shown in `gearadmin --workers`; must not contain spaces. */
  readonly clientId?: string | undefined;
  /** While sleeping, grab anyway after this long without a NOOP (lost wake-up). Default 30 s. */
  readonly idlePollMs?: number | undefined;
  readonly connect?: Omit<ConnectOptions, "onPacket" | "truncateOversizeJobs">;
}

/** The state machine's variables, for tests. */
export interface QueueWorkerState {
  readonly grabsOutstanding: number;
  readonly sleeping: boolean;
  readonly waitingForBudget: boolean;
  readonly inFlight: number;
  readonly draining: boolean;
  readonly dead: boolean;
}

/** One generation of one (queue, server) link; only the supervisor replaces it. */
export class QueueWorker implements Link {
  readonly queue: string;
  readonly server: string;
  readonly #budget: QueueBudget;
  readonly #engine: DeliveryEngine;
  readonly #idlePollMs: number;
  readonly #conn: GearmanConnection;
  /** Grants of the outstanding grabs, oldest first: replies come in grab order. */
  readonly #grabs: Grant[] = [];
  /** A NO_JOB arrived while other grabs were outstanding: grab no more until they are answered. */
  #emptyReplySeen = false;
  #sleeping = false;
  #sleepingSince = 0;
  #draining = false;
  #dead = false;
  /** The jobs went back to the server: no acknowledgement goes out any more. */
  #givenBack = false;
  #started = false;
  #lastReceivedAt = performance.now();
  readonly #openedAt = Date.now(); // Job.linkOpenedAt
  #cancelWait: CancelWait | undefined;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #handlerAbort = new AbortController();
  readonly #stopRetries = new AbortController();
  readonly #scope: DeliveryScope = {
    abort: this.#handlerAbort.signal,
    stopRetries: this.#stopRetries.signal,
  };
  /** Running handlers by job handle: the handle is all a WORK_COMPLETE names. */
  readonly #running = new Map<string, Promise<unknown>>();

  private constructor(options: QueueWorkerOptions, conn: GearmanConnection) {
    this.#conn = conn;
    this.queue = options.queue;
    this.server = options.server;
    this.#budget = options.budget;
    this.#engine = options.engine;
    this.#idlePollMs = options.idlePollMs ?? 30_000;
  }

  /**
   * Connect, register and wait for an ECHO round trip behind CAN_DO: a server that accepts TCP
   * but is hung must not count as connected. Does not grab yet.
   *
   * @throws {WorkerError} (code `connection_lost` or `connect_failed`) When the server cannot be reached or does not answer in time.
   */
  static async open(options: QueueWorkerOptions): Promise<QueueWorker> {
    const connect = options.connect ?? {};
    const conn = await GearmanConnection.connect(options.server, {
      ...connect,
      truncateOversizeJobs: true,
      // Nothing arrives before CAN_DO, sent once `worker` exists.
      onPacket: (packet) => worker.#onPacket(packet),
    });
    const worker = new QueueWorker(options, conn);
    void conn.closed.then((reason) => worker.#onClosed(reason));
    // One write; registrations live and die with the connection.
    const clientId = options.clientId;
    if (clientId !== undefined) conn.send(encodePacket("REQ", PACKET.SET_CLIENT_ID, [clientId]));
    conn.send(encodePacket("REQ", PACKET.CAN_DO, [worker.queue]));
    const timeoutMs = connect.connectTimeoutMs ?? 5_000;
    using answer = deadline(timeoutMs, connect.signal);
    try {
      await conn.echo({ signal: answer.signal });
    } catch (err: unknown) {
      await conn.close();
      if (connect.signal?.aborted) throw connect.signal.reason;
      if (!answer.signal.aborted) {
        // Ended before the deadline: a wrong port answering, a hang-up or a failed heartbeat.
        const what = `the registration was not answered by a job server: ${errorMessage(err)}`;
        throw connectFailed(options.server, what, err);
      }
      const silent = `accepted the connection but did not answer within ${timeoutMs} ms`;
      throw new Error(`Job server ${options.server} ${silent}`, { cause: err });
    }
    return worker;
  }

  get closed(): Promise<Error | undefined> {
    return this.#conn.closed;
  }

  get inFlight(): number {
    return this.#running.size;
  }

  receivedAt(): number {
    return this.#lastReceivedAt;
  }

  get state(): QueueWorkerState {
    return {
      grabsOutstanding: this.#grabs.length,
      sleeping: this.#sleeping,
      waitingForBudget: this.#cancelWait !== undefined,
      inFlight: this.#running.size,
      draining: this.#draining,
      dead: this.#dead,
    };
  }

  start(): void {
    this.#started = true;
    this.#lastReceivedAt = performance.now();
    this.#pump();
  }

  /**
   * Stop grabbing, wait for the handlers within `signal`, ECHO barrier, close
   * (docs/consumption.md#orderly-stop). Never CANT_DO: it would re-queue jobs being handled.
   */
  async drain(signal: AbortSignal): Promise<void> {
    this.#draining = true;
    this.#halt();
    await this.settled(signal);
    if (!this.#dead) {
      using barrier = deadline(1000, signal);
      try {
        await this.#conn.echo({ signal: barrier.signal });
      } catch {
        // Belt and braces (acks already left in order): never hold up shutdown.
      }
    }
    await this.#conn.close();
  }

  async settled(signal: AbortSignal): Promise<void> {
    if (this.#running.size === 0) return;
    await settleHandlers(
      () => [...this.#running.values()],
      signal,
      () => this.#handlerAbort.abort(new DOMException("drain deadline reached", "TimeoutError")),
    );
  }

  /** Close the connection at once (running handlers keep running; their acks are dropped). */
  abort(): Promise<void> {
    this.#draining = true;
    this.#halt();
    return this.#conn.close();
  }

  /**
   * Hand the jobs back (docs/retries.md#give-back): abort the handlers, answer none, close (gearmand
   * requeues). Never WORK_FAIL: it would drop a background job.
   */
  async giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>> {
    const jobs = this.#running.size;
    this.#givenBack = true;
    this.#handlerAbort.abort(new JobGivenBack(reason));
    await this.abort();
    return new Map(jobs === 0 ? [] : [[this.queue, jobs]]);
  }

  /** Grab now, whatever the state machine believes (a stall was detected). */
  nudge(): void {
    if (!this.#wantsGrabs()) return;
    log.debug("gearman: nudged, grabbing", {
      queue: this.queue,
      server: this.server,
      grabs_outstanding: this.#grabs.length,
      sleeping: this.#sleeping,
    });
    this.#sleeping = false;
    this.#emptyReplySeen = false;
    this.#stopIdlePoll();
    this.#pump();
  }

  #onClosed(reason: Error | undefined): void {
    this.#dead = true;
    this.#halt();
    // Outstanding grabs will never be answered; their grants come back now.
    for (const grant of this.#grabs.splice(0)) grant.release();
    if (reason !== undefined) {
      log.debug("gearman: worker connection ended", {
        queue: this.queue,
        server: this.server,
        error: errorMessage(reason),
        in_flight: this.#running.size,
      });
    }
  }

  #wantsGrabs(): boolean {
    return this.#started && !this.#draining && !this.#dead;
  }

  /** Grab for every grant the budget gives (D12); otherwise wait for one. */
  #pump(): void {
    if (!this.#wantsGrabs() || this.#sleeping || this.#emptyReplySeen) return;
    for (let g = this.#budget.tryAcquire(); g !== undefined; g = this.#budget.tryAcquire()) {
      this.#sendGrab(g);
    }
    if (this.#cancelWait === undefined) {
      this.#cancelWait = this.#budget.waitFor((grant) => {
        this.#cancelWait = undefined;
        if (!this.#wantsGrabs() || this.#sleeping || this.#emptyReplySeen) {
          grant.release();
          return;
        }
        this.#sendGrab(grant);
        this.#pump();
      });
    }
  }

  #sendGrab(grant: Grant): void {
    this.#grabs.push(grant);
    this.#conn.send(GRAB);
  }

  /** Grab no more: no budget wait, no idle poll, no retries. */
  #halt(): void {
    this.#stopRetries.abort();
    this.#stopWaiting();
    this.#stopIdlePoll();
  }

  #stopWaiting(): void {
    this.#cancelWait?.();
    this.#cancelWait = undefined;
  }

  #stopIdlePoll(): void {
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
  }

  #onPacket(packet: Packet): void {
    switch (packet.type) {
      case PACKET.JOB_ASSIGN_UNIQ:
      case PACKET.JOB_ASSIGN_ALL:
        return this.#onAssign(packet);
      case PACKET.NO_JOB:
        return this.#onNoJob();
      case PACKET.NOOP:
        return this.#onNoop();
      case PACKET.ECHO_RES:
        return;
      case PACKET.ERROR:
        return this.#onError(packet);
      default:
        this.#reconnect("unexpected packet on worker connection", {
          packet: packetName(packet.type),
        });
    }
  }

  /** A packet the state machine cannot place: log it and reconnect. */
  #reconnect(what: string, properties: LogProperties = {}): void {
    log.error(`gearman: ${what}, reconnecting`, {
      queue: this.queue,
      server: this.server,
      ...properties,
    });
    void this.#conn.close();
  }

  #onAssign(packet: Packet): void {
    const grant = this.#grabs.shift();
    if (grant === undefined) return this.#reconnect("job assigned without a grab outstanding");
    this.#lastReceivedAt = performance.now();
    // More may wait: an earlier NO_JOB no longer decides (else the link neither grabs nor sleeps).
    this.#emptyReplySeen = false;
    const args = packet.args;
    const handle = argText(args[0]);
    const fn = argText(args[1]);
    // Its WORK_COMPLETE would answer another job, or none: never run, back with the connection.
    const wrong = fn !== this.queue
      ? "a job of a function not registered here"
      : handle === ""
      ? "a job without a handle"
      : this.#running.has(handle)
      ? "a handle whose job is still running"
      : undefined;
    if (wrong !== undefined) {
      grant.release();
      return this.#reconnect(`job server assigned ${wrong}`, { handle, function: fn });
    }
    // JOB_ASSIGN_ALL carries a reducer before the workload.
    const payload = args[args.length - 1] as Uint8Array;
    grant.settle(payload.length);
    if (this.#draining || this.#dead) {
      // Grabbed before the drain: not started, not answered; the close re-queues it.
      grant.release();
      return;
    }
    const job: Job = {
      queue: this.queue,
      server: this.server,
      handle,
      unique: argText(args[2]),
      payload,
      receivedAt: Date.now(),
      linkOpenedAt: this.#openedAt,
    };
    this.#run(job, grant, packet.truncatedFrom, packet.exclusive === true);
    this.#pump();
  }

  #onNoJob(): void {
    const grant = this.#grabs.shift();
    if (grant === undefined) return this.#reconnect("NO_JOB without a grab outstanding");
    grant.release();
    if (!this.#wantsGrabs()) return;
    this.#stopWaiting();
    if (this.#grabs.length > 0) {
      // The answers still to come decide: a job means grab on, a last NO_JOB means sleep.
      this.#emptyReplySeen = true;
      return;
    }
    this.#emptyReplySeen = false;
    this.#sleeping = true;
    this.#sleepingSince = performance.now();
    this.#conn.send(encodePacket("REQ", PACKET.PRE_SLEEP, []));
    this.#armIdlePoll();
  }

  #onNoop(): void {
    // A NOOP can cross a grab on the wire: a hint to grab if there is room.
    this.#sleeping = false;
    this.#stopIdlePoll();
    this.#pump();
  }

  #armIdlePoll(): void {
    this.#stopIdlePoll();
    if (this.#idlePollMs <= 0) return;
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = undefined;
      if (!this.#sleeping || !this.#wantsGrabs()) return;
      log.debug("gearman: idle poll", {
        queue: this.queue,
        server: this.server,
        sleeping_ms: Math.round(performance.now() - this.#sleepingSince),
      });
      this.#onNoop();
    }, this.#idlePollMs);
  }

  #onError(packet: Packet): void {
    const error = { code: argText(packet.args[0]), text: argText(packet.args[1]) };
    if (error.code !== "JOB_NOT_FOUND") {
      return this.#reconnect("error packet on worker connection", error);
    }
    // The server no longer considers us the owner (re-queued): warn, carry on.
    const where = { queue: this.queue, server: this.server };
    log.warn("gearman: server did not accept an acknowledgement", { ...where, ...error });
  }

  /** Hand the job to the engine; one continuation per job frees its slot and grabs again. */
  #run(job: Job, grant: Grant, tooLarge: number | undefined, ownsPayload: boolean): void {
    const ack: Acknowledgement = {
      // Only the receiving connection may answer (D12); queued with this turn's packets.
      complete: () =>
        !this.#dead && !this.#givenBack &&
        this.#conn.send(encodePacket("REQ", PACKET.WORK_COMPLETE, [job.handle, ""])),
    };
    const run: Promise<unknown> = this.#engine.deliver(
      tooLarge === undefined ? { job, ownsPayload } : { job, tooLarge, ownsPayload },
      ack,
      this.#scope,
    ).finally(() => {
      this.#running.delete(job.handle);
      grant.release();
      this.#pump();
    });
    this.#running.set(job.handle, run);
  }
}
