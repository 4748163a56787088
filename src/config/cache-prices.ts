import type { Pricing } from "./schema.ts";

/*
 * Filled in when the configuration is loaded, so every price list the ledger sees is complete:
 * these are configuration defaults, not billing rules (billing/pricing.ts prices what it is given).
 */

// ── Defaults: the vendors' published cache multipliers (README, "Prompt caching") ──

/** Anthropic: reads 0.1× input, 5-minute writes 1.25×, 1-hour writes 2×. */
const ANTHROPIC_CACHE = { read: 0.1, write5m: 1.25, write1h: 2 };
/**
 * Claude 3 Haiku, priced otherwise: $0.25 input, $0.30 5-minute writes, $0.50 1-hour writes, $0.03
 * reads (Anthropic's price table; its 1-hour writes were charged as 5-minute ones, 60 % of the bill).
 */
const CLAUDE_3_HAIKU_CACHE = { read: 0.12, write5m: 1.2, write1h: 2 };

/**
 * Claude models whose cache reads cost less than 0.1× input (Anthropic's price table): Fable 5.1 and
 * Mythos 5.1 $0.25 of $10 (0.025×); Opus 5.5 $0.20 of $4 and Sonnet 5.5 $0.10 of $2 since
 * 7 October 2026 (0.05×). Charged at 0.1×, their reads cost 2× and 4× the vendor's bill (a bill
 * audit, 2026-11-30, second round). First match wins; writes keep Anthropic's multipliers.
 */
const CLAUDE_CACHE_READ: [RegExp, number][] = [
  [/^claude-(?:fable|mythos)-5-1(?!\d)/, 0.025],
  [/^claude-(?:opus|sonnet)-5-5(?!\d)/, 0.05],
];

/**
 * OpenAI's cached-input discount by model family; writes cost plain input (OpenAI charges none
 * extra). Families are matched on the upstream model's name without a vendor prefix
 * (`openai/gpt-4o` on OpenRouter is gpt-4o). First match wins.
 */
const OPENAI_CACHE_READ: [RegExp, number][] = [
  // GPT-6.1 Sol: $0.10 of $2 (its model page; GPT-6 Sol's is $0.20). Charged 0.1×, a Codex turn's
  // reads, most of its prompt, cost twice the vendor's price.
  [/^gpt-6\.1-sol(?![a-z\d])/, 0.05],
  // GPT-5 and every later family (gpt-5.6, gpt-6 …): a tenth of input.
  [/^gpt-(?:[5-9]|[1-9]\d)(?!\d)/, 0.1],
  [/^(gpt-4\.1|o3(?!-mini)|o4-mini|codex-mini)/, 0.25],
  [/^(gpt-4o|gpt-4\.5|o1|o3-mini)/, 0.5],
];

/**
 * OpenAI families whose cache writes cost more than plain input: GPT-5.6 and later bill them at
 * 1.25× input, reported as `cache_write_tokens` (OpenAI's prompt-caching guide), and the 12-hour
 * writes of a Responses request with `prompt_cache_retention: "12h"` at 2.5× (the same guide;
 * GPT-6.2 Sol's model page: "a 12-hour cache write costs $5" of $2 input). The 12-hour writes are
 * the price list's long-lived writes, Anthropic's 1-hour ones' class (openai-responses-adapter.ts).
 * `gpt-5.6`, `gpt-5.10`, `gpt-6…`; not `gpt-5`, `gpt-5.1` … `gpt-5.5` or `gpt-5-mini`.
 */
const OPENAI_CACHE_WRITE: [RegExp, { write5m: number; write1h: number }][] = [[/^gpt-(?:5\.(?:[6-9]|[1-9]\d)|[6-9]|[1-9]\d)(?!\d)/, { write5m: 1.25, write1h: 2.5 }]];

