import type { Pricing } from "./schema.ts";

/*
 * Filled in when the configuration is loaded, so every price list the ledger sees is complete:
 * these are configuration defaults, not billing rules (billing/pricing.ts prices what it is given).
 */

// ── Defaults: the vendors' published cache multipliers (README, "Prompt caching") ──

/** Anthropic: reads 0.1× input, 5-minute writes 1.25×, 1-hour writes 2×. */
const ANTHROPIC_CACHE = { read: 0.1, write5m: 1.25, write1h: 2 };

/**
 * OpenAI's cached-input discount by model family; writes cost plain input (OpenAI charges none
 * extra). Families are matched on the upstream model's name without a vendor prefix
 * (`openai/gpt-4o` on OpenRouter is gpt-4o). First match wins.
 */
const OPENAI_CACHE_READ: [RegExp, number][] = [
  [/^gpt-5/, 0.1],
  [/^(gpt-4\.1|o3(?!-mini)|o4-mini|codex-mini)/, 0.25],
  [/^(gpt-4o|o1|o3-mini)/, 0.5],
];

/** `x × price` as the vendors print it: no binary-fraction tail (0.1 × 3,000 is 300, not 300.00000000000006). */
const times = (price: number, factor: number) => Math.round(price * factor * 1e9) / 1e9;

/**
 * A model's prices with the cache prices filled in where its config leaves them out: Anthropic
 * models (by provider kind, or a `claude` name behind an OpenAI-format server) take Anthropic's
 * multipliers, OpenAI families their published cached-input price, anything else the input price.
 */
export function withCacheDefaults(pricing: Pricing, providerKind: "openai" | "anthropic", upstreamModel: string): Pricing {
  const name = familyName(upstreamModel);
  let read = 1;
  let write5m = 1;
  let write1h = 1;
  if (providerKind === "anthropic" || name.startsWith("claude")) ({ read, write5m, write1h } = ANTHROPIC_CACHE);
  else read = OPENAI_CACHE_READ.find(([family]) => family.test(name))?.[1] ?? 1;
  const filled = <P extends { input_per_mtok: number; cache_read_per_mtok?: number; cache_write_per_mtok?: number; cache_write_1h_per_mtok?: number }>(p: P): P => ({
    ...p,
    cache_read_per_mtok: p.cache_read_per_mtok ?? times(p.input_per_mtok, read),
    cache_write_per_mtok: p.cache_write_per_mtok ?? times(p.input_per_mtok, write5m),
    cache_write_1h_per_mtok: p.cache_write_1h_per_mtok ?? times(p.input_per_mtok, write1h),
  });
  return pricing.long_context ? { ...filled(pricing), long_context: filled(pricing.long_context) } : filled(pricing);
}

/**
 * The model's family name: without a vendor path (`openai/gpt-4o` on OpenRouter), a fine-tune's
 * `ft:` (`ft:gpt-4o-mini-2024-07-18:org::id` is billed as its base), or a cloud's dotted vendor
 * prefix (Bedrock's `anthropic.claude-…`, `us.anthropic.claude-…`). Lowercase.
 */
export function familyName(upstreamModel: string): string {
  const name = upstreamModel.slice(upstreamModel.lastIndexOf("/") + 1).toLowerCase().replace(/^ft:/, "");
  const vendor = /^(?:[a-z]{2,6}\.)?(?:anthropic|openai)\./.exec(name);
  return vendor ? name.slice(vendor[0].length) : name;
}
