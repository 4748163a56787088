import type { UpstreamKind } from "../formats/common/wire-types.ts";

/** Longest session id read; longer ones are cut before hashing (they still tell sessions apart). */
const MAX_SESSION_ID = 512;

/**
 * The client's session, so its requests reach the vendor key whose prompt cache holds its prefix.
 * Read in this order: the Anthropic `metadata.user_id` (Claude Code puts its session there); the
 * OpenAI `prompt_cache_key`, else `user`; the Responses `previous_response_id` chain (`chain`:
 * the id of its first answer, given by the route); an `x-session-id` header. Undefined when the
 * request names none. The caller hashes it before it is stored anywhere. `conversationOnly`:
 * without OpenAI's `user`, which names a person, not a conversation.
 */
export function sessionIdOf(format: UpstreamKind, body: Record<string, unknown>, headers: Headers, chain?: string, conversationOnly = false): string | undefined {
  if (format === "anthropic") {
    const metadata = body.metadata as { user_id?: unknown } | null | undefined;
    const id = text(metadata?.user_id);
    if (id) return id;
  } else {
    // `user` names an end user, whose conversations differ: good enough to keep one on a vendor
    // key, not to say which prompt came before (`conversationOnly`, billing/prompt-memory.ts).
    const id = text(body.prompt_cache_key) ?? (conversationOnly ? undefined : text(body.user));
    if (id) return id;
  }
  if (chain) return chain;
  const header = text(headers.get("x-session-id"));
  return header;
}

function text(value: unknown): string | undefined {
  if (typeof value !== "string" || value === "") return undefined;
  return value.length > MAX_SESSION_ID ? value.slice(0, MAX_SESSION_ID) : value;
}
