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
