/**
 * Counting `/ws` clients for bench/websocket.ts, in their own process so the
 * worker under measurement does not pay for them in its event loop:
 *
 *   deno run -A bench/_ws_clients.ts <ws|raw> <ws url with api_key> <clients>
 *
 * `ws` clients are Deno's WebSocket (every text frame becomes a string); `raw`
 * clients complete the handshake over TCP and then only walk the frame headers (and answer
 * pings), the cheapest possible reader, standing in for clients on other machines.
 * Prints `ready` once every client is open; each `report` line on stdin is
 * answered with one JSON line `{"frames":…,"bytes":…}` (totals over all
 * clients); end of stdin closes the clients and exits. `stalled` clients
 * complete the handshake and then never read (the abuse case of
 * `bench/websocket.ts --abuse`). Frames are counted,
 * never parsed: a client that prints or parses measures itself (docs/operations.md#ws).
 */
import { report } from "./_util.ts";

const [mode, url, count] = Deno.args;
if (
  url === undefined || count === undefined ||
  (mode !== "ws" && mode !== "raw" && mode !== "stalled")
) {
  throw new TypeError("usage: <ws|raw|stalled> <url> <clients>");
}
let frames = 0;
let bytes = 0;
const closers: (() => Promise<void>)[] = [];
for (let i = 0; i < Number(count); i++) {
  closers.push(
    mode === "ws" ? await wsClient(url) : await rawClient(new URL(url), mode === "stalled"),
  );
}
report("ready");
const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
let pending = "";
for await (const chunk of lines) {
  pending += chunk;
  let nl: number;
  while ((nl = pending.indexOf("\n")) >= 0) {
    if (pending.slice(0, nl).trim() === "report") report(JSON.stringify({ frames, bytes }));
    pending = pending.slice(nl + 1);
  }
}
await Promise.all(closers.map((close) => close()));

async function wsClient(url: string): Promise<() => Promise<void>> {
  const ws = new WebSocket(url);
  ws.onmessage = (e: MessageEvent<unknown>) => {
    frames++;
    if (typeof e.data === "string") bytes += e.data.length;
  };
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`${url}: handshake refused`));
  });
  return () =>
    new Promise<void>((resolve) => {
      ws.onclose = () => resolve();
      ws.close();
    });
}

async function rawClient(url: URL, stalled: boolean): Promise<() => Promise<void>> {
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  await conn.write(
    new TextEncoder().encode(
      `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\n` +
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
        "Sec-WebSocket-Version: 13\r\n\r\n",
    ),
  );
  const buf = new Uint8Array(1 << 20);
  // The 101 response: read up to the blank line; a frame may follow in the same read.
  let head = 0;
  let start = -1;
  while (start < 0) {
    const n = await conn.read(buf.subarray(head));
    if (n === null) throw new Error("connection closed during the handshake");
    head += n;
    const text = new TextDecoder().decode(buf.subarray(0, head));
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      if (!text.startsWith("HTTP/1.1 101")) throw new Error(text.split("\r\n")[0]);
      start = end + 4;
    }
  }
  if (stalled) {
    // Never reads again: the server's frames pile up in its buffers and the kernel's.
    return () => {
      conn.close();
      return Promise.resolve();
    };
  }
  // Server frames are unmasked: 2 header bytes, then 0, 2 or 8 length bytes. A ping's payload
  // (at most 125 bytes) is kept and answered with a pong: the hub hands a client no more than
  // 512 KiB beyond its last pong, so a reader that ignores pings stalls there.
  let header: number[] = [];
  let skip = 0;
  let ping: number[] | undefined;
  const pong = (payload: number[]) => {
    // Client frames are masked; a zero mask leaves the payload as it is.
    conn.write(new Uint8Array([0x8a, 0x80 | payload.length, 0, 0, 0, 0, ...payload])).catch(
      () => {},
    );
  };
  const walk = (chunk: Uint8Array) => {
    bytes += chunk.length;
    let i = 0;
    while (i < chunk.length) {
      if (skip > 0) {
        const take = Math.min(skip, chunk.length - i);
        if (ping !== undefined) ping.push(...chunk.subarray(i, i + take));
        skip -= take;
        i += take;
        if (skip === 0 && ping !== undefined) {
          pong(ping);
          ping = undefined;
        }
        continue;
      }
      header.push(chunk[i++] as number);
      const len7 = (header[1] ?? 0) & 0x7f;
      const need = header.length < 2 ? 2 : len7 === 126 ? 4 : len7 === 127 ? 10 : 2;
      if (header.length < need) continue;
      let len = len7;
      if (len7 === 126) len = ((header[2] as number) << 8) | (header[3] as number);
      if (len7 === 127) {
        len = 0;
        for (let k = 2; k < 10; k++) len = len * 256 + (header[k] as number);
      }
      const opcode = (header[0] as number) & 0x0f;
      if (opcode === 1) frames++;
      if (opcode === 9) {
        ping = [];
        if (len === 0) {
          pong(ping);
          ping = undefined;
        }
      }
      skip = len;
      header = [];
    }
  };
  walk(buf.subarray(start, head));
  const reading = (async () => {
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) return;
        walk(buf.subarray(0, n));
      }
    } catch {
      // Closed by us at the end.
    }
  })();
  return async () => {
    conn.close();
    await reading;
  };
}
