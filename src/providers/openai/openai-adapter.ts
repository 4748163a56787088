import type { FinishReason, StreamEvent } from "../../streaming/events.ts";
import { isRecord, parseFrameJson, vendorText, TemplateTextFrame, UpstreamProtocolError, type DecodedFrame, type ProviderAdapter, type StreamDecoder } from "../provider.ts";
import { textFrameReader } from "../../streaming/text-frame-template.ts";
import { SHAPES_ONLY } from "../../log/scrub.ts";
import { upstreamStreamErrorMessage } from "../upstream-errors.ts";
import { reportedCount } from "../../streaming/events.ts";
import { onlyHourMarks } from "../../formats/common/cache-marks.ts";

/** Where the decoder reads a text chunk's text (what a learnt template must stand for). */
const readContent = (chunk: unknown) => (chunk as { choices?: { delta?: { content?: unknown } }[] } | null)?.choices?.[0]?.delta?.content;

const FINISH: Record<string, FinishReason> = {
  stop: "stop",
  length: "length",
  tool_calls: "tool_calls",
  function_call: "tool_calls",
  content_filter: "content_filter",
};

interface OpenAIUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  /** `cached_tokens` is part of `prompt_tokens`; `cache_write_tokens` too, where a server reports writes (OpenRouter). */
  prompt_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number } | null;
  /** Anthropic's name for writes, as LiteLLM-style servers pass it on (also part of `prompt_tokens`). */
  cache_creation_input_tokens?: number;
  /**
   * DeepSeek's name for cache reads (beside `prompt_cache_miss_tokens`; the two make `prompt_tokens`):
   * its API sends no `cached_tokens`, so its reads were priced as fresh input whatever the config's
   * `cache_read_per_mtok` said (a bill audit, 2026-11-30, second round).
   */
  prompt_cache_hit_tokens?: number;
  /**
   * Moonshot's (Kimi's) name for cache reads, at the usage's top level (also part of `prompt_tokens`):
   * read as none cached, a Kimi turn's reads were priced as fresh input (a bill audit, thirty-sixth session).
   */
  cached_tokens?: number;
  completion_tokens_details?: { reasoning_tokens?: number } | null;
  total_tokens?: number;
}

/** Image-capable chat upstreams (OpenRouter and others) return `images: [{image_url: {url}}]` beside the text. */
function imageEvents(images: unknown, events: StreamEvent[]): void {
  if (!Array.isArray(images)) return;
  for (const image of images) {
    const url = (image as { image_url?: { url?: unknown } })?.image_url?.url ?? (image as { url?: unknown })?.url;
    if (typeof url === "string" && url) events.push({ type: "image", url });
  }
}

/**
 * Counts that are not usable numbers are left out, so the meter estimates them. `tier`: the
 * answer's `service_tier` (beside its usage, at the chunk's top level), which prices it (flex).
 * `sent`: the request as sent, read only when writes come (see below).
 */
