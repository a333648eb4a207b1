/**
 * DenoSocket against a real TCP peer on loopback: what the MySQL and AMQP clients rely on
 * besides what tests/mysql/deno_socket_test.ts shows with MariaDB (writes in order with either
 * call form, the idle timeout, how a connection ends, IPv6 hosts in URL form).
 */
import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { DenoSocket } from "../../src/util/deno_socket.ts";
import { startTcpPeer } from "../helpers/tcp_proxy.ts";

function opened(socket: DenoSocket): Promise<void> {
  return new Promise((resolve, reject) => {
    socket.once("connect", () => resolve());
    socket.once("error", reject);
  });
}

function closed(socket: DenoSocket): Promise<boolean> {
  return new Promise((resolve) => socket.once("close", (hadError: boolean) => resolve(hadError)));
}

async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const end = performance.now() + ms;
  while (!check()) {
    if (performance.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("util deno socket: writes go out in order, with and without an encoding argument, each called back", async () => {
  await using server = startTcpPeer();
  const socket = new DenoSocket({ host: "127.0.0.1", port: server.port });
  await opened(socket);
  const done: string[] = [];
  socket.write(new TextEncoder().encode("one,"), () => done.push("one"));
  socket.write(new TextEncoder().encode("two,"), undefined, () => done.push("two"));
  socket.write("three", "utf8", (err) => done.push(err ? "failed" : "three"));
  await until(() => done.length === 3 && server.received() === "one,two,three");
  assert.deepEqual(done, ["one", "two", "three"]);
  const ending = closed(socket);
  socket.end();
  assert.equal(await ending, false);
});

Deno.test("util deno socket: setTimeout emits timeout after idle time only, again after each pause, and 0 turns it off", async () => {
  await using server = startTcpPeer();
  const socket = new DenoSocket({ host: "127.0.0.1", port: server.port });
  await opened(socket);
  // A fake clock for the idle timer: the writes are real, the time between them is what the
  // test says, however slowly a loaded machine runs.
  const clock = FakeTimers.install({ toFake: ["setTimeout", "clearTimeout", "performance"] });
  try {
    let timeouts = 0;
    socket.on("timeout", () => timeouts++);
    socket.setTimeout(150);
    // A write every 50 ms keeps it active.
    for (let i = 0; i < 6; i++) {
      await new Promise<void>((resolve) => socket.write(new Uint8Array([i]), () => resolve()));
      clock.tick(50);
    }
    assert.equal(timeouts, 0, "a socket written to every 50 ms timed out after 150 ms idle");
    clock.tick(150);
    assert.equal(timeouts, 1, "150 ms idle: one timeout");
    clock.tick(150);
    assert.equal(timeouts, 2, "another 150 ms idle: another timeout");
    assert.equal(socket.destroyed, false, "a timeout leaves the socket open");
    socket.setTimeout(0);
    clock.tick(400);
    assert.equal(timeouts, 2, "setTimeout(0) turned the idle timeout off");
  } finally {
    clock.uninstall();
    socket.destroy();
  }
});

Deno.test("util deno socket: with idleOnReadsOnly its own writes do not hold off the timeout (a heartbeat check)", async () => {
  await using server = startTcpPeer();
  const socket = new DenoSocket({ host: "127.0.0.1", port: server.port, idleOnReadsOnly: true });
  await opened(socket);
  const clock = FakeTimers.install({ toFake: ["setTimeout", "clearTimeout", "performance"] });
  try {
    let timeouts = 0;
    socket.on("timeout", () => timeouts++);
    socket.setTimeout(150);
    // A write every 50 ms, and the peer says nothing.
    for (let i = 0; i < 4; i++) {
      await new Promise<void>((resolve) => socket.write(new Uint8Array([i]), () => resolve()));
      clock.tick(50);
    }
    assert.equal(timeouts, 1, "150 ms without a read: one timeout, however often it wrote");
  } finally {
    clock.uninstall();
    socket.destroy();
  }
});

Deno.test("util deno socket: destroyed with an error it emits error, then close with hadError true; a peer's close is end, then close(false)", async () => {
  {
    await using server = startTcpPeer();
    const socket = new DenoSocket({ host: "127.0.0.1", port: server.port });
    await opened(socket);
    const errors: Error[] = [];
    socket.on("error", (e: Error) => errors.push(e));
    const ending = closed(socket);
    socket.destroy(new Error("heartbeat timeout"));
    assert.equal(await ending, true);
    assert.deepEqual(errors.map((e) => e.message), ["heartbeat timeout"]);
  }
  {
    await using server = startTcpPeer();
    const socket = new DenoSocket({ host: "127.0.0.1", port: server.port });
    await opened(socket);
    let ended = false;
    socket.on("end", () => (ended = true));
    const ending = closed(socket);
    (await server.accepted).close();
    assert.equal(await ending, false);
    assert.equal(ended, true);
  }
});

Deno.test("util deno socket: a bracketed IPv6 host (as URLs write it) connects; a TCP target without a port fails as an error", async () => {
  await using server = startTcpPeer({ hostname: "::1" });
  const socket = new DenoSocket({ host: "[::1]", port: server.port });
  await opened(socket);
  socket.write("v6");
  await until(() => server.received() === "v6");
  socket.destroy();

  const portless = new DenoSocket({ host: "127.0.0.1" });
  const failure = await new Promise<Error>((resolve) => portless.once("error", resolve));
  assert.match(failure.message, /needs a port/);
});
