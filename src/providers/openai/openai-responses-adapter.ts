import type { FinishReason, StreamEvent } from "../../streaming/events.ts";
import { reportedCount } from "../../streaming/events.ts";
import { isRecord, parseFrameJson, vendorText, UpstreamProtocolError, type DecodedFrame, type ProviderAdapter } from "../provider.ts";
import { SHAPES_ONLY, type Scrubber } from "../../log/scrub.ts";
import { OVERLOADED_WORDS, RATE_LIMITED_WORDS, upstreamStreamErrorMessage } from "../upstream-errors.ts";
import { openaiReasoningSignature } from "../../formats/common/carried-thinking.ts";
import { openaiAdapter, openaiJsonHeaders, outputWithReasoning, withoutUnpricedExtras } from "./openai-adapter.ts";

/**
 * OpenAI's Responses API as an upstream (`models[].upstream_api: "responses"`): `POST
 * /responses`, whose answer is a sequence of typed events (`response.output_text.delta`,
 * `response.function_call_arguments.delta`, `response.completed`…) instead of chat chunks. The
 * request is built from the gateway's chat request (formats/openai-responses/chat-to-responses.ts);
 * this file decodes the answer into the one event union, so the same meter and encoders serve it.
 * Why this API at all: OpenAI gives GPT-5.4 and later function tools together with reasoning, and
 * GPT-6 Astra and GPT-6.1 Sol function tools at all, only here (docs/decisions.md).
 *
 * Hardened as the chat decoder is: every field is read with care (a string where text is, a count
 * where usage is), frames that are not JSON or nest too deep are a protocol error, events of kinds
 * it does not know are passed over, an answer without usage is estimated by the meter.
 */

/** The events a stream may announce its answer with (a background one queues first). */
const STARTS = new Set(["response.created", "response.in_progress", "response.queued"]);

/** OpenAI's reasons an answer stopped early (`incomplete_details.reason`), in our words. */
const INCOMPLETE: Record<string, FinishReason> = { max_output_tokens: "length", content_filter: "content_filter" };

interface ResponsesUsage {
  input_tokens?: unknown;
  output_tokens?: unknown;
  /** Both parts of `input_tokens`. */
  input_tokens_details?: { cached_tokens?: unknown; cache_write_tokens?: unknown } | null;
  /** Part of `output_tokens`. */
  output_tokens_details?: { reasoning_tokens?: unknown } | null;
  total_tokens?: unknown;
}

/**
 * A Responses usage object as the union's usage: counts that are not usable are left out (the
 * meter estimates them); cached parts are cut to the prompt, as the chat decoder cuts them.
 * `response`: the response the usage came in, whose `service_tier` prices it (flex) and whose
 * `prompt_cache_retention` says how long its writes are kept: a `"12h"` answer's writes are
 * OpenAI's 12-hour writes (2.5× input from GPT-5.6 on, twice the 30-minute writes' 1.25×), the
 * union's long-lived writes (`cacheWrite1hTokens`, priced at `cache_write_1h_per_mtok`). The usage
 * object does not split them; the retention is per request, so every write of that answer is one.
 * Read from the answer as the tier is (the response echoes it), never from what was asked: a
 * `"24h"` echo (older models' extended caching, echoed by GPT-5.6 unasked) is not a 12-hour write.
 */
function usageEvent(u: ResponsesUsage, response: Record<string, unknown>): StreamEvent & { type: "usage" } {
  const tier = response.service_tier;
  const input = reportedCount(u.input_tokens);
  let reads: number | undefined;
  let writes: number | undefined;
  if (input !== undefined) {
    reads = Math.min(reportedCount(u.input_tokens_details?.cached_tokens) ?? 0, input);
    writes = Math.min(reportedCount(u.input_tokens_details?.cache_write_tokens) ?? 0, input - reads);
  }
  const reasoning = reportedCount(u.output_tokens_details?.reasoning_tokens);
  // Reasoning counted apart from output_tokens (xAI's, and proxies of Gemini's) is output all the same (openai-adapter.ts).
  const event: StreamEvent & { type: "usage" } = { type: "usage", inputTokens: input, outputTokens: outputWithReasoning(input, reportedCount(u.output_tokens), reasoning, u.total_tokens), cacheReadTokens: reads };
  if (writes) {
    event.cacheWriteTokens = writes;
    if (response.prompt_cache_retention === TWELVE_HOURS) event.cacheWrite1hTokens = writes;
  }
  if (typeof tier === "string" && tier.length <= 32) event.serviceTier = tier;
  if (reasoning) event.reasoningTokens = reasoning;
  return event;
}

