import { t } from "elysia";
import { Nullable, OpenObject, Unchecked, WholeNumber, type Json } from "../common/wire-types.ts";

/*
 * OpenAI's chat completions request: what `POST /v1/chat/completions` validates, what the
 * OpenAPI document shows, and the type translators read and write (an OpenAI upstream's request
 * is the same shape). An empty `messages` passes here and is refused with 422 by the gateway, as
 * the spec asks.
 */

const MaxTokens = Nullable(WholeNumber({ minimum: 1 }));
export const ContentPart = OpenObject({ type: t.String() });
export type ContentPart = typeof ContentPart.static;

export const ChatMessage = OpenObject({
  // "function": a legacy function's result (formats/openai-chat/legacy-functions.ts).
  role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool"), t.Literal("function")], { error: "must be one of system, developer, user, assistant, tool" }),
  content: t.Optional(t.Union([t.String(), t.Null(), t.Array(ContentPart)])),
  // A call is a function's (`function`) or a custom tool's (`custom`, its raw `input`): one of them (check-content.ts).
  tool_calls: t.Optional(
    t.Array(OpenObject({
      id: t.String(),
      type: t.Optional(t.String()),
      function: t.Optional(OpenObject({ name: t.String(), arguments: t.Optional(t.String()) })),
      custom: t.Optional(OpenObject({ name: t.String(), input: t.Optional(t.String()) })),
    })),
  ),
  tool_call_id: t.Optional(t.String()),
  name: t.Optional(t.String()),
  /** Legacy: the call an assistant turn made (`{name, arguments}`). */
  function_call: Unchecked<Json | null>(),
});
export type ChatMessage = typeof ChatMessage.static;

export const ChatRequest = OpenObject({
  model: t.Optional(t.String({ minLength: 1 })),
  models: t.Optional(t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 16 })),
  messages: t.Array(ChatMessage, { maxItems: 100_000 }),
  stream: Nullable(t.Boolean()),
  stream_options: Nullable(OpenObject({ include_usage: t.Optional(t.Boolean()) })),
  max_tokens: MaxTokens,
  max_completion_tokens: MaxTokens,
  /** Answers asked for (OpenAI allows 1–128), each up to max_tokens: held and charged for all of them. */
  n: Nullable(WholeNumber({ minimum: 1, maximum: 128 })),
  temperature: Nullable(t.Number({ minimum: 0, maximum: 2 })),
  top_p: Nullable(t.Number({ minimum: 0, maximum: 1 })),
  stop: t.Optional(t.Union([t.String(), t.Array(t.String(), { maxItems: 16 }), t.Null()])),
  tools: t.Optional(
    t.Array(
      OpenObject({
        type: t.String(),
        function: t.Optional(OpenObject({ name: t.String(), description: Unchecked<string>(), parameters: Unchecked<Json>(), strict: Unchecked<boolean>() })),
      }),
    ),
  ),
  tool_choice: Unchecked<unknown>(),
  /** Legacy function calling, translated to tools for upstreams of another format (legacy-functions.ts). */
  functions: Unchecked<Json[]>(),
  function_call: Unchecked<unknown>(),
  parallel_tool_calls: Unchecked<boolean>(),
  user: Unchecked<string>(),
  response_format: Unchecked<Json | null>(),
  reasoning_effort: Unchecked<string | null>(),
});
export type ChatRequest = typeof ChatRequest.static;
