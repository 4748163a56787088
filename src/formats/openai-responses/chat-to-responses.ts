import type { Json, TranslationNotes } from "../common/wire-types.ts";
import type { ChatMessage, ChatRequest, ContentPart } from "../openai-chat/schema.ts";
import { UNKNOWN_TRAITS, type UpstreamTraits } from "../common/model-traits.ts";
import { CARRIED_THINKING, openaiEncryptedReasoning, REASONING_CONTEXT, type CarriedBlock } from "../common/carried-thinking.ts";
import { withToolsForLegacyFunctions } from "../openai-chat/legacy-functions.ts";

/**
 * The gateway's chat request → a request to OpenAI's Responses API (`models[].upstream_api:
 * "responses"`). Every client format reaches it through the chat request it already travels in:
 * a chat client's as it is, an Anthropic client's as anthropic-to-openai.ts translates it, a
 * Responses client's as responses-to-chat.ts translated it (its stored answers and references
 * resolved, its custom and namespaced tools named as the encoder reads them back). Pure.
 *
 * What the upstream keeps: nothing. `store: false`, and reasoning models are asked for their
 * reasoning encrypted (`include: ["reasoning.encrypted_content"]`), which goes back to the
 * client as the reasoning's signature (carried-thinking.ts) and comes back here as a reasoning
 * item before the assistant turn it was made for: the model goes on from its own reasoning
 * through a tool loop, with nothing stored at OpenAI.
 */

/** Chat fields the Responses API has no place for: left out, and said in the log. */
const NO_PLACE = ["stop", "n", "seed", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "modalities", "audio", "prediction", "web_search_options"] as const;

/** Fields that pass as they are (strings the Responses API names the same). */
const SAME_FIELDS = ["user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier"] as const;

export function chatToResponses(request: ChatRequest, upstreamModel: string, maxTokens: number, traits: UpstreamTraits = UNKNOWN_TRAITS, notes: TranslationNotes = {}): Json {
  const body = withToolsForLegacyFunctions(request);
  const input: Json[] = [];
  const instructions: string[] = [];
  /** System messages before the conversation are the instructions; later ones stay where they are. */
  let conversation = false;
  for (const message of body.messages) {
    const m = message as ChatMessage & { refusal?: unknown };
    switch (m.role) {
      case "system":
      case "developer":
        if (!conversation) instructions.push(plainText(m.content));
        else input.push({ role: "developer", content: plainText(m.content) });
        continue;
      case "user":
        input.push({ role: "user", content: typeof m.content === "string" ? m.content : inputParts(m.content, notes) });
        break;
      case "assistant": {
        for (const block of (m as { [CARRIED_THINKING]?: CarriedBlock[] })[CARRIED_THINKING] ?? []) {
          // OpenAI's own reasoning only: Anthropic's signed thinking means nothing to it.
          const encrypted = block.type === "thinking" ? openaiEncryptedReasoning(block.signature) : undefined;
          if (encrypted === undefined) continue;
          const summary = block.type === "thinking" && block.thinking ? [{ type: "summary_text", text: block.thinking }] : [];
          input.push({ type: "reasoning", summary, encrypted_content: encrypted });
        }
        const text = plainText(m.content) || (typeof m.refusal === "string" ? m.refusal : "");
        if (text) input.push({ role: "assistant", content: text });
        for (const call of m.tool_calls ?? []) {
          const args = call.function?.arguments;
          input.push({ type: "function_call", call_id: call.id, name: call.function?.name ?? "", arguments: typeof args === "string" && args ? args : "{}" });
        }
        break;
      }
      case "tool":
        input.push({ type: "function_call_output", call_id: String(m.tool_call_id ?? ""), output: typeof m.content === "string" ? m.content : toolOutput(m.content, notes) });
        break;
    }
    conversation = true;
  }

  const out: Json = { model: upstreamModel, input, store: false, max_output_tokens: maxTokens };
  const system = instructions.filter((s) => s !== "").join("\n\n");
  if (system) out.instructions = system;
  if (body.stream === true) out.stream = true;
  if (typeof body.temperature === "number") out.temperature = body.temperature;
  if (typeof body.top_p === "number") out.top_p = body.top_p;

  const tools: Json[] = [];
  for (const tool of body.tools ?? []) {
    const fn = tool.function;
    if (tool.type !== "function" || !fn || typeof fn.name !== "string") {
      (notes.dropped ??= []).push(`tools: a ${String(tool.type)} tool (only function tools are sent)`);
      continue;
    }
    // The Responses API's functions are strict unless told otherwise, and a strict schema must be
    // closed and wholly required: an agent's schemas are not, so only the client's own `strict` holds.
    tools.push({ type: "function", name: fn.name, ...(typeof fn.description === "string" && fn.description ? { description: fn.description } : {}), parameters: fn.parameters ?? { type: "object", properties: {} }, strict: fn.strict === true });
  }
  if (tools.length > 0) {
    out.tools = tools;
    const choice = toolChoice(body.tool_choice);
    if (choice !== undefined) out.tool_choice = choice;
    if (typeof body.parallel_tool_calls === "boolean") out.parallel_tool_calls = body.parallel_tool_calls;
  }

  const effort = typeof body.reasoning_effort === "string" ? body.reasoning_effort : undefined;
  // A Responses client's `reasoning.context` (which turns' reasoning the model keeps), as it asked.
  const context = (body as { [REASONING_CONTEXT]?: string })[REASONING_CONTEXT];
  if (traits.reasoning === "none") {
    if (effort !== undefined) (notes.dropped ??= []).push("reasoning_effort: this model does not reason");
    if (context !== undefined) (notes.dropped ??= []).push("reasoning.context: this model does not reason");
  } else if (traits.reasoning === "effort" || effort !== undefined || context !== undefined) {
    // A reasoning model shows its thinking as summaries, when asked: every client format has a
    // place for it (Claude's thinking, Codex's reasoning, chat's reasoning_content).
    const reasons = effort !== "none";
    out.reasoning = { ...(effort !== undefined ? { effort } : {}), ...(reasons ? { summary: "auto" } : {}), ...(context !== undefined ? { context } : {}) };
    if (reasons) out.include = ["reasoning.encrypted_content"];
  }

  const text: Json = {};
  const format = textFormat(body.response_format);
  if (format) text.format = format;
  if (typeof (body as { verbosity?: unknown }).verbosity === "string") text.verbosity = (body as { verbosity?: unknown }).verbosity;
  if (Object.keys(text).length > 0) out.text = text;

  for (const field of SAME_FIELDS) if (typeof body[field] === "string") out[field] = body[field];
  for (const field of NO_PLACE) if (body[field] !== undefined && body[field] !== null) (notes.dropped ??= []).push(`${field}: the Responses API has no such field`);
  return out;
}

