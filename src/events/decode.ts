/**
 * Job body → {@linkcode DecodedJob}: payload shape (D3), stale filter, per-queue decoding and the
 * D7 classification of undecodable input. Pure: no I/O, no clock of its own, never throws.
 *
 * @module
 */

import { DecodeState, describe, isJsonObject, type JsonObject, reqInt } from "./_coerce.ts";
import { isQueueName, QUEUES, type QueueSpec } from "./queues.ts";
import type { DecodeContext, DecodedJob, InvalidReason } from "./types.ts";
import { repairUtf8 } from "./utf8_repair.ts";
import { errorMessage } from "../util/errors.ts";

// The replacing decoder is about 7 times faster than the fatal one on a 100-event job, so it
// decodes every payload; only a U+FFFD in its text (replaced, or sent by the core) makes the
// strict decoder decide whether the bytes were ill-formed and need repairUtf8.
const UTF8_STRICT = new TextDecoder("utf-8", { fatal: true });
const UTF8 = new TextDecoder();

function invalid(reason: InvalidReason, message: string): DecodedJob {
  return { kind: "invalid", reason, message };
}

/**
 * Decodes one event into `st`; returns true when the stale filter discarded it. The stale
 * check comes first so a backlog drain does not pay for decoding snapshots it throws away.
 */
function decodeEvent(
  spec: QueueSpec,
  st: DecodeState,
  ev: JsonObject,
  staleBefore: number | null,
): boolean {
  st.envelope = ev;
  if (staleBefore !== null) {
    const ts = reqInt(st, ev, "timestamp");
    if (st.reason !== null) return false;
    // Strictly older: an event exactly at the cutoff is kept (docs/tables.md#stale-status).
    if (ts < staleBefore) return true;
  }
  let payload = ev;
  const key = spec.payloadKey;
  if (key !== null) {
    const v = ev[key];
    if (v === undefined) {
      st.fail(
        "bad_shape",
        null,
        "",
        st.index >= 0
          ? `event has no "${key}" object`
          : `document is neither a bulk job {"messages":[…]} nor an event with a "${key}" object`,
      );
      return false;
    }
    if (!isJsonObject(v)) {
      st.fail(
        v === null ? "missing_field" : "bad_type",
        ev,
        key,
        `expected an object, got ${describe(v)}`,
      );
      return false;
    }
    payload = v;
  }
  spec.decode(st, ev, payload);
  return false;
}

/**
 * Decode one job of a queue (text after UTF-8 repair) into rows, downtime statements or a
 * core-restart cutoff. Both payload shapes are accepted on every queue
 * (docs/payloads.md#payload-shapes); one undecodable event makes the whole job `invalid`
 * (docs/payloads.md#decode-errors); stale status events are only counted in `staleDiscarded`.
 * With `ctx.collectEvents`, `events` holds the source objects the queue's `stream` rule keeps.
 *
 * @example A single-form acknowledgement
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodeJob } from "./decode.ts";
 * const job = decodeJob(
 *   "statusngin_acknowledgements",
 *   '{"type":1700,"timestamp":1785516972,"timestamp_usec":1,' +
 *     '"acknowledgement":{"host_name":"web01","acknowledgement_type":0}}',
 *   { nodeName: "N", nowSeconds: 1785517000, statusMaxAgeSeconds: 300 },
 * );
 * assert.ok(job.kind === "rows" && job.rows[0]?.table === "statusengine_host_acknowledgements");
 * ```
 */
