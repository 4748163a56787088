import { familyName } from "../config/cache-prices.ts";

/**
 * What scales an answer's whole price list (every token class) beside its counts, from what the
 * upstream reported the answer ran at. The vendors bill these, and the price book's lists are their
 * standard prices (a bill audit, 2026-11-30):
 * - OpenAI's Flex processing (`service_tier: "flex"` in the answer): half the standard price. A
 *   client asking for it was passed on and charged the standard price, twice the vendor's bill.
 *   Only for OpenAI's own model families: other servers' tiers are priced as they price them.
 * - Anthropic's US-only inference (`usage.inference_geo: "us"`), on models released after
 *   1 February 2026 (Claude 4.6 and later): 1.1×, asked for per request or set for the whole
 *   organisation, so it is read from the answer, not the request.
 * 1 otherwise. Pure.
 */
export function priceFactor(upstreamModel: string, reported: { serviceTier?: string; inferenceGeo?: string }): number {
  if (reported.serviceTier === undefined && reported.inferenceGeo === undefined) return 1;
  const name = familyName(upstreamModel);
  if (reported.serviceTier === "flex" && OPENAI_FAMILY.test(name)) return FLEX;
  if (reported.inferenceGeo === "us" && US_PRICED_CLAUDE.test(name)) return US_ONLY;
  return 1;
}

/** The most a model's answers may be scaled by (a hold covers it): US-only inference on the Claude models it applies to. */
export function maxPriceFactor(upstreamModel: string): number {
  return US_PRICED_CLAUDE.test(familyName(upstreamModel)) ? US_ONLY : 1;
}

const FLEX = 0.5;
const US_ONLY = 1.1;
/** OpenAI's families: gpt-…, chatgpt-…, o1/o3/o4…, codex-…. */
const OPENAI_FAMILY = /^(?:gpt-|chatgpt-|o\d|codex-)/;
/** Claude 4.6 and later (claude-opus-4-6, claude-sonnet-4-10, claude-sonnet-5 …); not 4.5 or the claude-3-… names. */
const US_PRICED_CLAUDE = /^claude-[a-z]+-(?:4-(?:[6-9]|[1-9]\d)|(?:[5-9]|[1-9]\d))(?!\d)/;
