import type { ChatMessage, ChatRequest } from "./schema.ts";
import { CUSTOM_PARAMETERS, customToolDescription } from "../common/custom-tools.ts";

/*
 * Chat completions' custom tools (`{type: "custom", custom: {name, description, format}}`), the
 * calls to them (`{type: "custom", custom: {name, input}}`) and a `tool_choice` naming one. An
 * OpenAI chat upstream takes them as they are. Any other upstream (Anthropic, the Responses API
 * reached through the gateway's chat form) gets functions taking `{input}` (common/custom-tools.ts),
 * and the answer's calls to them are written back as custom calls (encode-openai.ts, `customTools`).
 * They used to be left out without a word: the model answered without the tool (a probe of the SDKs).
 */

type CustomTool = { type?: unknown; custom?: { name?: unknown; description?: unknown; format?: unknown } };
type CustomCall = { id?: unknown; type?: unknown; custom?: { name?: unknown; input?: unknown } };

const customName = (tool: unknown): string | undefined => {
  const t = tool as CustomTool | null;
  return t?.type === "custom" && typeof t.custom?.name === "string" && t.custom.name !== "" ? t.custom.name : undefined;
};

/** Names of the custom tools a chat request offers; undefined when it offers none. */
export function customToolNames(body: Record<string, unknown>): ReadonlySet<string> | undefined {
  const tools = body.tools;
  if (!Array.isArray(tools)) return undefined;
  let names: Set<string> | undefined;
  for (const tool of tools) {
    const name = customName(tool);
    if (name !== undefined) (names ??= new Set()).add(name);
  }
  return names;
}

/** A choice naming a custom tool (`{type: "custom", custom: {name}}`) as one naming the function it becomes. */
function asFunctionChoice(choice: unknown): unknown {
  const c = choice as { type?: unknown; custom?: { name?: unknown }; allowed_tools?: { mode?: unknown; tools?: unknown } } | null;
  if (c?.type === "custom" && typeof c.custom?.name === "string") return { type: "function", function: { name: c.custom.name } };
  if (c?.type === "allowed_tools" && Array.isArray(c.allowed_tools?.tools)) {
    return { ...c, allowed_tools: { ...c.allowed_tools, tools: c.allowed_tools.tools.map(asFunctionChoice) } };
  }
  return choice;
}

/**
 * The request with its custom tools as functions taking `{input}`, a choice of one as a choice of
 * that function, and the calls to them in its history as calls of `{"input": …}` (their results
 * answer them by id, as a function's do). The same object when there is nothing custom.
 */
export function withCustomToolsAsFunctions(body: ChatRequest): ChatRequest {
  const names = customToolNames(body);
  const customCalls = body.messages.some((m) => m.tool_calls?.some((c) => c.type === "custom"));
  if (names === undefined && !customCalls) return body;
  const out: ChatRequest = { ...body };
  if (names !== undefined) {
    out.tools = body.tools!.map((tool) => {
      const name = customName(tool);
      if (name === undefined) return tool;
      const custom = (tool as CustomTool).custom!;
      return { type: "function", function: { name, description: customToolDescription(typeof custom.description === "string" ? custom.description : "", custom.format), parameters: CUSTOM_PARAMETERS } };
    });
    out.tool_choice = asFunctionChoice(body.tool_choice);
  }
  if (customCalls) {
    out.messages = body.messages.map((m): ChatMessage => {
      if (!m.tool_calls?.some((c) => c.type === "custom")) return m;
      return {
        ...m,
        tool_calls: m.tool_calls.map((call) => {
          if (call.type !== "custom") return call;
          const c = (call as CustomCall).custom;
          return { id: call.id, type: "function", function: { name: typeof c?.name === "string" ? c.name : "", arguments: JSON.stringify({ input: typeof c?.input === "string" ? c.input : "" }) } };
        }),
      };
    });
  }
  return out;
}
