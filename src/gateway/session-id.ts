import type { WireFormat } from "../translate/wire-types.ts";

/** Longest session id read; longer ones are cut before hashing (they still tell sessions apart). */
const MAX_SESSION_ID = 512;

/**
 * The client's session, so its requests reach the vendor key whose prompt cache holds its prefix.
 * Read in this order: the Anthropic `metadata.user_id` (Claude Code puts its session there); the
 * OpenAI `prompt_cache_key`, else `user`; the Responses `previous_response_id` chain (`chain`:
 * the id of its first answer, given by the route); an `x-session-id` header. Undefined when the
 * request names none. The caller hashes it before it is stored anywhere.
 */
export function sessionIdOf(format: WireFormat, body: Record<string, unknown>, headers: Headers, chain?: string): string | undefined {
  if (format === "anthropic") {
    const metadata = body.metadata as { user_id?: unknown } | null | undefined;
    const id = text(metadata?.user_id);
    if (id) return id;
  } else {
    const id = text(body.prompt_cache_key) ?? text(body.user);
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
