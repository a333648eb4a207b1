/**
 * A scripted Gearman job server for one function, for properties that a real
 * gearmand will not exercise on demand: the order in which grabs are
 * answered with NO_JOB or JOB_ASSIGN_UNIQ, how long replies take, and a
 * server that loses wake-ups (never sends NOOP). It speaks just enough of the
 * protocol: SET_CLIENT_ID, CAN_DO, ECHO, GRAB_JOB_UNIQ, PRE_SLEEP,
 * WORK_COMPLETE/WORK_FAIL on worker connections, and the admin `status`
 * command on text connections (the stall detector asks it).
 *
 * Like gearmand it answers every grab with exactly one reply, in grab order,
 * sends NOOP to a sleeping connection when a job is waiting, and answers
 * PRE_SLEEP with an immediate NOOP when jobs wait already.
 */
import { encodePacket, PACKET, type Packet, PacketParser } from "../../src/gearman/codec.ts";
import { concatBytes } from "../../src/util/bytes.ts";
import { Rng } from "../../src/synthetic/rng.ts";

/** Options of {@link startScriptedJobServer}. */
export interface ScriptOptions {
  /** The one function served. */
  readonly fn: string;
  /** Uniform random numbers in [0, 1): the script's only source of choices. */
  readonly random: () => number;
  /** Chance that a grab answered while jobs wait gets one (else NO_JOB, as if another worker won). */
  readonly assignProbability: number;
  /** Longest pause before queued replies are flushed, in ms (0 = same turn). */
  readonly maxReplyDelayMs: number;
  /** False: a server that loses wake-ups (never sends NOOP). Default true. */
  readonly wakeSleepers?: boolean;
  /** What JOB_ASSIGN_UNIQ names instead of the job's handle and function: a server that misroutes. */
  readonly assignAs?: (job: { handle: string; fn: string }) => { handle: string; fn: string };
}

/** The server and what it saw. */
export interface ScriptedJobServer extends AsyncDisposable {
  readonly addr: string;
  /** Queue jobs (payloads) for the function. */
  add(payloads: readonly string[]): void;
  /** Jobs not handed out yet. */
  readonly waiting: number;
  /** Handles completed (WORK_COMPLETE), in order. */
  readonly completed: readonly string[];
  /** Grabs received that have not been answered yet, over all connections. */
  readonly unanswered: number;
  /** GRAB_JOB_UNIQ packets received. */
  readonly grabs: number;
  /** NO_JOB replies sent. */
  readonly noJobs: number;
  /** Change the chance that a grab gets a waiting job (0 = the server never hands one out). */
  setAssignProbability(p: number): void;
  close(): Promise<void>;
}

interface WorkerConn {
  readonly conn: Deno.Conn;
  /** Function registered with CAN_DO; only the scripted one gets jobs and NOOPs. */
  fn: string | undefined;
  queued: number;
  sleeping: boolean;
  noopSent: boolean;
  flushTimer: ReturnType<typeof setTimeout> | undefined;
  /** Writes are chained so two replies never interleave on the wire. */
  tail: Promise<void>;
}

/**
 * Start a scripted job server on a free loopback port.
 *
 * @param options The script.
 * @returns The running server.
 */
