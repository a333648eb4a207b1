import assert from "node:assert/strict";
import {
  LAYERS_BEGIN,
  renderLayerTable,
  runGenConfigReference,
  type ToolIo,
} from "../../tools/gen_config_reference.ts";
import { LAYERS } from "../../tools/lint_plugin.ts";
import { METRICS_BEGIN, METRICS_END } from "../metrics/catalogue.ts";
import {
  displayDefault,
  REFERENCE_BEGIN,
  REFERENCE_END,
  renderConfigReference,
  renderHelp,
} from "./help.ts";
import { acceptedForm } from "./values.ts";
import { replaceGeneratedSection } from "../util/generated_section.ts";
import { legacyKeysOf } from "./legacy.ts";
import {
  COMMAND_NAMES,
  COMMANDS,
  envNameOf,
  rowsFor,
  SETTING_GROUPS,
  SETTING_ROWS,
  yamlKeyOf,
} from "./settings.ts";

// Help is generated from the table; without this test a row could be added that --help never
// mentions, or a help renderer change could drop the env name operators look for.
Deno.test("renderHelp: every flag of a command appears with env name, YAML key, default and form", () => {
  for (const command of COMMAND_NAMES) {
    // One block per flag: its usage line up to the next usage line, whitespace collapsed.
    const blocks = renderHelp(command).split(/\n(?= {2}\S)/).map((b) => b.replace(/\s+/g, " "));
    const readsFile = rowsFor(command).some((r) => r.flag === "config");
    for (const row of rowsFor(command)) {
      const usageLine = new RegExp(`^ (?:\\S+, )?--${row.flag}(?=[ ,]|$)`);
      const block = blocks.find((b) => usageLine.test(b)) ?? "";
      assert.ok(block !== "", `${command}: --${row.flag}`);
      for (const alias of row.flagAliases ?? []) assert.ok(block.includes(`--${alias}`));
      const env = envNameOf(row);
      if (env !== undefined) assert.ok(block.includes(`env ${env}`), `${command}: ${env}`);
      const yaml = yamlKeyOf(row);
      if (yaml !== undefined && readsFile) {
        assert.ok(block.includes(`yaml ${yaml}`), `${command}: ${yaml}`);
      }
      // Legacy keys are YAML keys too, also for settings read only from their legacy key.
      for (const legacy of readsFile ? legacyKeysOf(row.flag) : []) {
        assert.ok(block.includes(legacy), `${command}: ${legacy}`);
      }
      if (row.required === true) {
        assert.match(block, / required( |$)/, `${command} ${row.flag}`);
      } else if (row.feeds === undefined) {
        // A long list is cut in --help; its start is still shown.
        const shown = displayDefault(row, command);
        const expected = shown.length > 60 ? `default ${shown.slice(0, 30)}` : `default ${shown}`;
        assert.ok(block.includes(expected), `${command} ${row.flag}`);
      }
      const spelled = row.kind.type === "enum" && row.kind.values.length <= 4;
      const form = spelled ? row.kind.values.join("|") : acceptedForm(row);
      assert.ok(block.includes(form), `${command} ${row.flag}`);
    }
  }
});

