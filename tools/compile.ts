/**
 * `deno task compile`: build the single executable `dist/statusengine-worker`
 * with the build identity stamped in and the narrowest permissions the
 * worker needs embedded (not -A):
 *
 * - `--allow-net`: gearmand or RabbitMQ, MySQL, Carbon, and the listeners of
 *   /metrics, /ws and /commands;
 * - `--allow-env`: `STATUSENGINE_*` settings (the settings loader reads the environment);
 * - `--allow-read`: the settings file named by `--config`, wherever it is (a migrating PHP
 *   user's /opt/statusengine/worker/etc/config.yml), and the dead-letter file. A compiled
 *   binary cannot be given `--allow-read` at run time, so a list of directories fixed at
 *   build time would refuse every other location; reading stays bounded by the service
 *   user's file permissions and the unit's ProtectSystem=/ProtectHome=
 *   (docs/operations.md#compiled-permissions);
 * - `--allow-write=<state dir>,<command files>`: the dead-letter file, and creating the state
 *   directory; and exactly the monitoring cores' usual external command files, so the task
 *   queue's `submit_method: cmd` (the PHP worker's example config) works with the binary as
 *   built. A file (not a directory) grants that one path only.
 *   The distributions' MySQL/MariaDB Unix sockets too: Deno connects to a Unix socket only with
 *   write permission on its path (`?socketPath=` in `--mysql-url`, the Go DSN's `unix(...)`).
 * - `--allow-run=systemd-notify`: readiness for the unit's `Type=notify` and its watchdog
 *   keep-alives (src/daemon/notify.ts).
 *
 * The state directory defaults to the packaging layout (/var/lib/statusengine-worker, the
 * unit's StateDirectory and WorkingDirectory) and can be changed with STATUSENGINE_STATE_DIR
 * at build time; STATUSENGINE_COMMAND_FILES (comma-separated paths) replaces the list of
 * command files, STATUSENGINE_MYSQL_SOCKETS that of the MySQL sockets.
 * `deno compile` downloads its runtime the first time, so it needs network
 * access to dl.deno.land.
 *
 * @module
 */

import { NOTIFY_COMMAND } from "../src/daemon/notify.ts";

const BUILD_INFO = new URL("../src/build_info.ts", import.meta.url);

async function git(args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("git", { args, stdout: "piped", stderr: "null" }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : undefined;
  } catch {
    return undefined;
  }
}

/**
 * V8 flags embedded in the binary.
 *
 * The young generation holds what one job and one bulk INSERT leave behind
 * (the parsed JSON, the rows, the statement's values) until it dies. With
 * 4 MB semi-spaces, while mysql2 still encoded the statements (about 5 KB per
 * row), most of that was promoted to the old generation and garbage
 * collection took a quarter of the worker's CPU; 16 MB stopped it. Since the
 * worker encodes its statements itself (src/mysql/execute_packet.ts), 8 MB
 * costs no more CPU than 16 MB and each semi-space it does not commit is
 * resident memory saved: bench/pipeline.ts side by side with 16 MB, peak RSS
 * 10–20 MB lower in every case (servicestatus at batch 700 from RabbitMQ
 * 177–187 against 203–212 MB before), worker CPU per event within ±10 % in
 * the medians, in both directions; bench/memory.ts (1,000,000 events):
 * 137 → 121 MB.
 *
 * An old-space limit just below 2 GB caps how far V8 lets the old generation
 * grow between full collections at about twice the live heap; at 2 GB and
 * above (V8's default here is 4.4 GB) it allows four times, which is where the
 * resident set of a drain at batch 700 went. 2 GB is ten times the resident
 * set the worker needs; payloads in flight are bounded by
 * `--max-in-flight-bytes` (256 MiB) long before. A lower limit would cap the
 * heap's growth further but would make a few jobs of tens of MiB (which
 * bench/large_jobs.ts holds at 1.5 GB RSS) run out of heap.
 */
export const V8_FLAGS: readonly string[] = [
  "--max-semi-space-size=8",
  "--max-old-space-size=2000",
];

/** The state directory of the packaging layout (the unit's StateDirectory). */
export const DEFAULT_STATE_DIR = "/var/lib/statusengine-worker";

