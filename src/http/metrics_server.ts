/**
 * `/metrics`, `/healthz` (process alive) and `/readyz` (ready to do its job), on a listener of
 * their own so a scrape never queues behind other traffic. In http/, not metrics/, so the two
 * directories do not import each other.
 *
 * @module
 */
import { type HttpServer, listen, type ListenAddress, type ListenerMetrics } from "./listen.ts";

/** Readiness verdict with the reasons it is not ready. */
export interface Readiness {
  readonly ready: boolean;
  readonly reasons: readonly string[];
  /** Facts shown after the verdict, ready or not (the MySQL host in use of several). */
  readonly details?: readonly string[];
}

/** What the server needs of the registry; named here so http/ stays free of prom-client. */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsServerOptions extends ListenAddress {
  readonly registry: MetricsSource;
  /** `/readyz` verdict; default always ready. */
  readonly readiness?: () => Readiness;
  readonly listenerMetrics?: ListenerMetrics;
}

/** @throws {Deno.errors.AddrInUse} When the port is taken. */
export function startMetricsServer(options: MetricsServerOptions): Promise<HttpServer> {
  return listen({
    ...options,
    name: "metrics",
    onError: () => new Response("internal error\n", { status: 500 }),
    metrics: options.listenerMetrics,
  }, async (req) => {
    const { pathname } = new URL(req.url);
    if (req.method !== "GET" && req.method !== "HEAD") {
      return new Response("method not allowed\n", { status: 405 });
    }
    switch (pathname) {
      case "/metrics":
        return new Response(await options.registry.metrics(), {
          headers: { "content-type": options.registry.contentType },
        });
      case "/healthz":
        return new Response("ok\n");
      case "/readyz": {
        const verdict = options.readiness?.() ?? { ready: true, reasons: [] };
        const details = (verdict.details ?? []).map((d) => ` (${d})`).join("");
        return new Response(
          verdict.ready
            ? `ready${details}\n`
            : `not ready: ${verdict.reasons.join("; ")}${details}\n`,
          { status: verdict.ready ? 200 : 503 },
        );
      }
      default:
        return new Response("not found\n", { status: 404 });
    }
  });
}
