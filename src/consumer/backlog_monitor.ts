/**
 * Watching the broker's backlog per queue (`statusengine_queue_backlog`), on its own timer and
 * bounded, so a hung broker delays the gauge but never a job; an unknown backlog is reported
 * unknown, never 0. The stall detector tells "idle" from "stuck" (a link that lost a wake-up looks
 * healthy otherwise), asking the broker only about a link already suspect
 * (docs/consumption.md#the-consumer-core-srcconsumer).
 *
 * @module
 */
import type { Link, LinkTarget } from "./contract.ts";
import type { QueueBudget } from "./budget.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage, type Logger, type LogProperties } from "../log.ts";

const BACKLOG_INTERVAL_MS = 10_000;
/** Longest a round may take; a broker that answers later counts as unknown for that round. */
const BACKLOG_TIMEOUT_MS = 5_000;

/** One question a round asks: the backlogs of some queues at one server. */
export interface BacklogSource {
  /** For logs. */
  readonly server: string;
  /** Queues the answer covers. */
  readonly queues: readonly string[];
  /** Jobs waiting per queue; missing or undefined is unknown, a rejection makes all unknown. */
  read(signal: AbortSignal): Promise<ReadonlyMap<string, number | undefined>>;
}

/** One source per (target, queue) via {@link LinkTarget.backlog}, for brokers without a bulk question. */
export function perQueueSources(targets: readonly LinkTarget[]): BacklogSource[] {
  return targets.flatMap((target) =>
    target.queues.map((queue): BacklogSource => ({
      server: target.server,
      queues: [queue],
      read: async (signal) => new Map([[queue, await target.backlog(queue, signal)]]),
    }))
  );
}

export interface BacklogMonitorOptions {
  /** What a round asks, each in parallel; a queue's backlog is the sum over the sources. */
  readonly sources: readonly BacklogSource[];
  /** Time between rounds; default {@link BACKLOG_INTERVAL_MS}. */
  readonly intervalMs?: number | undefined;
  /** A queue's backlog: jobs waiting, or undefined when not every target could tell. */
  readonly report: (queue: string, jobs: number | undefined) => void;
  readonly name: string;
  readonly log: Logger;
}

export class BacklogMonitor {
  readonly #o: BacklogMonitorOptions;
  readonly #stop = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #round: Promise<void> | undefined;
  /** Queues whose last failure was logged, so an outage logs once, not every round. */
  readonly #failing = new Set<string>();

  constructor(options: BacklogMonitorOptions) {
    this.#o = options;
  }

  /** Ask now, then every interval until {@link stop}; once started, a second call does nothing. */
  start(): void {
    if (this.#stop.signal.aborted || this.#timer !== undefined || this.#round !== undefined) return;
    this.#next(0);
  }

  /** Stop asking, drop a round in progress, and report every queue unknown (no stale reading). */
  async stop(): Promise<void> {
    this.#stop.abort();
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#round;
    for (const queue of new Set(this.#o.sources.flatMap((s) => s.queues))) {
      this.#o.report(queue, undefined);
    }
  }

  #next(ms: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#round = this.check().finally(() => {
        if (!this.#stop.signal.aborted) this.#next(this.#o.intervalMs ?? BACKLOG_INTERVAL_MS);
      });
    }, ms);
  }

  /** One round: every source asked in parallel, each queue reported once (also for tests). */
  async check(): Promise<void> {
    using limit = deadline(
      Math.min(BACKLOG_TIMEOUT_MS, this.#o.intervalMs ?? BACKLOG_INTERVAL_MS),
      this.#stop.signal,
    );
    const totals = new Map<string, number | undefined>();
    await Promise.all(this.#o.sources.map(async (source) => {
      let answer: ReadonlyMap<string, number | undefined> | undefined;
      try {
        // Raced against the deadline too: a source that ignores its signal cannot hold the round.
        answer = await abortable(source.read(limit.signal), limit.signal);
      } catch (err: unknown) {
        for (const queue of source.queues) {
          if (!this.#failing.has(queue) && !this.#stop.signal.aborted) {
            this.#o.log.debug(`${this.#o.name}: cannot read the backlog`, {
              queue,
              server: source.server,
              error: errorMessage(err),
            });
          }
          this.#failing.add(queue);
        }
      }
      for (const queue of source.queues) {
        const jobs = answer?.get(queue);
        const before = totals.has(queue) ? totals.get(queue) : 0;
        totals.set(queue, before === undefined || jobs === undefined ? undefined : before + jobs);
      }
    }));
    if (this.#stop.signal.aborted) return;
    for (const [queue, jobs] of totals) {
      if (jobs !== undefined) this.#failing.delete(queue);
      this.#o.report(queue, jobs);
    }
  }
}

