/**
 * Token counts for answers whose upstream reported none. The BPE tables take over a second
 * to load, so they load in the background at start and a byte-based bound stands in until then.
 */
type CountTokens = (text: string) => number;

let counter: CountTokens | undefined;
let loading: Promise<void> | undefined;

export function loadTokenizer(): Promise<void> {
  loading ??= import("gpt-tokenizer").then((m) => {
    counter = m.countTokens;
  });
  return loading;
}

export function countTokens(text: string): number {
  if (text.length === 0) return 0;
  return counter ? counter(text) : Math.ceil(Buffer.byteLength(text) / 4);
}

/**
 * A cheap bound on prompt tokens for reservations, run on every request: byte-level BPE never
 * yields more tokens than bytes, and real text averages 3–4 bytes a token, so bytes / 2 plus
 * framing per message covers code, CJK and prose without reserving 4× too much.
 */
export function promptTokenBound(textBytes: number, messages: number): number {
  return Math.ceil(textBytes / 2) + 8 * messages + 8;
}
