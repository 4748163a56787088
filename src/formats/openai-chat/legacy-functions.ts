import type { ChatMessage, ChatRequest } from "./schema.ts";

/*
 * OpenAI's legacy function calling (`functions`, `function_call`, `role: "function"` messages),
 * deprecated for `tools` but still served by OpenAI and still sent by older SDK code and
 * frameworks. An OpenAI upstream gets it as it came and answers in kind. For any other upstream
 * the request is rewritten as tools (withToolsForLegacyFunctions) and the answer's call is written
 * back as the client asked for it (`message.function_call`, finish reason `function_call`: the
 * encoders' `legacyFunctions`). Without this, an Anthropic model never saw the functions and
 * answered as if there were none.
 */

/** A legacy function: what a tool's `function` holds. */
interface LegacyFunction {
  name: string;
  description?: string;
  parameters?: unknown;
}

type LegacyMessage = ChatMessage & { function_call?: { name?: unknown; arguments?: unknown } };

/** Whether the client offered legacy functions (and no tools), so its answer's call is awaited as `function_call`. */
export function usesLegacyFunctions(body: Record<string, unknown>): boolean {
  return Array.isArray(body.functions) && !(Array.isArray(body.tools) && body.tools.length > 0);
}

/**
 * The request with the legacy fields as tools: `functions` → `tools`, `function_call` →
 * `tool_choice`, an assistant's `function_call` → a `tool_calls` entry with an id made from its
 * position, a `function` message → a `tool` message answering the latest call of that name (the
 * legacy form has no ids; a call is answered by the next function message). One call per turn, as
 * the legacy answer can carry only one. The same object when nothing is legacy.
 */
export function withToolsForLegacyFunctions(body: ChatRequest): ChatRequest {
  const legacy = body as ChatRequest & { functions?: unknown; function_call?: unknown };
  if (legacy.functions === undefined && legacy.function_call === undefined && !body.messages.some((m) => isLegacyTurn(m as LegacyMessage))) return body;
  const { functions, function_call, ...rest } = legacy;
  const out: ChatRequest = { ...rest };
  const offered = Array.isArray(functions) ? (functions as unknown as LegacyFunction[]).filter((f) => f && typeof f.name === "string") : [];
  if (!body.tools?.length && offered.length > 0) {
    out.tools = offered.map((f) => ({ type: "function", function: f as never }));
    out.parallel_tool_calls = false;
  }
  if (body.tool_choice === undefined) {
    if (function_call === "none" || function_call === "auto") out.tool_choice = function_call;
    else if (function_call && typeof function_call === "object" && typeof (function_call as { name?: unknown }).name === "string") {
      out.tool_choice = { type: "function", function: { name: (function_call as { name: string }).name } };
    }
  }

  // Which function message answers which call: the latest open call of its name, else the latest
  // open call, made in the turn right before it (any other message between them closes the call). Anthropic takes a call only with its
  // result right after it and a result only after its call, which the legacy form never required:
  // a call nobody answered goes as nothing, a result with no call as the user's text.
  const answers = new Map<number, number>();
  let open: number[] = [];
  body.messages.forEach((m, i) => {
    const message = m as LegacyMessage;
    if ((message.role as string) === "function") {
      const name = typeof message.name === "string" ? message.name : "";
      const at = open.findLastIndex((c) => callName(body.messages[c] as LegacyMessage) === name);
      const call = at >= 0 ? open.splice(at, 1)[0] : open.pop();
      if (call !== undefined) answers.set(i, call);
    } else open = isLegacyCall(message) ? [i] : [];
  });
  const answered = new Set(answers.values());

  out.messages = body.messages.flatMap((m, i): ChatMessage[] => {
    const message = m as LegacyMessage;
    if (isLegacyCall(message)) {
      const { function_call: call, ...kept } = message;
      if (!answered.has(i)) return kept.content == null || kept.content === "" ? [] : [kept];
      return [{ ...kept, tool_calls: [{ id: `call_legacy_${i}`, type: "function", function: { name: callName(message), arguments: typeof call!.arguments === "string" ? call!.arguments : "{}" } }] }];
    }
    if ((message.role as string) === "function") {
      const { name, ...kept } = message;
      const call = answers.get(i);
      if (call !== undefined) return [{ ...kept, role: "tool", tool_call_id: `call_legacy_${call}` }];
      const said = typeof kept.content === "string" ? kept.content : JSON.stringify(kept.content ?? "");
      return [{ role: "user", content: `${typeof name === "string" && name ? name : "A function"} returned: ${said}` }];
    }
    return [m];
  });
  return out;
}

/** An assistant turn that made a legacy call (and no tool calls, which win). */
function isLegacyCall(m: LegacyMessage): boolean {
  return m.role === "assistant" && !!m.function_call && typeof m.function_call === "object" && !m.tool_calls?.length;
}

function callName(m: LegacyMessage): string {
  return typeof m.function_call?.name === "string" ? m.function_call.name : "";
}

function isLegacyTurn(m: LegacyMessage | null | undefined): boolean {
  if (!m || typeof m !== "object") return false;
  return (m.role as string) === "function" || (m.role === "assistant" && m.function_call !== undefined && m.function_call !== null);
}
