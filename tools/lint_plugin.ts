// deno-lint-ignore-file statusengine/no-default-export
/**
 * House lint rules, loaded by `deno lint` through deno.json:
 *
 * - `statusengine/no-default-export`: named exports only, so a symbol has one
 *   name everywhere.
 * - `statusengine/no-floating-async-call`: a heuristic for promises nobody
 *   awaits: a statement that only calls an async function declared in the
 *   same file, or a `.then()` without a rejection handler. Deliberate
 *   detachment is written `void task()`, and the task catches its own errors.
 * - `statusengine/layer-imports`: an import between two modules of `src/` must
 *   follow {@linkcode LAYERS}, so the data flow broker → consumer → decode →
 *   writer → MySQL stays visible in the import graph (docs/architecture.md#layers);
 *   and a directory with a `mod.ts` is imported from other modules through that
 *   file only, so what a directory offers the rest of the code is listed in one place.
 * - `statusengine/library-homes`: an outside library is imported by the one module of `src/`
 *   that {@linkcode LIBRARY_HOMES} names, so that module is the only code a change of the
 *   library touches.
 * - `statusengine/src-imports-no-tests`: nothing below `src/`, tests included,
 *   imports from `tests/`, the one home of the shared test helpers.
 * - `statusengine/one-backend-branch`: the daemon and the consumer core compare nothing with a
 *   backend's name (`"gearman"`, `"rabbitmq"`) outside {@linkcode BACKEND_FACTORY}: the one
 *   place that picks the backend builds it, and everything above the transport seam
 *   (src/consumer/contract.ts) works the same on either (docs/consumption.md).
 *
 * {@linkcode layerCycle} keeps {@linkcode LAYERS} free of circles and
 * {@linkcode findCycle} the files of `src/` (both checked by tools/lint_plugin_test.ts).
 *
 * @module
 */

/**
 * Which module of `src/` may import which: one entry per directory (or top-level file) of
 * `src/`, listing what it may import besides itself. Data flows broker → consumer → decode →
 * writer → MySQL; an import goes with that flow or down to a foundation module (util, log,
 * config, metrics), never back. `"*"` marks the composition roots, which wire everything
 * together. A directory that is not listed is reported, so adding one means deciding its
 * place here. No two entries may lead to each other ({@linkcode layerCycle}). The table in
 * docs/architecture.md#layers is generated from this one (`deno task config-reference`).
 */
export const LAYERS: Readonly<Record<string, readonly string[] | "*">> = {
  // Foundation: imports nothing of ours, or only what is listed.
  util: [],
  "build_info": [],
  version: ["build_info"],
  log: ["util"],
  // Pure decoding (bytes → rows): no I/O, no logging.
  events: ["util"],
  config: ["util", "log", "events"],
  metrics: ["util", "log", "events", "config"],
  http: ["util", "log", "metrics"],
  // The data flow.
  consumer: ["util", "log", "metrics"],
  gearman: ["util", "log", "consumer"],
  amqp: ["util", "log", "consumer", "config"],
  pipeline: ["util", "log", "events", "mysql", "consumer", "metrics"],
  mysql: ["util", "log", "events", "metrics", "config"],
  // Side outputs and tools.
  perfdata: ["util", "log", "events", "metrics"],
  commands: ["util", "log", "http", "metrics", "gearman", "amqp", "config"],
  cleanup: ["util", "log", "config"],
  synthetic: ["util", "log", "events"],
  // statusengine_tasks → validated commands → the broker or the command file.
  tasks: ["util", "log", "mysql", "commands", "metrics"],
  // Composition roots.
  cli: "*",
  daemon: "*",
};

/**
 * The one module of `src/` that may import each outside library (named as in deno.json
 * "imports"): the rest of the code uses that module's own functions and types, so upgrading or
 * replacing a library touches one place. `null` means test code only. Tests, benches,
 * `*_testing.ts` helpers and tools/ are exempt. docs/architecture.md#layers says the same.
 */
