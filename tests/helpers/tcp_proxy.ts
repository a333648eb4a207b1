/**
 * A TCP proxy the test controls, to cut a link without killing the server
 * behind it (killing gearmand would lose its in-memory queue, docs/gearman-protocol.md#restart).
 */
import { concatBytes } from "../../src/util/bytes.ts";

/** A running proxy. */
export interface TcpProxy extends AsyncDisposable {
  /** `127.0.0.1:<port>` to connect to instead of the target. */
  readonly addr: string;
  readonly port: number;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Close every open connection (both sides see EOF) and keep accepting. */
  sever(): void;
  /** Close every connection and stop listening: new connections are refused (ECONNREFUSED). */
  block(): void;
  /** Stop forwarding bytes on open connections without closing them (a silent peer). */
  freeze(): void;
  /**
   * On the connections open now, keep forwarding what the client sends but hold what the server
   * answers (a request that arrived, its answer lost with the connection); new ones are untouched.
   */
  holdReplies(): void;
  /** Forward every chunk, both ways, `ms` late (a slow server or link); 0 forwards at once again. */
  delay(ms: number): void;
  /** Accept and forward again after block()/freeze(). */
  unblock(): void;
  /** Stop listening and close everything. */
  close(): Promise<void>;
}

/**
 * A listener on a free port below the ephemeral range (32768 and up), where the kernel picks the
 * local ports of client sockets: block() gives the proxy's port up and unblock() takes it again,
 * and a port of that range can meanwhile be taken by any connection of the machine (seen in CI:
 * AddrInUse on unblock). Cluster tests take their fixed layouts from 20000 up.
 */
function listenBelowEphemeral(tls?: TlsIdentity): Deno.Listener {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = 10_000 + Math.floor(Math.random() * 10_000);
    try {
      return listenOn(port, tls);
    } catch (err: unknown) {
      if (!(err instanceof Deno.errors.AddrInUse)) throw err;
    }
  }
  throw new Error("No free port between 10000 and 20000 for the test proxy");
}

/** A certificate and its key, PEM. */
export interface TlsIdentity {
  readonly cert: string;
  readonly key: string;
}

function listenOn(port: number, tls?: TlsIdentity): Deno.Listener {
  return tls === undefined
    ? Deno.listen({ hostname: "127.0.0.1", port })
    : Deno.listenTls({ hostname: "127.0.0.1", port, ...tls });
}

