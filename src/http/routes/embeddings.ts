import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { handleEmbeddings, type EmbeddingsCall } from "../../gateway/handle-embeddings.ts";
import type { Principals } from "../plugins/admission.ts";
import { EmbeddingsRequest } from "../../formats/openai-embeddings/schema.ts";
import type { EmbeddingsThread } from "../../formats/openai-embeddings/embeddings-thread.ts";

/**
 * `POST /v1/embeddings`: OpenAI's embeddings API to any model of category `embedding`, on the
 * chat endpoints' pipeline (limits, credits, fallbacks, retries, usage records).
 */
export function embeddingsRoute(deps: ForwardDeps & { catalogue: Catalogue; principals: Principals; embeddingsThread?: EmbeddingsThread }) {
  return new Elysia({ name: "switchyard/embeddings" }).post(
    "/v1/embeddings",
    ({ body, request, set }) => handleEmbeddings(deps, { body: body as EmbeddingsCall["body"], request, principal: deps.principals.of(request), set }),
    { body: EmbeddingsRequest },
  );
}