export interface WatchedLink {
  readonly target: LinkTarget;
  readonly queue: string;
  current(): Link | undefined;
  readonly budget: QueueBudget;
}

export interface StallDetectorOptions {
  readonly links: readonly WatchedLink[];
  /** A suspect link this long without a job, with jobs waiting, is stalled. */
  readonly timeoutMs: number;
  readonly name: string;
  readonly log: Logger;
  /** The stalled state of a queue changed (true while any of its links is stalled). */
  readonly onQueueStalled: (queue: string, stalled: boolean) => void;
  /** Whether the queue's jobs wait for MySQL (slow or unavailable): a full queue then is not stalled. */
  readonly waitsForMysql?: ((queue: string) => boolean) | undefined;
}

/** A queue or a link that may be stalled: since when. */
interface Stallable {
  stalledSince?: number | undefined;
}

/** A queue whose every slot holds a job: since when none finished while MySQL took writes. */
interface FullState extends Stallable {
  readonly budget: QueueBudget;
  /** `budget.released` when last looked at. */
  released: number;
  /** Since when the queue has been full with no job finished and MySQL available. */
  quietSince: number;
}

interface LinkState extends Stallable {
  /** While stalled: a job received after this `receivedAt` ends the stall. */
  takenAfter: number;
  link?: Link | undefined;
  probing: boolean;
}

const PROBE_TIMEOUT_MS = 5_000;

export class StallDetector {
  readonly #o: StallDetectorOptions;
  readonly #states = new Map<WatchedLink, LinkState>();
  /** Per queue: the budget spans every link of the queue. */
  readonly #full = new Map<string, FullState>();
  readonly #stalledQueues = new Map<string, number>();
  readonly #stop = new AbortController();
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(options: StallDetectorOptions) {
    this.#o = options;
    for (const l of options.links) {
      this.#states.set(l, { takenAfter: 0, probing: false });
      this.#full.set(l.queue, { budget: l.budget, released: 0, quietSince: performance.now() });
    }
  }

