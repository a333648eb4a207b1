/**
 * A real `NOTIFY_SOCKET` peer: a Unix datagram socket, as systemd listens on, bound by a small
 * Python process (Deno cannot bind one without `--unstable-net`). Every datagram it receives is
 * one message; tests read them in arrival order, with the listener's clock at arrival (the
 * test's own event loop may read several at once).
 */

/** One datagram as it arrived. */
export interface NotifyArrival {
  /** The listener's monotonic clock when it received the datagram, in milliseconds. */
  readonly atMs: number;
  /** Its `KEY=value` assignments. */
  readonly assignments: readonly string[];
}

/** The listening socket and what arrived on it. */
export interface NotifySocket extends AsyncDisposable {
  /** Path for `NOTIFY_SOCKET`. */
  readonly path: string;
  /** Messages received so far, each split into its `KEY=value` assignments. */
  messages(): string[][];
  /** Messages received so far with their arrival time. */
  arrivals(): NotifyArrival[];
}

const LISTENER = `
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    data = s.recv(65536)
    at = time.monotonic() * 1000
    print(json.dumps([at, data.decode("utf-8", "replace")]), flush=True)
`;

/**
 * Bind a datagram socket in a fresh directory and collect what arrives.
 *
 * @returns The socket; dispose stops the listener by its PID and removes the directory.
 */
export async function startNotifySocket(): Promise<NotifySocket> {
  const dir = await Deno.makeTempDir({ prefix: "se-notify-" });
  const path = `${dir}/notify.sock`;
  const child = new Deno.Command("python3", {
    args: ["-u", "-c", LISTENER, path],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const received: NotifyArrival[] = [];
  let bound: () => void = () => {};
  const isBound = new Promise<void>((resolve) => (bound = resolve));
  const pump = (async () => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of child.stdout) {
      partial += decoder.decode(chunk, { stream: true });
      const lines = partial.split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) {
        if (line === "bound") bound();
        else {
          const [atMs, text] = JSON.parse(line) as [number, string];
          received.push({ atMs, assignments: text.split("\n").filter((l) => l !== "") });
        }
      }
    }
  })();
  const exited = child.status.then((s) => {
    throw new Error(`notify socket listener exited (${s.code}) before binding`);
  });
  await Promise.race([isBound, exited]);
  return {
    path,
    messages: () => received.map((m) => [...m.assignments]),
    arrivals: () => [...received],
    async [Symbol.asyncDispose]() {
      child.kill("SIGKILL");
      await child.status;
      await pump;
      await Deno.remove(dir, { recursive: true });
    },
  };
}