/**
 * The external command files of the usual monitoring core installations, which the binary
 * may write (docs/operations.md#compiled-permissions). A compiled binary cannot be given more
 * at run time, and a worker that may not write the command file would fail every task the UI
 * writes: the setting's default (Naemon under /opt/naemon, the PHP worker's example config)
 * first, then the packaged cores' own defaults.
 */
export const DEFAULT_COMMAND_FILES: readonly string[] = [
  "/opt/naemon/var/naemon.cmd",
  // Naemon's distribution packages.
  "/var/lib/naemon/naemon.cmd",
  // openITCOCKPIT's Naemon.
  "/opt/openitc/nagios/var/rw/nagios.cmd",
  // Nagios built from source, Debian's nagios4, and the RHEL/Fedora package.
  "/usr/local/nagios/var/rw/nagios.cmd",
  "/var/lib/nagios4/rw/nagios.cmd",
  "/var/spool/nagios/cmd/nagios.cmd",
];

/**
 * The Unix sockets of the usual MySQL/MariaDB packages, which the binary may connect to
 * (docs/operations.md#mysql-sockets): without write permission on its path Deno refuses to connect
 * to a socket, and a compiled binary cannot be given more at run time.
 */
export const DEFAULT_MYSQL_SOCKETS: readonly string[] = [
  // Debian and Ubuntu (MariaDB and MySQL); /var/run is a link to /run there.
  "/run/mysqld/mysqld.sock",
  "/var/run/mysqld/mysqld.sock",
  // RHEL, Fedora, SUSE.
  "/var/lib/mysql/mysql.sock",
];

/**
 * The permission flags embedded in the binary: the one list `deno compile` gets and the
 * tests run `main.ts` under, so the two cannot drift.
 *
 * @param stateDir The only directory the worker may write (default {@link DEFAULT_STATE_DIR}).
 * @param commandFiles The external command files it may write besides (default
 *   {@link DEFAULT_COMMAND_FILES}).
 * @param mysqlSockets The MySQL Unix sockets it may connect to (default
 *   {@link DEFAULT_MYSQL_SOCKETS}).
 * @returns Flags for `deno compile` or `deno run`.
 */
export function permissionFlags(
  stateDir: string = DEFAULT_STATE_DIR,
  commandFiles: readonly string[] = DEFAULT_COMMAND_FILES,
  mysqlSockets: readonly string[] = DEFAULT_MYSQL_SOCKETS,
): string[] {
  return [
    "--allow-net",
    "--allow-env",
    "--allow-read",
    `--allow-write=${[stateDir, ...commandFiles, ...mysqlSockets].join(",")}`,
    `--allow-run=${NOTIFY_COMMAND}`,
  ];
}

/**
 * Why `deno compile` failed, in one paragraph, when it could not get its runtime: its own
 * message is a Rust error chain with a backtrace that names neither the cause a builder can
 * fix nor the way around it.
 *
 * @param stderr What `deno compile` wrote to stderr.
 * @param denortBin The DENORT_BIN of the build, if set.
 * @returns The explanation, or undefined for any other failure (shown as it is).
 */
