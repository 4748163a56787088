import type { FinishReason, StreamEvent } from "../../streaming/events.ts";
import { textFrameReader } from "../../streaming/text-frame-template.ts";
import { isRecord, parseFrameJson, vendorText, TemplateTextFrame, UpstreamProtocolError, type DecodedFrame, type ProviderAdapter, type StreamDecoder } from "../provider.ts";
import { SHAPES_ONLY } from "../../log/scrub.ts";
import { upstreamStreamErrorMessage } from "../upstream-errors.ts";
import { reportedCount } from "../../streaming/events.ts";
import { withoutServerTools } from "../../formats/anthropic-messages/server-tools.ts";
import { onlyHourMarks } from "../../formats/common/cache-marks.ts";

/** Where the decoder reads a text delta's text (what a learnt template must stand for). */
const readDeltaText = (data: unknown) => (data as { delta?: { text?: unknown } } | null)?.delta?.text;

const STOP: Record<string, FinishReason> = {
  end_turn: "stop",
  stop_sequence: "stop_sequence",
  max_tokens: "length",
  tool_use: "tool_calls",
  refusal: "refusal",
  pause_turn: "stop",
  model_context_window_exceeded: "length",
};

const DEFAULT_VERSION = "2023-06-01";

interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  /** The writes by lifetime (prompt caching's `ttl`), where Anthropic splits them. */
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null;
  /** Reasoning's share of output_tokens, where Anthropic reports it. */
  output_tokens_details?: { thinking_tokens?: number | null } | null;
  /** Where the answer ran (`"us"`, `"global"`): US-only inference is billed above the list price on recent models. */
  inference_geo?: string | null;
}

/**
 * Anthropic counts cached prompt tokens apart from input_tokens; ours is the whole prompt.
 * Counts that are not usable numbers are left out, so the meter estimates them.
 */
function usageEvent(u: AnthropicUsage, sent?: unknown): StreamEvent {
  const reported = reportedCount(u.input_tokens);
  // The writes: their total, or the split's sum where a server sends the split alone (the prompt is
  // all three parts: writes left out were a prompt billed short).
  const split = isRecord(u.cache_creation) ? u.cache_creation : undefined;
  const total = u.cache_creation_input_tokens;
  const splitParts = total == null && split ? [split.ephemeral_5m_input_tokens, split.ephemeral_1h_input_tokens] : [];
  const creation = total ?? (split ? splitParts.reduce<number>((sum, part) => sum + (reportedCount(part) ?? 0), 0) : undefined);
  // A cache part sent but not a count (negative, a string) leaves the prompt's size unknown: it is
  // estimated whole, as a refused input_tokens is. Read as 0, -30,000 cache reads dropped 30,000
  // prompt tokens from the bill (a billing probe).
  const unusable = (count: unknown) => count !== undefined && count !== null && reportedCount(count) === undefined;
  const partsUsable = ![u.cache_read_input_tokens, total, ...splitParts].some(unusable);
  const input = reported === undefined || !partsUsable ? undefined : reportedCount(reported + (reportedCount(u.cache_read_input_tokens) ?? 0) + (reportedCount(creation) ?? 0));
  // A prompt whose count is refused is estimated whole: its cache parts go with it (shown beside
  // an estimate they would say more was cached than the whole prompt, and price what was not billed).
  const cacheRead = input === undefined ? undefined : reportedCount(u.cache_read_input_tokens);
  const cacheWrite = input === undefined ? undefined : reportedCount(creation);
  const event: StreamEvent = { type: "usage", inputTokens: input, outputTokens: reportedCount(u.output_tokens), cacheReadTokens: cacheRead, cacheWriteTokens: cacheWrite };
  // Without the split every write is a 5-minute one (the default ttl, and the older API's only
  // kind), unless every mark the request carried asked for an hour: then there was no other kind.
  const oneHour = split ? reportedCount(split.ephemeral_1h_input_tokens) : cacheWrite && onlyHourMarks(sent) ? cacheWrite : undefined;
  if (oneHour !== undefined && cacheWrite !== undefined) event.cacheWrite1hTokens = Math.min(oneHour, cacheWrite);
  const thinking = reportedCount(u.output_tokens_details?.thinking_tokens);
  if (thinking !== undefined) event.reasoningTokens = thinking;
  if (typeof u.inference_geo === "string" && u.inference_geo.length <= 32) event.inferenceGeo = u.inference_geo;
  return event;
}

