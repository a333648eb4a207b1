/**
 * The version line shared by `version`, `--version`, the first log line and
 * `statusengine_build_info` (docs/operations.md#version, D10).
 *
 * @module
 */
import { BUILD_INFO } from "./build_info.ts";

export function identity(): typeof BUILD_INFO & { readonly denoVersion: string } {
  return { ...BUILD_INFO, denoVersion: Deno.version.deno };
}

/** `statusengine-worker <version> (commit <c>, built <date>, deno <v>)`; no date: no `built`. */
export function versionLine(program = "statusengine-worker"): string {
  const id = identity();
  const built = id.date === "" ? "" : `built ${id.date}, `;
  return `${program} ${id.version} (commit ${id.commit}, ${built}deno ${id.denoVersion})`;
}
