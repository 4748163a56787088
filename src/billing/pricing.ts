import type { Pricing } from "../config/schema.ts";

/** Prices are credits per million tokens, so tokens × price is already micro-credits. */
export function tokenCostMicro(pricing: Pricing | undefined, inputTokens: number, outputTokens: number): number {
  if (!pricing) return 0;
  return Math.ceil(inputTokens * pricing.input_per_mtok + outputTokens * pricing.output_per_mtok);
}

/** The "typical message" behind credits_per_msg: 1,000 tokens in, 500 out, rounded up to whole credits. */
export const TYPICAL_INPUT_TOKENS = 1_000;
export const TYPICAL_OUTPUT_TOKENS = 500;

/** `outputTokens` 0 for embedding models, which produce none: their typical message is 1,000 input tokens. */
export function creditsPerMessage(pricing: Pricing | undefined, outputTokens = TYPICAL_OUTPUT_TOKENS): number {
  return Math.ceil(tokenCostMicro(pricing, TYPICAL_INPUT_TOKENS, outputTokens) / 1_000_000);
}

/** Tokens plus `per_image` credits for each generated image. */
export function answerCostMicro(pricing: Pricing | undefined, inputTokens: number, outputTokens: number, images: number): number {
  return tokenCostMicro(pricing, inputTokens, outputTokens) + images * Math.round((pricing?.per_image ?? 0) * 1_000_000);
}
