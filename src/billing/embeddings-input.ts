import { countTokens } from "./token-estimate.ts";
import type { PromptSource } from "./usage-meter.ts";

/** What `input` may be, once the route's schema has checked it (OpenAI's four shapes). */
export type EmbeddingsInput = string | string[] | number[] | number[][];

/** What the plan needs to know of an embeddings request's input. */
export interface EmbeddingsInputMeasure {
  /** How many embeddings the answer must hold: one per string or token array. */
  count: number;
  /**
   * Tokens the input can hold at most, for the reservation: the UTF-8 bytes of its text (a
   * byte-level BPE token covers at least one byte) plus the token arrays' lengths, plus 4 per
   * input for servers that add markers. The charge is the upstream's count and never passes the
   * reservation, so this bound is kept strict rather than typical (embeddings bill input only).
   */
  tokenBound: number;
  /** What our tokenizer counts when the upstream reports no usage; token arrays count their length. */
  prompt: PromptSource;
}

/** One string or token array is one input; an array of strings or of token arrays is several. */
export function inputsOf(input: unknown): (string | number[])[] {
  if (typeof input === "string") return [input];
  if (!Array.isArray(input) || input.length === 0) return [];
  return typeof input[0] === "number" ? [input as number[]] : (input as (string | number[])[]);
}

export function measureEmbeddingsInput(input: EmbeddingsInput): EmbeddingsInputMeasure {
  const texts: string[] = [];
  let tokens = 0;
  let bound = 0;
  const inputs = inputsOf(input);
  for (const one of inputs) {
    if (typeof one === "string") {
      texts.push(one);
      bound += Buffer.byteLength(one) + 4;
    } else {
      tokens += one.length;
      bound += one.length + 4;
    }
  }
  // Joined with a newline: at most one token more per input than counting each alone, in one call to the worker.
  const text = texts.join("\n");
  return {
    count: inputs.length,
    tokenBound: bound,
    prompt: () => (tokens === 0 ? text : countTokens(text).then((n) => n + tokens)),
  };
}
