/**
 * A peer that breaks the framing: the connection ends with a protocol error
 * (clear message, socket closed, nothing thrown at the caller) instead of
 * crashing or misreading the rest of the stream.
 */
import assert from "node:assert/strict";
import { GearmanConnection } from "../../src/gearman/connection.ts";
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
