import type { StreamEvent } from "../../streaming/events.ts";
import { reportedCount } from "../../streaming/events.ts";
import { vectorLength } from "../../streaming/encode-embeddings.ts";
import { inputsOf } from "../../billing/embeddings-input.ts";
import { scrubLogDetail } from "../../log/scrub.ts";
import { UpstreamProtocolError, type ProviderAdapter } from "../provider.ts";

/**
 * The OpenAI embeddings API (POST /embeddings), for models of category `embedding`. It answers
 * in one body; what the client receives is written from it by streaming/encode-embeddings.ts.
 * Decoding checks the answer holds exactly one vector per input sent, indexed 0…n−1, all of one
 * length: anything else is an unreadable answer (502, uncharged, the next model is tried), since
 * a client matches vectors to inputs by `index` and would silently pair them wrong.
 */
export const openaiEmbeddingsAdapter: ProviderAdapter = {
  format: "openai",
  streams: false,

  buildRequest(provider, body) {
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", ...provider.headers };
    if (provider.apiKey) headers.authorization = `Bearer ${provider.apiKey}`;
    return { url: `${provider.base_url}/embeddings`, headers, body: JSON.stringify(body) };
  },

  createStreamDecoder() {
    return () => {
      throw new UpstreamProtocolError("the embeddings API does not stream");
    };
  },

  decodeBody(body, sent) {
    const b = body as { data?: unknown; usage?: { prompt_tokens?: unknown } | null; error?: unknown } | null;
    if (!b || typeof b !== "object" || !Array.isArray(b.data)) {
      // Some OpenAI-compatible proxies answer 200 with an error body.
      throw new UpstreamProtocolError(b?.error ? `the upstream answered 200 with an error: ${scrubLogDetail(JSON.stringify(b.error))}` : "the embeddings answer has no data array");
    }
    const expected = sent && typeof sent === "object" ? inputsOf((sent as { input?: unknown }).input).length : undefined;
    if (expected !== undefined && b.data.length !== expected) {
      throw new UpstreamProtocolError(`the embeddings answer holds ${b.data.length} vectors for ${expected} inputs`);
    }
    const seen = new Set<number>();
    let dimensions: number | undefined;
    for (const item of b.data as { index?: unknown; embedding?: unknown }[]) {
      const index = item?.index;
      if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= b.data.length || seen.has(index)) {
        throw new UpstreamProtocolError("the embeddings answer has missing, repeated or out-of-range indexes");
      }
      seen.add(index);
      const length = vectorLength(item.embedding);
      if (length === undefined) throw new UpstreamProtocolError(`the embedding at index ${index} is neither an array of numbers nor base64 float32`);
      if (dimensions !== undefined && length !== dimensions) throw new UpstreamProtocolError("the embeddings answer mixes vector lengths");
      dimensions = length;
    }
    // An embedding produces no tokens; a prompt count that is not a usable number is estimated by the meter.
    const events: StreamEvent[] = [{ type: "usage", inputTokens: reportedCount(b.usage?.prompt_tokens), outputTokens: 0 }];
    return events;
  },

  errorMessage(body) {
    const message = (body as { error?: { message?: unknown } })?.error?.message;
    return typeof message === "string" ? message : undefined;
  },
};
