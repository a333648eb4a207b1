/**
 * API keys of the two authenticated HTTP surfaces (`/ws` and `/commands`):
 * where a request carries its key, and a comparison whose timing reveals
 * neither the key nor which configured key matched.
 *
 * @module
 */

const ENCODER = new TextEncoder();

/** A set of accepted keys, compared in constant time. */
export class ApiKeySet {
  readonly #keys: readonly Uint8Array[];

  /** @param keys Accepted keys; empty strings are ignored (an empty key never matches). */
  constructor(keys: readonly string[]) {
    this.#keys = keys.filter((k) => k.length > 0).map((k) => ENCODER.encode(k));
  }

  /** Number of usable keys. */
  get size(): number {
    return this.#keys.length;
  }

  /**
   * Whether `presented` is one of the keys. Compares against every key, whatever
   * an earlier comparison found, and every byte of each.
   *
   * @param presented The key a request carried, or null when it carried none.
   * @returns True on a match.
   */
  matches(presented: string | null): boolean {
    if (presented === null || presented.length === 0) return false;
    const candidate = ENCODER.encode(presented);
    let found = 0;
    for (const key of this.#keys) found |= constantTimeEqual(candidate, key) ? 1 : 0;
    return found === 1;
  }
}

/**
 * Byte-wise comparison whose duration depends only on the lengths. A length
 * difference is folded into the result rather than returned early.
 *
 * @param a First value.
 * @param b Second value.
 * @returns True when both hold the same bytes.
 */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}

/**
 * The key of a `/commands` request: `Authorization: Bearer <key>` or a bare
 * `Authorization: <key>`, else `X-Api-Key`; an `Authorization` header wins when
 * present. Never the query string: a secret in a URL ends up in access logs.
 *
 * @param headers Request headers.
 * @returns The trimmed key, or null when none was sent.
 */
export function headerKey(headers: Headers): string | null {
  const auth = headers.get("authorization");
  if (auth !== null) return stripBearer(auth);
  const x = headers.get("x-api-key");
  return x === null ? null : x.trim();
}

/** Where `/commands` reads its key, for the answers that refuse a request without one. */
const HEADER_FORMS = "Authorization: Bearer <key>, or X-Api-Key: <key>";

/**
 * The `error` of a 401 from `/commands`: a client that sent no key in a header is told where
 * the key goes, and one that put it in the query string (`?key=`, `?api_key=`, `?token=`: any
 * parameter, none is read) that it is not looked for there, rather than a bare "unauthorized"
 * that reads like a wrong key. A wrong key in a header stays a bare "unauthorized".
 *
 * @param headers Request headers.
 * @param url Request URL.
 * @returns The text of the refusal; never contains what the request sent.
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
 * The key of a `/ws` handshake: the headers of {@link headerKey}, then the
 * `api_key` query parameter, which exists for browsers (they cannot set
 * headers on a WebSocket handshake).
 *
 * @param headers Request headers.
 * @param url Request URL.
 * @returns The trimmed key, or null when none was sent.
 */
export function handshakeKey(headers: Headers, url: URL): string | null {
  const fromHeaders = headerKey(headers);
  if (fromHeaders !== null) return fromHeaders;
  const q = url.searchParams.get("api_key");
  return q === null ? null : q.trim();
}

// A bare "Bearer" is the scheme without a key (an empty variable in a script; HTTP trims the
// space after it), not a key called "Bearer".
function stripBearer(value: string): string {
  const v = value.trim();
  return /^bearer(\s+|$)/i.test(v) ? v.replace(/^bearer(\s+|$)/i, "").trim() : v;
}
