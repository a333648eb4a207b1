import assert from "node:assert/strict";
import { loadSettings } from "../config/load.ts";
import { workerConfigFrom } from "./run.ts";
import { DEFAULT_ALLOWED_RAW_COMMANDS } from "../config/mod.ts";
import { DUPLICATE_SIGNAL_MS, shutdownSignalHandler } from "./mod.ts";
import { hasCode } from "../util/errors.ts";

const ALLOW = [...DEFAULT_ALLOWED_RAW_COMMANDS];

async function configFor(argv: string[], env: Record<string, string> = {}) {
  const { settings } = await loadSettings("run", {
    argv,
    env,
    readTextFile: () => Promise.reject(new Error("no config file in this test")),
  });
  return workerConfigFrom(settings);
}

// `--listen-addr ""` used to fail ("has no port"), so every worker bound 127.0.0.1:8080; and
// without keys a generated key was logged at WARN, i.e. written into the journal.
Deno.test("run: /ws is served only with keys and an address (docs/operations.md#ws)", async () => {
  assert.equal((await configFor([])).websocket, null, "no keys: not served");
  assert.deepEqual((await configFor([], { STATUSENGINE_API_KEYS: "k1" })).websocket, {
    hostname: "127.0.0.1",
    port: 8080,
    apiKeys: ["k1"],
  });
  assert.equal(
    (await configFor(["--listen-addr", ""], { STATUSENGINE_API_KEYS: "k1" })).websocket,
    null,
    "an empty address: not served",
  );
  const { settings } = await loadSettings("run", {
    argv: ["--config", "c.yml"],
    env: { STATUSENGINE_API_KEYS: "k1" },
    readTextFile: () => Promise.resolve('listen_addr: ""\n'),
  });
  assert.equal(workerConfigFrom(settings).websocket, null, "the same in config.yml");
});

Deno.test("run: /commands is configured only when command keys exist (docs/operations.md#commands)", async () => {
  assert.equal((await configFor([])).commands, null);
  assert.deepEqual((await configFor([], { STATUSENGINE_API_COMMAND_KEYS: "k1,k2" })).commands, {
    hostname: "127.0.0.1",
    port: 8081,
    apiKeys: ["k1", "k2"],
    allow: ALLOW,
  });
  const own = await configFor(["--command-allow", "del_host_downtime,*"], {
    STATUSENGINE_API_COMMAND_KEYS: "k",
  });
  assert.deepEqual(own.commands?.allow, ["del_host_downtime", "*"]);
});

Deno.test("run: --command-listen-addr maps :port to every interface (no host) and keeps IPv6 hosts", async () => {
  const all = await configFor(["--command-api-keys", "k", "--command-listen-addr", ":9000"]);
  assert.deepEqual(all.commands, {
    hostname: "",
    port: 9000,
    apiKeys: ["k"],
    allow: ALLOW,
  });
  const v6 = await configFor(["--command-api-keys", "k", "--command-listen-addr", "[::1]:9001"]);
  assert.deepEqual(v6.commands, { hostname: "::1", port: 9001, apiKeys: ["k"], allow: ALLOW });
});

Deno.test("run: the reconnect interval follows the selected backend (docs/consumption.md#rebuild)", async () => {
  const flags = ["--gearman-reconnect-interval", "3s", "--rabbitmq-reconnect-interval", "7s"];
  assert.equal((await configFor(flags)).reconnectIntervalMs, 3_000);
  assert.equal((await configFor([...flags, "--consumer", "rabbitmq"])).reconnectIntervalMs, 7_000);
  assert.equal((await configFor(["--consumer", "rabbitmq"])).reconnectIntervalMs, 2_000);
});

Deno.test("run: --queues and --exclude-queues select the consumed queues; nothing left refuses", async () => {
  assert.equal((await configFor([])).queues?.length, 12);
  assert.deepEqual((await configFor([])).inOrderLock, {}, "the in-order lock is always on");
  assert.deepEqual(
    (await configFor(["--queues", "statusngin_downtimes,statusngin_hoststatus"])).queues,
    ["statusngin_hoststatus", "statusngin_downtimes"],
  );
  const without = await configFor(["--exclude-queues", "statusngin_service_perfdata"]);
  assert.equal(without.queues?.length, 11);
  assert.ok(!without.queues?.includes("statusngin_service_perfdata"));
  await assert.rejects(
    configFor(["--queues", "statusngin_hoststatus", "--exclude-queues", "statusngin_hoststatus"]),
    (err: unknown) => hasCode(err, "startup") && /no queue left to consume/.test(err.message),
  );
});

// Ctrl-C on `deno task start` reaches the worker twice at once: from the terminal and
// forwarded by the task runner. Treating that as a second signal skipped the graceful
// shutdown (held jobs redelivered, no shutdown steps logged).
// Events carry whole seconds, so the age is counted in seconds; rounding down made 500ms the 0
// that turns the filter off, and 1500ms discard events only 1 s old.
Deno.test("run: --status-max-age below or between whole seconds rounds up, never to the 0 that disables", async () => {
  const cases: [string, number][] = [["500ms", 1], ["1500ms", 2], ["5m", 300], ["0s", 0]];
  for (const [given, seconds] of cases) {
    const config = await configFor(["--status-max-age", given]);
    assert.equal(config.statusMaxAgeSeconds, seconds, given);
  }
});

Deno.test("cli: a shutdown signal delivered twice at once is one signal; a later one exits", () => {
  let now = 0;
  const calls: string[] = [];
  const onSignal = shutdownSignalHandler({
    abort: () => calls.push("abort"),
    exit: () => calls.push("exit"),
    now: () => now,
  });
  onSignal();
  now = 5;
  onSignal();
  assert.deepEqual(calls, ["abort"], "the duplicate is ignored");
  now = DUPLICATE_SIGNAL_MS;
  onSignal();
  assert.deepEqual(calls, ["abort", "exit"], "a later signal exits at once");
});
