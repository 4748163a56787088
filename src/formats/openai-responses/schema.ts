import { t } from "elysia";
import { Nullable, open, WholeNumber } from "../common/wire-types.ts";

/**
 * OpenAI's Responses API request, as `POST /v1/responses` validates it and the OpenAPI document
 * shows it. Open objects: fields we do not model are accepted; the translator
 * (responses-to-chat.ts) reads what it knows and refuses, with a 400 naming the field, what it
 * cannot serve.
 */
export const ResponsesRequest = t.Object(
  {
    model: t.Optional(t.String({ minLength: 1 })),
    models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
    input: t.Union([t.String(), t.Array(t.Object({}, open), { maxItems: 100_000 })]),
    instructions: Nullable(t.String()),
    stream: Nullable(t.Boolean()),
    store: Nullable(t.Boolean()),
    max_output_tokens: Nullable(WholeNumber({ minimum: 1 })),
    temperature: Nullable(t.Number({ minimum: 0, maximum: 2 })),
    top_p: Nullable(t.Number({ minimum: 0, maximum: 1 })),
    parallel_tool_calls: Nullable(t.Boolean()),
    tools: Nullable(t.Array(t.Object({ type: t.String() }, open), { maxItems: 1_000 })),
    tool_choice: t.Optional(t.Union([t.String(), t.Object({ type: t.String() }, open), t.Null()])),
    reasoning: Nullable(t.Object({}, open)),
    text: Nullable(t.Object({ format: t.Optional(t.Object({ type: t.String() }, open)) }, open)),
    metadata: Nullable(t.Record(t.String({ maxLength: 64 }), t.String({ maxLength: 512 }), { maxProperties: 16 })),
    include: Nullable(t.Array(t.String())),
    previous_response_id: Nullable(t.String()),
  },
  open,
);
export type ResponsesRequest = typeof ResponsesRequest.static;

/** `POST /v1/responses/input_tokens`: a Responses request to count, where OpenAI makes `model` and `input` optional too. */
export const InputTokensRequest = t.Object({ ...ResponsesRequest.properties, input: t.Optional(ResponsesRequest.properties.input) }, open);
