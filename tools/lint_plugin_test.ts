import assert from "node:assert/strict";
import plugin, {
  BACKEND_FACTORY,
  findCycle,
  layerCycle,
  LAYERS,
  layerViolation,
  LIBRARY_HOMES,
  libraryViolation,
  testsImportViolation,
} from "./lint_plugin.ts";
import { readModule, walk } from "./dead_exports.ts";

const SRC = "/repo/src";

/** Messages of one house rule for a file (absolute, or below {@link SRC}) with the given text. */
function ruleErrors(rule: string, file: string, source: string): string[] {
  return Deno.lint.runPlugin(plugin, file.startsWith("/") ? file : `${SRC}/${file}`, source)
    .filter((d) => d.id === `statusengine/${rule}`)
    .map((d) => d.message);
}

/** Messages of the layer rule for one file with the given source text. */
const layerErrors = (file: string, source: string) => ruleErrors("layer-imports", file, source);

Deno.test("lint layer-imports: a backward import fails (mysql → pipeline handler)", () => {
  const errors = layerErrors(
    "mysql/writer.ts",
    'import type { PerfdataSink } from "../pipeline/handler.ts";\n',
  );
  assert.equal(errors.length, 1);
  assert.match(errors[0] ?? "", /src\/mysql may not import src\/pipeline\/handler\.ts/);
});

Deno.test("lint layer-imports: perfdata may not import gearman, nor consumer mysql, nor events log", () => {
  assert.equal(
    layerErrors("perfdata/graphite.ts", 'import { x } from "../gearman/connection.ts";\n').length,
    1,
  );
  assert.equal(layerErrors("consumer/x.ts", 'import { x } from "../mysql/writer.ts";\n').length, 1);
  assert.equal(layerErrors("events/decode.ts", 'import { x } from "../log.ts";\n').length, 1);
  assert.equal(
    layerErrors("gearman/worker.ts", 'import { x } from "../mysql/url.ts";\n').length,
    1,
  );
});

Deno.test("lint layer-imports: re-exports and type-only imports are checked like imports", () => {
  assert.equal(
    layerErrors("mysql/mod.ts", 'export { x } from "../pipeline/pipeline.ts";\n').length,
    1,
  );
  assert.equal(layerErrors("mysql/mod.ts", 'export * from "../cli/mod.ts";\n').length, 1);
  assert.equal(
    layerErrors("mysql/mod.ts", 'import type { X } from "../amqp/consumer.ts";\n').length,
    1,
  );
});

Deno.test("lint layer-imports: imports with the flow, within a module and from the roots pass", () => {
  assert.deepEqual(
    layerErrors("pipeline/handler.ts", 'import { x } from "../mysql/writer.ts";\n'),
    [],
  );
  assert.deepEqual(layerErrors("mysql/writer.ts", 'import { x } from "./retry.ts";\n'), []);
  assert.deepEqual(layerErrors("mysql/writer.ts", 'import { x } from "../util/async.ts";\n'), []);
  assert.deepEqual(layerErrors("cli/run.ts", 'import { x } from "../pipeline/pipeline.ts";\n'), []);
  assert.deepEqual(
    layerErrors("daemon/start.ts", 'import { x } from "../gearman/consumer.ts";\n'),
    [],
  );
  assert.deepEqual(layerErrors("mysql/writer.ts", 'import mysql from "mysql2/promise";\n'), []);
});

Deno.test("lint layer-imports: the writers may not reach up into the pipeline", () => {
  assert.equal(
    layerErrors("mysql/writer.ts", 'import { JobTracker } from "../pipeline/job_tracker.ts";\n')
      .length,
    1,
  );
  assert.equal(
    layerErrors("mysql/writer.ts", 'import { x } from "../pipeline/pipeline.ts";\n').length,
    1,
  );
});

Deno.test("lint layer-imports: test code is exempt, files outside src/ are not checked", () => {
  assert.equal(layerViolation(`${SRC}/mysql/writer_test.ts`, "../pipeline/pipeline.ts"), null);
  assert.equal(layerViolation(`${SRC}/events/_testing.ts`, "../mysql/catalogue.ts"), null);
  assert.equal(layerViolation("/repo/tests/x_test.ts", "../src/pipeline/pipeline.ts"), null);
  assert.equal(layerViolation("/repo/bench/pipeline.ts", "../src/mysql/writer.ts"), null);
});

