/**
 * The prompt a conversation's last answer reported, per account, model and conversation, for a
 * few minutes: what the vendor then holds in its prompt cache. A request of the same conversation
 * that is cancelled before the vendor said how its prompt was read (an OpenAI upstream reports
 * usage only at its end; any upstream before its first byte) has its prompt estimated by the
 * gateway; that much of it is taken as read from the cache, priced as the vendor prices a read,
 * instead of the whole estimate as fresh input (7× the vendor's bill on a 95 %-cached Codex turn
 * interrupted by its user: a bill audit, 2026-11-30). Agents resend the conversation so far each
 * turn, so the last answer's prompt is the start of this one's.
 *
 * Per process, bounded (least recently stored go first), in memory only: the key holds a client's
 * conversation id (Claude Code's `metadata.user_id`, Codex's `prompt_cache_key`, …), never logged.
 */
export interface PromptMemory {
  /** An answer of this conversation reported its whole prompt (cache parts included). */
  remember(conversation: string, promptTokens: number, at: number): void;
  /** The prompt last reported for this conversation, if within the vendors' shortest cache lifetime. */
  recall(conversation: string, at: number): number | undefined;
}

/** Anthropic's default cache lifetime, the shortest of the vendors' (OpenAI keeps prefixes 5–10 minutes). */
export const PROMPT_MEMORY_MS = 5 * 60_000;

export function createPromptMemory(o: { ttlMs?: number; maxEntries?: number } = {}): PromptMemory {
  const ttlMs = o.ttlMs ?? PROMPT_MEMORY_MS;
  const maxEntries = o.maxEntries ?? 10_000;
  const entries = new Map<string, { tokens: number; at: number }>();
  return {
    remember(conversation, promptTokens, at) {
      entries.delete(conversation);
      if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!);
      entries.set(conversation, { tokens: promptTokens, at });
    },
    recall(conversation, at) {
      const entry = entries.get(conversation);
      if (!entry) return undefined;
      if (at - entry.at > ttlMs) {
        entries.delete(conversation);
        return undefined;
      }
      return entry.tokens;
    },
  };
}

/** One conversation of one account on one model: the memory's key (`\0` cannot be in an id). */
export function conversationKey(accountId: string, modelId: string, conversation: string): string {
  return `${accountId}\u0000${modelId}\u0000${conversation}`;
}
