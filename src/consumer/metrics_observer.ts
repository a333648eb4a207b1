/**
 * Reports consumer events into the Prometheus metrics (P0: one helper for
 * every backend, so backends cannot drift into reporting different things).
 *
 * @module
 */
import type { ConsumerObserver, JobResult } from "./contract.ts";
import type { Metrics } from "../metrics/registry.ts";

/** Tracks which queues are currently connected, for `/readyz`. */
export interface ConnectionState {
  /** Queues whose every job-server connection is up. */
  readonly connected: ReadonlySet<string>;
}

/**
 * Build an observer that feeds the metric handles.
 *
 * @param metrics Metric handles.
 * @returns The observer and the live connection state.
 */
export function metricsObserver(metrics: Metrics): ConsumerObserver & ConnectionState {
  const connected = new Set<string>();
  return {
    connected,
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
    jobRetried() {},
    queueConnected(queue: string, up: boolean) {
      if (up) connected.add(queue);
      else connected.delete(queue);
      metrics.queueConnected.set({ queue_name: queue }, up ? 1 : 0);
    },
    queueReconnected(queue: string) {
      metrics.queueReconnects.inc({ queue_name: queue });
    },
  };
}
