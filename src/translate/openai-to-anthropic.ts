import { openaiContentText } from "./content-text.ts";
import type { AnthropicBlock, AnthropicBody, AnthropicMessage, Json, OpenAIChatBody } from "./wire-types.ts";

/**
 * An OpenAI chat request → an Anthropic messages request. System messages move to
 * `system`, tool results become `tool_result` blocks in a user turn, and turns of the
 * same role are merged because Anthropic expects them to alternate.
 */
export function openaiRequestToAnthropic(body: OpenAIChatBody, upstreamModel: string, maxTokens: number): AnthropicBody {
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  const push = (role: "user" | "assistant", blocks: AnthropicBlock[]) => {
    if (blocks.length === 0) return;
    const last = messages[messages.length - 1];
    if (last && last.role === role) (last.content as AnthropicBlock[]).push(...blocks);
    else messages.push({ role, content: blocks });
  };

  for (const m of body.messages) {
    switch (m.role) {
      case "system":
      case "developer":
        system.push(openaiContentText(m.content));
        break;
      case "user": {
        const text = openaiContentText(m.content);
        push("user", text ? [{ type: "text", text }] : []);
        break;
      }
      case "assistant": {
        const blocks: AnthropicBlock[] = [];
        const text = openaiContentText(m.content);
        if (text) blocks.push({ type: "text", text });
        for (const call of m.tool_calls ?? []) {
          blocks.push({ type: "tool_use", id: call.id, name: call.function.name, input: parseArguments(call.function.arguments) });
        }
        push("assistant", blocks);
        break;
      }
      case "tool":
        push("user", [{ type: "tool_result", tool_use_id: m.tool_call_id ?? "", content: openaiContentText(m.content) }]);
        break;
    }
  }

  const out: AnthropicBody = { model: upstreamModel, messages, max_tokens: maxTokens };
  if (system.length > 0) out.system = system.join("\n\n");
  if (body.stream) out.stream = true;
  // Anthropic's temperature range is 0–1; OpenAI's is 0–2. Clamping keeps the request valid and "more random" still means the most random Anthropic allows.
  if (typeof body.temperature === "number") out.temperature = Math.min(body.temperature, 1);
  if (typeof body.top_p === "number") out.top_p = body.top_p;
  if (body.stop) out.stop_sequences = Array.isArray(body.stop) ? body.stop : [body.stop];
  if (typeof body.user === "string") out.metadata = { user_id: body.user };
  if (body.tools?.length) {
    out.tools = body.tools
      .filter((tool) => tool.type === "function" && tool.function)
      .map((tool) => ({
        name: tool.function!.name,
        ...(tool.function!.description ? { description: tool.function!.description } : {}),
        input_schema: tool.function!.parameters ?? { type: "object", properties: {} },
      }));
  }
  const choice = toolChoice(body.tool_choice, body.parallel_tool_calls);
  if (choice && out.tools?.length) out.tool_choice = choice;
  return out;
}

function toolChoice(choice: unknown, parallel: boolean | undefined): AnthropicBody["tool_choice"] | undefined {
  let out: AnthropicBody["tool_choice"] | undefined;
  if (choice === "auto") out = { type: "auto" };
  else if (choice === "none") out = { type: "none" };
  else if (choice === "required") out = { type: "any" };
  else if (choice && typeof choice === "object") {
    const name = (choice as { function?: { name?: string } }).function?.name;
    if (name) out = { type: "tool", name };
  }
  if (parallel === false) out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true };
  return out;
}

/** Models sometimes emit arguments that are not valid JSON; Anthropic needs an object, so keep the text visible. */
function parseArguments(text: string | undefined): Json {
  if (!text || text.trim() === "") return {};
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? value : { value };
  } catch {
    return { _raw: text };
  }
}

