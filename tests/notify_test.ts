/**
 * Readiness notification for the unit's `Type=notify`, spoken to a real Unix datagram socket
 * as systemd listens on. With `Type=simple`, `systemctl start` reported success when the worker
 * died a second later (schema missing, MySQL refused): now the start is complete only with
 * `READY=1`, which the worker sends once it consumes and never when its start fails.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startNotifySocket } from "./helpers/notify_socket.ts";
import { waitFor } from "./helpers/wait.ts";
import { createSchema, jobsAtGearmand, publish } from "./helpers/worker.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { NOTIFY_COMMAND } from "../src/daemon/notify.ts";

const HOSTCHECK = Deno.readTextFileSync(
  new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
);

/** Everything sent before this call has arrived once the returned promise resolves. */
async function flushed(socket: { path: string; messages(): string[][] }): Promise<void> {
  const marker = `X_TEST_MARKER=${crypto.randomUUID()}`;
  const out = await new Deno.Command(NOTIFY_COMMAND, {
    args: [marker],
    env: { NOTIFY_SOCKET: socket.path },
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  await waitFor(() => socket.messages().some((m) => m.includes(marker)));
}

function withoutMarkers(messages: string[][]): string[][] {
  return messages.filter((m) => !m.some((a) => a.startsWith("X_TEST_MARKER=")))
    .map((m) => m.filter((a) => a !== "BARRIER=1")).filter((m) => m.length > 0);
}

Deno.test("notify: READY=1 once the worker consumes, STOPPING=1 on SIGTERM, then exit 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using socket = await startNotifySocket();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: db.url,
    args: ["--queues", "statusngin_hostchecks"],
    env: { NOTIFY_SOCKET: socket.path },
  });
  await waitFor(() => socket.messages().some((m) => m.includes("READY=1")), {
    message: `READY=1; log:\n${worker.lines().join("\n")}\n${worker.stderr()}`,
  });
  // Ready means consuming: a job published now is taken.
  await publish(gearmand.addr, "statusngin_hostchecks", [HOSTCHECK]);
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks")) === 0, {
    message: "the job consumed",
  });
  worker.kill("SIGTERM");
  const status = await worker.status;
  assert.equal(status.code, 0, worker.stderr());
  await flushed(socket);
  const messages = withoutMarkers(socket.messages());
  assert.deepEqual(messages.map((m) => m[0]), ["READY=1", "STOPPING=1"], JSON.stringify(messages));
  assert.ok(messages[0]?.some((a) => a.startsWith("STATUS=")), "a status line for systemctl");
});

Deno.test("notify: a start that fails (schema missing) exits non-zero without READY=1", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  // No schema: waiting cannot fix this, the start must fail, and systemd must see it fail.
  await using socket = await startNotifySocket();
  await assert.rejects(
    startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: db.url,
      env: { NOTIFY_SOCKET: socket.path },
    }),
    /worker exited during start-up[\s\S]*statusengine_/,
  );
  await flushed(socket);
  const messages = withoutMarkers(socket.messages());
  assert.ok(!messages.some((m) => m.includes("READY=1")), JSON.stringify(messages));
});

// Start like it runs: while MySQL does not answer the worker waits, says so in STATUS=, and is not
// ready; READY=1 follows once MySQL answers and consumption started.
Deno.test("notify: while the start waits for MySQL there is a STATUS= and no READY=1; READY=1 once it answers", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  proxy.block();
  await using socket = await startNotifySocket();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: proxy.url,
    args: ["--queues", "statusngin_hostchecks"],
    env: { NOTIFY_SOCKET: socket.path },
    waitUntil: "listening",
  });
  await waitFor(
    () =>
      socket.messages().some((m) => m.some((a) => /^STATUS=MySQL .* not reachable yet/.test(a))),
    { message: "a STATUS= naming MySQL" },
  );
  await flushed(socket);
  assert.ok(!socket.messages().some((m) => m.includes("READY=1")), "not ready while waiting");
  proxy.unblock();
  await waitFor(() => socket.messages().some((m) => m.includes("READY=1")), {
    message: "READY=1 once MySQL answers",
    timeoutMs: 30_000,
  });
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

// The STATUS= sent when MySQL first answers ("starting") was not awaited, so it raced READY=1
// (STATUS=consuming): arriving last, it left `systemctl status` saying "starting" for as long as
// the worker ran. Here systemd-notify delivers "starting" only after READY=1 was delivered (or
// after 3 s, when READY=1 waits for it); the last STATUS= must be "consuming".
Deno.test("notify: the last STATUS= before READY=1 arrives before it, so systemctl status says consuming", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  proxy.block();
  await using socket = await startNotifySocket();
  const bin = await Deno.makeTempDir({ prefix: "se-notify-" });
  try {
    const real = new TextDecoder().decode(
      (await new Deno.Command("sh", { args: ["-c", `command -v ${NOTIFY_COMMAND}`] }).output())
        .stdout,
    ).trim();
    await Deno.writeTextFile(
      `${bin}/${NOTIFY_COMMAND}`,
      `#!/bin/sh
case " $* " in
  *" STATUS=starting "*) i=0; while [ ! -e "${bin}/ready" ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done ;;
esac
"${real}" "$@"; rc=$?
case " $* " in *" READY=1 "*) touch "${bin}/ready" ;; esac
exit $rc
`,
      { mode: 0o755 },
    );
    await using worker = await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: proxy.url,
      args: ["--queues", "statusngin_hostchecks"],
      env: {
        NOTIFY_SOCKET: socket.path,
        PATH: `${bin}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`,
      },
      waitUntil: "listening",
    });
    await waitFor(
      () => socket.messages().some((m) => m.some((a) => /^STATUS=MySQL .* not reachable/.test(a))),
      { message: "a STATUS= naming MySQL" },
    );
    proxy.unblock();
    await waitFor(
      () =>
        socket.messages().some((m) => m.includes("READY=1")) &&
        socket.messages().some((m) => m.includes("STATUS=starting")),
      { message: "READY=1 and STATUS=starting", timeoutMs: 30_000 },
    );
    await flushed(socket);
    const statuses = withoutMarkers(socket.messages()).flatMap((m) =>
      m.filter((a) => a.startsWith("STATUS="))
    );
    assert.equal(statuses.at(-1), "STATUS=consuming", JSON.stringify(statuses));
    worker.kill("SIGTERM");
    assert.equal((await worker.status).code, 0, worker.stderr());
  } finally {
    await Deno.remove(bin, { recursive: true });
  }
});