/**
 * A stream's counts so far: message_delta's counters are cumulative and a field it leaves out (or
 * sends as null) keeps message_start's value (the Anthropic SDK's rule: "overwrite when present").
 * Read alone, a message_delta that repeats `input_tokens` without the cache counts made the prompt
 * that small and priced its cache reads as none. A count that is not a usable number (negative,
 * fractional, absurd) replaces nothing either. message_start's output count is a placeholder and
 * is never carried over.
 */
function cumulativeUsage(before: AnthropicUsage | undefined, next: AnthropicUsage): AnthropicUsage {
  const merged: AnthropicUsage = { ...before, output_tokens_details: undefined };
  for (const field of ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"] as const) {
    const count = reportedCount(next[field]);
    if (count === undefined) {
      // A prompt part sent but not a count, with none before it: kept as sent, so the prompt is
      // estimated (usageEvent); left out, it read as none.
      if (field !== "output_tokens" && next[field] != null && reportedCount(merged[field]) === undefined) merged[field] = next[field];
      continue;
    }
    // Cumulative counts never go down: a later 0 (SGLang's Anthropic endpoint sends
    // `input_tokens: 0` in message_delta; envoyproxy/ai-gateway#1631 met the same) or a smaller
    // second message_delta billed the prompt (or answer) as that (a raw-TCP probe, 2026-11-30).
    const earlier = reportedCount(merged[field]);
    merged[field] = earlier !== undefined && earlier > count ? earlier : count;
  }
  if (isRecord(next.output_tokens_details)) merged.output_tokens_details = next.output_tokens_details;
  if (typeof next.inference_geo === "string") merged.inference_geo = next.inference_geo;
  if (isRecord(next.cache_creation)) {
    const split = { ...(isRecord(before?.cache_creation) ? before.cache_creation : {}) };
    for (const field of ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"] as const) {
      if (reportedCount(next.cache_creation[field]) !== undefined) split[field] = next.cache_creation[field];
    }
    merged.cache_creation = split;
  }
  return merged;
}

/**
 * `speed: "fast"` is billed above the model's standard price, which is what the price book
 * charges: the request goes at standard speed instead of costing the operator more than the
 * tenant pays (a tenant probe, 2026-11-29). The same object when there is nothing to drop.
 */
export function withoutFastMode(body: unknown): unknown {
  const b = body as Record<string, unknown> | null;
  if (!b || b.speed === undefined || b.speed === "standard") return body;
  const { speed: _dropped, ...rest } = b;
  return rest;
}

/** Anthropic's standard context window; the `context-1m-…` beta opens a larger one, billed above it at higher prices. */
const STANDARD_WINDOW = 200_000;

/**
 * The `anthropic-beta` value for a model of `contextLength` tokens: without `context-1m-…` when the
 * model is configured with the standard window. With that beta Anthropic takes a longer prompt than
 * the model's `context_length`, which the gateway's hold and context check stop at, and bills it at
 * its long-context prices: a tenant's 260,000-token prompt was charged at most 200,000 tokens at
 * the standard price (a hostile-tenant probe, 2026-11-30). Undefined when nothing is left.
 */
export function betasForWindow(beta: string, contextLength: number): string | undefined {
  if (contextLength > STANDARD_WINDOW || !/context-1m/i.test(beta)) return beta;
  const kept = beta.split(",").map((b) => b.trim()).filter((b) => b !== "" && !/^context-1m/i.test(b));
  return kept.length > 0 ? kept.join(",") : undefined;
}

/** The provider's configured `anthropic-beta` (any case), taken out of `headers` (the request's, spread from the config). */
function configuredBeta(configured: Record<string, string>, headers: Record<string, string>): string | undefined {
  for (const name in configured) {
    if (name.toLowerCase() !== "anthropic-beta") continue;
    delete headers[name];
    return configured[name];
  }
  return undefined;
}

