/**
 * A process that sends the worker's watchdog keep-alives and then hangs on command, for
 * tests/watchdog_test.ts: `deno run --allow-env --allow-run=systemd-notify watchdog_child.ts
 * spin|wait` with `NOTIFY_SOCKET` and `WATCHDOG_USEC` set. A line on stdin makes it print
 * `blocking` and block its main thread, in a synchronous loop (`spin`) or asleep in
 * `Atomics.wait` (`wait`), for two minutes at most so a forgotten one ends by itself.
 */
import { serviceNotifier } from "../../src/daemon/mod.ts";

const HANG_MS = 120_000;

const mode = Deno.args[0];
if (mode !== "spin" && mode !== "wait") throw new Error(`usage: watchdog_child.ts spin|wait`);

// The keep-alives are never stopped: only the hang below ends them.
const _keepAlive = serviceNotifier().watchdog();
const reader = Deno.stdin.readable.getReader();
await reader.read();
Deno.stdout.writeSync(new TextEncoder().encode("blocking\n"));
const until = Date.now() + HANG_MS;
if (mode === "wait") {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, HANG_MS);
} else {
  while (Date.now() < until) {
    // a wedged event loop: nothing else runs while this turns
  }
}
Deno.exit(0);
