/**
 * Text generated from the settings table: `--help`, the reference in docs/configuration.md and
 * the start-up log line, secrets masked in all three (D8).
 *
 * @module
 */

import {
  type CommandName,
  COMMANDS,
  CONFIG_COMMAND_USAGE,
  defaultOf,
  envNamesOf,
  groupOf,
  PROGRAM_NAME,
  rowsFor,
  settingKeyOf,
  type SettingRow,
  yamlKeyOf,
} from "./settings.ts";
import {
  acceptedForm,
  defaultValue,
  formatByteSize,
  formatGoDuration,
  isUrlLike,
  metavarOf,
} from "./values.ts";
import { redactUrl } from "../util/redact.ts";
import { legacyKeysOf } from "./legacy.ts";

/** Markers around the generated section of docs/configuration.md. */
export const REFERENCE_BEGIN = "<!-- BEGIN CONFIG REFERENCE -->";
export const REFERENCE_END = "<!-- END CONFIG REFERENCE -->";

function precedence(readsFile: boolean): string {
  return "Each setting takes the first value found in: command-line flag, environment " +
    `variable, ${readsFile ? "YAML file (--config), " : ""}built-in default. A value that does ` +
    "not parse or is out of range refuses to start, whichever source it comes from. A single " +
    "leading dash works as well as two (-mysql-dsn), as in the Go worker. " +
    `"${PROGRAM_NAME} config <command> [flags]" shows the value each setting ends up with ` +
    "and where it came from.";
}

/** Break text at spaces into lines of at most `width` characters; a longer word stays whole. */
export function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    const last = lines.at(-1);
    if (last === undefined || last.length + 1 + word.length > width) lines.push(word);
    else lines[lines.length - 1] = `${last} ${word}`;
  }
  return lines;
}

function wrap(text: string, indent = 0): string[] {
  return wrapWords(text, 100 - indent).map((l) => `${" ".repeat(indent)}${l}`);
}

/** The default of a row as shown to people, secrets masked; `(none)` or `(required)`. */
export function displayDefault(row: SettingRow, command: CommandName): string {
  if (row.required === true) return "(required)";
  const fallback = defaultOf(row, command);
  if (fallback === undefined || fallback === "") return "(none)";
  return row.secret === true ? flagText(row, defaultValue(row, command)) : fallback;
}

/** The flag and its aliases, each with `metavar`, and `--no-<flag>` for a boolean. */
function flagNames(row: SettingRow, metavar = ""): string[] {
  const value = metavar === "" ? "" : ` ${metavar}`;
  const names = [row.flag, ...(row.flagAliases ?? [])].map((name) => `--${name}${value}`);
  return row.kind.type === "boolean" ? [...names, `--no-${row.flag}`] : names;
}

function flagSpellings(row: SettingRow): string {
  const metavar = metavarOf(row);
  return [...(row.positional === true ? [metavar] : []), ...flagNames(row, metavar)].join(", ");
}

function envText(row: SettingRow): string | undefined {
  const [name, ...aliases] = envNamesOf(row);
  if (name === undefined) return undefined;
  return `env ${name}${aliases.length === 0 ? "" : ` (also ${aliases.join(", ")})`}`;
}

function yamlText(row: SettingRow, readsFile: boolean): string | undefined {
  if (!readsFile) return undefined;
  const key = yamlKeyOf(row);
  const legacy = legacyKeysOf(row.flag).join(", ");
  // A setting read only from its legacy key (check_for_commands) still has a YAML key to show.
  if (key === undefined) return legacy === "" ? undefined : `yaml ${legacy} (legacy)`;
  return legacy === "" ? `yaml ${key}` : `yaml ${key} (legacy: ${legacy})`;
}

const HELP_DEFAULT_MAX = 60;

/**
 * A default as `--help` shows it: a long list (the dozens of commands --command-allow allows)
 * would be one line of a thousand characters, so it is cut after a few entries.
 */
