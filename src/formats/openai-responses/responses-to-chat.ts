import type { Json } from "../common/wire-types.ts";
import type { ChatMessage, ChatRequest, ContentPart } from "../openai-chat/schema.ts";
import { CARRIED_REASONING, CARRIED_THINKING, openThinking, REASONING_CONTEXT, type CarriedBlock } from "../common/carried-thinking.ts";
import { CUSTOM_PARAMETERS, customToolDescription } from "../common/custom-tools.ts";

/**
 * An OpenAI Responses API request → an OpenAI chat-completions request, so the gateway's
 * existing paths take it from there (passthrough to OpenAI-compatible upstreams, the
 * Anthropic translation for Anthropic ones). Pure: plain values in, plain values out. About 400
 * lines: items, tools, tool choice, formats and content parts are one mapping, each small.
 */

/** A request the gateway cannot serve as asked; the message says which field and why. */
export class ResponsesRequestError extends Error {}

/** What the client called a tool the upstream knows under another name. */
export interface ClientTool {
  name: string;
  namespace?: string;
  /** A `custom` (free-form text) tool: the upstream sees a function taking one string, `input`. */
  custom: boolean;
}

/** Fields echoed in the answer, as the client sent them (or the API's defaults). */
export interface ResponsesEcho {
  instructions: unknown;
  max_output_tokens: number | null;
  metadata: Record<string, unknown>;
  parallel_tool_calls: boolean;
  reasoning: { effort: unknown; summary: unknown };
  /** Whether the answer is kept for later references; the route turns it off when storage is. */
  store: boolean;
  previous_response_id: string | null;
  temperature: number | null;
  text: unknown;
  tool_choice: unknown;
  tools: unknown[];
  top_p: number | null;
  user: unknown;
  prompt_cache_key: unknown;
  safety_identifier: unknown;
  /** As asked (`auto` or `disabled`); the gateway truncates nothing either way. */
  truncation: "auto" | "disabled";
}

export interface ResponsesPlan {
  /** The chat-completions body, `model`/`models` included, for the usual pipeline. */
  chat: ChatRequest;
  /** Upstream function name → the client's tool, for every tool whose name or kind changed on the way. */
  tools: Map<string, ClientTool>;
  echo: ResponsesEcho;
  /** Hosted tools (and history items of theirs) that no chat upstream can run, dropped; for the log. */
  dropped: string[];
  /** The client asked for `reasoning.encrypted_content`: signed thinking goes out sealed in reasoning items. */
  sealThinking: boolean;
  /**
   * Bytes of signed thinking carried to assistant messages, which the chat body's JSON does not
   * show: the hold and the prompt's cap count them with the body (a hostile-tenant probe: 6.4 MB of
   * them went upstream held as 200 bytes).
   */
  carriedBytes: number;
}

/**
 * Fields that need what the gateway does not keep: conversations and prompt templates are
 * objects made through other OpenAI endpoints, which it does not serve (docs/decisions.md,
 * "Responses API"). Its own stored answers are resolved before translation (stored-input.ts).
 */
const NEEDS_STORAGE: Record<string, string> = {
  conversation: "conversation is not supported: the gateway stores no conversations. Send the whole conversation in `input` (or continue an answer with `previous_response_id`).",
  prompt: "prompt (stored prompt templates) is not supported: send the instructions and input themselves.",
};

/**
 * The Responses API's default namespace: a tool declared in it is an ordinary tool. Codex (0.169,
 * the GPT-6 models it runs in code mode) declares its `exec` and `wait` tools there and tells the
 * model to call `functions.exec`; a call goes back without a namespace, as for any plain tool.
 */
const DEFAULT_NAMESPACE = "functions";

/** Longest function name OpenAI accepts (`^[a-zA-Z0-9_-]{1,64}$`). */
const MAX_NAME = 64;

/**
 * `body` as the client sent it once stored-input.ts resolved what it refers to: its `input` holds
 * the items themselves, `previous_response_id`'s turns included.
 */
