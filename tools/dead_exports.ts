/**
 * List the exports of `src/` (and `main.ts`) by who uses them, so exports nothing needs do not
 * pile up:
 *
 * - used: imported by a file that is not a test (`src/`, `main.ts`, `bench/`, `tools/`);
 * - test-only: imported only by tests (`*_test.ts`, `*_testing.ts`, `tests/`) or by a doc
 *   example (an `@example` block, which `deno test --doc` runs). A testing seam is fine;
 * - boundary: imported by nobody, but a type in the signature of an export that is used, so it
 *   stays exported for whoever calls that export;
 * - module-internal: imported by nobody, used inside its own file: drop the `export` keyword;
 * - unused: imported by nobody and not used inside its own file: delete it.
 *
 * A name a `mod.ts` re-exports counts as used only through that `mod.ts` name; the re-export
 * itself is listed too. The scan is text-based (no compiler API): it reads `import`/`export`
 * statements and `const { … } = await import("…")`, resolving relative paths.
 *
 *     deno task dead-exports          # summary, then every export not used by product code
 *     deno task dead-exports --all    # every export with its users
 *     deno task dead-exports:check    # exit 1 on a module-internal or unused export (CI)
 *
 * @module
 */

/** Who uses an export. */
export type Use = "used" | "test-only" | "boundary" | "module-internal" | "unused";

/** One exported name of one file. */
export interface ExportEntry {
  /** Path relative to the repository, e.g. `src/mysql/url.ts`. */
  readonly file: string;
  readonly name: string;
  /** `function`, `type`, `interface`, … or `re-export`. */
  readonly kind: string;
  /** For a re-export: the file and name it passes on. */
  readonly from?: { readonly file: string; readonly name: string };
  /** The declaration text without function bodies (empty for a re-export). */
  readonly surface: string;
}

/** One file's imports and exports, as read from its text. */
export interface ModuleInfo {
  readonly exports: ExportEntry[];
  /** `export * from` targets. */
  readonly stars: string[];
  /** Names imported by this file: target file → names. */
  readonly imports: Map<string, Set<string>>;
  /**
   * Names imported from a path built at run time (code a test hands a subprocess): any export
   * of that name counts as used by this file.
   */
  readonly namesFromComputedPaths: Set<string>;
  /** Names imported by the `@example` blocks of this file: target file → names. */
  readonly docImports: Map<string, Set<string>>;
  /** The text with comments blanked out. */
  readonly code: string;
}

/** Whether a file is test code: its importers count as tests. */
export function isTestFile(path: string): boolean {
  return /(_test|_testing)\.ts$/.test(path) || path.startsWith("tests/");
}

/**
 * Blank out comments (keeping line breaks), so commented code and JSDoc text are not read as
 * code. Strings, template literals and regular expressions are skipped over whole.
 */
export function stripComments(text: string): string {
  let out = "";
  let i = 0;
  let lastSignificant = "";
  const templateDepth: number[] = [];
  let braceDepth = 0;
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === "/" && next === "/") {
      const end = text.indexOf("\n", i);
      const stop = end === -1 ? text.length : end;
      out += " ".repeat(stop - i);
      i = stop;
      continue;
    }
    if (c === "/" && next === "*") {
      const end = text.indexOf("*/", i + 2);
      const stop = end === -1 ? text.length : end + 2;
      out += text.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < text.length && text[j] !== c && text[j] !== "\n") j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      lastSignificant = c;
      continue;
    }
    if (c === "`" || (c === "}" && templateDepth.at(-1) === braceDepth)) {
      if (c === "}") templateDepth.pop();
      let j = i + 1;
      while (j < text.length && text[j] !== "`" && !(text[j] === "$" && text[j + 1] === "{")) {
        j += text[j] === "\\" ? 2 : 1;
      }
      if (text[j] === "$") {
        templateDepth.push(braceDepth);
        j += 1;
      }
      out += text.slice(i, j + 1);
      i = j + 1;
      lastSignificant = "`";
      continue;
    }
    if (c === "/" && (lastSignificant === "" || "(,=:[!&|?{};+-*%<>~^".includes(lastSignificant))) {
      let j = i + 1;
      let inClass = false;
      while (j < text.length && text[j] !== "\n" && (inClass || text[j] !== "/")) {
        if (text[j] === "[") inClass = true;
        if (text[j] === "]") inClass = false;
        j += text[j] === "\\" ? 2 : 1;
      }
      out += text.slice(i, j + 1);
      i = j + 1;
      lastSignificant = "/";
      continue;
    }
    if (c === "{") braceDepth++;
    if (c === "}") braceDepth--;
    if (!/\s/.test(c)) lastSignificant = /\w/.test(c) ? "a" : c;
    out += c;
    i++;
  }
  return out;
}

