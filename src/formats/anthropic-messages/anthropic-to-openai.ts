import { openaiToolId } from "../common/tool-call-ids.ts";
import { anthropicBlocksText } from "../common/content-text.ts";
import { pseudonymousUser } from "../common/end-user-id.ts";
import { UNKNOWN_TRAITS, type UpstreamTraits } from "../common/model-traits.ts";
import { openaiReasoningEffort } from "../common/reasoning.ts";
import { openaiResponseFormat } from "../common/structured-output.ts";
import type { Json, TranslationNotes } from "../common/wire-types.ts";
import type { AnthropicBlock, MessagesRequest } from "./schema.ts";
import type { ChatMessage, ChatRequest } from "../openai-chat/schema.ts";
import { CARRIED_THINKING, openaiEncryptedReasoning, type CarriedBlock } from "../common/carried-thinking.ts";
import { clientToolAsFunction } from "./client-tool-functions.ts";

/**
 * An Anthropic messages request → an OpenAI chat request. `tool_result` blocks become
 * `tool` messages placed before the rest of their user turn, which is the order OpenAI
 * requires (tool answers directly after the assistant's tool_calls). `system` turns inside
 * `messages` stay where they are, as OpenAI system messages. `output_config.format` becomes
 * `response_format`; `thinking` becomes `reasoning_effort` for a model known to reason (`traits`).
 * Other Anthropic-only fields (context_management, cache_control, top_k, service_tier…) have no
 * OpenAI counterpart every compatible server accepts, so they are not sent.
 */
export function anthropicRequestToOpenAI(
  body: MessagesRequest,
  upstreamModel: string,
  maxTokens: number,
  maxTokensField: "max_tokens" | "max_completion_tokens",
  traits: UpstreamTraits = UNKNOWN_TRAITS,
  notes: TranslationNotes = {},
): ChatRequest {
  const messages: ChatMessage[] = [];
  const system = anthropicBlocksText(body.system);
  if (system) messages.push({ role: "system", content: system });

  for (const m of body.messages) {
    const blocks: AnthropicBlock[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    if (m.role === "system") {
      messages.push({ role: "system", content: anthropicBlocksText(blocks) });
    } else if (m.role === "assistant") {
      const texts: string[] = [];
      const thoughts: string[] = [];
      const calls: NonNullable<ChatMessage["tool_calls"]> = [];
      /** OpenAI's encrypted reasoning a Responses upstream gave as the signature: it goes back to one (chat-to-responses.ts). */
      const carried: CarriedBlock[] = [];
      for (const block of blocks) {
        if (block.type === "thinking" && openaiEncryptedReasoning(block.signature) !== undefined) carried.push({ type: "thinking", thinking: String(block.thinking ?? ""), signature: String(block.signature) });
        if (block.type === "text") texts.push(String(block.text ?? ""));
        else if (block.type === "tool_use") {
          calls.push({ id: openaiToolId(String(block.id)), type: "function", function: { name: String(block.name), arguments: JSON.stringify(block.input ?? {}) } });
        } else if (block.type === "thinking" && typeof block.thinking === "string") thoughts.push(block.thinking);
        // Otherwise thinking's signatures mean nothing to another vendor: it is not sent.
      }
      const text = texts.join("\n");
      const message: ChatMessage = { role: "assistant", content: text || (calls.length ? null : "") };
      if (calls.length) message.tool_calls = calls;
      // A model that wants a tool-calling turn's reasoning back gets the text it gave (model-traits.ts).
      if (calls.length && traits.reasoningHistory && thoughts.length > 0) (message as ChatMessage & { reasoning_content?: string }).reasoning_content = thoughts.join("\n");
      // A symbol-keyed property: a chat upstream never sees it.
      if (carried.length > 0) (message as ChatMessage & { [CARRIED_THINKING]?: CarriedBlock[] })[CARRIED_THINKING] = carried;
      messages.push(message);
    } else {
      const rest: AnthropicBlock[] = [];
      for (const block of blocks) {
        if (block.type === "tool_result") {
          const content = anthropicBlocksText(block.content as string | AnthropicBlock[] | undefined);
          // OpenAI tool messages have no error flag; the model learns it from the text instead.
          messages.push({ role: "tool", tool_call_id: openaiToolId(String(block.tool_use_id)), content: block.is_error === true ? `Error: ${content}` : content });
        } else rest.push(block);
      }
      const text = anthropicBlocksText(rest);
      if (text || rest.length > 0) messages.push({ role: "user", content: text });
    }
  }

  const out: ChatRequest = { model: upstreamModel, messages, [maxTokensField]: maxTokens };
  if (body.stream) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  }
  if (typeof body.temperature === "number") out.temperature = body.temperature;
  if (typeof body.top_p === "number") out.top_p = body.top_p;
  // OpenAI takes at most 4 stop sequences and refuses the request with more.
  if (body.stop_sequences?.length) out.stop = body.stop_sequences.slice(0, 4);
  // Claude Code puts device and session ids here; another vendor gets a stable pseudonym instead.
  if (typeof body.metadata?.user_id === "string" && body.metadata.user_id) out.user = pseudonymousUser(body.metadata.user_id);
  // The client's own tools as they are; the client tools Anthropic defines (bash, the text editor,
  // memory) as functions taking their documented input (client-tool-functions.ts).
  const functions: NonNullable<ChatRequest["tools"]> = [];
  for (const tool of body.tools ?? []) {
    if (tool.input_schema) {
      functions.push({ type: "function", function: { name: tool.name, ...(tool.description ? { description: tool.description } : {}), parameters: tool.input_schema as Json } });
      continue;
    }
    const defined = clientToolAsFunction(tool);
    if (defined) functions.push({ type: "function", function: defined });
    else (notes.dropped ??= []).push(`tools: ${String(tool.type ?? tool.name)} cannot run on this model's upstream`);
  }
  if (functions.length) {
    out.tools = functions;
    const choice = body.tool_choice;
    if (choice?.type === "auto") out.tool_choice = "auto";
    else if (choice?.type === "any") out.tool_choice = "required";
    else if (choice?.type === "none") out.tool_choice = "none";
    else if (choice?.type === "tool" && choice.name) {
      // A choice naming a tool that was not sent would be refused by the upstream: it goes, said.
      if (functions.some((f) => f.function?.name === choice.name)) out.tool_choice = { type: "function", function: { name: choice.name } };
      else (notes.dropped ??= []).push(`tool_choice: ${choice.name} is not a tool this model's upstream can run`);
    }
    if (choice?.disable_parallel_tool_use) out.parallel_tool_calls = false;
  }
  const format = openaiResponseFormat(body.output_config?.format);
  if (format) out.response_format = format;
  if (traits.reasoning === "effort") {
    const effort = openaiReasoningEffort(body.thinking, body.output_config);
    if (effort) out.reasoning_effort = effort;
    // OpenAI's reasoning models take only the default sampling: another value is refused.
    delete out.temperature;
    delete out.top_p;
  } else if (body.thinking !== undefined && (body.thinking as { type?: unknown }).type !== "disabled") {
    (notes.dropped ??= []).push("thinking: this model is not known to reason (models[].reasoning)");
  }
  return out;
}
