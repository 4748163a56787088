import type { AnthropicBlock } from "../anthropic-messages/schema.ts";

/** Raised when a request carries something the gateway does not pass through (image input); `partType`: the part's type, as the message quotes it. */
export class UnsupportedContentError extends Error {
  constructor(message: string, readonly partType?: string) {
    super(message);
  }
}

/**
 * A Responses client's part types by the chat names its parts travel under (responses-to-chat.ts):
 * its refusal names what it sent (it named `image_url` for an `input_image`; a probe of the SDKs).
 */
const RESPONSES_PART_TYPES: Record<string, string> = { image_url: "input_image", file: "input_file", text: "input_text" };

/** The refusal's message as a Responses client reads it: its own part type quoted. */
export function inResponsesTerms(err: UnsupportedContentError): string {
  const own = err.partType !== undefined ? RESPONSES_PART_TYPES[err.partType] : undefined;
  return own ? err.message.replace(`"${err.partType}"`, `"${own}"`) : err.message;
}

// `container_upload`: a file of the operator's vendor account named by id (Anthropic's Files API), a file as much as a document is.
const IMAGE_PARTS = new Set(["image_url", "input_image", "image", "input_audio", "file", "document", "container_upload"]);

/**
 * Text of an OpenAI content value (string or array of parts), parts joined by a newline. Image
 * and other media parts are refused here, at one place, for both formats: the spec does not pass
 * them through yet.
 */
export function openaiContentText(content: unknown): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw new UnsupportedContentError("message content must be a string or an array of content parts");
  const texts: string[] = [];
  for (const part of content) {
    const type = (part as { type?: unknown })?.type;
    if (type === "text") texts.push(String((part as { text?: unknown }).text ?? ""));
    // An assistant's earlier refusal, sent back as history: what it said, like its text.
    else if (type === "refusal") texts.push(String((part as { refusal?: unknown }).refusal ?? ""));
    else if (typeof type === "string" && IMAGE_PARTS.has(type)) {
      throw new UnsupportedContentError(`content part type "${type}" is not supported: image and file input are not passed through yet; send text only`, type);
    } else throw new UnsupportedContentError(`unknown content part type "${String(type)}"`);
  }
  // Empty parts add nothing (joined, two empty parts made a text of "\n").
  return texts.filter((t) => t !== "").join("\n");
}

/**
 * Text of Anthropic blocks, refusing media the same way. Blocks are separate paragraphs to the
 * client (Claude Code sends its reminders and the user's words as separate blocks), so their
 * texts are joined with a newline rather than run together.
 */
export function anthropicBlocksText(blocks: string | AnthropicBlock[] | undefined): string {
  if (blocks === undefined) return "";
  if (typeof blocks === "string") return blocks;
  const texts: string[] = [];
  for (const block of blocks) {
    if (block.type === "text") texts.push(String(block.text ?? ""));
    // Claude Code's tool search answers with references to the tools it loaded; a model of another
    // vendor is told which (their definitions are in the request's tools), not an empty result.
    else if (block.type === "tool_reference") texts.push(`Tool loaded: ${String((block as { tool_name?: unknown }).tool_name ?? "")}`);
    else if (IMAGE_PARTS.has(block.type)) {
      throw new UnsupportedContentError(`content block type "${block.type}" is not supported: image and document input are not passed through yet; send text only`);
    }
  }
  return texts.join("\n");
}

/**
 * What a tool's result says in place of an image or a file the gateway does not pass on. Agent
 * CLIs put them there themselves (Claude Code's Read of a PNG, Codex's `view_image`), and the
 * result stays in the conversation: refused, every later turn of the session was a 400 (a probe
 * of the agent CLIs, 2026-11-30). Left out with this note, the model can tell its user it could not
 * see it, and the session goes on. A user's own image (in a user message) is still refused.
 */
export const MEDIA_LEFT_OUT = "[An image or file in this tool result was left out: this gateway passes text only.]";

/**
 * Replaces the images and files inside tool results with MEDIA_LEFT_OUT, in place: Anthropic's
 * `tool_result` blocks, and OpenAI's `tool` messages (the Responses API's `function_call_output`
 * arrives as one). Anything else is left for the checks that refuse it. True when anything was
 * left out: the body is then smaller than the one that arrived.
 */
export function leaveOutToolResultMedia(messages: unknown[], wire: "openai" | "anthropic"): boolean {
  let changed = false;
  const leaveOut = (parts: unknown[]) => {
    const kept = withoutMedia(parts);
    if (kept !== parts) changed = true;
    return kept;
  };
  for (const m of messages as { role?: unknown; content?: unknown }[]) {
    if (m === null || typeof m !== "object" || !Array.isArray(m.content)) continue;
    if (wire === "openai") {
      if (m.role === "tool") m.content = leaveOut(m.content);
      continue;
    }
    for (const block of m.content as { type?: unknown; content?: unknown }[]) {
      if (block !== null && typeof block === "object" && block.type === "tool_result" && Array.isArray(block.content)) block.content = leaveOut(block.content);
    }
  }
  return changed;
}

/** Parts with each image or file replaced by the note (the same array when there is none). */
function withoutMedia(parts: unknown[]): unknown[] {
  if (!parts.some((p) => IMAGE_PARTS.has((p as { type?: unknown } | null)?.type as string))) return parts;
  return parts.map((p) => (IMAGE_PARTS.has((p as { type?: unknown } | null)?.type as string) ? { type: "text", text: MEDIA_LEFT_OUT } : p));
}

/** Walks every place an OpenAI request may carry content, so a same-format passthrough is refused too. */
export function assertOpenAITextOnly(messages: { content?: unknown }[]): void {
  for (const m of messages) if (Array.isArray(m.content)) openaiContentText(m.content);
}

export function assertAnthropicTextOnly(messages: { content: unknown }[], system?: unknown): void {
  if (Array.isArray(system)) anthropicBlocksText(system as AnthropicBlock[]);
  for (const m of messages) {
    if (!Array.isArray(m.content)) continue;
    for (const block of m.content as AnthropicBlock[]) {
      if (IMAGE_PARTS.has(block.type)) anthropicBlocksText([block]);
      if (block.type === "tool_result" && Array.isArray(block.content)) anthropicBlocksText(block.content as AnthropicBlock[]);
    }
  }
}
