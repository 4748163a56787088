import type { TokenCounter } from "../../billing/token-estimate.ts";
import type { PromptSource } from "../../billing/usage-meter.ts";

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

export function measureEmbeddingsInput(input: EmbeddingsInput, count: TokenCounter): EmbeddingsInputMeasure {
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
    prompt: () => (tokens === 0 ? text : count(text).then((n) => n + tokens)),
  };
}

/**
 * Dimensions an embeddings answer is expected to have when the request names none: those of
 * `text-embedding-3-small` and `ada-002`. A larger model's answer is counted at its real size once
 * written (limits/unread-answers.ts); this only sizes what requests under way may hold.
 */
const USUAL_DIMENSIONS = 1_536;

/**
 * The bytes an embeddings answer is expected to take, written: one vector per input of the asked
 * dimensions, base64 float32 (16 bytes of text per 3 values) or JSON numbers (a float32 written in
 * full, as `-0.006929283495992422,`, is up to about 20), and each item's own fields; never more
 * than an upstream may send (`maxBytes`, limits.max_response_bytes).
 */
export function expectedEmbeddingsBytes(count: number, body: Record<string, unknown>, maxBytes: number): number {
  const dimensions = typeof body.dimensions === "number" && body.dimensions > 0 ? body.dimensions : USUAL_DIMENSIONS;
  const perValue = body.encoding_format === "base64" ? 16 / 3 : 20;
  return Math.min(maxBytes, Math.ceil(count * (dimensions * perValue + 64)));
}
