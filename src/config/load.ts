/**
 * Command line, environment and YAML file → typed settings, in the order of
 * docs/operations.md#startup. Each setting takes the first of flag > env > file > default, but
 * every value given in any source is parsed and validated, so a typo cannot hide behind an
 * override.
 *
 * @module
 */

import { parse as parseYaml, YAMLParseError } from "yaml";
import { WorkerError } from "../util/errors.ts";
import { redactUrl } from "../util/redact.ts";
import {
  didYouMean,
  FIXED_SETTINGS,
  fixedSettingWarnings,
  isMapping,
  keysLabel,
  LEGACY_ENV_PATH,
  LEGACY_TRANSLATIONS,
  legacyEnvDocument,
  legacyIgnoredWarnings,
  present,
  RETIRED,
  unknownKeyWarnings,
  valuelessKeys,
  type YamlMapping,
} from "./legacy.ts";
import {
  COMMAND_NAMES,
  type CommandName,
  defaultOf,
  derivedEnvName,
  derivedYamlKey,
  envNameOf,
  envNamesOf,
  PROGRAM_NAME,
  rowsFor,
  SETTING_ROWS,
  settingKeyOf,
  type SettingRow,
  type SettingsFor,
  yamlKeyOf,
} from "./settings.ts";
import {
  acceptedForm,
  ConfigError,
  defaultValue,
  maskRaw,
  metavarOf,
  type Origin,
  parseValue,
} from "./values.ts";

/** Inputs of {@linkcode loadSettings}: `rest` of {@linkcode parseCommandLine}, env, file I/O. */
export interface LoadOptions {
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** Default `Deno.readTextFile`. */
  readonly readTextFile?: (path: string) => Promise<string>;
}

/** Settings, secret-free warnings (never printed here) and each setting's source by key. */
export interface LoadResult<C extends CommandName> {
  readonly settings: SettingsFor<C>;
  readonly warnings: string[];
  readonly sources: Record<string, SettingSource>;
}

/** Where one resolved setting came from; `text` e.g. `file /etc/x.yml key mysql_batch_size`. */
export interface SettingSource {
  readonly kind: SourceKind;
  readonly text: string;
}

/** `legacy`: translated from the PHP worker's config.yml or `SE_*`; `none`: no value at all. */
export type SourceKind = "flag" | "env" | "file" | "legacy" | "default" | "none";

/** The command line split: `run` when no command was named (then `commandGiven` is false). */
export interface CommandLine {
  readonly command: CommandName;
  readonly commandGiven: boolean;
  readonly rest: string[];
  /** `--help`, `-h` or `help [command]` was given. */
  readonly help: boolean;
  readonly version: boolean;
}

function isCommand(name: string): name is CommandName {
  return (COMMAND_NAMES as readonly string[]).includes(name);
}

/** A bad command line (exit status 2), pointing at the help of `command` or the top level. */
function usageError(message: string, command?: CommandName): WorkerError {
  const help = command === undefined ? "--help" : `${command} --help`;
  return new WorkerError("usage", `${message}: see "${PROGRAM_NAME} ${help}"`);
}

function flagIndex(command: CommandName) {
  const index = new Map<string, { readonly row: SettingRow; readonly negated: boolean }>();
  for (const row of rowsFor(command)) {
    for (const name of [row.flag, ...(row.flagAliases ?? [])]) {
      index.set(name, { row, negated: false });
      if (row.kind.type === "boolean") index.set(`no-${name}`, { row, negated: true });
    }
  }
  return index;
}

/** Which commands take the flag, or ` (did you mean --x?)`, or nothing. */
function unknownFlagHint(command: CommandName, name: string, known: Iterable<string>): string {
  const owners = new Set(
    SETTING_ROWS.filter((row) => row.flag === name || (row.flagAliases ?? []).includes(name))
      .flatMap((row) => row.commands),
  );
  if (owners.size === 0) return didYouMean(name, known, "--");
  return ` (a flag of ${[...owners].join(", ")}, not of ${command})`;
}

interface FlagUse {
  readonly row: SettingRow;
  /** As written, for messages: `flag --mysql-dsn`, `flag -nodename`, `argument 1`. */
  readonly source: string;
  readonly value: string;
}

