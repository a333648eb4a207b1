/**
 * Owns one link target and is the only code that builds its links: a lost link is retired (its
 * handlers may finish within the drain timeout) and a fresh one built every reconnect interval
 * (docs/consumption.md#rebuild). A link given back (docs/retries.md#give-back) is not rebuilt until
 * {@link Supervisor.resume}.
 *
 * @module
 */
import type { GiveBackReason, Link, LinkTarget } from "./contract.ts";
import { Backoff } from "../util/backoff.ts";
import { abortable, deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, type Logger } from "../log.ts";

export interface SupervisorOptions {
  readonly target: LinkTarget;
  readonly name: string;
  readonly log: Logger;
  /** Pause before each attempt to rebuild a lost link (±20 % jitter). */
  readonly reconnectIntervalMs: number;
  /** Bound on how long handlers of a lost link may keep running. */
  readonly drainTimeoutMs: number;
  /** Whether the link is consuming. */
  readonly onState: (up: boolean) => void;
  /** A link lost was rebuilt (not called for the first link, nor after a give-back). */
  readonly onReconnected: () => void;
}

const RETRY_LOG_INTERVAL_MS = 30_000;

export class Supervisor {
  readonly target: LinkTarget;
  readonly #o: SupervisorOptions;
  readonly #stop = new AbortController();
  #current: Link | undefined;
  #up = false;
  #loop: Promise<void> | undefined;
  readonly #retired = new Set<Promise<void>>();
  #stopping: Promise<void> | undefined;
  /** Set from a give-back until {@link resume}. */
  #parked: { readonly at: number; readonly resume: PromiseWithResolvers<void> } | undefined;

  constructor(options: SupervisorOptions) {
    this.target = options.target;
    this.#o = options;
  }

  get current(): Link | undefined {
    return this.#current;
  }

  /** `performance.now()` of the give-back while its jobs are given back and none taken; else undefined. */
  get parkedSince(): number | undefined {
    return this.#parked?.at;
  }

  /** Give the current link's jobs back and build no link until {@link resume}; undefined when there is nothing to give back. */
  giveBack(reason: GiveBackReason): Promise<ReadonlyMap<string, number>> | undefined {
    const link = this.#current;
    if (link === undefined || this.#parked !== undefined || this.#stop.signal.aborted) {
      return undefined;
    }
    this.#parked = { at: performance.now(), resume: Promise.withResolvers<void>() };
    return link.giveBack(reason);
  }

  /** Build links again after a {@link giveBack}. */
  resume(): void {
    const parked = this.#parked;
    this.#parked = undefined;
    parked?.resume.resolve();
  }

  /** Open the first link and start consuming; throws when it fails (see {@link startDisconnected}). */
  async start(): Promise<void> {
    const link = await this.target.open(this.#stop.signal);
    if (this.#stop.signal.aborted) {
      await link.abort();
      throw this.#stop.signal.reason;
    }
    this.#install(link);
    this.#loop = this.#watch();
  }

  /** Start in the reconnect loop (the first attempt failed but the process carries on). */
  startDisconnected(): void {
    this.#loop = (async () => {
      if (await this.#reconnect(false)) await this.#watch();
    })();
  }

  /** End the reconnect loop at once, then drain the current link within `signal`. Idempotent. */
  stop(signal: AbortSignal): Promise<void> {
    this.#stopping ??= this.#doStop(signal);
    return this.#stopping;
  }

  async #doStop(signal: AbortSignal): Promise<void> {
    this.#stop.abort(new DOMException("consumer stopping", "AbortError"));
    await this.#loop;
    const current = this.#current;
    if (current !== undefined) await current.drain(signal);
    await Promise.allSettled([...this.#retired]);
    this.#setUp(false);
  }

  #install(link: Link): void {
    this.#current = link;
    link.start();
    this.#setUp(true);
  }

  #setUp(up: boolean): void {
    if (this.#up === up) return;
    this.#up = up;
    this.#o.onState(up);
  }

  async #watch(): Promise<void> {
    for (;;) {
      const link = this.#current as Link;
      // Never a race with a promise that lives until stop: each race left a reaction on it that
      // kept the lost link's error reachable (about 4.5 KiB a loss, for the process's life).
      const reason = await abortable(link.closed, this.#stop.signal).catch(() => "stop" as const);
      if (reason === "stop" || this.#stop.signal.aborted) return;
      this.#current = undefined;
      this.#setUp(false);
      const parked = this.#parked;
      if (parked === undefined) {
        this.#o.log.warn(`${this.#o.name}: connection lost, reconnecting`, {
          ...this.#labels(),
          error: reason === undefined ? "closed" : errorMessage(reason),
          retry_interval_ms: this.#o.reconnectIntervalMs,
          in_flight: link.inFlight,
        });
      }
      this.#retire(link);
      if (parked !== undefined) {
        // Given back on purpose: the consumer logged it; wait for MySQL before taking jobs again.
        if (!(await settledWithin(parked.resume.promise, this.#stop.signal))) return;
      }
      // A link given back was not lost either: no reconnect counted (jobs_given_back_total is).
      if (!(await this.#reconnect(parked === undefined))) return;
    }
  }

  #labels(): Record<string, string> {
    const queues = this.target.queues;
    return queues.length === 1
      ? { queue: queues[0] as string, server: this.target.server }
      : { server: this.target.server, queues: String(queues.length) };
  }

  /** Let a lost link's handlers finish, bounded by the drain timeout. */
  #retire(link: Link): void {
    const done = (async () => {
      using limit = deadline(this.#o.drainTimeoutMs, this.#stop.signal);
      await link.settled(limit.signal);
      await link.abort();
    })();
    this.#retired.add(done);
    void done.finally(() => this.#retired.delete(done));
  }

  /** Returns true once a new link is installed, false when shutdown began. */
  async #reconnect(countAsReconnect: boolean): Promise<boolean> {
    const every = this.#o.reconnectIntervalMs;
    const interval = new Backoff({ initialMs: every, maxMs: every });
    let attempts = 0;
    let lastWarnAt = -Infinity;
    const since = performance.now();
    for (;;) {
      if (!(await sleepUnlessAborted(interval.next(), this.#stop.signal))) return false;
      attempts++;
      let link: Link;
      try {
        link = await this.target.open(this.#stop.signal);
      } catch (err: unknown) {
        if (this.#stop.signal.aborted) return false;
        const now = performance.now();
        if (now - lastWarnAt >= RETRY_LOG_INTERVAL_MS) {
          lastWarnAt = now;
          // A link that never came up, or was given back, was not lost: "connect", not "reconnect".
          const what = countAsReconnect ? "reconnect" : "connect";
          this.#o.log.warn(`${this.#o.name}: ${what} failed, still retrying`, {
            ...this.#labels(),
            attempts,
            down_for_s: Math.round((now - since) / 1000),
            error: errorMessage(err),
          });
        }
        continue;
      }
      // Synchronous after the open resolved: installed before stop looks, or closed unused
      // (docs/consumption.md#no-resume-during-shutdown).
      if (this.#stop.signal.aborted) {
        await link.abort();
        return false;
      }
      this.#install(link);
      if (countAsReconnect) this.#o.onReconnected();
      this.#o.log.info(`${this.#o.name}: ${countAsReconnect ? "reconnected" : "connected"}`, {
        ...this.#labels(),
        attempts,
        down_for_s: Math.round((performance.now() - since) / 1000),
      });
      return true;
    }
  }
}
