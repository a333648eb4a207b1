import assert from "node:assert/strict";
import { fixEntryImports } from "./entry_imports.ts";

/** A throwaway `src/` with the given files; removed when disposed. */
async function tree(files: Record<string, string>): Promise<AsyncDisposable & { src: string }> {
  const root = await Deno.makeTempDir();
  const src = `${root}/src/`;
  for (const [path, text] of Object.entries(files)) {
    await Deno.mkdir(`${src}${path.slice(0, path.lastIndexOf("/"))}`, { recursive: true });
    await Deno.writeTextFile(`${src}${path}`, text);
  }
  return { src, [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }) };
}

Deno.test("entry imports: an import past a mod.ts names the mod.ts, which gains the exports it needs", async () => {
  await using t = await tree({
    "mysql/mod.ts": 'export { TableWriter } from "./writer.ts";\n',
    "mysql/writer.ts": "export class TableWriter {}\nexport const BATCH = 1;\n",
    "mysql/retry.ts": "export type Retry = number;\n",
    "pipeline/handler.ts": 'import { BATCH, TableWriter } from "../mysql/writer.ts";\n' +
      'import type { Retry } from "../mysql/retry.ts";\n' +
      'import { x } from "../util/async.ts";\n' +
      "export const y: Retry = BATCH + x;\nexport { TableWriter };\n",
    "mysql/writer_test.ts": 'import { z } from "../pipeline/handler.ts";\n',
  });
  const result = await fixEntryImports(t.src);
  assert.deepEqual(result, { rewritten: 2, leftOver: [] });
  const handler = await Deno.readTextFile(`${t.src}pipeline/handler.ts`);
  assert.match(
    handler,
    /^import \{ BATCH, type Retry, TableWriter \} from "\.\.\/mysql\/mod\.ts";$/m,
  );
  assert.match(handler, /from "\.\.\/util\/async\.ts"/, "util has no mod.ts: unchanged");
  assert.doesNotMatch(handler, /mysql\/(writer|retry)\.ts/);
  const mod = await Deno.readTextFile(`${t.src}mysql/mod.ts`);
  assert.match(mod, /^export \{ BATCH, TableWriter \} from "\.\/writer\.ts";$/m);
  assert.match(mod, /^export type \{ Retry \} from "\.\/retry\.ts";$/m);
  assert.equal(
    await Deno.readTextFile(`${t.src}mysql/writer_test.ts`),
    'import { z } from "../pipeline/handler.ts";\n',
    "tests are left alone",
  );
});

Deno.test("entry imports: a name the mod.ts exports from another file is left for a person", async () => {
  await using t = await tree({
    "events/mod.ts": 'export { NAMES } from "./queues.ts";\n',
    "events/queues.ts": 'export { NAMES } from "./names.ts";\n',
    "events/names.ts": "export const NAMES = [];\n",
    "config/settings.ts": 'import { NAMES } from "../events/names.ts";\nexport const n = NAMES;\n',
  });
  const result = await fixEntryImports(t.src);
  assert.equal(result.rewritten, 0);
  assert.equal(result.leftOver.length, 1);
  assert.match(
    result.leftOver[0] ?? "",
    /events\/mod\.ts already exports "NAMES" from another file/,
  );
  assert.match(await Deno.readTextFile(`${t.src}config/settings.ts`), /events\/names\.ts/);
});
