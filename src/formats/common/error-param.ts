import type { ClientFormatId } from "../format.ts";

/** The OpenAI API a request was written for: the client's endpoint, or what the gateway sent upstream. */
export type OpenAIApi = "chat" | "responses" | "images" | "embeddings";

/** The API a client format writes its requests for; Anthropic clients are told no `param`. */
export function clientApi(format: ClientFormatId): OpenAIApi | undefined {
  if (format === "openai-chat") return "chat";
  if (format === "openai-responses") return "responses";
  if (format === "openai-embeddings") return "embeddings";
  return undefined;
}

/** Fields both chat completions and the Responses API take under the same name and meaning. */
const SHARED = new Set(["model", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "user", "metadata", "stream", "store", "prompt_cache_key", "prompt_cache_retention", "service_tier", "safety_identifier"]);

/** A chat completions field (the request's root) as the Responses API calls it. */
const CHAT_TO_RESPONSES: Record<string, string> = {
  messages: "input",
  max_tokens: "max_output_tokens",
  max_completion_tokens: "max_output_tokens",
  response_format: "text.format",
  reasoning_effort: "reasoning.effort",
  verbosity: "text.verbosity",
};

/** The Responses API's field as chat completions calls it; `max_output_tokens` is the cap the client named. */
function responsesToChat(root: string, second: string | undefined, body: Record<string, unknown>): string | undefined {
  if (root === "input" || root === "instructions") return "messages";
  if (root === "max_output_tokens") return body.max_completion_tokens !== undefined && body.max_completion_tokens !== null ? "max_completion_tokens" : "max_tokens";
  if (root === "text") return second === "verbosity" ? "verbosity" : "response_format";
  if (root === "reasoning") return "reasoning_effort";
  return undefined;
}

/**
 * An OpenAI-kind upstream's `param` (the field it refused) in the terms of the client's own
 * request. The same API: as the vendor wrote it. The other one (a Responses client's request sent
 * to chat completions, a chat client's to a model served by the Responses API or the images API):
 * the client's field that became it, without indexes, which do not carry across (`messages[3]`
 * may be `input[5]`, tools are dropped or added); none when no field of the client's became it.
 * `body` is the request as the gateway read it (its chat form for a Responses client).
 */
export function paramForClient(param: string, client: OpenAIApi, upstream: OpenAIApi, body: Record<string, unknown>): string | undefined {
  if (client === upstream) return param;
  const [root = "", second] = param.split(/[.[\]]+/).filter(Boolean);
  if (upstream === "images") return root === "prompt" && client === "chat" ? "messages" : undefined;
  if (SHARED.has(root)) return root;
  if (client === "responses" && upstream === "chat") return CHAT_TO_RESPONSES[root];
  if (client === "chat" && upstream === "responses") return responsesToChat(root, second, body);
  return undefined;
}
