import type { StreamEvent } from "../../streaming/events.ts";
import type { ProviderAdapter } from "../provider.ts";
import { UpstreamProtocolError } from "../provider.ts";
import { sniffImageType } from "../image-type.ts";
import { reportedCount } from "../../streaming/events.ts";
import { openaiJsonHeaders } from "./openai-adapter.ts";

/**
 * The OpenAI images API (POST /images/generations) behind a chat endpoint: one prompt in,
 * base64 images out. It never streams; the pipeline turns its answer into frames itself.
 */
export const openaiImagesAdapter: ProviderAdapter = {
  format: "openai",
  streams: false,

  buildRequest(provider, body) {
    const headers = openaiJsonHeaders(provider);
    return { url: `${provider.base_url}/images/generations`, headers, body: JSON.stringify(body) };
  },

  createStreamDecoder() {
    return () => {
      throw new UpstreamProtocolError("the images API does not stream");
    };
  },

  decodeBody(body) {
    const b = body as { data?: { b64_json?: string; url?: string }[]; output_format?: string; usage?: { input_tokens?: number; output_tokens?: number; input_tokens_details?: { cached_tokens?: number } | null } };
    const events: StreamEvent[] = [];
    for (const item of b?.data ?? []) {
      if (typeof item.b64_json === "string" && item.b64_json) {
        const type = sniffImageType(Buffer.from(item.b64_json.slice(0, 24), "base64")) ?? (b.output_format ? `image/${b.output_format}` : "image/png");
        events.push({ type: "image", url: `data:${type};base64,${item.b64_json}` });
      } else if (typeof item.url === "string" && item.url) events.push({ type: "image", url: item.url });
    }
    if (events.length === 0) throw new UpstreamProtocolError("the images API answered without an image");
    events.push({ type: "finish", reason: "stop" });
    // gpt-image models report tokens; DALL·E reports none, and then only the per-image price applies.
    // A prompt's cached text tokens (inside its input count, as on chat) are priced as cache reads.
    const input = reportedCount(b.usage?.input_tokens ?? 0);
    const cached = reportedCount(b.usage?.input_tokens_details?.cached_tokens);
    events.push({ type: "usage", inputTokens: input, outputTokens: reportedCount(b.usage?.output_tokens ?? 0), cacheReadTokens: input === undefined ? undefined : Math.min(cached ?? 0, input) });
    return events;
  },

  errorMessage(body) {
    const message = (body as { error?: { message?: unknown } })?.error?.message;
    return typeof message === "string" ? message : undefined;
  },
};
