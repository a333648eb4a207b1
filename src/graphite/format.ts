/**
 * Carbon plaintext lines (docs/perfdata.md#graphite-path): `<path> <value> <unix seconds>\n`.
 *
 * @module
 */
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
 * The shortest decimal that round-trips, never in exponent notation (Carbon rejects it,
 * docs/perfdata.md#line-format): `1e-7` → `0.0000001`, `1e21` → `1000000000000000000000`.
 *
 * @param value A finite number.
 * @returns Positional decimal text.
 */
export function formatCarbonValue(value: number): string {
  const text = String(value);
  const e = text.indexOf("e");
  if (e === -1) return text;
  const negative = text.startsWith("-");
  const mantissa = text.slice(negative ? 1 : 0, e);
  const exponent = Number(text.slice(e + 1));
  const dot = mantissa.indexOf(".");
  const digits = mantissa.replace(".", "");
  const intLen = (dot === -1 ? mantissa.length : dot) + exponent;
  let out: string;
  if (intLen <= 0) out = `0.${"0".repeat(-intLen)}${digits}`;
  else if (intLen >= digits.length) out = digits + "0".repeat(intLen - digits.length);
  else out = `${digits.slice(0, intLen)}.${digits.slice(intLen)}`;
  return negative ? `-${out}` : out;
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
  return `${path} ${formatCarbonValue(value)} ${Math.floor(seconds)}\n`;
}
