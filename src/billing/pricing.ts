import type { Pricing } from "../config/schema.ts";
import type { MeteredUsage } from "./usage-meter.ts";
import { times } from "../config/cache-prices.ts";

/**
 * The price book: token classes × prices → micro-credits. Pure; every charge, every hold, the
 * usage reports' savings and the audit's recomputation go through `classesCostMicro`, so a
 * record's classes and prices always give back its charge.
 *
 * Prices are credits per million tokens, so tokens × price is already micro-credits.
 */

/** One answer's tokens by how they are priced. `reasoning` is part of `output`, shown apart, never priced apart. */
export interface TokenClasses {
  freshInput: number;
  cacheRead: number;
  /** 5-minute cache writes (Anthropic's default ttl; OpenAI's 30-minute writes, and other servers that report writes). */
  cacheWrite5m: number;
  /** Long-lived cache writes: Anthropic's 1-hour writes, OpenAI's 12-hour ones (`prompt_cache_retention: "12h"`). */
  cacheWrite1h: number;
  output: number;
  reasoning: number;
  images: number;
}

/** The prices one answer was charged at: credits per million tokens of each class, credits per image. */
export interface PriceList {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite5m: number;
  cacheWrite1h: number;
  perImage: number;
}

export const NO_TOKENS: TokenClasses = { freshInput: 0, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0, output: 0, reasoning: 0, images: 0 };
export const FREE: PriceList = { input: 0, output: 0, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0, perImage: 0 };

/** One price list per model's pricing object: a settlement allocates none, and its id is computed once. */
const LISTS = new WeakMap<Pricing, PriceList>();
/** The same for the prices above a long-context threshold (`pricing.long_context`). */
const LONG_LISTS = new WeakMap<Pricing, PriceList>();
/** Lists scaled by a price factor (config/price-rules.ts), one per list and factor. */
const SCALED = new WeakMap<PriceList, Map<number, PriceList>>();

/**
 * A model's complete price list for an answer whose prompt (fresh input, cache reads and writes)
 * was `promptTokens` long: its long-context prices once that is above their threshold, as the
 * vendors bill the whole answer then; cache prices left out (a config older than them) are the
 * input price. `factor` scales every price (Flex processing, US-only inference: config/price-rules.ts).
 */
export function priceListOf(pricing: Pricing | undefined, promptTokens = 0, factor = 1): PriceList {
  if (!pricing) return FREE;
  const long = pricing.long_context;
  let list: PriceList | undefined;
  if (long && promptTokens > long.above_tokens) {
    list = LONG_LISTS.get(pricing);
    if (!list) LONG_LISTS.set(pricing, (list = completeList({ ...long, per_image: pricing.per_image })));
  } else {
    list = LISTS.get(pricing);
    if (!list) LISTS.set(pricing, (list = completeList(pricing)));
  }
  return factor === 1 ? list : scaled(list, factor);
}

function scaled(list: PriceList, factor: number): PriceList {
  let lists = SCALED.get(list);
  if (!lists) SCALED.set(list, (lists = new Map()));
  let out = lists.get(factor);
  if (!out) {
    // As the vendors print them: no binary-fraction tail (1.1 × 3,000 is 3,300).
    const by = (price: number) => times(price, factor);
    lists.set(factor, (out = {
      input: by(list.input), output: by(list.output), cacheRead: by(list.cacheRead),
      cacheWrite5m: by(list.cacheWrite5m), cacheWrite1h: by(list.cacheWrite1h), perImage: by(list.perImage),
    }));
  }
  return out;
}

function completeList(pricing: Omit<Pricing, "long_context">): PriceList {
  return {
    input: pricing.input_per_mtok,
    output: pricing.output_per_mtok,
    cacheRead: pricing.cache_read_per_mtok ?? pricing.input_per_mtok,
    cacheWrite5m: pricing.cache_write_per_mtok ?? pricing.input_per_mtok,
    cacheWrite1h: pricing.cache_write_1h_per_mtok ?? pricing.input_per_mtok,
    perImage: pricing.per_image ?? 0,
  };
}

/**
 * What the classes cost at these prices, in micro-credits: the tokens' sum rounded up once (a
 * fraction of a micro-credit is never dropped, never charged twice), plus each image at its price.
 * The sum is first rounded to a thousandth of a micro-credit so that binary fractions (0.1 × 3,000
 * is 300.00000000000006 in floating point) cannot round a whole number up.
 */
export function classesCostMicro(c: TokenClasses, p: PriceList): number {
  const tokens =
    c.freshInput * p.input + c.cacheRead * p.cacheRead + c.cacheWrite5m * p.cacheWrite5m + c.cacheWrite1h * p.cacheWrite1h + c.output * p.output;
  return toMicro(tokens, c.images, p.perImage);
}

/** Tokens × credits per million tokens (micro-credits, rounded up past float noise) plus the images. */
function toMicro(tokens: number, images: number, perImage: number): number {
  return Math.ceil(Math.round(tokens * 1_000) / 1_000) + images * Math.round(perImage * 1_000_000);
}