function usageEvent(u: OpenAIUsage, tier?: unknown, sent?: unknown): StreamEvent {
  const input = reportedCount(u.prompt_tokens);
  // The cached parts are inside the prompt: counts past it are cut down to it here, as the meter
  // charges them, so a client of another format is never shown more cached than prompt.
  // Moonshot's top-level count first, as its SDK reads it (@ai-sdk/moonshotai, convertMoonshotAIChatUsage).
  let reads = reportedCount(u.cached_tokens) ?? reportedCount(u.prompt_tokens_details?.cached_tokens) ?? reportedCount(u.prompt_cache_hit_tokens);
  let writes = reportedCount(u.prompt_tokens_details?.cache_write_tokens) ?? reportedCount(u.cache_creation_input_tokens);
  if (input === undefined) {
    // Cached parts of a prompt whose size is unknown (the gateway estimates it, as fresh input) say nothing usable.
    reads = writes = undefined;
  } else {
    // An OpenAI usage object is whole: a prompt count without cached parts has none (not an earlier report's).
    reads = Math.min(reads ?? 0, input);
    writes = Math.min(writes ?? 0, input - reads);
  }
  // Compatible servers that reason without counting it say nothing (or 0 beside reasoning text): the meter then estimates.
  const reasoning = reportedCount(u.completion_tokens_details?.reasoning_tokens);
  const event: StreamEvent = { type: "usage", inputTokens: input, outputTokens: outputWithReasoning(input, reportedCount(u.completion_tokens), reasoning, u.total_tokens), cacheReadTokens: reads };
  if (writes !== undefined) event.cacheWriteTokens = writes;
  // These servers report their writes as one total (OpenRouter's `cache_write_tokens`, LiteLLM's
  // `cache_creation_input_tokens`). A Claude model behind one is marked as Anthropic's API marks it
  // (`cache_control` on a message's parts), and bills a write marked `ttl: "1h"` at 2× input, not
  // 1.25×: when every mark the request carried asked for an hour, the writes are 1-hour writes, as on
  // an Anthropic upstream that sends their total alone (formats/common/cache-marks.ts). Priced
  // as 5-minute writes, a Claude Code turn on OpenRouter paid 62.5 % of the vendor's price for them.
  if (writes && onlyHourMarks(sent)) event.cacheWrite1hTokens = writes;
  if (typeof tier === "string" && tier.length <= 32) event.serviceTier = tier;
  if (reasoning) event.reasoningTokens = reasoning;
  return event;
}

/** Whether a chat usage object counts its reasoning apart from `completion_tokens` (see outputWithReasoning): not what is billed, so not shown as it came. */
export function reasoningCountedApart(usage: unknown): boolean {
  if (usage === null || typeof usage !== "object") return false;
  const u = usage as OpenAIUsage;
  const output = reportedCount(u.completion_tokens);
  return output !== undefined && outputWithReasoning(reportedCount(u.prompt_tokens), output, reportedCount(u.completion_tokens_details?.reasoning_tokens), u.total_tokens) !== output;
}

/**
 * The answer's output tokens, reasoning included. OpenAI counts reasoning inside
 * `completion_tokens` (`output_tokens` on the Responses API) and its `total_tokens` is prompt plus
 * that. xAI's Grok counts it apart ("reasoning token consumption will be counted separately from
 * completion_tokens, but will be counted in the total_tokens") and bills it as output, and so do
 * proxies that map Gemini's thoughts to OpenAI's shape: read as OpenAI's, a Grok answer of 1,499
 * tokens and 2,809 reasoning was charged 1,499 (55 % of the vendor's bill; a bill audit). A total
 * that is exactly prompt + output + reasoning says the reasoning was left out: it is added.
 */
export function outputWithReasoning(input: number | undefined, output: number | undefined, reasoning: number | undefined, total: unknown): number | undefined {
  if (input === undefined || output === undefined || !reasoning) return output;
  return reportedCount(total) === input + output + reasoning ? output + reasoning : output;
}

/**
 * Service tiers the vendor bills above its standard price (`priority`, `scale`): a client asking
 * for one is answered at the standard tier, which is what the price book charges, instead of
 * costing the operator more than the tenant pays (a tenant probe, 2026-11-29). `flex` (cheaper,
 * and priced so: config/price-rules.ts) and `default` pass; on OpenAI's own API, so does `auto`
 * as `default` (see withoutUnpricedExtras).
 */
const DEARER_TIERS = new Set(["priority", "scale"]);

/**
 * The body as sent, without what the vendor bills apart from the price book's token classes: a
 * dearer service tier (see DEARER_TIERS); spoken answers (`audio`, `"audio"` in `modalities`),
 * whose audio tokens cost several times text's; and `web_search_options`, whose searches carry a
 * fee per call (the spec runs no tools on the gateway's side; Anthropic's server tools are dropped
 * the same way). So are the compatible servers' own searches: OpenRouter's web plugin
 * (`plugins: [{id: "web"}]`, US$ 4 per 1,000 results, five a request unless `max_results` says
 * more) and xAI's Live Search (`search_parameters`, US$ 25 per 1,000 sources): they passed through
 * as any unknown field does, and a tenant's request costing a few tokens could run a search of
 * fifty results on the operator's bill (a bill audit, thirty-sixth session). OpenRouter's other
 * plugins stay. The model answers in text, at the prices charged. The same object when there is
 * nothing to drop.
 */
