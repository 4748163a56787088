import type { ModelConfig } from "../config/schema.ts";
import { ContextLengthError } from "../streaming/gateway-error.ts";
import { effectiveMaxTokens } from "../formats/prepare-upstream.ts";

export interface Fitted {
  model: ModelConfig;
  /** The answer-length limit sent upstream for this model. */
  maxTokens: number;
}

/**
 * Which candidates can hold the request: prompt tokens plus the answer limit within
 * `context_length`. The cheap bound decides almost every request; only one near a limit is
 * counted with the tokenizer (once, however many candidates). A request that names no
 * max_tokens gets the cap, or whatever room the model has left. Nothing fits → 400 with the
 * numbers, before any upstream call or charge. `cap` is the default; a model's own
 * `max_tokens_cap` replaces it.
 */
export async function fitCandidates(
  candidates: ModelConfig[],
  promptBound: number,
  requested: number | undefined,
  cap: number,
  countPrompt: () => Promise<number>,
): Promise<Fitted[]> {
  let exact: number | undefined;
  const prompt = async () => (exact ??= await countPrompt());
  const fitted: Fitted[] = [];
  let firstMiss: { model: ModelConfig; prompt: number; maxTokens: number | undefined } | undefined;

  for (const model of candidates) {
    const modelCap = model.max_tokens_cap ?? cap;
    // The images API takes no answer limit: an image's output tokens are what its size and quality
    // cost (gpt-image-1: up to 6,240), whatever max_tokens says, so the hold covers the model's cap
    // (a max_tokens of 1 held one token of a 6,240-token image, and the charge stops at the hold).
    const asked = takesAnswerLimit(model) ? requested : undefined;
    const wanted = atUpstreamMinimum(model, effectiveMaxTokens(asked, modelCap));
    if (promptBound + wanted <= model.context_length) {
      fitted.push({ model, maxTokens: wanted });
      continue;
    }
    const tokens = await prompt();
    const room = model.context_length - tokens;
    if (asked === undefined && room >= 1) fitted.push({ model, maxTokens: atUpstreamMinimum(model, Math.min(modelCap, room)) });
    else if (tokens + wanted <= model.context_length) fitted.push({ model, maxTokens: wanted });
    else firstMiss ??= { model, prompt: tokens, maxTokens: asked === undefined ? undefined : wanted };
  }
  if (fitted.length === 0 && firstMiss) {
    const { model, prompt: tokens, maxTokens } = firstMiss;
    // A count that stopped past the largest window says "more than", not a number it never reached.
    const prompt = tokens > model.context_length ? `more than ${model.context_length} prompt tokens` : `about ${tokens} prompt tokens`;
    const needs = maxTokens === undefined ? prompt : `${prompt} plus max_tokens ${maxTokens}`;
    throw new ContextLengthError(tokens, maxTokens, model.context_length,
      `This request needs ${needs}, which exceeds the context length of ${model.id} (${model.context_length} tokens). Shorten the conversation or lower max_tokens.`);
  }
  return fitted;
}

/**
 * OpenAI's Responses API refuses `max_output_tokens` under 16 (400 `integer_below_min_value`),
 * where chat completions and Anthropic take 1. Clients ask 1 to check a model: Claude Code's
 * `/model` switch sends `max_tokens: 1` and keeps the old model when refused. Such a model is
 * asked for 16, and held and charged for what it reports of them, as the vendor bills it.
 */
export const RESPONSES_MIN_OUTPUT_TOKENS = 16;

function atUpstreamMinimum(model: ModelConfig, tokens: number): number {
  return model.upstream_api === "responses" ? Math.max(tokens, RESPONSES_MIN_OUTPUT_TOKENS) : tokens;
}

/** Whether a client's answer limit (`max_tokens`) bounds what the model may cost: not the images API's, which takes none. */
export function takesAnswerLimit(model: ModelConfig): boolean {
  return model.upstream_api !== "images";
}
