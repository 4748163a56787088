import { reportedCount, type StreamEvent } from "../../streaming/events.ts";
import type { Scrubber } from "../../log/scrub.ts";
import { vectorLength } from "./encode-embeddings.ts";
import { inputsOf } from "./embeddings-input.ts";

/**
 * Whether an upstream's embeddings answer can be handed to a client: one vector per input sent,
 * indexed 0…n−1, all of one length. Anything else is an unreadable answer (502, uncharged, the
 * next model is tried), since a client matches vectors to inputs by `index` and would silently
 * pair them wrong. Pure, so the request thread (the adapter, for small answers) and the
 * embeddings thread (large ones, embeddings-thread.ts) judge an answer by the same rules.
 */

/** Why an answer is refused: a sentence for the log, or a 200 that carries the vendor's error (its JSON, scrubbed by the caller). */
export type EmbeddingsFault = { message: string } | { vendorError: string };

/** `expected`: how many inputs the upstream was sent (undefined: not checked). */
export function embeddingsFault(body: unknown, expected: number | undefined): EmbeddingsFault | undefined {
  const b = body as { data?: unknown; error?: unknown } | null;
  if (!b || typeof b !== "object" || !Array.isArray(b.data)) {
    // Some OpenAI-compatible proxies answer 200 with an error body.
    return b?.error ? { vendorError: JSON.stringify(b.error) } : { message: "the embeddings answer has no data array" };
  }
  if (expected !== undefined && b.data.length !== expected) return { message: `the embeddings answer holds ${b.data.length} vectors for ${expected} inputs` };
  const seen = new Set<number>();
  let dimensions: number | undefined;
  for (const item of b.data as { index?: unknown; embedding?: unknown }[]) {
    const index = item?.index;
    if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= b.data.length || seen.has(index)) {
      return { message: "the embeddings answer has missing, repeated or out-of-range indexes" };
    }
    seen.add(index);
    const length = vectorLength(item.embedding);
    if (length === undefined) return { message: `the embedding at index ${index} is neither an array of numbers nor base64 float32` };
    if (dimensions !== undefined && length !== dimensions) return { message: "the embeddings answer mixes vector lengths" };
    dimensions = length;
  }
  return undefined;
}

/** A refused answer's sentence for the log; a vendor's own error is scrubbed first (it may echo a key). */
export function faultMessage(fault: EmbeddingsFault, scrub: Scrubber): string {
  return "vendorError" in fault ? `the upstream answered 200 with an error: ${scrub.logDetail(fault.vendorError)}` : fault.message;
}

/** How many inputs a request body sent upstream holds, when it is one (the adapter's `sent`). */
export function inputCountOf(sent: unknown): number | undefined {
  return sent && typeof sent === "object" ? inputsOf((sent as { input?: unknown }).input).length : undefined;
}

/** The prompt count an accepted answer reports, when it is one the meter takes (else it is estimated). */
export function reportedPromptTokens(body: unknown): number | undefined {
  return reportedCount((body as { usage?: { prompt_tokens?: unknown } | null }).usage?.prompt_tokens);
}

/** What an accepted answer means to the meter: its prompt count; an embedding produces no tokens. */
export function embeddingsEvents(promptTokens: number | undefined): StreamEvent[] {
  return [{ type: "usage", inputTokens: promptTokens, outputTokens: 0 }];
}
