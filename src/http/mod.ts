/**
 * The authenticated HTTP surfaces' shared parts and the `GET /ws` stream.
 *
 * @module
 */
export { ApiKeySet, headerKey, headerKeyRefusal } from "./api_key.ts";
export { WebSocketHub } from "./ws_hub.ts";
export { startWebSocketServer, type WebSocketServer } from "./ws_server.ts";
export { listen } from "./listen.ts";
export type { HttpLimits, HttpServer, ListenAddress, ListenerName } from "./listen.ts";
export { type Readiness, startMetricsServer } from "./metrics_server.ts";
