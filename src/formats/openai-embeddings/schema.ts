import { t } from "elysia";
import { open, WholeNumber } from "../common/wire-types.ts";

/* OpenAI's embeddings request: open, so parameters a compatible server knows beyond OpenAI's pass to it untouched. */

const TokenArray = t.Array(WholeNumber({ minimum: 0 }), { minItems: 1 });

/** OpenAI's limit on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;

/**
 * OpenAI's embeddings request. `error` is the message a client gets when a field fails (see
 * http/plugins/errors.ts): a union's own message would only say "Expected union value".
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
