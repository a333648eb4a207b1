/**
 * One queue (Gearman function) on one connection: registration, pipelined
 * grabs bounded by the queue's slots, PRE_SLEEP/NOOP, handlers, and
 * WORK_COMPLETE only after the handler's promise resolved (D1).
 *
 * State machine of gearman.md §6, with the grab window equal to the free
 * slots of the queue (D12).
 *
 * @module
 */
import { argText, encodePacket, PACKET, type Packet, packetName } from "./codec.ts";
import { type ConnectOptions, GearmanConnection } from "./connection.ts";
import {
  type ConsumerObserver,
  DiscardJobError,
  type Job,
  type JobHandler,
  type JobResult,
} from "../consumer/contract.ts";
import type { CancelWait, SlotPool } from "../consumer/slot_pool.ts";
import { errorMessage, getLogger } from "../log.ts";
import { abortable, deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";

const log = getLogger("gearman");

/** Options of a {@link QueueWorker}. */
export interface QueueWorkerOptions {
  readonly queue: string;
  readonly server: string;
  readonly pool: SlotPool;
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  /** Shown in `gearadmin --workers`; must not contain spaces. */
  readonly clientId?: string;
  /** While sleeping, grab anyway after this long without a NOOP (lost wake-up, gearman.md §6.3). Default 30 s. */
  readonly idlePollMs?: number;
  /** First retry delay after a transient handler failure; doubles up to {@link retryMaxMs}. Default 100 ms. */
  readonly retryInitialMs?: number;
  /** Cap of the retry delay. Default 5 s. */
  readonly retryMaxMs?: number;
  /** Connection options (heartbeat, timeouts, signal for the connect). */
  readonly connect?: Omit<ConnectOptions, "onPacket">;
}

/**
 * One generation of one (queue, server) link. Built by the supervisor, which
 * is the only code that replaces it.
 */
export class QueueWorker {
  readonly queue: string;
  readonly server: string;
  readonly #pool: SlotPool;
  readonly #handler: JobHandler;
  readonly #observer: ConsumerObserver;
  readonly #clientId: string | undefined;
  readonly #idlePollMs: number;
  readonly #retryInitialMs: number;
  readonly #retryMaxMs: number;
  #conn: GearmanConnection | undefined;
  #grabs = 0;
  #inFlight = 0;
  #idle = false;
  #sleeping = false;
  #sleepingSince = 0;
  #draining = false;
  #dead = false;
  #cancelWait: CancelWait | undefined;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #handlerAbort = new AbortController();
  // Wakes retry back-offs when the worker drains or its connection dies.
  readonly #stopRetries = new AbortController();
  readonly #running = new Set<Promise<void>>();
  #jobNotFound = 0;

  /** @param options Queue, server, slots, handler and observer. */
  constructor(options: QueueWorkerOptions) {
    this.queue = options.queue;
    this.server = options.server;
    this.#pool = options.pool;
    this.#handler = options.handler;
    this.#observer = options.observer;
    this.#clientId = options.clientId;
    this.#idlePollMs = options.idlePollMs ?? 30_000;
    this.#retryInitialMs = options.retryInitialMs ?? 100;
    this.#retryMaxMs = options.retryMaxMs ?? 5_000;
  }

  /**
   * Connect and build a worker, without registering yet (see {@link start}).
   *
   * @param options Worker options.
   * @returns A connected, not yet registered worker.
   * @throws {ConnectionClosedError} When the server cannot be reached (from connection.ts).
   */
  static async connect(options: QueueWorkerOptions): Promise<QueueWorker> {
    const worker = new QueueWorker(options);
    worker.#conn = await GearmanConnection.connect(options.server, {
      ...options.connect,
      onPacket: (packet) => worker.#onPacket(packet),
    });
    return worker;
  }

  /** Settles when the connection ended: `undefined` after a deliberate close, else why. */
  get closed(): Promise<Error | undefined> {
    return this.#connection.closed;
  }

  /** Handlers of this generation still running. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** ERROR JOB_NOT_FOUND answers seen (an acknowledgement the server did not accept). */
  get jobNotFound(): number {
    return this.#jobNotFound;
  }

  get #connection(): GearmanConnection {
    if (this.#conn === undefined) throw new Error("QueueWorker used before connect()");
    return this.#conn;
  }

  /**
   * Register the function and start grabbing. CAN_DO and the first grabs go
   * out in one write (gearman.md §6.1); registrations live and die with the
   * connection, so every generation sends CAN_DO again (§8).
   */
  start(): void {
    const conn = this.#connection;
    if (this.#clientId !== undefined) {
      conn.send(encodePacket("REQ", PACKET.SET_CLIENT_ID, [this.#clientId]));
    }
    conn.send(encodePacket("REQ", PACKET.CAN_DO, [this.queue]));
    void conn.closed.then((reason) => this.#onClosed(reason));
    this.#pump();
  }

  /**
   * Stop grabbing, wait for running handlers (bounded by `signal`), put an
   * ECHO barrier behind the acknowledgements, and close (G9, gearman.md §6.4).
   * Jobs assigned by grabs still outstanding are neither started nor
   * answered; closing the socket re-queues them. Never sends CANT_DO
   * (it would re-queue jobs still being handled, gearman.md §4.8).
   *
   * @param signal Drain deadline: when it aborts, running handlers are aborted too and their jobs left unanswered.
   */
  async drain(signal: AbortSignal): Promise<void> {
    this.#draining = true;
    this.#stopRetries.abort();
    this.#stopWaiting();
    this.#stopIdlePoll();
    await this.settled(signal);
    if (!this.#dead) {
      using barrier = deadline(1000, signal);
      try {
        await this.#connection.echo({ signal: barrier.signal });
      } catch {
        // The barrier is belt and braces (acks already left in order); a dead
        // or slow peer must not hold up shutdown.
      }
    }
    await this.#connection.close();
  }

  /**
   * Wait until every handler of this generation settled; when `signal`
   * aborts first, abort the handlers and give them a moment to settle.
   *
   * @param signal Deadline.
   */
  async settled(signal: AbortSignal): Promise<void> {
    if (this.#running.size === 0) return;
    if (await settledWithin(Promise.allSettled([...this.#running]), signal)) return;
    this.#handlerAbort.abort(new DOMException("drain deadline reached", "TimeoutError"));
    using grace = deadline(1000);
    await settledWithin(Promise.allSettled([...this.#running]), grace.signal);
  }

  /** Close the connection at once (running handlers keep running; their acks are dropped). */
  abort(): Promise<void> {
    this.#draining = true;
    this.#stopRetries.abort();
    this.#stopWaiting();
    return this.#connection.close();
  }

  #onClosed(reason: Error | undefined): void {
    this.#dead = true;
    this.#stopRetries.abort();
    this.#stopWaiting();
    this.#stopIdlePoll();
    // Outstanding grabs will never be answered; their slots come back now.
    for (; this.#grabs > 0; this.#grabs--) this.#pool.release();
    if (reason !== undefined) {
      log.debug("gearman: worker connection ended", {
        queue: this.queue,
        server: this.server,
        error: errorMessage(reason),
        in_flight: this.#inFlight,
      });
    }
  }

  #wantsGrabs(): boolean {
    return !this.#draining && !this.#dead && !this.#idle;
  }

  /** Send as many grabs as there are free slots (D12); wait for a slot otherwise. */
  #pump(): void {
    if (!this.#wantsGrabs()) return;
    let n = 0;
    while (this.#pool.tryAcquire()) n++;
    if (n > 0) this.#sendGrabs(n);
    if (this.#cancelWait === undefined && this.#wantsGrabs()) {
      this.#cancelWait = this.#pool.waitForSlot(() => {
        this.#cancelWait = undefined;
        if (!this.#wantsGrabs()) {
          this.#pool.release();
          return;
        }
        this.#sendGrabs(1);
        this.#pump();
      });
    }
  }

  #sendGrabs(n: number): void {
    this.#grabs += n;
    const grab = encodePacket("REQ", PACKET.GRAB_JOB_UNIQ, []);
    for (let i = 0; i < n; i++) this.#connection.send(grab);
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
        this.#onAssign(packet);
        return;
      case PACKET.NO_JOB:
        this.#onNoJob();
        return;
      case PACKET.NOOP:
        this.#onNoop();
        return;
      case PACKET.ECHO_RES:
        return;
      case PACKET.ERROR:
        this.#onError(packet);
        return;
      default:
        void this.#connection.close().then(() => {});
        log.error("gearman: unexpected packet on worker connection, reconnecting", {
          queue: this.queue,
          server: this.server,
          packet: packetName(packet.type),
        });
    }
  }

  #onAssign(packet: Packet): void {
    this.#grabs--;
    const args = packet.args;
    // JOB_ASSIGN_ALL carries a reducer before the workload (gearman.md §2, 39/40).
    const payload = args[args.length - 1] as Uint8Array;
    const job: Job = {
      queue: this.queue,
      server: this.server,
      handle: argText(args[0]),
      unique: argText(args[2]),
      payload,
      receivedAt: Date.now(),
    };
    if (this.#draining || this.#dead) {
      // Assigned by a grab sent before the drain: not started, not answered;
      // the close re-queues it (G9 step 1).
      this.#pool.release();
      return;
    }
    const run = this.#run(job);
    this.#running.add(run);
    void run.finally(() => this.#running.delete(run));
    this.#pump();
  }

  #onNoJob(): void {
    this.#grabs--;
    this.#idle = true;
    this.#stopWaiting();
    this.#pool.release();
    if (this.#grabs === 0 && !this.#draining && !this.#dead) {
      this.#connection.send(encodePacket("REQ", PACKET.PRE_SLEEP, []));
      this.#sleeping = true;
      this.#sleepingSince = performance.now();
      this.#armIdlePoll();
    }
  }

  #onNoop(): void {
    this.#sleeping = false;
    this.#idle = false;
    this.#stopIdlePoll();
    this.#pump();
  }

  #armIdlePoll(): void {
    this.#stopIdlePoll();
    if (this.#idlePollMs <= 0) return;
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = undefined;
      if (!this.#sleeping || this.#draining || this.#dead) return;
      // No NOOP for a long time: grab anyway (gearman.md §6.3 idle poll).
      log.debug("gearman: idle poll", {
        queue: this.queue,
        server: this.server,
        sleeping_ms: Math.round(performance.now() - this.#sleepingSince),
      });
      this.#onNoop();
    }, this.#idlePollMs);
  }

  #onError(packet: Packet): void {
    const code = argText(packet.args[0]);
    const text = argText(packet.args[1]);
    if (code === "JOB_NOT_FOUND") {
      // The server no longer considers us the owner (re-queued): count, carry on.
      this.#jobNotFound++;
      log.warn("gearman: server did not accept an acknowledgement", {
        queue: this.queue,
        server: this.server,
        code,
        text,
      });
      return;
    }
    log.error("gearman: error packet on worker connection, reconnecting", {
      queue: this.queue,
      server: this.server,
      code,
      text,
    });
    void this.#connection.close();
  }

  async #run(job: Job): Promise<void> {
    const started = performance.now();
    this.#inFlight++;
    this.#observer.jobReceived(job.queue);
    this.#observer.inFlight(job.queue, 1);
    let result: JobResult = "abandoned";
    let delayMs = this.#retryInitialMs;
    try {
      for (;;) {
        try {
          // A handler that ignores the abort must not hold the slot (and
          // shutdown) hostage: once aborted, stop waiting for it.
          await abortable(this.#handler(job, this.#handlerAbort.signal), this.#handlerAbort.signal);
          result = "completed";
          break;
        } catch (err: unknown) {
          if (err instanceof DiscardJobError) {
            result = "failed";
            log.warn("gearman: handler discarded job", {
              queue: job.queue,
              server: job.server,
              handle: job.handle,
              error: errorMessage(err),
            });
            break;
          }
          if (this.#handlerAbort.signal.aborted || this.#draining || this.#dead) break;
          this.#observer.jobRetried(job.queue);
          log.warn("gearman: handler failed, retrying job", {
            queue: job.queue,
            server: job.server,
            handle: job.handle,
            retry_in_ms: delayMs,
            error: errorMessage(err),
          });
          if (!(await this.#sleep(delayMs))) break;
          delayMs = Math.min(delayMs * 2, this.#retryMaxMs);
        }
      }
    } finally {
      this.#inFlight--;
      this.#observer.inFlight(job.queue, -1);
    }
    if (result === "completed" || result === "failed") {
      // Only the connection that received the job may answer it (D12).
      const packet = result === "completed"
        ? encodePacket("REQ", PACKET.WORK_COMPLETE, [job.handle, ""])
        : encodePacket("REQ", PACKET.WORK_FAIL, [job.handle]);
      if (this.#dead || !this.#connection.send(packet)) result = "abandoned";
    }
    this.#observer.jobDone(job.queue, result, (performance.now() - started) / 1000);
    this.#pool.release();
    this.#pump();
  }

  /** Sleep unless handlers are aborted, the worker drains or the connection dies; false when interrupted. */
  #sleep(ms: number): Promise<boolean> {
    return sleepUnlessAborted(
      ms,
      AbortSignal.any([this.#handlerAbort.signal, this.#stopRetries.signal]),
    );
  }
}