/** The retention whose writes OpenAI bills at its long-lived write price (developers.openai.com, prompt caching guide). */
const TWELVE_HOURS = "12h";

/** Why the answer stopped, from its final response: `calls` when it called a tool. */
function finishOf(response: Record<string, any>, calls: boolean): FinishReason {
  if (response.status === "incomplete") {
    const reason = isRecord(response.incomplete_details) ? response.incomplete_details.reason : undefined;
    return (typeof reason === "string" && INCOMPLETE[reason]) || "length";
  }
  return calls ? "tool_calls" : "stop";
}

/**
 * OpenAI's codes (`error.code` of `response.failed`, `code` of an `error` event) that say the
 * vendor key is rate limited or the vendor overloaded: the key's state, not the answer's. Read as
 * Anthropic's `overloaded_error` is: before anything reached the client, the key cools (as a 429
 * would have cooled it) and another key of the pool, or a retry, is asked; the client is told a
 * retry is appropriate. Read as any failure, a rate-limited key was asked again at once and the
 * client was told the upstream failed (a probe, 2026-11-30).
 */
const OVERLOADED_CODES = new Set(["rate_limit_exceeded", "server_is_overloaded"]);

/**
 * The gateway's words for an overload, the same as said with a 429 or 503 status
 * (upstream-errors.ts): OpenAI's sentence names the operator's organisation and the upstream model.
 */
const OVERLOAD_WORDS: Record<string, string> = { rate_limit_exceeded: RATE_LIMITED_WORDS, server_is_overloaded: OVERLOADED_WORDS };

/**
 * A failed response's (or `error` event's) words for the client, scrubbed; `code`: OpenAI's code
 * for it. An overload is told in the gateway's words, the vendor's kept in `said` for the key pool.
 */
function failure(said: unknown, scrub: Scrubber, code?: unknown): StreamEvent {
  if (typeof code === "string" && OVERLOADED_CODES.has(code)) {
    return { type: "error", errorType: "overloaded", message: OVERLOAD_WORDS[code]!, said: typeof said === "string" ? scrub.forClient(said) : "" };
  }
  return { type: "error", errorType: "upstream", message: upstreamStreamErrorMessage("The upstream provider reported an error during the answer", said, scrub) };
}

/** The text of a reasoning item's parts (`summary` parts, else `content`'s reasoning text), paragraphs apart as OpenAI shows them. */
function reasoningText(item: Record<string, any>): string {
  const texts = (parts: unknown) => (Array.isArray(parts) ? parts : []).flatMap((p) => (isRecord(p) && typeof p.text === "string" && p.text ? [p.text] : []));
  const summary = texts(item.summary);
  return (summary.length > 0 ? summary : texts(item.content)).join("\n\n");
}

/** A custom (free-form) tool's call as the union's call: the gateway sends custom tools as functions taking `{input}`, which encoders unwrap. */
const customArguments = (input: unknown) => JSON.stringify({ input: vendorText(input) });

/** The events of one finished output item (a whole answer's, or one a stream gave only when done). */
function itemEvents(item: Record<string, any>, events: StreamEvent[], nextCall: () => number): void {
  switch (item.type) {
    case "reasoning": {
      const text = reasoningText(item);
      const encrypted = typeof item.encrypted_content === "string" && item.encrypted_content ? openaiReasoningSignature(item.encrypted_content) : undefined;
      if (text || encrypted) events.push({ type: "reasoning", text, ...(encrypted ? { signature: encrypted } : {}) });
      return;
    }
    case "message":
      for (const part of Array.isArray(item.content) ? item.content : []) {
        if (!isRecord(part)) continue;
        if (part.type === "output_text" && typeof part.text === "string" && part.text) events.push({ type: "text", text: part.text });
        else if (part.type === "refusal" && typeof part.refusal === "string" && part.refusal) events.push({ type: "refusal", text: part.refusal });
      }
      return;
    case "function_call":
      events.push({ type: "tool-call", index: nextCall(), id: callId(item), name: vendorText(item.name), argumentsDelta: vendorText(item.arguments) });
      return;
    case "custom_tool_call":
      events.push({ type: "tool-call", index: nextCall(), id: callId(item), name: vendorText(item.name), argumentsDelta: customArguments(item.input) });
      return;
  }
  // Hosted tools' items (web search, code interpreter…) are never asked for: nothing of theirs is the client's.
}

