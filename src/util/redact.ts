/**
 * The one rule for printing a URL, DSN or free text that may carry a secret (D8).
 *
 * @module
 */

const MASK = "****";
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
// A URL standing in free text: a scheme, then everything up to a blank or a quote.
const URL_IN_TEXT = /[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s"'`<>]+/g;
/**
 * The shortest secret masked wherever it appears in free text. A shorter one is likely to be a part
 * of ordinary words: the password `se` turned "refused" into "refu****d" and "user" into "u****r".
 */
const MIN_FREE_TEXT_SECRET_LENGTH = 8;
// Query parameters whose value is a credential, by name (password, passwd, pwd, api_key, …, and
// InfluxDB 1.x's p, which --influxdb-url may carry).
// A value runs to the next `&name=`: an unencoded `#` or a lone `&` in a secret belongs to it (the
// parser cuts the value there, and a refusal that quotes the URL would show the rest).
const VALUE = String.raw`(?:[^&]|&(?![^=&]*=))*`;
const SECRET_PARAMETER = new RegExp(
  String.raw`([?&](?:p|[^=&#]*(?:pass|pwd|secret|token|key|auth|cred)[^=&#]*)=)${VALUE}`,
  "gi",
);
// mysql2's TLS options travel as JSON in `?ssl=` (src/util/mysql_url.ts): one that names a
// passphrase or a private key (`key`, `pfx`) is masked whole.
const SSL_PARAMETER = new RegExp(String.raw`([?&]ssl=)(${VALUE})`, "gi");

/**
 * A URL or Go DSN, valid or not, with its password and password-like query parameters masked.
 * Conservative, because a malformed URL is the likeliest to be printed: everything from the first
 * `:` of the user info to the LAST `@` is masked, so an unencoded `@`, `/`, `?` or `#` in a
 * password leaks nothing. A URL without `@` that does not parse (`mysql://root:secret/db`) has
 * the text after its colon masked too: it may be a password whose `@host` was forgotten.
 *
 * @example Masking a URL and a DSN
 * ```ts
 * import { redactUrl } from "./redact.ts";
 * redactUrl("mysql://root:secret@127.0.0.1:3306/statusengine");
 * // "mysql://root:****@127.0.0.1:3306/statusengine"
 * redactUrl("root:secret@tcp(127.0.0.1:3306)/statusengine");
 * // "root:****@tcp(127.0.0.1:3306)/statusengine"
 * ```
 */
export function redactUrl(url: string): string {
  const schemeEnd = SCHEME.exec(url)?.[0].length ?? 0;
  const at = url.lastIndexOf("@");
  let out = url;
  if (at > schemeEnd) {
    const colon = url.slice(schemeEnd, at).indexOf(":");
    if (colon >= 0) out = `${url.slice(0, schemeEnd + colon + 1)}${MASK}${url.slice(at)}`;
  } else if (schemeEnd > 0 && !URL.canParse(url)) {
    const rest = url.slice(schemeEnd).search(/[/?#]/);
    const end = rest < 0 ? url.length : schemeEnd + rest;
    const colon = url.indexOf(":", schemeEnd);
    if (colon >= 0 && colon < end) out = `${url.slice(0, colon + 1)}${MASK}${url.slice(end)}`;
  }
  return out.replace(SECRET_PARAMETER, `$1${MASK}`).replace(
    SSL_PARAMETER,
    (all, name: string, value: string) => /pass|key|pfx/i.test(value) ? `${name}${MASK}` : all,
  );
}

/**
 * Free text (a driver's error) with every URL redacted, `:secret@` masked, and `secret` anywhere
 * else only from {@link MIN_FREE_TEXT_SECRET_LENGTH} characters: servers do not echo a password, so
 * masking a short one inside words would only destroy the message.
 *
 * @example A short password stays out of the words
 * ```ts
 * import assert from "node:assert/strict";
 * import { redactText } from "./redact.ts";
 * assert.equal(
 *   redactText("mysql://se:se@db/x refused the login (Access denied for user 'se')", "se"),
 *   "mysql://se:****@db/x refused the login (Access denied for user 'se')",
 * );
 * ```
 */
export function redactText(text: string, secret: string | undefined): string {
  let out = text.replace(URL_IN_TEXT, (url) => redactUrl(url));
  if (secret === undefined || secret === "") return out;
  out = out.replaceAll(`:${secret}@`, `:${MASK}@`);
  return secret.length >= MIN_FREE_TEXT_SECRET_LENGTH ? out.replaceAll(secret, MASK) : out;
}

/** A URL a parser refused: the message masks the password, `detail` never quotes it. */
export class UrlError extends TypeError {
  constructor(kind: string, url: string, readonly detail: string, cause?: unknown) {
    super(`Cannot parse ${kind} URL "${redactUrl(url)}": ${detail}`, { cause });
  }
}

/** What `parse` finds wrong with `url` (its {@link UrlError}'s detail), or null. */
export function urlProblem(parse: (url: string) => unknown, url: string): string | null {
  try {
    parse(url);
    return null;
  } catch (err: unknown) {
    if (err instanceof UrlError) return err.detail;
    throw err;
  }
}