export function withoutUnpricedExtras(body: unknown, openaiItself = false): unknown {
  const b = body as Record<string, unknown> | null;
  if (!b) return body;
  const tier = typeof b.service_tier === "string" && DEARER_TIERS.has(b.service_tier);
  // OpenAI's own API runs a request without a tier (or `auto`) at the project's default, which the
  // project may set to Priority (billed ~2× the standard price the price book charges): there the
  // standard tier is asked for by name (a bill audit, 2026-11-30). Other servers' tiers are their own.
  const projectTier = openaiItself && (b.service_tier === undefined || b.service_tier === "auto");
  const spoken = b.audio !== undefined || (Array.isArray(b.modalities) && b.modalities.includes("audio"));
  const webPlugin = Array.isArray(b.plugins) && b.plugins.some(isWebPlugin);
  if (!tier && !projectTier && !spoken && !webPlugin && b.web_search_options === undefined && b.search_parameters === undefined) return body;
  const { service_tier, audio: _audio, web_search_options: _search, search_parameters: _liveSearch, ...rest } = b;
  if (webPlugin) {
    const kept = (b.plugins as unknown[]).filter((plugin) => !isWebPlugin(plugin));
    if (kept.length > 0) rest.plugins = kept;
    else delete rest.plugins;
  }
  if (tier || projectTier) {
    if (openaiItself) rest.service_tier = "default";
  } else if (service_tier !== undefined) rest.service_tier = service_tier;
  if (Array.isArray(rest.modalities)) {
    const kept = rest.modalities.filter((m) => m !== "audio");
    rest.modalities = kept.length > 0 ? kept : ["text"];
  }
  return rest;
}

/** OpenRouter's web search plugin (`{id: "web", …}`). */
const isWebPlugin = (plugin: unknown) => isRecord(plugin) && plugin.id === "web";

/** The headers of a JSON POST to an OpenAI-kind API: the provider's own, and its key as a bearer token. */
export function openaiJsonHeaders(provider: { headers?: Record<string, string>; apiKey?: string }): Record<string, string> {
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", ...provider.headers };
  if (provider.apiKey) headers.authorization = `Bearer ${provider.apiKey}`;
  return headers;
}

