/**
 * The token counts of prompt slices an account had counted lately, by a hash of each slice's text.
 *
 * An agent resends its whole conversation every turn with a little more at its end, and once its
 * body passes bytes ÷ 2 + the answer limit of a model's window (Claude Code against a 200K-token
 * model: from about 380 KB, some 95K tokens, until it compacts) every turn was counted whole on the
 * tokenizer before it was sent: 100–600 ms of each turn's first token on a loaded machine for a
 * 600 KB prompt (a probe of the agent CLIs, thirty-sixth session). Slices end where the count
 * queue cuts them (`pieceEnd`, from the text's start), so an unchanged start cuts into the same
 * slices again, and only the slices past it go to the tokenizer.
 *
 * Per account, so whether a text was counted lately says nothing about another tenant's prompts,
 * and bounded per account as well as in all (the prompt memory's rule: one tenant cannot push
 * another's out). The hash is seeded per process: nobody can search for two texts that share a
 * key offline. A count is a count of that exact text, so entries never go stale; the oldest go
 * first when a bound is reached.
 */
export interface SliceCountMemory {
  /** The count remembered for `text` in `account`'s slices, if any (it then counts as recently used). */
  recall(account: string, text: string): number | undefined;
  remember(account: string, text: string, tokens: number): void;
}

export function createSliceCountMemory(o: { maxEntries?: number; perAccount?: number; seed?: bigint } = {}): SliceCountMemory {
  // 64 Ki characters a slice: 1,024 slices are 64 Mi characters, a few sessions at a million tokens.
  const perAccount = o.perAccount ?? 1024;
  const maxEntries = o.maxEntries ?? 16_384;
  const seed = o.seed ?? crypto.getRandomValues(new BigUint64Array(1))[0]!;
  /** Each account's slices, oldest first (a recall moves one to the end); accounts, longest idle first. */
  const accounts = new Map<string, Map<string, number>>();
  let size = 0;
  // The length beside the hash: two texts must share both to share a count.
  const keyOf = (text: string) => `${text.length}:${Bun.hash.wyhash(text, seed)}`;

  return {
    recall(account, text) {
      const slices = accounts.get(account);
      if (!slices) return undefined;
      const key = keyOf(text);
      const tokens = slices.get(key);
      if (tokens === undefined) return undefined;
      slices.delete(key);
      slices.set(key, tokens);
      accounts.delete(account);
      accounts.set(account, slices);
      return tokens;
    },
    remember(account, text, tokens) {
      const key = keyOf(text);
      let slices = accounts.get(account);
      if (slices) {
        if (slices.delete(key)) size--;
        accounts.delete(account);
      } else slices = new Map();
      if (slices.size >= perAccount) {
        // An account at its bound makes room from its own oldest.
        slices.delete(slices.keys().next().value!);
        size--;
      } else if (size >= maxEntries) {
        // The whole memory at its bound: from the account longest idle.
        const [oldest, theirs] = accounts.entries().next().value ?? [account, slices];
        theirs.delete(theirs.keys().next().value!);
        size--;
        if (theirs.size === 0 && oldest !== account) accounts.delete(oldest);
      }
      slices.set(key, tokens);
      size++;
      accounts.set(account, slices);
    },
  };
}