export function responsesToChat(body: Record<string, unknown>): ResponsesPlan {
  for (const [field, message] of Object.entries(NEEDS_STORAGE)) {
    if (body[field] !== undefined && body[field] !== null) throw new ResponsesRequestError(message);
  }
  if (body.background === true) throw new ResponsesRequestError("background is not supported: the gateway runs no answers in the background to poll. Stream the answer instead (`stream: true`).");

  const dropped: string[] = [];
  const tools = new Map<string, ClientTool>();
  const chatTools: NonNullable<ChatRequest["tools"]> = [];
  /** Client (namespace, name) → upstream name, for tool_choice and history items. */
  const upstreamName = new Map<string, string>();
  const key = (name: string, namespace?: string) => `${namespace ?? ""}\u0000${name}`;

  /** Upstream name → its place in `chatTools`: a tool declared again (a later additional_tools item) replaces the first. */
  const declared = new Map<string, number>();

  const addTool = (tool: Json, namespace?: string) => {
    const type = tool.type;
    const name = typeof tool.name === "string" ? tool.name : undefined;
    if ((type === "function" || type === "custom") && name) {
      const flat = namespace ? flattenName(namespace, name) : name;
      upstreamName.set(key(name, namespace), flat);
      const custom = type === "custom";
      tools.delete(flat);
      if (custom || namespace) tools.set(flat, { name, ...(namespace ? { namespace } : {}), custom });
      const description = typeof tool.description === "string" ? tool.description : "";
      const fn: NonNullable<ChatRequest["tools"]>[number]["function"] & Json = custom
        ? { name: flat, description: customToolDescription(description, tool.format), parameters: CUSTOM_PARAMETERS }
        : { name: flat, ...(description ? { description } : {}), parameters: (tool.parameters as Json | undefined) ?? { type: "object", properties: {} } };
      if (!custom && typeof tool.strict === "boolean") fn.strict = tool.strict;
      // Chat upstreams refuse two functions of one name.
      const at = declared.get(flat);
      if (at === undefined) declared.set(flat, chatTools.push({ type: "function", function: fn }) - 1);
      else chatTools[at] = { type: "function", function: fn };
    } else if (type === "namespace" && typeof tool.name === "string" && Array.isArray(tool.tools)) {
      // The default namespace's tools are the ordinary ones, under their own names (the model is told `functions.exec`).
      const inner = tool.name === DEFAULT_NAMESPACE ? undefined : tool.name;
      for (const member of tool.tools) if (member && typeof member === "object") addTool(member as Json, inner);
    } else if (type === "function" || type === "custom") {
      // Chat completions' nested shape sent here by mistake was dropped as an unknown tool, and
      // tool_choice "required" with it: a text answer, no call (a new user's probe). OpenAI refuses it.
      throw new ResponsesRequestError(`a tool of type ${type} needs a name: the Responses API's tools are flat ({"type": "function", "name", "parameters"}); {"type": "function", "function": {…}} is chat completions' shape.`);
    } else dropped.push(`tool:${String(type)}`);
  };
  for (const tool of (body.tools as Json[] | undefined) ?? []) if (tool && typeof tool === "object") addTool(tool);
  // Tools declared as input items (what Codex sends for the models it runs in code mode, instead
  // of `tools`): the upstream gets them as it gets `tools`, whichever item declared them.
  if (Array.isArray(body.input)) {
    for (const item of body.input as Json[]) {
      if (item?.type !== "additional_tools") continue;
      if (!Array.isArray(item.tools)) throw new ResponsesRequestError("an input item of type additional_tools needs `tools`, an array of tools.");
      for (const tool of item.tools) if (tool && typeof tool === "object") addTool(tool as Json);
    }
  }

  const clientNamespace = (namespace: unknown) => (typeof namespace === "string" && namespace !== DEFAULT_NAMESPACE ? namespace : undefined);
  const nameFor = (name: unknown, namespace: unknown) => {
    const ns = clientNamespace(namespace);
    return upstreamName.get(key(String(name ?? ""), ns)) ?? (ns ? flattenName(ns, String(name ?? "")) : String(name ?? ""));
  };

  const messages: ChatMessage[] = [];
  /** Signed thinking read from reasoning items, for the next assistant message. */
  const carried: CarriedBlock[] = [];
  /** The reasoning text of those items (their summary or content), for a model that wants it back (carried-thinking.ts, CARRIED_REASONING). */
  const reasoned: string[] = [];
  /** What the carried blocks add to the request sent (they travel beside the body's JSON: a symbol-keyed property). */
  let carriedBytes = 0;
  if (typeof body.instructions === "string" && body.instructions) messages.push({ role: "system", content: body.instructions });
  const input = body.input;
  if (typeof input === "string") messages.push({ role: "user", content: input });
  else if (Array.isArray(input)) {
    for (const raw of input) {
      if (!raw || typeof raw !== "object") throw new ResponsesRequestError("input items must be objects.");
      addItem(raw as Json);
    }
  }

  function addItem(item: Json) {
    const type = item.type ?? (item.role !== undefined ? "message" : undefined);
    switch (type) {
      case "message":
        return addMessage(item);
      case "function_call":
        return addCall(String(item.call_id ?? item.id ?? ""), nameFor(item.name, item.namespace), typeof item.arguments === "string" ? item.arguments : JSON.stringify(item.arguments ?? {}));
      case "custom_tool_call":
        return addCall(String(item.call_id ?? item.id ?? ""), nameFor(item.name, item.namespace), JSON.stringify({ input: String(item.input ?? "") }));
      case "function_call_output":
      case "custom_tool_call_output":
        messages.push({ role: "tool", tool_call_id: String(item.call_id ?? ""), content: toolOutput(item.output) });
        return;
      case "reasoning": {
        // Reasoning items (and their encrypted content) belong to the vendor that wrote them;
        // another upstream cannot read them. Anthropic's signed thinking that the gateway sealed
        // goes back to the assistant message that follows (carried-thinking.ts).
        const blocks = openThinking(item.encrypted_content);
        // At most a turn's worth before one message (many items repeating one block made the
        // prompt sent far larger than a body's measure; a hostile-tenant probe).
        if (blocks && carried.length + blocks.length <= MAX_CARRIED_BLOCKS) {
          carried.push(...blocks);
          carriedBytes += Buffer.byteLength(JSON.stringify(blocks));
        } else if (!blocks && reasoned.length < MAX_CARRIED_BLOCKS) {
          const text = reasoningText(item);
          if (text) {
            reasoned.push(text);
            carriedBytes += Buffer.byteLength(text);
          }
        }
        return;
      }
      case "additional_tools":
        // Its tools were read with the request's own (above).
        return;
      case "item_reference":
        // Replaced by the items they name before translation (stored-input.ts); one left here was never looked up.
        throw new ResponsesRequestError(`input item_reference ${JSON.stringify(String(item.id ?? "").slice(0, 200))} could not be resolved: send the item itself.`);
      default:
        dropped.push(`item:${String(type)}`);
    }
  }

  function addMessage(item: Json) {
    const role = item.role;
    if (role === "assistant") {
      const text = assistantText(item.content);
      const last = messages[messages.length - 1];
      // Text after tool calls of the same turn starts a new assistant message; chat keeps text before calls.
      if (last?.role === "assistant" && !last.tool_calls?.length && carried.length === 0 && reasoned.length === 0) last.content = joinText(last.content, text);
      else messages.push(withCarried({ role: "assistant", content: text }));
      return;
    }
    carried.length = 0;
    reasoned.length = 0;
    if (role !== "user" && role !== "system" && role !== "developer") throw new ResponsesRequestError(`input message role "${String(role)}" is not one of user, assistant, system, developer.`);
    // `developer` is what OpenAI's newer models call `system`; compatible servers and Anthropic know only `system`.
    messages.push({ role: role === "user" ? "user" : "system", content: inputContent(item.content) });
  }

  function addCall(callId: string, name: string, args: string) {
    const call = { id: callId, type: "function", function: { name, arguments: args } };
    const last = messages[messages.length - 1];
    // Parallel calls of one turn arrive as consecutive items; chat wants them on one assistant message.
    if (last?.role === "assistant" && carried.length === 0 && reasoned.length === 0) (last.tool_calls ??= []).push(call);
    else messages.push(withCarried({ role: "assistant", content: null, tool_calls: [call] }));
  }

  /** A new assistant message, starting with the signed thinking that came before it (if any). */
  function withCarried(message: ChatMessage): ChatMessage {
    if (carried.length > 0) {
      (message as ChatMessage & { [CARRIED_THINKING]?: CarriedBlock[] })[CARRIED_THINKING] = carried.splice(0);
    }
    if (reasoned.length > 0) (message as ChatMessage & { [CARRIED_REASONING]?: string })[CARRIED_REASONING] = reasoned.splice(0).join("\n");
    return message;
  }

  const chat: ChatRequest = { messages };
  if (typeof body.model === "string") chat.model = body.model;
  if (Array.isArray(body.models)) chat.models = body.models;
  if (body.stream === true) chat.stream = true;
  if (typeof body.max_output_tokens === "number") chat.max_tokens = body.max_output_tokens;
  if (typeof body.temperature === "number") chat.temperature = body.temperature;
  if (typeof body.top_p === "number") chat.top_p = body.top_p;
  if (chatTools.length > 0) {
    chat.tools = chatTools;
    const choice = toolChoice(body.tool_choice, nameFor, dropped);
    if (choice !== undefined) chat.tool_choice = choice;
    if (typeof body.parallel_tool_calls === "boolean") chat.parallel_tool_calls = body.parallel_tool_calls;
  }
  const reasoning = body.reasoning as { effort?: unknown; summary?: unknown; generate_summary?: unknown; context?: unknown } | null | undefined;
  if (typeof reasoning?.effort === "string") chat.reasoning_effort = reasoning.effort;
  if (typeof reasoning?.context === "string") (chat as ChatRequest & { [REASONING_CONTEXT]?: string })[REASONING_CONTEXT] = reasoning.context;
  const text = body.text as { format?: Json; verbosity?: unknown } | null | undefined;
  const format = responseFormat(text?.format);
  if (format) chat.response_format = format;
  if (typeof text?.verbosity === "string") chat.verbosity = text.verbosity;
  // `service_tier` too: a client's flex is the price it asked for (providers/openai/openai-adapter.ts judges the rest).
  // `prompt_cache_retention` too: without it a client's 12-hour cache ran at the default 30 minutes
  // (written again after each pause), and the vendor's echo of it prices the writes (openai-responses-adapter.ts).
  for (const field of ["user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier"] as const) {
    if (typeof body[field] === "string") chat[field] = body[field];
  }

  const echo: ResponsesEcho = {
    instructions: body.instructions ?? null,
    max_output_tokens: typeof body.max_output_tokens === "number" ? body.max_output_tokens : null,
    metadata: (body.metadata as Record<string, unknown> | null | undefined) ?? {},
    parallel_tool_calls: body.parallel_tool_calls !== false,
    // `generate_summary` is the field's older, deprecated name.
    reasoning: { effort: reasoning?.effort ?? null, summary: reasoning?.summary ?? reasoning?.generate_summary ?? null },
    store: body.store !== false,
    previous_response_id: typeof body.previous_response_id === "string" ? body.previous_response_id : null,
    temperature: typeof body.temperature === "number" ? body.temperature : 1,
    text: { format: text?.format ?? { type: "text" }, ...(text?.verbosity ? { verbosity: text.verbosity } : {}) },
    tool_choice: body.tool_choice ?? "auto",
    tools: (body.tools as unknown[] | undefined) ?? [],
    top_p: typeof body.top_p === "number" ? body.top_p : 1,
    user: body.user ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    safety_identifier: body.safety_identifier ?? null,
    truncation: body.truncation === "auto" ? "auto" : "disabled",
  };
  const sealThinking = Array.isArray(body.include) && body.include.includes("reasoning.encrypted_content");
  return { chat, tools, echo, dropped, sealThinking, carriedBytes };
}