export function startScriptedJobServer(options: ScriptOptions): ScriptedJobServer {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  const waiting: { handle: string; payload: string }[] = [];
  const held = new Map<string, string>();
  const completed: string[] = [];
  const workers = new Set<WorkerConn>();
  const tasks = new Set<Promise<void>>();
  let nextHandle = 1;
  let grabs = 0;
  let noJobs = 0;
  let closed = false;
  const wake = options.wakeSleepers ?? true;
  let assignProbability = options.assignProbability;

  function send(w: WorkerConn, bytes: Uint8Array): void {
    if (closed) return;
    const t = w.tail.then(() => writeAll(w.conn, bytes)).catch(() => {});
    w.tail = t;
    tasks.add(t);
    void t.finally(() => tasks.delete(t));
  }

  function wakeSleepers(): void {
    if (!wake || waiting.length === 0) return;
    for (const w of workers) {
      if (w.fn === options.fn && w.sleeping && !w.noopSent) {
        w.noopSent = true;
        send(w, encodePacket("RES", PACKET.NOOP, []));
      }
    }
  }

  function scheduleFlush(w: WorkerConn): void {
    if (w.flushTimer !== undefined || w.queued === 0 || closed) return;
    const delayMs = Math.floor(options.random() * (options.maxReplyDelayMs + 1));
    w.flushTimer = setTimeout(() => {
      w.flushTimer = undefined;
      // Answer a random number of the queued grabs now, the rest later: the
      // worker sees every interleaving of replies and its own events.
      const n = 1 + Math.floor(options.random() * w.queued);
      const parts: Uint8Array[] = [];
      for (let i = 0; i < n; i++) {
        w.queued--;
        const job = w.fn === options.fn && waiting.length > 0 &&
            options.random() < assignProbability
          ? waiting.shift()
          : undefined;
        if (job === undefined) {
          noJobs++;
          parts.push(encodePacket("RES", PACKET.NO_JOB, []));
        } else {
          held.set(job.handle, job.payload);
          const named = options.assignAs?.({ handle: job.handle, fn: options.fn }) ??
            { handle: job.handle, fn: options.fn };
          parts.push(encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, [
            named.handle,
            named.fn,
            "",
            job.payload,
          ]));
        }
      }
      send(w, concatBytes(parts));
      scheduleFlush(w);
    }, delayMs);
  }

  function onPacket(w: WorkerConn, packet: Packet): void {
    switch (packet.type) {
      case PACKET.ECHO_REQ:
        send(w, encodePacket("RES", PACKET.ECHO_RES, [packet.args[0] as Uint8Array]));
        return;
      case PACKET.GRAB_JOB_UNIQ:
        grabs++;
        w.sleeping = false;
        w.noopSent = false;
        w.queued++;
        scheduleFlush(w);
        return;
      case PACKET.PRE_SLEEP:
        w.sleeping = true;
        w.noopSent = false;
        wakeSleepers();
        return;
      case PACKET.CAN_DO:
        w.fn = new TextDecoder().decode(packet.args[0]);
        return;
      case PACKET.WORK_COMPLETE:
      case PACKET.WORK_FAIL: {
        const handle = new TextDecoder().decode(packet.args[0]);
        if (held.delete(handle)) completed.push(handle);
        return;
      }
      default:
        // SET_CLIENT_ID: nothing to answer.
        return;
    }
  }

  async function serveWorker(conn: Deno.Conn, first: Uint8Array): Promise<void> {
    const w: WorkerConn = {
      conn,
      fn: undefined,
      queued: 0,
      sleeping: false,
      noopSent: false,
      flushTimer: undefined,
      tail: Promise.resolve(),
    };
    workers.add(w);
    const parser = new PacketParser({ expect: "REQ" });
    try {
      for (const p of parser.push(first)) onPacket(w, p);
      const buf = new Uint8Array(64 * 1024);
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) break;
        for (const p of parser.push(buf.slice(0, n))) onPacket(w, p);
      }
    } catch {
      // A closed connection ends the session.
    } finally {
      workers.delete(w);
      if (w.flushTimer !== undefined) clearTimeout(w.flushTimer);
      // Jobs held by a dead connection go back to the queue, as in gearmand.
      for (const [handle, payload] of held) waiting.unshift({ handle, payload });
      held.clear();
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
  }

  async function serveAdmin(conn: Deno.Conn, first: Uint8Array): Promise<void> {
    try {
      const text = new TextDecoder().decode(first);
      if (text.startsWith("status")) {
        const line = `${options.fn}\t${waiting.length + held.size}\t${held.size}\t${
          [...workers].filter((w) => w.fn === options.fn).length
        }\n`;
        await writeAll(conn, new TextEncoder().encode(`${line}.\n`));
      }
    } catch {
      // The client went away.
    } finally {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
  }

  async function serve(conn: Deno.Conn): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    const n = await conn.read(buf).catch(() => null);
    if (n === null) {
      conn.close();
      return;
    }
    const first = buf.slice(0, n);
    if (first[0] === 0) await serveWorker(conn, first);
    else await serveAdmin(conn, first);
  }

  const accepting = (async () => {
    for await (const conn of listener) {
      const t = serve(conn);
      tasks.add(t);
      void t.finally(() => tasks.delete(t));
    }
  })().catch(() => {});

  const server: ScriptedJobServer = {
    addr,
    add(payloads) {
      for (const payload of payloads) waiting.push({ handle: `H:${nextHandle++}`, payload });
      wakeSleepers();
    },
    get waiting() {
      return waiting.length;
    },
    get completed() {
      return completed;
    },
    get unanswered() {
      let n = 0;
      for (const w of workers) n += w.queued;
      return n;
    },
    get grabs() {
      return grabs;
    },
    get noJobs() {
      return noJobs;
    },
    setAssignProbability(p) {
      assignProbability = p;
    },
    async close() {
      if (closed) return;
      closed = true;
      listener.close();
      for (const w of workers) {
        if (w.flushTimer !== undefined) clearTimeout(w.flushTimer);
        try {
          w.conn.close();
        } catch {
          // already closed
        }
      }
      await accepting;
      await Promise.allSettled([...tasks]);
    },
    [Symbol.asyncDispose]() {
      return this.close();
    },
  };
  return server;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off));
}

/**
 * A seeded generator (the synthetic events' mulberry32), so a failing run can be replayed from
 * its seed.
 *
 * @param seed Any 32-bit integer.
 * @returns Uniform numbers in [0, 1).
 */
export function seededRandom(seed: number): () => number {
  const rng = new Rng(seed >>> 0);
  return () => rng.next();
}
