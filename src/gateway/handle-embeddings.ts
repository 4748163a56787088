import type { Catalogue } from "../catalogue/catalogue.ts";
import { encodeEmbeddingsBody, type EmbeddingEncoding } from "../streaming/encode-embeddings.ts";
import { measureEmbeddingsInput, type EmbeddingsInput } from "../billing/embeddings-input.ts";
import { forward, type AnswerFormat, type ForwardDeps } from "./forward.ts";
import { GatewayError } from "../streaming/gateway-error.ts";
import { bodyBytesOf, resolveCandidates, withRouteHeaders, type CallerKey } from "./handle-chat.ts";

export interface EmbeddingsCall {
  /** Checked by the route's schema: `input` is one of OpenAI's four shapes. */
  body: Record<string, unknown> & { input: EmbeddingsInput };
  request: Request;
  principal: CallerKey;
  /** Elysia's response settings; the admission plugin put the rate-limit headers there. */
  set: { headers: Record<string, unknown> };
}

/** The list answer, in the encoding the client asked for (OpenAI's default is float). */
export function embeddingsAnswer(encoding: EmbeddingEncoding): AnswerFormat {
  return {
    idPrefix: "",
    encoder: () => {
      // Refused before the pipeline (see handleEmbeddings): nothing streams here.
      throw new Error("embeddings do not stream");
    },
    body: (events, ctx, upstream) => encodeEmbeddingsBody(upstream, events, ctx, encoding),
  };
}

/**
 * `POST /v1/embeddings` after schema validation: 404 for unknown models, 400 for models that
 * are not embedding models, then the same forward pipeline as chat (limits were taken on
 * arrival; credits reserved for the input's bound, fallbacks, retries, the transport's deadlines
 * and size cap, settlement of the input tokens and the usage record).
 */
export async function handleEmbeddings(deps: ForwardDeps & { catalogue: Catalogue }, call: EmbeddingsCall): Promise<Response> {
  const { body } = call;
  const trace = deps.tracker?.of(call.request);
  if (trace && typeof body.model === "string") trace.modelAsked = body.model;
  if (body.stream === true) throw new GatewayError(400, "invalid_request", "stream is not supported by the embeddings API: the answer is one JSON body.");
  const candidates = resolveCandidates(deps.catalogue, body, call.principal.models ?? null);
  const wrong = candidates.find((m) => m.category !== "embedding");
  if (wrong) {
    throw new GatewayError(400, "invalid_request",
      `The model "${wrong.id}" is a ${wrong.category} model, not an embedding model: POST /v1/embeddings needs a model of category "embedding" (GET /v1/models lists each model's category).`);
  }

  const response = await forward(deps, {
    clientFormat: "openai",
    body,
    bodyBytes: bodyBytesOf(call.request, body),
    headers: call.request.headers,
    signal: call.request.signal,
    candidates,
    principal: call.principal,
    answer: embeddingsAnswer(body.encoding_format === "base64" ? "base64" : "float"),
    embeddings: measureEmbeddingsInput(body.input),
    trace,
  });
  return withRouteHeaders(response, call.set);
}