  /** Check every so often until {@link stop}; a timeout of 0 disables detection. Idempotent. */
  start(): void {
    if (this.#o.timeoutMs <= 0 || this.#timer !== undefined) return;
    const every = Math.min(10_000, Math.max(250, this.#o.timeoutMs / 4));
    this.#timer = setInterval(() => this.check(), every);
  }

  /** Stop checking; stalled queues read as not stalled. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stop.abort();
    for (const [watched, state] of this.#states) this.#clear(watched.queue, state);
    for (const [queue, state] of this.#full) this.#clear(queue, state);
  }

  stalled(queue: string): boolean {
    return (this.#stalledQueues.get(queue) ?? 0) > 0;
  }

  /** One round of checks (also called by tests). */
  check(): void {
    const now = performance.now();
    for (const [queue, state] of this.#full) this.#checkFull(queue, state, now);
    for (const [watched, state] of this.#states) {
      const link = watched.current();
      if (link !== state.link) {
        state.link = link;
        // A new link (RabbitMQ's nudge rebuilds the session) has taken nothing yet: the queue
        // stays stalled until it takes a job, or the alert on the gauge could never fire.
        if (link !== undefined) state.takenAfter = link.receivedAt(watched.queue);
      }
      if (link === undefined) continue;
      if (state.stalledSince !== undefined) {
        const received = link.receivedAt(watched.queue);
        if (received > state.takenAfter) {
          this.#clear(watched.queue, state, "queue takes jobs again", watched.target.server);
          continue;
        }
        // A link rebuilt meanwhile gets the whole timeout before the next nudge rebuilds it.
        if (now - received >= this.#o.timeoutMs) link.nudge(watched.queue);
        // Asked again: another worker may have taken the jobs, and then nothing waits any more.
      } else if (!this.#quiet(watched, link, now)) continue;
      if (state.probing) continue;
      state.probing = true;
      void this.#probe(watched, state, link).finally(() => (state.probing = false));
    }
  }

  /**
   * Every slot held by a job and none finished for the timeout while MySQL took writes: handlers
   * that never settle (a bug, a hung promise) wedge the queue with no free slot for the checks
   * below to suspect. Not nudged: what is missing is a free slot, not work from the broker.
   */
  #checkFull(queue: string, state: FullState, now: number): void {
    const { budget } = state;
    if (budget.full && budget.released === state.released) {
      // Jobs held up by MySQL are reported by statusengine_db_available; they go on once it answers.
      if (this.#o.waitsForMysql?.(queue) === true) state.quietSince = now;
      if (state.stalledSince !== undefined || now - state.quietSince < this.#o.timeoutMs) return;
      this.#stall(queue, state, now, "every slot holds a job that does not finish", {
        jobs_in_flight: budget.inUse,
        quiet_s: Math.round((now - state.quietSince) / 1000),
        hint: "MySQL takes writes; a handler waits for something that never comes",
      });
      return;
    }
    state.released = budget.released;
    state.quietSince = now;
    this.#clear(queue, state, "queue no longer stalled: a slot came free");
  }

  /** One more (1) or one less (-1) reason for `queue` to be stalled. */
  #count(queue: string, delta: 1 | -1): void {
    const count = (this.#stalledQueues.get(queue) ?? 0) + delta;
    this.#stalledQueues.set(queue, count);
    if (count === (delta === 1 ? 1 : 0)) this.#o.onQueueStalled(queue, delta === 1);
  }

  /**
   * A slot has held no job (free, or asked for one that has not come) and no job was taken for
   * the timeout: a server that leaves every grab unanswered leaves no slot free.
   */
  #quiet(watched: WatchedLink, link: Link, now: number): boolean {
    const { budget } = watched;
    return !budget.full &&
      now - Math.max(link.receivedAt(watched.queue), budget.roomSince) >= this.#o.timeoutMs;
  }

  async #probe(watched: WatchedLink, state: LinkState, link: Link): Promise<void> {
    const { server } = watched.target;
    let waiting: number | undefined;
    try {
      using limit = deadline(PROBE_TIMEOUT_MS, this.#stop.signal);
      waiting = await watched.target.backlog(watched.queue, limit.signal);
    } catch (err: unknown) {
      this.#o.log.debug(`${this.#o.name}: backlog query failed`, {
        queue: watched.queue,
        server,
        error: errorMessage(err),
      });
      return;
    }
    if (this.#stop.signal.aborted || waiting === undefined || watched.current() !== link) return;
    if (state.stalledSince !== undefined) {
      if (waiting === 0) {
        this.#clear(watched.queue, state, "queue no longer stalled: no job waits", server);
      }
      return;
    }
    const now = performance.now();
    if (waiting === 0 || !this.#quiet(watched, link, now)) return;
    state.takenAfter = now;
    this.#stall(watched.queue, state, now, "jobs are waiting but none is taken", {
      server,
      waiting,
      quiet_s: Math.round((now - link.receivedAt(watched.queue)) / 1000),
      free_slots: watched.budget.capacity - watched.budget.inUse,
    });
    link.nudge(watched.queue);
  }

  /** Stalled from `now`: counted, and logged as an error with `fields`. */
  #stall(queue: string, state: Stallable, now: number, what: string, fields: LogProperties): void {
    state.stalledSince = now;
    this.#count(queue, 1);
    this.#o.log.error(`${this.#o.name}: queue stalled: ${what}`, { queue, ...fields });
  }

  /** Not stalled any more; `message` is logged, unless undefined (a stop). A link names its server. */
  #clear(queue: string, state: Stallable, message?: string, server?: string): void {
    const since = state.stalledSince;
    if (since === undefined) return;
    state.stalledSince = undefined;
    this.#count(queue, -1);
    if (message === undefined) return;
    this.#o.log.info(`${this.#o.name}: ${message}`, {
      queue,
      ...(server === undefined ? {} : { server }),
      stalled_s: Math.round((performance.now() - since) / 1000),
    });
  }
}
