/**
 * statusengine-worker: consumes the Statusengine broker's `statusngin_*`
 * queues and writes them into the Statusengine 3 MySQL schema.
 *
 * `main.ts [command] [flags]`; `run` is the default command. See `--help`.
 *
 * @module
 */
import { runCli } from "./src/cli/mod.ts";

if (import.meta.main) {
  const code = await runCli(Deno.args, Deno.env.toObject());
  Deno.exit(code);
}
