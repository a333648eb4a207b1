/**
 * The backlog at the broker per queue (`statusengine_queue_backlog`): jobs no worker has taken
 * yet. It shows a core that produces faster than the workers write long before anything stalls.
 * Asked on its own timer and connections, one bounded round at a time, so a hung broker delays
 * the gauge but never a job. A backlog not known is reported as unknown, never as 0: an empty
 * queue and a blind worker must not look alike.
 *
 * @module
 */
import type { LinkTarget } from "./contract.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage, type Logger } from "../log.ts";

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
  readonly intervalMs?: number;
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

  /** Ask now, then every interval until {@link stop}. */
  start(): void {
    if (this.#stop.signal.aborted || this.#round !== undefined) return;
    this.#next(0);
  }

  /** Stop asking, drop a round in progress, and report every queue unknown (no stale reading). */
  async stop(): Promise<void> {
    this.#stop.abort();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
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
