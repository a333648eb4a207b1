/**
 * A peer that breaks the framing: the connection ends with a protocol error
 * (clear message, socket closed, nothing thrown at the caller) instead of
 * crashing or misreading the rest of the stream.
 */
import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { GearmanConnection } from "../../src/gearman/connection.ts";
import { encodePacket, PACKET, PacketParser } from "../../src/gearman/codec.ts";
import { concatBytes } from "../../src/util/bytes.ts";
import { startTcpPeer } from "../helpers/tcp_proxy.ts";
import { hasCode } from "../../src/util/errors.ts";

const cases: [string, number[], RegExp][] = [
  ["bad magic", [0, 0x52, 0x45, 0x51, 0, 0, 0, 6, 0, 0, 0, 0], /magic/],
  [
    "an unknown packet type",
    [0, 0x52, 0x45, 0x53, 0, 0, 0, 99, 0, 0, 0, 0],
    /Unknown packet type 99/,
  ],
  ["a size above the limit", [0, 0x52, 0x45, 0x53, 0, 0, 0, 31, 0x7f, 0, 0, 0], /above the limit/],
  ["a text reply", [...new TextEncoder().encode("OK 1.1.20+ds\n")], /magic/],
];

for (const [label, bytes, message] of cases) {
  Deno.test(`connection: ${label} from the server ends the connection with a protocol error`, async () => {
    const server = startTcpPeer({ greeting: new Uint8Array(bytes) });
    const received: number[] = [];
    try {
      const conn = await GearmanConnection.connect(server.addr, {
        heartbeatIntervalMs: 0,
        onPacket: (p) => received.push(p.type),
      });
      const reason = await conn.closed;
      assert.ok(reason instanceof Error);
      assert.ok(hasCode(reason.cause, "gearman_protocol"), String(reason.cause));
      assert.match(reason.message, message);
      assert.match(reason.message, new RegExp(server.addr.replaceAll(".", "\\.")));
      assert.equal(conn.isClosed, true);
      assert.deepEqual(received, []);
      assert.equal(conn.send(new Uint8Array([1])), false, "nothing is sent on a dead connection");
    } finally {
      await server.close();
    }
  });
}

/** The heartbeat's ECHO_REQ as the peer reads it, to answer with its token. */
async function readEchoToken(peer: Deno.Conn): Promise<Uint8Array> {
  const parser = new PacketParser({ expect: "REQ" });
  const buf = new Uint8Array(1024);
  for (;;) {
    const n = await peer.read(buf);
    assert.notEqual(n, null, "the client closed before probing");
    const [probe] = parser.push(buf.slice(0, n ?? 0));
    if (probe !== undefined) {
      assert.equal(probe.type, PACKET.ECHO_REQ);
      return probe.args[0] as Uint8Array;
    }
  }
}

Deno.test("connection: a probe whose deadline passed while the event loop was held up is given the timeout again, once; an unanswering peer is still declared dead", async () => {
  // A pause of the whole process (long GC, suspended VM) fires the probe's deadline late, while
  // the peer's answer may be sitting unread in the socket: no verdict can be drawn from that tick.
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const clock = FakeTimers.install({ toFake: ["setTimeout", "clearTimeout", "performance"] });
  const noop = Promise.withResolvers<void>();
  let conn: GearmanConnection | undefined;
  let peer: Deno.Conn | undefined;
  try {
    [conn, peer] = await Promise.all([
      GearmanConnection.connect(`127.0.0.1:${listener.addr.port}`, {
        heartbeatIntervalMs: 15_000,
        heartbeatTimeoutMs: 5_000,
        onPacket: (p) => p.type === PACKET.NOOP && noop.resolve(),
      }),
      listener.accept(),
    ]);
    clock.tick(15_000);
    const token = await readEchoToken(peer);
    // The process stood still for 6 s right after probing.
    clock.jump(6_000);
    assert.equal(conn.isClosed, false, "a late deadline is not the peer's silence");
    // The answer is read (a NOOP behind it shows it was), and the link lives on.
    await peer.write(concatBytes([
      encodePacket("RES", PACKET.ECHO_RES, [token]),
      encodePacket("RES", PACKET.NOOP, []),
    ]));
    await noop.promise;
    clock.tick(5_000);
    assert.equal(conn.isClosed, false, "an answered probe keeps the connection");

    // A peer that never answers: one late deadline buys it one more timeout, not more.
    clock.tick(10_000); // 15 s after the answer
    await readEchoToken(peer);
    clock.jump(6_000);
    assert.equal(conn.isClosed, false);
    clock.jump(6_000);
    assert.equal(conn.isClosed, true, "a second late deadline is a verdict");
    const reason = await conn.closed;
    assert.ok(hasCode(reason, "heartbeat_timeout"), String(reason));
  } finally {
    clock.uninstall();
    await conn?.close();
    peer?.close();
  }
});
