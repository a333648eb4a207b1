/**
 * Carbon plaintext lines (docs/perfdata.md#graphite-path): `<path> <value> <unix seconds>\n`.
 *
 * @module
 */
import { positionalDecimal } from "../events/mod.ts";
import {
  DEFAULT_ILLEGAL_CHARACTERS,
  illegalCharactersPattern,
} from "../util/illegal_characters.ts";

const DEFAULT_ILLEGAL = illegalCharactersPattern(DEFAULT_ILLEGAL_CHARACTERS);

/**
 * Sanitise one path segment (or the prefix).
 *
 * @param segment Host name, service description, label or prefix.
 * @param illegal Characters to replace (`--graphite-illegal-characters`); default the legacy one.
 * @returns The segment with illegal characters replaced by `_`.
 *
 * @example
 * ```ts
 * import { sanitizeSegment } from "./format.ts";
 * sanitizeSegment("Disk Usage /var"); // "Disk_Usage__var"
 * ```
 */
export function sanitizeSegment(segment: string, illegal: RegExp = DEFAULT_ILLEGAL): string {
  return segment.replace(illegal, "_");
}

/**
 * `<prefix>.<host>.<service>.<label>`, each segment sanitised.
 *
 * @param prefix Already sanitised prefix.
 * @param host Host name.
 * @param service Service description.
 * @param label Perfdata label.
 * @param illegal Characters to replace; default the legacy set.
 * @returns The metric path.
 */
export function metricPath(
  prefix: string,
  host: string,
  service: string,
  label: string,
  illegal: RegExp = DEFAULT_ILLEGAL,
): string {
  return `${prefix}.${sanitizeSegment(host, illegal)}.${sanitizeSegment(service, illegal)}.${
    sanitizeSegment(label, illegal)
  }`;
}

/**
 * One Carbon line.
 *
 * @param path Metric path.
 * @param value Value.
 * @param seconds Unix seconds (integer).
 * @returns `path value seconds\n`.
 */
export function carbonLine(path: string, value: number, seconds: number): string {
  return `${path} ${positionalDecimal(value)} ${Math.floor(seconds)}\n`;
}
