/**
 * Which top-level keys a config file may hold, and the nearest known name for a misspelled
 * key or flag: a typo such as `mysql_batchsize: 500` must not silently fall back to the
 * default.
 *
 * One file is shared by every command that reads it (the worker and `cleanup` typically use
 * the same file), so a key is known when ANY command has it, not only the one running.
 *
 * @module
 */

import { closest, distance } from "fastest-levenshtein";
import {
  FIXED_SETTINGS,
  LEGACY_BLOCK_FIELDS,
  LEGACY_ENV_KEYS,
  LEGACY_IGNORED,
  legacyKeysOf,
  RETIRED,
  type YamlMapping,
} from "./legacy.ts";
import { derivedYamlKey, SETTING_ROWS, yamlKeyOf } from "./settings.ts";

/**
 * Every top-level key some command reads from the file and acts on: the only names a
 * misspelled key is told it may have meant.
 */
const SUPPORTED_YAML_KEYS: ReadonlySet<string> = new Set([
  ...SETTING_ROWS.flatMap((row) => {
    const key = yamlKeyOf(row);
    return [
      ...(key === undefined ? [] : [key]),
      ...(row.yamlAliases ?? []),
      // A legacy path into a block (`rabbitmq.durable_queues`) makes the block's name known.
      ...legacyKeysOf(row.flag).map((k) => k.split(".")[0] ?? k),
    ];
  }),
  ...LEGACY_ENV_KEYS.map((k) => k.split(".")[0] ?? k),
]);

/**
 * Every top-level key that draws no "unknown key" warning: the supported ones, plus the legacy
 * keys without effect, the retired keys and the former settings now fixed, which have warnings
 * (or refusals) of their own. The latter are never suggested for a typo: `query_hander` is not
 * told to become `query_handler`, a key that does nothing.
 */
const KNOWN_YAML_KEYS: ReadonlySet<string> = new Set([
  ...SUPPORTED_YAML_KEYS,
  ...LEGACY_IGNORED.flatMap((group) => group.keys),
  ...RETIRED.map((r) => r.yaml),
  ...FIXED_SETTINGS.map((f) => derivedYamlKey(f.flag)),
]);

/** Key prefixes of whole legacy groups (`elasticsearch_*`), also known. */
const KNOWN_PREFIXES: readonly string[] = LEGACY_IGNORED.flatMap((group) =>
  group.prefix === undefined ? [] : [group.prefix]
);

/**
 * The candidate closest to a misspelled name, when it is close enough to be a likely typo.
 *
 * @param name What was written (`mysql_batchsize`, `gearman-adr`).
 * @param candidates The names that exist.
 * @returns The nearest candidate, or `undefined` when none is plausibly meant.
 */
export function nearestName(name: string, candidates: Iterable<string>): string | undefined {
  const list = [...candidates];
  if (list.length === 0 || name === "") return undefined;
  const best = closest(name, list);
  // Up to a third of the name may differ (at least two edits: a swapped pair of letters
  // counts twice), so "metrics_prot" finds metrics_port but "foo" finds nothing.
  return distance(name, best) <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}

/**
 * One warning per top-level key of the file that no command knows, with the nearest known
 * key when there is one.
 *
 * @param doc The parsed file.
 * @param path Its path, for the message.
 * @returns Secret-free warnings (only key names are quoted, never values).
 */
export function unknownKeyWarnings(doc: YamlMapping, path: string): string[] {
  const warnings: string[] = [];
  const warn = (key: string, near: string | undefined) =>
    warnings.push(
      `Ignoring unknown key ${JSON.stringify(key)} in ${path}${
        near === undefined ? "" : ` (did you mean ${near}?)`
      }: no setting has this key, so it has no effect`,
    );
  for (const key of Object.keys(doc)) {
    if (KNOWN_YAML_KEYS.has(key) || KNOWN_PREFIXES.some((p) => key.startsWith(p))) continue;
    warn(key, nearestName(key, SUPPORTED_YAML_KEYS));
  }
  // A misspelled field of a legacy block (mysql.usrname) would leave the legacy default.
  for (const [block, fields] of Object.entries(LEGACY_BLOCK_FIELDS)) {
    const value = doc[block];
    if (typeof value !== "object" || value === null || Array.isArray(value)) continue;
    for (const field of Object.keys(value)) {
      if (fields.read.includes(field) || fields.ignored.includes(field)) continue;
      const near = nearestName(field, fields.read);
      warn(`${block}.${field}`, near === undefined ? undefined : `${block}.${near}`);
    }
  }
  return warnings;
}
