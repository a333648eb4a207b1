/**
 * The systemd watchdog (`WatchdogSec=` in the unit): whether systemd asked this process for
 * keep-alive messages, and the timer that sends them.
 *
 * What a keep-alive proves: the process is alive and its event loop turns (a timer fires and a
 * child process can be started). A synchronous endless loop or a blocked main thread stops the
 * timer, systemd misses the message and restarts the worker. It says nothing about MySQL, the job
 * servers or the outputs: the worker rides out their outages by itself, and a watchdog tied to
 * them would make systemd restart a healthy worker in a loop for as long as the database is down.
 * `/readyz`, the metrics and `STATUS=` report those (docs/running.md#watchdog).
 *
 * @module
 */

/** The environment systemd sets for a unit with `WatchdogSec=` (sd_watchdog_enabled(3)). */
export interface WatchdogEnvironment {
  /** The watchdog timeout in microseconds. */
  readonly WATCHDOG_USEC?: string | undefined;
  /** The PID that is to send the keep-alives; unset means "whoever reads this". */
  readonly WATCHDOG_PID?: string | undefined;
}

/** What the environment asks of this process. */
export type WatchdogRequest =
  /** No watchdog, or one meant for another process (an inherited environment). */
  | { readonly kind: "none" }
  /** Send `WATCHDOG=1` every `intervalMs`: half the timeout, as sd_watchdog_enabled(3) advises. */
  | { readonly kind: "ping"; readonly intervalMs: number }
  /** A value systemd would not have set; no keep-alives are sent. */
  | { readonly kind: "invalid"; readonly problem: string };

/** The longest delay `setInterval` honours (2^31 - 1 ms); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Read the watchdog request the way sd_watchdog_enabled(3) does: `WATCHDOG_USEC` set (a positive
 * number of microseconds) and `WATCHDOG_PID` unset or equal to our PID.
 *
 * @param env The two variables.
 * @param pid The PID of this process.
 * @returns Whether and how often to send `WATCHDOG=1`.
 */
export function watchdogRequest(env: WatchdogEnvironment, pid: number): WatchdogRequest {
  const usec = env.WATCHDOG_USEC;
  if (usec === undefined || usec === "") return { kind: "none" };
  const owner = env.WATCHDOG_PID;
  if (owner !== undefined && owner !== "") {
    if (!/^[1-9][0-9]*$/.test(owner)) {
      return { kind: "invalid", problem: `WATCHDOG_PID=${owner} is not a process id` };
    }
    // Set for the process systemd started; a child that inherited the environment is not meant.
    if (Number(owner) !== pid) return { kind: "none" };
  }
  const micros = /^[0-9]+$/.test(usec) ? Number(usec) : NaN;
  if (!Number.isSafeInteger(micros) || micros <= 0) {
    return { kind: "invalid", problem: `WATCHDOG_USEC=${usec} is not a positive number of µs` };
  }
  return { kind: "ping", intervalMs: Math.min(MAX_TIMER_MS, Math.max(1, micros / 2000)) };
}

/** Keep-alives being sent; dispose to stop them. */
export interface KeepAlive extends Disposable {
  /** Resolves once no ping is running (after dispose none starts again): for tests. */
  idle(): Promise<void>;
}

/**
 * Call `ping` now and then every `intervalMs` from this process's event loop, until disposed.
 * A ping still running when the next is due is not doubled: the next tick after it finished
 * sends again. The timer does not keep the process alive on its own.
 *
 * @param intervalMs Time between two pings.
 * @param ping Sends one keep-alive; must not reject.
 * @returns The running keep-alives.
 */
export function startKeepAlive(intervalMs: number, ping: () => Promise<void>): KeepAlive {
  let running: Promise<void> | null = null;
  const tick = () => {
    if (running !== null) return;
    running = ping().finally(() => (running = null));
  };
  tick();
  const timer = setInterval(tick, intervalMs);
  Deno.unrefTimer(timer);
  return {
    [Symbol.dispose]: () => clearInterval(timer),
    idle: async () => {
      while (running !== null) await running;
    },
  };
}
