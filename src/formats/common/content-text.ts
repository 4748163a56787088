import type { AnthropicBlock } from "../anthropic-messages/schema.ts";

/** Raised when a request carries something the gateway does not pass through (image input). */
export class UnsupportedContentError extends Error {}

const IMAGE_PARTS = new Set(["image_url", "input_image", "image", "input_audio", "file", "document"]);

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
      throw new UnsupportedContentError(`content part type "${type}" is not supported: image and file input are not passed through yet; send text only`);
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
    else if (IMAGE_PARTS.has(block.type)) {
      throw new UnsupportedContentError(`content block type "${block.type}" is not supported: image and document input are not passed through yet; send text only`);
    }
  }
  return texts.join("\n");
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