// "--count --help" asks for help rather than for a count called "--help".
function isHelpToken(arg: string | undefined): boolean {
  return /^--?h(elp)?$/.test(arg ?? "");
}

function tokenize(command: CommandName, argv: readonly string[]) {
  const index = flagIndex(command);
  const uses: FlagUse[] = [];
  const problems: WorkerError[] = [];
  const positionals: string[] = [];
  // Former settings given as flags, now constants: warned about, not refused.
  const fixed: string[] = [];
  let help = false;
  let version = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    if (arg === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      positionals.push(arg);
      continue;
    }
    // One or two leading dashes mean the same flag: the Go worker's unit files use -mysql-dsn.
    const body = arg.startsWith("--") ? arg.slice(2) : arg.slice(1);
    const eq = body.indexOf("=");
    const name = eq < 0 ? body : body.slice(0, eq);
    const inline = eq < 0 ? undefined : body.slice(eq + 1);
    if (name === "version" || name === "help" || name === "h") {
      if (name === "version") version = true;
      else help = true;
      continue;
    }
    const entry = index.get(name);
    if (entry === undefined && command === "run" && FIXED_SETTINGS.some((f) => f.flag === name)) {
      // A unit file written for an earlier version still starts; its value is skipped.
      fixed.push(name);
      if (inline === undefined && i + 1 < argv.length && !isHelpToken(argv[i + 1])) i++;
      continue;
    }
    if (entry === undefined) {
      const retired = RETIRED.find((r) => r.flag === name);
      const why = retired === undefined
        ? unknownFlagHint(command, name, index.keys())
        : ` (retired: use --${retired.replacement}; ${retired.reason})`;
      problems.push(usageError(`Unknown flag "${arg}" for command "${command}"${why}`, command));
      continue;
    }
    const spelling = `${arg.startsWith("--") ? "--" : "-"}${name}`;
    let value: string;
    if (entry.row.kind.type === "boolean") {
      if (entry.negated && inline !== undefined) {
        problems.push(usageError(`Flag "${spelling}" takes no value`, command));
        continue;
      }
      value = entry.negated ? "false" : inline ?? "true";
    } else if (inline !== undefined) {
      value = inline;
    } else if (i + 1 < argv.length && !isHelpToken(argv[i + 1])) {
      value = argv[++i] ?? "";
    } else {
      problems.push(usageError(`Flag "${spelling}" needs a value`, command));
      continue;
    }
    if (uses.some((u) => u.row === entry.row && u.source === `flag ${spelling}`)) {
      problems.push(usageError(`Flag "${spelling}" is given more than once`, command));
      continue;
    }
    uses.push({ row: entry.row, source: `flag ${spelling}`, value });
  }
  const positionalRows = rowsFor(command).filter((row) => row.positional === true);
  positionals.forEach((value, n) => {
    const row = positionalRows[n];
    if (row !== undefined) uses.push({ row, source: `argument ${n + 1}`, value });
    else {
      const message = `Unexpected argument ${JSON.stringify(value)} for command "${command}"`;
      problems.push(usageError(message, command));
    }
  });
  return { uses, help, version, problems, fixed };
}

/**
 * Split the command line (`Deno.args`) into command and arguments. The command is the first
 * argument when it names one (`help <command>` too), otherwise `run`, so the Go worker's
 * `statusengine-worker -config x` keeps working. Unknown flags are reported by
 * {@linkcode loadSettings}, so `--help` always works; a first word that is no command throws
 * a `usage` WorkerError.
 */
export function parseCommandLine(argv: readonly string[]): CommandLine {
  const [first, second] = argv;
  // "--help run" means "run --help", as "help run" does.
  const helpWord = first === "help" ||
    (isHelpToken(first) && second !== undefined && isCommand(second));
  const named = helpWord ? second : first?.startsWith("-") === false ? first : undefined;
  if (named !== undefined && !isCommand(named)) {
    throw usageError(`Unknown command "${named}"${didYouMean(named, COMMAND_NAMES)}`);
  }
  const command = named ?? "run";
  const rest = argv.slice(Number(helpWord) + Number(named !== undefined));
  const tokens = tokenize(command, rest);
  return {
    command,
    commandGiven: named !== undefined,
    rest,
    help: helpWord || tokens.help,
    version: tokens.version,
  };
}

