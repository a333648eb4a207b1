/**
 * API keys of `/ws` and `/commands`: where a request carries its key, and a comparison whose
 * timing reveals neither the key nor which configured key matched.
 *
 * @module
 */

const ENCODER = new TextEncoder();

/** A set of accepted keys, compared in constant time. */
export class ApiKeySet {
  readonly #keys: readonly Uint8Array[];
  readonly size: number;

  /** @param keys Accepted keys; empty strings are ignored (an empty key never matches). */
  constructor(keys: readonly string[]) {
    this.#keys = keys.filter((k) => k.length > 0).map((k) => ENCODER.encode(k));
    this.size = this.#keys.length;
  }

  /** Whether `presented` is one of the keys; compares every byte of every key, whatever matched. */
  matches(presented: string | null): boolean {
    if (presented === null || presented.length === 0) return false;
    const candidate = ENCODER.encode(presented);
    let found = 0;
    for (const key of this.#keys) found |= constantTimeEqual(candidate, key) ? 1 : 0;
    return found === 1;
  }
}

/** Byte-wise equality whose duration depends only on the lengths (no early return). */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}

/**
 * The trimmed key of a `/commands` request, or null: `Authorization: [Bearer] <key>`, else
 * `X-Api-Key`. Never the query string: a secret in a URL ends up in access logs.
 */
export function headerKey(headers: Headers): string | null {
  const auth = headers.get("authorization")?.trim();
  // `Basic` is a reverse proxy's login, which a browser resends on every request (the /ws
  // handshake too): not a key, so it must not hide the key sent another way.
  // A bare "Bearer" is the scheme without a key (an empty variable in a script; HTTP trims the
  // space after it), not a key called "Bearer".
  if (auth !== undefined && !/^basic(\s|$)/i.test(auth)) {
    return utf8(auth.replace(/^bearer(\s+|$)/i, "").trim());
  }
  const key = headers.get("x-api-key");
  return key === null ? null : utf8(key.trim());
}

/**
 * A header value read back as UTF-8: the listener hands a header over one character per byte
 * (latin1), so a key that is not ASCII, sent as UTF-8, would otherwise never match.
 */
function utf8(value: string): string {
  return new TextDecoder().decode(Uint8Array.from(value, (c) => c.charCodeAt(0) & 0xff));
}

/** Where `/commands` reads its key, for the answers that refuse a request without one. */
const HEADER_FORMS = "Authorization: Bearer <key>, or X-Api-Key: <key>";

/**
 * The `error` of a 401 from `/commands`, never echoing what was sent: a client with no key in a
 * header is told where it goes (and, with a query string, that none is read there) rather than a
 * bare "unauthorized" that reads like a wrong key.
 */
export function headerKeyRefusal(headers: Headers, url: URL): string {
  const key = headerKey(headers);
  if (key !== null && key !== "") return "unauthorized";
  if (url.search.length > 1) {
    return `unauthorized: the API key goes in a header (${HEADER_FORMS}); the query string ` +
      "is never read for it, since URLs end up in access logs";
  }
  return `unauthorized: no API key; send it in a header (${HEADER_FORMS})`;
}

/**
 * The key of a `/ws` handshake: {@link headerKey}, then `?api_key=` for browsers (they cannot
 * set headers on a WebSocket handshake). A header without a key (empty, a bare `Bearer`) is no
 * key, as for `/commands`, so it does not hide the query string's.
 */
export function handshakeKey(headers: Headers, url: URL): string | null {
  const key = headerKey(headers);
  if (key !== null && key !== "") return key;
  return url.searchParams.get("api_key")?.trim() ?? key;
}
