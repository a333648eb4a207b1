/**
 * The HTTP side both time-series backends share: one POST with a timeout, and the answer
 * sorted into written, refused (4xx: sending again cannot help) or failed (network error,
 * timeout, 5xx, 429: worth a retry), and the retries such a failure gets.
 *
 * @module
 */
import { type RetryPolicy, type SinkObserver, SinkWriteError } from "./sink.ts";
import { redactUrl } from "../util/redact.ts";

const REQUEST_TIMEOUT_MS = 10_000;
/** Bytes of an error answer kept for the log line. */
const ANSWER_BYTES = 300;

/** The credentials a backend's settings carry: a token, or a user and password. */
export interface EndpointCredentials {
  readonly token?: string | undefined;
  readonly user?: string | undefined;
  readonly password?: string | undefined;
}

/**
 * The `Authorization` header: `<scheme> <token>` (e.g. `Bearer` or `Token`) when there is a token,
 * else basic authentication of the user and password; undefined without credentials.
 */
export function authorization(scheme: string, c: EndpointCredentials): string | undefined {
  if (c.token) return `${scheme} ${c.token}`;
  if (!c.user && !c.password) return undefined;
  const bytes = new TextEncoder().encode(`${c.user ?? ""}:${c.password ?? ""}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}

/** Where a backend POSTs its batches: the base of each HTTP backend's transport. */
export class HttpEndpoint {
  /** The configured URL as logs and metrics may show it (password redacted). */
  readonly target: string;
  readonly #url: string;
  readonly #headers: Record<string, string>;

  /** Requests go to `url`; `configuredUrl`, redacted, is the `target`. See {@link authorization}. */
  constructor(
    configuredUrl: string,
    url: string,
    headers: Record<string, string>,
    tokenScheme: string,
    credentials: EndpointCredentials,
  ) {
    this.#url = url;
    this.target = redactUrl(configuredUrl);
    const value = authorization(tokenScheme, credentials);
    this.#headers = value === undefined ? headers : { ...headers, Authorization: value };
  }

  /**
   * POST `body`; resolve with the answer's text on 2xx, throw a {@link SinkWriteError} otherwise.
   * `refusedReason` names the drop reason of a 4xx answer from its text (default `rejected`).
   */
  async post(
    body: BodyInit,
    signal: AbortSignal,
    refusedReason: (status: number, text: string) => "rejected" | "out_of_order" = () => "rejected",
  ): Promise<string> {
    const url = this.#url;
    let res: Response;
    try {
      res = await fetch(url, {
        method: "POST",
        body,
        headers: this.#headers,
        signal: AbortSignal.any([AbortSignal.timeout(REQUEST_TIMEOUT_MS), signal]),
      });
    } catch (err: unknown) {
      const what = err instanceof Error && err.name === "TimeoutError"
        ? `no answer within ${REQUEST_TIMEOUT_MS} ms`
        : err instanceof Error
        ? err.message
        : String(err);
      // A network error may quote the URL, password included.
      throw new SinkWriteError(
        `POST ${redactUrl(url)}: ${what.replaceAll(url, redactUrl(url))}`,
        { retryable: true },
      );
    }
    const text = await res.text().catch(() => "");
    if (res.ok) return text;
    const answer = `POST ${redactUrl(url)}: HTTP ${res.status} ${
      text.slice(0, ANSWER_BYTES).trim()
    }`;
    // 429 and 5xx may pass, any other answer would repeat (remote write spec, InfluxDB's API).
    if (res.status === 429 || res.status >= 500) {
      throw new SinkWriteError(answer, { retryable: true });
    }
    throw new SinkWriteError(answer, { retryable: false, reason: refusedReason(res.status, text) });
  }
}

/** Retries of a batch lost to a failure that may pass; no jitter: one batch in flight at a time. */
export const HTTP_RETRY: RetryPolicy = {
  retries: 3,
  backoff: { initialMs: 500, maxMs: 5_000, jitter: 0 },
};

/** The options of an HTTP backend's client besides its settings. */
export interface HttpClientOptions {
  /** Labels still quoted (`--perfdata-label-quotes keep`): strip them (docs/perfdata.md#labels). */
  readonly quotedLabels?: boolean;
  readonly observer?: SinkObserver;
  readonly statsIntervalMs?: number | undefined;
}
