/**
 * The README and docs/ name files of the repository (the source map, the module map, "pinned in
 * tests/mysql/errors_test.ts"); a file moved or renamed without them leaves a page pointing at
 * nothing, as README's source map once put the job tracker in src/pipeline/.
 */
import assert from "node:assert/strict";

const root = new URL("../", import.meta.url);

/** Repository paths a Markdown page names: `src/…`, `tests/…`, `tools/…`, `bench/…`, `packaging/…`. */
function namedPaths(markdown: string): string[] {
  const paths = new Set<string>();
  for (
    const m of markdown.matchAll(/(?<![\w./-])((?:src|tests|tools|bench|packaging)\/[\w./*-]*)/g)
  ) {
    paths.add((m[1] as string).replace(/[.,:;]+$/, ""));
  }
  return [...paths];
}

/** Whether a named path exists; `dir/name.*` when some file of `dir/` starts with `name.`. */
function exists(path: string): boolean {
  const star = path.indexOf("*");
  if (star !== -1) {
    const prefix = path.slice(0, star);
    const dir = prefix.slice(0, prefix.lastIndexOf("/") + 1);
    if (!exists(dir)) return false;
    return [...Deno.readDirSync(new URL(dir, root))].some((e) =>
      `${dir}${e.name}`.startsWith(prefix)
    );
  }
  try {
    Deno.statSync(new URL(path, root));
    return true;
  } catch {
    return false;
  }
}

Deno.test("docs: every src/, tests/, tools/, bench/ and packaging/ path README.md and docs/*.md name exists", () => {
  const pages = [
    "README.md",
    ...[...Deno.readDirSync(new URL("docs/", root))].map((e) => `docs/${e.name}`),
  ].filter((p) => p.endsWith(".md"));
  const missing: string[] = [];
  let checked = 0;
  for (const page of pages) {
    for (const path of namedPaths(Deno.readTextFileSync(new URL(page, root)))) {
      checked++;
      if (!exists(path)) missing.push(`${page}: ${path}`);
    }
  }
  assert.deepEqual(missing, []);
  assert.ok(exists("packaging/systemd/statusengine-db-cleanup.*"));
  assert.ok(!exists("src/pipeline/job_tracker.ts") && !exists("src/nothing.*"));
  assert.ok(checked > 100, `only ${checked} paths found: the pattern no longer matches the docs`);
});

Deno.test("docs: the path pattern finds quoted paths and source-map rows, not URLs", () => {
  assert.deepEqual(
    namedPaths(
      "`src/mysql/job_tracker.ts`, src/pipeline/ job handler.\n" +
        "(tests/mysql/errors_test.ts). See https://example.org/src/x.ts and tests/<module>/,\n" +
        "packaging/systemd/statusengine-db-cleanup.*",
    ),
    [
      "src/mysql/job_tracker.ts",
      "src/pipeline/",
      "tests/mysql/errors_test.ts",
      "tests/",
      "packaging/systemd/statusengine-db-cleanup.*",
    ],
  );
});

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces become hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase()
    .replace(/`/g, "")
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** The anchors a Markdown page offers: its headings (repeats get -1, -2, …) and `<a id>`s. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const prose = markdown.replace(/^```[\s\S]*?^```$/gm, "");
  for (const m of prose.matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const base = slug(m[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of prose.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1] as string);
  return anchors;
}

// docs/running.md once linked shutdown.md#s3, an anchor no page had.
Deno.test("docs: every page.md#anchor link in README.md and docs/*.md names a heading or <a id> of that page", () => {
  const pages = [
    "README.md",
    ...[...Deno.readDirSync(new URL("docs/", root))].map((e) => `docs/${e.name}`),
  ].filter((p) => p.endsWith(".md"));
  const broken: string[] = [];
  let checked = 0;
  for (const page of pages) {
    const text = Deno.readTextFileSync(new URL(page, root)).replace(/^```[\s\S]*?^```$/gm, "");
    for (const m of text.matchAll(/\]\(([\w./-]*\.md)?#([^)\s]+)\)/g)) {
      const target = m[1] ? new URL(m[1], new URL(page, root)) : new URL(page, root);
      let markdown: string;
      try {
        markdown = Deno.readTextFileSync(target);
      } catch {
        broken.push(`${page}: ${m[0]} (no such page)`);
        continue;
      }
      checked++;
      if (!anchorsOf(markdown).has(m[2] as string)) broken.push(`${page}: ${m[0]}`);
    }
  }
  assert.deepEqual(broken, []);
  assert.ok(checked > 50, `only ${checked} anchor links found: the pattern no longer matches`);
  assert.ok(anchorsOf("## The `run` command (1)\n").has("the-run-command-1"));
});

Deno.test("docs: every file the module map names in a directory's row exists in that directory", () => {
  // The rows name their files bare (`session.ts`), which the path test above does not see: a file
  // merged away or renamed stayed in the map.
  const page = Deno.readTextFileSync(new URL("docs/architecture.md", root));
  const missing: string[] = [];
  let checked = 0;
  for (const [, dir = "", text = ""] of page.matchAll(/^\| `(src\/[\w/]*\/)` *\|(.*)\|$/gm)) {
    for (const [, name = ""] of text.matchAll(/`([\w.]+\.ts)`/g)) {
      checked++;
      if (!exists(`${dir}${name}`)) missing.push(`${dir}${name}`);
    }
  }
  assert.deepEqual(missing, []);
  assert.ok(checked > 50, `only ${checked} names found: the pattern no longer matches the map`);
});
