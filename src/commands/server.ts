/**
 * The `POST /commands` listener: authentication, the size limit enforced while reading,
 * validation, one broker message per request. Its own port, so a slow request body never shares
 * a server with the `/ws` stream.
 *
 * @module
 */
import {
  ApiKeySet,
  headerKey,
  headerKeyRefusal,
  type HttpServer,
  listen,
  type ListenAddress,
} from "../http/mod.ts";
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger, LogThrottle } from "../log.ts";
import { deadline } from "../util/async.ts";
import { hasCode } from "../util/errors.ts";
import type { CommandPublisher } from "./publisher.ts";
import {
  MAX_BODY_BYTES,
  RawCommandAllowlist,
  REJECT_STATUS,
  type RejectReason,
  validateCommandBody,
} from "./validate.ts";

const log = getLogger("command");

/** So a client trickling bytes cannot hold a request, and the shutdown, open indefinitely. */
const BODY_READ_TIMEOUT_MS = 10_000;

/** How much of a body over the limit is read and thrown away (see {@link readBody}). */
const DRAIN_MAX_BYTES = 8 * MAX_BODY_BYTES;

/** A client refused in a loop warns once per kind and then at most this often; the rest go to debug. */
const REFUSAL_LOG_INTERVAL_MS = 60_000;

export interface CommandServerOptions extends ListenAddress {
  /** Command keys (never the `/ws` keys); at least one non-empty key. */
  readonly apiKeys: readonly string[];
  /** Where accepted envelopes go; owned by the caller, who closes it after the server. */
  readonly publisher: CommandPublisher;
  readonly metrics: Metrics;
  /** Clock for the `raw` timestamp prefix, in milliseconds; default `Date.now`. */
  readonly now?: () => number;
  /** The `raw` commands that pass (`--command-allow`); default the built-in list. */
  readonly allow?: RawCommandAllowlist;
}

/** Why a body is refused: its `reason` label and the `error` of the answer. */
interface BodyRefusal {
  readonly reason: RejectReason;
  readonly error: string;
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });
const TIMED_OUT = `request body not received within ${BODY_READ_TIMEOUT_MS} ms`;
// The answers to a failed publish. Only a 503 is safe to retry blindly: after a 504 the command
// may run, and a retry would run it twice.
const NOT_QUEUED = "the broker could not be reached or refused the command; nothing was queued";
const UNCONFIRMED = "the broker did not confirm the command; it may have been queued, so check " +
  "before sending it again";

/**
 * @throws {RangeError} When no usable key is given (the endpoint must not run unauthenticated).
 * @throws {Deno.errors.AddrInUse} When the port is taken.
 */
