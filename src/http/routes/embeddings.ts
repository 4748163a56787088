import { Elysia, t } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { handleEmbeddings, type EmbeddingsCall } from "../../gateway/handle-embeddings.ts";
import { principalOf } from "../plugins/admission.ts";

/** Open, as in schemas.ts: parameters a compatible server knows beyond OpenAI's pass to it untouched. */
const open = { additionalProperties: true } as const;
/** A whole number without t.Integer's string-coercing transform (see schemas.ts). */
const WholeNumber = (options: NonNullable<Parameters<typeof t.Number>[0]>) => t.Number({ ...options, multipleOf: 1 });
const TokenArray = t.Array(WholeNumber({ minimum: 0 }), { minItems: 1 });

/** OpenAI's limit on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;

/**
 * OpenAI's embeddings request. `error` is the message a client gets when a field fails (see
 * plugins/errors.ts): a union's own message would only say "Expected union value".
 */
export const EmbeddingsRequest = t.Object(
  {
    model: t.Optional(t.String({ minLength: 1 })),
    models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
    input: t.Union(
      [
        t.String({ minLength: 1 }),
        t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: MAX_EMBEDDING_INPUTS }),
        TokenArray,
        t.Array(TokenArray, { minItems: 1, maxItems: MAX_EMBEDDING_INPUTS }),
      ],
      {
        description: "A string, an array of strings, an array of token ids, or an array of token-id arrays; nothing empty, at most 2048 inputs.",
        error: `must be a non-empty string, or an array of 1 to ${MAX_EMBEDDING_INPUTS} non-empty strings, or a non-empty array of token ids (whole numbers ≥ 0), or an array of 1 to ${MAX_EMBEDDING_INPUTS} non-empty arrays of token ids`,
      },
    ),
    encoding_format: t.Optional(t.Union([t.Literal("float"), t.Literal("base64")], { error: 'must be "float" or "base64"' })),
    dimensions: t.Optional(WholeNumber({ minimum: 1, error: "must be a whole number ≥ 1" })),
    user: t.Optional(t.String()),
  },
  open,
);
export type EmbeddingsRequest = typeof EmbeddingsRequest.static;

/**
 * `POST /v1/embeddings`: OpenAI's embeddings API to any model of category `embedding`, on the
 * chat endpoints' pipeline (limits, credits, fallbacks, retries, usage records).
 */
export function embeddingsRoute(deps: ForwardDeps & { catalogue: Catalogue }) {
  return new Elysia({ name: "switchyard/embeddings" }).post(
    "/v1/embeddings",
    ({ body, request, set }) => handleEmbeddings(deps, { body: body as EmbeddingsCall["body"], request, principal: principalOf(request), set }),
    { body: EmbeddingsRequest },
  );
}
