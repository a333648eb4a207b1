import assert from "node:assert/strict";
import { concatBytes } from "../util/bytes.ts";
import {
  AdminReplyParser,
  argText,
  encodeAdminCommand,
  encodePacket,
  type Magic,
  PACKET,
  type Packet,
  PacketParser,
  type PacketParserOptions,
  PACKETS,
  parseStatusReply,
  waitingJobs,
} from "./codec.ts";
import { hasCode } from "../util/errors.ts";

function hex(s: string): Uint8Array {
  return new Uint8Array(s.trim().split(/\s+/).map((b) => parseInt(b, 16)));
}

function ascii(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

function bytes(...parts: (Uint8Array | string)[]): Uint8Array {
  return concatBytes(parts.map((p) => typeof p === "string" ? ascii(p) : p));
}

// Byte-exact vectors observed against gearmand 1.1.20 (docs/gearman-protocol.md#packets).
const REQUEST_VECTORS: [string, number, string[], string][] = [
  ["SET_CLIENT_ID w1", PACKET.SET_CLIENT_ID, ["w1"], "00 52 45 51 00 00 00 16 00 00 00 02 77 31"],
  ["CAN_DO fn", PACKET.CAN_DO, ["fn"], "00 52 45 51 00 00 00 01 00 00 00 02 66 6e"],
  ["GRAB_JOB", PACKET.GRAB_JOB, [], "00 52 45 51 00 00 00 09 00 00 00 00"],
  ["GRAB_JOB_UNIQ", PACKET.GRAB_JOB_UNIQ, [], "00 52 45 51 00 00 00 1e 00 00 00 00"],
  ["GRAB_JOB_ALL", PACKET.GRAB_JOB_ALL, [], "00 52 45 51 00 00 00 27 00 00 00 00"],
  ["PRE_SLEEP", PACKET.PRE_SLEEP, [], "00 52 45 51 00 00 00 04 00 00 00 00"],
  ["CANT_DO fn", PACKET.CANT_DO, ["fn"], "00 52 45 51 00 00 00 02 00 00 00 02 66 6e"],
  ["RESET_ABILITIES", PACKET.RESET_ABILITIES, [], "00 52 45 51 00 00 00 03 00 00 00 00"],
  ["ECHO_REQ ping", PACKET.ECHO_REQ, ["ping"], "00 52 45 51 00 00 00 10 00 00 00 04 70 69 6e 67"],
  ["ECHO_REQ empty", PACKET.ECHO_REQ, [""], "00 52 45 51 00 00 00 10 00 00 00 00"],
  [
    "SUBMIT_JOB_BG fn,'',payload1",
    PACKET.SUBMIT_JOB_BG,
    ["fn", "", "payload1"],
    "00 52 45 51 00 00 00 12 00 00 00 0c 66 6e 00 00 70 61 79 6c 6f 61 64 31",
  ],
  [
    "WORK_COMPLETE with result",
    PACKET.WORK_COMPLETE,
    ["H:vm:1", "done"],
    "00 52 45 51 00 00 00 0d 00 00 00 0b 48 3a 76 6d 3a 31 00 64 6f 6e 65",
  ],
  [
    "WORK_COMPLETE with empty result",
    PACKET.WORK_COMPLETE,
    ["H:vm:1", ""],
    "00 52 45 51 00 00 00 0d 00 00 00 07 48 3a 76 6d 3a 31 00",
  ],
  [
    "SUBMIT_JOB_LOW_BG with unique",
    PACKET.SUBMIT_JOB_LOW_BG,
    ["fn", "u-123", "payload2"],
    "00 52 45 51 00 00 00 22 00 00 00 11 66 6e 00 75 2d 31 32 33 00 70 61 79 6c 6f 61 64 32",
  ],
  [
    "SUBMIT_JOB_HIGH_BG with unique",
    PACKET.SUBMIT_JOB_HIGH_BG,
    ["fn", "u-456", "payload3"],
    "00 52 45 51 00 00 00 20 00 00 00 11 66 6e 00 75 2d 34 35 36 00 70 61 79 6c 6f 61 64 33",
  ],
  [
    "WORK_FAIL",
    PACKET.WORK_FAIL,
    ["H:vm:2"],
    "00 52 45 51 00 00 00 0e 00 00 00 06 48 3a 76 6d 3a 32",
  ],
];

for (const [label, type, args, expected] of REQUEST_VECTORS) {
  Deno.test(`codec: encodePacket produces the observed bytes for ${label}`, () => {
    assert.deepEqual(encodePacket("REQ", type, args), hex(expected));
  });
}

const RESPONSE_VECTORS: [string, string, number, string[]][] = [
  ["NO_JOB", "00 52 45 53 00 00 00 0a 00 00 00 00", PACKET.NO_JOB, []],
  ["NOOP", "00 52 45 53 00 00 00 06 00 00 00 00", PACKET.NOOP, []],
  ["ECHO_RES", "00 52 45 53 00 00 00 11 00 00 00 04 70 69 6e 67", PACKET.ECHO_RES, ["ping"]],
  ["JOB_CREATED", "00 52 45 53 00 00 00 08 00 00 00 06 48 3a 76 6d 3a 31", PACKET.JOB_CREATED, [
    "H:vm:1",
  ]],
  [
    "JOB_ASSIGN",
    "00 52 45 53 00 00 00 0b 00 00 00 12 48 3a 76 6d 3a 31 00 66 6e 00 70 61 79 6c 6f 61 64 31",
    PACKET.JOB_ASSIGN,
    ["H:vm:1", "fn", "payload1"],
  ],
  [
    "JOB_ASSIGN_UNIQ",
    "00 52 45 53 00 00 00 1f 00 00 00 18 48 3a 76 6d 3a 32 00 66 6e 00 75 2d 31 32 33 00 70 61 79 6c 6f 61 64 32",
    PACKET.JOB_ASSIGN_UNIQ,
    ["H:vm:2", "fn", "u-123", "payload2"],
  ],
  [
    "JOB_ASSIGN_ALL",
    "00 52 45 53 00 00 00 28 00 00 00 16 48 3a 76 6d 3a 35 00 66 6e 32 00 75 71 00 72 65 64 00 64 61 74 61",
    PACKET.JOB_ASSIGN_ALL,
    ["H:vm:5", "fn2", "uq", "red", "data"],
  ],
];

for (const [label, wire, type, args] of RESPONSE_VECTORS) {
  Deno.test(`codec: PacketParser decodes the observed bytes of ${label} at every split point`, () => {
    const full = hex(wire);
    for (let split = 0; split <= full.length; split++) {
      const parser = new PacketParser({ expect: "RES" });
      const packets = [
        ...parser.push(full.slice(0, split)),
        ...parser.push(full.slice(split)),
      ];
      assert.equal(packets.length, 1, `split at ${split}`);
      const p = packets[0] as Packet;
      assert.equal(p.type, type);
      assert.deepEqual(p.args.map(argText), args);
      assert.equal(parser.buffered, 0);
    }
  });
}

Deno.test("codec: ERROR packets keep the code and the text", () => {
  const parser = new PacketParser({ expect: "RES" });
  const wire = bytes(
    hex("00 52 45 53 00 00 00 13 00 00 00 30"),
    "JOB_NOT_FOUND\0Job given in work result not found",
  );
  const [p] = parser.push(wire);
  assert.equal(p?.type, PACKET.ERROR);
  assert.deepEqual(p?.args.map(argText), ["JOB_NOT_FOUND", "Job given in work result not found"]);
});

Deno.test("codec: every packet type round-trips through the parser fed one byte at a time", () => {
  for (const spec of PACKETS) {
    for (const magic of spec.magic as readonly Magic[]) {
      const args = Array.from(
        { length: spec.args },
        (_, i) => i === spec.args - 1 ? new Uint8Array([0x41, 0, 0x42, 0]) : ascii(`a${i}`),
      );
      const wire = encodePacket(magic, spec.code, args);
      const parser = new PacketParser({ expect: magic });
      const got: Packet[] = [];
      for (const b of wire) got.push(...parser.push(new Uint8Array([b])));
      assert.equal(got.length, 1, spec.name);
      assert.equal(got[0]?.type, spec.code);
      assert.deepEqual(got[0]?.args, args, `${spec.name}: final argument keeps its NULs`);
    }
  }
});

Deno.test("codec: the last argument may contain NUL bytes and is delivered byte-exact", () => {
  const payload = ascii("bin\0ary");
  const wire = encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, ["H:1", "fn", "", payload]);
  const [p] = new PacketParser({ expect: "RES" }).push(wire);
  assert.deepEqual(p?.args[3], payload);
  assert.equal(argText(p?.args[2]), "");
});

