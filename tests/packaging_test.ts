/**
 * The shipped packaging stays true: the example configuration parses for
 * both commands that read it, the systemd units keep the settings whose
 * reasons are documented, and the compile task never grants everything.
 */
import assert from "node:assert/strict";
import { loadSettings, settingKeyOf, SETTINGS } from "../src/config/mod.ts";
import {
  DEFAULT_COMMAND_FILES,
  DEFAULT_MYSQL_SOCKETS,
  permissionFlags,
  V8_FLAGS,
} from "../tools/compile.ts";
import { waitFor } from "./helpers/wait.ts";

const root = new URL("../", import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(path, root));

Deno.test("packaging: the example config.yml loads for run, cleanup, publish and losstest without warnings", async () => {
  const path = new URL("packaging/config.example.yml", root).pathname;
  // What each command needs besides the file.
  const required: Record<string, string[]> = {
    publish: ["--queue", "statusngin_hostchecks"],
    losstest: ["verify", "--run-id", "r"],
  };
  for (const command of ["run", "cleanup", "publish", "losstest"] as const) {
    const argv = ["--config", path, ...(required[command] ?? [])];
    const { warnings } = await loadSettings(command, { argv, env: {} });
    assert.deepEqual(warnings, [], command);
  }
});

// worker.env.example once promised a random /ws key "generated and logged" where /ws is simply
// not served: each variable must exist, and its comment say what the setting's help says of "none".
Deno.test("packaging: worker.env.example names real variables, and says what an empty one means as the help does", async () => {
  const lines = read("packaging/worker.env.example").split("\n");
  const vars = lines.flatMap((line, i) => {
    const m = /^#?(STATUSENGINE_[A-Z_]+)=(.+)$/.exec(line);
    return m === null ? [] : [{ name: m[1] ?? "", value: m[2] ?? "", comment: lines[i - 1] ?? "" }];
  });
  assert.ok(vars.length >= 4, "the example was read");
  const { sources } = await loadSettings("run", {
    argv: [],
    env: Object.fromEntries(vars.map((v) => [v.name, v.value])),
  });
  for (const v of vars) {
    const key = Object.keys(sources).find((k) => sources[k]?.text === `env ${v.name}`);
    assert.ok(key !== undefined, `${v.name} is read by run`);
    const help = SETTINGS.find((row) => settingKeyOf(row) === key)?.help ?? "";
    const none = /none = ([^.;]+)/.exec(help)?.[1];
    if (none !== undefined) {
      assert.ok(v.comment.includes(none), `${v.name}: "${v.comment}" says "${none}"`);
    }
  }
});

// An operator who trims TimeoutStopSec goes by the figure the unit's comment gives: a figure below
// the real worst case of the stop lets systemd SIGKILL it mid-flush (redeliveries, duplicates).
Deno.test("packaging: the worker unit and running.md quote the worst-case stop that docs/shutdown.md's budgets add up to", () => {
  const shutdown = read("docs/shutdown.md");
  const table = shutdown.slice(
    shutdown.indexOf("| #  |"),
    shutdown.indexOf("Then `shutdown complete`"),
  );
  let worst = 0;
  for (const row of table.split("\n").slice(2)) {
    const budget = row.split("|").at(-2) ?? "";
    // Every figure of the cell: the drain's "30 s, then ≤ 4 s" is 34 s.
    for (const m of budget.matchAll(/(\d+) s\b/g)) worst += Number(m[1]);
  }
  assert.ok(worst > 0, "the budgets table was found");
  assert.match(shutdown, new RegExp(`= ${worst} s`), "shutdown.md's own sum");
  const unit = read("packaging/systemd/statusengine-worker.service");
  const above = unit.slice(0, unit.indexOf("\nTimeoutStopSec=")).split("\n");
  // The comment lines right above the setting.
  const comment = above.slice(above.findLastIndex((l) => !l.startsWith("#")) + 1).join("\n");
  const stop = Number(/^TimeoutStopSec=(\d+)s$/m.exec(unit)?.[1]);
  assert.ok(stop > worst, `TimeoutStopSec=${stop}s leaves no room above ${worst} s`);
  const quoted = (text: string) => [...text.matchAll(/(\d+) s\b/g)].map((m) => Number(m[1]));
  assert.ok(quoted(comment).includes(worst), `the unit's comment quotes ${worst} s: ${comment}`);
  assert.ok(quoted(comment).every((n) => n <= worst), `no bigger figure: ${comment}`);
  const running = read("docs/running.md");
  const units = running.slice(
    running.indexOf('<a id="units"></a>'),
    running.indexOf('<a id="notify"></a>'),
  );
  assert.ok(quoted(units).includes(worst), `running.md#units quotes ${worst} s`);
});

Deno.test("packaging: the worker unit stops within 90 s, reads secrets from an EnvironmentFile and allows V8's JIT", () => {
  const unit = read("packaging/systemd/statusengine-worker.service");
  assert.match(unit, /^TimeoutStopSec=90s$/m);
  assert.match(unit, /^EnvironmentFile=-\/etc\/statusengine\/worker\.env$/m);
  assert.match(unit, /^User=statusengine$/m);
  assert.match(unit, /^Restart=always$/m);
  // The worker reloads on SIGHUP (tests/reload_test.ts); systemctl reload sends it.
  assert.match(unit, /^ExecReload=\/bin\/kill -HUP \$MAINPID$/m);
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
  const write = permissionFlags().find((f) => f.startsWith("--allow-write="));
  const stateDir = write?.slice("--allow-write=".length).split(",")[0];
  assert.ok(settings.deadLetterFile.startsWith(`${stateDir}/`));
});

