/**
 * Anthropic's signed thinking, carried through a client that speaks the Responses API. Anthropic
 * refuses thinking on a turn that continues tool calls unless that turn's assistant message starts
 * with the thinking block it was made with, signed; a Responses client (Codex) keeps the
 * reasoning it is given as an opaque `encrypted_content` and sends it back on the next request
 * (`include: ["reasoning.encrypted_content"]`, `store: false`). Without a place for the blocks,
 * Codex on an Anthropic upstream thought on a task's first request only (a probe of the agent
 * CLIs, 2026-11-30). The blocks go out sealed in that field and come back to the assistant
 * message they belong to (a symbol-keyed property: never serialised, so no other upstream sees it).
 *
 * Sealed is not secret: the field is the blocks as JSON in base64url. The thinking text is what
 * the answer already showed, and the signature is Anthropic's, which it checks: a client that
 * changes a block has its own request refused, nobody else's.
 */

/** A thinking block as Anthropic writes it (signed) or hides it (redacted). */
export type CarriedBlock = { type: "thinking"; thinking: string; signature: string } | { type: "redacted_thinking"; data: string };

/** Marks the field as ours: another vendor's encrypted content is not read. */
const PREFIX = "swy-thinking-1.";
/** Blocks per item, and the field's length, at most (a turn thinks in a few blocks). */
const MAX_BLOCKS = 64;
const MAX_SEALED = 4 * 1024 * 1024;

/** The property of a chat assistant message that holds the blocks it started with (openai-to-anthropic.ts reads it). */
export const CARRIED_THINKING: unique symbol = Symbol("carried thinking");

/**
 * The property of a chat assistant message that holds the reasoning text it was made with, read
 * from a Responses client's reasoning items (their summary is the text the gateway gave them): a
 * model that wants it back (model-traits.ts, `reasoningHistory`) gets it as `reasoning_content`
 * (prepare-upstream.ts). A symbol-keyed property, so no other upstream sees it.
 */
export const CARRIED_REASONING: unique symbol = Symbol("carried reasoning");

/**
 * The property of a chat request that holds a Responses client's `reasoning.context` (Codex sends
 * `"all_turns"` for GPT-6 models: the reasoning items of earlier turns stay in the model's
 * context). Chat completions and Anthropic have no such field, so only a Responses upstream gets
 * it (chat-to-responses.ts); a symbol-keyed property, so no other upstream sees it.
 */
export const REASONING_CONTEXT: unique symbol = Symbol("reasoning context");

/** The blocks as a Responses reasoning item's `encrypted_content`. */
export function sealThinking(blocks: readonly CarriedBlock[]): string {
  return PREFIX + Buffer.from(JSON.stringify(blocks)).toString("base64url");
}

/** The blocks a sealed field holds; undefined for anything else (another vendor's content, a field altered out of shape). */
export function openThinking(sealed: unknown): CarriedBlock[] | undefined {
  if (typeof sealed !== "string" || !sealed.startsWith(PREFIX) || sealed.length > MAX_SEALED) return undefined;
  let blocks: unknown;
  try {
    blocks = JSON.parse(Buffer.from(sealed.slice(PREFIX.length), "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  if (!Array.isArray(blocks) || blocks.length === 0 || blocks.length > MAX_BLOCKS) return undefined;
  const out: CarriedBlock[] = [];
  for (const b of blocks as Record<string, unknown>[]) {
    if (b?.type === "thinking" && typeof b.thinking === "string" && typeof b.signature === "string" && b.signature !== "") out.push({ type: "thinking", thinking: b.thinking, signature: b.signature });
    else if (b?.type === "redacted_thinking" && typeof b.data === "string" && b.data !== "") out.push({ type: "redacted_thinking", data: b.data });
    else return undefined;
  }
  return out;
}

/**
 * OpenAI's reasoning, carried the same way. A Responses upstream (`upstream_api: "responses"`)
 * answers with reasoning items whose `encrypted_content` (asked for with `store: false`) must come
 * back on the next turn for the model to go on from its own reasoning, through a tool loop too.
 * The decoder gives it as the reasoning's `signature` with this mark, so it travels wherever
 * Anthropic's signatures travel: in a Claude client's thinking block, in the sealed blocks of a
 * Responses client's reasoning item, in a stored answer. Only an OpenAI Responses upstream reads
 * it back (chat-to-responses.ts); Anthropic would refuse it as a signature, so it is never sent
 * there (prepare-upstream.ts, openai-to-anthropic.ts).
 */
const OPENAI_REASONING = "swy-openai-rs-1.";

/** The signature that carries OpenAI's encrypted reasoning. */
export function openaiReasoningSignature(encrypted: string): string {
  return OPENAI_REASONING + encrypted;
}

/** OpenAI's encrypted reasoning a signature carries, or undefined when it is another vendor's (Anthropic's own). */
export function openaiEncryptedReasoning(signature: unknown): string | undefined {
  return typeof signature === "string" && signature.startsWith(OPENAI_REASONING) && signature.length > OPENAI_REASONING.length ? signature.slice(OPENAI_REASONING.length) : undefined;
}