Deno.test("codec: several packets in one read are all returned in order", () => {
  const wire = concatBytes([
    encodePacket("RES", PACKET.NOOP, []),
    encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, ["H:1", "fn", "", "a"]),
    encodePacket("RES", PACKET.NO_JOB, []),
    encodePacket("RES", PACKET.ECHO_RES, ["x"]),
  ]);
  const packets = new PacketParser({ expect: "RES" }).push(wire);
  assert.deepEqual(packets.map((p) => p.type), [
    PACKET.NOOP,
    PACKET.JOB_ASSIGN_UNIQ,
    PACKET.NO_JOB,
    PACKET.ECHO_RES,
  ]);
});

Deno.test("codec: a 20 MB argument arriving in 64 KiB reads is assembled once", () => {
  const payload = new Uint8Array(20 * 1024 * 1024);
  for (let i = 0; i < payload.length; i += 4096) payload[i] = i % 251;
  const wire = encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, ["H:big", "fn", "u", payload]);
  const parser = new PacketParser({ expect: "RES" });
  const got: Packet[] = [];
  for (let off = 0; off < wire.length; off += 65536) {
    got.push(...parser.push(wire.slice(off, off + 65536)));
  }
  assert.equal(got.length, 1);
  assert.equal(got[0]?.args[3]?.length, payload.length);
  assert.deepEqual(got[0]?.args[3], payload);
});

