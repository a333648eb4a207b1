/**
 * What the consumer core needs of a transport: a link is one connection
 * generation (a Gearman worker connection for one queue on one job server, an
 * AMQP connection with one channel per queue), built through one code path
 * and never repaired: when it ends, the supervisor builds the next one.
 *
 * @module
 */
import { deadline, settledWithin } from "../util/async.ts";

/** One connection generation. */
export interface Link {
  /** Settles once, when the link ended: `undefined` after a deliberate close, else why. */
  readonly closed: Promise<Error | undefined>;
  /** Handlers of this link still running. */
  readonly inFlight: number;
  /** `performance.now()` when this link last received a job, or when it started consuming. */
  readonly lastReceivedAt: number;
  /** Begin consuming; called once, after the link was opened. */
  start(): void;
  /**
   * Stop taking jobs, let running handlers finish and acknowledge within
   * `signal` (then abort them; their jobs are redelivered), close.
   */
  drain(signal: AbortSignal): Promise<void>;
  /** Wait for the handlers of a lost link; when `signal` aborts first, abort them. */
  settled(signal: AbortSignal): Promise<void>;
  /** Close now; running handlers keep running but their acknowledgements are dropped. */
  abort(): Promise<void>;
  /**
   * Jobs wait at the broker while this link has room and takes none: ask for
   * work again (a lost wake-up must not become a silent stall).
   *
   * @param queue The stalled queue.
   */
  nudge(queue: string): void;
}

/** Where a link connects to and how it is built. */
export interface LinkTarget {
  /** Queues a link of this target consumes. */
  readonly queues: readonly string[];
  /** Job server `host:port`, or the broker URL without secrets, for logs. */
  readonly server: string;
  /**
   * Build a link whose peer has answered: a TCP connection that a hung or
   * stopped server accepted is not "connected".
   *
   * @param signal Aborts the attempt (shutdown).
   * @returns An opened, not yet started link.
   */
  open(signal: AbortSignal): Promise<Link>;
  /**
   * Jobs of `queue` waiting at the broker for this target, for stall
   * detection; undefined when the broker cannot tell right now.
   *
   * @param queue Queue name.
   * @param signal Bounds the query.
   */
  backlog(queue: string, signal: AbortSignal): Promise<number | undefined>;
}

/** How long aborted handlers get to settle after the drain deadline. */
const ABORT_GRACE_MS = 1_000;

/**
 * Wait for a link's handlers within `signal`; when it aborts first, abort them
 * (their jobs stay unacknowledged and are redelivered) and give them a moment
 * to settle. One rule for every transport, so a handler that ignores its
 * abort cannot hold a drain beyond its deadline on one backend only.
 *
 * @param pending The handlers' promises, read again after the abort.
 * @param signal The drain deadline.
 * @param abort Aborts the handlers.
 */
export async function settleHandlers(
  pending: () => readonly Promise<unknown>[],
  signal: AbortSignal,
  abort: () => void,
): Promise<void> {
  if (await settledWithin(Promise.allSettled(pending()), signal)) return;
  abort();
  using grace = deadline(ABORT_GRACE_MS);
  await settledWithin(Promise.allSettled(pending()), grace.signal);
}
