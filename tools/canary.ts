/**
 * `deno task canary`: the writer and encoder tests against the newest mysql2 3.x instead of
 * the version deno.json pins, before moving the pin (docs/toolchain.md#upgrading-mysql2). Not
 * part of CI: its result depends on what npm published today.
 *
 * It writes a copy of deno.json whose `mysql2` imports point at `npm:mysql2@3`, refreshes
 * npm's metadata for mysql2, names the version it resolved, and runs {@link CANARY_TESTS}
 * with that configuration and without the lock file (which stays untouched).
 *
 *   deno task canary [--version 3]   (any npm range of mysql2; default 3)
 *
 * @module
 */

/** The tests that cover every use of mysql2's internals and the writers on top of them. */
export const CANARY_TESTS = [
  "tests/mysql/execute_packet_test.ts",
  "tests/mysql/statement_metadata_test.ts",
  "tests/mysql/executor_test.ts",
  "tests/mysql/deno_socket_test.ts",
  "tests/mysql/writer_test.ts",
  "tests/mysql/sql_mode_test.ts",
  "tests/cleanup_test.ts",
] as const;

/**
 * The project's deno.json with the mysql2 imports moved to `range` and the lock file off.
 *
 * @param config The parsed deno.json.
 * @param range An npm version range of mysql2.
 * @returns The configuration to test with.
 */
export function canaryConfig(
  config: { imports?: Record<string, string> } & Record<string, unknown>,
  range: string,
): Record<string, unknown> {
  const imports: Record<string, string> = {};
  for (const [name, target] of Object.entries(config.imports ?? {})) {
    imports[name] = target.replace(/^npm:mysql2@[^/]+/, `npm:mysql2@${range}`);
  }
  const { lock: _lock, ...rest } = config;
  return { ...rest, imports, lock: false };
}

async function deno(args: string[], options: { stdout?: "piped" | "inherit" } = {}) {
  return await new Deno.Command(Deno.execPath(), {
    args,
    stdout: options.stdout ?? "inherit",
    stderr: "inherit",
  }).output();
}

if (import.meta.main) {
  const at = Deno.args.indexOf("--version");
  const range = at === -1 ? "3" : Deno.args[at + 1] ?? "3";
  const root = new URL("../", import.meta.url);
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", root)));
  // Next to deno.json, so that every relative path in it means the same; tmp/ is ignored.
  const dir = new URL("tmp/", root);
  await Deno.mkdir(dir, { recursive: true });
  const path = new URL("canary.deno.json", dir).pathname;
  await Deno.writeTextFile(path, JSON.stringify(canaryConfig(config, range), null, 2));
  const rootPath = new URL(".", root).pathname;
  Deno.chdir(rootPath);
  const info = await deno([
    "info",
    "--json",
    "--no-lock",
    "--reload=npm:mysql2",
    "--config",
    path,
    `npm:mysql2@${range}`,
  ], { stdout: "piped" });
  const packages = Object.keys(
    (JSON.parse(new TextDecoder().decode(info.stdout)) as { npmPackages?: object })
      .npmPackages ?? {},
  );
  const resolved = packages.find((p) => p.startsWith("mysql2@"))?.replace(/_.*/, "") ??
    "unknown";
  const pinned = String(config.imports?.mysql2 ?? "").replace(/^npm:/, "");
  Deno.stdout.writeSync(
    new TextEncoder().encode(`canary: ${resolved} (pinned: ${pinned})\n`),
  );
  const result = await deno([
    "test",
    "--allow-all",
    "--no-lock",
    "--config",
    path,
    ...CANARY_TESTS,
  ]);
  Deno.stdout.writeSync(
    new TextEncoder().encode(
      result.success
        ? `canary: ${resolved} passes the writer and encoder tests; the pin may move to it\n`
        : `canary: ${resolved} FAILS; see src/mysql/mysql2_internals.ts before moving the pin\n`,
    ),
  );
  Deno.exit(result.success ? 0 : 1);
}