function helpDefault(row: SettingRow, command: CommandName): string {
  const text = displayDefault(row, command);
  if (text.length <= HELP_DEFAULT_MAX || !text.includes(",")) return text;
  const entries = text.split(",");
  let length = 0; // only grows, so the entries kept are a prefix
  const shown = entries.filter((entry) => (length += entry.length + 1) <= HELP_DEFAULT_MAX);
  return `${shown.join(",")},… (${entries.length} in all; "${PROGRAM_NAME} config ${command}" ` +
    "lists them)";
}

function feedsText(row: SettingRow): string | undefined {
  return row.feeds && `sets ${row.feeds.map((f) => `--${f.target}`).join(" and ")}`;
}

/**
 * Usage text: without a command, the commands and the global flags; with one, every flag of
 * that command with its environment variable, YAML key, default and accepted form.
 */
export function renderHelp(command?: CommandName): string {
  const out: string[] = [];
  if (command === undefined) {
    out.push(
      ...wrap(
        `${PROGRAM_NAME}: consumes Statusengine monitoring events from gearmand or RabbitMQ ` +
          "and writes them to MySQL.",
      ),
      "",
      "Usage:",
      `  ${PROGRAM_NAME} [command] [flags]      (the command defaults to run)`,
      `  ${PROGRAM_NAME} <command> --help       (flags, environment variables and YAML keys)`,
      "",
      "Commands:",
    );
    const width = Math.max(...COMMANDS.map((c) => c.name.length));
    for (const c of COMMANDS) out.push(`  ${c.name.padEnd(width)}  ${c.summary}`);
    out.push(
      "",
      "Flags:",
      "  -h, --help   Show help; with a command, that command's flags",
      "  --version    Print the build identity and exit",
      "",
      ...wrap(precedence(true)),
    );
    return `${out.join("\n")}\n`;
  }
  const rows = rowsFor(command);
  const positional = rows.filter((r) => r.positional === true).map((r) =>
    r.required === true ? metavarOf(r) : `[${metavarOf(r)}]`
  );
  const usage = command === "config"
    ? CONFIG_COMMAND_USAGE.usage
    : [command, ...positional, ...(rows.length > 0 ? ["[flags]"] : [])].join(" ");
  out.push(
    `Usage: ${PROGRAM_NAME} ${usage}`,
    "",
    ...wrap(COMMANDS.find((c) => c.name === command)?.summary ?? ""),
    "",
  );
  if (command === "config") out.push(...wrap(CONFIG_COMMAND_USAGE.details), "");
  if (rows.length === 0) {
    out.push("This command has no settings.", "");
  } else {
    const readsFile = rows.some((r) => r.flag === "config");
    if (command !== "config") out.push(...wrap(precedence(readsFile)), "");
    let group: string | undefined;
    for (const row of rows) {
      if (groupOf(row) !== group) {
        if (group !== undefined) out.push("");
        group = groupOf(row);
        out.push(`${group}:`);
      }
      // The accepted form goes on the flag's line when it fits: one line less per flag.
      const accepted = acceptedForm(row);
      // A short enum already spells its values in the usage (--log-format text|json).
      const spelled = row.kind.type === "enum" && metavarOf(row) !== "NAME";
      const usage = spelled ? `  ${flagSpellings(row)}` : `  ${flagSpellings(row)}   (${accepted})`;
      const inline = usage.length <= 100;
      out.push(inline ? usage : `  ${flagSpellings(row)}`);
      out.push(...wrap(row.help, 6));
      const fallback = row.required === true ? "required" : `default ${helpDefault(row, command)}`;
      const where = [envText(row), yamlText(row, readsFile), feedsText(row) ?? fallback];
      out.push(...wrap(where.filter((w) => w !== undefined).join(" | "), 6));
      if (!inline) out.push(...wrap(`accepted: ${accepted}`, 6));
    }
    out.push("");
  }
  out.push("Help:", "  -h, --help", "      Show this help.", "");
  return out.join("\n");
}

function cell(text: string): string {
  return text.replaceAll("|", "\\|").replaceAll("<", "&lt;").replaceAll("\n", " ");
}

