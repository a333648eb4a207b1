/**
 * Print the Markdown configuration reference generated from the settings table, or keep the
 * README's copy of it up to date.
 *
 * ```sh
 * deno run tools/gen_config_reference.ts                               # print it
 * deno run --allow-read --allow-write tools/gen_config_reference.ts --write README.md
 * deno run --allow-read tools/gen_config_reference.ts --check README.md # CI: exit 1 if stale
 * ```
 *
 * `--write` and `--check` work on the text between `<!-- BEGIN CONFIG REFERENCE -->` and
 * `<!-- END CONFIG REFERENCE -->`; a file without both markers is an error (exit 1). When the
 * file also has `<!-- BEGIN METRICS REFERENCE -->` … `<!-- END METRICS REFERENCE -->`, that
 * section is regenerated from the metric catalogue as well.
 *
 * @module
 */

import { renderConfigReference, replaceConfigReference } from "../src/config/mod.ts";
import { renderMetricsReference, replaceMetricsReference } from "../src/metrics/reference.ts";
import { errorMessage } from "../src/util/errors.ts";

/** The I/O the tool needs, injectable for tests. */
export interface ToolIo {
  /** Read a file as text. */
  readonly readTextFile: (path: string) => Promise<string>;
  /** Write a file as text. */
  readonly writeTextFile: (path: string, text: string) => Promise<void>;
  /** Write to standard output. */
  readonly stdout: (text: string) => void;
  /** Write to standard error. */
  readonly stderr: (text: string) => void;
}

const USAGE = "Usage: gen_config_reference.ts [--write FILE | --check FILE]\n";

/**
 * Run the tool.
 *
 * @param args Command-line arguments.
 * @param io File and stream access.
 * @returns Exit status: 0 done / up to date, 1 stale or unusable file, 2 bad arguments.
 */
export async function runGenConfigReference(args: readonly string[], io: ToolIo): Promise<number> {
  const reference = renderConfigReference();
  if (args.length === 0) {
    io.stdout(reference);
    return 0;
  }
  const [mode, file] = args;
  if (args.length !== 2 || file === undefined || (mode !== "--write" && mode !== "--check")) {
    io.stderr(USAGE);
    return 2;
  }
  let current: string;
  let updated: string;
  try {
    current = await io.readTextFile(file);
    updated = replaceConfigReference(current, reference);
    // The metrics reference lives in the same file when it has the markers.
    if (updated.includes("<!-- BEGIN METRICS REFERENCE -->")) {
      updated = replaceMetricsReference(updated, renderMetricsReference());
    }
  } catch (err: unknown) {
    io.stderr(`${file}: ${errorMessage(err)}\n`);
    return 1;
  }
  if (mode === "--check") {
    if (updated === current) return 0;
    io.stderr(
      `${file}: the configuration or metrics reference is stale; run ` +
        `"deno run --allow-read --allow-write tools/gen_config_reference.ts --write ${file}"\n`,
    );
    return 1;
  }
  if (updated !== current) await io.writeTextFile(file, updated);
  return 0;
}

if (import.meta.main) {
  const encoder = new TextEncoder();
  const status = await runGenConfigReference(Deno.args, {
    readTextFile: (path) => Deno.readTextFile(path),
    writeTextFile: (path, text) => Deno.writeTextFile(path, text),
    stdout: (text) => void Deno.stdout.writeSync(encoder.encode(text)),
    stderr: (text) => void Deno.stderr.writeSync(encoder.encode(text)),
  });
  Deno.exit(status);
}
