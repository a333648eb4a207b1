/**
 * Replace the generated section of a doc between two marker lines (tools/gen_config_reference.ts);
 * `what` names the section in the error thrown when a marker is missing or out of order.
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