/** The id a tool's result must name (`call_id`; the item's own `id` is not it). */
const callId = (item: Record<string, any>) => (typeof item.call_id === "string" && item.call_id ? item.call_id : undefined);

/** What the stream decoder knows of one output item it has seen begin. */
interface SeenItem {
  type: string;
  /** A call's index in the union, and how much of its arguments went out (a stream may give them only when done). */
  call?: number;
  sent: number;
  /** Text or a refusal came as deltas: the item's done event repeats it. */
  streamed: boolean;
  /** Which of a reasoning item's texts streams: OpenAI's summary or an open model's reasoning text, never both. */
  reasoningFrom?: "summary" | "text";
  summaryIndex?: number;
}

export const openaiResponsesAdapter: ProviderAdapter = {
  format: "openai",
  // Chat clients of an OpenAI-kind provider get their own format written from the events, not these frames.
  relayable: false,

  buildRequest(provider, body) {
    const headers = openaiJsonHeaders(provider);
    // A dearer service tier is asked as the standard one, as on chat completions (openai-adapter.ts).
    return { url: `${provider.base_url}/responses`, headers, body: JSON.stringify(withoutUnpricedExtras(body, provider.openai_tiers === true)) };
  },

  modelsRequest: openaiAdapter.modelsRequest,

  createStreamDecoder(scrub = SHAPES_ONLY) {
    let started = false;
    let calls = 0;
    /** Items by their id, and by their place in the output for servers that leave ids out of deltas. */
    const byId = new Map<string, SeenItem>();
    const byIndex = new Map<number, SeenItem>();
    const seen = (e: Record<string, any>): SeenItem | undefined =>
      (typeof e.item_id === "string" ? byId.get(e.item_id) : undefined) ?? (typeof e.output_index === "number" ? byIndex.get(e.output_index) : undefined);
    /** An item met first in a delta (its `added` event lost or never sent): known from here on. */
    const note = (e: Record<string, any>, type: string): SeenItem => {
      const item: SeenItem = { type, sent: 0, streamed: false };
      if (typeof e.item_id === "string") byId.set(e.item_id, item);
      if (typeof e.output_index === "number") byIndex.set(e.output_index, item);
      return item;
    };
    const nextCall = () => calls++;

    return (frame): DecodedFrame => {
      // Not the Responses API's, but a compatible server may end so.
      if (frame.data === "[DONE]") return { parsed: undefined, events: [], last: true };
      const e = parseFrameJson(frame.data) as Record<string, any>;
      const events: StreamEvent[] = [];
      if (!isRecord(e)) return { parsed: e, events };
      const type = typeof e.type === "string" ? e.type : frame.event;
      if (type === undefined) return { parsed: e, events };
      if (!started && (STARTS.has(type) || type.startsWith("response.output"))) {
        started = true;
        events.push({ type: "start" });
      }
      switch (type) {
        case "response.output_text.delta":
        case "response.refusal.delta": {
          const item = seen(e) ?? note(e, "message");
          const text = vendorText(e.delta);
          if (text) {
            item.streamed = true;
            events.push({ type: type === "response.refusal.delta" ? "refusal" : "text", text });
          }
          break;
        }
        case "response.reasoning_summary_text.delta":
        case "response.reasoning_text.delta": {
          const item = seen(e) ?? note(e, "reasoning");
          const from = type === "response.reasoning_text.delta" ? "text" : "summary";
          item.reasoningFrom ??= from;
          const text = vendorText(e.delta);
          if (item.reasoningFrom !== from || !text) break;
          // A new summary part is a new paragraph, as OpenAI's own apps show them.
          const part = typeof e.summary_index === "number" ? e.summary_index : 0;
          const paragraph = from === "summary" && item.streamed && item.summaryIndex !== part ? "\n\n" : "";
          item.summaryIndex = part;
          item.streamed = true;
          events.push({ type: "reasoning", text: paragraph + text });
          break;
        }
        case "response.output_item.added": {
          const raw = e.item;
          if (!isRecord(raw) || typeof raw.type !== "string") break;
          const item = note({ item_id: typeof raw.id === "string" ? raw.id : undefined, output_index: e.output_index }, raw.type);
          if (raw.type === "function_call") {
            item.call = nextCall();
            const args = vendorText(raw.arguments);
            item.sent = args.length;
            events.push({ type: "tool-call", index: item.call, id: callId(raw), name: vendorText(raw.name), argumentsDelta: args });
          }
          break;
        }
        case "response.function_call_arguments.delta": {
          const item = seen(e);
          // Arguments of a call never announced have no name to go with: the call's done event gives it whole.
          if (item?.call === undefined) break;
          const args = vendorText(e.delta);
          if (!args) break;
          item.sent += args.length;
          events.push({ type: "tool-call", index: item.call, argumentsDelta: args });
          break;
        }
        case "response.output_item.done": {
          const raw = e.item;
          if (!isRecord(raw) || typeof raw.type !== "string") break;
          const item = (typeof raw.id === "string" ? byId.get(raw.id) : undefined) ?? (typeof e.output_index === "number" ? byIndex.get(e.output_index) : undefined);
          if (raw.type === "function_call" && item?.call !== undefined) {
            // What the deltas did not bring (a server that sends the arguments only whole).
            const args = vendorText(raw.arguments);
            if (args.length > item.sent) events.push({ type: "tool-call", index: item.call, argumentsDelta: args.slice(item.sent) });
            item.sent = Math.max(item.sent, args.length);
          } else if (raw.type === "reasoning" && item?.streamed) {
            // Its text went out as it came; the seal on it is here only.
            if (typeof raw.encrypted_content === "string" && raw.encrypted_content) events.push({ type: "reasoning", text: "", signature: openaiReasoningSignature(raw.encrypted_content) });
          } else if (!(raw.type === "message" && item?.streamed)) itemEvents(raw, events, nextCall);
          break;
        }
        case "response.completed":
        case "response.incomplete": {
          const response = isRecord(e.response) ? e.response : {};
          events.push({ type: "finish", reason: finishOf(type === "response.incomplete" ? { status: "incomplete", ...response } : response, calls > 0) });
          if (isRecord(response.usage)) events.push(usageEvent(response.usage, response));
          return { parsed: e, events, last: true };
        }
        case "response.failed": {
          const response = isRecord(e.response) ? e.response : {};
          // What the failed answer cost, when the vendor says: the meter charges it as any cut answer.
          if (isRecord(response.usage)) events.push(usageEvent(response.usage, response));
          events.push(failure(isRecord(response.error) ? response.error.message : undefined, scrub, isRecord(response.error) ? response.error.code : undefined));
          return { parsed: e, events, last: true };
        }
        case "error":
          events.push(failure(typeof e.message === "string" ? e.message : isRecord(e.error) ? e.error.message : undefined, scrub, e.code ?? (isRecord(e.error) ? e.error.code : undefined)));
          break;
      }
      return { parsed: e, events };
    };
  },

  decodeBody(body, _sent, scrub = SHAPES_ONLY) {
    const b = body as Record<string, any>;
    if (!isRecord(b)) throw new UpstreamProtocolError("the upstream answered 200 without a response");
    // A failed response, or an error body a proxy answered 200 with: its words must not reach the client as an answer.
    if (b.status === "failed" || (b.error !== undefined && b.error !== null)) {
      throw new UpstreamProtocolError(`the upstream answered 200 with a failed response: ${scrub.logDetail(JSON.stringify(b.error ?? null))}`);
    }
    // Without its output (or still under way: a background answer) it is not an answer, and charging for it would bill nothing.
    if (!Array.isArray(b.output) || b.status === "queued" || b.status === "in_progress") throw new UpstreamProtocolError("the upstream answered 200 without a finished response");
    const events: StreamEvent[] = [];
    let calls = 0;
    for (const item of b.output) if (isRecord(item)) itemEvents(item, events, () => calls++);
    events.push({ type: "finish", reason: finishOf(b, calls > 0) });
    if (isRecord(b.usage)) events.push(usageEvent(b.usage, b));
    return events;
  },

  errorMessage: openaiAdapter.errorMessage,
};
