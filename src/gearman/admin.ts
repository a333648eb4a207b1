/**
 * The text admin protocol (docs/gearman-protocol.md#admin): one command per short-lived
 * connection, so a text reply can never desynchronise a binary connection.
 *
 * @module
 */
import {
  AdminReplyParser,
  encodeAdminCommand,
  type FunctionStatus,
  isMultiLineAdminCommand,
  parseStatusReply,
} from "./codec.ts";
import { connectFailed, connectionLost, isConnectionError } from "./connection.ts";
import { parseServerAddress } from "../util/address.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage } from "../util/errors.ts";

export interface AdminOptions {
  /** Bound on connect + reply; default 2 s. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * Send one admin command; the reply lines (without a multi-line reply's final `.`).
 *
 * @throws {WorkerError} (code `connection_lost` or `connect_failed`) When the server cannot be reached or does not answer in time.
 */
export async function adminCommand(
  server: string,
  command: string,
  options: AdminOptions = {},
): Promise<string[]> {
  const { hostname, port } = parseServerAddress(server);
  using limit = deadline(options.timeoutMs ?? 2000, options.signal);
  // Disposing closes the connection, also one the peer already closed.
  using conn = await Deno.connect({ hostname, port, signal: limit.signal }).catch(
    (err: unknown) => {
      throw connectFailed(server, `admin command "${command}": ${errorMessage(err)}`, err);
    },
  );
  // The abort answers at once; closing the connection then ends the pending read.
  const exchange = async (): Promise<string[]> => {
    await conn.write(encodeAdminCommand(command));
    const parser = new AdminReplyParser(isMultiLineAdminCommand(command));
    for (;;) {
      const buf = new Uint8Array(16 * 1024);
      const n = await conn.read(buf);
      if (n === null) {
        throw connectionLost(server, `EOF before the reply to "${command}" was complete`);
      }
      const lines = parser.push(buf.subarray(0, n));
      if (lines !== undefined) return lines;
    }
  };
  try {
    return await abortable(exchange(), limit.signal);
  } catch (err: unknown) {
    if (isConnectionError(err)) throw err;
    const detail = limit.signal.aborted ? "timed out" : "failed";
    throw connectionLost(server, `admin command "${command}" ${detail}`, err);
  }
}

/** `status` parsed: one entry per function the server knows. */
export async function adminStatus(
  server: string,
  options?: AdminOptions,
): Promise<FunctionStatus[]> {
  return parseStatusReply(await adminCommand(server, "status", options));
}

/** Server version (`OK 1.1.20+ds` → `1.1.20+ds`); also the readiness probe for tests. */
export async function adminVersion(server: string, options?: AdminOptions): Promise<string> {
  const [line = ""] = await adminCommand(server, "version", options);
  if (!line.startsWith("OK ")) {
    throw connectionLost(server, `unexpected version reply ${JSON.stringify(line)}`);
  }
  return line.slice(3);
}