/** A throw-away self-signed certificate for `localhost` (openssl), for a TLS proxy. */
export async function selfSignedIdentity(): Promise<TlsIdentity> {
  const dir = await Deno.makeTempDir({ prefix: "se-tls-" });
  try {
    const { success, stderr } = await new Deno.Command("openssl", {
      args: [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
      ]
        .concat(["-keyout", `${dir}/key.pem`, "-out", `${dir}/cert.pem`]),
      stdout: "null",
      stderr: "piped",
    }).output();
    if (!success) throw new Error(`openssl: ${new TextDecoder().decode(stderr)}`);
    return {
      cert: await Deno.readTextFile(`${dir}/cert.pem`),
      key: await Deno.readTextFile(`${dir}/key.pem`),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Start a proxy in front of `target` (`host:port`). With `tls`, clients connect over TLS and the
 * proxy forwards the plain bytes (the target speaks plain TCP).
 *
 * @example
 * ```ts ignore
 * await using proxy = await startTcpProxy(gearmand.addr);
 * proxy.sever();
 * ```
 */
export function startTcpProxy(
  target: string,
  options: { readonly tls?: TlsIdentity } = {},
): Promise<TcpProxy> {
  const [host, portText] = target.split(":");
  const targetPort = Number(portText);
  let listener: Deno.Listener | undefined = listenBelowEphemeral(options.tls);
  const port = (listener.addr as Deno.NetAddr).port;
  const pairs = new Set<{ a: Deno.Conn; b: Deno.Conn }>();
  const tasks = new Set<Promise<void>>();
  let blocked = false;
  let frozen = false;
  let delayMs = 0;
  let accepted = 0;
  const frozenWaiters: (() => void)[] = [];

  const closePair = (pair: { a: Deno.Conn; b: Deno.Conn }) => {
    pairs.delete(pair);
    for (const c of [pair.a, pair.b]) {
      try {
        c.close();
      } catch {
        // already closed
      }
    }
  };

  // Pairs whose server-to-client direction holdReplies() stopped.
  const held = new WeakSet<{ a: Deno.Conn; b: Deno.Conn }>();

  const pipe = async (from: Deno.Conn, to: Deno.Conn, pair: { a: Deno.Conn; b: Deno.Conn }) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await from.read(buf);
        if (n === null) break;
        while (frozen || (from === pair.b && held.has(pair) && pairs.has(pair))) {
          await new Promise<void>((r) => frozenWaiters.push(r));
        }
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        if (!pairs.has(pair)) break;
        let off = 0;
        while (off < n) off += await to.write(buf.subarray(off, n));
      }
    } catch {
      // either side closed
    }
    closePair(pair);
  };

  const track = (p: Promise<void>) => {
    tasks.add(p);
    void p.finally(() => tasks.delete(p));
  };

  const acceptLoop = async (l: Deno.Listener) => {
    for (;;) {
      let client: Deno.Conn;
      try {
        client = await l.accept();
      } catch {
        return;
      }
      if (blocked) {
        client.close();
        continue;
      }
      accepted++;
      // Registered before the upstream connect finishes, so a sever() in
      // that window still cuts this connection.
      const pending = { a: client, b: client };
      pairs.add(pending);
      track((async () => {
        let upstream: Deno.Conn;
        try {
          upstream = await Deno.connect({ hostname: host ?? "127.0.0.1", port: targetPort });
        } catch {
          closePair(pending);
          return;
        }
        const pair = { a: client, b: upstream };
        if (!pairs.delete(pending)) {
          upstream.close();
          return;
        }
        pairs.add(pair);
        await Promise.all([pipe(client, upstream, pair), pipe(upstream, client, pair)]);
      })());
    }
  };
  track(acceptLoop(listener));
  const stopListening = () => {
    try {
      listener?.close();
    } catch {
      // already closed
    }
    listener = undefined;
  };

  const wake = () => {
    for (const w of frozenWaiters.splice(0)) w();
  };
  const proxy: TcpProxy = {
    addr: `127.0.0.1:${port}`,
    port,
    get accepted() {
      return accepted;
    },
    sever() {
      for (const pair of [...pairs]) closePair(pair);
      wake();
    },
    block() {
      blocked = true;
      stopListening();
      proxy.sever();
    },
    freeze() {
      frozen = true;
    },
    holdReplies() {
      for (const pair of pairs) held.add(pair);
    },
    delay(ms) {
      delayMs = ms;
    },
    unblock() {
      blocked = false;
      frozen = false;
      wake();
      if (listener === undefined) {
        listener = listenOn(port, options.tls);
        track(acceptLoop(listener));
      }
    },
    async close() {
      stopListening();
      blocked = true;
      frozen = false;
      proxy.sever();
      while (tasks.size > 0) await Promise.allSettled([...tasks]);
    },
    [Symbol.asyncDispose]() {
      return proxy.close();
    },
  };
  return Promise.resolve(proxy);
}

/**
 * A proxy in front of a scratch database, with the database URL that goes
 * through it (to cut MySQL away from the worker without stopping the server).
 *
 * @param db The database (`host`, `port`, `url`).
 * @returns The proxy and `url`, the database URL via the proxy.
 */
export async function startMysqlProxy(
  db: { readonly host: string; readonly port: number; readonly url: string },
): Promise<TcpProxy & { readonly url: string }> {
  const proxy = await startTcpProxy(`${db.host}:${db.port}`);
  const url = new URL(db.url);
  url.host = proxy.addr;
  return Object.assign(proxy, { url: url.href });
}

