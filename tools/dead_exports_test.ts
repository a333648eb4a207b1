import assert from "node:assert/strict";
import { classify, type ModuleInfo, readModule, stripComments } from "./dead_exports.ts";

function verdicts(files: Record<string, string>): Record<string, string> {
  const modules = new Map<string, ModuleInfo>();
  for (const [file, text] of Object.entries(files)) modules.set(file, readModule(file, text));
  const scanned = (f: string) => f.startsWith("src/") && !f.endsWith("_test.ts");
  return Object.fromEntries(
    classify(modules, scanned).map((v) => [`${v.entry.file}:${v.entry.name}`, v.use]),
  );
}

Deno.test("stripComments: blanks comments, keeps strings, templates and regular expressions", () => {
  const code = [
    'const a = "// not a comment"; // a comment',
    "/** export const hidden = 1; */",
    "const b = `${a} /* kept */`;",
    "const c = /\\/\\/[a/]*/;",
  ].join("\n");
  const out = stripComments(code);
  assert.equal(out.length, code.length);
  assert.ok(out.includes('"// not a comment"'));
  assert.ok(!out.includes("a comment;") && !out.includes("hidden"));
  assert.ok(out.includes("/* kept */"));
  assert.ok(out.includes("/\\/\\/[a/]*/;"));
});

Deno.test("readModule: declarations, export lists, re-exports, dynamic and doc imports", () => {
  const info = readModule(
    "src/x/a.ts",
    [
      'import { b, type C } from "./b.ts";',
      "/**",
      " * @example",
      " * ```ts",
      ' * import { f } from "./a.ts";',
      " * ```",
      " */",
      "export function f(): void {}",
      "export async function* g(): AsyncGenerator<number> {}",
      "export interface I {}",
      "const local = 1;",
      "export { b, local as renamed };",
      'export { type D, e } from "../y/d.ts";',
      'export * from "./star.ts";',
      'const { h } = await import("./h.ts");',
    ].join("\n"),
  );
  assert.deepEqual(
    info.exports.map((e) => `${e.name}:${e.kind}${e.from ? `<${e.from.file}` : ""}`).sort(),
    [
      "I:interface",
      "b:re-export<src/x/b.ts",
      "D:re-export<src/y/d.ts",
      "e:re-export<src/y/d.ts",
      "f:function",
      "g:function",
      "renamed:const",
    ].sort(),
  );
  assert.deepEqual(info.stars, ["src/x/star.ts"]);
  assert.deepEqual([...info.imports.get("src/x/b.ts") ?? []], ["b", "C"]);
  assert.deepEqual([...info.imports.get("src/x/h.ts") ?? []], ["h"]);
  assert.deepEqual([...info.docImports.get("src/x/a.ts") ?? []], ["f"]);
});

Deno.test("classify: used, test-only, boundary, module-internal and unused", () => {
  const result = verdicts({
    "src/a/a.ts": [
      "export interface Options { n: number }",
      "export interface Hidden { n: number }",
      "export function used(options: Options): number { const h: Hidden = options; return h.n; }",
      "export function seam(): number { return internal(); }",
      "export function internal(): number { return seam() + used({ n: 1 }); }",
      "export function unused(): number { return 1; }",
    ].join("\n"),
    "src/a/a_test.ts": 'import { seam } from "./a.ts";',
    "main.ts": 'import { used } from "./src/a/a.ts";',
  });
  assert.deepEqual(result, {
    "src/a/a.ts:Options": "boundary",
    "src/a/a.ts:Hidden": "module-internal",
    "src/a/a.ts:used": "used",
    "src/a/a.ts:seam": "test-only",
    "src/a/a.ts:internal": "module-internal",
    "src/a/a.ts:unused": "unused",
  });
});

Deno.test("classify: a name re-exported by a mod.ts counts as used only through the mod.ts", () => {
  const result = verdicts({
    "src/a/mod.ts": 'export { viaMod, notImported, type Arg } from "./a.ts";',
    "src/a/a.ts": [
      "export type Arg = number;",
      "export function viaMod(arg: Arg): number { return arg; }",
      "export function notImported(): number { return 1; }",
    ].join("\n"),
    "src/b/b.ts": 'import { viaMod } from "../a/mod.ts";',
  });
  assert.equal(result["src/a/a.ts:viaMod"], "used");
  assert.equal(result["src/a/mod.ts:viaMod"], "used");
  assert.equal(result["src/a/a.ts:notImported"], "unused");
  assert.equal(result["src/a/mod.ts:notImported"], "unused");
  // The type in the signature of a used re-export stays re-exported next to it.
  assert.equal(result["src/a/mod.ts:Arg"], "boundary");
});

Deno.test("classify: an import from a path computed at run time keeps the name in use", () => {
  const result = verdicts({
    "src/a/a.ts": "export function spawned(): void {}",
    "tests/a_test.ts": "const code = `import { spawned } from ${JSON.stringify(url)};`;",
  });
  assert.equal(result["src/a/a.ts:spawned"], "test-only");
});
