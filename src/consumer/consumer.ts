/**
 * The consumer core shared by every backend: per-queue budgets under one byte budget
 * (docs/consumption.md#jobs-in-flight), one delivery engine, one supervisor per link target,
 * stall and backlog watching, give-back, a bounded parallel drain (docs/consumption.md#orderly-stop)
 * and the summary line (docs/logging.md#summaries). A backend contributes only its link targets.
 *
 * @module
 */
import type {
  ConsumerDeadLetterSink,
  ConsumerObserver,
  JobResult,
  LinkTarget,
} from "./contract.ts";
import { ByteBudget, QueueBudget } from "./budget.ts";
import { DeliveryEngine, type DeliveryEngineOptions, type JobObserver } from "./delivery.ts";
import { Supervisor } from "./supervisor.ts";
import {
  BacklogMonitor,
  type BacklogSource,
  perQueueSources,
  StallDetector,
  type WatchedLink,
} from "./backlog_monitor.ts";
import { InFlightWindow, INITIAL_WINDOW, type PressureSignal, WINDOW_TICK_MS } from "./window.ts";
import { deadline } from "../util/async.ts";
import { errorMessage, type Logger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";

/** One consumed queue. */
export interface ConsumedQueue {
  readonly name: string;
  /** One job at a time, whatever the cap (docs/consumption.md#downtimes-in-order). */
  readonly inOrder: boolean;
  /**
   * Its jobs (a few bytes each) never wait for `--max-in-flight-bytes`: they hold bytes of a budget
   * of their own ({@link RECEIVE_AT_ONCE_BYTES}), so a burst of other queues cannot delay them.
   */
  readonly receiveAtOnce?: boolean;
}

/** The byte budget of a queue whose jobs are taken at once: far above what its jobs take. */
const RECEIVE_AT_ONCE_BYTES = 1024 * 1024;

/** What a backend's link targets are built from. */
export interface LinkContext {
  readonly engine: DeliveryEngine;
  budget(queue: string): QueueBudget;
}

/** The adaptive in-flight window (see window.ts). */
export interface WindowOptions {
  /** The pressure on the tables each queue feeds. */
  readonly pressure: PressureSignal;
  /** Adjustment interval; default {@link WINDOW_TICK_MS}. */
  readonly tickMs?: number;
}

/** When held jobs go back to the broker (docs/retries.md#give-back). */
export interface GiveBackPolicy {
  /** `--mysql-give-back-after`, > 0. */
  readonly afterMs: number;
  /** How long writers have been holding rows because MySQL cannot take them; 0 while none does. */
  readonly holdingForMs: () => number;
  /** Whether MySQL answered after `at` (`performance.now()`). */
  readonly answeredSince: (at: number) => boolean;
}

const GIVE_BACK_CHECK_MS = 2_000;
const CONSUMERS_QUERY_TIMEOUT_MS = 5_000;

/** The options every backend passes through to the core unchanged (the core ignores `maxJobSize`). */
export interface BackendOptions extends Pick<DeliveryEngineOptions, "handler" | "retry"> {
  readonly queues: readonly ConsumedQueue[];
  /** Adapt the jobs in flight of every queue that is not in order; absent = fixed at the cap. */
  readonly window?: WindowOptions;
  /** Payload bytes in flight across all queues; default 256 MiB. */
  readonly maxInFlightBytes?: number | undefined;
  readonly observer: ConsumerObserver;
  /** Records jobs that are too large or trip an internal error; default: nothing is kept. */
  readonly deadLetter?: ConsumerDeadLetterSink;
  readonly reconnectIntervalMs: number;
  /** Stop waits this long for running handlers before abandoning their jobs. */
  readonly drainTimeoutMs: number;
  /** A queue with jobs waiting that takes none for this long is stalled; 0 disables. Default 60 s (tests shorten it). */
  readonly stallTimeoutMs?: number | undefined;
  /** Interval of the per-queue summary line; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number | undefined;
  /** Time between two readings of every queue's backlog at the broker; default 10 s, 0 disables. */
  readonly backlogIntervalMs?: number | undefined;
  /** When no link can be opened at start, keep retrying instead of failing the start. */
  readonly waitAtStart?: boolean;
  /** Give held jobs back to the broker while MySQL cannot take writes; absent = always hold. */
  readonly giveBack?: GiveBackPolicy;
  /** A job above this many bytes is dead-lettered unread (`too_large`); default 64 MiB. */
  readonly maxJobSize?: number | undefined;
}

export interface ConsumerOptions
  extends BackendOptions, Pick<DeliveryEngineOptions, "name" | "log"> {
  /** Hard cap of jobs in flight per queue (≥ 1; in-order queues get 1). */
  readonly maxJobsPerQueue: number;
  readonly targets: (context: LinkContext) => readonly LinkTarget[];
  /** What each backlog reading asks; default {@link perQueueSources}. */
  readonly backlogSources?: readonly BacklogSource[];
  /** Fields of the start-up line. */
  readonly describe?: Record<string, unknown>;
  /** What a link target is called in messages; default "broker". */
  readonly serverNoun?: string;
  /** Whether a failed first attempt is worth waiting for (not refused credentials). Default: yes. */
  readonly waitable?: (err: unknown) => boolean;
}

/** Default of `--max-in-flight-bytes`. */
export const DEFAULT_MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024;

/** A larger job is dead-lettered unread (`too_large`): bulk jobs are a few hundred KiB, so it is a fault. */
export const MAX_JOB_SIZE = 64 * 1024 * 1024;

/** A healthy link takes a waiting job within ms; a minute is far above any pause of a slow restart. */
export const STALL_TIMEOUT_MS = 60_000;

/** Consumes every queue through every link target of one backend. */
export class Consumer {
  readonly #o: ConsumerOptions;
  readonly #bytes: ByteBudget;
  readonly #budgets = new Map<string, QueueBudget>();
  readonly #windows: InFlightWindow[] = [];
  /** The window, give-back and summary timers, cleared on stop. */
  readonly #timers: ReturnType<typeof setInterval>[] = [];
  readonly #stats: ConsumerStats;
  readonly #supervisors: Supervisor[] = [];
  readonly #up = new Map<string, Set<Supervisor>>();
  readonly #serving = new Map<string, number>();
  readonly #stallDetector: StallDetector;
  readonly #backlog: BacklogMonitor | undefined;
  #giveBackRunning = false;
  /** Aborted by stop: ends a question to the broker that the give-back check has under way. */
  readonly #stopSignal = new AbortController();
  #started = false;
  #stopping: Promise<void> | undefined;

  /** @throws {RangeError} On an empty queue list or a cap below 1. */
  constructor(options: ConsumerOptions) {
    if (options.queues.length === 0) {
      // One link per queue: with none, start would "succeed" consuming nothing
      // (docs/consumption.md#one-connection-per-queue).
      throw new RangeError(`Cannot create ${options.name} consumer: no queues to consume`);
    }
    if (!Number.isInteger(options.maxJobsPerQueue) || options.maxJobsPerQueue < 1) {
      throw new RangeError(
        `Cannot create ${options.name} consumer: jobs per queue must be >= 1, got ${options.maxJobsPerQueue}`,
      );
    }
    this.#o = options;
    this.#bytes = new ByteBudget(options.maxInFlightBytes ?? DEFAULT_MAX_IN_FLIGHT_BYTES);
    const window = options.window;
    for (const q of options.queues) {
      const cap = this.capFor(q);
      const budget = new QueueBudget(
        q.name,
        window === undefined || q.inOrder ? cap : Math.min(cap, INITIAL_WINDOW),
        q.receiveAtOnce === true ? new ByteBudget(RECEIVE_AT_ONCE_BYTES) : this.#bytes,
      );
      this.#budgets.set(q.name, budget);
      this.#up.set(q.name, new Set());
      if (window !== undefined && !q.inOrder) {
        this.#windows.push(
          new InFlightWindow(
            q.name,
            budget,
            cap,
            () => window.pressure(q.name),
            (jobs) => options.observer.queueWindow(q.name, jobs),
          ),
        );
      }
    }
    this.#stats = new ConsumerStats(options.queues.map((q) => q.name));
    const observer = this.#stats.wrap(options.observer);
    const deadLetter = options.deadLetter ?? (() => Promise.resolve());
    const engine = new DeliveryEngine({ ...options, observer, deadLetter });
    const targets = options.targets({ engine, budget: (queue) => this.#budget(queue) });
    const watched: WatchedLink[] = [];
    for (const target of targets) {
      const supervisor: Supervisor = new Supervisor({
        ...options,
        target,
        onState: (up) => this.#setState(supervisor, up),
        onReconnected: () => {
          for (const q of target.queues) {
            this.#stats.reconnected(q);
            options.observer.queueReconnected(q);
          }
        },
      });
      this.#supervisors.push(supervisor);
      for (const q of target.queues) {
        this.#serving.set(q, (this.#serving.get(q) ?? 0) + 1);
        watched.push({
          target,
          queue: q,
          budget: this.#budget(q),
          current: () => supervisor.current,
        });
      }
    }
    this.#stallDetector = new StallDetector({
      ...options,
      links: watched,
      timeoutMs: options.stallTimeoutMs ?? STALL_TIMEOUT_MS,
      onQueueStalled: (queue, stalled) => options.observer.queueStalled(queue, stalled),
      waitsForMysql: (queue) => options.window?.pressure(queue).slow === true,
    });
    this.#backlog = options.backlogIntervalMs === 0 ? undefined : new BacklogMonitor({
      ...options,
      sources: options.backlogSources ?? perQueueSources(targets),
      intervalMs: options.backlogIntervalMs,
      report: (queue, jobs) => options.observer.queueBacklog(queue, jobs),
    });
  }

  #budget(queue: string): QueueBudget {
    const budget = this.#budgets.get(queue);
    if (budget === undefined) throw new RangeError(`Queue "${queue}" is not consumed`);
    return budget;
  }

  /** The most jobs `queue` may ever hold in flight at once. */
  capFor(queue: ConsumedQueue): number {
    return queue.inOrder ? 1 : this.#o.maxJobsPerQueue;
  }

  /** Whether every link serving `queue` is consuming. */
  #connected(queue: string): boolean {
    return (this.#up.get(queue)?.size ?? -1) === (this.#serving.get(queue) ?? 0);
  }

  /**
   * Open every link in parallel and start consuming; links that fail keep trying in the background.
   *
   * @throws {WorkerError} (code `consumer_start`) When every first attempt failed (and not `waitAtStart`), or stop was called meanwhile.
   */
  async start(): Promise<void> {
    const { name, log } = this.#o;
    if (this.#started) throw new Error(`${name} consumer: start() called twice`);
    if (this.#stopping !== undefined) {
      throw new Error(`${name} consumer: start() called after stop()`);
    }
    this.#started = true;
    const results = await Promise.allSettled(this.#supervisors.map((s) => s.start()));
    if (this.#stopping !== undefined) {
      // Stopped meanwhile: stop drained or closed every link; no timer may start after it.
      throw new WorkerError(
        "consumer_start",
        `Cannot start ${name} consumer: stopped during start-up`,
      );
    }
    const failed = results.flatMap((r, i) =>
      r.status === "rejected" ? [{ s: this.#supervisors[i] as Supervisor, err: r.reason }] : []
    );
    const waitable = this.#o.waitable ?? (() => true);
    const wait = this.#o.waitAtStart === true && failed.every((f) => waitable(f.err));
    if (failed.length === results.length && !wait) {
      const servers = [...new Set(failed.map((f) => f.s.target.server))].join(", ");
      const cause = failed[0]?.err;
      const detail = `no ${this.#o.serverNoun ?? "broker"} reachable (${servers})`;
      const message = `Cannot start ${name} consumer: ${detail}: ${errorMessage(cause)}`;
      throw new WorkerError("consumer_start", message, { cause });
    }
    for (const { s, err } of failed) {
      log.warn(`${name}: unreachable at start-up, retrying in the background`, {
        // Every link down: the worker serves /metrics and /readyz (503) and consumes once one
        // comes, as after losing them at run time.
        waiting_for_all: failed.length === results.length,
        server: s.target.server,
        queues: s.target.queues.join(","),
        error: errorMessage(err),
      });
      s.startDisconnected();
    }
    const caps = this.#o.queues.map((q) => this.capFor(q));
    log.info(`${name}: consumer started`, {
      ...this.#o.describe,
      queues: this.#o.queues.length,
      max_jobs_per_queue: this.#o.maxJobsPerQueue,
      adaptive_window: this.#windows.length > 0,
      serialized_queues: this.#o.queues.filter((q) => q.inOrder).length,
      process_max_in_flight: caps.reduce((a, b) => a + b, 0),
      max_in_flight_bytes: this.#bytes.limit,
    });
    for (const [queue, budget] of this.#budgets) {
      this.#o.observer.queueWindow(queue, budget.capacity);
    }
    if (this.#windows.length > 0) {
      let reported = false;
      this.#timers.push(setInterval(() => {
        for (const w of this.#windows) {
          try {
            w.tick();
          } catch (err: unknown) {
            // A bug in the pressure signal must not stop consumption: the window stays as it is.
            if (!reported) {
              reported = true;
              log.error(`${name}: cannot adjust the in-flight window`, {
                queue: w.queue,
                error: errorMessage(err),
              });
            }
          }
        }
      }, this.#o.window?.tickMs ?? WINDOW_TICK_MS));
    }
    this.#stallDetector.start();
    this.#backlog?.start();
    const giveBack = this.#o.giveBack;
    if (giveBack !== undefined && giveBack.afterMs > 0) {
      this.#timers.push(setInterval(() => {
        if (this.#giveBackRunning) return;
        this.#giveBackRunning = true;
        void this.#giveBackTick(giveBack).catch((err: unknown) => {
          log.error(`${name}: cannot give held jobs back`, { error: errorMessage(err) });
        }).finally(() => (this.#giveBackRunning = false));
      }, GIVE_BACK_CHECK_MS));
    }
    const interval = this.#o.statsIntervalMs ?? 30_000;
    if (interval > 0) this.#timers.push(setInterval(() => this.#logStats(false), interval));
  }

  /** Stop every link in parallel within the drain timeout. Idempotent; safe before start. */
  stop(): Promise<void> {
    this.#stopping ??= this.#doStop();
    return this.#stopping;
  }

  async #doStop(): Promise<void> {
    for (const timer of this.#timers.splice(0)) clearInterval(timer);
    this.#stopSignal.abort();
    this.#stallDetector.stop();
    const backlogStopped = this.#backlog?.stop();
    using drain = deadline(this.#o.drainTimeoutMs);
    await Promise.all(this.#supervisors.map((s) => s.stop(drain.signal)));
    await backlogStopped;
    if (this.#started) this.#logStats(true);
  }

  /** Resume given-back links once MySQL answered; give back links whose queue another worker consumes. */
  async #giveBackTick(policy: GiveBackPolicy): Promise<void> {
    const now = performance.now();
    const resumed = new Set<string>();
    for (const s of this.#supervisors) {
      const since = s.parkedSince;
      if (since === undefined || !policy.answeredSince(since)) continue;
      s.resume();
      for (const queue of s.target.queues) resumed.add(queue);
      this.#o.log.info(`${this.#o.name}: MySQL answers again, taking jobs again`, {
        server: s.target.server,
        queues: s.target.queues.join(","),
        given_back_for_s: Math.round((now - since) / 1000),
      });
    }
    for (const queue of resumed) {
      // Until a link is rebuilt the queue is "not connected", no longer waiting for MySQL.
      const parked = this.#supervisors.some((s) =>
        s.parkedSince !== undefined && s.target.queues.includes(queue)
      );
      if (!parked) this.#o.observer.givenBackEnded(queue);
    }
    // Read again after every await: MySQL may answer while the broker is asked, and jobs whose
    // rows it now takes must be acknowledged, not given back.
    const gone = () =>
      policy.holdingForMs() >= policy.afterMs &&
      !policy.answeredSince(performance.now() - policy.afterMs);
    if (!gone()) return;
    for (const s of this.#supervisors) {
      // A check under way when stop began asks the broker nothing more.
      if (this.#stopping !== undefined) return;
      const link = s.current;
      if (link === undefined || link.inFlight === 0 || s.parkedSince !== undefined) continue;
      const workers = await this.#otherWorkers(s.target);
      if (workers === undefined || s.current !== link || this.#stopping !== undefined) continue;
      if (!gone()) return;
      const given = await s.giveBack("mysql_unavailable");
      if (given === undefined) continue;
      // Every queue of the link stops consuming, also one that held no job just now.
      for (const queue of s.target.queues) {
        if (!given.has(queue)) this.#o.observer.jobsGivenBack(queue, "mysql_unavailable", 0);
      }
      for (const [queue, jobs] of given) {
        this.#o.observer.jobsGivenBack(queue, "mysql_unavailable", jobs);
        const held = Math.round(policy.holdingForMs() / 1000);
        this.#o.log.info(
          `${this.#o.name}: MySQL cannot take writes and another worker consumes the queue: ` +
            "jobs given back to the broker, none taken until MySQL answers",
          { queue, server: s.target.server, jobs, workers, held_for_s: held },
        );
      }
    }
  }

  /** The workers of the first queue of `target` that another worker consumes too, or undefined (none, or unknown). */
  async #otherWorkers(target: LinkTarget): Promise<number | undefined> {
    for (const queue of target.queues) {
      if (this.#stopSignal.signal.aborted) return undefined;
      using limit = deadline(CONSUMERS_QUERY_TIMEOUT_MS, this.#stopSignal.signal);
      let workers: number | undefined;
      try {
        workers = await target.consumers(queue, limit.signal);
      } catch (err: unknown) {
        // Cannot tell: keep holding (no loss either way).
        this.#o.log.debug(`${this.#o.name}: cannot ask the broker for the queue's workers`, {
          queue,
          server: target.server,
          error: errorMessage(err),
        });
        continue;
      }
      // Counting this worker: more than one means another takes the jobs given back.
      if (workers !== undefined && workers > 1) return workers;
    }
    return undefined;
  }

  #setState(supervisor: Supervisor, up: boolean): void {
    for (const queue of supervisor.target.queues) {
      const before = this.#connected(queue);
      const set = this.#up.get(queue) as Set<Supervisor>;
      if (up) set.add(supervisor);
      else set.delete(supervisor);
      // 1 only while every link is consuming, so a half-served queue is visible.
      const after = this.#connected(queue);
      if (before !== after) this.#o.observer.queueConnected(queue, after);
    }
  }

  #logStats(final: boolean): void {
    this.#stats.log(
      this.#o.log,
      `${this.#o.name}: ${final ? "consumer stopped" : "consumer stats"}`,
      (queue) => ({
        links_up: `${this.#up.get(queue)?.size ?? 0}/${this.#serving.get(queue) ?? 0}`,
        window: this.#budget(queue).capacity,
        stalled: this.#stallDetector.stalled(queue) ? 1 : 0,
      }),
      final,
    );
  }
}