// `run --help` was 273 lines in one list, one of them 1,395 characters (the --command-allow
// default), and check_for_commands was read from YAML without --help or the reference saying so.
Deno.test("renderHelp: flags are grouped under headings and no line is wider than 100 columns", () => {
  for (const group of SETTING_GROUPS) {
    assert.ok(SETTING_ROWS.some((r) => r.flag === group.from), group.from);
  }
  for (const command of [undefined, ...COMMAND_NAMES]) {
    for (const line of renderHelp(command).split("\n")) {
      assert.ok(line.length <= 100, `${command}: ${line.length} columns: ${line.slice(0, 60)}`);
    }
  }
  const run = renderHelp("run");
  for (const heading of ["General:", "Broker:", "MySQL:", "Tasks from statusengine_tasks:"]) {
    assert.match(run, new RegExp(`^${heading.replace("(", "\\(")}$`, "m"));
  }
  assert.ok(run.indexOf("Broker:") < run.indexOf("  --consumer "));
  assert.ok(run.indexOf("MySQL:") < run.indexOf("  --mysql-batch-size "));
  assert.match(run, /default\s+[A-Z_]+,[A-Z_,]*,… \(\d+ in all; "statusengine-worker config run"/);
  assert.match(run, /yaml check_for_commands \(legacy\)/);
  assert.match(run, /yaml command_check_interval \(legacy\)/);
  const reference = renderConfigReference();
  assert.match(reference, /\| `--check-for-commands`.*\| `check_for_commands` \(legacy\) \|/);
  assert.match(
    reference,
    /\| `--command-check-interval`.*\| `command_check_interval` \(legacy\) \|/,
  );
});

Deno.test("renderHelp: config explains that it takes another command's line", () => {
  const help = renderHelp("config");
  assert.match(help, /^Usage: statusengine-worker config \[--json\] \[command\] \[flags/);
  assert.match(help, /config cleanup --config FILE/);
  assert.match(help, /--json/);
  assert.match(renderHelp(), /^ {2}config +Show every setting/m);
});

Deno.test("renderHelp: the top level lists every command and the global flags", () => {
  const help = renderHelp();
  for (const command of COMMANDS) {
    assert.match(help, new RegExp(`^  ${command.name} +${command.summary.slice(0, 20)}`, "m"));
  }
  assert.match(help, /--help/);
  assert.match(help, /--version/);
  assert.match(renderHelp("version"), /no settings/);
});

Deno.test("renderHelp: booleans show --no-flag and the positional of losstest shows first", () => {
  assert.match(renderHelp("schema"), /--create-database, --no-create-database/);
  assert.match(
    renderHelp("losstest"),
    /^Usage: statusengine-worker losstest publish\|verify\|cleanup/,
  );
});

// D8: help is the one output nobody thinks of as sensitive, so pin it: no password of any
// default, and every secret default masked.
Deno.test("renderHelp: secrets' defaults are masked and no password is shown", () => {
  const all = [renderHelp(), ...COMMAND_NAMES.map((c) => renderHelp(c)), renderConfigReference()]
    .join("\n");
  assert.ok(!all.includes("statusengine:statusengine@"));
  assert.ok(all.includes("amqp://statusengine:****@127.0.0.1:5672/"));
  for (const row of SETTING_ROWS.filter((r) => r.secret === true)) {
    const fallback = row.default ?? "";
    if (/:[^/@]+@/.test(fallback)) assert.ok(!all.includes(fallback), row.flag);
  }
});

Deno.test("renderConfigReference: one section per command and one row per setting", () => {
  const reference = renderConfigReference();
  for (const command of COMMAND_NAMES) {
    const start = reference.indexOf(`### \`${command}\``);
    assert.ok(start >= 0, command);
    const end = reference.indexOf("### ", start + 4);
    const section = reference.slice(start, end < 0 ? undefined : end);
    for (const row of rowsFor(command)) {
      assert.ok(section.includes(`\`--${row.flag}\``), `${command} ${row.flag}`);
    }
  }
  assert.ok(reference.startsWith("<!-- deno-fmt-ignore-start -->"));
  assert.ok(reference.endsWith("<!-- deno-fmt-ignore-end -->\n"));
});

Deno.test("replaceGeneratedSection: replaces only the text between the reference markers", () => {
  const replace = (doc: string, reference: string) =>
    replaceGeneratedSection(doc, REFERENCE_BEGIN, REFERENCE_END, reference, "reference");
  const doc = `# Title\n\nIntro\n\n${REFERENCE_BEGIN}\nold text\n${REFERENCE_END}\n\nOutro\n`;
  const updated = replace(doc, "NEW\n");
  assert.equal(updated, `# Title\n\nIntro\n\n${REFERENCE_BEGIN}\nNEW\n${REFERENCE_END}\n\nOutro\n`);
  assert.equal(replace(updated, "NEW\n"), updated);
  assert.throws(() => replace("no markers", "x"), /needs/);
  assert.throws(() => replace(`${REFERENCE_END}\n${REFERENCE_BEGIN}`, "x"));
});

function memoryIo(files: Map<string, string>) {
  const out: string[] = [];
  const err: string[] = [];
  const io: ToolIo = {
    readTextFile: (path) => {
      const text = files.get(path);
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound(`No such file: ${path}`))
        : Promise.resolve(text);
    },
    writeTextFile: (path, text) => {
      files.set(path, text);
      return Promise.resolve();
    },
    stdout: (text) => void out.push(text),
    stderr: (text) => void err.push(text),
  };
  return { io, out, err };
}

Deno.test("gen_config_reference: --write fills the reference section and --check then passes", async () => {
  const files = new Map([["README.md", `# R\n\n${REFERENCE_BEGIN}\n${REFERENCE_END}\n`]]);
  const { io, err } = memoryIo(files);
  assert.equal(await runGenConfigReference(["--check", "README.md"], io), 1);
  assert.match(err.join(""), /stale/);
  assert.equal(await runGenConfigReference(["--write", "README.md"], io), 0);
  assert.ok(files.get("README.md")?.includes("| `--mysql-batch-size` |"));
  assert.equal(await runGenConfigReference(["--check", "README.md"], io), 0);
});

// The settings and the metrics references live in two pages (docs/configuration.md and
// docs/metrics.md); one --check must cover both, and a page that lost its markers must fail
// rather than pass with nothing checked.
Deno.test("gen_config_reference: --write and --check take several files, each with its own sections", async () => {
  const files = new Map([
    ["configuration.md", `# C\n\n${REFERENCE_BEGIN}\n${REFERENCE_END}\n`],
    ["metrics.md", `# M\n\n${METRICS_BEGIN}\n${METRICS_END}\n`],
  ]);
  const { io, err } = memoryIo(files);
  assert.equal(await runGenConfigReference(["--check", "configuration.md", "metrics.md"], io), 1);
  assert.match(err.join(""), /configuration\.md: .*stale/);
  assert.match(err.join(""), /metrics\.md: .*stale/);
  assert.equal(await runGenConfigReference(["--write", "configuration.md", "metrics.md"], io), 0);
  assert.ok(files.get("configuration.md")?.includes("| `--mysql-batch-size` |"));
  assert.ok(!files.get("configuration.md")?.includes("| `statusengine_db_available` |"));
  assert.ok(files.get("metrics.md")?.includes("| `statusengine_db_available` |"));
  assert.ok(!files.get("metrics.md")?.includes("| `--mysql-batch-size` |"));
  assert.equal(await runGenConfigReference(["--check", "configuration.md", "metrics.md"], io), 0);
  files.set("metrics.md", "# M\n\nthe markers were deleted\n");
  assert.equal(await runGenConfigReference(["--check", "configuration.md", "metrics.md"], io), 1);
  assert.match(err.join(""), /metrics\.md: no generated section/);
});

// docs/architecture.md's layer table was written by hand and had lost the rows of perfdata/ and
// tasks/ that LAYERS in tools/lint_plugin.ts held; it is generated from LAYERS now.
Deno.test("gen_config_reference: the layer table is generated from LAYERS, one row per module, and --check fails when it differs", async () => {
  const files = new Map([[
    "architecture.md",
    `# A\n\n${LAYERS_BEGIN}\n<!-- END LAYERS TABLE -->\n`,
  ]]);
  const { io, err } = memoryIo(files);
  assert.equal(await runGenConfigReference(["--check", "architecture.md"], io), 1);
  assert.match(err.join(""), /architecture\.md: .*stale/);
  assert.equal(await runGenConfigReference(["--write", "architecture.md"], io), 0);
  const page = files.get("architecture.md") ?? "";
  assert.ok(page.includes(renderLayerTable(LAYERS)));
  assert.ok(page.includes("| `perfdata/` | `util/`, `log.ts`, `events/`, `metrics/` |"));
  assert.ok(page.includes("| `tasks/` |"));
  assert.ok(page.includes("| `util/` | nothing |"));
  assert.ok(page.includes("| `daemon/` | everything (a composition root) |"));
  assert.equal(await runGenConfigReference(["--check", "architecture.md"], io), 0);
  files.set("architecture.md", page.replace("| `tasks/` |", "| `jobs/` |"));
  assert.equal(await runGenConfigReference(["--check", "architecture.md"], io), 1);
  assert.equal(
    renderLayerTable({ log: ["util"], util: [] }, (name) => name === "log").split("\n").slice(5, 7)
      .join("\n"),
    "| `log.ts` | `util/` |\n| `util/` | nothing |",
  );
});

Deno.test("gen_config_reference: prints without arguments, refuses bad arguments and files", async () => {
  const files = new Map([["plain.md", "no markers\n"]]);
  const { io, out } = memoryIo(files);
  assert.equal(await runGenConfigReference([], io), 0);
  assert.equal(out.join(""), renderConfigReference());
  assert.equal(await runGenConfigReference(["--check"], io), 2);
  assert.equal(await runGenConfigReference(["--fix", "README.md"], io), 2);
  assert.equal(await runGenConfigReference(["--check", "missing.md"], io), 1);
  assert.equal(await runGenConfigReference(["--write", "plain.md"], io), 1);
  assert.equal(files.get("plain.md"), "no markers\n");
});

// CI runs `deno fmt --check` over the whole repository and the tool's --check: if deno fmt
// realigned the generated tables, the two checks would fight each other forever.
Deno.test("gen_config_reference: the generated reference section survives deno fmt and --check", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const readme = `${dir}/README.md`;
    await Deno.writeTextFile(readme, `# Worker\n\n${REFERENCE_BEGIN}\n${REFERENCE_END}\n`);
    const tool = new URL("../../tools/gen_config_reference.ts", import.meta.url).pathname;
    const run = async (...args: string[]) => {
      const result = await new Deno.Command(Deno.execPath(), {
        args,
        cwd: dir,
        stdout: "piped",
        stderr: "piped",
      }).output();
      return { code: result.code, stderr: new TextDecoder().decode(result.stderr) };
    };
    const write = await run("run", "--allow-read", "--allow-write", tool, "--write", readme);
    assert.equal(write.code, 0, write.stderr);
    const fmt = await run("fmt", readme);
    assert.equal(fmt.code, 0, fmt.stderr);
    const check = await run("run", "--allow-read", tool, "--check", readme);
    assert.equal(check.code, 0, check.stderr);
    await Deno.writeTextFile(
      readme,
      (await Deno.readTextFile(readme)).replace("`--json`", "`--x`"),
    );
    const stale = await run("run", "--allow-read", tool, "--check", readme);
    assert.equal(stale.code, 1);
    assert.match(stale.stderr, /stale/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// An operator on RabbitMQ reads the top-level help to find the tool for a backlog: a command that
// takes --consumer must not be summed up as serving gearmand only (status reads both).
Deno.test("renderHelp: a command that takes --consumer names both brokers or neither in its summary", () => {
  for (const { name, summary } of COMMANDS) {
    if (!rowsFor(name).some((row) => row.flag === "consumer")) continue;
    const gearman = /gearman/i.test(summary);
    const rabbitmq = /rabbitmq/i.test(summary);
    assert.equal(gearman, rabbitmq, `${name}: "${summary}"`);
  }
});
