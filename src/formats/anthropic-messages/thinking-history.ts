import type { AnthropicMessage } from "./schema.ts";

/**
 * Whether the conversation's last assistant turn called tools without a thinking block first.
 * Anthropic refuses manual extended thinking (a budget) on the turn that continues it ("Expected
 * `thinking` or `redacted_thinking`, but found `tool_use`"): the call was made by another vendor's
 * model (an OpenAI client's history, a fallback, a `/model` switch) or its unsigned thinking was
 * dropped, and no client can repair that history, so such a step goes without a budget. Adaptive
 * thinking is taken there ("Adaptive mode relaxes this").
 */
export function continuesCallWithoutThinking(messages: readonly AnthropicMessage[]): boolean {
  const last = messages.findLast((m) => m.role === "assistant");
  if (!last || !Array.isArray(last.content) || !last.content.some((b) => b.type === "tool_use")) return false;
  const first = last.content[0];
  return !(first && (first.type === "thinking" || first.type === "redacted_thinking"));
}