export const openaiAdapter: ProviderAdapter = {
  format: "openai",

  buildRequest(provider, body) {
    const headers = openaiJsonHeaders(provider);
    return { url: `${provider.base_url}/chat/completions`, headers, body: JSON.stringify(withoutUnpricedExtras(body, provider.openai_tiers === true)) };
  },

  modelsRequest(provider) {
    const headers: Record<string, string> = { accept: "application/json", ...provider.headers };
    if (provider.apiKey) headers.authorization = `Bearer ${provider.apiKey}`;
    return { url: `${provider.base_url}/models`, headers };
  },

  createStreamDecoder(scrub = SHAPES_ONLY, sent?: unknown) {
    // Upstream tool-call indexes are per choice and may start anywhere; ours count from 0.
    const toolIndex = new Map<number, number>();
    /** The id each upstream index's call was announced with: another id there is another call. */
    const toolId = new Map<number, string>();
    /** Our index of each call by its id, and of the last call: for servers that send no index. */
    const callById = new Map<string, number>();
    let lastCall = -1;
    let calls = 0;
    /** The index of the choice that is the answer (see below). */
    let answerIndex: number | undefined;
    /** How this answer writes a chunk of text alone, learnt from the first one parsed (text-frame-template.ts). */
    const textFrames = textFrameReader('"content"', readContent, '"obfuscation"');
    /** The `service_tier` the stream's chunks named: a usage chunk without one (a proxy that rebuilds it) is still priced at it (flex). */
    let tierSeen: string | undefined;
    const decode: StreamDecoder = (frame): DecodedFrame => {
      if (frame.data === "[DONE]") return { parsed: undefined, events: [], last: true };
      const text = textFrames.read(frame);
      if (text) return new TemplateTextFrame(frame.data, text);
      const chunk = parseFrameJson(frame.data) as {
        error?: { message?: string; type?: string } | string;
        choices?: { index?: number; delta?: Record<string, any>; finish_reason?: string | null; usage?: OpenAIUsage | null }[];
        usage?: OpenAIUsage | null;
        service_tier?: unknown;
      };
      const events: StreamEvent[] = [];
      if (chunk === null || typeof chunk !== "object") return { parsed: chunk, events };
      if (typeof chunk.service_tier === "string") tierSeen = chunk.service_tier;
      if (chunk.error) {
        const said = typeof chunk.error === "string" ? chunk.error : chunk.error.message;
        events.push({ type: "error", errorType: "upstream", message: upstreamStreamErrorMessage("The upstream provider reported an error during the answer", said, scrub) });
        return { parsed: chunk, events };
      }
      const choice = chunk.choices?.[0];
      // The answer is the first choice the stream names (0 from OpenAI; a server that numbers its
      // only choice otherwise is read the same, as its whole answer is: a raw-TCP probe, 2026-11-30).
      if (choice) answerIndex ??= typeof choice.index === "number" ? choice.index : 0;
      if (choice && (choice.index ?? 0) === answerIndex) {
        const delta = choice.delta;
        if (delta) {
          if (typeof delta.reasoning_content === "string" && delta.reasoning_content) events.push({ type: "reasoning", text: delta.reasoning_content });
          else if (typeof delta.reasoning === "string" && delta.reasoning) events.push({ type: "reasoning", text: delta.reasoning });
          if (typeof delta.content === "string" && delta.content) events.push({ type: "text", text: delta.content });
          // What the model said instead of an answer: its own kind, which each format writes where it keeps refusals.
          if (typeof delta.refusal === "string" && delta.refusal) events.push({ type: "refusal", text: delta.refusal });
          imageEvents(delta.images, events);
          if (Array.isArray(delta.tool_calls)) {
            for (const call of delta.tool_calls) {
              if (!isRecord(call)) continue;
              const id = typeof call.id === "string" && call.id !== "" ? call.id : undefined;
              // A custom tool's call (`custom: {name, input}`) streams its raw input where a function's arguments go.
              const part = isRecord(call.function) ? call.function : isRecord(call.custom) ? { name: call.custom.name, arguments: call.custom.input } : undefined;
              const named = typeof part?.name === "string" && part.name !== "";
              let index: number;
              let isNew: boolean;
              if (typeof call.index === "number") {
                // Some OpenAI-compatible servers put every call at index 0, each with its own id: a
                // call announced again under an index, with a name and another id, is a new call,
                // not more of the last one (its arguments would otherwise be glued onto the first's).
                // The same id on every chunk is the same call, and so is a chunk with another id but
                // no name: some servers change the id on a call's later chunks (Poolside's API,
                // mlx-openai-server before its PR #216).
                const known = toolIndex.get(call.index);
                const announced = toolId.get(call.index);
                isNew = known === undefined || (named && id !== undefined && announced !== undefined && id !== announced);
                index = isNew ? calls++ : known!;
                if (isNew) toolIndex.set(call.index, index);
                if (id !== undefined && (isNew || announced === undefined)) toolId.set(call.index, id);
              } else {
                // No index (servers that leave it out): an id seen before continues its call; a
                // chunk that names no function continues the last call (a call has a name); a named
                // one with a new id, or the first, is a new call.
                const known = id !== undefined ? callById.get(id) : undefined;
                isNew = known === undefined && (named || lastCall < 0);
                index = isNew ? calls++ : (known ?? lastCall);
              }
              if (isNew && id !== undefined) callById.set(id, index);
              lastCall = index;
              events.push({
                type: "tool-call",
                index,
                id: isNew ? id : undefined,
                name: isNew ? vendorText(part?.name) : undefined,
                argumentsDelta: vendorText(part?.arguments),
              });
            }
          } else if (isRecord(delta.function_call)) {
            // Legacy function calling (a client that offered `functions`): one call, named in its first chunk.
            const isNew = calls === 0;
            if (isNew) calls = 1;
            events.push({ type: "tool-call", index: 0, name: isNew ? vendorText(delta.function_call.name) : undefined, argumentsDelta: vendorText(delta.function_call.arguments) });
          }
        }
        if (typeof choice.finish_reason === "string" && choice.finish_reason) events.push({ type: "finish", reason: FINISH[choice.finish_reason] ?? "stop" });
      }
      // Moonshot's (Kimi's) streams carry the usage in the last chunk's choice (`choices[0].usage`),
      // not beside it: unread, every Kimi stream was billed at the gateway's estimate, its cache
      // reads as fresh input (a bill audit, thirty-sixth session). The chunk's own usage comes first.
      const usage = isRecord(chunk.usage) ? chunk.usage : isRecord(choice?.usage) ? choice.usage : undefined;
      if (usage) events.push(usageEvent(usage, tierSeen, sent));
      // A chunk that means its text alone (its delta's content) teaches how the next ones are written.
      const only = events.length === 1 ? events[0]! : undefined;
      if (only?.type === "text" && only.text === choice?.delta?.content) textFrames.learn(frame, only.text);
      return { parsed: chunk, events };
    };
    // An empty text is decoded as any frame is (the decoder above reads only a non-empty one).
    decode.readText = (frame) => textFrames.read(frame) || undefined;
    return decode;
  },

  decodeBody(body, sent, scrub = SHAPES_ONLY) {
    const b = body as { choices?: { message?: Record<string, any>; finish_reason?: string }[]; usage?: OpenAIUsage; error?: unknown; service_tier?: unknown };
    // Some OpenAI-compatible proxies answer 200 with an error body; passed through, its text would reach the client.
    if (b?.error && !Array.isArray(b.choices)) throw new UpstreamProtocolError(`the upstream answered 200 with an error: ${scrub.logDetail(JSON.stringify(b.error))}`);
    // Anything else without a choice (`{}`, `[]`, `null`, usage alone) is not an answer: passed on
    // as an empty one, the client would be charged for nothing and never know the upstream failed.
    if (!isRecord(b) || !Array.isArray(b.choices) || !isRecord(b.choices[0])) throw new UpstreamProtocolError("the upstream answered 200 without a choice");
    const events: StreamEvent[] = [];
    const choice = b.choices[0];
    const message = choice.message;
    if (message) {
      const reasoning = message.reasoning_content ?? message.reasoning;
      if (typeof reasoning === "string" && reasoning) events.push({ type: "reasoning", text: reasoning });
      if (typeof message.content === "string" && message.content) events.push({ type: "text", text: message.content });
      if (typeof message.refusal === "string" && message.refusal) events.push({ type: "refusal", text: message.refusal });
      imageEvents(message.images, events);
      (Array.isArray(message.tool_calls) ? message.tool_calls : []).filter(isRecord).forEach((call: any, index: number) => {
        // A custom tool's call (`custom: {name, input}`) as the union carries one: a call of `{"input": …}`.
        const custom = call.type === "custom" && isRecord(call.custom) ? call.custom : undefined;
        events.push({ type: "tool-call", index, id: typeof call.id === "string" ? call.id : undefined, name: vendorText(custom ? custom.name : call.function?.name), argumentsDelta: custom ? JSON.stringify({ input: vendorText(custom.input) }) : vendorText(call.function?.arguments) });
      });
      // Legacy function calling: the one call, when there are no tool calls.
      if (!Array.isArray(message.tool_calls) && isRecord(message.function_call)) {
        events.push({ type: "tool-call", index: 0, name: vendorText(message.function_call.name), argumentsDelta: vendorText(message.function_call.arguments) });
      }
    }
    if (typeof choice.finish_reason === "string" && choice.finish_reason) events.push({ type: "finish", reason: FINISH[choice.finish_reason] ?? "stop" });
    if (b.usage && typeof b.usage === "object") events.push(usageEvent(b.usage, b.service_tier, sent));
    return events;
  },

  errorMessage(body) {
    const message = (body as { error?: { message?: unknown } })?.error?.message;
    return typeof message === "string" ? message : undefined;
  },
};
