/**
 * `graphite_illegal_characters`, a leaf module: the settings validate it, the Graphite formatter
 * applies it.
 *
 * @module
 */

/**
 * The legacy default of `graphite_illegal_characters`, in the PHP worker's delimited form:
 * every character outside [a-zA-Z0-9\-.^] becomes one "_" per code point; the literal "^"
 * survives, an inherited quirk of the legacy pattern (docs/perfdata.md#graphite-path).
 */
export const DEFAULT_ILLEGAL_CHARACTERS = "/[^a-zA-Z^0-9\\-\\.]/";

/**
 * Compile `--graphite-illegal-characters`, bare (`[^a-z0-9]`) or PHP-delimited (`/[^a-z0-9]/i`,
 * modifiers `i`, `m`, `s` kept) into a global, Unicode-aware RegExp.
 *
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
