/**
 * The one rule for printing a URL or DSN that may carry a secret (D8): every
 * log line, error message, help text and status screen goes through
 * {@link redactUrl}, for MySQL URLs, Go MySQL DSNs and AMQP URLs alike.
 * Free text that may quote one, such as a driver's error, goes through
 * {@link redactText}.
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
// Query parameters whose value is a credential, by name (password, passwd, pwd, api_key, …).
const SECRET_PARAMETER = /([?&][^=&#]*(?:pass|pwd|secret|token|key|auth|cred)[^=&#]*=)[^&#]*/gi;

/**
 * The text with the password of its user info and every password-like query
 * parameter replaced by `****`.
 *
 * Conservative by design, because the text most likely to be printed is a
 * malformed one: everything between the first `:` of the user info and the
 * LAST `@` is masked, so an unencoded `@`, `/`, `?` or `#` inside a password
 * cannot leak a part of it (the price: an `@` in the path or query masks more
 * than needed). A URL without `@` that does not parse, such as
 * `mysql://root:secret/db`, has the text after the colon of its authority
 * masked too: it may be a password whose `@host` was forgotten.
 *
 * @param url A URL or Go DSN, valid or not.
 * @returns The same text with the secret parts replaced by `****`.
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
  return out.replace(SECRET_PARAMETER, `$1${MASK}`);
}

/**
 * Free text (a driver's error, a server's answer) with a known password masked where it stands:
 * the user info of every URL in it ({@link redactUrl}), `:password@` (the user info of a Go DSN or
 * of a URL that does not parse), and the password anywhere else only when it has at least
 * {@link MIN_FREE_TEXT_SECRET_LENGTH} characters. A shorter one is left in the words it may be part
 * of: servers do not echo a password (MySQL says "using password: YES"), so masking it as a
 * substring would only destroy the message.
 *
 * @param text The text to print.
 * @param secret The password it may carry; `undefined` or empty masks URLs only.
 * @returns The text with the password replaced by `****` where it stands.
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
