import assert from "node:assert/strict";
import {
  ApiKeySet,
  constantTimeEqual,
  handshakeKey,
  headerKey,
  headerKeyRefusal,
} from "./api_key.ts";

const enc = (s: string) => new TextEncoder().encode(s);

Deno.test("constantTimeEqual: equal bytes match; a prefix, a longer value or one changed byte do not", () => {
  assert.equal(constantTimeEqual(enc("secret"), enc("secret")), true);
  assert.equal(constantTimeEqual(enc("secret"), enc("secre")), false);
  assert.equal(constantTimeEqual(enc("secret"), enc("secret2")), false);
  assert.equal(constantTimeEqual(enc("secret"), enc("secreT")), false);
  assert.equal(constantTimeEqual(enc(""), enc("")), true);
});

Deno.test("ApiKeySet: any configured key matches; an empty or missing key never does", () => {
  const keys = new ApiKeySet(["alpha", "", "beta"]);
  assert.equal(keys.size, 2);
  assert.equal(keys.matches("alpha"), true);
  assert.equal(keys.matches("beta"), true);
  assert.equal(keys.matches("gamma"), false);
  assert.equal(keys.matches(""), false);
  assert.equal(keys.matches(null), false);
  assert.equal(new ApiKeySet([]).matches(""), false);
});

Deno.test("headerKey: Authorization (Bearer or bare) wins over X-Api-Key; values are trimmed; no query string", () => {
  assert.equal(headerKey(new Headers({ authorization: "Bearer  k1 " })), "k1");
  assert.equal(headerKey(new Headers({ authorization: "bearer k1" })), "k1");
  assert.equal(headerKey(new Headers({ authorization: " k2 " })), "k2");
  assert.equal(headerKey(new Headers({ authorization: "k2", "x-api-key": "k3" })), "k2");
  assert.equal(headerKey(new Headers({ "x-api-key": " k3 " })), "k3");
  assert.equal(headerKey(new Headers()), null);
});

Deno.test("headerKeyRefusal: no key names the headers, a query string is told it is not read, a wrong key stays bare", () => {
  const plain = new URL("http://h/commands");
  const query = new URL("http://h/commands?key=secret-in-url");
  assert.match(headerKeyRefusal(new Headers(), plain), /^unauthorized: no API key; .*X-Api-Key/);
  assert.match(headerKeyRefusal(new Headers({ authorization: "Bearer " }), plain), /no API key/);
  assert.match(headerKeyRefusal(new Headers(), query), /query string is never read/);
  assert.doesNotMatch(headerKeyRefusal(new Headers(), query), /secret-in-url/);
  assert.equal(headerKeyRefusal(new Headers({ "x-api-key": "wrong" }), query), "unauthorized");
});

Deno.test("handshakeKey: headers first, then ?api_key= for browsers", () => {
  const url = new URL("http://h/ws?api_key=q1");
  assert.equal(handshakeKey(new Headers({ "x-api-key": "h1" }), url), "h1");
  assert.equal(handshakeKey(new Headers(), url), "q1");
  assert.equal(handshakeKey(new Headers(), new URL("http://h/ws")), null);
});

// A reverse proxy's basic auth in front of a dashboard: the browser resends `Authorization: Basic`
// on every request, the /ws handshake too. It was read as the key (a bare `Authorization: <key>`),
// so the right ?api_key= (or X-Api-Key) behind it was never looked at: 401 on every handshake.
Deno.test("headerKey, handshakeKey: a Basic Authorization is a proxy's login, not a key, and hides no other source", () => {
  const basic = { authorization: "Basic dXNlcjpwYXNz" };
  assert.equal(handshakeKey(new Headers(basic), new URL("http://h/ws?api_key=q1")), "q1");
  assert.equal(headerKey(new Headers({ ...basic, "x-api-key": "k3" })), "k3");
  assert.equal(headerKey(new Headers(basic)), null);
  assert.match(headerKeyRefusal(new Headers(basic), new URL("http://h/commands")), /no API key/);
  // Bearer still wins over the query string.
  const bearer = new Headers({ authorization: "Bearer nope" });
  assert.equal(handshakeKey(bearer, new URL("http://h/ws?api_key=q1")), "nope");
});