export function decodeJob(queue: string, text: string, ctx: DecodeContext): DecodedJob {
  if (!isQueueName(queue)) {
    return invalid("unknown_queue", `queue ${JSON.stringify(queue)} is not a consumed queue`);
  }
  const spec = QUEUES[queue];
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err: unknown) {
    const detail = errorMessage(err);
    // V8 quotes part of the input; keep the message bounded for logs and the dead-letter file.
    return invalid(
      "not_json",
      `payload is not valid JSON: ${detail.length > 200 ? `${detail.slice(0, 200)}…` : detail}`,
    );
  }
  if (!isJsonObject(doc)) {
    return invalid("not_object", `top-level JSON value is ${describe(doc)}, not an object`);
  }

  const now = Math.floor(ctx.nowSeconds);
  const st = new DecodeState(ctx.nodeName, now);
  st.payloadKey = spec.payloadKey ?? "";
  if (ctx.perfdataLabelQuotes !== undefined) st.perfdataLabelQuotes = ctx.perfdataLabelQuotes;
  // One cutoff per job (docs/payloads.md#stale-status); 0 disables it.
  // The later of the age cutoff and the last core-restart sweep's (docs/core-restart.md).
  const swept = ctx.statusSweptBeforeSeconds ?? 0;
  const staleBefore = !spec.staleFilter
    ? null
    : ctx.statusMaxAgeSeconds > 0
    ? Math.max(now - ctx.statusMaxAgeSeconds, swept)
    : swept > 0
    ? swept
    : null;
  let stale = 0;
  // The /ws stream's copy of the events (docs/operations.md#ws); null unless a client listens.
  const events: JsonObject[] | null = ctx.collectEvents === true ? [] : null;
  const everyEvent = spec.stream === "every_event";

  // A bulk job's events, or the single-form document as its only event (`st.index` stays -1).
  const messages = doc["messages"];
  const bulk = Array.isArray(messages);
  const list: readonly unknown[] = bulk ? messages : [doc];
  for (let i = 0; i < list.length; i++) {
    const ev: unknown = list[i];
    if (bulk) st.index = i;
    if (!isJsonObject(ev)) {
      return invalid("bad_shape", `messages[${i}]: expected an event object, got ${describe(ev)}`);
    }
    const before = events === null ? 0 : effectiveCount(st);
    if (decodeEvent(spec, st, ev, staleBefore)) stale++;
    else if (events !== null && (everyEvent || effectiveCount(st) > before)) events.push(ev);
    if (st.reason !== null) return invalid(st.reason, st.message);
  }

  const collected = events === null ? {} : { events };
  switch (spec.output) {
    case "rows":
      return { kind: "rows", rows: st.rows, staleDiscarded: stale, ...collected };
    case "downtimes":
      return { kind: "downtimes", statements: st.statements, ...collected };
    case "core_restart":
      return st.restartCutoff !== null
        ? {
          kind: "core_restart",
          cutoff: st.restartCutoff,
          cutoffSource: st.restartCutoffSource,
          ...collected,
        }
        : { kind: "ignored", reason: st.ignored !== "" ? st.ignored : "bulk job without messages" };
  }
}

/** What an event can produce; growth across one event means it counted (QueueSpec.stream). */
function effectiveCount(st: DecodeState): number {
  return st.rows.length + st.statements.length + st.restarts;
}

/**
 * Repair (docs/payloads.md#utf8-repair), decode to text and {@linkcode decodeJob} a raw job body.
 * Never throws. Also returns whether invalid UTF-8 was repaired (counted, and warned about at a
 * limited rate) and the (repaired) text, e.g. for the dead-letter file.
 *
 * @example A CP1252 byte inside a log line
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodePayload } from "./decode.ts";
 * const body = new TextEncoder().encode(
 *   '{"type":300,"logentry":{"entry_time":1,"data_type":1,"data":"Datentr?ger"}}',
 * );
 * body[body.indexOf(0x3f)] = 0xe4; // the "?" becomes a CP1252 "ä"
 * const { job, repaired } = decodePayload("statusngin_logentries", body, {
 *   nodeName: "N",
 *   nowSeconds: 0,
 *   statusMaxAgeSeconds: 0,
 * });
 * assert.ok(repaired && job.kind === "rows" && job.rows[0]?.row.logentry_data === "Datenträger");
 * ```
 */
export function decodePayload(
  queue: string,
  bytes: Uint8Array,
  ctx: DecodeContext,
): { readonly job: DecodedJob; readonly repaired: boolean; readonly text: string } {
  let text = UTF8.decode(bytes);
  let repaired = false;
  if (text.includes("\uFFFD")) {
    try {
      UTF8_STRICT.decode(bytes);
    } catch (_err: unknown) {
      // Only TypeError (ill-formed input) can reach here; repairUtf8 applies the same strict
      // definition ("decodePayload: the repaired flag agrees with repairUtf8 for random bytes").
      const r = repairUtf8(bytes);
      repaired = r.repaired;
      text = UTF8.decode(r.bytes);
    }
  }
  return { job: decodeJob(queue, text, ctx), repaired, text };
}