Deno.test("lint layer-imports: a module missing from the table is reported, so its place gets decided", () => {
  const errors = layerErrors("newdir/x.ts", 'import { x } from "../util/async.ts";\n');
  assert.equal(errors.length, 1);
  assert.match(errors[0] ?? "", /src\/newdir is not in the layer table/);
});

Deno.test("lint layer-imports: every directory and top-level file of src/ has a row", async () => {
  const missing: string[] = [];
  for await (const entry of Deno.readDir(new URL("../src/", import.meta.url))) {
    const name = entry.isDirectory ? entry.name : entry.name.replace(/\.ts$/, "");
    if (entry.isFile && !entry.name.endsWith(".ts")) continue;
    if (entry.isFile && /_test\.ts$/.test(entry.name)) continue;
    if (!(name in LAYERS)) missing.push(name);
  }
  assert.deepEqual(missing, []);
});

/** `src/` of this repository, where mysql/ and events/ have a mod.ts and util/ has none. */
const REPO_SRC = new URL("../src/", import.meta.url).pathname;

Deno.test("lint layer-imports: a directory with a mod.ts is imported through it from other modules", () => {
  const bypass = layerViolation(`${REPO_SRC}pipeline/handler.ts`, "../mysql/writer.ts");
  assert.match(bypass ?? "", /Import src\/mysql\/writer\.ts through src\/mysql\/mod\.ts/);
  assert.match(
    layerViolation(`${REPO_SRC}cli/status/format.ts`, "../../mysql/errors.ts") ?? "",
    /through src\/mysql\/mod\.ts/,
  );
  assert.equal(layerViolation(`${REPO_SRC}pipeline/handler.ts`, "../mysql/mod.ts"), null);
  // Within the directory, and into a directory without a mod.ts, any file may be named.
  assert.equal(layerViolation(`${REPO_SRC}mysql/writer.ts`, "./retry.ts"), null);
  assert.equal(layerViolation(`${REPO_SRC}mysql/writer.ts`, "../util/async.ts"), null);
  // A backward import is reported as such, not as a missing mod.ts.
  assert.match(
    layerViolation(`${REPO_SRC}mysql/writer.ts`, "../pipeline/handler.ts") ?? "",
    /Backward import/,
  );
  // Tests may reach into a directory.
  assert.equal(layerViolation(`${REPO_SRC}pipeline/handler_test.ts`, "../mysql/writer.ts"), null);
});

Deno.test("lint layer-imports: the entry-point check asks whether the target directory has a mod.ts", () => {
  const asked: string[] = [];
  const none = (_src: string, dir: string) => (asked.push(dir), false);
  assert.equal(layerViolation("/repo/src/pipeline/handler.ts", "../mysql/writer.ts", none), null);
  assert.deepEqual(asked, ["mysql"]);
  const all = () => true;
  assert.notEqual(layerViolation("/repo/src/pipeline/handler.ts", "../mysql/writer.ts", all), null);
  assert.equal(layerViolation("/repo/src/pipeline/handler.ts", "../log.ts", all), null);
});

/** Messages of the library rule for one file with the given source text. */
const libraryErrors = (file: string, source: string) => ruleErrors("library-homes", file, source);

