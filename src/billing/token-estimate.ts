/**
 * Token counts for answers whose upstream reported none. The BPE tables take over a second
 * to load, so the app starts loading them at once and the rare request that needs them first waits.
 */
type CountTokens = (text: string) => number;

let loading: Promise<CountTokens> | undefined;

export function loadTokenizer(): Promise<CountTokens> {
  loading ??= import("gpt-tokenizer").then((m) => m.countTokens);
  return loading;
}

/**
 * BPE merges within one pre-tokenised "word" cost more than linear time, and a megabyte
 * without a space is one word: text is counted in slices, so the cost stays linear and a
 * hostile prompt cannot stall the event loop. A cut can split a token: at most one extra
 * token per slice, which an estimate can carry.
 */
const SLICE = 2048;

export async function countTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  const count = await loadTokenizer();
  if (text.length <= SLICE) return count(text);
  let total = 0;
  for (let i = 0; i < text.length; i += SLICE) total += count(text.slice(i, i + SLICE));
  return total;
}

/**
 * A cheap bound on prompt tokens for reservations, run on every request: byte-level BPE never
 * yields more tokens than bytes, and real text averages 3–4 bytes a token, so bytes / 2 plus
 * framing per message covers code, CJK and prose without reserving 4× too much.
 */
export function promptTokenBound(textBytes: number, messages: number): number {
  return Math.ceil(textBytes / 2) + 8 * messages + 8;
}