export async function startCommandServer(options: CommandServerOptions): Promise<HttpServer> {
  const keys = new ApiKeySet(options.apiKeys);
  if (keys.size === 0) throw new RangeError("Cannot start the command server: no command API key");
  const now = options.now ?? Date.now;
  const { metrics, publisher } = options;
  const allow = options.allow ?? new RawCommandAllowlist();

  // A client with a stale key retries for as long as it runs: one warning per request would bury
  // the journal, and statusengine_commands_rejected_total counts every refusal anyway.
  const refusals = new LogThrottle<string>(REFUSAL_LOG_INTERVAL_MS);
  const warnRefusal = (message: string, fields: Record<string, unknown>): void => {
    const skipped = refusals.due(message);
    if (skipped === undefined) return log.debug(message, fields);
    log.warn(message, { ...fields, refusals_not_logged: skipped });
  };

  const reject = (reason: RejectReason, error: string): Response => {
    metrics.commandsRejected.inc({ reason });
    return json(REJECT_STATUS[reason], { error });
  };

  const handle = async (req: Request, remote: string): Promise<Response> => {
    if (new URL(req.url).pathname !== "/commands") return json(404, { error: "not found" });
    // Before authentication and not counted: a wrong method is not an attempt to command.
    if (req.method !== "POST") {
      return json(405, { error: "method not allowed; use POST" }, { allow: "POST" });
    }
    if (!keys.matches(headerKey(req.headers))) {
      const refusal = headerKeyRefusal(req.headers, new URL(req.url));
      warnRefusal("command: rejected unauthorized request", { remote, error: refusal });
      return reject("auth", refusal);
    }
    const text = await readBody(req);
    if (typeof text !== "string") return reject(text.reason, text.error);
    const result = validateCommandBody(text, { nowSeconds: Math.floor(now() / 1000), allow });
    if (!result.ok) {
      if (result.reason === "denied") {
        warnRefusal("command: rejected a denied external command", {
          command: result.denied,
          rule: result.rule,
          remote,
        });
      } else {
        log.debug("command: rejected request", { reason: result.reason, error: result.error });
      }
      return reject(result.reason, result.error);
    }
    try {
      await publisher.publish(result.body);
    } catch (err: unknown) {
      metrics.commandsPublishErrors.inc();
      metrics.pipelineErrors.inc({ component: "command" });
      const unconfirmed = hasCode(err, "command_unconfirmed");
      log.error(unconfirmed ? "command: publish not confirmed" : "command: publishing failed", {
        backend: publisher.backend,
        commands: result.commands.length,
        error: errorMessage(err),
      });
      return unconfirmed ? json(504, { error: UNCONFIRMED }) : json(503, { error: NOT_QUEUED });
    }
    metrics.commandsPublished.inc();
    for (const command of result.commands) metrics.commandsReceived.inc({ command });
    log.debug("command: published", {
      backend: publisher.backend,
      accepted: result.commands.length,
      bytes: result.body.length,
      remote,
    });
    // 202, never 200: the broker took the message, nothing more is known.
    return json(202, { accepted: result.commands.length });
  };

  return await listen({
    ...options,
    name: "commands",
    onError: (err: unknown) => {
      log.error("command: request failed", { error: errorMessage(err) });
      return json(500, { error: "internal error" });
    },
    metrics,
  }, (req, info) => handle(req, info.remote));
}

/**
 * Read the whole body as UTF-8 text, refusing more than MAX_BODY_BYTES. What a refused body still
 * sends is read and thrown away, up to {@link DRAIN_MAX_BYTES} and within the deadline, before the
 * 413 goes out: closing on a client still sending makes the kernel reset the connection before it
 * reads the 413.
 */
async function readBody(req: Request): Promise<string | BodyRefusal> {
  // NaN (no or a bad Content-Length) compares false.
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (req.body === null) return "";
  const reader = req.body.getReader();
  using timer = deadline(BODY_READ_TIMEOUT_MS);
  const onTimeout = () => void reader.cancel().catch(() => {});
  timer.signal.addEventListener("abort", onTimeout, { once: true });
  const chunks: Uint8Array[] = [];
  let total = 0;
  const tooLarge = () => declared > MAX_BODY_BYTES || total > MAX_BODY_BYTES;
  let readError: string | undefined;
  try {
    for (;;) {
      if (declared > DRAIN_MAX_BYTES || total > DRAIN_MAX_BYTES) {
        await reader.cancel().catch(() => {});
        break;
      }
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
      // Past the limit the bytes are only counted.
      if (tooLarge()) chunks.length = 0;
      else chunks.push(value);
    }
  } catch (err: unknown) {
    readError = `cannot read the request body: ${errorMessage(err)}`;
  } finally {
    timer.signal.removeEventListener("abort", onTimeout);
  }
  if (tooLarge()) {
    return { reason: "too_large", error: `request body exceeds ${MAX_BODY_BYTES} bytes` };
  }
  // A cancelled read ends like a complete one; only the deadline tells them apart.
  if (timer.signal.aborted) return { reason: "malformed", error: TIMED_OUT };
  if (readError !== undefined) return { reason: "malformed", error: readError };
  try {
    return UTF8.decode(await new Blob(chunks as BlobPart[]).arrayBuffer());
  } catch {
    // Not repaired as queue payloads are (docs/tables.md#invalid-utf8): a command is typed by a
    // program that can send UTF-8, and a guessed repair could change it.
    return { reason: "malformed", error: "request body is not valid UTF-8" };
  }
}

function json(status: number, body: object, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}
