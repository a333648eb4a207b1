import type { ConsumerObserver, GiveBackReason, JobResult } from "../../src/consumer/contract.ts";

/** A {@link ConsumerObserver} that remembers what it was told, for assertions. */
export class RecordingObserver implements ConsumerObserver {
  readonly received = new Map<string, number>();
  readonly inFlightNow = new Map<string, number>();
  readonly done = new Map<string, Record<JobResult, number>>();
  readonly retried = new Map<string, number>();
  readonly reconnects = new Map<string, number>();
  /** Every value the connected gauge took, per queue, in order. */
  readonly connectedHistory = new Map<string, boolean[]>();
  /** Every size the window took, per queue, in order. */
  readonly windowHistory = new Map<string, number[]>();
  /** Every value the stalled gauge took, per queue, in order. */
  readonly stalledHistory = new Map<string, boolean[]>();

  jobReceived(queue: string): void {
    this.received.set(queue, (this.received.get(queue) ?? 0) + 1);
  }
  inFlight(queue: string, delta: 1 | -1): void {
    this.inFlightNow.set(queue, (this.inFlightNow.get(queue) ?? 0) + delta);
  }
  jobDone(queue: string, result: JobResult): void {
    const r = this.done.get(queue) ?? { completed: 0, abandoned: 0 };
    r[result]++;
    this.done.set(queue, r);
  }
  jobRetried(queue: string): void {
    this.retried.set(queue, (this.retried.get(queue) ?? 0) + 1);
  }
  queueConnected(queue: string, connected: boolean): void {
    const h = this.connectedHistory.get(queue) ?? [];
    h.push(connected);
    this.connectedHistory.set(queue, h);
  }
  queueReconnected(queue: string): void {
    this.reconnects.set(queue, (this.reconnects.get(queue) ?? 0) + 1);
  }
  /** Jobs given back per queue. */
  readonly givenBack = new Map<string, number>();
  jobsGivenBack(queue: string, _reason: GiveBackReason, jobs: number): void {
    this.givenBack.set(queue, (this.givenBack.get(queue) ?? 0) + jobs);
  }
  /** Queues told that no link is given back any more, in order. */
  readonly givenBackEnds: string[] = [];
  givenBackEnded(queue: string): void {
    this.givenBackEnds.push(queue);
  }
  queueStalled(queue: string, stalled: boolean): void {
    const h = this.stalledHistory.get(queue) ?? [];
    h.push(stalled);
    this.stalledHistory.set(queue, h);
  }

  /** Every backlog reported, per queue, in order (undefined = unknown). */
  readonly backlogHistory = new Map<string, (number | undefined)[]>();
  queueBacklog(queue: string, jobs: number | undefined): void {
    const h = this.backlogHistory.get(queue) ?? [];
    h.push(jobs);
    this.backlogHistory.set(queue, h);
  }

  queueWindow(queue: string, jobs: number): void {
    const h = this.windowHistory.get(queue) ?? [];
    h.push(jobs);
    this.windowHistory.set(queue, h);
  }

  /** Current value of the connected gauge (undefined = never set). */
  connected(queue: string): boolean | undefined {
    return this.connectedHistory.get(queue)?.at(-1);
  }
  completed(queue: string): number {
    return this.done.get(queue)?.completed ?? 0;
  }
}
