/**
 * Readiness notification for systemd's `Type=notify` (sd_notify(3)): `READY=1`, `STOPPING=1`, and
 * `WATCHDOG=1` when the unit sets `WatchdogSec=`, sent by running `systemd-notify` (Deno has no
 * stable API for Unix datagrams). A keep-alive proves only that the event loop turns, never that
 * MySQL or a broker answers, on purpose: docs/running.md#notify and #watchdog.
 *
 * @module
 */
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("worker");

/** The command that sends the datagram; the compiled binary may run this one only. */
export const NOTIFY_COMMAND = "systemd-notify";

/** Tells the service manager what the worker is doing. */
interface ServiceNotifier {
  ready(status: string): Promise<void>;
  stopping(): Promise<void>;
  /** A free-text status line shown by `systemctl status`. */
  status(status: string): Promise<void>;
  /** Send `WATCHDOG=1` when systemd asked this process for it; dispose to stop. */
  watchdog(): KeepAlive;
}

/** The variables of the notification protocol (sd_notify(3), sd_watchdog_enabled(3)). */
type NotifyEnvironment = Readonly<
  Partial<Record<"NOTIFY_SOCKET" | "WATCHDOG_USEC" | "WATCHDOG_PID", string | undefined>>
>;

const NO_KEEP_ALIVE: KeepAlive = { [Symbol.dispose]: () => {}, idle: () => Promise.resolve() };

const SILENT: ServiceNotifier = {
  ready: () => Promise.resolve(),
  stopping: () => Promise.resolve(),
  status: () => Promise.resolve(),
  watchdog: () => NO_KEEP_ALIVE,
};

/** The notifier of this process: through `systemd-notify` when `NOTIFY_SOCKET` is set, silent otherwise. */
export function serviceNotifier(
  env: NotifyEnvironment = {
    NOTIFY_SOCKET: Deno.env.get("NOTIFY_SOCKET"),
    WATCHDOG_USEC: Deno.env.get("WATCHDOG_USEC"),
    WATCHDOG_PID: Deno.env.get("WATCHDOG_PID"),
  },
  pid: number = Deno.pid,
): ServiceNotifier {
  const notifySocket = env.NOTIFY_SOCKET;
  if (notifySocket === undefined || notifySocket === "") return SILENT;
  let failed = false;
  const send = async (assignments: string[]): Promise<void> => {
    try {
      const out = await new Deno.Command(NOTIFY_COMMAND, {
        args: assignments,
        env: { NOTIFY_SOCKET: notifySocket },
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).output();
      if (!out.success) throw new Error(new TextDecoder().decode(out.stderr).trim());
    } catch (err: unknown) {
      // Logged once: under Type=notify a lost READY=1 fails the start anyway, visibly.
      if (failed) return;
      failed = true;
      log.error("worker: cannot notify systemd (Type=notify needs systemd-notify in PATH)", {
        command: NOTIFY_COMMAND,
        message: assignments.join(" "),
        error: errorMessage(err),
      });
    }
  };
  return {
    ready: (status) => send(["READY=1", `STATUS=${oneLine(status)}`]),
    stopping: () => send(["STOPPING=1", "STATUS=shutting down"]),
    status: (status) => send([`STATUS=${oneLine(status)}`]),
    watchdog: () => {
      const request = watchdogRequest(env, pid);
      if (request.kind === "invalid") {
        log.warn("worker: no systemd watchdog keep-alives", { problem: request.problem });
      }
      if (request.kind !== "ping") return NO_KEEP_ALIVE;
      return startKeepAlive(request.intervalMs, () => send(["WATCHDOG=1"]));
    },
  };
}

/** A newline would end the assignment and start a new one. */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, " ");
}

export type WatchdogRequest =
  /** No watchdog, or one meant for another process (an inherited environment). */
  | { readonly kind: "none" }
  /** Send `WATCHDOG=1` every `intervalMs`: half the timeout, as sd_watchdog_enabled(3) advises. */
  | { readonly kind: "ping"; readonly intervalMs: number }
  /** A value systemd would not have set; no keep-alives are sent. */
  | { readonly kind: "invalid"; readonly problem: string };

/** The longest delay `setInterval` honours (2^31 - 1 ms); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Read the watchdog request the way sd_watchdog_enabled(3) does. */
export function watchdogRequest(env: NotifyEnvironment, pid: number): WatchdogRequest {
  const usec = env.WATCHDOG_USEC;
  if (usec === undefined || usec === "") return { kind: "none" };
  // The PID that is to send the keep-alives; unset means "whoever reads this".
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
 * Call `ping` (must not reject) now and every `intervalMs` until disposed; a ping still running
 * is not doubled. The timer does not keep the process alive.
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