export const anthropicAdapter: ProviderAdapter = {
  format: "anthropic",

  buildRequest(provider, body, clientHeaders) {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json",
      "anthropic-version": clientHeaders.get("anthropic-version") ?? DEFAULT_VERSION,
      ...provider.headers,
    };
    // The client's betas beside any the operator configured for the provider (both go), under
    // one lower-case name whatever case the config wrote it in.
    const client = clientHeaders.get("anthropic-beta");
    const configured = provider.headers ? configuredBeta(provider.headers, headers) : undefined;
    const beta = configured && client ? `${configured},${client}` : (configured ?? client);
    if (beta) headers["anthropic-beta"] = beta;
    if (provider.apiKey) headers["x-api-key"] = provider.apiKey;
    return { url: `${provider.base_url}/v1/messages`, headers, body: JSON.stringify(withoutServerTools(withoutFastMode(body) as Record<string, unknown>)) };
  },

  modelsRequest(provider) {
    const headers: Record<string, string> = { accept: "application/json", "anthropic-version": DEFAULT_VERSION, ...provider.headers };
    if (provider.apiKey) headers["x-api-key"] = provider.apiKey;
    return { url: `${provider.base_url}/v1/models`, headers };
  },

  createStreamDecoder(scrub = SHAPES_ONLY, sent?: unknown) {
    // Anthropic numbers content blocks; tool calls are numbered apart, from 0, for the union.
    const toolOfBlock = new Map<number, number>();
    let counts: AnthropicUsage | undefined;
    /**
     * The order every Anthropic stream keeps: one message_start first, a block's deltas and stop
     * only after its start. A stream that breaks it (a second message_start, a delta for a block
     * never started) fails as malformed: the Anthropic SDK throws on it ("Unexpected event
     * order"), and a second message_start would have replaced the prompt count billed. Blocks are
     * remembered past their stop: a relay's text frames are decoded late, when the meter asks.
     */
    let started = false;
    const startedBlocks = new Set<unknown>();
    /** How this answer writes a text delta, learnt from the first one parsed (text-frame-template.ts). */
    const textFrames = textFrameReader('"text"', readDeltaText);
    const outOfOrder = (kind: unknown, index: unknown): boolean => {
      switch (kind) {
        case "message_start":
          if (started) return true;
          started = true;
          return false;
        case "content_block_start":
          if (!started) return true;
          startedBlocks.add(index);
          return false;
        case "content_block_delta":
        case "content_block_stop":
          return !started || !startedBlocks.has(index);
        case "message_delta":
          return !started;
        default:
          return false;
      }
    };
    const decode: StreamDecoder = (frame): DecodedFrame => {
      const text = textFrames.read(frame);
      if (text !== undefined) return new TemplateTextFrame(frame.data, text);
      const data = parseFrameJson(frame.data) as Record<string, any>;
      const events: StreamEvent[] = [];
      if (data === null || typeof data !== "object") return { parsed: data, events };
      // An `error` event is an error whatever its data says it is.
      const kind = frame.event === "error" ? "error" : (data.type ?? frame.event);
      if (outOfOrder(kind, data.index)) {
        events.push({ type: "error", errorType: "upstream", message: "The upstream provider sent malformed data." });
        return { parsed: data, events };
      }
      switch (kind) {
        case "message_start": {
          const usage = data.message?.usage as AnthropicUsage | undefined;
          // Its output count is a placeholder (1): not a count message_delta's could be held to.
          if (usage && typeof usage === "object") counts = cumulativeUsage(undefined, { ...usage, output_tokens: undefined });
          const u = counts ? usageEvent(counts, sent) : undefined;
          events.push({ type: "start", inputTokens: u && u.type === "usage" ? u.inputTokens : undefined });
          // message_start's output_tokens is a placeholder (1); only message_delta's counts, so
          // an answer whose final usage is missing or broken is estimated, not billed one token.
          if (u && u.type === "usage") events.push({ ...u, outputTokens: undefined, reasoningTokens: undefined });
          break;
        }
        case "content_block_start": {
          const block = data.content_block ?? {};
          // Only strings reach a client as text: a vendor's `5` or `{}` there is dropped, not passed on as a number or object.
          if (block.type === "text" && typeof block.text === "string" && block.text) events.push({ type: "text", text: block.text });
          else if (block.type === "thinking" && (vendorText(block.thinking) || vendorText(block.signature))) {
            events.push({ type: "reasoning", text: vendorText(block.thinking), ...(vendorText(block.signature) ? { signature: block.signature } : {}) });
          } else if (block.type === "redacted_thinking" && typeof block.data === "string") events.push({ type: "redacted-reasoning", data: block.data });
          else if (block.type === "tool_use") {
            const index = toolOfBlock.size;
            toolOfBlock.set(data.index, index);
            const input = block.input && Object.keys(block.input).length > 0 ? JSON.stringify(block.input) : "";
            events.push({ type: "tool-call", index, id: vendorText(block.id) || undefined, name: vendorText(block.name), argumentsDelta: input });
          }
          break;
        }
        case "content_block_delta": {
          const delta = data.delta ?? {};
          if (delta.type === "text_delta") {
            events.push({ type: "text", text: vendorText(delta.text) });
            if (typeof delta.text === "string") textFrames.learn(frame, delta.text);
          }
          else if (delta.type === "input_json_delta") {
            const index = toolOfBlock.get(data.index);
            if (index !== undefined) events.push({ type: "tool-call", index, argumentsDelta: vendorText(delta.partial_json) });
          } else if (delta.type === "thinking_delta") events.push({ type: "reasoning", text: vendorText(delta.thinking) });
          else if (delta.type === "signature_delta" && typeof delta.signature === "string") events.push({ type: "reasoning", text: "", signature: delta.signature });
          break;
        }
        case "message_delta":
          if (data.usage && typeof data.usage === "object") events.push(usageEvent((counts = cumulativeUsage(counts, data.usage)), sent));
          if (data.delta?.stop_reason) {
            events.push({ type: "finish", reason: STOP[data.delta.stop_reason] ?? "stop", stopSequence: data.delta.stop_sequence ?? undefined });
          }
          break;
        case "error": {
          const kind = data.error?.type === "overloaded_error" ? "overloaded" : "upstream";
          const message = kind === "overloaded"
            ? "The upstream provider is overloaded; retry shortly."
            : upstreamStreamErrorMessage("The upstream provider reported an error during the answer", data.error?.message ?? data.message, scrub);
          events.push({ type: "error", errorType: kind, message });
          break;
        }
      }
      return kind === "message_stop" ? { parsed: data, events, last: true } : kind === "content_block_stop" ? { parsed: data, events, endsBlock: true } : { parsed: data, events };
    };
    decode.readText = textFrames.read;
    return decode;
  },

  decodeBody(body, sent, scrub = SHAPES_ONLY) {
    const b = body as { type?: string; error?: unknown; content?: Record<string, any>[]; stop_reason?: string; stop_sequence?: string | null; usage?: AnthropicUsage };
    // An error body with a 200 status (proxies do this); passed through, its text would reach the client.
    if (b?.type === "error" || (b?.error && !Array.isArray(b.content))) throw new UpstreamProtocolError(`the upstream answered 200 with an error: ${scrub.logDetail(JSON.stringify(b.error ?? b))}`);
    // Anything else without a content list (`{}`, `[]`, `null`, usage alone) is not a message:
    // passed on as an empty one, the client would never know the upstream failed.
    if (!isRecord(b) || !Array.isArray(b.content)) throw new UpstreamProtocolError("the upstream answered 200 without a message");
    const events: StreamEvent[] = [];
    let tools = 0;
    for (const block of b.content) {
      if (block.type === "text") events.push({ type: "text", text: block.text ?? "" });
      else if (block.type === "thinking") events.push({ type: "reasoning", text: block.thinking ?? "", ...(typeof block.signature === "string" ? { signature: block.signature } : {}) });
      else if (block.type === "redacted_thinking" && typeof block.data === "string") events.push({ type: "redacted-reasoning", data: block.data });
      else if (block.type === "tool_use") {
        events.push({ type: "tool-call", index: tools++, id: block.id, name: block.name, argumentsDelta: JSON.stringify(block.input ?? {}) });
      }
    }
    if (b.stop_reason) events.push({ type: "finish", reason: STOP[b.stop_reason] ?? "stop", stopSequence: b.stop_sequence ?? undefined });
    if (b.usage && typeof b.usage === "object") events.push(usageEvent(b.usage, sent));
    return events;
  },

  errorMessage(body) {
    const message = (body as { error?: { message?: unknown } })?.error?.message;
    return typeof message === "string" ? message : undefined;
  },
};