/** The index just past the bracket that closes the one at `open`. */
function closing(code: string, open: number): number {
  const pairs: Record<string, string> = { "(": ")", "[": "]", "{": "}" };
  const stack: string[] = [];
  for (let i = open; i < code.length; i++) {
    const c = code[i] as string;
    if (c === '"' || c === "'" || c === "`") {
      i++;
      while (i < code.length && code[i] !== c) i += code[i] === "\\" ? 2 : 1;
      continue;
    }
    if (pairs[c] !== undefined) stack.push(pairs[c]);
    else if (c === stack.at(-1)) {
      stack.pop();
      if (stack.length === 0) return i + 1;
    }
  }
  return code.length;
}

/**
 * The part of a declaration a caller sees: a function without its body, a constant's type (or
 * its whole initialiser when it has none), a type, interface, enum or class whole.
 */
function surfaceOf(code: string, start: number, kind: string): string {
  if (kind === "function") {
    const params = code.indexOf("(", start);
    let i = closing(code, params);
    let last = ")";
    for (; i < code.length; i++) {
      const c = code[i] as string;
      if (c === "{" && !":|&,(<".includes(last) && !code.slice(0, i).trimEnd().endsWith("=>")) {
        break;
      }
      if ("([{".includes(c)) {
        i = closing(code, i) - 1;
        last = ")";
        continue;
      }
      if (!/\s/.test(c)) last = c;
    }
    return code.slice(start, i);
  }
  // Everything else: up to the end of the statement (a `;` or a closing brace at depth 0).
  let i = start;
  for (; i < code.length; i++) {
    const c = code[i] as string;
    if ("([{".includes(c)) {
      i = closing(code, i) - 1;
      if (c === "{" && (kind === "interface" || kind === "class" || kind === "enum")) break;
      continue;
    }
    if (
      c === ";" || (c === "\n" && /^\n(export|const|function|interface|type|class)\b/.test(
        code.slice(i, i + 12),
      ))
    ) break;
  }
  const text = code.slice(start, i + 1);
  if (kind === "const" || kind === "let") {
    const annotated = /^[^=]*?\b\w+\s*:\s*([^=]+)=/.exec(text);
    if (annotated) return annotated[1] as string;
  }
  return text;
}

const DECLARATION =
  /^export\s+(?:declare\s+)?(?:async\s+)?(?:abstract\s+)?(function\*?|const\s+enum|const|let|var|class|interface|type|enum|namespace)\s+(\w+)/gm;
