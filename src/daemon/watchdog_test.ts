/**
 * Whether systemd asked this process for watchdog keep-alives, read as sd_watchdog_enabled(3)
 * does, and the timer that sends them. tests/watchdog_test.ts sends them to a real socket.
 */
import assert from "node:assert/strict";
import { startKeepAlive, watchdogRequest } from "./notify.ts";

const PID = 4242;

Deno.test("watchdog request: WATCHDOG_USEC set and WATCHDOG_PID unset or ours: a keep-alive at half of it", () => {
  assert.deepEqual(watchdogRequest({ WATCHDOG_USEC: "60000000" }, PID), {
    kind: "ping",
    intervalMs: 30_000,
  });
  assert.deepEqual(
    watchdogRequest({ WATCHDOG_USEC: "60000000", WATCHDOG_PID: `${PID}` }, PID),
    { kind: "ping", intervalMs: 30_000 },
  );
  assert.deepEqual(watchdogRequest({ WATCHDOG_USEC: "3000" }, PID), {
    kind: "ping",
    intervalMs: 1.5,
  });
});

Deno.test("watchdog request: none without WATCHDOG_USEC, none for another process's WATCHDOG_PID", () => {
  assert.deepEqual(watchdogRequest({}, PID), { kind: "none" });
  assert.deepEqual(watchdogRequest({ WATCHDOG_USEC: "" }, PID), { kind: "none" });
  assert.deepEqual(watchdogRequest({ WATCHDOG_PID: `${PID}` }, PID), { kind: "none" });
  assert.deepEqual(
    watchdogRequest({ WATCHDOG_USEC: "60000000", WATCHDOG_PID: `${PID + 1}` }, PID),
    { kind: "none" },
  );
});

Deno.test("watchdog request: values systemd never sets send nothing and say why", () => {
  for (
    const env of [
      { WATCHDOG_USEC: "0" },
      { WATCHDOG_USEC: "-5" },
      { WATCHDOG_USEC: "30s" },
      { WATCHDOG_USEC: "1e9" },
      { WATCHDOG_USEC: "99999999999999999999" },
      { WATCHDOG_USEC: "60000000", WATCHDOG_PID: "self" },
    ]
  ) {
    const request = watchdogRequest(env, PID);
    assert.equal(request.kind, "invalid", JSON.stringify(env));
    assert.match(request.kind === "invalid" ? request.problem : "", /^WATCHDOG_(USEC|PID)=/);
  }
});

Deno.test("watchdog request: an interval beyond what a timer can wait is capped, not fired at once", () => {
  // 100 days: setInterval would run a longer delay than 2^31 - 1 ms as 1 ms.
  const request = watchdogRequest({ WATCHDOG_USEC: `${100 * 86_400 * 1_000_000}` }, PID);
  assert.deepEqual(request, { kind: "ping", intervalMs: 2 ** 31 - 1 });
});

Deno.test("keep-alive: the first at once, never two at the same time, none after dispose", async () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  let started = 0;
  let hold = true;
  const held: (() => void)[] = [];
  const keepAlive = startKeepAlive(1, () => {
    started++;
    return hold ? new Promise<void>((r) => held.push(r)) : Promise.resolve();
  });
  assert.equal(started, 1, "sent at once");
  // Ticks of 1 ms pass while the first is still under way.
  await sleep(30);
  assert.equal(started, 1, "not doubled while one runs");
  hold = false;
  for (const release of held) release();
  for (let i = 0; started < 3 && i < 10_000; i++) await sleep(1);
  assert.ok(started >= 3, "the ticks go on once it finished");
  keepAlive[Symbol.dispose]();
  await keepAlive.idle();
  const after = started;
  await sleep(30);
  assert.equal(started, after, "none after dispose");
});