export const LIBRARY_HOMES: Readonly<Record<string, string | null>> = {
  "prom-client": "metrics/",
  ws: "http/",
  "@types/ws": "http/",
  "@cloudamqp/amqp-client": "amqp/",
  mysql2: "mysql/",
  "mysql2/promise": "mysql/",
  yaml: "config/",
  "fastest-levenshtein": "config/",
  protobufjs: "perfdata/",
  snappyjs: "perfdata/",
  "@logtape/logtape": "log.ts",
  "@sinonjs/fake-timers": null,
};

/** Test code assembles pieces of several layers on purpose. */
const TEST_FILE = /(_test|_bench|_testing)\.ts$/;

/**
 * The module of a path below `src/`: its first directory, or the file name for a file
 * directly in `src/`.
 *
 * @param rel Path relative to `src/`, e.g. `mysql/writer.ts`.
 * @returns E.g. `mysql`, `log`.
 */
function moduleOf(rel: string): string {
  const slash = rel.indexOf("/");
  return slash === -1 ? rel.replace(/\.ts$/, "") : rel.slice(0, slash);
}

/**
 * Whether a directory of `src/` has an entry point (`mod.ts`) that other modules must import
 * it through.
 *
 * @param srcDir Absolute path of `src/`, ending in a slash.
 * @param dir The directory, e.g. `mysql`.
 * @returns True when `src/<dir>/mod.ts` exists.
 */
function hasEntryPoint(srcDir: string, dir: string): boolean {
  try {
    return Deno.statSync(`${srcDir}${dir}/mod.ts`).isFile;
  } catch {
    return false;
  }
}

/**
 * Check one import of a file below `src/`.
 *
 * @param filename Absolute path (or file URL) of the importing file.
 * @param specifier The import specifier as written.
 * @param entryPoint Whether a directory has a `mod.ts` (the file system unless a test says).
 * @returns A message when the import breaks the layering or bypasses an entry point, else null.
 */
export function layerViolation(
  filename: string,
  specifier: string,
  entryPoint: (srcDir: string, dir: string) => boolean = hasEntryPoint,
): string | null {
  if (!specifier.startsWith(".")) return null;
  const path = filename.startsWith("file://") ? new URL(filename).pathname : filename;
  const root = path.lastIndexOf("/src/");
  if (root === -1 || TEST_FILE.test(path)) return null;
  const srcDir = path.slice(0, root + "/src/".length);
  const from = moduleOf(path.slice(srcDir.length));
  const target = new URL(specifier, `file://${path}`).pathname;
  if (!target.startsWith(srcDir)) return null;
  const rel = target.slice(srcDir.length);
  const to = moduleOf(rel);
  if (to === from) return null;
  const allowed = LAYERS[from];
  if (allowed === undefined) {
    return `src/${from} is not in the layer table of tools/lint_plugin.ts: add it with the modules it may import`;
  }
  if (allowed !== "*" && !allowed.includes(to)) {
    return `Backward import: src/${from} may not import src/${rel} (data flows broker → ` +
      `consumer → decode → writer → MySQL; the allowed imports are in LAYERS, ` +
      `tools/lint_plugin.ts)`;
  }
  if (rel !== `${to}/mod.ts` && rel.includes("/") && entryPoint(srcDir, to)) {
    return `Import src/${rel} through src/${to}/mod.ts, the entry point of src/${to} ` +
      `(export what is needed there)`;
  }
  return null;
}

/**
 * The library a bare or `npm:` specifier names, with its subpath and without a version.
 *
 * @param specifier E.g. `mysql2/promise`, `npm:@cloudamqp/amqp-client@4.1.1`.
 * @returns E.g. `mysql2/promise`, `@cloudamqp/amqp-client`.
 */
function libraryOf(specifier: string): string {
  const bare = specifier.replace(/^npm:\/?/, "");
  const parts = bare.split("/");
  const nameParts = bare.startsWith("@") ? 2 : 1;
  const name = parts.slice(0, nameParts).join("/").replace(/(.)@[^/]*$/, "$1");
  return [name, ...parts.slice(nameParts)].join("/");
}

/**
 * Check one import of an outside library by a file below `src/`.
 *
 * @param filename Absolute path (or file URL) of the importing file.
 * @param specifier The import specifier as written.
 * @returns A message when the library belongs to another module of `src/`, else null.
 */
