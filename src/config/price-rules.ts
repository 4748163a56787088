import type { ModelConfig } from "./schema.ts";
import { familyName } from "./cache-prices.ts";

/**
 * What scales an answer's whole price list (every token class) beside its counts, from what the
 * upstream reported the answer ran at. The vendors bill these, and the price book's lists are their
 * standard prices (a bill audit, 2026-11-30):
 * - OpenAI's Flex processing (`service_tier: "flex"` in the answer): half the standard price. A
 *   client asking for it was passed on and charged the standard price, twice the vendor's bill.
 *   Only from OpenAI's own API: other servers' tiers are priced as they price them (Groq's `flex`
 *   costs what its standard does).
 * - Anthropic's US-only inference (`usage.inference_geo: "us"`), on models released after
 *   1 February 2026 (Claude 4.6 and later): 1.1×, asked for per request or set for the whole
 *   organisation, so it is read from the answer, not the request.
 * Which applies to a model is worked out once, when the config is loaded (`notePriceRules`), not
 * per request. Pure otherwise.
 */
export interface PriceRules {
  /** The model is OpenAI's, served by OpenAI's own API: a flex answer costs half. */
  flex: boolean;
  /** A Claude 4.6 or later: an answer run in the US costs 1.1×. */
  usOnly: boolean;
}

const NONE: PriceRules = { flex: false, usOnly: false };
const RULES = new WeakMap<ModelConfig, PriceRules>();

/** Records which rules apply to a configured model (config/load-config.ts), from its upstream name and its provider. */
export function notePriceRules(model: ModelConfig, provider: { base_url: string; openai_tiers?: boolean }): void {
  const name = familyName(model.upstream_model);
  const flex = OPENAI_FAMILY.test(name) && hasOpenAITiers(provider);
  const usOnly = US_PRICED_CLAUDE.test(name);
  RULES.set(model, flex || usOnly ? { flex, usOnly } : NONE);
}

/** The factor for an answer of `model` that reported this tier and geography (1 when none applies). */
export function priceFactor(model: ModelConfig, reported: { serviceTier?: string; inferenceGeo?: string }): number {
  const rules = RULES.get(model);
  if (rules === undefined || rules === NONE) return 1;
  if (rules.flex && reported.serviceTier === "flex") return FLEX;
  if (rules.usOnly && reported.inferenceGeo === "us") return US_ONLY;
  return 1;
}

/** The most `model`'s answers may be scaled by (a hold covers it). */
export function maxPriceFactor(model: ModelConfig): number {
  return RULES.get(model)?.usOnly ? US_ONLY : 1;
}

/** Whether a provider is OpenAI's own API, whose tiers are the ones the factors price: its `openai_tiers`, else its base URL's host. */
export function hasOpenAITiers(provider: { base_url: string; openai_tiers?: boolean }): boolean {
  if (provider.openai_tiers !== undefined) return provider.openai_tiers;
  try {
    // Its data-residency hosts too (`eu.api.openai.com`): the same tiers, and a flex answer there
    // was charged in full (a bill audit).
    const host = new URL(provider.base_url).hostname.toLowerCase();
    return host === "api.openai.com" || host.endsWith(".api.openai.com");
  } catch {
    return false;
  }
}

const FLEX = 0.5;
const US_ONLY = 1.1;
/** OpenAI's families: gpt-…, chatgpt-…, o1/o3/o4…, codex-…. */
const OPENAI_FAMILY = /^(?:gpt-|chatgpt-|o\d|codex-)/;
/** Claude 4.6 and later (claude-opus-4-6, claude-sonnet-4-10, claude-sonnet-5 …); not 4.5 or the claude-3-… names. */
const US_PRICED_CLAUDE = /^claude-[a-z]+-(?:4-(?:[6-9]|[1-9]\d)|(?:[5-9]|[1-9]\d))(?!\d)/;