/** Whether a problem already lists what is accepted (the names of an enum or a key list). */
function listsAccepted(row: SettingRow, problem: string): boolean {
  const kind = row.kind;
  if (kind.type === "enum") return problem.includes(kind.values.join(", "));
  return kind.type === "keyList" && kind.patternForm !== undefined &&
    problem.includes(kind.patternForm);
}

function invalid(row: SettingRow, source: string, raw: unknown, problem: string): ConfigError {
  const rawValue = maskRaw(row, raw);
  // The twelve queue names once, not twice.
  const accepted = listsAccepted(row, problem) ? "" : `; accepted: ${acceptedForm(row)}`;
  return new ConfigError(
    `Invalid setting ${row.flag} from ${source}: ${problem} (value ${rawValue}${accepted})`,
    { setting: row.flag, source, rawValue },
  );
}

interface Candidate {
  readonly value: unknown;
  readonly source: string;
  readonly notes: readonly string[];
  /** Translated from a legacy key. */
  readonly legacy?: boolean;
  /** The input-only row the value was given for (`mysql-dsn`), when not the setting's own. */
  readonly input?: SettingRow;
}

/** Parse a value of `input`: `target`'s own, or handed to `target` through the input's feed. */
function parseFor(
  target: SettingRow,
  input: SettingRow,
  raw: unknown,
  origin: Origin,
  source: string,
): Candidate {
  const parsed = parseValue(input, raw, origin);
  if (!parsed.ok) throw invalid(input, source, raw, parsed.problem);
  const first = { value: parsed.value, source, notes: parsed.notes ?? [] };
  if (input === target) return first;
  const feed = input.feeds?.find((f) => f.target === target.flag);
  if (feed === undefined) throw new Error(`Setting ${input.flag} does not feed ${target.flag}`);
  const second = parseFor(target, target, feed.derive(String(first.value)), "text", source);
  return { ...second, notes: [...first.notes, ...second.notes], input };
}

// A non-empty key list, password or token, or a URL with a password (a URL without one is not
// secret).
function holdsSecret(row: SettingRow, value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value !== "string") return false;
  return row.kind.type === "string" ? value !== "" : redactUrl(value) !== value;
}

function conflict(row: SettingRow, candidates: readonly Candidate[]): ConfigError {
  const source = candidates.map((c) => c.source).join(" and ");
  return new ConfigError(
    `Conflicting values for setting ${row.flag}: ${source} are given together; give only one`,
    { setting: row.flag, source },
  );
}

function lineAndColumn(text: string, offset: number): string {
  const lines = text.slice(0, offset).split("\n");
  return `line ${lines.length}, column ${(lines.at(-1)?.length ?? 0) + 1}`;
}

async function readConfig(
  path: string,
  source: string,
  read: (path: string) => Promise<string>,
): Promise<YamlMapping> {
  const fail = (verb: string, detail: string, cause?: unknown) =>
    new ConfigError(`Cannot ${verb} config file ${JSON.stringify(path)} (${source})${detail}`, {
      setting: "config",
      source,
      rawValue: JSON.stringify(path),
      cause,
    });
  let text: string;
  try {
    text = await read(path);
  } catch (err: unknown) {
    throw fail("read", `: ${err instanceof Error ? err.message : String(err)}`, err);
  }
  let doc: unknown;
  try {
    // logLevel "error": the library would otherwise print warnings itself. prettyErrors off:
    // the pretty message quotes the offending source line, which may hold a password.
    doc = parseYaml(text, { logLevel: "error", prettyErrors: false, uniqueKeys: true });
  } catch (err: unknown) {
    const where = err instanceof YAMLParseError ? ` at ${lineAndColumn(text, err.pos[0])}` : "";
    const detail = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw fail("parse", `${where}: ${detail}`, err);
  }
  if (doc === null || doc === undefined) return {};
  if (!isMapping(doc)) throw fail("use", ": the top level must be a mapping of keys");
  return doc;
}

