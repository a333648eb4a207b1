/**
 * Readiness notification for systemd's `Type=notify` (sd_notify(3)): `READY=1` once the worker
 * consumes, `STOPPING=1` when the graceful shutdown begins, so `systemctl start` fails when the
 * worker dies during its start instead of reporting success a second before.
 *
 * The message has to travel as a datagram on the Unix socket named by `NOTIFY_SOCKET`. Deno has
 * no stable API for Unix datagrams (`Deno.listenDatagram` with `unixpacket` needs
 * `--unstable-net`; `node:dgram` has no Unix sockets), so the worker runs systemd's own
 * `systemd-notify`, which ships with every systemd. It sends from its own PID, hence
 * `NotifyAccess=all` in the unit, and waits until systemd processed the message (`BARRIER=1`,
 * systemd 246 and later), so the message is not lost when systemd-notify exits first.
 * docs/running.md#notify explains the choice.
 *
 * When the unit sets `WatchdogSec=`, the worker also sends `WATCHDOG=1` at half that interval
 * from its event loop (src/daemon/watchdog.ts says what that proves and what not). One
 * systemd-notify every 30 s (with the unit's `WatchdogSec=60s`) costs about 15 ms of CPU.
 *
 * @module
 */
import { errorMessage, getLogger } from "../log.ts";
import {
  type KeepAlive,
  startKeepAlive,
  type WatchdogEnvironment,
  watchdogRequest,
} from "./watchdog.ts";

const log = getLogger("worker");

/** The command that sends the datagram; the compiled binary may run this one only. */
export const NOTIFY_COMMAND = "systemd-notify";

/** Tells the service manager what the worker is doing. */
export interface ServiceNotifier {
  /** Whether a service manager listens (`NOTIFY_SOCKET` is set). */
  readonly enabled: boolean;
  /** Start-up complete: the worker consumes. */
  ready(status: string): Promise<void>;
  /** The graceful shutdown begins. */
  stopping(): Promise<void>;
  /** A free-text status line shown by `systemctl status`. */
  status(status: string): Promise<void>;
  /**
   * Start sending `WATCHDOG=1` when systemd asked for it (`WATCHDOG_USEC`, and `WATCHDOG_PID`
   * unset or ours); does nothing otherwise. Dispose to stop.
   */
  watchdog(): KeepAlive;
}

/** The variables of the notification protocol (sd_notify(3), sd_watchdog_enabled(3)). */
export interface NotifyEnvironment extends WatchdogEnvironment {
  /** The socket systemd listens on; unset when not started by systemd with `Type=notify`. */
  readonly NOTIFY_SOCKET?: string | undefined;
}

/** Watchdog keep-alives that were never started. */
const NO_KEEP_ALIVE: KeepAlive = {
  [Symbol.dispose]: () => {},
  idle: () => Promise.resolve(),
};

/** No service manager listens: every call does nothing. */
const SILENT: ServiceNotifier = {
  enabled: false,
  ready: () => Promise.resolve(),
  stopping: () => Promise.resolve(),
  status: () => Promise.resolve(),
  watchdog: () => NO_KEEP_ALIVE,
};

/** The protocol's variables as this process was started with them. */
function processEnvironment(): NotifyEnvironment {
  return {
    NOTIFY_SOCKET: Deno.env.get("NOTIFY_SOCKET"),
    WATCHDOG_USEC: Deno.env.get("WATCHDOG_USEC"),
    WATCHDOG_PID: Deno.env.get("WATCHDOG_PID"),
  };
}

/**
 * The notifier of this process: through `systemd-notify` when `NOTIFY_SOCKET` is set, silent
 * otherwise.
 *
 * @param env `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (default: this process's).
 * @param pid The PID `WATCHDOG_PID` must name (default: this process's).
 * @returns The notifier.
 */
export function serviceNotifier(
  env: NotifyEnvironment = processEnvironment(),
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
    enabled: true,
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
