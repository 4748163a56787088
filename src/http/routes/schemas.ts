import { t } from "elysia";

/**
 * Request schemas. Objects stay open (additionalProperties) so parameters we do not model
 * reach same-format upstreams untouched; only what the gateway itself relies on is typed.
 * An empty `messages` passes here and is refused with 422 by the route, as the spec asks.
 */
const open = { additionalProperties: true } as const;

/**
 * Elysia's t.Integer carries a string-coercing transform, and one transform anywhere makes every
 * request body go through a full decode walk; a whole number is just a multiple of 1.
 */
const WholeNumber = (options: { minimum: number }) => t.Number({ ...options, multipleOf: 1 });

const MaxTokens = t.Optional(t.Union([WholeNumber({ minimum: 1 }), t.Null()]));
const ContentPart = t.Object({ type: t.String() }, open);

export const ChatMessage = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool")]),
    content: t.Optional(t.Union([t.String(), t.Null(), t.Array(ContentPart)])),
    tool_calls: t.Optional(
      t.Array(t.Object({ id: t.String(), type: t.Optional(t.String()), function: t.Object({ name: t.String(), arguments: t.Optional(t.String()) }, open) }, open)),
    ),
    tool_call_id: t.Optional(t.String()),
    name: t.Optional(t.String()),
  },
  open,
);

export const ChatRequest = t.Object(
  {
    model: t.Optional(t.String({ minLength: 1 })),
    models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
    messages: t.Array(ChatMessage, { maxItems: 100_000 }),
    stream: t.Optional(t.Union([t.Boolean(), t.Null()])),
    stream_options: t.Optional(t.Union([t.Object({ include_usage: t.Optional(t.Boolean()) }, open), t.Null()])),
    max_tokens: MaxTokens,
    max_completion_tokens: MaxTokens,
    temperature: t.Optional(t.Union([t.Number({ minimum: 0, maximum: 2 }), t.Null()])),
    top_p: t.Optional(t.Union([t.Number({ minimum: 0, maximum: 1 }), t.Null()])),
    stop: t.Optional(t.Union([t.String(), t.Array(t.String(), { maxItems: 16 }), t.Null()])),
    tools: t.Optional(t.Array(t.Object({ type: t.String(), function: t.Optional(t.Object({ name: t.String() }, open)) }, open))),
  },
  open,
);
export type ChatRequest = typeof ChatRequest.static;

const Block = t.Object({ type: t.String() }, open);

/** `system` turns inside `messages` are Claude Code's mid-conversation instructions (Anthropic accepts them). */
export const AnthropicMessage = t.Object(
  {
    role: t.Union([t.Literal("user"), t.Literal("assistant"), t.Literal("system")]),
    content: t.Union([t.String(), t.Array(Block)]),
  },
  open,
);

export const MessagesRequest = t.Object(
  {
    model: t.Optional(t.String({ minLength: 1 })),
    models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
    messages: t.Array(AnthropicMessage, { maxItems: 100_000 }),
    system: t.Optional(t.Union([t.String(), t.Array(Block)])),
    max_tokens: t.Optional(WholeNumber({ minimum: 1 })),
    stream: t.Optional(t.Boolean()),
    temperature: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
    top_p: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
    top_k: t.Optional(WholeNumber({ minimum: 0 })),
    stop_sequences: t.Optional(t.Array(t.String())),
    tools: t.Optional(t.Array(t.Object({ name: t.String() }, open))),
  },
  open,
);
export type MessagesRequest = typeof MessagesRequest.static;

/** `POST /v1/messages/count_tokens`: a messages request without the answer's parameters. */
export const CountTokensRequest = t.Object(
  {
    model: t.String({ minLength: 1 }),
    messages: t.Array(AnthropicMessage, { maxItems: 100_000 }),
    system: t.Optional(t.Union([t.String(), t.Array(Block)])),
    tools: t.Optional(t.Array(t.Object({ name: t.String() }, open))),
  },
  open,
);