/** A reasoning item's text as the gateway wrote it: its summary parts, else its reasoning content parts (content repeats the summary when both are there). */
function reasoningText(item: Json): string {
  const texts = (parts: unknown) => (Array.isArray(parts) ? (parts as Json[]) : []).flatMap((p) => (p && typeof p === "object" && typeof p.text === "string" && p.text ? [p.text] : []));
  const summary = texts(item.summary);
  return (summary.length > 0 ? summary : texts(item.content)).join("\n");
}

/** Signed thinking blocks one assistant message takes from the reasoning items before it. */
const MAX_CARRIED_BLOCKS = 64;

/**
 * `namespace` + `name` as one function name the upstream accepts. Long pairs keep a readable
 * head and a hash of the whole, so two tools never share a name.
 */
export function flattenName(namespace: string, name: string): string {
  const flat = `${namespace}__${name}`;
  if (flat.length <= MAX_NAME && /^[a-zA-Z0-9_-]+$/.test(flat)) return flat;
  const hash = Bun.hash(flat).toString(36).slice(0, 8);
  return `${flat.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, MAX_NAME - hash.length - 1)}_${hash}`;
}

function toolChoice(choice: unknown, nameFor: (name: unknown, namespace: unknown) => string, dropped: string[]): unknown {
  if (choice === "auto" || choice === "none" || choice === "required") return choice;
  if (!choice || typeof choice !== "object") return undefined;
  const c = choice as { type?: unknown; name?: unknown; namespace?: unknown; mode?: unknown; tools?: unknown };
  if ((c.type === "function" || c.type === "custom") && typeof c.name === "string") return { type: "function", function: { name: nameFor(c.name, c.namespace) } };
  // allowed_tools: chat's own form, so an OpenAI upstream (chat or Responses) keeps the subset, and
  // Anthropic reads its mode (openai-to-anthropic.ts, allowedTools); every tool stays listed either
  // way. Before, only the mode went on, and an OpenAI model could call a tool outside the subset
  // (an SDK probe, thirty-fourth session). A subset naming no function tool is its mode alone.
  if (c.type === "allowed_tools") {
    const mode = c.mode === "required" ? "required" : "auto";
    const tools = (Array.isArray(c.tools) ? c.tools : []).flatMap((t: { type?: unknown; name?: unknown; namespace?: unknown } | null) =>
      (t?.type === "function" || t?.type === "custom") && typeof t.name === "string" ? [{ type: "function", function: { name: nameFor(t.name, t.namespace) } }] : []);
    return tools.length > 0 ? { type: "allowed_tools", allowed_tools: { mode, tools } } : mode;
  }
  dropped.push(`tool_choice:${String(c.type)}`);
  return undefined;
}