function code(text: string): string {
  return text.startsWith("(") ? text : `\`${text}\``;
}

/** The configuration reference in Markdown: one section per command, one row per setting. */
export function renderConfigReference(): string {
  const out: string[] = [
    // deno fmt would realign the tables, and the --check of CI would then see a stale section.
    "<!-- deno-fmt-ignore-start -->",
    "<!-- Generated by tools/gen_config_reference.ts from src/config/settings.ts; do not edit. -->",
    "",
    "## Configuration reference",
    "",
    precedence(true),
    "",
  ];
  for (const command of COMMANDS) {
    out.push(`### \`${command.name}\``, "", command.summary, "");
    if (command.name === "config") {
      out.push(
        `\`${PROGRAM_NAME} ${CONFIG_COMMAND_USAGE.usage}\``,
        "",
        CONFIG_COMMAND_USAGE.details,
        "",
      );
    }
    const rows = rowsFor(command.name);
    if (rows.length === 0) {
      out.push("No settings.", "");
      continue;
    }
    const readsFile = rows.some((r) => r.flag === "config");
    out.push(
      "| Flag | Environment | YAML key | Default | Accepted | Description |",
      "|---|---|---|---|---|---|",
    );
    for (const row of rows) {
      const flags = flagNames(row).map((f) => `\`${f}\``);
      if (row.positional === true) {
        const n = rows.filter((r) => r.positional === true).indexOf(row);
        const ordinal = ["first", "second"][n];
        flags.unshift(ordinal === undefined ? `argument ${n + 1}` : `${ordinal} argument`);
      }
      const envs = envNamesOf(row);
      const key = yamlKeyOf(row);
      const legacy = legacyKeysOf(row.flag).map((k) => `\`${k}\` (legacy)`);
      const yamls = [...(key === undefined ? [] : [`\`${key}\``]), ...legacy];
      const cells = [
        flags.join(", "),
        envs.length === 0 ? "—" : envs.map((e) => `\`${e}\``).join(", "),
        yamls.length === 0 || !readsFile ? "—" : yamls.join(", "),
        feedsText(row) ?? code(displayDefault(row, command.name)),
        acceptedForm(row),
        `${row.help}${row.secret === true ? " Secret: masked in logs and help." : ""}`,
      ];
      out.push(`| ${cells.map(cell).join(" | ")} |`);
    }
    out.push("");
  }
  out.push("<!-- deno-fmt-ignore-end -->", "");
  return out.join("\n");
}

/**
 * A resolved value written the way a flag takes it (30s, 64MiB, comma-separated lists),
 * secrets masked: what `config` shows and the start-up log names.
 */
export function flagText(row: SettingRow, value: unknown): string {
  if (value === undefined) return "(none)";
  if (Array.isArray(value)) {
    if (value.length === 0) return "";
    return row.secret === true ? `(${value.length} hidden)` : value.join(",");
  }
  if (row.secret === true) {
    if (value === "") return "(none)";
    // Only a URL or DSN has a public part worth showing; a password or token is all secret.
    return typeof value === "string" && isUrlLike(row) ? redactUrl(value) : "(hidden)";
  }
  if (row.kind.type === "duration" && typeof value === "number") return formatGoDuration(value);
  if (row.kind.type === "bytes" && typeof value === "number") return formatByteSize(value);
  return String(value);
}

/**
 * The settings of a command whose value is not the built-in default, flag → masked value: the
 * start-up log names them so an operator sees at a glance what was configured.
 */
export function settingsDifferingFromDefaults(
  command: CommandName,
  settings: Readonly<Record<string, unknown>>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const row of rowsFor(command)) {
    if (row.feeds !== undefined) continue;
    const value = settings[settingKeyOf(row)];
    // Compare unmasked, so a changed password counts as a change; show masked.
    if (JSON.stringify(value) !== JSON.stringify(defaultValue(row, command))) {
      out[row.flag] = flagText(row, value);
    }
  }
  return out;
}
