import { anthropicBlocksText } from "./content-text.ts";
import type { AnthropicBlock, AnthropicBody, Json, OpenAIChatBody, OpenAIMessage } from "./wire-types.ts";

/**
 * An Anthropic messages request → an OpenAI chat request. `tool_result` blocks become
 * `tool` messages placed before the rest of their user turn, which is the order OpenAI
 * requires (tool answers directly after the assistant's tool_calls).
 */
export function anthropicRequestToOpenAI(
  body: AnthropicBody,
  upstreamModel: string,
  maxTokens: number,
  maxTokensField: "max_tokens" | "max_completion_tokens",
): OpenAIChatBody {
  const messages: OpenAIMessage[] = [];
  const system = anthropicBlocksText(body.system);
  if (system) messages.push({ role: "system", content: system });

  for (const m of body.messages) {
    const blocks: AnthropicBlock[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    if (m.role === "assistant") {
      let text = "";
      const calls: NonNullable<OpenAIMessage["tool_calls"]> = [];
      for (const block of blocks) {
        if (block.type === "text") text += String(block.text ?? "");
        else if (block.type === "tool_use") {
          calls.push({ id: String(block.id), type: "function", function: { name: String(block.name), arguments: JSON.stringify(block.input ?? {}) } });
        }
        // thinking blocks carry vendor signatures that mean nothing to another vendor.
      }
      const message: OpenAIMessage = { role: "assistant", content: text || (calls.length ? null : "") };
      if (calls.length) message.tool_calls = calls;
      messages.push(message);
    } else {
      const rest: AnthropicBlock[] = [];
      for (const block of blocks) {
        if (block.type === "tool_result") {
          const content = block.content as string | AnthropicBlock[] | undefined;
          messages.push({ role: "tool", tool_call_id: String(block.tool_use_id), content: anthropicBlocksText(content) });
        } else rest.push(block);
      }
      const text = anthropicBlocksText(rest);
      if (text || rest.length > 0) messages.push({ role: "user", content: text });
    }
  }

  const out: OpenAIChatBody = { model: upstreamModel, messages, [maxTokensField]: maxTokens };
  if (body.stream) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  }
  if (typeof body.temperature === "number") out.temperature = body.temperature;
  if (typeof body.top_p === "number") out.top_p = body.top_p;
  if (body.stop_sequences?.length) out.stop = body.stop_sequences;
  if (body.metadata?.user_id) out.user = body.metadata.user_id;
  const tools = (body.tools ?? []).filter((tool) => tool.input_schema);
  if (tools.length) {
    out.tools = tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, ...(tool.description ? { description: tool.description } : {}), parameters: tool.input_schema as Json },
    }));
    const choice = body.tool_choice;
    if (choice?.type === "auto") out.tool_choice = "auto";
    else if (choice?.type === "any") out.tool_choice = "required";
    else if (choice?.type === "none") out.tool_choice = "none";
    else if (choice?.type === "tool" && choice.name) out.tool_choice = { type: "function", function: { name: choice.name } };
    if (choice?.disable_parallel_tool_use) out.parallel_tool_calls = false;
  }
  return out;
}