/** A loopback TCP peer that keeps what it receives (see {@link startTcpPeer}). */
export interface TcpPeer extends AsyncDisposable {
  /** `host:port` to connect to (`[::1]:port` for IPv6). */
  readonly addr: string;
  readonly port: number;
  /** The first connection accepted, for a test that closes it itself. */
  readonly accepted: Promise<Deno.Conn>;
  /** Every byte received so far on every connection, in arrival order, as UTF-8. */
  received(): string;
  /** Stop listening and close every connection. */
  close(): Promise<void>;
}

/**
 * Start a peer on `hostname` that accepts every connection, sends it `greeting` (when given)
 * and keeps what it receives: the far end of a client under test that needs no real server.
 *
 * @example
 * ```ts ignore
 * await using peer = startTcpPeer();
 * // connect to peer.addr, write "x"
 * await waitFor(() => peer.received() === "x");
 * ```
 */
export function startTcpPeer(
  options: { hostname?: string; greeting?: Uint8Array } = {},
): TcpPeer {
  const hostname = options.hostname ?? "127.0.0.1";
  const listener = Deno.listen({ hostname, port: 0 });
  const received: Uint8Array[] = [];
  const conns: Deno.Conn[] = [];
  let first: (conn: Deno.Conn) => void = () => {};
  const accepted = new Promise<Deno.Conn>((resolve) => first = resolve);
  const keep = async (conn: Deno.Conn): Promise<void> => {
    const buffer = new Uint8Array(65_536);
    try {
      if (options.greeting !== undefined) await conn.write(options.greeting);
      for (;;) {
        const n = await conn.read(buffer);
        if (n === null) return;
        received.push(buffer.slice(0, n));
      }
    } catch {
      // Closed by the test or the client.
    }
  };
  const loop = (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      first(conn);
      void keep(conn);
    }
  })();
  const close = async (): Promise<void> => {
    listener.close();
    for (const c of conns) {
      try {
        c.close();
      } catch {
        // Already closed.
      }
    }
    await loop.catch(() => {});
  };
  const port = listener.addr.port;
  return {
    addr: hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`,
    port,
    accepted,
    received: () => new TextDecoder().decode(concatBytes(received)),
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * A proxy to the real RabbitMQ that lets the connection come up, then, at the client's first
 * `queue.declare` (the first depth check), severs the connection or stops forwarding; `onCut`
 * is called then.
 */
export function cutAmqpAtFirstDeclare(
  how: "sever" | "freeze",
  onCut: () => void = () => {},
): Disposable & { readonly port: number; readonly cut: boolean } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  let cut = false;
  const forward = async (from: Deno.Conn, to: Deno.Conn, watch: boolean) => {
    // The client's bytes: the 8-byte protocol header, then frames (type, channel, size, payload,
    // end); a method frame's payload starts with its class and method id, queue.declare 50/10.
    let seen = new Uint8Array(0);
    let skip = watch ? 8 : 0;
    const buf = new Uint8Array(64 * 1024);
    try {
      for (let n; (n = await from.read(buf)) !== null;) {
        if (watch) {
          seen = new Uint8Array([...seen, ...buf.subarray(0, n)]);
          while (seen.length >= skip + 11) {
            const view = new DataView(seen.buffer, skip);
            if (view.getUint8(0) === 1 && view.getUint16(7) === 50 && view.getUint16(9) === 10) {
              cut = true;
              onCut();
            }
            skip += 8 + view.getUint32(3);
          }
        }
        if (cut) {
          if (how === "sever") { for (const c of conns) c.close(); }
          return;
        }
        await to.write(buf.subarray(0, n));
      }
    } catch {
      // closed
    }
  };
  void (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({ hostname: "127.0.0.1", port: 5672 });
      conns.push(client, server);
      void forward(client, server, true);
      void forward(server, client, false);
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    get cut() {
      return cut;
    },
    [Symbol.dispose]() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch {
          // closed
        }
      }
    },
  };
}
