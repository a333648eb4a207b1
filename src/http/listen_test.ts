/**
 * The listener on its own: heads that the web `Request` refuses are dropped without taking the
 * process down, and the listener keeps serving.
 */
import assert from "node:assert/strict";
import { listen } from "./listen.ts";

/** The status line of the answer to `head`, or "closed" when the server closed without one. */
async function send(port: number, head: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(head));
    const buf = new Uint8Array(1024);
    const n = await conn.read(buf).catch(() => null);
    return n === null
      ? "closed"
      : new TextDecoder().decode(buf.subarray(0, n)).split("\r\n")[0] ?? "";
  } finally {
    conn.close();
  }
}

Deno.test("listen: a Host the web Request refuses closes that connection, on a plain request and on an upgrade; the listener serves on", async () => {
  const server = await listen({
    name: "metrics",
    hostname: "127.0.0.1",
    port: 0,
    onError: () => new Response("internal error", { status: 500 }),
  }, () => new Response("ok"));
  try {
    const port = server.port;
    assert.equal(
      await send(
        port,
        "GET /ws HTTP/1.1\r\nHost: a b\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
      ),
      "closed",
    );
    assert.equal(await send(port, "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), "closed");
    assert.equal(await send(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 200 OK");
  } finally {
    await server.shutdown();
  }
});
