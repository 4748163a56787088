import { GatewayError } from "../streaming/gateway-error.ts";
import { refuseForcedServerTool } from "../formats/anthropic-messages/server-tools.ts";

/**
 * The fields each message and content part needs for its type, checked before anything is
 * forwarded or translated. The schemas keep parts open (unknown fields and types pass through to
 * same-format upstreams), so a part that says `"type": "text"` but has no `text` would otherwise
 * reach the translator as an empty string, or the vendor as a 400 that blames the gateway. The
 * message names the field by its path in the client's own format.
 */

/**
 * Anthropic's message threads (the `message-threads` beta: the server keeps the conversation and a
 * request sends only what is new) are refused as the vendor refuses a request it cannot thread, so
 * the SDK sends the whole conversation instead (its tool runner does by itself; a thread made with
 * `unsupportedRequestBehavior: "continue_unthreaded"` does too). Dropped, a continuation reached the
 * model without its history and was answered as if it had none (an SDK probe, 2026-11-30); passed
 * on, it named the gateway's message id, which no vendor issued. For `/v1/messages` and its
 * count_tokens alike (a count for a thread would name the operator's vendor account's).
 */
export function refuseThread(body: Record<string, unknown>): void {
  if (body.thread === undefined || body.thread === null) return;
  throw new GatewayError(400, "invalid_request", "This gateway does not keep message threads: send the whole conversation in `messages` (the SDK does so when a thread allows `unsupportedRequestBehavior: \"continue_unthreaded\"`).", undefined, undefined, { error_code: "thread_unsupported_request", unsupported: ["thread"] });
}

type Problem = { path: (string | number)[]; missing: boolean; expected: string };

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

function need(part: Record<string, unknown>, field: string, expected: "string" | "object" | "boolean", path: (string | number)[], optional = false): Problem | undefined {
  const value = part[field];
  if (value === undefined || value === null) return optional ? undefined : { path: [...path, field], missing: true, expected };
  const ok = expected === "object" ? isObject(value) : typeof value === expected;
  return ok ? undefined : { path: [...path, field], missing: false, expected };
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

function anthropicBlock(block: Record<string, unknown>, path: (string | number)[]): Problem | undefined {
  switch (block.type) {
    case "text":
      return need(block, "text", "string", path);
    case "image":
    case "document":
      return need(block, "source", "object", path);
    case "tool_use":
      return need(block, "id", "string", path) ?? need(block, "name", "string", path) ?? need(block, "input", "object", path);
    case "tool_result": {
      const problem = need(block, "tool_use_id", "string", path) ?? need(block, "is_error", "boolean", path, true);
      if (problem) return problem;
      const content = block.content;
      if (content === undefined || typeof content === "string") return undefined;
      if (!Array.isArray(content)) return { path: [...path, "content"], missing: false, expected: "string or array" };
      return anthropicBlocks(content, [...path, "content"]);
    }
    case "thinking":
      return need(block, "thinking", "string", path);
    case "redacted_thinking":
      return need(block, "data", "string", path);
    default:
      // Server tool blocks, citations, search results…: the vendor's to judge.
      return undefined;
  }
}

function anthropicBlocks(blocks: unknown[], path: (string | number)[]): Problem | undefined {
  for (let j = 0; j < blocks.length; j++) {
    const block = blocks[j];
    if (!isObject(block) || typeof block.type !== "string") return { path: [...path, j, "type"], missing: !isObject(block) || block.type === undefined, expected: "string" };
    const problem = anthropicBlock(block, [...path, j]);
    if (problem) return problem;
  }
  return undefined;
}

export function checkAnthropicContent(body: Record<string, unknown>): void {
  refuseForcedServerTool(body);
  let problem: Problem | undefined;
  if (Array.isArray(body.system)) problem = anthropicBlocks(body.system, ["system"]);
  const messages = body.messages as unknown[];
  for (let i = 0; !problem && i < messages.length; i++) {
    const m = messages[i] as Record<string, unknown>;
    if (Array.isArray(m.content)) problem = anthropicBlocks(m.content, ["messages", i, "content"]);
  }
  if (!problem) return;
  // Anthropic's own wording: "messages.0.content.1.text: Field required".
  const where = problem.path.join(".");
  throw new GatewayError(400, "invalid_request", problem.missing ? `${where}: Field required` : `${where}: Input should be a valid ${problem.expected}`);
}

// ---------------------------------------------------------------------------------------------
// OpenAI
// ---------------------------------------------------------------------------------------------

function openaiPart(part: Record<string, unknown>, path: (string | number)[]): Problem | undefined {
  switch (part.type) {
    case "text":
      return need(part, "text", "string", path);
    case "image_url": {
      const problem = need(part, "image_url", "object", path);
      return problem ?? need(part.image_url as Record<string, unknown>, "url", "string", [...path, "image_url"]);
    }
    case "input_audio":
      return need(part, "input_audio", "object", path);
    case "file":
      return need(part, "file", "object", path);
    case "refusal":
      return need(part, "refusal", "string", path);
    default:
      return undefined;
  }
}

export function checkOpenAIContent(body: Record<string, unknown>): void {
  const messages = body.messages as Record<string, unknown>[];
  let problem: Problem | undefined;
  for (let i = 0; !problem && i < messages.length; i++) {
    const m = messages[i]!;
    const path = ["messages", i];
    const content = m.content;
    if (content === undefined || content === null) {
      // An assistant turn may be only tool calls (or a refusal); every other role needs content.
      const empty = m.role !== "assistant" || (m.tool_calls === undefined && m.function_call === undefined && m.refusal === undefined && m.audio === undefined);
      if (empty) problem = { path: [...path, "content"], missing: true, expected: "string or array" };
    } else if (Array.isArray(content)) {
      for (let j = 0; !problem && j < content.length; j++) {
        const part = content[j];
        if (!isObject(part) || typeof part.type !== "string") problem = { path: [...path, "content", j, "type"], missing: true, expected: "string" };
        else problem = openaiPart(part, [...path, "content", j]);
      }
    }
    if (!problem && m.role === "tool") problem = need(m, "tool_call_id", "string", path);
    // A call is a function's or, of type "custom", a custom tool's: each with its own object.
    const calls = Array.isArray(m.tool_calls) ? (m.tool_calls as Record<string, unknown>[]) : [];
    for (let j = 0; !problem && j < calls.length; j++) {
      const call = calls[j]!;
      problem = need(call, call.type === "custom" ? "custom" : "function", "object", [...path, "tool_calls", j]);
    }
  }
  // A function tool's name and schema are inside `function`. The Responses API's flat shape
  // (`{type: "function", name, parameters}`), sent here by mistake, was dropped on the way to an
  // Anthropic upstream and answered without tools (a new user's probe); OpenAI refuses it so.
  const tools = Array.isArray(body.tools) ? (body.tools as unknown[]) : [];
  for (let i = 0; !problem && i < tools.length; i++) {
    const tool = tools[i];
    if (isObject(tool) && tool.type === "function") problem = need(tool, "function", "object", ["tools", i]);
  }
  if (!problem) return;
  // OpenAI's own wording: "Missing required parameter: 'messages[0].content[1].text'."
  const where = problem.path.map((p, k) => (typeof p === "number" ? `[${p}]` : k === 0 ? p : `.${p}`)).join("");
  throw new GatewayError(400, "invalid_request",
    problem.missing ? `Missing required parameter: '${where}'.` : `Invalid type for '${where}': expected a ${problem.expected}.`);
}
