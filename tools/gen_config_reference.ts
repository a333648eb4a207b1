/**
 * Print the Markdown configuration reference generated from the settings table, or keep the
 * generated references in the docs up to date.
 *
 * ```sh
 * deno task config-reference                                            # rewrite both references
 * deno run tools/gen_config_reference.ts                                # print the settings table
 * deno run --allow-read --allow-write tools/gen_config_reference.ts --write docs/configuration.md
 * deno run --allow-read tools/gen_config_reference.ts --check docs/configuration.md docs/metrics.md
 * ```
 *
 * `--write` and `--check` take one or more files and work on the generated sections each file
 * has: the settings reference between `<!-- BEGIN CONFIG REFERENCE -->` and
 * `<!-- END CONFIG REFERENCE -->` (from src/config/settings.ts), the metrics reference between
 * `<!-- BEGIN METRICS REFERENCE -->` and `<!-- END METRICS REFERENCE -->` (from
 * src/metrics/catalogue.ts). A file with neither pair of markers is an error (exit 1), so a
 * renamed or emptied page cannot pass the check silently.
 *
 * @module
 */

import {
  REFERENCE_BEGIN,
  renderConfigReference,
  replaceConfigReference,
} from "../src/config/mod.ts";
import {
  METRICS_BEGIN,
  renderMetricsReference,
  replaceMetricsReference,
} from "../src/metrics/reference.ts";
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

const USAGE = "Usage: gen_config_reference.ts [--write FILE... | --check FILE...]\n";

/**
 * The document with every generated section it has brought up to date.
 *
 * @throws {Error} when the document has no generated section at all, or broken markers.
 */
function regenerate(current: string, settingsReference: string): string {
  const hasSettings = current.includes(REFERENCE_BEGIN);
  const hasMetrics = current.includes(METRICS_BEGIN);
  if (!hasSettings && !hasMetrics) {
    throw new Error(
      `no generated section: the file needs ${REFERENCE_BEGIN} or ${METRICS_BEGIN} ` +
        "(each followed by its END marker)",
    );
  }
  let updated = current;
  if (hasSettings) updated = replaceConfigReference(updated, settingsReference);
  if (hasMetrics) updated = replaceMetricsReference(updated, renderMetricsReference());
  return updated;
}

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
  const [mode, ...files] = args;
  if (files.length === 0 || (mode !== "--write" && mode !== "--check")) {
    io.stderr(USAGE);
    return 2;
  }
  let status = 0;
  for (const file of files) {
    let current: string;
    let updated: string;
    try {
      current = await io.readTextFile(file);
      updated = regenerate(current, reference);
    } catch (err: unknown) {
      io.stderr(`${file}: ${errorMessage(err)}\n`);
      status = 1;
      continue;
    }
    if (mode === "--check") {
      if (updated === current) continue;
      io.stderr(
        `${file}: the configuration or metrics reference is stale; run ` +
          `"deno task config-reference" (or "deno run --allow-read --allow-write ` +
          `tools/gen_config_reference.ts --write ${file}")\n`,
      );
      status = 1;
      continue;
    }
    if (updated !== current) await io.writeTextFile(file, updated);
  }
  return status;
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
