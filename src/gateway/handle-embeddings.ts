import type { Catalogue } from "../catalogue/catalogue.ts";
import { openaiEmbeddings } from "../formats/format.ts";
import type { EmbeddingsThread } from "../formats/openai-embeddings/embeddings-thread.ts";
import { measureEmbeddingsInput, type EmbeddingsInput } from "../formats/openai-embeddings/embeddings-input.ts";
import { forward, type ForwardDeps } from "./forward.ts";
import type { ActiveKey } from "../accounts/account-store.ts";
import { GatewayError } from "../streaming/gateway-error.ts";
import { bodyBytesOf, resolveCandidates, withRouteHeaders } from "./handle-chat.ts";

export interface EmbeddingsCall {
  /** Checked by the route's schema: `input` is one of OpenAI's four shapes. */
  body: Record<string, unknown> & { input: EmbeddingsInput };
  request: Request;
  principal: ActiveKey;
  /** Elysia's response settings; the admission plugin put the rate-limit headers there. */
  set: { headers: Record<string, unknown> };
}

/**
 * `POST /v1/embeddings` after schema validation: 404 for unknown models, 400 for models that
 * are not embedding models, then the same forward pipeline as chat (limits were taken on
 * arrival; credits reserved for the input's bound, fallbacks, retries, the transport's deadlines
 * and size cap, settlement of the input tokens and the usage record).
 */
export async function handleEmbeddings(deps: ForwardDeps & { catalogue: Catalogue; embeddingsThread?: EmbeddingsThread }, call: EmbeddingsCall): Promise<Response> {
  const { body } = call;
  const trace = deps.tracker?.of(call.request);
  if (trace && typeof body.model === "string") trace.modelAsked = body.model;
  if (body.stream === true) throw new GatewayError(400, "invalid_request", "stream is not supported by the embeddings API: the answer is one JSON body.");
  const candidates = resolveCandidates(deps.catalogue, body, call.principal.models);
  const wrong = candidates.find((m) => m.category !== "embedding");
  if (wrong) {
    throw new GatewayError(400, "invalid_request",
      `The model "${wrong.id}" is a ${wrong.category} model, not an embedding model: POST /v1/embeddings needs a model of category "embedding" (GET /v1/models lists each model's category).`);
  }

  const response = await forward(deps, {
    // A large answer (2,048 long vectors: tens of MB) is parsed and written on the embeddings thread.
    format: openaiEmbeddings(body.encoding_format === "base64" ? "base64" : "float", deps.embeddingsThread),
    body,
    bodyBytes: bodyBytesOf(call.request, body),
    headers: call.request.headers,
    signal: call.request.signal,
    candidates,
    principal: call.principal,
    embeddings: measureEmbeddingsInput(body.input, deps.tokenizer.count),
    trace,
  });
  return withRouteHeaders(response, call.set);
}