const LIST = /^(export|import)(\s+type)?\s*\{([^}]*)\}\s*(?:from\s*"([^"]+)")?/gm;
const STAR = /^export\s+\*\s+from\s*"([^"]+)"/gm;
const DYNAMIC = /\{([^}]*)\}\s*=\s*await\s+import\(\s*"([^"]+)"\s*\)/g;
const COMPUTED = /\{([^}]*)\}\s*(?:from|=\s*await\s+import\()\s*\$\{/g;
const EXAMPLE_BLOCK = /```ts\n([\s\S]*?)```/g;

/** The names of an `{ a, type b, c as d }` list as [name in the source, name here]. */
function listNames(list: string): [string, string][] {
  return list.split(",").map((n) => n.trim().replace(/^type\s+/, "")).filter((n) => n !== "")
    .map((n) => {
      const [source, local] = n.split(/\s+as\s+|\s*:\s*/);
      return [source as string, (local ?? source) as string];
    });
}

function resolve(fromFile: string, specifier: string): string | null {
  if (!specifier.startsWith(".")) return null;
  const url = new URL(specifier, `file:///${fromFile}`);
  return url.pathname.slice(1);
}

function addImport(into: Map<string, Set<string>>, file: string | null, names: string[]): void {
  if (file === null) return;
  const set = into.get(file) ?? new Set<string>();
  for (const n of names) set.add(n);
  into.set(file, set);
}

/** Read the imports and exports of one file. */
export function readModule(file: string, text: string): ModuleInfo {
  const code = stripComments(text);
  const exports: ExportEntry[] = [];
  const stars: string[] = [];
  const imports = new Map<string, Set<string>>();
  const docImports = new Map<string, Set<string>>();
  const importedAs = new Map<string, { file: string; name: string }>();
  for (const m of code.matchAll(LIST)) {
    const target = m[4] === undefined ? null : resolve(file, m[4]);
    const names = listNames(m[3] as string);
    if (m[1] === "import") {
      addImport(imports, target, names.map(([source]) => source));
      for (const [source, local] of names) {
        if (target !== null) importedAs.set(local, { file: target, name: source });
      }
    }
  }
  for (const m of code.matchAll(LIST)) {
    if (m[1] !== "export") continue;
    const target = m[4] === undefined ? null : resolve(file, m[4]);
    for (const [source, exported] of listNames(m[3] as string)) {
      const from = target !== null ? { file: target, name: source } : importedAs.get(source);
      if (from !== undefined) {
        exports.push({ file, name: exported, kind: "re-export", from, surface: "" });
      } else if (m[4] === undefined) {
        const declared = new RegExp(
          `^(?:declare\\s+)?(?:async\\s+)?(function|const|let|class|` +
            `interface|type|enum)\\s+${source}\\b`,
          "m",
        ).exec(code);
        const kind = declared?.[1] ?? "const";
        exports.push({
          file,
          name: exported,
          kind,
          surface: declared ? surfaceOf(code, declared.index, kind) : "",
        });
      }
    }
  }
  for (const m of code.matchAll(STAR)) {
    const target = resolve(file, m[1] as string);
    if (target !== null) stars.push(target);
  }
  for (const m of code.matchAll(DECLARATION)) {
    const kind = (m[1] as string).replace(/\*$/, "").replace(/^const\s+enum$/, "enum");
    exports.push({ file, name: m[2] as string, kind, surface: surfaceOf(code, m.index, kind) });
  }
  for (const m of text.matchAll(DYNAMIC)) {
    addImport(imports, resolve(file, m[2] as string), listNames(m[1] as string).map(([s]) => s));
  }
  const namesFromComputedPaths = new Set<string>();
  for (const m of text.matchAll(COMPUTED)) {
    for (const [source] of listNames(m[1] as string)) namesFromComputedPaths.add(source);
  }
  for (const comment of text.matchAll(/\/\*\*[\s\S]*?\*\//g)) {
    const body = comment[0].replace(/^\s*\* ?/gm, "");
    for (const block of body.matchAll(EXAMPLE_BLOCK)) {
      for (const m of (block[1] as string).matchAll(LIST)) {
        if (m[1] !== "import" || m[4] === undefined) continue;
        addImport(docImports, resolve(file, m[4]), listNames(m[3] as string).map(([s]) => s));
      }
    }
  }
  return { exports, stars, imports, namesFromComputedPaths, docImports, code };
}

/** One export with the verdict of {@linkcode classify}. */
export interface Verdict {
  readonly entry: ExportEntry;
  readonly use: Use;
  /** The files that import it (directly or through a re-export), `(doc)` for examples. */
  readonly users: readonly string[];
  /** Whether its own file uses the name besides declaring and exporting it. */
  readonly usedInside: boolean;
}

/** Before a name: not part of a longer word and not a member access (`a.name`, unlike `...name`). */
const NOT_MEMBER = "(?<![\\w$])(?<!(?<!\\.)\\.)";

function key(file: string, name: string): string {
  return `${file}#${name}`;
}

/** Classify every export of the given files by who imports it. */
export function classify(
  modules: ReadonlyMap<string, ModuleInfo>,
  scanned: (file: string) => boolean,
): Verdict[] {
  // Where an import of `name` from `file` lands: the file that exports it, through `export *`.
  const owner = (file: string, name: string, seen = new Set<string>()): string => {
    const info = modules.get(file);
    if (info === undefined || seen.has(file)) return file;
    seen.add(file);
    if (info.exports.some((e) => e.name === name)) return file;
    for (const star of info.stars) {
      const found = owner(star, name, seen);
      if (modules.get(found)?.exports.some((e) => e.name === name)) return found;
    }
    return file;
  };
  const direct = new Map<string, Set<string>>();
  const use = (file: string, name: string, user: string) => {
    const k = key(owner(file, name), name);
    direct.set(k, (direct.get(k) ?? new Set()).add(user));
  };
  for (const [user, info] of modules) {
    for (const [file, names] of info.imports) for (const n of names) use(file, n, user);
    for (const [file, names] of info.docImports) for (const n of names) use(file, n, "(doc)");
  }
  const all = [...modules.values()].flatMap((m) => m.exports).filter((e) => scanned(e.file));
  // Users of an export: its importers plus the users of every re-export of it.
  const usersOf = (entry: ExportEntry, seen = new Set<string>()): Set<string> => {
    const k = key(entry.file, entry.name);
    const users = new Set(direct.get(k) ?? []);
    if (seen.has(k)) return users;
    seen.add(k);
    for (const other of modules.values()) {
      for (const re of other.exports) {
        if (re.from === undefined) continue;
        if (key(owner(re.from.file, re.from.name), re.from.name) !== k) continue;
        for (const u of usersOf(re, seen)) users.add(u);
      }
    }
    return users;
  };
  const verdicts: Verdict[] = all.map((entry) => {
    const computed = [...modules].filter(([, m]) => m.namesFromComputedPaths.has(entry.name));
    const users = [...new Set([...usersOf(entry), ...computed.map(([file]) => file)])]
      .filter((u) => u !== entry.file).sort();
    // Mentions of the name in its own file besides its declarations and `export { … }` lists.
    const code = (modules.get(entry.file)?.code ?? "").replace(
      /^export(\s+type)?\s*\{[^}]*\}/gm,
      "",
    );
    const mentions = code.match(new RegExp(`${NOT_MEMBER}${entry.name}\\b`, "g"))?.length ?? 0;
    const declarations = code.match(
      new RegExp(
        `\\b(?:function\\*?|const|let|class|interface|type|enum)\\s+${entry.name}\\b`,
        "g",
      ),
    )?.length ?? 0;
    const use: Use = users.some((u) => u !== "(doc)" && !isTestFile(u))
      ? "used"
      : users.length > 0
      ? "test-only"
      : entry.kind !== "re-export" && mentions > Math.max(declarations, 1)
      ? "module-internal"
      : "unused";
    return { entry, use, users, usedInside: mentions > Math.max(declarations, 1) };
  });
  // A type named in the surface of an export that stays exported (or a value named there as
  // `typeof`) stays exported too, and so does a `mod.ts` re-export of it next to a re-export
  // of that export.
  const origin = (entry: ExportEntry, depth = 0): ExportEntry => {
    if (entry.from === undefined || depth > 10) return entry;
    const { file, name } = entry.from;
    const found = modules.get(owner(file, name))?.exports.find((e) => e.name === name);
    return found === undefined ? entry : origin(found, depth + 1);
  };
  const kept: Verdict[] = verdicts.filter((v) => v.use === "used" || v.use === "test-only");
  const TYPE_KINDS = ["type", "interface", "class", "enum"];
  for (let i = 0; i < kept.length; i++) {
    const surface = origin((kept[i] as Verdict).entry).surface;
    verdicts.forEach((v, j) => {
      if (v.use !== "module-internal" && !(v.use === "unused" && v.entry.from !== undefined)) {
        return;
      }
      if (v.entry.file !== (kept[i] as Verdict).entry.file) return;
      // A type by its name; a value only as `typeof name` (a default value is not a type).
      const mention = TYPE_KINDS.includes(origin(v.entry).kind)
        ? `${NOT_MEMBER}${v.entry.name}\\b`
        : `\\btypeof\\s+${v.entry.name}\\b`;
      if (!new RegExp(mention).test(surface)) return;
      const boundary = { ...v, use: "boundary" as const };
      verdicts[j] = boundary;
      kept.push(boundary);
    });
  }
  return verdicts;
}

/** Every `.ts` file below `dir` (node_modules skipped), appended to `into` as `dir/…` paths. */
export async function walk(dir: string, into: string[]): Promise<void> {
  for await (const e of Deno.readDir(dir)) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory && e.name !== "node_modules") await walk(path, into);
    else if (e.isFile && e.name.endsWith(".ts")) into.push(path);
  }
}

