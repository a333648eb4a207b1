/**
 * A link of the consumer core's transport seam (src/consumer/contract.ts) that a test drives: it
 * holds `inFlight` jobs of one queue until it is given back, drained, aborted or lost, and never
 * receives a job itself. Used where the core runs on a faked clock (tests/consumer/).
 */
import type { GiveBackReason, Link } from "../../src/consumer/contract.ts";

export interface FakeLinkHooks {
  /** Called when the core gives the link back, before it closes. */
  readonly onGiveBack?: (link: FakeLink) => void;
  /** The link was opened after stop began: starting it is a violation. */
  readonly afterStop?: boolean;
  /** Told of what the core must never do with a link (start it twice, start it after stop). */
  readonly violation?: (what: string) => void;
}

export class FakeLink implements Link {
  readonly #closed = Promise.withResolvers<Error | undefined>();
  readonly #hooks: FakeLinkHooks;
  readonly queue: string;
  inFlight: number;
  lastReceivedAt = 0;
  started = false;
  isClosed = false;
  /** The reasons it was given back for, in order. */
  readonly givenBack: GiveBackReason[] = [];

  constructor(queue: string, inFlight: number, hooks: FakeLinkHooks = {}) {
    this.queue = queue;
    this.inFlight = inFlight;
    this.#hooks = hooks;
  }
  get closed(): Promise<Error | undefined> {
    return this.#closed.promise;
  }
  receivedAt(): number {
    return this.lastReceivedAt;
  }
  /** Started and not closed. */
  get consuming(): boolean {
    return this.started && !this.isClosed;
  }
  start(): void {
    if (this.started) this.#hooks.violation?.("a link started twice");
    if (this.#hooks.afterStop) {
      this.#hooks.violation?.("a link opened after stop began was started");
    }
    this.started = true;
  }
  drain(): Promise<void> {
    this.#end(undefined);
    return Promise.resolve();
  }
  settled(): Promise<void> {
    return Promise.resolve();
  }
  abort(): Promise<void> {
    this.#end(undefined);
    return Promise.resolve();
  }
  nudge(): void {}
  giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>> {
    this.givenBack.push(reason);
    this.#hooks.onGiveBack?.(this);
    const jobs = this.inFlight;
    this.#end(undefined);
    return Promise.resolve(new Map(jobs === 0 ? [] : [[this.queue, jobs]]));
  }
  /** The broker ended the link. */
  lose(): void {
    this.#end(new Error("connection reset"));
  }
  #end(reason: Error | undefined): void {
    this.isClosed = true;
    this.#closed.resolve(reason);
  }
}
