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
 * - `--allow-write=<state dir>`: the dead-letter file, and creating the state directory.
 * - `--allow-run=systemd-notify`: readiness for the unit's `Type=notify` and its watchdog
 *   keep-alives (src/daemon/notify.ts).
 *
 * The state directory defaults to the packaging layout (/var/lib/statusengine-worker, the
 * unit's StateDirectory and WorkingDirectory) and can be changed with STATUSENGINE_STATE_DIR
 * at build time.
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
 * The permission flags embedded in the binary: the one list `deno compile` gets and the
 * tests run `main.ts` under, so the two cannot drift.
 *
 * @param stateDir The only directory the worker may write (default {@link DEFAULT_STATE_DIR}).
 * @returns Flags for `deno compile` or `deno run`.
 */
export function permissionFlags(stateDir: string = DEFAULT_STATE_DIR): string[] {
  return [
    "--allow-net",
    "--allow-env",
    "--allow-read",
    `--allow-write=${stateDir}`,
    `--allow-run=${NOTIFY_COMMAND}`,
  ];
}

if (import.meta.main) {
  const stateDir = Deno.env.get("STATUSENGINE_STATE_DIR") ?? DEFAULT_STATE_DIR;
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
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "compile",
        "--no-prompt",
        // Under ProtectSystem=strict with no home directory nothing may need a
        // writable cache at run time (docs/operations.md#compiled-binary).
        "--no-code-cache",
        `--v8-flags=${V8_FLAGS.join(",")}`,
        ...permissionFlags(stateDir),
        "--output",
        "dist/statusengine-worker",
        "main.ts",
      ],
      stdout: "inherit",
      stderr: "inherit",
    }).output();
    code = out.code;
  } finally {
    await Deno.writeTextFile(BUILD_INFO, original);
  }
  Deno.exit(code);
}
