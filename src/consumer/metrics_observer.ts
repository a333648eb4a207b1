/**
 * Reports consumer events into the Prometheus metrics, one helper for every backend so they
 * cannot drift into reporting different things.
 *
 * @module
 */
import type { ConsumerObserver, GiveBackReason, JobResult } from "./contract.ts";
import type { Metrics } from "../metrics/registry.ts";

/** Which queues are consuming and which are stalled, for `/readyz`. */
export interface ConnectionState {
  /** Queues whose every broker connection is up and answered. */
  readonly connected: ReadonlySet<string>;
  /** Queues with jobs waiting that take none (see the stall detector). */
  readonly stalled: ReadonlySet<string>;
  /** Queues given back to the broker and not consuming until MySQL answers (docs/retries.md#give-back). */
  readonly givenBack: ReadonlySet<string>;
}

/** An observer that feeds the metric handles, and the live connection state. */
export function metricsObserver(metrics: Metrics): ConsumerObserver & ConnectionState {
  const connected = new Set<string>();
  const stalled = new Set<string>();
  const givenBack = new Set<string>();
  return {
    connected,
    stalled,
    givenBack,
    jobReceived(queue: string) {
      metrics.queueMessagesReceived.inc({ queue_name: queue });
    },
    inFlight(queue: string, delta: 1 | -1) {
      metrics.queueJobsInFlight.inc({ queue_name: queue }, delta);
    },
    jobDone(queue: string, result: JobResult, seconds: number) {
      metrics.queueJobs.inc({ queue_name: queue, result });
      metrics.queueHandlerDuration.observe({ queue_name: queue }, seconds);
    },
    jobRetried(queue: string) {
      metrics.queueJobsRetried.inc({ queue_name: queue });
    },
    queueConnected(queue: string, up: boolean) {
      if (up) {
        connected.add(queue);
        givenBack.delete(queue);
      } else {
        connected.delete(queue);
      }
      metrics.queueConnected.set({ queue_name: queue }, up ? 1 : 0);
    },
    queueReconnected(queue: string) {
      metrics.queueReconnects.inc({ queue_name: queue });
    },
    queueWindow(queue: string, jobs: number) {
      metrics.queueWindow.set({ queue_name: queue }, jobs);
    },
    queueBacklog(queue: string, jobs: number | undefined) {
      // Absent, not 0, while unknown: an empty queue and a broker that cannot be asked differ
      // (and not NaN, which would turn every sum over the workers into NaN).
      if (jobs === undefined) metrics.queueBacklog.remove({ queue_name: queue });
      else metrics.queueBacklog.set({ queue_name: queue }, jobs);
    },
    jobsGivenBack(queue: string, reason: GiveBackReason, jobs: number) {
      metrics.queueJobsGivenBack.inc({ queue_name: queue, reason }, jobs);
      givenBack.add(queue);
    },
    givenBackEnded(queue: string) {
      // A link that cannot be rebuilt now is "not connected", not waiting for MySQL.
      givenBack.delete(queue);
    },
    queueStalled(queue: string, isStalled: boolean) {
      if (isStalled) stalled.add(queue);
      else stalled.delete(queue);
      metrics.queueStalled.set({ queue_name: queue }, isStalled ? 1 : 0);
    },
  };
}
