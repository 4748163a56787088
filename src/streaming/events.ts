/**
 * The one internal vocabulary every upstream decodes into and every client encoder reads.
 * Adding a provider means writing a decoder to this union; adding a client format means
 * writing one encoder from it. Nothing else in the stream path knows vendor shapes.
 */

/** Why the model stopped, in our own words; encoders map these to each wire format. */
/**
 * `refusal`: the model declined (Anthropic's stop reason); `content_filter`: the vendor's filter
 * stopped the answer (OpenAI's). Apart because Responses clients read them apart: a filter leaves
 * the answer incomplete (Codex sends the request again, five times), a refusal is a completed answer.
 */
export type FinishReason = "stop" | "stop_sequence" | "length" | "tool_calls" | "content_filter" | "refusal";

export type StreamEvent =
  /** Upstream acknowledged the request; ids are informational, encoders mint their own. */
  | { type: "start"; inputTokens?: number }
  | { type: "text"; text: string }
  /**
   * What the model said instead of an answer (OpenAI's `message.refusal` / `delta.refusal`, with
   * `content` null): apart from text because OpenAI's formats give it a place of its own, which
   * their SDKs read (`responses.parse` leaves a refusal unparsed, and parsed as JSON it throws).
   * Formats without one show it as the answer's text.
   */
  | { type: "refusal"; text: string }
  /**
   * Reasoning text ("thinking"); clients of a format without it never see it. `signature` is
   * Anthropic's seal on the thinking block so far (it ends that block): only Anthropic clients
   * get it, since only Anthropic can read it back.
   */
  | { type: "reasoning"; text: string; signature?: string }
  /** Anthropic's encrypted thinking (`redacted_thinking`): opaque, for Anthropic clients only. */
  | { type: "redacted-reasoning"; data: string }
  /**
   * A tool call begins (`id`/`name` set) or continues (`argumentsDelta` only).
   * `index` counts tool calls from 0 within one answer, whatever the upstream numbers them.
   */
  | { type: "tool-call"; index: number; id?: string; name?: string; argumentsDelta: string }
  /**
   * A generated image. `url` is a data: URI once the pipeline has inlined it (decoders may
   * emit the provider's https URL); clients receive it as a markdown image in the answer text.
   */
  | { type: "image"; url: string }
  /**
   * Cumulative counts as reported by the upstream so far; later reports override earlier ones.
   * `inputTokens` is the whole prompt: fresh input plus `cacheReadTokens` plus `cacheWriteTokens`
   * (each vendor's own split is undone by its decoder and redone by each encoder).
   * `cacheWrite1hTokens` is the part of the writes cached long: for an hour (Anthropic's
   * `ephemeral_1h_input_tokens`) or 12 hours (OpenAI's writes in a `prompt_cache_retention: "12h"`
   * answer); the rest are 5-minute (OpenAI: 30-minute) writes. `reasoningTokens` is the part of
   * `outputTokens` spent reasoning: shown to clients, never billed apart (output tokens hold it).
   * A later report's tier or geography replaces an earlier one's, as its counts do.
   */
  | {
      type: "usage"; inputTokens?: number; outputTokens?: number; cacheReadTokens?: number; cacheWriteTokens?: number; cacheWrite1hTokens?: number; reasoningTokens?: number;
      /** Priced apart from the token counts (config/price-rules.ts): OpenAI's `service_tier` the answer ran at, Anthropic's `inference_geo`. */
      serviceTier?: string; inferenceGeo?: string;
    }
  | { type: "finish"; reason: FinishReason; stopSequence?: string }
  | {
      type: "error"; message: string; errorType: ErrorKind;
      /**
       * The vendor's own words (scrubbed) behind an overload the message says in the gateway's:
       * never written to the client (they name the operator's organisation), read by the key pool
       * to tell a rate limit about the request's own size from one about the key (forward.ts).
       */
      said?: string;
    };