/**
 * Long-context prices by family: above `aboveTokens` prompt tokens (fresh input, cache reads and
 * writes together) the vendor bills the whole answer at `input`× input and `output`× output, cache
 * prices by the same multipliers. A model configured with a window past the threshold and no
 * `pricing.long_context` takes its family's; first match wins, by name on any provider (other
 * vendors' models behind an Anthropic-format API, Kimi's or MiniMax's, have long windows and no such
 * prices; `openai/gpt-5.5` on OpenRouter is billed as OpenAI bills it).
 * - Claude Sonnet 4 and 4.5 with the `context-1m` beta: above 200,000 tokens, 2× and 1.5× (47 %
 *   under the vendor's bill on a 260,000-token Claude Code turn when missing, a bill audit, 2026-11-30).
 *   Not Claude 4.6 and later: their 1M window is billed at the standard price throughout (since
 *   13 March 2026), and a `claude-opus-4-6` configured with its 1M window was charged 2× input and
 *   1.5× output above 200,000 tokens (a bill audit, 2026-11-30, second round).
 * - Claude Haiku 5.5: above 100,000 tokens, 5× input and output ($0.10 / $0.50 → $0.50 / $2.50).
 * - OpenAI's GPT-5.4 and later (their 1.05M windows; not the 400K mini and nano): above 272,000
 *   tokens, 2× input (cached input too) and 1.5× output "for the full request" (OpenAI's model
 *   pages). Without it a 300,000-token Codex turn on `gpt-5.5` configured with its window was
 *   charged the standard prices, 51 % of the vendor's bill (a bill audit, 2026-11-30, second round).
 */
const LONG_CONTEXT: { family: RegExp; aboveTokens: number; input: number; output: number }[] = [
  // claude-sonnet-4, -4-0, -4-20250514, -4-5, -4-5-20250929, -4-5@20250929 …; not -4-6, -4-10.
  { family: /^claude-sonnet-4(?:-0|-5)?(?:$|[^-\d]|-\d{8}|-(?!\d))/, aboveTokens: 200_000, input: 2, output: 1.5 },
  { family: /^claude-haiku-5-5(?!\d)/, aboveTokens: 100_000, input: 5, output: 5 },
  // gpt-5.4, gpt-5.4-pro, gpt-5.5, gpt-5.6-sol/-terra/-luna, gpt-5.10, gpt-6 …; not gpt-5.4-mini/-nano, gpt-5.3 or earlier.
  { family: /^gpt-(?:5\.(?:[4-9]|[1-9]\d)|[6-9]|[1-9]\d)(?!\d)(?!.*-(?:mini|nano)(?![a-z]))/, aboveTokens: 272_000, input: 2, output: 1.5 },
];

/** `x × price` as the vendors print it: no binary-fraction tail (0.1 × 3,000 is 300, not 300.00000000000006). */
export const times = (price: number, factor: number) => Math.round(price * factor * 1e9) / 1e9;

/**
 * A model's prices with the cache prices filled in where its config leaves them out: Anthropic
 * models (by provider kind, or a `claude` name behind an OpenAI-format server) take Anthropic's
 * multipliers, OpenAI families their published cached-input (and, from GPT-5.6, cache-write
 * and 12-hour cache-write) price, anything else the input price. A model of a family billed above a threshold
 * (LONG_CONTEXT) whose `contextLength` is past it also takes those prices unless it has its own.
 */
export function withCacheDefaults(pricing: Pricing, providerKind: "openai" | "anthropic", upstreamModel: string, contextLength = 0): Pricing {
  const family = familyName(upstreamModel);
  let read = 1;
  let write5m = 1;
  let write1h = 1;
  const claude = providerKind === "anthropic" || family.startsWith("claude");
  // OpenRouter's dotted Claude versions (`anthropic/claude-sonnet-4.6`) spelled as Anthropic's ids
  // (`claude-sonnet-4-6`), which the rules below name: read as written, Sonnet 4.6 took Sonnet 4.5's
  // long-context prices and Sonnet 5.5 missed its cheaper reads (model-traits.ts reads both spellings).
  const name = claude ? family.replace(/(?<=^claude-[a-z0-9-]*\d)\.(?=\d)/g, "-") : family;
  if (claude) {
    ({ read, write5m, write1h } = name.startsWith("claude-3-haiku") ? CLAUDE_3_HAIKU_CACHE : ANTHROPIC_CACHE);
    read = CLAUDE_CACHE_READ.find(([family]) => family.test(name))?.[1] ?? read;
  }
  else {
    read = OPENAI_CACHE_READ.find(([family]) => family.test(name))?.[1] ?? 1;
    ({ write5m, write1h } = OPENAI_CACHE_WRITE.find(([family]) => family.test(name))?.[1] ?? { write5m: 1, write1h: 1 });
  }
  const long = pricing.long_context ? undefined : LONG_CONTEXT.find((rule) => rule.family.test(name));
  if (long && contextLength > long.aboveTokens) {
    const { aboveTokens, input, output } = long;
    pricing = { ...pricing, long_context: { above_tokens: aboveTokens, input_per_mtok: times(pricing.input_per_mtok, input), output_per_mtok: times(pricing.output_per_mtok, output) } };
  }
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
