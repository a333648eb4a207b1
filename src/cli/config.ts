/**
 * The `config` command, `config [--json] [command] [flags of that command]` (command default
 * `run`): the settings that command would use, each with its value and source, secrets masked,
 * plus its warnings. It refuses (exit 1) where the command would refuse to start, so it can
 * check a configuration before a restart.
 *
 * @module
 */
import {
  COMMAND_NAMES,
  type CommandName,
  ConfigError,
  defaultOf,
  flagText,
  type LoadResult,
  loadSettings,
  parseCommandLine,
  PROGRAM_NAME as PROGRAM,
  rowsFor,
  settingKeyOf,
  type SettingRow,
  type SettingsFor,
  type SourceKind,
} from "../config/mod.ts";
import { hasCode, WorkerError } from "../util/errors.ts";
import { errorMessage } from "../log.ts";
import type { Io } from "./io.ts";
import { workerConfigFrom } from "./run.ts";

/**
 * One setting as `config --json` prints it: values in flag syntax (30s, 64MiB, a,b), secrets
 * masked; `source` `flag --x`, `env NAME`, `file PATH key K`, `default` or `none`; `origin`
 * `legacy` for a translated PHP config.yml key or SE_* variable.
 */
interface ConfigEntry {
  readonly value: string | null;
  readonly source: string;
  readonly origin: SourceKind;
  readonly default: string | null;
  readonly secret: boolean;
}

/**
 * What `config --json` prints: `settings` by flag name in help order (absent when the command
 * line or a value was refused), `error` why the command would refuse to start.
 */
interface ConfigDocument {
  readonly command: CommandName;
  readonly settings?: Record<string, ConfigEntry>;
  readonly warnings: string[];
  readonly error?: string;
}

/** `json` or `no-json` for config's own flags (`--json`, `-json=false`, `--no-json`). */
function ownFlagName(arg: string): string | undefined {
  const name = /^--?([a-z-]+)(?:=.*)?$/.exec(arg)?.[1];
  return name === "json" || name === "no-json" ? name : undefined;
}

/**
 * Split off config's own flags, also those after the command (`config run --json` is
 * `config --json run`): left in the command's line they would be refused by a command without
 * such a flag. A command that takes the flag itself (`status --json`) keeps it too, so the
 * settings shown stay those of the line as written. Nothing after `--` is a flag.
 */
function splitArgs(argv: readonly string[]) {
  let i = 0;
  while (i < argv.length && ownFlagName(argv[i] ?? "") !== undefined) i++;
  const own = argv.slice(0, i);
  let command: CommandName = "run";
  const next = argv[i];
  if (next !== undefined && !next.startsWith("-")) {
    // Same message (and suggestion) as for the command line itself.
    if (!(COMMAND_NAMES as readonly string[]).includes(next)) parseCommandLine([next]);
    if (next === "config") {
      const hint = `config shows the settings of another command: see "${PROGRAM} config --help"`;
      throw new WorkerError("usage", hint);
    }
    command = next as CommandName;
    i++;
  }
  const rest = argv.slice(i);
  const end = rest.includes("--") ? rest.indexOf("--") : rest.length;
  const taken = new Set(rowsFor(command).map((row) => row.flag));
  const theirs: string[] = [];
  rest.forEach((arg, n) => {
    const name = n < end ? ownFlagName(arg) : undefined;
    if (name !== undefined) own.push(arg);
    if (name === undefined || taken.has(name.replace(/^no-/, ""))) theirs.push(arg);
  });
  return { own, command, rest: theirs };
}

function defaultText(row: SettingRow, command: CommandName): string | null {
  const fallback = defaultOf(row, command);
  if (fallback === undefined) return null;
  return fallback === "" ? "" : (row.secret === true ? flagText(row, fallback) : fallback);
}

function entries(
  command: CommandName,
  loaded: LoadResult<CommandName>,
): Record<string, ConfigEntry> {
  const settings = loaded.settings as Record<string, unknown>;
  const out: Record<string, ConfigEntry> = {};
  for (const row of rowsFor(command)) {
    // Input-only rows (mysql-dsn, metrics-listen-addr) have no value of their own; when used
    // they are named as the source of the settings they feed.
    if (row.feeds !== undefined) continue;
    const key = settingKeyOf(row);
    const value = settings[key];
    const { kind, text } = loaded.sources[key] ?? { kind: "none", text: "none" };
    out[row.flag] = {
      value: value === undefined ? null : flagText(row, value),
      source: kind === "legacy" ? `${text} (legacy key)` : text,
      origin: kind,
      default: defaultText(row, command),
      secret: row.secret === true,
    };
  }
  return out;
}

/** What `run` refuses after its settings were accepted (no queue left, an unwritable command file). */
function refusal(command: CommandName, settings: unknown): string | undefined {
  if (command !== "run") return undefined;
  try {
    workerConfigFrom(settings as SettingsFor<"run">);
    return undefined;
  } catch (err: unknown) {
    if (hasCode(err, "startup")) return err.message;
    throw err;
  }
}

function quoted(text: string): string {
  return text === "" || /\s|"/.test(text) ? JSON.stringify(text) : text;
}

function printText(document: ConfigDocument, io: Io): void {
  const settings = document.settings ?? {};
  const names = Object.keys(settings);
  if (names.length === 0) {
    io.out(`${document.command} has no settings`);
    return;
  }
  const width = Math.max(...names.map((n) => n.length));
  for (const [name, entry] of Object.entries(settings)) {
    const value = entry.value === null ? "(none)" : quoted(entry.value);
    io.out(`${name.padEnd(width)}  ${value}  (${entry.source})`);
  }
}

/** Run `config`: exit 0, 1 where the command would refuse to start, 2 for a bad command line. */
export async function runConfigCommand(
  argv: readonly string[],
  env: Readonly<Record<string, string>>,
  io: Io,
): Promise<number> {
  let split: ReturnType<typeof splitArgs>;
  let json: boolean;
  const print = (document: ConfigDocument) => io.out(JSON.stringify(document, null, 2));
  try {
    split = splitArgs(argv);
    json = (await loadSettings("config", { argv: split.own, env })).settings.json;
  } catch (err: unknown) {
    return reportConfigError(err, io);
  }
  let loaded: LoadResult<CommandName>;
  try {
    loaded = await loadSettings(split.command, { argv: split.rest, env });
  } catch (err: unknown) {
    const code = reportConfigError(err, io);
    if (json) print({ command: split.command, warnings: [], error: errorMessage(err) });
    return code;
  }
  const refused = refusal(split.command, loaded.settings);
  const document: ConfigDocument = {
    command: split.command,
    settings: entries(split.command, loaded),
    warnings: loaded.warnings,
    ...(refused === undefined ? {} : { error: refused }),
  };
  for (const warning of loaded.warnings) io.err(`${PROGRAM}: warning: ${warning}`);
  if (json) print(document);
  else printText(document, io);
  if (refused !== undefined) {
    io.err(`${PROGRAM}: ${refused}`);
    return 1;
  }
  return 0;
}

/**
 * Print a configuration or usage error (never a secret); its exit code is 2 for a bad command
 * line, 1 for a refused setting. Any other error is rethrown.
 */
export function reportConfigError(err: unknown, io: Io): number {
  if (hasCode(err, "usage") || err instanceof ConfigError) {
    io.err(`${PROGRAM}: ${err.message}`);
    return err instanceof ConfigError ? err.exitCode : 2;
  }
  throw err;
}
