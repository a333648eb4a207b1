import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "../helpers/mysql.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { encodeExecutePacket } from "../../src/mysql/execute_packet.ts";
import {
  bulkPacketsEncoded,
  installBulkExecuteEncoder,
  mysql2ExecutePacket,
} from "../../src/mysql/mysql2_internals.ts";
import type { SqlValue } from "../../src/events/types.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

/**
 * From 16 MiB − 1 on, the connection splits the payload and writes the headers itself, so only
 * the payload is compared. Byte by byte first: deepEqual on 16 MiB takes most of a minute.
 */
function assertSamePacket(actual: Uint8Array, expected: Uint8Array, message: string): void {
  const from = actual.length - 4 >= 0xffffff ? 4 : 0;
  const [a, e] = [actual.subarray(from), expected.subarray(from)];
  if (a.length === e.length && a.every((byte, i) => byte === e[i])) return;
  assert.deepEqual(a, e, message);
}

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
  let previous: { packet: Uint8Array; expected: Uint8Array } | undefined;
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
      const packet = encodeExecutePacket(id, values, attributes);
      const expected = mysql2ExecutePacket(id, values, attributes);
      assertSamePacket(packet, expected, `round ${round}, attributes ${attributes}`);
      // A packet is the caller's: the next one, written through the same scratch, leaves it be.
      if (previous !== undefined) {
        assertSamePacket(previous.packet, previous.expected, `round ${round}: previous packet`);
      }
      previous = { packet, expected };
    }
  }
});

Deno.test("execute packet: strings around the one-byte length prefix of the single-pass copy", () => {
  // Up to 83 UTF-16 units a string is copied without counting its bytes first (at most 249).
  const around = [
    "a".repeat(83),
    "a".repeat(84),
    "a".repeat(82) + "ä",
    "ä" + "a".repeat(82),
    "ä".repeat(83),
    "ä".repeat(84),
    "€".repeat(83),
    "€".repeat(84),
    "\u{1F600}".repeat(41) + "x",
    "b".repeat(82) + "\ud800",
    "\udc00" + "c".repeat(82),
  ];
  for (const s of around) {
    for (const values of [[s], [1, s, null, "OK", s, 2.5]]) {
      for (const attributes of [false, true]) {
        assert.deepEqual(
          encodeExecutePacket(7, values, attributes),
          mysql2ExecutePacket(7, values, attributes),
          `${JSON.stringify(s.slice(0, 12))}… (${s.length} units), attributes ${attributes}`,
        );
      }
    }
  }
});

Deno.test("execute packet: a value that is not a string, number or null is refused", () => {
  assert.throws(
    () => encodeExecutePacket(1, [true as unknown as SqlValue], false),
    /Bind parameter 0 is boolean/,
  );
});

Deno.test("execute packet: prepared INSERTs through the executor take this encoder and MariaDB stores every value as sent", async () => {
  await using db = await createScratchDatabase();
  await db.query(
    "CREATE TABLE t (id int PRIMARY KEY, s varchar(2000) NULL, t text NULL, n bigint NULL, " +
      "d double NULL) DEFAULT CHARSET=utf8mb4",
  );
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 2,
  });
  try {
    const executor = poolExecutor(pool);
    const rnd = seededRandom(0xdb);
    const strings = [
      "",
      "OK",
      "Datenträger ä",
      "\u{1F600}\u{1F4A9}",
      "a'b\"c\\d\0e",
      "x".repeat(1999),
    ];
    const rows: [number, string | null, string | null, number | null, number | null][] = [];
    for (let id = 0; id < 500; id++) {
      rows.push([
        id,
        rnd(5) === 0 ? null : strings[rnd(strings.length)] as string,
        rnd(5) === 0 ? null : strings[rnd(strings.length)] as string,
        rnd(5) === 0 ? null : [0, -1, 1785470659, 2 ** 53 - 1, -(2 ** 40)][rnd(5)] as number,
        rnd(5) === 0 ? null : [0.5, -2.25, 0.60077601671218872, 1e300][rnd(4)] as number,
      ]);
    }
    const before = bulkPacketsEncoded();
    for (let i = 0; i < rows.length; i += 100) {
      const chunk = rows.slice(i, i + 100);
      await executor.run(
        `INSERT INTO t (id, s, t, n, d) VALUES ${chunk.map(() => "(?,?,?,?,?)").join(",")}`,
        chunk.flat(),
        { prepared: true },
      );
    }
    assert.equal(bulkPacketsEncoded() - before, 5, "every statement took the encoder");
    const [stored] = await pool.query("SELECT id, s, t, n, d FROM t ORDER BY id");
    assert.deepEqual(
      (stored as Record<string, unknown>[]).map((r) => [
        r["id"],
        r["s"],
        r["t"],
        r["n"] === null ? null : Number(r["n"]),
        r["d"],
      ]),
      rows,
    );
  } finally {
    await pool.end();
  }
});

Deno.test("execute packet: where the hook stands back (a latin1 connection), mysql2's own encoder gets the real values, not the stand-in", async () => {
  await using db = await createScratchDatabase();
  await db.query("CREATE TABLE t (id int PRIMARY KEY, s varchar(20) NULL) DEFAULT CHARSET=latin1");
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 1,
    charset: "latin1_swedish_ci",
  });
  try {
    const executor = poolExecutor(pool);
    const before = bulkPacketsEncoded();
    await executor.run("INSERT INTO t (id, s) VALUES (?,?),(?,?)", [1, "Größe", 2, null], {
      prepared: true,
    });
    assert.equal(bulkPacketsEncoded() - before, 0, "mysql2 encoded this one");
    const [stored] = await pool.query("SELECT id, s FROM t ORDER BY id");
    assert.deepEqual(
      (stored as Record<string, unknown>[]).map((r) => [r["id"], r["s"]]),
      [[1, "Größe"], [2, null]],
    );
  } finally {
    await pool.end();
  }
});
