/** Reading what the worker submitted to gearmand, as the broker module would. */
import assert from "node:assert/strict";
import { argText, encodePacket, PACKET, type Packet } from "../../src/gearman/codec.ts";
import { GearmanConnection } from "../../src/gearman/connection.ts";

/**
 * Take `n` jobs of `fn` as a Gearman worker (CAN_DO, GRAB_JOB, WORK_COMPLETE)
 * and return their workloads byte for byte.
 */
export async function takeJobs(addr: string, fn: string, n: number): Promise<Uint8Array[]> {
  const inbox: Packet[] = [];
  let wake: (() => void) | undefined;
  await using conn = await GearmanConnection.connect(addr, {
    heartbeatIntervalMs: 0,
    onPacket: (p) => {
      // Arguments are views into the read buffer: copy before the next read.
      inbox.push({ ...p, args: p.args.map((a) => a.slice()) });
      wake?.();
    },
  });
  const next = async (): Promise<Packet> => {
    while (inbox.length === 0) await new Promise<void>((r) => wake = r);
    return inbox.shift() as Packet;
  };
  conn.send(encodePacket("REQ", PACKET.CAN_DO, [fn]));
  const out: Uint8Array[] = [];
  while (out.length < n) {
    conn.send(encodePacket("REQ", PACKET.GRAB_JOB, []));
    const p = await next();
    assert.equal(p.type, PACKET.JOB_ASSIGN, `job ${out.length + 1} of ${n} is there`);
    assert.equal(argText(p.args[1]), fn);
    out.push(p.args[2] ?? new Uint8Array());
    conn.send(encodePacket("REQ", PACKET.WORK_COMPLETE, [p.args[0] ?? "", ""]));
  }
  return out;
}
