/**
 * The shipped packaging stays true: the example configuration parses for
 * both commands that read it, the systemd units keep the settings whose
 * reasons are documented, and the compile task never grants everything.
 */
import assert from "node:assert/strict";
import { loadSettings } from "../src/config/mod.ts";
import { permissionFlags, V8_FLAGS } from "../tools/compile.ts";

const root = new URL("../", import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(path, root));

Deno.test("packaging: the example config.yml loads for run and cleanup without warnings", async () => {
  const path = new URL("packaging/config.example.yml", root).pathname;
  for (const command of ["run", "cleanup"] as const) {
    const { warnings } = await loadSettings(command, { argv: ["--config", path], env: {} });
    assert.deepEqual(warnings, [], command);
  }
});

Deno.test("packaging: the worker unit stops within 90 s, reads secrets from an EnvironmentFile and allows V8's JIT", () => {
  const unit = read("packaging/systemd/statusengine-worker.service");
  assert.match(unit, /^TimeoutStopSec=90s$/m);
  assert.match(unit, /^EnvironmentFile=-\/etc\/statusengine\/worker\.env$/m);
  assert.match(unit, /^User=statusengine$/m);
  assert.match(unit, /^Restart=always$/m);
  assert.match(unit, /^ProtectSystem=strict$/m);
  assert.match(unit, /^WorkingDirectory=\/var\/lib\/statusengine-worker$/m);
  assert.ok(!/^MemoryDenyWriteExecute=yes/m.test(unit), "V8 needs W+X memory");
  assert.ok(!/^Requires=/m.test(unit), "MySQL restarts must not stop the worker");
  const timer = read("packaging/systemd/statusengine-db-cleanup.timer");
  assert.match(timer, /^Persistent=true$/m);
  const cleanup = read("packaging/systemd/statusengine-db-cleanup.service");
  assert.match(cleanup, /^Type=oneshot$/m);
  assert.match(cleanup, /statusengine-worker cleanup/);
});

Deno.test("packaging: the default dead-letter file lies in the unit's state directory, which the binary may write", async () => {
  const { settings } = await loadSettings("run", { argv: [], env: {} });
  const unit = read("packaging/systemd/statusengine-worker.service");
  const stateDirectory = /^StateDirectory=(.+)$/m.exec(unit)?.[1];
  assert.equal(stateDirectory, "statusengine-worker");
  assert.equal(
    settings.deadLetterFile,
    `/var/lib/${stateDirectory}/statusengine-dead-letters.ndjson`,
  );
  const write = permissionFlags("/etc/statusengine", `/var/lib/${stateDirectory}`)
    .find((f) => f.startsWith("--allow-write="));
  assert.ok(settings.deadLetterFile.startsWith(`${write?.slice("--allow-write=".length)}/`));
});

Deno.test("packaging: the compiled binary gets net, env, read of config and state, write of state, never -A", () => {
  const flags = permissionFlags("/etc/statusengine", "/var/lib/statusengine-worker");
  assert.deepEqual(flags, [
    "--allow-net",
    "--allow-env",
    "--allow-read=/etc/statusengine,/var/lib/statusengine-worker",
    "--allow-write=/var/lib/statusengine-worker",
  ]);
  const task = JSON.parse(read("deno.json")).tasks.compile as string;
  assert.ok(!/\s-A\b|--allow-all/.test(task));
});

Deno.test("packaging: the worker runs with exactly the compiled permissions, and a dead-letter path outside them fails at start-up", async () => {
  const { startGearmand, freePort } = await import("./helpers/gearmand.ts");
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  const { createSchema } = await import("./helpers/worker.ts");
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const configDir = await Deno.makeTempDir({ prefix: "se-etc-" });
  const stateDir = await Deno.makeTempDir({ prefix: "se-state-" });
  try {
    const port = freePort();
    await Deno.writeTextFile(
      `${configDir}/config.yml`,
      `gearman_addr: ${gearmand.addr}\nmysql_url: ${db.url}\nmetrics_port: ${port}\n` +
        `metrics_host: 127.0.0.1\nnode_name: perm-test\nlisten_addr: 127.0.0.1:${freePort()}\n` +
        // The default lies in the real state directory; this run's state directory is a temp one.
        `dead_letter_file: ${stateDir}/statusengine-dead-letters.ndjson\n`,
    );
    const spawn = (extra: string[]) =>
      new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          ...permissionFlags(configDir, stateDir),
          new URL("main.ts", root).pathname,
          "run",
          "--config",
          `${configDir}/config.yml`,
          ...extra,
        ],
        cwd: stateDir,
        clearEnv: true,
        env: { PATH: Deno.env.get("PATH") ?? "/usr/bin", HOME: Deno.env.get("HOME") ?? "/root" },
        stdout: "piped",
        stderr: "piped",
      }).spawn();

    const worker = spawn([]);
    const status = worker.status;
    const output = Promise.all([
      new Response(worker.stdout).text(),
      new Response(worker.stderr).text(),
    ]);
    let ready = false;
    for (let i = 0; i < 300 && !ready; i++) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/readyz`);
        await res.body?.cancel();
        ready = res.status === 200;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    worker.kill("SIGTERM");
    const [code, [out, err]] = await Promise.all([status, output]);
    assert.ok(ready, `ready under the compiled permissions:\n${out}\n${err}`);
    assert.equal(code.code, 0, err);
    await Deno.stat(`${stateDir}/statusengine-dead-letters.ndjson`);

    const refused = spawn(["--dead-letter-file", "/tmp/se-not-allowed.ndjson"]);
    const [refusedStatus, refusedErr] = await Promise.all([
      refused.status,
      new Response(refused.stderr).text(),
      new Response(refused.stdout).text(),
    ]);
    assert.equal(refusedStatus.code, 1);
    assert.match(refusedErr, /dead-letter file "\/tmp\/se-not-allowed\.ndjson" cannot be opened/);
  } finally {
    await Deno.remove(configDir, { recursive: true });
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("packaging: deno task start runs with the V8 flags the compiled binary embeds", () => {
  const task = JSON.parse(read("deno.json")).tasks.start as string;
  assert.ok(task.includes(`--v8-flags=${V8_FLAGS.join(",")}`), task);
});
