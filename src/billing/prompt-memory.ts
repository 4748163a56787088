/**
 * The prompt a conversation's last answer reported the vendor held in its cache, per account,
 * model and conversation, for a few minutes. A request of the same conversation that is cancelled
 * before the vendor said how its prompt was read (an OpenAI upstream reports usage only at its
 * end; any upstream before its first byte) has its prompt estimated by the gateway; that much of it
 * is taken as read from the cache, priced as the vendor prices a read, instead of the whole
 * estimate as fresh input (7× the vendor's bill on a 95 %-cached Codex turn interrupted by its
 * user: a bill audit, 2026-11-30). Agents resend the conversation so far each turn, so the last
 * turn's cached prompt is the start of this one's.
 *
 * A recall uses the entry up: one cached turn discounts one cancelled one (recalled again and
 * again, one cached turn discounted any number of unrelated cancelled prompts; a probe). Bounded
 * per account as well as in all, so one tenant's conversations cannot push another's out (10,000
 * ordinary answers with distinct ids did; a probe). Per process, in memory only: the key holds a
 * client's conversation id (Claude Code's `metadata.user_id`, Codex's `prompt_cache_key`, …),
 * never logged.
 */
export interface PromptMemory {
  /**
   * An answer of this account's conversation reported what the vendor holds of its prompt; `start`
   * is that much of its prompt's text (its first characters, in proportion), by its hash.
   */
  remember(accountId: string, conversation: string, cachedTokens: number, at: number, start?: PromptStart): void;
  /**
   * What was last remembered for it, if within the vendors' shortest cache lifetime and the
   * prompt now (`text`) starts as the one remembered; used up either way. The conversation id is
   * the client's: an unrelated prompt sent under a cached one's id was priced as read from the
   * cache (48 % of the vendor's bill; a hostile-tenant probe).
   */
  recall(accountId: string, conversation: string, at: number, text?: string): number | undefined;
}

/** The start of a prompt the vendor holds: how many characters, and their hash. */
export interface PromptStart {
  chars: number;
  hash: bigint | number;
}

/**
 * The start of `text` that `cachedTokens` of its `inputTokens` stand for: characters in proportion
 * to tokens, nine tenths of them, so that text denser than the rest (tools' JSON) cannot carry the
 * mark past the part the next turn repeats. `text` is promptText's, in the vendors' order.
 */
export function promptStart(text: string, cachedTokens: number, inputTokens: number): PromptStart {
  const chars = inputTokens > 0 ? Math.min(text.length, Math.floor((0.9 * text.length * cachedTokens) / inputTokens)) : 0;
  return { chars, hash: Bun.hash(text.slice(0, chars)) };
}

/** Anthropic's default cache lifetime, the shortest of the vendors' (OpenAI keeps prefixes 5–10 minutes). */
export const PROMPT_MEMORY_MS = 5 * 60_000;

export function createPromptMemory(o: { ttlMs?: number; maxEntries?: number; perAccount?: number } = {}): PromptMemory {
  const ttlMs = o.ttlMs ?? PROMPT_MEMORY_MS;
  const maxEntries = o.maxEntries ?? 50_000;
  const perAccount = o.perAccount ?? 256;
  /** Each account's conversations, oldest first; and how many there are in all. */
  const accounts = new Map<string, Map<string, { tokens: number; at: number; start?: PromptStart }>>();
  let size = 0;
  /** Takes a conversation out (recalled); an account left with none leaves too. */
  const drop = (accountId: string, entries: Map<string, unknown>, conversation: string) => {
    if (entries.delete(conversation)) size--;
    if (entries.size === 0) accounts.delete(accountId);
  };
  return {
    remember(accountId, conversation, cachedTokens, at, start) {
      let entries = accounts.get(accountId);
      if (entries) {
        if (entries.delete(conversation)) size--;
        // Out, to come back in last: the account longest idle is always first.
        accounts.delete(accountId);
      } else entries = new Map();
      if (entries.size >= perAccount) {
        // An account at its bound makes room from its own oldest.
        entries.delete(entries.keys().next().value!);
        size--;
      } else if (size >= maxEntries) {
        // The whole memory at its bound: from the account longest idle.
        const first = accounts.entries().next().value;
        const [oldest, theirs] = first ?? [accountId, entries];
        theirs.delete(theirs.keys().next().value!);
        size--;
        if (theirs.size === 0 && oldest !== accountId) accounts.delete(oldest);
      }
      entries.set(conversation, { tokens: cachedTokens, at, start });
      size++;
      accounts.set(accountId, entries);
    },
    recall(accountId, conversation, at, text) {
      const entries = accounts.get(accountId);
      const entry = entries?.get(conversation);
      if (!entry) return undefined;
      drop(accountId, entries!, conversation);
      if (at - entry.at > ttlMs) return undefined;
      // A prompt that does not start as the cached one read nothing from that cache.
      if (entry.start && (text === undefined || text.length < entry.start.chars || Bun.hash(text.slice(0, entry.start.chars)) !== entry.start.hash)) return undefined;
      return entry.tokens;
    },
  };
}

/** One conversation of one model: the memory's key within an account (`\0` cannot be in an id). */
export function conversationKey(modelId: string, conversation: string): string {
  return `${modelId}\u0000${conversation}`;
}