Deno.test("lint library-homes: a library imported outside its home fails, naming the home", () => {
  const errors = libraryErrors(
    "perfdata/graphite.ts",
    'import type { Counter, Gauge } from "prom-client";\n',
  );
  assert.equal(errors.length, 1);
  assert.match(errors[0] ?? "", /prom-client is imported by only src\/metrics\//);
  assert.equal(
    libraryErrors("mysql/retry.ts", 'export { Counter } from "prom-client";\n').length,
    1,
  );
  assert.equal(libraryErrors("daemon/x.ts", 'import { WebSocket } from "ws";\n').length, 1);
  assert.equal(
    libraryErrors("util/x.ts", 'import { AMQPClient } from "@cloudamqp/amqp-client";\n').length,
    1,
  );
  assert.equal(
    libraryErrors("config/x.ts", 'import { getLogger } from "@logtape/logtape";\n').length,
    1,
  );
  assert.equal(libraryErrors("events/x.ts", 'import SnappyJS from "snappyjs";\n').length, 1);
});

Deno.test("lint library-homes: its home imports a library, also by npm: specifier or subpath", () => {
  assert.deepEqual(
    libraryErrors("metrics/registry.ts", 'import { Counter } from "prom-client";\n'),
    [],
  );
  assert.deepEqual(libraryErrors("http/listen.ts", 'import { WebSocketServer } from "ws";\n'), []);
  assert.deepEqual(libraryErrors("log.ts", 'import { getLogger } from "@logtape/logtape";\n'), []);
  assert.deepEqual(libraryErrors("config/load.ts", 'import { parse } from "yaml";\n'), []);
  assert.equal(libraryViolation(`${SRC}/amqp/x.ts`, "npm:@cloudamqp/amqp-client@4.1.1"), null);
  // Naming the package directly, or a file inside it, does not get around the table.
  assert.match(
    libraryViolation(`${SRC}/mysql/x.ts`, "npm:prom-client@15.1.3") ?? "",
    /src\/metrics/,
  );
  assert.match(
    libraryViolation(`${SRC}/mysql/x.ts`, "prom-client/lib/registry") ?? "",
    /src\/metrics/,
  );
  assert.match(libraryViolation(`${SRC}/cli/x.ts`, "npm:ws@8/lib/sender.js") ?? "", /src\/http/);
  // Our own modules, Node's and unknown packages are not this rule's business.
  assert.equal(libraryViolation(`${SRC}/mysql/x.ts`, "../metrics/registry.ts"), null);
  assert.equal(libraryViolation(`${SRC}/mysql/x.ts`, "node:net"), null);
});

Deno.test("lint library-homes: test code, benches and tools are exempt; a test-only library stays there", () => {
  assert.equal(libraryViolation(`${SRC}/perfdata/graphite_test.ts`, "prom-client"), null);
  assert.equal(libraryViolation(`${SRC}/events/_testing.ts`, "ws"), null);
  assert.equal(libraryViolation("/repo/bench/pipeline.ts", "prom-client"), null);
  assert.equal(libraryViolation("/repo/tools/x.ts", "yaml"), null);
  assert.equal(libraryViolation(`${SRC}/util/deno_socket_test.ts`, "@sinonjs/fake-timers"), null);
  assert.match(
    libraryViolation(`${SRC}/util/deno_socket.ts`, "@sinonjs/fake-timers") ?? "",
    /test code only/,
  );
});

Deno.test("lint library-homes: every library of deno.json has a home that exists", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../deno.json", import.meta.url)));
  const missing = Object.keys(config.imports).filter((name) => !(name in LIBRARY_HOMES));
  assert.deepEqual(missing, []);
  for (const home of Object.values(LIBRARY_HOMES)) {
    if (home !== null) await Deno.stat(new URL(`../src/${home}`, import.meta.url));
  }
});

Deno.test("lint library-homes: no file of src/ imports a library outside its home", async () => {
  const found: string[] = [];
  const walk = async (dir: URL): Promise<void> => {
    for await (const entry of Deno.readDir(dir)) {
      const url = new URL(entry.isDirectory ? `${entry.name}/` : entry.name, dir);
      if (entry.isDirectory) await walk(url);
      else if (entry.name.endsWith(".ts")) {
        const errors = libraryErrors(url.pathname, await Deno.readTextFile(url));
        for (const e of errors) found.push(`${url.pathname.split("/src/")[1]}: ${e}`);
      }
    }
  };
  await walk(new URL("../src/", import.meta.url));
  assert.deepEqual(found, []);
});

Deno.test("layers: the table has no circle, so imports go one way", () => {
  assert.equal(layerCycle(LAYERS), null);
});

Deno.test("layers: a circle is found, direct, through a third module, or through a root", () => {
  assert.deepEqual(layerCycle({ util: [], http: ["util", "metrics"], metrics: ["http"] }), [
    "http",
    "metrics",
    "http",
  ]);
  assert.deepEqual(layerCycle({ a: ["b"], b: ["c"], c: ["a"] }), ["a", "b", "c", "a"]);
  assert.equal(layerCycle({ cli: "*", daemon: "*", util: [] }), null, "two roots");
  assert.notEqual(layerCycle({ cli: "*", util: ["cli"] }), null, "a module listing a root");
  assert.equal(layerCycle({ cli: "*", util: [], log: ["util"] }), null);
  // The table as it was before graphite and perfdata, metrics and http stopped importing each other.
  assert.notEqual(
    layerCycle({
      ...LAYERS,
      graphite: ["perfdata"],
      perfdata: [...(LAYERS.perfdata as string[]), "graphite"],
    }),
    null,
  );
});