Deno.test("packaging: the compiled binary gets net, env, read, write of the state directory, the cores' command files and the MySQL sockets, systemd-notify, never -A", () => {
  const flags = permissionFlags();
  assert.deepEqual(flags, [
    "--allow-net",
    "--allow-env",
    // Unrestricted: --config may name a file anywhere, and a binary cannot take --allow-read.
    "--allow-read",
    `--allow-write=/var/lib/statusengine-worker,${DEFAULT_COMMAND_FILES.join(",")},` +
    // Deno connects to a Unix socket only with write permission on it.
    DEFAULT_MYSQL_SOCKETS.join(","),
    "--allow-run=systemd-notify",
  ]);
  const task = JSON.parse(read("deno.json")).tasks.compile as string;
  assert.ok(!/\s-A\b|--allow-all/.test(task));
});

/**
 * `main.ts` under `deno run` with the given permission flags and an environment of PATH and
 * HOME only, as the compiled binary would run it.
 */
function spawnMain(
  permissions: readonly string[],
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string>; wrapper?: readonly string[] } = {},
): Deno.ChildProcess {
  const command = [
    ...options.wrapper ?? [],
    Deno.execPath(),
    "run",
    ...permissions,
    new URL("main.ts", root).pathname,
    ...args,
  ];
  return new Deno.Command(command[0] ?? "", {
    args: command.slice(1),
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    clearEnv: true,
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin",
      HOME: Deno.env.get("HOME") ?? "/root",
      ...options.env,
    },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

Deno.test("packaging: under exactly the compiled permissions the worker reads --config anywhere, creates a missing state directory, and refuses a dead-letter path outside it", async () => {
  const { startGearmand, freePort } = await import("./helpers/gearmand.ts");
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  const { createSchema } = await import("./helpers/worker.ts");
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Where a migrating PHP user's file is: not a directory the build knew about.
  const base = await Deno.makeTempDir({ prefix: "se-host-" });
  const configDir = `${base}/opt/statusengine/worker/etc`;
  await Deno.mkdir(configDir, { recursive: true });
  // A fresh host: the state directory does not exist yet.
  const stateDir = `${base}/var/lib/statusengine-worker`;
  await Deno.mkdir(`${base}/var/lib`, { recursive: true });
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
      spawnMain(
        permissionFlags(stateDir),
        ["run", "--config", `${configDir}/config.yml`, ...extra],
        {
          cwd: base,
        },
      );

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
    assert.match(out, /created the dead-letter file's directory/);
    await Deno.stat(`${stateDir}/statusengine-dead-letters.ndjson`);

    // A path outside the state directory, in a directory that does not exist: the start once
    // advised creating the directory, then refused again, both times with Deno's advice to run
    // again with --allow-write, which a compiled binary cannot be given.
    for (const path of ["/tmp/se-not-allowed.ndjson", `${base}/elsewhere/dl.ndjson`]) {
      const refused = spawn(["--dead-letter-file", path]);
      const [refusedStatus, refusedErr] = await Promise.all([
        refused.status,
        new Response(refused.stderr).text(),
        new Response(refused.stdout).text(),
      ]);
      assert.equal(refusedStatus.code, 1);
      assert.ok(
        refusedErr.includes(`dead-letter file "${path}" is outside what this process may write`),
        refusedErr,
      );
      assert.match(refusedErr, /may write only below the state directory/);
      assert.doesNotMatch(refusedErr, /install -d|--allow-write flag/);
    }
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

// A replay of a file moved out of the state directory once replayed and committed every record,
// then failed writing the records left over ("run again with the --allow-write flag"), rc 1.
Deno.test("packaging: under exactly the compiled permissions, dead-letters replay of a file outside the state directory refuses before replaying, saying where to move it", async () => {
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  const { createSchema } = await import("./helpers/worker.ts");
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const base = await Deno.makeTempDir({ prefix: "se-replay-perm-" });
  try {
    const stateDir = `${base}/state`;
    await Deno.mkdir(stateDir);
    const aside = `${base}/aside.ndjson`;
    const payload = JSON.stringify({
      messages: [{ hostcheck: { host_name: "replayed", current_attempt: 1 } }],
    });
    await Deno.writeTextFile(
      aside,
      JSON.stringify({ queue: "statusngin_hostchecks", reason: "bad_type", error: "e", payload }) +
        "\n" + JSON.stringify({ queue: "statusngin_hostchecks", reason: "x", payload: "{" }) + "\n",
    );
    const run = await spawnMain(permissionFlags(stateDir), [
      "dead-letters",
      "replay",
      aside,
      "--mysql-url",
      db.url,
      "--dead-letter-file",
      `${stateDir}/statusengine-dead-letters.ndjson`,
    ]).output();
    const err = new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 1, err);
    assert.ok(err.includes(`"${stateDir}"`), err);
    assert.match(err, /may write only below the state directory/);
    assert.match(err, /nothing was replayed/);
    assert.doesNotMatch(err, /--allow-write flag/);
    const rows = await db.query<{ n: number }[]>(
      "SELECT COUNT(*) AS n FROM statusengine_hostchecks",
    );
    assert.equal(rows[0]?.n, 0, "nothing replayed");
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

// The PHP worker's example config ships check_for_commands: 1 with submit_method: cmd and
// /opt/naemon/var/naemon.cmd: with a binary that may not write the command file the worker
// looked ready while every task the UI wrote failed at each poll.
Deno.test("packaging: the compiled binary may write the setting's default command file and the documented ones", async () => {
  const { settings } = await loadSettings("run", { argv: [], env: {} });
  assert.equal(DEFAULT_COMMAND_FILES[0], settings.externalCommandFile);
  const operations = read("docs/operations.md");
  for (const path of DEFAULT_COMMAND_FILES) assert.ok(operations.includes(`\`${path}\``), path);
});

/**
 * A PHP worker's task queue keys as its example config ships them, with the services of
 * {@link commandFileEnv}, written to its directory.
 */
async function phpTaskConfig(
  env: { dir: string; gearmand: { addr: string }; db: { url: string }; port: number },
  commandFile: string,
): Promise<string> {
  const dir = env.dir;
  const path = `${dir}/config.yml`;
  await Deno.writeTextFile(
    path,
    `gearman_addr: ${env.gearmand.addr}\nmysql_url: ${env.db.url}\n` +
      `metrics_host: 127.0.0.1\nmetrics_port: ${env.port}\nnode_name: perm-cmd\n` +
      `listen_addr: ""\ndead_letter_file: ${dir}/state/dead.ndjson\n` +
      `check_for_commands: 1\ncommand_check_interval: 1\nsubmit_method: cmd\n` +
      `external_command_file: ${commandFile}\n`,
  );
  return path;
}

/**
 * gearmand, a database with the schema, a temporary directory for a command file and a free
 * metrics port, for the command-file tests; disposing removes the directory.
 */
async function commandFileEnv() {
  const { startGearmand, freePort } = await import("./helpers/gearmand.ts");
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  const { createSchema } = await import("./helpers/worker.ts");
  const gearmand = await startGearmand();
  const db = await createScratchDatabase();
  const dir = await Deno.makeTempDir({ prefix: "se-cmd-" });
  const env = {
    gearmand,
    db,
    dir,
    port: freePort(),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
      await db[Symbol.asyncDispose]();
      await gearmand[Symbol.asyncDispose]();
    },
  };
  try {
    await createSchema(db.url);
    return env;
  } catch (err) {
    await env[Symbol.asyncDispose]();
    throw err;
  }
}

async function mkfifo(path: string): Promise<void> {
  const made = await new Deno.Command("mkfifo", { args: ["-m", "0620", path] }).output();
  assert.ok(made.success, "mkfifo");
}

Deno.test("packaging: under exactly the compiled permissions, submit_method cmd to a command file the binary may not write refuses run and config, saying what to change", async () => {
  await using env = await commandFileEnv();
  const { dir, port } = env;
  // A core's FIFO where the build did not expect one.
  const fifo = `${dir}/naemon.cmd`;
  await mkfifo(fifo);
  const config = await phpTaskConfig(env, fifo);
  const flags = permissionFlags(`${dir}/state`);
  const expectRefusal = (err: string) => {
    assert.match(err, /check_for_commands submits the UI's tasks with submit_method cmd/);
    assert.ok(err.includes(`"${fifo}", which this process may not write`), err);
    assert.match(err, /submit_method: broker/);
    assert.ok(err.includes(`STATUSENGINE_COMMAND_FILES=${fifo} deno task compile`), err);
  };

  const checked = await spawnMain(flags, ["config", "--config", config]).output();
  const checkedErr = new TextDecoder().decode(checked.stderr);
  assert.equal(checked.code, 1, checkedErr);
  expectRefusal(checkedErr);

  // Without the check the worker became ready here and failed every task afterwards.
  const result = await exitOrReady(
    spawnMain(flags, ["run", "--config", config], { cwd: dir }),
    port,
  );
  assert.ok(!result.ready, `the worker became ready:\n${result.output}`);
  assert.equal(result.code, 1, result.output);
  expectRefusal(result.output);
});

Deno.test("packaging: under exactly the compiled permissions, built for the core's command file, submit_method cmd delivers the UI's task to the FIFO", async () => {
  await using env = await commandFileEnv();
  const { db, dir } = env;
  const fifo = `${dir}/naemon.cmd`;
  await mkfifo(fifo);
  // The test is the core: it keeps the FIFO open read-write, so a writer closing it is no
  // end of file.
  const reader = Deno.open(fifo, { read: true, write: true });
  await db.query(
    "INSERT INTO statusengine_tasks (uuid, node_name, entry_time, type, payload) " +
      "VALUES ('t1', 'perm-cmd', 1, 'externalcommand', '[10] ENABLE_HOST_CHECK;web01')",
  );
  const config = await phpTaskConfig(env, fifo);
  // What `STATUSENGINE_COMMAND_FILES=<fifo> deno task compile` embeds.
  const worker = spawnMain(permissionFlags(`${dir}/state`, [fifo]), [
    "run",
    "--config",
    config,
  ], { cwd: dir });
  const output = Promise.all([
    new Response(worker.stdout).text(),
    new Response(worker.stderr).text(),
  ]);
  const file = await reader;
  let received = "";
  try {
    const buffer = new Uint8Array(4096);
    while (!received.includes("\n")) {
      const n = await file.read(buffer);
      if (n === null) break;
      received += new TextDecoder().decode(buffer.subarray(0, n));
    }
  } finally {
    file.close();
  }
  await waitFor(async () => {
    const rows = await db.query<unknown[]>("SELECT uuid FROM statusengine_tasks");
    return rows.length === 0;
  }, { message: "the task deleted after its submission" });
  worker.kill("SIGTERM");
  const [status, [out, err]] = await Promise.all([worker.status, output]);
  assert.equal(received, "[10] ENABLE_HOST_CHECK;web01\n", `${out}\n${err}`);
  assert.equal(status.code, 0, err);
  assert.doesNotMatch(`${out}\n${err}`, /Cannot open external command file/);
});

/**
 * Wait until the worker exits or its /readyz answers 200, stop it in the second case, and
 * return whether it became ready with its exit status and output.
 */
async function exitOrReady(worker: Deno.ChildProcess, port: number) {
  const output = Promise.all([
    new Response(worker.stdout).text(),
    new Response(worker.stderr).text(),
  ]);
  let exit: Deno.CommandStatus | undefined;
  void worker.status.then((status) => exit = status);
  let ready = false;
  await waitFor(async () => {
    if (exit !== undefined) return true;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`);
      await res.body?.cancel();
      ready = res.status === 200;
    } catch {
      // Not listening yet, or already gone.
    }
    return ready;
  }, { timeoutMs: 60_000, message: "the worker exits or becomes ready" });
  if (exit === undefined) worker.kill("SIGTERM");
  const [status, [out, err]] = await Promise.all([worker.status, output]);
  return { ready, code: status.code, output: `${out}\n${err}` };
}

// The binary may write the command file, but the core's FIFO is writable for its group only:
// a service user outside that group failed every task at each poll while the worker was ready.
Deno.test("packaging: a service user outside the command FIFO's group refuses the start, naming the group to add", async () => {
  await using env = await commandFileEnv();
  const { dir, port } = env;
  await Deno.chmod(dir, 0o755);
  // The core's FIFO as the core creates it: owner and group write only, group root here.
  const fifo = `${dir}/naemon.cmd`;
  await mkfifo(fifo);
  await Deno.mkdir(`${dir}/state`, { mode: 0o777 });
  await Deno.chmod(`${dir}/state`, 0o777);
  // nobody cannot read root's module cache: a copy of its npm packages.
  const { denoDir } = JSON.parse(
    new TextDecoder().decode(
      (await new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).output()).stdout,
    ),
  ) as { denoDir: string };
  const cache = `${dir}/deno-dir`;
  await Deno.mkdir(cache);
  const copied = await new Deno.Command("cp", { args: ["-r", `${denoDir}/npm`, `${cache}/npm`] })
    .output();
  assert.ok(copied.success, "copy of the npm cache");
  const opened = await new Deno.Command("chmod", { args: ["-R", "a+rwX", cache] }).output();
  assert.ok(opened.success, "chmod of the cache copy");
  const config = await phpTaskConfig(env, fifo);
  const result = await exitOrReady(
    spawnMain(permissionFlags(`${dir}/state`, [fifo]), ["run", "--config", config], {
      cwd: dir,
      env: { DENO_DIR: cache, HOME: dir },
      // A service user outside the file's group, as the unit's User= is.
      wrapper: ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"],
    }),
    port,
  );
  assert.ok(!result.ready, `the worker became ready:\n${result.output}`);
  assert.equal(result.code, 1, result.output);
  assert.ok(
    result.output.includes(`"${fifo}" cannot be opened for writing: Permission denied`),
    result.output,
  );
  assert.match(result.output, /add that user to the group root/);
  assert.match(result.output, /SupplementaryGroups=root in the unit/);
  assert.match(result.output, /submit_method: broker/);
});

// A plain command file (a spool) lies on the read-only file system ProtectSystem=strict makes of
// everything outside ReadWritePaths=; every task failed at each poll while the worker was ready.
Deno.test("packaging: a plain command file on a read-only mount refuses the start, naming ReadWritePaths=", async () => {
  await using env = await commandFileEnv();
  const { dir, port } = env;
  const spool = `${dir}/spool`;
  await Deno.mkdir(spool);
  const file = `${spool}/naemon.cmd`;
  await Deno.writeTextFile(file, "");
  const config = await phpTaskConfig(env, file);
  const result = await exitOrReady(
    spawnMain(permissionFlags(`${dir}/state`, [file]), ["run", "--config", config], {
      cwd: dir,
      // What ProtectSystem=strict does: a read-only bind mount, in a mount namespace of its own.
      wrapper: [
        "unshare",
        "--mount",
        "sh",
        "-c",
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
        spool,
      ],
    }),
    port,
  );
  assert.ok(!result.ready, `the worker became ready:\n${result.output}`);
  assert.equal(result.code, 1, result.output);
  assert.ok(result.output.includes(`"${file}" cannot be opened for writing`), result.output);
  assert.match(result.output, /Read-only file system/i);
  assert.ok(result.output.includes(`ReadWritePaths=${file} in the unit`), result.output);
  assert.equal(await Deno.readTextFile(file), "", "nothing written");
});

// Without dl.deno.land deno compile failed with a Rust error chain and a backtrace that said
// neither what to do nor that a local runtime can be used.
Deno.test("packaging: deno task compile without its runtime download says what failed and what to do, exits 1, no backtrace", async () => {
  // A real run whose download cannot succeed anywhere: a cache without the runtime (only the
  // module caches of the real one are linked in) and a proxy that refuses every connection.
  const info = await new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).output();
  const realDir = (JSON.parse(new TextDecoder().decode(info.stdout)) as { denoDir: string })
    .denoDir;
  const denoDir = await Deno.makeTempDir({ prefix: "se-deno-dir-" });
  try {
    for (const entry of ["npm", "remote", "gen"]) {
      const target = `${realDir}/${entry}`;
      const exists = await Deno.stat(target).then(() => true, () => false);
      if (exists) await Deno.symlink(target, `${denoDir}/${entry}`);
    }
    const { freePort } = await import("./helpers/gearmand.ts");
    const compile = async (env: Record<string, string>) => {
      const out = await new Deno.Command(Deno.execPath(), {
        // As deno.json's compile task runs it.
        args: [
          "run",
          "--allow-run",
          "--allow-read",
          "--allow-write",
          "--allow-env",
          "tools/compile.ts",
        ],
        cwd: new URL(".", root).pathname,
        clearEnv: true,
        env: {
          PATH: Deno.env.get("PATH") ?? "/usr/bin",
          HOME: Deno.env.get("HOME") ?? "/root",
          DENO_DIR: denoDir,
          HTTPS_PROXY: `http://127.0.0.1:${freePort()}`,
          NO_COLOR: "1",
          ...env,
        },
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 1, stderr);
      assert.doesNotMatch(stderr, /backtrace|Caused by/i);
      // The progress before the failure still shows.
      assert.match(stderr, /Compile main\.ts/);
      return stderr;
    };
    const offline = await compile({});
    assert.match(
      offline,
      /deno compile could not download its runtime \(https:\/\/dl\.deno\.land\//,
    );
    assert.match(offline, /DENORT_BIN=\/path\/to\/denort deno task compile/);
    // A DENORT_BIN that names no file: what it names, and what it must be.
    const missing = `${denoDir}/no-such-denort`;
    const local = await compile({ DENORT_BIN: missing });
    assert.ok(local.includes(`could not read its runtime from DENORT_BIN=${missing}`), local);
  } finally {
    await Deno.remove(denoDir, { recursive: true });
  }
});

Deno.test("packaging: deno task start runs with the V8 flags the compiled binary embeds", () => {
  const task = JSON.parse(read("deno.json")).tasks.start as string;
  assert.ok(task.includes(`--v8-flags=${V8_FLAGS.join(",")}`), task);
});

Deno.test("packaging: a dead-letter directory that cannot be created refuses the start saying how to fix it", async () => {
  const { startRun } = await import("./helpers/cli_run.ts");
  const { startGearmand } = await import("./helpers/gearmand.ts");
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  const { createSchema } = await import("./helpers/worker.ts");
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // A regular file where a directory would have to be: not creatable, even for root.
  const blocker = await Deno.makeTempFile({ prefix: "se-blocker-" });
  try {
    const { done, io } = startRun(gearmand.addr, db.url, {
      deadLetterFile: `${blocker}/state/dead.ndjson`,
    });
    const code = await done;
    const err = io.errLines.join("\n");
    assert.equal(code, 1);
    assert.match(err, /does not exist and cannot be created/);
    assert.match(err, /install -d -o <user>/);
    assert.match(err, /--dead-letter-file/);
  } finally {
    await Deno.remove(blocker);
  }
});

// --help offers ?socketPath= and the Go DSN's unix(...) becomes one; Deno.connect to a Unix socket
// needs write permission on its path, which the compiled binary gets only for the paths it was
// built with.
const MYSQL_SOCKET = "/run/mysqld/mysqld.sock";

Deno.test("packaging: under exactly the compiled permissions, a MySQL URL with the distribution's Unix socket connects", async () => {
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  await using db = await createScratchDatabase();
  assert.ok((await Deno.stat(MYSQL_SOCKET)).isSocket, `MariaDB's socket is ${MYSQL_SOCKET}`);
  const url = new URL(db.url);
  url.host = "localhost";
  url.search = `?socketPath=${MYSQL_SOCKET}`;
  const child = spawnMain(permissionFlags(), ["schema", "--check", "--mysql-url", url.href]);
  const [status, out, err] = await Promise.all([
    child.status,
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  const output = out + err;
  assert.doesNotMatch(output, /Requires write access|NotCapable/, output);
  // Reached the (empty) scratch database over the socket: every table is reported missing.
  assert.match(output, /statusengine_dbversion: table is missing/, output);
  assert.equal(status.code, 1, output);
});

Deno.test("packaging: under exactly the compiled permissions, a Unix socket the binary may not use refuses the start instead of waiting for MySQL for ever", async () => {
  const { freePort } = await import("./helpers/gearmand.ts");
  const socket = "/nonexistent-se-socket-dir/mysqld.sock";
  const child = spawnMain(permissionFlags(), [
    "run",
    "--mysql-url",
    `mysql://root@localhost/statusengine?socketPath=${socket}`,
    "--gearman-addr",
    `127.0.0.1:${freePort()}`,
    "--metrics-port",
    "0",
    "--listen-addr",
    `127.0.0.1:${freePort()}`,
    "--dead-letter-file",
    "",
  ]);
  // A worker that waits instead never exits by itself: stopped here, it exits 0, not 1.
  const guard = setTimeout(() => child.kill("SIGTERM"), 30_000);
  try {
    const [status, out, err] = await Promise.all([
      child.status,
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
    ]);
    const output = out + err;
    assert.equal(status.code, 1, output);
    assert.match(output, /waiting cannot fix this/, output);
    assert.match(output, new RegExp(socket), output);
    assert.match(output, /STATUSENGINE_MYSQL_SOCKETS/, output);
    assert.doesNotMatch(output, /run again with the --allow-write flag/, output);
  } finally {
    clearTimeout(guard);
  }
});

Deno.test("packaging: the README's quick start counts the tables schema creates", async () => {
  const { runCli } = await import("../src/cli/mod.ts");
  const { bufferIo } = await import("./helpers/cli_run.ts");
  const { createScratchDatabase } = await import("./helpers/mysql.ts");
  await using db = await createScratchDatabase();
  const io = bufferIo();
  await runCli(["schema", "--check", "--mysql-url", db.url], {}, {
    io,
    signals: false,
    logWrite: () => {},
  });
  const output = [...io.outLines, ...io.errLines].join("\n");
  const missing = output.match(/: table is missing/g)?.length ?? 0;
  assert.ok(missing > 0, output);
  const readme = read("README.md");
  const comment =
    /^# the (\d+) tables \(?and the worker's own (\w+)\b.*\nstatusengine-worker schema$/m
      .exec(readme);
  assert.ok(comment !== null, "README: the comment above `statusengine-worker schema` counts them");
  const words: Record<string, number> = { two: 2, three: 3, four: 4 };
  const own = words[comment[2] ?? ""] ?? Number(comment[2]);
  assert.equal(Number(comment[1]) + own, missing, comment[0]);
});

const UNITS = [
  "statusengine-worker.service",
  "statusengine-db-cleanup.service",
  "statusengine-db-cleanup.timer",
];

// Type=simple made `systemctl start` report success when the worker died a second later, and
// Documentation= pointed at the legacy PHP worker's repository.
Deno.test("packaging: the worker unit waits for READY=1 and documents this worker", () => {
  const unit = read("packaging/systemd/statusengine-worker.service");
  assert.match(unit, /^Type=notify$/m);
  // systemd-notify sends from its own PID.
  assert.match(unit, /^NotifyAccess=all$/m);
  for (const name of UNITS) {
    const text = read(`packaging/systemd/${name}`);
    const docs = [...text.matchAll(/^Documentation=(.+)$/gm)].map((m) => m[1] ?? "");
    assert.ok(docs.length > 0, name);
    for (const doc of docs) {
      assert.ok(!doc.includes("github.com/statusengine/worker"), `${name}: ${doc}`);
      const file = /^file:\/usr\/local\/share\/doc\/statusengine-worker\/(.+)$/.exec(doc)?.[1];
      assert.ok(file !== undefined, `${name}: ${doc}`);
      read(`docs/${file}`);
    }
  }
});

// Without WatchdogSec= a worker whose event loop hung stayed "active (running)" for ever. The
// keep-alives come from systemd-notify, another PID: they need NotifyAccess=all as READY=1 does.
Deno.test("packaging: the worker unit asks for a watchdog of 60 s", () => {
  const unit = parseUnit(read("packaging/systemd/statusengine-worker.service"));
  assert.deepEqual(value(unit, "Service", "WatchdogSec"), ["60s"]);
  assert.deepEqual(value(unit, "Service", "NotifyAccess"), ["all"]);
  assert.deepEqual(
    value(unit, "Service", "Restart"),
    ["always"],
    "a hang is followed by a restart",
  );
});

/** `[Section]`s and `Key=value` lines of a unit file, comments and blanks left out. */
function parseUnit(text: string): Map<string, [string, string][]> {
  const sections = new Map<string, [string, string][]>();
  let current: [string, string][] | undefined;
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const section = /^\[([A-Za-z]+)\]$/.exec(line);
    if (section !== null) {
      current = [];
      sections.set(section[1] ?? "", current);
      continue;
    }
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    assert.ok(kv !== null && current !== undefined, `line ${i + 1}: ${raw}`);
    current.push([kv[1] ?? "", kv[2] ?? ""]);
  }
  return sections;
}

function value(sections: Map<string, [string, string][]>, section: string, key: string) {
  return sections.get(section)?.filter(([k]) => k === key).map(([, v]) => v) ?? [];
}

// At a host's shutdown systemd stops units in the reverse order of After=: a broker the worker is
// not ordered after stops while the worker still drains, its acknowledgements fail and what it
// committed is redelivered (duplicates in the keyless tables).
Deno.test("packaging: the worker unit is ordered after MySQL and both brokers' units as the distributions name them", () => {
  const unit = parseUnit(read("packaging/systemd/statusengine-worker.service"));
  const after = value(unit, "Unit", "After").flatMap((v) => v.split(/\s+/));
  for (const name of ["mariadb.service", "gearman-job-server.service", "rabbitmq-server.service"]) {
    assert.ok(after.includes(name), `After= lacks ${name}: ${after.join(" ")}`);
    // tools/dev_env.sh installs the three from Debian's packages: the names are theirs.
    assert.ok(Deno.statSync(`/lib/systemd/system/${name}`).isFile, name);
  }
  assert.deepEqual(value(unit, "Unit", "Requires"), [], "their restarts must not stop the worker");
});

// The timer keeps running `cleanup` daily (partition maintenance joins the same command), and the
// service it starts must exist under that name, run as the worker's user and read the same files.
Deno.test("packaging: the cleanup timer starts the cleanup service, which runs cleanup as the worker's user", () => {
  const worker = parseUnit(read("packaging/systemd/statusengine-worker.service"));
  const service = parseUnit(read("packaging/systemd/statusengine-db-cleanup.service"));
  const timer = parseUnit(read("packaging/systemd/statusengine-db-cleanup.timer"));
  assert.deepEqual(value(timer, "Timer", "Unit"), ["statusengine-db-cleanup.service"]);
  assert.deepEqual(value(timer, "Timer", "OnCalendar"), ["daily"]);
  assert.deepEqual(value(timer, "Install", "WantedBy"), ["timers.target"]);
  assert.equal(service.has("Install"), false, "started by the timer only");
  assert.deepEqual(value(service, "Service", "Type"), ["oneshot"]);
  for (const key of ["User", "Group", "StateDirectory", "WorkingDirectory"]) {
    assert.deepEqual(value(service, "Service", key), value(worker, "Service", key), key);
  }
  // cleanup also needs ALTER and DROP: an optional cleanup.env, read after worker.env (systemd:
  // the later file's variable wins), may give it an account of its own. The docs say so.
  assert.deepEqual(value(service, "Service", "EnvironmentFile"), [
    ...value(worker, "Service", "EnvironmentFile"),
    "-/etc/statusengine/cleanup.env",
  ]);
  for (const page of ["README.md", "docs/retention.md"]) {
    assert.match(read(page), /ALTER, DROP/, page);
    assert.match(read(page), /\/etc\/statusengine\/cleanup\.env/, page);
  }
  const [exec] = value(service, "Service", "ExecStart");
  const [workerExec] = value(worker, "Service", "ExecStart");
  assert.match(exec ?? "", /^(\S+) cleanup --config (\S+)$/);
  assert.equal(exec?.split(" ")[0], workerExec?.split(" ")[0], "the same binary");
  assert.equal(exec?.split(" ").at(-1), workerExec?.split(" ").at(-1), "the same config file");
});

// Exit 75 is "another cleanup holds the database's lock, this run did nothing": no failure of the
// unit. A oneshot has no start timeout by default, so a run that hangs (a stuck statement holding
// the lock) would keep the unit activating for ever, and the timer, finding it active, would never
// start another: retention stops and nothing fails. A bounded run fails the unit instead.
Deno.test("packaging: the cleanup unit counts exit 75 (another run holds the lock) as success, and fails a run stuck for most of a day instead of waiting for ever", async () => {
  const service = parseUnit(read("packaging/systemd/statusengine-db-cleanup.service"));
  const success = value(service, "Service", "SuccessExitStatus").flatMap((v) => v.split(/\s+/));
  assert.ok(success.includes("75"), `SuccessExitStatus=${success.join(" ")} lacks 75`);
  assert.match(read("src/cli/cleanup.ts"), /const CLEANUP_RUNNING_EXIT = 75;/);
  const [timeout] = value(service, "Service", "TimeoutStartSec");
  assert.ok(timeout !== undefined, "TimeoutStartSec is unset: systemd never fails a hung oneshot");
  // systemd's own parser, as it will read the value.
  const r = await tool("systemd-analyze", ["timespan", timeout]);
  assert.equal(r.code, 0, r.output);
  const usec = Number(/μs: (\d+)/.exec(r.output)?.[1]);
  const hours = usec / 3_600_000_000;
  // Failed before the next daily run is due, yet long enough for a first run on an old database.
  assert.ok(hours >= 6 && hours < 24, `TimeoutStartSec=${timeout} (${hours} h)`);
  assert.deepEqual(
    value(
      parseUnit(read("packaging/systemd/statusengine-db-cleanup.timer")),
      "Timer",
      "OnCalendar",
    ),
    ["daily"],
  );
  for (const page of ["docs/operations.md", "docs/running.md"]) {
    assert.match(read(page), /SuccessExitStatus=75/, page);
    assert.match(read(page), new RegExp(`TimeoutStartSec=${timeout}`), page);
  }
});

async function tool(name: string, args: string[]): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command(name, { args, stdout: "piped", stderr: "piped" }).output();
  const decoder = new TextDecoder();
  return { code: out.code, output: decoder.decode(out.stdout) + decoder.decode(out.stderr) };
}

function installed(name: string): boolean {
  for (const dir of (Deno.env.get("PATH") ?? "/usr/bin:/bin").split(":")) {
    try {
      Deno.statSync(`${dir}/${name}`);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

Deno.test("packaging: the units parse, and systemd-analyze verify accepts them", async () => {
  for (const name of UNITS) parseUnit(read(`packaging/systemd/${name}`));
  // tools/dev_env.sh installs systemd's tools: a machine without them fails here, never skips.
  assert.ok(installed("systemd-analyze"), "systemd-analyze is missing: run tools/dev_env.sh");
  const dir = await Deno.makeTempDir({ prefix: "se-units-" });
  try {
    // verify insists that ExecStart's binary exists: a stand-in at a path of the test's own.
    const binary = `${dir}/statusengine-worker`;
    await Deno.writeTextFile(binary, "#!/bin/sh\n", { mode: 0o755 });
    for (const name of UNITS) {
      await Deno.writeTextFile(
        `${dir}/${name}`,
        read(`packaging/systemd/${name}`).replaceAll("/usr/local/bin/statusengine-worker", binary),
      );
    }
    const r = await tool("systemd-analyze", [
      "verify",
      "--man=no",
      ...UNITS.map((n) => `${dir}/${n}`),
    ]);
    assert.equal(r.code, 0, r.output);
    // Unknown keys and unparsable values are warnings only; any line naming our files fails.
    const ours = r.output.split("\n").filter((l) => UNITS.some((n) => l.includes(n)));
    assert.deepEqual(ours, [], r.output);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The README tells people to rotate the dead-letter file with logrotate; the snippet is shipped.
Deno.test("packaging: logrotate -d accepts the dead-letter snippet and would rotate the default file", async () => {
  const snippet = read("packaging/logrotate.d/statusengine-worker");
  const { settings } = await loadSettings("run", { argv: [], env: {} });
  assert.ok(snippet.includes(`${settings.deadLetterFile} {`), "names the default dead-letter file");
  // The example config once set a path of its own that the snippet did not rotate: a file that
  // grew without bound. Whatever the unit runs with (default or example) is the rotated path.
  const example = await loadSettings("run", {
    argv: ["--config", new URL("packaging/config.example.yml", root).pathname],
    env: {},
  });
  const rotated = [...snippet.matchAll(/^(\/\S+) \{$/gm)].map((m) => m[1]);
  for (const path of [settings.deadLetterFile, example.settings.deadLetterFile]) {
    assert.ok(
      rotated.some((glob) => globToRegExp(glob ?? "").test(path)),
      `${path} is rotated by the snippet (${rotated.join(", ")})`,
    );
  }
  const dir = await Deno.makeTempDir({ prefix: "se-logrotate-" });
  try {
    // The service user does not exist on a test machine: the test runs as itself, on a copy of
    // the file in a directory of its own.
    const user = (await tool("id", ["-un"])).output.trim();
    const group = (await tool("id", ["-gn"])).output.trim();
    const file = `${dir}/statusengine-dead-letters.ndjson`;
    await Deno.writeTextFile(file, "{}\n");
    await Deno.writeTextFile(
      `${dir}/logrotate.conf`,
      snippet.replace(settings.deadLetterFile, file)
        .replace("su statusengine statusengine", `su ${user} ${group}`),
      { mode: 0o644 },
    );
    const r = await tool("logrotate", ["-d", "-f", "-s", `${dir}/state`, `${dir}/logrotate.conf`]);
    assert.equal(r.code, 0, r.output);
    assert.doesNotMatch(r.output, /^error:/m, r.output);
    assert.match(r.output, /rotating log .*statusengine-dead-letters\.ndjson/, r.output);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The worker unit's comment once said logrotate's postrotate reloads the worker; the snippet has
// no postrotate and says no signal is needed. The snippet is the source.
Deno.test("packaging: the unit's comments mention a postrotate only when the logrotate snippet has one", () => {
  const snippet = read("packaging/logrotate.d/statusengine-worker");
  const unit = read("packaging/systemd/statusengine-worker.service");
  const hasPostrotate = /^\s*postrotate$/m.test(snippet);
  const comments = unit.split("\n").filter((l) => l.startsWith("#")).join("\n");
  assert.equal(/postrotate/.test(comments), hasPostrotate, comments.match(/.*postrotate.*/)?.[0]);
});

/** A logrotate path pattern (shell glob: `*` and `?` within one path segment) as a RegExp. */
function globToRegExp(glob: string): RegExp {
  const body = glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(
    /\?/g,
    "[^/]",
  );
  return new RegExp(`^${body}$`);
}

// docs/operations.md once showed a logrotate stanza of its own that differed from the shipped one.
Deno.test("packaging: every logrotate stanza quoted in the docs is the shipped snippet, verbatim", () => {
  const snippet = read("packaging/logrotate.d/statusengine-worker");
  const pages = [
    "README.md",
    ...[...Deno.readDirSync(new URL("docs/", root))].map((e) => `docs/${e.name}`),
  ]
    .filter((p) => p.endsWith(".md"));
  const quoted: string[] = [];
  for (const page of pages) {
    for (const m of read(page).matchAll(/^```[a-z]*\n([\s\S]*?)^```$/gm)) {
      const block = m[1] ?? "";
      // A stanza: a path followed by "{" on a line of its own.
      if (/^\/\S+ \{$/m.test(block) && /\b(rotate|weekly|daily|compress)\b/.test(block)) {
        quoted.push(page);
        assert.equal(block, snippet, `${page} quotes the logrotate snippet as shipped`);
      }
    }
  }
  assert.ok(quoted.includes("docs/operations.md"), `quoted in: ${quoted.join(", ")}`);
});

Deno.test("packaging: the sysusers.d snippet creates the units' user", async () => {
  const snippet = read("packaging/sysusers.d/statusengine-worker.conf");
  const unit = parseUnit(read("packaging/systemd/statusengine-worker.service"));
  const [user] = value(unit, "Service", "User");
  assert.match(snippet, new RegExp(`^u ${user} - `, "m"));
  assert.ok(installed("systemd-sysusers"), "systemd-sysusers is missing: run tools/dev_env.sh");
  const path = new URL("packaging/sysusers.d/statusengine-worker.conf", root).pathname;
  const r = await tool("systemd-sysusers", ["--dry-run", path]);
  assert.equal(r.code, 0, r.output);
});