function responseFormat(format: Json | undefined): Json | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type === "json_schema") {
    const schema: Json = { name: format.name ?? "response", schema: format.schema ?? {} };
    if (typeof format.strict === "boolean") schema.strict = format.strict;
    if (typeof format.description === "string") schema.description = format.description;
    return { type: "json_schema", json_schema: schema };
  }
  throw new ResponsesRequestError(`text.format.type "${String(format.type)}" is not one of text, json_object, json_schema.`);
}

/**
 * A user/system message's content in chat form: one string when it is only text (what every
 * compatible server understands), else chat parts; images become `image_url` parts and meet
 * the gateway's one rule on media input there.
 */
function inputContent(content: unknown): ChatMessage["content"] {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw new ResponsesRequestError("message content must be a string or an array of content parts.");
  const parts = content.map(inputPart);
  if (parts.every((p) => p.type === "text")) return parts.length === 1 ? String(parts[0]!.text) : parts;
  return parts;
}

function inputPart(part: unknown): ContentPart {
  const p = (part ?? {}) as Json;
  switch (p.type) {
    case "input_text":
    case "output_text":
    case "text":
      return { type: "text", text: String(p.text ?? "") };
    case "input_image":
      return { type: "image_url", image_url: { url: p.image_url ?? p.file_id ?? "", ...(p.detail ? { detail: p.detail } : {}) } };
    case "input_file":
      return { type: "file", file: { ...(p.file_id ? { file_id: p.file_id } : {}), ...(p.file_data ? { file_data: p.file_data } : {}), ...(p.filename ? { filename: p.filename } : {}) } };
    default:
      throw new ResponsesRequestError(`content part type "${String(p.type)}" is not one of input_text, input_image, input_file.`);
  }
}

/** An assistant message's text: output_text parts (and refusals, which are its words too). */
function assistantText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let text = "";
  for (const part of content as Json[]) {
    if (typeof part?.text === "string") text += part.text;
    else if (typeof part?.refusal === "string") text += part.refusal;
  }
  return text;
}

function joinText(a: unknown, b: string): string {
  const first = typeof a === "string" ? a : "";
  return first && b ? `${first}\n\n${b}` : first || b;
}

/** A tool's output: a string, or parts (text, and images that meet the media rule like any input). */
function toolOutput(output: unknown): ChatMessage["content"] {
  if (typeof output === "string") return output;
  if (!Array.isArray(output)) return JSON.stringify(output ?? "");
  const parts = output.map(inputPart);
  if (parts.every((p) => p.type === "text")) return parts.map((p) => p.text).join("");
  return parts;
}
