/**
 * Per-queue interval counters behind the consumers' 30 s summary lines (docs/logging.md#summaries),
 * shared by every backend so they report the same things the same way.
 *
 * @module
 */
import type { ConsumerObserver, JobResult } from "./contract.ts";
import type { Logger } from "../log.ts";

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
      this.#stats.set(q, {
        processed: 0,
        abandoned: 0,
        retried: 0,
        reconnects: 0,
        inFlight: 0,
      });
    }
  }

  #of(queue: string): QueueStats {
    return this.#stats.get(queue) as QueueStats;
  }

  /** An observer that counts and then forwards to `inner`. */
  wrap(inner: ConsumerObserver): ConsumerObserver {
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
      queueConnected: (queue, connected) => inner.queueConnected(queue, connected),
      queueReconnected: (queue) => inner.queueReconnected(queue),
      queueStalled: (queue, stalled) => inner.queueStalled(queue, stalled),
      queueWindow: (queue, jobs) => inner.queueWindow(queue, jobs),
      queueBacklog: (queue, jobs) => inner.queueBacklog(queue, jobs),
      jobsGivenBack: (queue, reason, jobs) => inner.jobsGivenBack(queue, reason, jobs),
    };
  }

  /** Count a reconnect of `queue` (the metric is reported separately). */
  reconnected(queue: string): void {
    this.#of(queue).reconnects++;
  }

  /**
   * Log one line per queue that did something or holds jobs, and start a new interval. An idle
   * worker logs nothing (twelve all-zero lines every 30 s said nothing); `final`, the shutdown
   * summary, logs one line for all when all were idle. Returns the lines logged.
   */
  log(
    log: Logger,
    message: string,
    extra: (queue: string) => Record<string, unknown>,
    options: { final?: boolean } = {},
  ): number {
    let lines = 0;
    for (const [queue, s] of this.#stats) {
      const active = s.processed + s.abandoned + s.retried + s.reconnects +
          s.inFlight > 0;
      if (active) {
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
      s.processed = 0;
      s.abandoned = 0;
      s.retried = 0;
      s.reconnects = 0;
    }
    if (lines === 0 && options.final === true) {
      lines++;
      log.info(message, { queues: this.#stats.size, processed: 0 });
    }
    return lines;
  }
}
