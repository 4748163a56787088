import { t } from "elysia";
import { OpenObject, Unchecked, WholeNumber, type Json } from "../common/wire-types.ts";

/*
 * Anthropic's messages request: what `POST /v1/messages` validates, what the OpenAPI document
 * shows, and the type translators read and write (an Anthropic upstream's request is the same
 * shape).
 */

export const AnthropicBlock = OpenObject({ type: t.String() });
export type AnthropicBlock = typeof AnthropicBlock.static;

/** `system` turns inside `messages` are Claude Code's mid-conversation instructions (Anthropic accepts them). */
export const AnthropicMessage = OpenObject({
  role: t.Union([t.Literal("user"), t.Literal("assistant"), t.Literal("system")]),
  content: t.Union([t.String(), t.Array(AnthropicBlock)]),
});
export type AnthropicMessage = typeof AnthropicMessage.static;

const System = t.Optional(t.Union([t.String(), t.Array(AnthropicBlock)]));
const Tools = t.Optional(
  t.Array(OpenObject({ name: t.String(), description: Unchecked<string>(), input_schema: Unchecked<Json>(), type: Unchecked<string>() })),
);

export const MessagesRequest = OpenObject({
  model: t.Optional(t.String({ minLength: 1 })),
  models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
  messages: t.Array(AnthropicMessage, { maxItems: 100_000 }),
  system: System,
  max_tokens: t.Optional(WholeNumber({ minimum: 1 })),
  stream: t.Optional(t.Boolean()),
  temperature: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
  top_p: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
  top_k: t.Optional(WholeNumber({ minimum: 0 })),
  stop_sequences: t.Optional(t.Array(t.String())),
  tools: Tools,
  tool_choice: Unchecked<{ type: string; name?: string; disable_parallel_tool_use?: boolean }>(),
  metadata: Unchecked<{ user_id?: string }>(),
  thinking: Unchecked<Json>(),
  output_config: Unchecked<Json>(),
});
export type MessagesRequest = typeof MessagesRequest.static;

/** `POST /v1/messages/count_tokens`: a messages request without the answer's parameters. */
export const CountTokensRequest = OpenObject({
  model: t.String({ minLength: 1 }),
  messages: t.Array(AnthropicMessage, { maxItems: 100_000 }),
  system: System,
  tools: t.Optional(t.Array(OpenObject({ name: t.String() }))),
});
export type CountTokensRequest = typeof CountTokensRequest.static;