Deno.test("layers: no two files of src/ import each other, directly or in a longer circle", async () => {
  const root = new URL("../", import.meta.url).pathname;
  const files: string[] = [];
  await walk(`${root}src`, files);
  const edges = new Map<string, string[]>();
  for (const file of files) {
    if (/(_test|_bench|_testing)\.ts$/.test(file)) continue;
    const rel = file.slice(root.length);
    const info = readModule(rel, await Deno.readTextFile(file));
    edges.set(rel, [...info.imports.keys(), ...info.stars]);
  }
  assert.ok(edges.has("src/pipeline/handler.ts") && edges.has("src/pipeline/pipeline.ts"));
  assert.equal(findCycle(edges), null);
  // What the check would say of the circle pipeline.ts and handler.ts once formed.
  edges.set("src/pipeline/handler.ts", ["src/pipeline/pipeline.ts"]);
  assert.deepEqual(
    new Set(findCycle(edges)),
    new Set(["src/pipeline/handler.ts", "src/pipeline/pipeline.ts"]),
  );
});

Deno.test("lint src-imports-no-tests: nothing in src/, its tests included, imports tests/", () => {
  const testsImportErrors = (file: string, source: string) =>
    ruleErrors("src-imports-no-tests", file, source);
  const [error, ...more] = testsImportErrors(
    "mysql/writer_test.ts",
    'import { waitFor } from "../../tests/helpers/wait.ts";\n',
  );
  assert.deepEqual(more, []);
  assert.match(error ?? "", /src\/ imports nothing from tests\/ \(tests\/helpers\/wait\.ts\)/);
  assert.equal(
    testsImportErrors("cli/status/x.ts", 'export * from "../../../tests/helpers/mysql.ts";\n')
      .length,
    1,
  );
  assert.deepEqual(
    testsImportErrors("mysql/writer_test.ts", 'import { x } from "./writer.ts";\n'),
    [],
  );
  // tests/ itself and a directory that only starts like it are fine.
  assert.equal(testsImportViolation("/repo/tests/x_test.ts", "./helpers/wait.ts"), null);
  assert.equal(testsImportViolation(`${SRC}/x_test.ts`, "../tests_data/x.ts"), null);
});

Deno.test("lint one-backend-branch: the daemon and the consumer core branch on the backend only in its factory", () => {
  const branch = 'if ((config.consumer ?? "gearman") === "rabbitmq") run();\n';
  assert.equal(ruleErrors("one-backend-branch", "daemon/surfaces.ts", branch).length, 1);
  assert.equal(
    ruleErrors(
      "one-backend-branch",
      "consumer/delivery.ts",
      'switch (kind) { case "gearman": break; }\n',
    )
      .length,
    1,
  );
  assert.match(
    ruleErrors("one-backend-branch", "daemon/start.ts", 'const g = kind !== "gearman";\n')[0] ?? "",
    /outside src\/daemon\/consumers\.ts/,
  );
  // The factory, the CLI's tools and tests may name the backends.
  assert.deepEqual(ruleErrors("one-backend-branch", BACKEND_FACTORY, branch), []);
  assert.deepEqual(ruleErrors("one-backend-branch", "cli/run.ts", branch), []);
  assert.deepEqual(ruleErrors("one-backend-branch", "daemon/start_test.ts", branch), []);
  // A backend's name as a value (a logger, a metric label) is not a branch.
  assert.deepEqual(ruleErrors("one-backend-branch", "consumer/x.ts", 'log("rabbitmq");\n'), []);
});

Deno.test("lint one-backend-branch: no file of src/daemon or src/consumer branches on the backend", async () => {
  const root = new URL("../", import.meta.url).pathname;
  const files: string[] = [];
  await walk(`${root}src`, files);
  const found: string[] = [];
  for (const file of files.filter((f) => /\/src\/(daemon|consumer)\//.test(f))) {
    for (const message of ruleErrors("one-backend-branch", file, await Deno.readTextFile(file))) {
      found.push(`${file.slice(root.length)}: ${message}`);
    }
  }
  assert.deepEqual(found, []);
});
