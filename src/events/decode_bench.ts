// Micro benchmarks of the per-event path. Inputs are built once, outside `fn`, so only the decode is measured.
// Run: deno bench -A src/events/decode_bench.ts
import { fixture, fixtureBytes } from "./_testing.ts";
import { decodeJob, decodePayload } from "./decode.ts";
import { parsePerfdata } from "./perfdata.ts";
import type { QueueName } from "./queues.ts";
import { repairUtf8 } from "./utf8_repair.ts";

const CTX = { nodeName: "N", nowSeconds: 1785470700, statusMaxAgeSeconds: 0 };

/** A bulk job of 200 events (the broker's default bulk maximum), cycling the fixture's events. */
function bulk200(queue: QueueName): string {
  const doc = JSON.parse(fixture(queue)) as { messages: unknown[] };
  const messages = Array.from({ length: 200 }, (_, i) => doc.messages[i % doc.messages.length]);
  return JSON.stringify({ messages, format: "none" });
}

const hoststatus = bulk200("statusngin_hoststatus");
const servicechecks = bulk200("statusngin_servicechecks");
const perfdata = bulk200("statusngin_service_perfdata");
const hoststatusBytes = new TextEncoder().encode(hoststatus);
const cp1252Bytes = hoststatusBytes.slice();
cp1252Bytes[cp1252Bytes.indexOf(0x50)] = 0xe4; // one CP1252 "ä" in the first plugin output
const perfString =
  "rta=0.084000ms;100.000000;500.000000;0.000000 pl=0%;20;60;0 'disk C:'=12,5GB;;;0;100";

Deno.bench("decodeJob hoststatus, 200 events", { group: "decode", baseline: true }, () => {
  decodeJob("statusngin_hoststatus", hoststatus, CTX);
});
Deno.bench("decodeJob servicechecks, 200 events", { group: "decode" }, () => {
  decodeJob("statusngin_servicechecks", servicechecks, CTX);
});
Deno.bench("decodeJob service_perfdata, 200 events", { group: "decode" }, () => {
  decodeJob("statusngin_service_perfdata", perfdata, CTX);
});
Deno.bench("JSON.parse only, hoststatus 200 events", { group: "decode" }, () => {
  JSON.parse(hoststatus);
});
Deno.bench("decodePayload hoststatus bytes, 200 events", { group: "decode" }, () => {
  decodePayload("statusngin_hoststatus", hoststatusBytes, CTX);
});

Deno.bench("repairUtf8 valid payload (no copy)", { group: "utf8", baseline: true }, () => {
  repairUtf8(hoststatusBytes);
});
Deno.bench("repairUtf8 payload with one CP1252 byte", { group: "utf8" }, () => {
  repairUtf8(cp1252Bytes);
});
Deno.bench("TextDecoder fatal validation (reference)", { group: "utf8" }, () => {
  new TextDecoder("utf-8", { fatal: true }).decode(hoststatusBytes);
});

Deno.bench("parsePerfdata three gauges", { group: "perfdata" }, () => {
  parsePerfdata(perfString);
});

Deno.bench("decodePayload single acknowledgement", { group: "single" }, () => {
  decodePayload("statusngin_acknowledgements", ackBytes, CTX);
});
const ackBytes = fixtureBytes("statusngin_acknowledgements");