/** Only its tests use it, and its own file does not: a candidate for deletion with its tests. */
function onlyForTests(v: Verdict): boolean {
  return v.use === "test-only" && !v.usedInside && v.entry.from === undefined;
}

async function main(args: string[]): Promise<number> {
  const files = ["main.ts"];
  for (const dir of ["src", "tests", "bench", "tools"]) await walk(dir, files);
  const modules = new Map<string, ModuleInfo>();
  for (const f of files) modules.set(f, readModule(f, await Deno.readTextFile(f)));
  const scanned = (f: string) => (f === "main.ts" || f.startsWith("src/")) && !isTestFile(f);
  const verdicts = classify(modules, scanned);
  const count = (u: Use) => verdicts.filter((v) => v.use === u).length;
  const lines = [
    `${verdicts.length} exports in src/ and main.ts:`,
    `  used              ${count("used")}`,
    `  test-only         ${count("test-only")} (${
      verdicts.filter(onlyForTests).length
    } of them not used inside their own file either)`,
    `  boundary          ${count("boundary")}`,
    `  module-internal   ${count("module-internal")}`,
    `  unused            ${count("unused")}`,
  ];
  const failing = (v: Verdict) => v.use === "module-internal" || v.use === "unused";
  const show = verdicts.filter(
    args.includes("--all")
      ? () => true
      : args.includes("--check")
      ? failing
      : (v) => v.use !== "used" && v.use !== "boundary",
  );
  show.sort((a, b) => a.use.localeCompare(b.use) || a.entry.file.localeCompare(b.entry.file));
  for (const v of show) {
    lines.push(
      `${v.use.padEnd(16)} ${v.entry.file}: ${v.entry.name} (${v.entry.kind})` +
        (onlyForTests(v) ? " (not used in its file)" : "") +
        (v.users.length > 0 ? ` ← ${v.users.join(", ")}` : ""),
    );
  }
  // deno-lint-ignore no-console
  console.log(lines.join("\n"));
  if (args.includes("--check") && verdicts.some(failing)) {
    // deno-lint-ignore no-console
    console.error(
      "Exports nothing imports (tools/dead_exports.ts): delete unused code, drop the `export` " +
        "keyword of module-internal code.",
    );
    return 1;
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
