/**
 * The systemd watchdog (`WatchdogSec=` in the unit), spoken to a real Unix datagram socket as
 * systemd listens on. Before, the worker never sent `WATCHDOG=1`: a worker whose event loop hung
 * stayed "active (running)" for ever. Now it sends one at half of `WATCHDOG_USEC` from its event
 * loop, only when the watchdog is meant for it, also while MySQL is away (a database outage must
 * not make systemd restart it), and a hung event loop stops them.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { type NotifySocket, startNotifySocket } from "./helpers/notify_socket.ts";
import { waitFor } from "./helpers/wait.ts";
import { createSchema } from "./helpers/worker.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { NOTIFY_COMMAND, serviceNotifier } from "../src/daemon/mod.ts";

const PING = "WATCHDOG=1";

/** Everything sent before this call has arrived once the returned promise resolves. */
async function flushed(socket: NotifySocket): Promise<void> {
  const marker = `X_TEST_MARKER=${crypto.randomUUID()}`;
  const out = await new Deno.Command(NOTIFY_COMMAND, {
    args: [marker],
    env: { NOTIFY_SOCKET: socket.path },
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  await waitFor(() => socket.messages().some((m) => m.includes(marker)));
}

/** The arrival times of the keep-alives so far. */
function pings(socket: NotifySocket): number[] {
  return socket.arrivals().filter((a) => a.assignments.includes(PING)).map((a) => a.atMs);
}

/** The median time between consecutive keep-alives. */
function medianGap(times: readonly number[]): number {
  const gaps = times.slice(1).map((t, i) => t - (times[i] ?? t)).sort((a, b) => a - b);
  assert.ok(gaps.length > 0, "at least two keep-alives");
  return gaps[Math.floor(gaps.length / 2)] ?? 0;
}

Deno.test("watchdog: WATCHDOG=1 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is ours", async () => {
  await using own = await startNotifySocket();
  await using unset = await startNotifySocket();
  await using other = await startNotifySocket();
  const usec = "1000000";
  const senders = [
    serviceNotifier({ NOTIFY_SOCKET: own.path, WATCHDOG_USEC: usec, WATCHDOG_PID: `${Deno.pid}` }),
    serviceNotifier({ NOTIFY_SOCKET: unset.path }),
    // An environment inherited from a parent that systemd watches: not meant for this process.
    serviceNotifier({
      NOTIFY_SOCKET: other.path,
      WATCHDOG_USEC: usec,
      WATCHDOG_PID: `${Deno.pid + 1}`,
    }),
  ].map((n) => n.watchdog());
  try {
    // The one that pings is the clock: by its fifth keep-alive the others had four intervals.
    await waitFor(() => pings(own).length >= 5, { timeoutMs: 60_000, message: "5 keep-alives" });
  } finally {
    for (const s of senders) s[Symbol.dispose]();
    await Promise.all(senders.map((s) => s.idle()));
  }
  await flushed(unset);
  await flushed(other);
  assert.deepEqual(pings(unset), [], "no WATCHDOG_USEC: no keep-alives");
  assert.deepEqual(pings(other), [], "WATCHDOG_PID of another process: no keep-alives");
});

// The worker as it runs under systemd, MySQL away at first: the keep-alives flow while it waits
// (not ready) and after READY=1, at half the timeout; a SIGTERM still ends it with exit 0.
Deno.test("watchdog: the worker sends WATCHDOG=1 at half WATCHDOG_USEC, also while MySQL is away", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  proxy.block();
  await using socket = await startNotifySocket();
  const timeoutMs = 4_000;
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: proxy.url,
    args: ["--queues", "statusngin_hostchecks"],
    env: { NOTIFY_SOCKET: socket.path, WATCHDOG_USEC: `${timeoutMs * 1000}` },
    waitUntil: "listening",
  });
  const log = () => `log:\n${worker.lines().join("\n")}\n${worker.stderr()}`;
  await waitFor(() => pings(socket).length >= 3, {
    timeoutMs: 60_000,
    message: `3 keep-alives while waiting for MySQL; ${log()}`,
  });
  assert.ok(!socket.messages().some((m) => m.includes("READY=1")), "not ready while waiting");
  proxy.unblock();
  await waitFor(() => socket.messages().some((m) => m.includes("READY=1")), {
    timeoutMs: 60_000,
    message: `READY=1 once MySQL answers; ${log()}`,
  });
  const readyAt = socket.arrivals().find((a) => a.assignments.includes("READY=1"))?.atMs ?? 0;
  await waitFor(() => pings(socket).filter((t) => t > readyAt).length >= 3, {
    timeoutMs: 60_000,
    message: `3 keep-alives after READY=1; ${log()}`,
  });
  // Half the timeout is 2 s and timers never fire early, so keep-alives come no faster than that
  // (the median ignores one late start of systemd-notify that bunches two). Only this lower bound is
  // asserted: how late they may come depends on the machine's load, which a test cannot promise.
  const gap = medianGap(pings(socket));
  assert.ok(gap >= timeoutMs / 4, `median gap ${gap} ms`);
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

// A worker whose event loop hangs must look dead to systemd: the keep-alives come from the event
// loop itself, so a synchronous loop or a blocked main thread stops them.
for (const mode of ["spin", "wait"] as const) {
  Deno.test(`watchdog: a blocked event loop stops the keep-alives (${mode})`, async () => {
    await using blocked = await startNotifySocket();
    await using clock = await startNotifySocket();
    const usec = "1000000";
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--config",
        new URL("../deno.json", import.meta.url).pathname,
        // What the compiled binary may do, no more.
        "--allow-env",
        `--allow-run=${NOTIFY_COMMAND}`,
        new URL("./helpers/watchdog_child.ts", import.meta.url).pathname,
        mode,
      ],
      env: { NOTIFY_SOCKET: blocked.path, WATCHDOG_USEC: usec, NO_COLOR: "1" },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stdin = child.stdin.getWriter();
    const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const stderr = new Response(child.stderr).text();
    try {
      await waitFor(() => pings(blocked).length >= 2, {
        timeoutMs: 60_000,
        message: "2 keep-alives before the block",
      });
      await stdin.write(new TextEncoder().encode("block\n"));
      let said = "";
      while (!said.includes("blocking\n")) {
        const { value, done } = await stdout.read();
        if (done) assert.fail(`the child ended: ${await stderr}`);
        said += value;
      }
      // What was sent before the block has arrived; one keep-alive may still be under way.
      await flushed(blocked);
      const before = pings(blocked).length;
      // An unblocked sender of the same interval is the clock: by its fifth keep-alive the
      // blocked one had four intervals to send.
      const sender = serviceNotifier({ NOTIFY_SOCKET: clock.path, WATCHDOG_USEC: usec }).watchdog();
      try {
        await waitFor(() => pings(clock).length >= 5, { timeoutMs: 60_000, message: "the clock" });
      } finally {
        sender[Symbol.dispose]();
        await sender.idle();
      }
      await flushed(blocked);
      assert.ok(
        pings(blocked).length <= before + 1,
        `${pings(blocked).length - before} keep-alives after the block`,
      );
    } finally {
      // By its PID; it hangs until killed (or two minutes pass).
      try {
        child.kill("SIGKILL");
      } catch {
        // already ended
      }
      await child.status;
      await stdin.close().catch(() => {});
      await stdout.cancel().catch(() => {});
      await stderr;
    }
  });
}
