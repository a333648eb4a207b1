/**
 * Configuration of statusengine-worker: one settings table drives flags, environment
 * variables, the YAML file (Go keys and the legacy PHP config.yml), validation, `--help` and
 * the reference in docs/configuration.md (D8, docs/operations.md#settings).
 *
 * @example Loading the settings of the daemon
 * ```ts ignore
 * import { loadSettings, parseCommandLine } from "./mod.ts";
 * const line = parseCommandLine(Deno.args);
 * const { settings, warnings } = await loadSettings("run", {
 *   argv: line.rest,
 *   env: Deno.env.toObject(),
 * });
 * settings.mysqlBatchSize; // number, 1..700
 * ```
 *
 * @module
 */

export { ConfigError, UsageError } from "./errors.ts";
export {
  type CommandLine,
  type LoadOptions,
  type LoadResult,
  loadSettings,
  parseCommandLine,
  type SourceKind,
} from "./load.ts";
export {
  displayDefault,
  flagText,
  formatSettingsForLog,
  type LogValue,
  redactSettings,
  REFERENCE_BEGIN,
  REFERENCE_END,
  renderConfigReference,
  renderHelp,
  replaceConfigReference,
  settingsDifferingFromDefaults,
} from "./help.ts";
export {
  type Camel,
  COMMAND_NAMES,
  type CommandName,
  COMMANDS,
  type CommandsOf,
  CONFIG_COMMAND_USAGE,
  defaultOf,
  type Feed,
  groupOf,
  type Kind,
  type KindValue,
  PROGRAM_NAME,
  QUEUE_NAMES,
  RETENTION_RULES,
  type RetentionRule,
  type Rows,
  rowsFor,
  type RowValue,
  type SettingKey,
  settingKeyOf,
  type SettingRow,
  SETTINGS,
  type SettingsFor,
  type UnitSuffix,
} from "./settings.ts";
export {
  formatGoDuration,
  type HostPort,
  mysqlDsnToUrl,
  type Parsed,
  parseGoDuration,
  redactUrl,
  splitHostPort,
} from "./values.ts";