Deno.test("codec: payload sizes around 64 KiB survive every read size", () => {
  for (const size of [65_480, 65_510, 65_535, 65_536, 65_537]) {
    const payload = new Uint8Array(size).fill(0x52);
    const wire = encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, ["H:1", "fn", "", payload]);
    for (const chunk of [1000, 4096, 65_536, 16_384 + 3]) {
      const parser = new PacketParser({ expect: "RES" });
      const got: Packet[] = [];
      for (let off = 0; off < wire.length; off += chunk) {
        got.push(...parser.push(wire.subarray(off, off + chunk)));
      }
      assert.equal(got.length, 1);
      assert.equal(got[0]?.args[3]?.length, size);
    }
  }
});

Deno.test("codec: large bodies read straight into their buffer survive every read size, with packets before and after them in the same reads", () => {
  const noop = encodePacket("RES", PACKET.NOOP, []);
  for (const size of [1024 - 40, 1024, 1025, 256 * 1024 + 1, 1024 * 1024 + 7]) {
    const payload = new Uint8Array(size);
    for (let i = 0; i < size; i++) payload[i] = (i * 7) % 251;
    const job = encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, ["H:1", "fn", "u", payload]);
    const wire = new Uint8Array(noop.length * 2 + job.length);
    wire.set(noop, 0);
    wire.set(job, noop.length);
    wire.set(noop, noop.length + job.length);
    for (const chunk of [1, 4096 + 1, 65_536, 300_000, wire.length]) {
      if (chunk === 1 && size > 300_000) continue; // byte by byte is covered by the smaller sizes
      for (const transient of [false, true]) {
        const parser = new PacketParser({ expect: "RES" });
        const got: Packet[] = [];
        const reused = new Uint8Array(chunk);
        for (let off = 0; off < wire.length; off += chunk) {
          const part = wire.subarray(off, off + chunk);
          if (transient) {
            // The caller's buffer is overwritten after every call.
            reused.set(part);
            got.push(...parser.push(reused.subarray(0, part.length), { transient }));
            reused.fill(0xee);
          } else {
            got.push(...parser.push(part.slice()));
          }
        }
        const label = `size ${size}, reads of ${chunk}, transient ${transient}`;
        assert.deepEqual(
          got.map((p) => p.type),
          [PACKET.NOOP, PACKET.JOB_ASSIGN_UNIQ, PACKET.NOOP],
          label,
        );
        assert.deepEqual(got[1]?.args[3], payload, label);
        assert.equal(parser.buffered, 0, label);
      }
    }
  }
});

