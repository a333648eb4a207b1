/**
 * Where commands print: the only module that writes to stdout/stderr directly (everything
 * else logs through src/log.ts or returns text); and the helpers the tools share.
 *
 * @module
 */
import {
  connectMysql,
  describeMysqlConnectFailure,
  type MysqlConnection,
  mysqlOptionsFromUrl,
} from "../mysql/mod.ts";
import { derivedEnvName } from "../config/mod.ts";
import { errorMessage } from "../log.ts";
import { redactText, redactUrl } from "../util/redact.ts";

/** Output of a command: one line per call. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
}

const encoder = new TextEncoder();

function writeAll(stream: typeof Deno.stdout | typeof Deno.stderr, text: string): void {
  const bytes = encoder.encode(text);
  let off = 0;
  while (off < bytes.length) off += stream.writeSync(bytes.subarray(off));
}

/** stdout / stderr of the process. */
export const PROCESS_IO: Io = {
  out: (line) => writeAll(Deno.stdout, `${line}\n`),
  err: (line) => writeAll(Deno.stderr, `${line}\n`),
};

/** The connect bound of the tools that read the worker's database (`verify`, `losstest`). */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Connect to the database a MySQL URL names, or print why not (`Cannot run <command>: …`, the
 * password masked) and return undefined.
 */
export async function openDatabase(
  url: string,
  command: string,
  io: Io,
  options: { readonly exactValues?: boolean; readonly setting?: string } = {},
): Promise<{ conn: MysqlConnection; password: string | undefined } | undefined> {
  let opts: ReturnType<typeof mysqlOptionsFromUrl>;
  try {
    opts = mysqlOptionsFromUrl(url);
  } catch (err: unknown) {
    io.err(`Cannot run ${command}: ${errorMessage(err)}`);
    return undefined;
  }
  if (opts.database === undefined) {
    io.err(`Cannot run ${command}: the MySQL URL "${redactUrl(url)}" names no database`);
    return undefined;
  }
  const { setting, ...limits } = options;
  const named = setting === undefined
    ? undefined
    : { flag: `--${setting}`, env: derivedEnvName(setting) };
  try {
    const { connection } = await connectMysql(opts, { ...limits, timeoutMs: CONNECT_TIMEOUT_MS });
    return { conn: connection, password: opts.password };
  } catch (err: unknown) {
    const why = describeMysqlConnectFailure(err, redactUrl(url), named);
    io.err(redactText(`Cannot run ${command}: ${why}`, opts.password));
    return undefined;
  }
}