export function libraryViolation(filename: string, specifier: string): string | null {
  if (/^(\.|\/|node:|jsr:|https?:|file:)/.test(specifier)) return null;
  const path = filename.startsWith("file://") ? new URL(filename).pathname : filename;
  const root = path.lastIndexOf("/src/");
  if (root === -1 || TEST_FILE.test(path)) return null;
  const library = libraryOf(specifier);
  const key = library in LIBRARY_HOMES
    ? library
    : Object.keys(LIBRARY_HOMES).find((name) => library.startsWith(`${name}/`));
  if (key === undefined) return null;
  const home = LIBRARY_HOMES[key] ?? null;
  const from = moduleOf(path.slice(root + "/src/".length));
  if (home !== null && moduleOf(home) === from) return null;
  const where = home === null ? "test code only" : `only src/${home}`;
  return `${key} is imported by ${where} (LIBRARY_HOMES, tools/lint_plugin.ts): use or extend ` +
    `what that module offers instead`;
}

/**
 * A circle in a graph of imports: a module that, following its edges, leads back to itself.
 * The layers only mean "data flows one way" while the table has none, and a circle of files
 * makes the order in which they are evaluated depend on who is imported first.
 *
 * @param edges Each module with the modules it imports (or may import).
 * @returns The modules of one circle with the first repeated at the end, e.g.
 *   `["http", "metrics", "http"]`, or null when there is none.
 */
export function findCycle(edges: ReadonlyMap<string, Iterable<string>>): string[] | null {
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (node: string): string[] | null => {
    const open = path.indexOf(node);
    if (open !== -1) return [...path.slice(open), node];
    if (done.has(node)) return null;
    path.push(node);
    for (const next of edges.get(node) ?? []) {
      const cycle = visit(next);
      if (cycle !== null) return cycle;
    }
    path.pop();
    done.add(node);
    return null;
  };
  for (const node of edges.keys()) {
    const cycle = visit(node);
    if (cycle !== null) return cycle;
  }
  return null;
}

/**
 * A circle in a layer table such as {@linkcode LAYERS}: two modules that may import each other,
 * directly or through others. A composition root (`"*"`) may import every module that is not a
 * root, so a module that lists a root forms a circle with it; which root imports which is left
 * to the check on files.
 *
 * @param layers The table.
 * @returns The modules of one circle, or null.
 */
export function layerCycle(
  layers: Readonly<Record<string, readonly string[] | "*">>,
): string[] | null {
  const below = Object.keys(layers).filter((m) => layers[m] !== "*");
  return findCycle(
    new Map(
      Object.entries(layers).map(([name, allowed]) => [name, allowed === "*" ? below : allowed]),
    ),
  );
}

/**
 * Check that a file below `src/`, its tests included, imports nothing from `tests/`: the shared
 * test helpers have one home, `tests/helpers/`, and a test that needs them lives in `tests/`
 * (`tests/<module>/` for the tests of one module of `src/`).
 *
 * @param filename Absolute path (or file URL) of the importing file.
 * @param specifier The import specifier as written.
 * @returns A message when the import reaches into `tests/`, else null.
 */
export function testsImportViolation(filename: string, specifier: string): string | null {
  if (!specifier.startsWith(".")) return null;
  const path = filename.startsWith("file://") ? new URL(filename).pathname : filename;
  const root = path.lastIndexOf("/src/");
  if (root === -1) return null;
  const testsDir = `${path.slice(0, root)}/tests/`;
  const target = new URL(specifier, `file://${path}`).pathname;
  if (!target.startsWith(testsDir)) return null;
  return `src/ imports nothing from tests/ (${target.slice(root + 1)}): a test that needs ` +
    `tests/helpers/ lives in tests/<module>/, beside the other tests that use them`;
}

/** The one file of the daemon and the consumer core that may branch on the queue backend. */
export const BACKEND_FACTORY = "daemon/consumers.ts";

/** Backend names (`--consumer`) a comparison would branch on. */
const BACKEND_NAMES = new Set(["gearman", "rabbitmq"]);

