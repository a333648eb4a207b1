import assert from "node:assert/strict";
import { createMetrics } from "../metrics/registry.ts";
import type { CommandPublisher } from "./publisher.ts";
import { startCommandServer } from "./server.ts";
import { concatBytes } from "../util/bytes.ts";

/** A publisher whose publishes wait until the test releases them. */
function gatedPublisher() {
  const started = Promise.withResolvers<string>();
  const release = Promise.withResolvers<void>();
  let closed = false;
  const publisher: CommandPublisher = {
    backend: "gearman",
    target: "fake",
    async publish(body) {
      if (closed) throw new Error("publisher closed");
      started.resolve(body);
      await release.promise;
    },
    close() {
      closed = true;
      return Promise.resolve();
    },
    [Symbol.asyncDispose]() {
      closed = true;
      return Promise.resolve();
    },
  };
  return { publisher, started: started.promise, release: () => release.resolve() };
}

Deno.test("server: shutdown stops accepting but lets a request already publishing finish with 202", async () => {
  const gate = gatedPublisher();
  const server = await startCommandServer({
    hostname: "127.0.0.1",
    port: 0,
    apiKeys: ["k"],
    publisher: gate.publisher,
    metrics: createMetrics(),
    now: () => 1_700_000_000_000,
  });
  const url = `http://127.0.0.1:${server.port}/commands`;
  const inFlight = fetch(url, {
    method: "POST",
    headers: { "x-api-key": "k" },
    body: '{"Command":"raw","Data":"ENABLE_HOST_NOTIFICATIONS;web01"}',
  });
  assert.equal(
    await gate.started,
    '{"Command":"raw","Data":"[1700000000] ENABLE_HOST_NOTIFICATIONS;web01"}',
  );
  const stopping = server.shutdown();
  // A new connection is refused once the listener is closed.
  await assert.rejects(fetch(url, { method: "POST", body: "{}" }), TypeError);
  gate.release();
  const res = await inFlight;
  assert.equal(res.status, 202);
  assert.deepEqual(await res.json(), { accepted: 1 });
  await stopping;
});

Deno.test("server: refuses to start without a usable key", async () => {
  await assert.rejects(
    startCommandServer({
      hostname: "127.0.0.1",
      port: 0,
      apiKeys: [""],
      publisher: gatedPublisher().publisher,
      metrics: createMetrics(),
    }),
    RangeError,
  );
});

/**
 * Send a request over a raw connection while reading the answer, and return the answer with
 * whether every byte of the request could be sent.
 */
async function rawExchange(
  port: number,
  head: string,
  body: AsyncIterable<Uint8Array> | undefined,
): Promise<{ answer: string; sent: boolean; error?: string }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const reading = (async () => {
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) break;
        chunks.push(buf.slice(0, n));
      }
    } catch {
      // A reset after the answer: what was read is the answer.
    }
    return new TextDecoder().decode(concatBytes(chunks));
  })();
  let sent = true;
  let error: string | undefined;
  try {
    await conn.write(new TextEncoder().encode(head));
    if (body !== undefined) {
      for await (const chunk of body) {
        let off = 0;
        while (off < chunk.length) off += await conn.write(chunk.subarray(off));
      }
    }
  } catch (err: unknown) {
    sent = false;
    error = err instanceof Error ? err.message : String(err);
  }
  const answer = await reading;
  try {
    conn.close();
  } catch {
    // closed by the server
  }
  return { answer, sent, ...(error === undefined ? {} : { error }) };
}

async function* mebibytes(n: number, chunked: boolean): AsyncIterable<Uint8Array> {
  const mib = new Uint8Array(1024 * 1024).fill(0x20);
  const enc = new TextEncoder();
  for (let i = 0; i < n; i++) {
    if (chunked) yield enc.encode(`${mib.length.toString(16)}\r\n`);
    yield mib;
    if (chunked) yield enc.encode("\r\n");
  }
  if (chunked) yield enc.encode("0\r\n\r\n");
}

Deno.test("server: a client still sending a body over 8 MiB gets its 413, not a reset; one announcing more than 64 MiB is cut off unread", async () => {
  const metrics = createMetrics();
  await using server = await startCommandServer({
    hostname: "127.0.0.1",
    port: 0,
    apiKeys: ["k"],
    publisher: gatedPublisher().publisher,
    metrics,
  });
  const head = (framing: string) =>
    `POST /commands HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nconnection: close\r\n${framing}\r\n\r\n`;
  // 20 MiB cannot wait in the two sockets' buffers: the server must read it for the client to
  // finish sending, whether it announced its length or streamed it.
  for (const chunked of [false, true]) {
    const framing = chunked ? "transfer-encoding: chunked" : `content-length: ${20 * 1024 * 1024}`;
    const { answer, sent, error } = await rawExchange(
      server.port,
      head(framing),
      mebibytes(20, chunked),
    );
    assert.ok(sent, `${framing}: the request could not be sent: ${error}`);
    assert.match(answer, /^HTTP\/1\.1 413 /, framing);
    assert.match(answer, /request body exceeds 8388608 bytes/, framing);
  }
  // Beyond the drain bound nothing is read: the answer comes at once.
  const { answer } = await rawExchange(
    server.port,
    head(`content-length: ${100 * 1024 * 1024}`),
    undefined,
  );
  assert.match(answer, /^HTTP\/1\.1 413 /);
});

Deno.test("server: a key that is not ASCII matches when a client sends it as UTF-8 (as curl does)", async () => {
  const gate = gatedPublisher();
  gate.release();
  await using server = await startCommandServer({
    hostname: "127.0.0.1",
    port: 0,
    apiKeys: ["schlüssel-€"],
    publisher: gate.publisher,
    metrics: createMetrics(),
  });
  const body = '{"Command":"raw","Data":"ENABLE_HOST_NOTIFICATIONS;web01"}';
  // fetch refuses a header that is not a ByteString: the bytes go over a raw connection.
  const answers: string[] = [];
  for (const header of ["X-Api-Key: schlüssel-€", "Authorization: Bearer schlüssel-€"]) {
    const { answer } = await rawExchange(
      server.port,
      `POST /commands HTTP/1.1\r\nHost: x\r\n${header}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      undefined,
    );
    answers.push(answer.split("\r\n")[0] ?? "");
  }
  assert.deepEqual(answers, ["HTTP/1.1 202 Accepted", "HTTP/1.1 202 Accepted"]);
});