function checkRetired(
  doc: YamlMapping,
  path: string | undefined,
  env: Readonly<Record<string, string>>,
): void {
  for (const retired of RETIRED) {
    const replacement = rowsFor("run").find((row) => row.flag === retired.replacement);
    if (replacement === undefined) throw new Error(`No setting ${retired.replacement}`);
    const yaml = derivedYamlKey(retired.flag);
    const envName = derivedEnvName(retired.flag);
    const inFile = path !== undefined && Object.hasOwn(doc, yaml);
    if (!inFile && !Object.hasOwn(env, envName)) continue;
    const source = inFile ? `file ${path} key ${yaml}` : `env ${envName}`;
    const [name, where, raw, instead] = inFile
      ? [yaml, source, doc[yaml], yamlKeyOf(replacement)]
      : [envName, "the environment", env[envName], envNameOf(replacement)];
    throw new ConfigError(
      `Retired setting ${name} in ${where}: ${retired.reason}; set ${instead} instead ` +
        `(default ${defaultOf(replacement, "run") ?? "none"}, counted per queue)`,
      { setting: retired.flag, source, rawValue: JSON.stringify(raw) },
    );
  }
}

/**
 * Resolve, validate and type the settings of one command. Throws a `usage` WorkerError (exit
 * status 2) for a bad command line or a missing required flag, a {@linkcode ConfigError} (exit
 * status 1) for a bad value, conflicting values within one source, an unusable config file or
 * a retired key.
 */
