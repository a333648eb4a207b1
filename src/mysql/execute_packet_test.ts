import assert from "node:assert/strict";
import {
  encodeExecutePacket,
  installBulkExecuteEncoder,
  mysql2ExecutePacket,
} from "./execute_packet.ts";
import type { SqlValue } from "../events/types.ts";
import { seededRandom } from "../../tests/helpers/seeded_random.ts";

Deno.test("execute packet: the hook finds mysql2's execute command", () => {
  assert.equal(installBulkExecuteEncoder(), true);
});

Deno.test("execute packet: the same bytes as mysql2's encoder for random parameters, with and without query attributes", () => {
  const rnd = seededRandom(0xe5e);
  const strings = [
    "",
    "OK",
    "PING OK - Packet loss = 0%, RTA = 0.08 ms",
    "Datenträger ä ö ü ß",
    "\u{1F600} emoji",
    "lone surrogate \ud800 here",
    "trailing high \udbff",
    "low first \udc00",
    "x".repeat(64),
    "x".repeat(65),
    "y".repeat(250),
    "y".repeat(251),
    "z".repeat(0xfffe),
    "z".repeat(0xffff),
    "€".repeat(30_000),
    "w".repeat(0x1000000),
  ];
  const numbers = [0, 1, -1, 2.5, -0, 1785470659, 2 ** 53, -(2 ** 53), 1e300, 0.60077601671218872];
  for (let round = 0; round < 120; round++) {
    const count = round === 0 ? 0 : rnd(round < 100 ? 40 : 3) + 1;
    const values: SqlValue[] = [];
    for (let i = 0; i < count; i++) {
      const kind = rnd(3);
      if (kind === 0) values.push(null);
      else if (kind === 1) values.push(numbers[rnd(numbers.length)] as number);
      else {
        const s = strings[rnd(round < 100 ? strings.length - 1 : strings.length)] as string;
        values.push(s);
      }
    }
    const id = rnd(1_000_000);
    for (const attributes of [false, true]) {
      assert.deepEqual(
        encodeExecutePacket(id, values, attributes),
        mysql2ExecutePacket(id, values, attributes),
        `round ${round}, attributes ${attributes}, ${values.length} values`,
      );
    }
  }
});

Deno.test("execute packet: a value that is not a string, number or null is refused", () => {
  assert.throws(
    () => encodeExecutePacket(1, [true as unknown as SqlValue], false),
    /Bind parameter 0 is boolean/,
  );
});
