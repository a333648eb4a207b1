/**
 * The authenticated HTTP surfaces' shared parts and the `GET /ws` stream.
 *
 * @module
 */
export { ApiKeySet, constantTimeEqual, handshakeKey, headerKey } from "./api_key.ts";
export {
  CLIENT_BUFFER_FRAMES,
  type ControlFrame,
  type ControlParse,
  HUB_BUFFER_FRAMES,
  HubClient,
  type HubSocket,
  parseControlFrame,
  parseTopicsParam,
  SOCKET_HIGH_WATER_BYTES,
  WebSocketHub,
  type WebSocketHubOptions,
  WRITE_TIMEOUT_MS,
} from "./ws_hub.ts";
export {
  IDLE_TIMEOUT_SECONDS,
  MAX_CLIENT_MESSAGE_BYTES,
  startWebSocketServer,
  type WebSocketServer,
  type WebSocketServerOptions,
} from "./ws_server.ts";
export { type HttpLimits, listen, type ListenerMetrics, type ListenerName } from "./listen.ts";