/** The classes of a metered answer. The meter already priced estimates as fresh input (no cache counts). */
export function classesOf(usage: MeteredUsage, reasoningTokens = 0): TokenClasses {
  return {
    freshInput: usage.inputTokens - usage.cacheReadTokens - usage.cacheWriteTokens,
    cacheRead: usage.cacheReadTokens,
    cacheWrite5m: usage.cacheWriteTokens - usage.cacheWrite1hTokens,
    cacheWrite1h: usage.cacheWrite1hTokens,
    output: usage.outputTokens,
    reasoning: Math.min(reasoningTokens, usage.outputTokens),
    images: usage.images,
  };
}

const IDS = new WeakMap<PriceList, number>();

/**
 * A price list's version id: the same prices give the same id in every process and every store,
 * so a record names the prices it was charged at without a round trip to learn an id. An integer
 * (52 bits of the list's SHA-256; collisions need tens of millions of distinct lists), so each
 * usage record spends 8 bytes on it rather than a string's 20-odd.
 */
export function priceListId(p: PriceList): number {
  let id = IDS.get(p);
  if (id === undefined) IDS.set(p, (id = Number.parseInt((Bun.SHA256.hash(priceListJson(p), "hex") as string).slice(0, 13), 16)));
  return id;
}

/** The stored form of a price list: its fields in one fixed order. */
export function priceListJson(p: PriceList): string {
  return JSON.stringify({ input: p.input, output: p.output, cacheRead: p.cacheRead, cacheWrite5m: p.cacheWrite5m, cacheWrite1h: p.cacheWrite1h, perImage: p.perImage });
}

/** What the cached tokens would have cost as fresh input, minus what they cost: the report's "cache savings". */
export function cacheSavingsMicro(c: TokenClasses, p: PriceList): number {
  if (c.cacheRead === 0 && c.cacheWrite5m === 0 && c.cacheWrite1h === 0) return 0;
  return classesCostMicro({ ...NO_TOKENS, freshInput: c.cacheRead + c.cacheWrite5m + c.cacheWrite1h }, p) -
    classesCostMicro({ ...NO_TOKENS, cacheRead: c.cacheRead, cacheWrite5m: c.cacheWrite5m, cacheWrite1h: c.cacheWrite1h }, p);
}

/**
 * The most a request may cost, held before it runs: every prompt token at the dearest price a
 * prompt token can have (a 1-hour cache write costs twice fresh input on Anthropic, a 12-hour one
 * 2.5× on OpenAI), the whole
 * answer, and the images, all scaled by the most the answer's price may be scaled by (`factor`:
 * config/price-rules.ts, maxPriceFactor). Charges never exceed it. `longWrites` false: the request
 * cannot make long-lived writes (an OpenAI request that did not ask for 12 hours), and the hold
 * is not twice what it can cost for them.
 */
export function worstCaseMicro(pricing: Pricing | undefined, promptTokens: number, outputTokens: number, images: number, factor = 1, longWrites = true): number {
  const p = priceListOf(pricing, 0, factor);
  const dearest = Math.max(p.input, p.cacheRead, p.cacheWrite5m, longWrites ? p.cacheWrite1h : 0);
  // classesCostMicro's sum for these classes, without the two objects it would take (every request).
  const held = toMicro(promptTokens * dearest + outputTokens * p.output, images, p.perImage);
  // `promptTokens` is a ceiling: a prompt that may be over a long-context threshold may be billed
  // at either list, so the hold covers the dearer.
  const long = priceListOf(pricing, promptTokens, factor);
  if (long === p) return held;
  const longDearest = Math.max(long.input, long.cacheRead, long.cacheWrite5m, longWrites ? long.cacheWrite1h : 0);
  return Math.max(held, toMicro(promptTokens * longDearest + outputTokens * long.output, images, long.perImage));
}

/** The "typical message" behind credits_per_msg: 1,000 tokens in, 500 out, rounded up to whole credits. */
export const TYPICAL_INPUT_TOKENS = 1_000;
export const TYPICAL_OUTPUT_TOKENS = 500;

/**
 * credits_per_msg: a typical message, fresh input and output; an image model's typical message
 * makes one image. `outputTokens` 0 for embedding models, which produce none.
 */
export function creditsPerMessage(pricing: Pricing | undefined, outputTokens = TYPICAL_OUTPUT_TOKENS, images = 0): number {
  const micro = classesCostMicro({ ...NO_TOKENS, freshInput: TYPICAL_INPUT_TOKENS, output: outputTokens, images }, priceListOf(pricing));
  return Math.ceil(micro / 1_000_000);
}

/** An answer of fresh input only (no cache counts): tokens at the input and output prices, plus images. */
export function answerCostMicro(pricing: Pricing | undefined, inputTokens: number, outputTokens: number, images = 0): number {
  return classesCostMicro({ ...NO_TOKENS, freshInput: inputTokens, output: outputTokens, images }, priceListOf(pricing));
}