export async function loadSettings<C extends CommandName>(
  command: C,
  options: LoadOptions,
): Promise<LoadResult<C>> {
  const rows = rowsFor(command);
  const tokens = tokenize(command, options.argv);
  if (tokens.problems[0] !== undefined) throw tokens.problems[0];
  const env = options.env;
  const warnings: string[] = [];
  // Once per key: a key that feeds two settings (metrics_listen_addr) is met twice.
  const warnOnce = (warning: string) => {
    if (!warnings.includes(warning)) warnings.push(warning);
  };
  let doc: YamlMapping = {};
  let path: string | undefined;
  const legacyEnv = legacyEnvDocument(env);

  // Every value given for a row, by source from the first to the last in precedence: the row's
  // own, then those of the input-only rows that feed it (`mysql-dsn` → `mysql-url`).
  const tiersOf = (row: SettingRow) => {
    const own = [row, ...rows.filter((r) => r.feeds?.some((f) => f.target === row.flag))];

    const flagTier = tokens.uses.filter((use) => own.includes(use.row)).map((use) =>
      parseFor(row, use.row, use.value, "text", use.source)
    );
    const envTier = own.flatMap((input) =>
      envNamesOf(input).flatMap((name) => {
        const value = env[name];
        // An empty variable falls through to the next source, as in the Go worker.
        return value === undefined || value === ""
          ? []
          : [parseFor(row, input, value, "text", `env ${name}`)];
      })
    );
    // Candidates of one document: its own keys, then legacy keys, the new key winning.
    const documentTier = (source: YamlMapping, sourcePath: string, origin: Origin): Candidate[] => {
      const tier: Candidate[] = [];
      const keys: string[] = [];
      for (const input of own) {
        const key = yamlKeyOf(input);
        if (key === undefined) continue;
        if (!present(source, key)) {
          // A bare `key:` counts as not given (as the PHP worker's isset did), but not silently:
          // a template that rendered `nodename:` empty would run as the default node (D8).
          if (origin === "yaml" && Object.hasOwn(source, key)) {
            warnOnce(
              `File ${sourcePath} key ${key} has no value (null), so it does not set ` +
                `${input.flag}: write a value (quote "" where empty is one) or remove the key`,
            );
          }
          continue;
        }
        tier.push(parseFor(row, input, source[key], origin, keysLabel(sourcePath, [key])));
        keys.push(key);
      }
      for (const translation of LEGACY_TRANSLATIONS) {
        if (translation.target !== row.flag) continue;
        // The same for the PHP worker's keys and block fields (`node_name:`, `mysql: {host: }`).
        const bare = origin === "yaml"
          ? translation.keys.flatMap((k) => valuelessKeys(source, k))
          : [];
        for (const key of bare) {
          warnOnce(
            `File ${sourcePath} key ${key} has no value (null), so it is read as not given: ` +
              "write a value or remove the key",
          );
        }
        const legacyPresent = translation.keys.filter((k) => present(source, k));
        if (legacyPresent.length === 0) continue;
        if (tier.length > 0) {
          // The new key wins over its legacy counterpart (no translation, so a legacy value
          // that would refuse or be clamped is not even read).
          warnings.push(
            `Ignoring legacy key${legacyPresent.length === 1 ? "" : "s"} ${
              legacyPresent.join(", ")
            } in ${sourcePath}: ${keys.join(", ")} ${keys.length === 1 ? "is" : "are"} set`,
          );
          continue;
        }
        const below = sourcePath === LEGACY_ENV_PATH ? undefined : legacyEnv;
        const legacy = translation.translate(source, sourcePath, (m) => warnings.push(m), below);
        if (legacy !== undefined) {
          tier.push({ ...parseFor(row, row, legacy.text, "text", legacy.source), legacy: true });
        }
      }
      return tier;
    };
    const fileTier = path === undefined ? [] : documentTier(doc, path, "yaml");
    // The PHP worker's SE_* variables, below its config file as there (file > SE_*).
    const legacyTier = fileTier.length > 0 ? [] : documentTier(legacyEnv, LEGACY_ENV_PATH, "text");
    const tiers = { flag: flagTier, env: envTier, file: fileTier, legacy: legacyTier };
    return Object.entries(tiers) as [keyof typeof tiers, Candidate[]][];
  };

  // 1. The config file: flag, then env, then none (no default location).
  const configRow = rows.find((row) => row.flag === "config");
  const chosenConfig = configRow && tiersOf(configRow).flatMap(([, tier]) => tier)[0];
  if (chosenConfig !== undefined) {
    path = String(chosenConfig.value);
    doc = await readConfig(path, chosenConfig.source, options.readTextFile ?? Deno.readTextFile);
  }

  // 2. Retired keys, before any other validation (docs/operations.md#retired-keys). Retired and
  // former settings and the legacy feature groups are a matter of `run` only.
  if (command === "run") checkRetired(doc, path, env);

  // 3. Former settings that are constants now, keys no command knows (typos), and legacy
  // feature groups that have no equivalent.
  if (command === "run") warnings.push(...fixedSettingWarnings(tokens.fixed, doc, path, env));
  if (path !== undefined) {
    warnings.push(...unknownKeyWarnings(doc, path));
    if (command === "run") warnings.push(...legacyIgnoredWarnings(doc, path));
  }

  // 4. Resolve every setting.
  const settings: Record<string, unknown> = {};
  const sources: Record<string, SettingSource> = {};
  for (const row of rows) {
    if (row.feeds !== undefined) continue;
    const tiers = tiersOf(row);
    for (const [, tier] of tiers) if (tier.length > 1) throw conflict(row, tier);
    const key = settingKeyOf(row);
    const found = tiers.find(([, tier]) => tier.length > 0);
    const chosen = found?.[1][0];
    if (found !== undefined && chosen !== undefined) {
      settings[key] = chosen.value;
      sources[key] = { kind: chosen.legacy === true ? "legacy" : found[0], text: chosen.source };
      warnings.push(...chosen.notes.map((note) => `${row.flag} (${chosen.source}): ${note}`));
      if (found[0] === "flag" && row.secret === true && holdsSecret(row, chosen.value)) {
        // Named as given: a DSN goes into STATUSENGINE_MYSQL_DSN, not STATUSENGINE_MYSQL_URL.
        const given = chosen.input ?? row;
        const envName = envNameOf(given);
        warnings.push(
          `${given.flag} is given on the command line, which every local user can read through ` +
            `/proc; prefer ${envName === undefined ? "the environment" : `env ${envName}`}`,
        );
      }
      continue;
    }
    if (row.required === true) {
      const envName = envNameOf(row);
      const what = row.positional === true
        ? `argument ${metavarOf(row)} (or --${row.flag})`
        : `flag --${row.flag}${envName === undefined ? "" : ` (or env ${envName})`}`;
      throw usageError(`Missing required ${what} for command "${command}"`, command);
    }
    settings[key] = defaultValue(row, command);
    const kind = settings[key] === undefined ? "none" : "default";
    sources[key] = { kind, text: kind };
  }

  // Filled key by key from the rows SettingsFor<C> derives from (pinned by settings_test.ts).
  return { settings: settings as SettingsFor<C>, warnings, sources };
}