/** A message's text: a string, or its text parts joined. */
function plainText(content: ChatMessage["content"]): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p) => (typeof p.text === "string" ? p.text : typeof p.refusal === "string" ? p.refusal : "")).join("");
}

/** A user message's parts as input parts: text, images (a URL, a data URI, or an uploaded file's id), files. */
function inputParts(content: ChatMessage["content"], notes: TranslationNotes): Json[] {
  const parts: Json[] = [];
  for (const p of Array.isArray(content) ? content : []) {
    const part = inputPart(p);
    if (part) parts.push(part);
    else (notes.dropped ??= []).push(`content: a ${String(p.type)} part (the Responses API takes text, images and files)`);
  }
  return parts;
}

function inputPart(p: ContentPart): Json | undefined {
  switch (p.type) {
    case "text":
    case "input_text":
      return { type: "input_text", text: String(p.text ?? "") };
    case "image_url": {
      const image = p.image_url as { url?: unknown; detail?: unknown } | string | undefined;
      const url = typeof image === "string" ? image : String(image?.url ?? "");
      const detail = typeof image === "object" && typeof image?.detail === "string" ? image.detail : "auto";
      // A Responses client's uploaded image travels through chat as its file id (responses-to-chat.ts).
      return /^file-[\w-]+$/.test(url) ? { type: "input_image", file_id: url, detail } : { type: "input_image", image_url: url, detail };
    }
    case "file": {
      const file = (p.file ?? {}) as Json;
      return { type: "input_file", ...(file.file_id ? { file_id: file.file_id } : {}), ...(file.file_data ? { file_data: file.file_data } : {}), ...(file.filename ? { filename: file.filename } : {}) };
    }
  }
  return undefined;
}

/** A tool's result in parts: text alone as one string, else the parts (images a tool returned). */
function toolOutput(content: ChatMessage["content"], notes: TranslationNotes): string | Json[] {
  const parts = inputParts(content, notes);
  return parts.every((p) => p.type === "input_text") ? parts.map((p) => p.text).join("") : parts;
}

function toolChoice(choice: unknown): unknown {
  if (choice === "auto" || choice === "none" || choice === "required") return choice;
  const c = choice as { type?: unknown; function?: { name?: unknown }; allowed_tools?: { mode?: unknown; tools?: unknown } } | null | undefined;
  // Chat's allowed subset (`{type: "allowed_tools", allowed_tools: {mode, tools}}`) is the Responses
  // API's with its fields one level up: dropped, a `required` subset could be answered in text.
  if (c?.type === "allowed_tools") {
    const mode = c.allowed_tools?.mode === "required" ? "required" : "auto";
    const tools = (Array.isArray(c.allowed_tools?.tools) ? c.allowed_tools.tools : []).flatMap((t: { type?: unknown; function?: { name?: unknown } } | null) =>
      t?.type === "function" && typeof t.function?.name === "string" ? [{ type: "function", name: t.function.name }] : [],
    );
    return tools.length > 0 ? { type: "allowed_tools", mode, tools } : mode;
  }
  const name = c?.function?.name;
  return typeof name === "string" ? { type: "function", name } : undefined;
}

/** Chat's `response_format` as the Responses API's `text.format` (its schema's fields one level up). */
function textFormat(format: unknown): Json | undefined {
  const f = format as { type?: unknown; json_schema?: Json } | null | undefined;
  if (f?.type === "json_object") return { type: "json_object" };
  if (f?.type !== "json_schema" || !f.json_schema) return undefined;
  const s = f.json_schema;
  return { type: "json_schema", name: s.name ?? "response", schema: s.schema ?? {}, ...(typeof s.strict === "boolean" ? { strict: s.strict } : {}), ...(typeof s.description === "string" ? { description: s.description } : {}) };
}
