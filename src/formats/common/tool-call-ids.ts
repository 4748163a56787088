/**
 * A tool call's id as the other vendor takes it. Ids travel with a conversation across vendors
 * (a fallback, a model switch, an OpenAI-compatible server's ids in the history), and each vendor
 * refuses the other's shapes: Anthropic takes `^[a-zA-Z0-9_-]+$` only (vLLM's Kimi ids read
 * `functions.get_weather:0`), OpenAI at most 40 characters. The rewrite is a pure function of the
 * id, so a call and its result, written separately, still name each other; an id the vendor takes
 * goes as it is.
 */

const ANTHROPIC_ID = /^[a-zA-Z0-9_-]+$/;
const OPENAI_MAX = 40;

/** A short fingerprint of the id: two ids that differ only in what is replaced stay apart. */
const fingerprint = (id: string) => Bun.hash(id).toString(36).slice(0, 8);

/** For Anthropic's `tool_use.id` and `tool_result.tool_use_id`. */
export function anthropicToolId(id: string): string {
  if (ANTHROPIC_ID.test(id)) return id;
  return `${id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 200)}_${fingerprint(id)}`;
}

/** For OpenAI's `tool_calls[].id` and a tool message's `tool_call_id`. */
export function openaiToolId(id: string): string {
  if (id.length <= OPENAI_MAX) return id;
  return `${id.slice(0, OPENAI_MAX - 9)}_${fingerprint(id)}`;
}

/** A message of either vendor's conversation, as far as its tool ids go. */
interface MessageWithBlocks {
  content?: unknown;
}

/**
 * An Anthropic conversation with every `tool_use.id` and `tool_result.tool_use_id` as Anthropic
 * takes it (`anthropicToolId`): an Anthropic client's history may hold ids another vendor wrote
 * (a turn answered by an OpenAI-compatible server before a fallback or a model switch, or by a
 * gateway that passed them on raw), and Anthropic refuses the whole request for one of them. The
 * rewrite is the one translated requests get, so a call and its result still name each other.
 * The same array when every id fits (Anthropic's own always do); else only the messages that
 * change are copied.
 */
export function withAnthropicToolIds<M extends MessageWithBlocks>(messages: M[]): M[] {
  let out: M[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]!.content;
    if (!Array.isArray(content) || !content.some(unsafeBlock)) continue;
    out ??= messages.slice();
    out[i] = { ...messages[i]!, content: content.map(safeBlock) };
  }
  return out ?? messages;
}

type IdBlock = { type?: unknown; id?: unknown; tool_use_id?: unknown };

function unsafeBlock(block: IdBlock | null): boolean {
  if (block === null || typeof block !== "object") return false;
  if (block.type === "tool_use") return typeof block.id === "string" && !ANTHROPIC_ID.test(block.id);
  if (block.type === "tool_result") return typeof block.tool_use_id === "string" && !ANTHROPIC_ID.test(block.tool_use_id);
  return false;
}

function safeBlock(block: IdBlock | null): unknown {
  if (!unsafeBlock(block)) return block;
  return block!.type === "tool_use" ? { ...block, id: anthropicToolId(block!.id as string) } : { ...block, tool_use_id: anthropicToolId(block!.tool_use_id as string) };
}
