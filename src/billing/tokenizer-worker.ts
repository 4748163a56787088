/**
 * The tokenizer's thread (see token-estimate.ts): loads the BPE tables once, then answers
 * `{ id, text }` with `{ id, count }`. Its heap holds the tables, so the request thread's does not.
 */
import { countTokens } from "gpt-tokenizer";

declare const self: Worker;

/**
 * BPE merges within one pre-tokenised "word" cost more than linear time, and a megabyte
 * without a space is one word: text is counted in slices, so the cost stays linear. A cut can
 * split a token: at most one extra token per slice, which an estimate can carry.
 */
const SLICE = 2048;

function count(text: string): number {
  if (text.length <= SLICE) return countTokens(text);
  let total = 0;
  for (let i = 0; i < text.length; i += SLICE) total += countTokens(text.slice(i, i + SLICE));
  return total;
}

self.onmessage = (event: MessageEvent<{ id: number; text: string }>) => {
  const { id, text } = event.data;
  self.postMessage({ id, count: count(text) });
};

// The first count loads the tables: done now, before any request needs them.
count("warm");
