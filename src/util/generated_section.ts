/**
 * Generated sections of the docs: the text between a BEGIN and an END marker line, which
 * tools/gen_config_reference.ts rewrites from the one source of truth (the settings table, the
 * metrics catalogue, the layer table) and checks in CI.
 *
 * @module
 */

/**
 * Replace the generated section between two markers.
 *
 * @param document The whole file.
 * @param begin The marker that opens the section.
 * @param end The marker that closes it.
 * @param content The generated text, put on the line after `begin`.
 * @param what What the section is, for the error, e.g. `metrics reference`.
 * @returns The document with the section replaced.
 * @throws {Error} when a marker is missing or they are out of order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { replaceGeneratedSection } from "./generated_section.ts";
 * const doc = "intro\n<!-- B -->\nold\n<!-- E -->\nend\n";
 * assert.equal(
 *   replaceGeneratedSection(doc, "<!-- B -->", "<!-- E -->", "new\n", "example"),
 *   "intro\n<!-- B -->\nnew\n<!-- E -->\nend\n",
 * );
 * ```
 */
export function replaceGeneratedSection(
  document: string,
  begin: string,
  end: string,
  content: string,
  what: string,
): string {
  const from = document.indexOf(begin);
  const to = document.indexOf(end);
  if (from < 0 || to < 0 || to < from) {
    throw new Error(`Cannot update the ${what}: the document needs ${begin} followed by ${end}`);
  }
  return `${document.slice(0, from + begin.length)}\n${content}${document.slice(to)}`;
}