Deno.test("codec: a body of 1 KiB and more comes in a buffer of its own, so freeing it leaves the packets read with it intact", () => {
  const payloads = [200, 3000, 100, 70_000, 1500].map((size, k) =>
    new Uint8Array(size).map((_, i) => (i * 7 + k) % 251)
  );
  const wire = concatBytes(
    payloads.map((p, k) => encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, [`H:${k}`, "fn", "u", p])),
  );
  for (const chunk of [wire.length, 4096, 65_536, 1000]) {
    const parser = new PacketParser({ expect: "RES" });
    const got: Packet[] = [];
    for (let off = 0; off < wire.length; off += chunk) {
      got.push(...parser.push(wire.subarray(off, off + chunk), { transient: true }));
    }
    const label = `reads of ${chunk}`;
    assert.deepEqual(
      got.map((p) => p.exclusive === true),
      payloads.map((p) => p.length >= 1024),
      label,
    );
    // Free them in turn as their jobs end; the rest still read what was sent.
    got.forEach((packet, k) => {
      if (packet.exclusive !== true) return;
      (packet.args[3]?.buffer as ArrayBuffer).transfer(0);
      got.forEach((other, j) => {
        if (j > k || other.exclusive !== true) {
          assert.deepEqual(
            other.args[3],
            payloads[j],
            `${label}: packet ${j} after ${k} was freed`,
          );
          assert.equal(argText(other.args[0]), `H:${j}`, label);
        }
      });
    });
  }
});

Deno.test("codec: bad magic is a protocol error and the parser refuses further input", () => {
  const parser = new PacketParser({ expect: "RES" });
  const wire = encodePacket("REQ", PACKET.ECHO_REQ, ["x"]);
  assert.throws(() => parser.push(wire), (err: unknown) => {
    assert.ok(hasCode(err, "gearman_protocol"), String(err));
    assert.match(err.message, /magic/);
    return true;
  });
  assert.throws(
    () => parser.push(encodePacket("RES", PACKET.NOOP, [])),
    (err: unknown) => hasCode(err, "gearman_protocol"),
  );
});

// Input the parser refuses with a protocol error, whose message names `names` where given.
const PROTOCOL_ERRORS: {
  name: string;
  options: PacketParserOptions;
  wire: Uint8Array;
  names?: RegExp;
}[] = [
  {
    name: "garbage bytes (a text reply on a binary connection) are a protocol error",
    options: { expect: "RES" },
    wire: ascii("OK 1.1.20+ds\n"),
  },
  {
    name: "an unknown packet type is a protocol error naming the type",
    options: { expect: "RES" },
    wire: hex("00 52 45 53 00 00 00 63 00 00 00 00"),
    names: /99/,
  },
  {
    name: "an announced size above the ceiling fails before any body arrives",
    options: { expect: "RES", maxBodySize: 1024 },
    wire: hex("00 52 45 53 00 00 00 1f 00 00 04 01"),
    names: /1025/,
  },
  {
    name: "a body with too few separators is a protocol error",
    options: { expect: "RES" },
    wire: bytes(hex("00 52 45 53 00 00 00 1f 00 00 00 05"), "H:1\0x"),
  },
  {
    name: "a request packet with a wrong magic for its type is rejected",
    // NOOP is server-only; a "\0REQ" NOOP means a confused peer.
    options: { expect: "REQ" },
    wire: hex("00 52 45 51 00 00 00 06 00 00 00 00"),
  },
];

for (const { name, options, wire, names } of PROTOCOL_ERRORS) {
  Deno.test(`codec: ${name}`, () => {
    const parser = new PacketParser(options);
    assert.throws(
      () => parser.push(wire),
      (err: unknown) =>
        hasCode(err, "gearman_protocol") && (names === undefined || names.test(err.message)),
    );
  });
}

Deno.test("codec: encodePacket refuses a wrong argument count and a NUL in a non-final argument", () => {
  assert.throws(() => encodePacket("REQ", PACKET.SUBMIT_JOB_BG, ["fn", "payload"]), /expected 3/);
  assert.throws(() => encodePacket("REQ", PACKET.SUBMIT_JOB_BG, ["f\0n", "", "p"]), /NUL/);
  assert.throws(() => encodePacket("REQ", 99, []), /unknown type/);
});

