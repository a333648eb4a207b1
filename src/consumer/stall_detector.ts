/**
 * Tells "idle" from "stuck": a link is stalled when jobs wait at the broker, the queue has room,
 * and the link has taken none for the stall timeout (a link that lost a wake-up looks healthy
 * otherwise). The broker is asked only about a link already suspect, so a healthy worker sends no
 * extra queries. A stalled link is nudged on every check and reported until it takes a job.
 *
 * @module
 */
import type { Link, LinkTarget } from "./contract.ts";
import type { QueueBudget } from "./budget.ts";
import { deadline } from "../util/async.ts";
import { errorMessage, type Logger } from "../log.ts";

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
}

interface LinkState {
  stalledSince: number | undefined;
  link: Link | undefined;
  probing: boolean;
}

const PROBE_TIMEOUT_MS = 5_000;

export class StallDetector {
  readonly #o: StallDetectorOptions;
  readonly #states = new Map<WatchedLink, LinkState>();
  readonly #stalledQueues = new Map<string, number>();
  readonly #stop = new AbortController();
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(options: StallDetectorOptions) {
    this.#o = options;
    for (const l of options.links) {
      this.#states.set(l, { stalledSince: undefined, link: undefined, probing: false });
    }
  }

  /** Check every so often until {@link stop}; a timeout of 0 disables detection. */
  start(): void {
    if (this.#o.timeoutMs <= 0) return;
    const every = Math.min(10_000, Math.max(250, this.#o.timeoutMs / 4));
    this.#timer = setInterval(() => this.check(), every);
  }

  /** Stop checking; stalled queues read as not stalled. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stop.abort();
    for (const [watched, state] of this.#states) this.#clear(watched, state, false);
  }

  stalled(queue: string): boolean {
    return (this.#stalledQueues.get(queue) ?? 0) > 0;
  }

  /** One round of checks (also called by tests). */
  check(): void {
    const now = performance.now();
    for (const [watched, state] of this.#states) {
      const link = watched.current();
      if (link !== state.link) {
        // A new generation (or none): whatever was stalled belonged to the old one.
        this.#clear(watched, state, true);
        state.link = link;
      }
      if (link === undefined) continue;
      if (state.stalledSince !== undefined) {
        if (link.lastReceivedAt > state.stalledSince) {
          this.#clear(watched, state, true);
        } else {
          link.nudge(watched.queue);
        }
        continue;
      }
      const budget = watched.budget;
      if (!budget.hasRoom) continue;
      const quietSince = Math.max(link.lastReceivedAt, budget.roomSince);
      if (now - quietSince < this.#o.timeoutMs || state.probing) continue;
      state.probing = true;
      void this.#probe(watched, state, link).finally(() => {
        state.probing = false;
      });
    }
  }

  async #probe(watched: WatchedLink, state: LinkState, link: Link): Promise<void> {
    let waiting: number | undefined;
    try {
      using limit = deadline(PROBE_TIMEOUT_MS, this.#stop.signal);
      waiting = await watched.target.backlog(watched.queue, limit.signal);
    } catch (err: unknown) {
      this.#o.log.debug(`${this.#o.name}: backlog query failed`, {
        queue: watched.queue,
        server: watched.target.server,
        error: errorMessage(err),
      });
      return;
    }
    if (this.#stop.signal.aborted || waiting === undefined || waiting === 0) return;
    // Still the same, still quiet, still with room: stalled.
    const now = performance.now();
    if (
      watched.current() !== link || !watched.budget.hasRoom ||
      now - Math.max(link.lastReceivedAt, watched.budget.roomSince) < this.#o.timeoutMs
    ) {
      return;
    }
    state.stalledSince = now;
    const count = (this.#stalledQueues.get(watched.queue) ?? 0) + 1;
    this.#stalledQueues.set(watched.queue, count);
    if (count === 1) this.#o.onQueueStalled(watched.queue, true);
    this.#o.log.error(`${this.#o.name}: queue stalled: jobs are waiting but none is taken`, {
      queue: watched.queue,
      server: watched.target.server,
      waiting,
      quiet_s: Math.round((now - link.lastReceivedAt) / 1000),
      free_slots: watched.budget.capacity - watched.budget.inUse,
    });
    link.nudge(watched.queue);
  }

  #clear(watched: WatchedLink, state: LinkState, log: boolean): void {
    if (state.stalledSince === undefined) return;
    const since = state.stalledSince;
    state.stalledSince = undefined;
    const count = (this.#stalledQueues.get(watched.queue) ?? 1) - 1;
    this.#stalledQueues.set(watched.queue, count);
    if (count === 0) this.#o.onQueueStalled(watched.queue, false);
    if (log) {
      this.#o.log.info(`${this.#o.name}: queue takes jobs again`, {
        queue: watched.queue,
        server: watched.target.server,
        stalled_s: Math.round((performance.now() - since) / 1000),
      });
    }
  }
}
