/**
 * The tokenizer's thread (see token-estimate.ts): loads the BPE tables once, then answers
 * `{ id, text }` with `{ id, count }`. Its heap holds the tables, so the request thread's does not.
 */
import { countTokens } from "gpt-tokenizer";
import { pieceEnd } from "./token-estimate.ts";

declare const self: Worker;

/**
 * BPE merges within one pre-tokenised "word" cost more than linear time, and a megabyte
 * without a space is one word: text is counted in slices, so the cost stays linear. A slice ends
 * before the last space of its second half, where the tokenizer starts a word anyway (` word` is
 * one token), so prose is counted as a whole; a run without spaces is cut where it must be, and a
 * cut may split a token (one extra per slice, which an estimate can carry). 512 characters, not
 * 2,048: a run of punctuation costs the square of its length, and was counted at under 1 MB a
 * second (a hostile tenant's 9.9 MB prompt held the thread for a minute); prose is as fast.
 */
const SLICE = 512;

function count(text: string): number {
  if (text.length <= SLICE) return countTokens(text);
  let total = 0;
  for (let i = 0; i < text.length; ) {
    const end = pieceEnd(text, i, SLICE);
    total += countTokens(text.slice(i, end));
    i = end;
  }
  return total;
}

self.onmessage = (event: MessageEvent<{ id: number; text: string }>) => {
  const { id, text } = event.data;
  self.postMessage({ id, count: count(text) });
};

// The first count loads the tables: done now, before any request needs them.
count("warm");
