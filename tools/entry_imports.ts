/**
 * Rewrite imports that reach into another directory of `src/` past its `mod.ts` so they import
 * the `mod.ts`, and export from that `mod.ts` whatever they need that it does not export yet.
 * The lint rule `statusengine/layer-imports` (tools/lint_plugin.ts) reports such imports; this
 * fixes the ones it reports, so after a merge brings new ones, run:
 *
 *     deno run --allow-read --allow-write tools/entry_imports.ts && deno fmt
 *
 * Only `import {…} from` / `import type {…} from` / `export {…} from` statements are rewritten;
 * anything else (a namespace import, a name the `mod.ts` already exports from another file) is
 * listed and left for a person. Imports of the same `mod.ts` in one file are merged into one.
 *
 * @module
 */
import { layerViolation } from "./lint_plugin.ts";

const TEST_FILE = /(_test|_bench|_testing)\.ts$/;
const STATEMENT = /^(import|export)(\s+type)?\s*\{([^}]*)\}\s*from\s*"([^"]+)";[^\S\n]*\n/gm;
const BYPASS = /^Import src\/(\S+) through src\/(\S+\/mod\.ts),/;

/** One name of an import or export list. */
interface Name {
  /** The name the target module exports. */
  readonly exported: string;
  /** The text of the entry, without `type `. */
  readonly text: string;
  readonly typeOnly: boolean;
}

function parseNames(list: string, statementIsType: boolean): Name[] {
  return list.split(",").map((n) => n.trim()).filter((n) => n !== "").map((n) => {
    const typeOnly = statementIsType || n.startsWith("type ");
    const text = n.replace(/^type\s+/, "");
    return { exported: text.split(/\s+as\s+/)[0] as string, text, typeOnly };
  });
}

function listText(names: readonly Name[], statementIsType: boolean): string {
  const sorted = [...names].sort((a, b) =>
    a.text.toLowerCase() < b.text.toLowerCase()
      ? -1
      : a.text.toLowerCase() > b.text.toLowerCase()
      ? 1
      : 0
  );
  return sorted.map((n) => (n.typeOnly && !statementIsType ? `type ${n.text}` : n.text)).join(
    ", ",
  );
}

function relative(fromFile: string, toFile: string): string {
  const from = fromFile.split("/").slice(0, -1);
  const to = toFile.split("/");
  let i = 0;
  while (i < from.length && from[i] === to[i]) i++;
  const up = from.length - i;
  return (up === 0 ? "./" : "../".repeat(up)) + to.slice(i).join("/");
}

/** What a `mod.ts` exports: name → absolute source file (or the mod.ts itself for its own). */
function exportsOf(modPath: string, text: string): { named: Map<string, string>; stars: string[] } {
  const named = new Map<string, string>();
  const stars: string[] = [];
  const dir = modPath.slice(0, modPath.lastIndexOf("/") + 1);
  for (const m of text.matchAll(STATEMENT)) {
    if (m[1] !== "export") continue;
    const source = new URL(m[4] as string, `file://${dir}`).pathname;
    for (const n of parseNames(m[3] as string, m[2] !== undefined)) {
      named.set(n.text.split(/\s+as\s+/).at(-1) as string, source);
    }
  }
  for (const m of text.matchAll(/^export\s+\*\s+from\s+"([^"]+)"/gm)) {
    stars.push(new URL(m[1] as string, `file://${dir}`).pathname);
  }
  const own =
    /^export\s+(?:declare\s+)?(?:async\s+)?(?:function\*?|const|let|class|interface|type|enum|abstract class)\s+(\w+)/gm;
  for (const m of text.matchAll(own)) named.set(m[1] as string, modPath);
  return { named, stars };
}

/** Add `names` of `source` to the `mod.ts` text, into its existing export of that file if any. */
function addExports(modPath: string, text: string, source: string, names: Name[]): string {
  const spec = relative(modPath, source);
  for (const m of text.matchAll(STATEMENT)) {
    if (m[1] !== "export" || m[4] !== spec) continue;
    const isType = m[2] !== undefined;
    const merged = [...parseNames(m[3] as string, isType), ...names];
    const allType = merged.every((n) => n.typeOnly);
    const statement = `export${allType ? " type" : ""} { ${
      listText(merged, allType)
    } } from "${spec}";\n`;
    return text.slice(0, m.index) + statement + text.slice((m.index ?? 0) + m[0].length);
  }
  const allType = names.every((n) => n.typeOnly);
  return `${text.replace(/\n*$/, "\n")}export${allType ? " type" : ""} { ${
    listText(names, allType)
  } } from "${spec}";\n`;
}