/** Per-queue interval counters behind the summary lines (docs/logging.md#summaries). */
interface QueueStats {
  processed: number;
  abandoned: number;
  retried: number;
  reconnects: number;
  inFlight: number;
}

export class ConsumerStats {
  readonly #stats = new Map<string, QueueStats>();

  constructor(queues: Iterable<string>) {
    for (const q of queues) {
      this.#stats.set(q, { processed: 0, abandoned: 0, retried: 0, reconnects: 0, inFlight: 0 });
    }
  }

  #of(queue: string): QueueStats {
    return this.#stats.get(queue) as QueueStats;
  }

  /** An observer that counts and then forwards to `inner`. */
  wrap(inner: JobObserver): JobObserver {
    return {
      jobReceived: (queue) => inner.jobReceived(queue),
      inFlight: (queue, delta) => {
        this.#of(queue).inFlight += delta;
        inner.inFlight(queue, delta);
      },
      jobDone: (queue, result: JobResult, seconds) => {
        const s = this.#of(queue);
        if (result === "completed") s.processed++;
        else s.abandoned++;
        inner.jobDone(queue, result, seconds);
      },
      jobRetried: (queue) => {
        this.#of(queue).retried++;
        inner.jobRetried(queue);
      },
    };
  }

  /** Count a reconnect of `queue` (the metric is reported separately). */
  reconnected(queue: string): void {
    this.#of(queue).reconnects++;
  }

  /**
   * Log one line per queue that did something or holds jobs (all-zero lines say nothing), and start
   * a new interval; `final`, the shutdown summary, logs one line for all when all were idle.
   */
  log(
    log: Logger,
    message: string,
    extra: (queue: string) => Record<string, unknown>,
    final = false,
  ): void {
    let lines = 0;
    for (const [queue, s] of this.#stats) {
      if (s.processed + s.abandoned + s.retried + s.reconnects + s.inFlight > 0) {
        lines++;
        log.info(message, {
          queue,
          processed: s.processed,
          abandoned: s.abandoned,
          retried: s.retried,
          reconnects: s.reconnects,
          in_flight: s.inFlight,
          ...extra(queue),
        });
      }
      Object.assign(s, { processed: 0, abandoned: 0, retried: 0, reconnects: 0 });
    }
    if (lines === 0 && final) log.info(message, { queues: this.#stats.size, processed: 0 });
  }
}
