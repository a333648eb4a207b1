/**
 * Carbon plaintext lines (F4, F5): `<path> <value> <unix seconds>\n`.
 *
 * @module
 */

/**
 * The legacy default of `graphite_illegal_characters`, in the PHP worker's delimited form:
 * every character outside [a-zA-Z0-9\-.^] becomes one "_" per code point; the literal "^"
 * survives, an inherited quirk of the legacy pattern (F4).
 */
export const DEFAULT_ILLEGAL_CHARACTERS = "/[^a-zA-Z^0-9\\-\\.]/";

/**
 * Compile `--graphite-illegal-characters`: a regular expression matching one character to
 * replace, either bare (`[^a-z0-9]`) or in the PHP worker's delimited form (`/[^a-z0-9]/i`).
 * Of PHP's modifiers `i`, `m` and `s` are kept; every match is replaced, per code point.
 *
 * @param text The setting's value.
 * @returns A global, Unicode-aware RegExp.
 * @throws {SyntaxError} When the text is not a valid regular expression.
 */
export function illegalCharactersPattern(text: string): RegExp {
  const delimited = /^\/(.*)\/([a-zA-Z]*)$/s.exec(text);
  const body = delimited?.[1] ?? text;
  const flags = [...new Set(delimited?.[2] ?? "")].filter((f) => "ims".includes(f)).join("");
  const pattern = new RegExp(body, `gu${flags}`);
  // A pattern that matches the empty string would insert "_" between every character.
  if (pattern.test("")) throw new SyntaxError(`${JSON.stringify(text)} matches the empty string`);
  pattern.lastIndex = 0;
  return pattern;
}

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
 * The shortest decimal that round-trips, never in exponent notation (Carbon
 * rejects it, F5): `1e-7` → `0.0000001`, `1e21` → `1000000000000000000000`.
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