function runtimeDownloadFailure(
  stderr: string,
  denortBin: string | undefined,
): string | undefined {
  // deno colours its output even into a pipe.
  // deno-lint-ignore no-control-regex
  const plain = stderr.replace(/\x1b\[[0-9;]*m/g, "");
  if (denortBin !== undefined && /Could not find denort at/.test(plain)) {
    return `deno task compile: failed: deno compile could not read its runtime from ` +
      `DENORT_BIN=${denortBin}. Point DENORT_BIN at the unpacked denort binary of Deno ` +
      `${Deno.version.deno} for ${Deno.build.target}, or unset it to have deno compile download it.`;
  }
  if (!/Setting up base binary/.test(plain)) return undefined;
  const url = /https:\/\/dl\.deno\.land\/\S+?\.zip/.exec(plain)?.[0] ??
    `https://dl.deno.land/release/v${Deno.version.deno}/denort-${Deno.build.target}.zip`;
  const cause = /(dns error|Connection refused|timed out|certificate)[^\n]*/i.exec(plain)?.[0];
  return `deno task compile: failed: deno compile could not download its runtime ` +
    `(${url}${cause === undefined ? "" : `: ${cause}`}). It downloads it once per Deno version ` +
    `from dl.deno.land and keeps it in its cache (DENO_DIR), so the build needs that host ` +
    `reachable the first time: build where it is (an HTTPS_PROXY is honoured), or fetch that ` +
    `zip elsewhere, unpack it and run DENORT_BIN=/path/to/denort deno task compile. ` +
    `No new binary was written.`;
}

/**
 * The paths of a comma-separated build-time list (STATUSENGINE_COMMAND_FILES,
 * STATUSENGINE_MYSQL_SOCKETS), else the defaults.
 */
function pathsOf(value: string | undefined, defaults: readonly string[]): readonly string[] {
  if (value === undefined) return defaults;
  return value.split(",").map((p) => p.trim()).filter((p) => p !== "");
}

if (import.meta.main) {
  const stateDir = Deno.env.get("STATUSENGINE_STATE_DIR") ?? DEFAULT_STATE_DIR;
  const commandFiles = pathsOf(Deno.env.get("STATUSENGINE_COMMAND_FILES"), DEFAULT_COMMAND_FILES);
  const mysqlSockets = pathsOf(Deno.env.get("STATUSENGINE_MYSQL_SOCKETS"), DEFAULT_MYSQL_SOCKETS);
  const dirty = (await git(["status", "--porcelain"]))?.length ? "-dirty" : "";
  const version = (await git(["describe", "--tags", "--always", "--dirty"])) ?? "dev";
  const commit = ((await git(["rev-parse", "--short=12", "HEAD"])) ?? "unknown") + dirty;
  const date = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const original = await Deno.readTextFile(BUILD_INFO);
  const stamped = original
    .replace(/version: "[^"]*"/, `version: ${JSON.stringify(version)}`)
    .replace(/commit: "[^"]*"/, `commit: ${JSON.stringify(commit)}`)
    .replace(/date: "[^"]*"/, `date: ${JSON.stringify(date)}`);
  await Deno.writeTextFile(BUILD_INFO, stamped);
  let code = 1;
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "compile",
        "--no-prompt",
        // Under ProtectSystem=strict with no home directory nothing may need a
        // writable cache at run time (docs/operations.md#compiled-binary).
        "--no-code-cache",
        `--v8-flags=${V8_FLAGS.join(",")}`,
        ...permissionFlags(stateDir, commandFiles, mysqlSockets),
        "--output",
        "dist/statusengine-worker",
        "main.ts",
      ],
      stdout: "inherit",
      stderr: "piped",
    }).spawn();
    const stderr = await relayUntilError(child.stderr);
    code = (await child.status).code;
    const explained = code === 0
      ? undefined
      : runtimeDownloadFailure(stderr, Deno.env.get("DENORT_BIN"));
    await writeStderr(explained === undefined ? stderr : `${explained}\n`);
  } finally {
    await Deno.writeTextFile(BUILD_INFO, original);
  }
  Deno.exit(code === 0 ? 0 : 1);
}

/**
 * Pass `deno compile`'s progress lines through as they come, and hold back everything from its
 * first `error` line on, so a failure can be explained instead of shown as a backtrace.
 */
async function relayUntilError(stream: ReadableStream<Uint8Array>): Promise<string> {
  let held = "";
  let pending = "";
  let failing = false;
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    pending += chunk;
    let newline: number;
    while (!failing && (newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline + 1);
      // deno-lint-ignore no-control-regex
      if (/^(\x1b\[[0-9;]*m)*error/.test(line)) {
        failing = true;
        break;
      }
      pending = pending.slice(newline + 1);
      await writeStderr(line);
    }
    if (failing) {
      held += pending;
      pending = "";
    }
  }
  return held + pending;
}

/** All of `text` to stderr (one write may take only part of it). */
async function writeStderr(text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  for (let written = 0; written < bytes.length;) {
    written += await Deno.stderr.write(bytes.subarray(written));
  }
}
