/**
 * The one rule for printing a URL or DSN that may carry a secret (D8): every
 * log line, error message, help text and status screen goes through
 * {@link redactUrl}, for MySQL URLs, Go MySQL DSNs and AMQP URLs alike.
 *
 * @module
 */

const MASK = "****";
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
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