Deno.test("codec: admin status reply is parsed into typed rows", () => {
  const parser = new AdminReplyParser(true);
  assert.equal(parser.push(ascii("statusngin_hoststatus\t3\t1\t1\nfn\t0")), undefined);
  const lines = parser.push(ascii("\t0\t0\n.\n"));
  assert.deepEqual(parseStatusReply(lines ?? []), [
    { function: "statusngin_hoststatus", total: 3, running: 1, workers: 1 },
    { function: "fn", total: 0, running: 0, workers: 0 },
  ]);
});

Deno.test("codec: jobs waiting per function are total minus running, 0 for a function the reply does not list", () => {
  const rows = parseStatusReply([
    "statusngin_hoststatus\t7\t2\t1",
    "statusngin_servicestatus\t0\t0\t1",
    "statusngin_notifications\t1\t1\t1",
    "other_function\t9\t0\t0",
  ]);
  assert.deepEqual(
    [
      ...waitingJobs(rows, [
        "statusngin_servicestatus",
        "statusngin_hoststatus",
        "statusngin_notifications",
        "statusngin_never_seen",
      ]),
    ],
    [
      ["statusngin_servicestatus", 0],
      ["statusngin_hoststatus", 5],
      ["statusngin_notifications", 0],
      ["statusngin_never_seen", 0],
    ],
  );
  assert.deepEqual([...waitingJobs([], ["q"])], [["q", 0]], "an empty reply: nothing waits");
  // Whatever the counters say, a backlog is never negative.
  assert.deepEqual([...waitingJobs(parseStatusReply(["q\t1\t2\t2"]), ["q"])], [["q", 0]]);
});

Deno.test("codec: the admin workers reply is a block of lines ending in a dot line", () => {
  const parser = new AdminReplyParser(true);
  const lines = parser.push(
    ascii("38 127.0.0.1 se-worker-1 : statusngin_hoststatus\n39 127.0.0.1 - :\n.\n"),
  );
  assert.deepEqual(lines, ["38 127.0.0.1 se-worker-1 : statusngin_hoststatus", "39 127.0.0.1 - :"]);
});

Deno.test("codec: single-line admin replies strip \\r\\n", () => {
  const parser = new AdminReplyParser(false);
  assert.deepEqual(parser.push(ascii("OK\r\n")), ["OK"]);
  assert.deepEqual(encodeAdminCommand("version"), ascii("version\n"));
  assert.throws(
    () => encodeAdminCommand("status\nversion"),
    (err: unknown) => hasCode(err, "gearman_protocol"),
  );
});

Deno.test("codec: malformed admin status lines are rejected instead of misread", () => {
  assert.throws(
    () => parseStatusReply(["fn\t1\t1"]),
    (err: unknown) => hasCode(err, "gearman_protocol"),
  );
  assert.throws(
    () => parseStatusReply(["fn\tx\t1\t1"]),
    (err: unknown) => hasCode(err, "gearman_protocol"),
  );
  const parser = new AdminReplyParser(true);
  assert.throws(
    () => parser.push(ascii("ERR UNKNOWN_COMMAND Unknown+server+command\r\n")),
    (err: unknown) => hasCode(err, "gearman_protocol"),
  );
});

Deno.test("codec: an admin status reply split at any byte gives the lines of the whole reply", () => {
  // Function names are any bytes but NUL: one may begin with a dot. A read that ends right
  // after that dot must not pass for the reply's final "." line.
  const reply = ascii("fn\t0\t0\t0\n.hidden\t4\t0\t1\nstatusngin_hoststatus\t7\t2\t1\r\n.\n");
  const whole = new AdminReplyParser(true).push(reply);
  assert.deepEqual(whole, ["fn\t0\t0\t0", ".hidden\t4\t0\t1", "statusngin_hoststatus\t7\t2\t1"]);
  for (let split = 1; split < reply.length; split++) {
    const parser = new AdminReplyParser(true);
    const first = parser.push(reply.subarray(0, split));
    const lines = first ?? parser.push(reply.subarray(split));
    assert.deepEqual(lines, whole, `reply split after byte ${split}`);
  }
});