async function* sourceFiles(dir: string): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}${entry.name}`;
    if (entry.isDirectory) yield* sourceFiles(`${path}/`);
    else if (path.endsWith(".ts") && !TEST_FILE.test(path)) yield path;
  }
}

/**
 * Rewrite the imports below `srcDir` that bypass a `mod.ts`, and extend the `mod.ts` files.
 *
 * @param srcDir Absolute path of `src/`, ending in a slash.
 * @returns How many imports were rewritten, and what was left for a person (one line each).
 */
export async function fixEntryImports(
  srcDir: string,
): Promise<{ rewritten: number; leftOver: string[] }> {
  const SRC = srcDir;
  const modTexts = new Map<string, string>();
  async function modText(path: string): Promise<string> {
    const cached = modTexts.get(path);
    if (cached !== undefined) return cached;
    const text = await Deno.readTextFile(path);
    modTexts.set(path, text);
    return text;
  }

  let rewritten = 0;
  const leftOver: string[] = [];
  for await (const file of sourceFiles(SRC)) {
    const text = await Deno.readTextFile(file);
    let changed = false;
    const out = [];
    let last = 0;
    for (const m of text.matchAll(STATEMENT)) {
      const [statement, keyword, typeWord, list, spec] = m as unknown as [
        string,
        string,
        string | undefined,
        string,
        string,
      ];
      const violation = layerViolation(file, spec);
      const bypass = violation === null ? null : BYPASS.exec(violation);
      if (bypass === null) continue;
      const source = `${SRC}${bypass[1]}`;
      const modPath = `${SRC}${bypass[2]}`;
      let mod = await modText(modPath);
      const { named, stars } = exportsOf(modPath, mod);
      const names = parseNames(list, typeWord !== undefined);
      const missing: Name[] = [];
      const clash = names.find((n) => {
        const from = named.get(n.exported);
        if (from === undefined) {
          if (!stars.includes(source)) missing.push({ ...n, text: n.exported });
          return false;
        }
        return from !== source;
      });
      if (clash !== undefined) {
        leftOver.push(
          `${file}: ${bypass[2]} already exports "${clash.exported}" from another file; import ${
            bypass[1]
          } by hand`,
        );
        continue;
      }
      if (missing.length > 0) {
        mod = addExports(modPath, mod, source, missing);
        modTexts.set(modPath, mod);
      }
      out.push(text.slice(last, m.index));
      out.push(
        `${keyword}${typeWord ?? ""} { ${
          list.trim().replace(/\s*\n\s*/g, " ").replace(/,$/, "")
        } } ` +
          `from "${relative(file, modPath)}";\n`,
      );
      last = (m.index ?? 0) + statement.length;
      changed = true;
      rewritten++;
    }
    if (!changed) continue;
    out.push(text.slice(last));
    await Deno.writeTextFile(file, mergeImports(out.join("")));
  }
  for (const [path, text] of modTexts) await Deno.writeTextFile(path, text);
  return { rewritten, leftOver };
}

/** Merge the `import` statements of one file that name the same `mod.ts`. */
function mergeImports(text: string): string {
  const bySpec = new Map<string, RegExpMatchArray[]>();
  for (const m of text.matchAll(STATEMENT)) {
    if (m[1] !== "import" || !(m[4] as string).endsWith("/mod.ts")) continue;
    bySpec.set(m[4] as string, [...(bySpec.get(m[4] as string) ?? []), m]);
  }
  let result = text;
  for (const [spec, matches] of bySpec) {
    if (matches.length < 2) continue;
    const names = matches.flatMap((m) => parseNames(m[3] as string, m[2] !== undefined));
    const unique = [...new Map(names.map((n) => [`${n.typeOnly}:${n.text}`, n])).values()];
    const allType = unique.every((n) => n.typeOnly);
    const merged = `import${allType ? " type" : ""} { ${
      listText(unique, allType)
    } } from "${spec}";\n`;
    // Replace the first statement, drop the others (from the end, so offsets stay valid).
    for (const m of [...matches].reverse()) {
      const start = result.indexOf(m[0]);
      result = result.slice(0, start) + (m === matches[0] ? merged : "") +
        result.slice(start + m[0].length);
    }
  }
  return result;
}

if (import.meta.main) {
  const { rewritten, leftOver } = await fixEntryImports(
    new URL("../src/", import.meta.url).pathname,
  );
  const encoder = new TextEncoder();
  Deno.stdout.writeSync(encoder.encode(`${rewritten} imports now go through a mod.ts\n`));
  for (const line of leftOver) Deno.stdout.writeSync(encoder.encode(`${line}\n`));
}
