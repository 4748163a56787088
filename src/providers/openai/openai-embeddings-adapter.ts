import { embeddingsEvents, embeddingsFault, faultMessage, inputCountOf, reportedPromptTokens } from "../../formats/openai-embeddings/check-embeddings.ts";
import { SHAPES_ONLY } from "../../log/scrub.ts";
import { UpstreamProtocolError, type ProviderAdapter } from "../provider.ts";
import { openaiJsonHeaders } from "./openai-adapter.ts";

/**
 * The OpenAI embeddings API (POST /embeddings), for models of category `embedding`. It answers
 * in one body; what the client receives is written from it by formats/openai-embeddings/encode-embeddings.ts.
 * Decoding checks the answer holds exactly one vector per input sent, indexed 0…n−1, all of one
 * length (formats/openai-embeddings/check-embeddings.ts): anything else is an unreadable answer
 * (502, uncharged, the next model is tried). Large answers are checked the same way on the
 * embeddings thread instead (formats/openai-embeddings/embeddings-thread.ts).
 */
export const openaiEmbeddingsAdapter: ProviderAdapter = {
  format: "openai",
  streams: false,

  buildRequest(provider, body) {
    const headers = openaiJsonHeaders(provider);
    return { url: `${provider.base_url}/embeddings`, headers, body: JSON.stringify(body) };
  },

  createStreamDecoder() {
    return () => {
      throw new UpstreamProtocolError("the embeddings API does not stream");
    };
  },

  decodeBody(body, sent, scrub = SHAPES_ONLY) {
    const fault = embeddingsFault(body, inputCountOf(sent));
    if (fault) throw new UpstreamProtocolError(faultMessage(fault, scrub));
    // An embedding produces no tokens; a prompt count that is not a usable number is estimated by the meter.
    return embeddingsEvents(reportedPromptTokens(body));
  },

  errorMessage(body) {
    const message = (body as { error?: { message?: unknown } })?.error?.message;
    return typeof message === "string" ? message : undefined;
  },
};