/** Largest token count taken from an upstream's usage; anything above is treated as missing. */
export const MAX_REPORTED_TOKENS = 100_000_000;

/**
 * A count an upstream reported, or undefined when it is not a usable one (missing, a string,
 * negative, fractional, absurd). Undefined makes the meter estimate with our tokenizer, so a
 * broken usage object is billed by count, never crashes a batch, never charges a negative.
 */
export function reportedCount(value: unknown): number | undefined {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= MAX_REPORTED_TOKENS ? value : undefined;
}

/**
 * Whether a usage object's field holds a count (`input_tokens`, `cached_tokens`,
 * `web_search_requests`…). Others are the vendor's own (a `service_tier`, a reseller's fractional
 * `cost`) and are left as they are.
 */
const isCountName = (name: string) => name.includes("tokens") || name.includes("requests");

/** A usage field's value the meter refuses: a count field holding what `reportedCount` does not take. */
function refusedCount(name: string, value: unknown): boolean {
  // The usual case, told apart without a look at the name: a whole count in range.
  if (reportedCount(value) !== undefined) return false;
  return value !== null && value !== undefined && isCountName(name);
}

/**
 * Whether a vendor's usage object (either format, with its nested details) holds a count the
 * meter refuses: a count field whose value `reportedCount` does not take (negative, fractional,
 * absurd, a string). Such an object is never shown to a client as it came: the bill used other
 * counts. Runs on every whole answer relayed in its own format.
 */
export function hasRefusedCount(usage: unknown): boolean {
  if (usage === null || typeof usage !== "object") return false;
  const fields = usage as Record<string, unknown>;
  if (refusedPrompt(fields)) return true;
  for (const name of Object.keys(fields)) {
    const value = fields[name];
    if (value !== null && typeof value === "object" ? hasRefusedCount(value) : refusedCount(name, value)) return true;
  }
  return false;
}

/**
 * Anthropic's prompt in parts (`input_tokens` beside the cache reads and writes) of which a count
 * is refused, or whose sum is past what the meter takes: the meter estimates the prompt whole, so
 * none of the parts is shown as it came.
 */
const PROMPT_PARTS = ["input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"] as const;
function refusedPrompt(fields: Record<string, unknown>): boolean {
  const input = fields.input_tokens;
  if (input === null || input === undefined || (fields.cache_read_input_tokens == null && fields.cache_creation_input_tokens == null)) return false;
  // The input alone refused: the prompt is estimated whole, so its cache parts go too.
  if (reportedCount(input) === undefined) return true;
  let sum = 0;
  for (const name of PROMPT_PARTS) {
    const value = fields[name];
    if (value === null || value === undefined) continue;
    const count = reportedCount(value);
    // A cache part refused: the prompt's size is unknown, and it is estimated whole (anthropic-adapter.ts, usageEvent).
    if (count === undefined) return true;
    sum += count;
  }
  return reportedCount(sum) === undefined;
}

/** Removes, in place, every refused count `hasRefusedCount` finds. */
export function dropRefusedCounts(usage: Record<string, unknown>): void {
  if (refusedPrompt(usage)) {
    for (const name of PROMPT_PARTS) delete usage[name];
    delete usage.cache_creation;
  }
  for (const name of Object.keys(usage)) {
    const value = usage[name];
    if (value !== null && typeof value === "object") dropRefusedCounts(value as Record<string, unknown>);
    else if (refusedCount(name, value)) delete usage[name];
  }
}

/** Error categories shared by both client formats; encoders map them to wire `type` strings. */
export type ErrorKind =
  | "invalid_request"
  | "authentication"
  | "permission"
  | "not_found"
  | "request_too_large"
  | "insufficient_credits"
  | "rate_limit"
  | "upstream"
  | "overloaded"
  | "timeout"
  | "internal";

/** How an image travels in answer text (spec 2.9): a markdown image whose target is the data URI. */
export function imageMarkdown(url: string, afterText: boolean): string {
  return `${afterText ? "\n\n" : ""}![image](${url})`;
}