/**
 * Whether a file is held to `statusengine/one-backend-branch`: a file of the daemon or of the
 * consumer core, not a test, not the factory. The CLI's tools (status, publish, losstest) and
 * the settings speak of the backends by name and are not on the consuming path.
 *
 * @param filename Absolute path (or file URL) of the file.
 * @returns True when the file may not compare with a backend name.
 */
export function backendBranchForbidden(filename: string): boolean {
  const path = filename.startsWith("file://") ? new URL(filename).pathname : filename;
  const root = path.lastIndexOf("/src/");
  if (root === -1 || TEST_FILE.test(path)) return false;
  const file = path.slice(root + "/src/".length);
  return (file.startsWith("daemon/") || file.startsWith("consumer/")) && file !== BACKEND_FACTORY;
}

/**
 * The visitor of a rule about imports: it reports what `violation` says of each import,
 * re-export and `export *` source.
 */
function importVisitor(
  context: Deno.lint.RuleContext,
  violation: (filename: string, specifier: string) => string | null,
): Deno.lint.LintVisitor {
  const check = (node: Deno.lint.Node, source: Deno.lint.StringLiteral | null | undefined) => {
    if (source === null || source === undefined) return;
    const message = violation(context.filename, source.value);
    if (message !== null) context.report({ node, message });
  };
  return {
    ImportDeclaration(node) {
      check(node, node.source);
    },
    ExportNamedDeclaration(node) {
      check(node, node.source);
    },
    ExportAllDeclaration(node) {
      check(node, node.source);
    },
  };
}

const plugin: Deno.lint.Plugin = {
  name: "statusengine",
  rules: {
    "no-default-export": {
      create(context) {
        return {
          ExportDefaultDeclaration(node) {
            context.report({ node, message: "Use a named export instead of a default export" });
          },
        };
      },
    },
    "layer-imports": {
      create: (context) => importVisitor(context, layerViolation),
    },
    "library-homes": {
      create: (context) => importVisitor(context, libraryViolation),
    },
    "src-imports-no-tests": {
      create: (context) => importVisitor(context, testsImportViolation),
    },
    "one-backend-branch": {
      create(context) {
        if (!backendBranchForbidden(context.filename)) return {};
        const check = (node: Deno.lint.Node, side: Deno.lint.Node) => {
          if (side.type !== "Literal" || typeof side.value !== "string") return;
          if (!BACKEND_NAMES.has(side.value)) return;
          context.report({
            node,
            message: `Branches on the queue backend ("${side.value}") outside ` +
              `src/${BACKEND_FACTORY}: build what differs there (queueBackend()) and use it ` +
              `through the transport seam of src/consumer/contract.ts`,
          });
        };
        return {
          BinaryExpression(node) {
            if (!["===", "!==", "==", "!="].includes(node.operator)) return;
            check(node, node.left);
            check(node, node.right);
          },
          SwitchCase(node) {
            if (node.test !== null && node.test !== undefined) check(node, node.test);
          },
        };
      },
    },
    "no-floating-async-call": {
      create(context) {
        const asyncNames = new Set<string>();
        return {
          FunctionDeclaration(node) {
            if (node.async && node.id) asyncNames.add(node.id.name);
          },
          VariableDeclarator(node) {
            const init = node.init;
            if (
              node.id.type === "Identifier" && init !== null && init !== undefined &&
              (init.type === "ArrowFunctionExpression" || init.type === "FunctionExpression") &&
              init.async
            ) {
              asyncNames.add(node.id.name);
            }
          },
          "ExpressionStatement > CallExpression"(node: Deno.lint.CallExpression) {
            const callee = node.callee;
            if (callee.type === "Identifier" && asyncNames.has(callee.name)) {
              context.report({
                node,
                message:
                  `The promise of async "${callee.name}()" is dropped: await it, return it, or write "void ${callee.name}()" and let it handle its errors`,
              });
            }
            if (
              callee.type === "MemberExpression" && callee.property.type === "Identifier" &&
              callee.property.name === "then" && node.arguments.length < 2
            ) {
              context.report({
                node,
                message: '".then()" without a rejection handler drops errors: await it or add one',
              });
            }
          },
        };
      },
    },
  },
};

export default plugin;
