import type { ClaudeRules, ReasoningStyle } from "./model-traits.ts";

/**
 * Reasoning controls across the formats, as two tables (docs/decisions.md, "Structured output
 * and reasoning across formats"). OpenAI clients say how hard to think (`reasoning_effort`);
 * Anthropic clients give a token budget (`thinking.budget_tokens`) or, on newer models, adaptive
 * thinking with an effort (`output_config.effort`). Pure: values in, values out.
 */

/** Anthropic's smallest thinking budget; a smaller one is refused. */
export const MIN_THINKING_BUDGET = 1024;

/** `reasoning_effort` → `thinking.budget_tokens`. `none` and `minimal` mean no thinking. */
export const EFFORT_BUDGET: Readonly<Record<string, number>> = {
  low: 1024,
  medium: 4096,
  high: 16_384,
  xhigh: 32_768,
};

/** `reasoning_effort` → adaptive thinking's `output_config.effort`: the levels every adaptive model takes (see anthropicReasoning for `xhigh` and `max`). */
const ADAPTIVE_EFFORT: Readonly<Record<string, string>> = { low: "low", medium: "medium", high: "high", xhigh: "high", max: "high" };

/**
 * Share of `max_tokens` a budget the gateway sets (translated, or lowered under a cap) may take:
 * the rest is left for the answer itself.
 */
export const BUDGET_SHARE = 3 / 4;

export type AnthropicReasoning =
  | { thinking: { type: "enabled"; budget_tokens: number } }
  | { thinking: { type: "adaptive" }; effort: string }
  /** Thinking turned off on a model that thinks unasked (`none`, `minimal`). */
  | { thinking: { type: "disabled" } | { type: "between_tools" } }
  /** A model whose thinking cannot be turned off, asked for none: its lowest effort. */
  | { effort: "low" };

/**
 * An OpenAI `reasoning_effort` → Anthropic thinking, for a model of `style`; undefined for nothing
 * to send (no effort, `none`/`minimal` for a model that thinks only when asked, a model that does
 * not think, a value we do not know, or `max_tokens` too small to hold the smallest budget and an
 * answer). `none`/`minimal` for a model that thinks unasked (`claude`): see thinkingOff. Budgets are the table's,
 * at most ¾ of `max_tokens`: the client sized `max_tokens` for the answer, and Anthropic counts
 * thinking inside it as OpenAI counts reasoning inside `max_completion_tokens`.
 */
export function anthropicReasoning(effort: unknown, style: "budget", maxTokens: number): { thinking: { type: "enabled"; budget_tokens: number } } | undefined;
export function anthropicReasoning(effort: unknown, style: ReasoningStyle | undefined, maxTokens: number, claude?: ClaudeRules): AnthropicReasoning | undefined;
export function anthropicReasoning(effort: unknown, style: ReasoningStyle | undefined, maxTokens: number, claude?: ClaudeRules): AnthropicReasoning | undefined {
  if (typeof effort !== "string") return undefined;
  if (style === "adaptive" && (effort === "none" || effort === "minimal")) return thinkingOff(claude);
  if (style === "adaptive") {
    // `xhigh` and `max` as they are where the model takes them (Claude Opus 4.7 and later), else `high`.
    const level = (effort === "xhigh" || effort === "max") && claude?.higherEfforts?.includes(effort) ? effort : ADAPTIVE_EFFORT[effort];
    return level ? { thinking: { type: "adaptive" }, effort: level } : undefined;
  }
  if (style !== "budget") return undefined;
  const wanted = EFFORT_BUDGET[effort === "max" ? "xhigh" : effort];
  if (wanted === undefined) return undefined;
  const budget = Math.min(wanted, Math.floor(maxTokens * BUDGET_SHARE));
  return budget >= MIN_THINKING_BUDGET ? { thinking: { type: "enabled", budget_tokens: budget } } : undefined;
}

/**
 * `none` and `minimal` on a model that thinks when no `thinking` is named (Claude Sonnet 5 and later,
 * Opus 5 and later, Haiku 5.5, Fable, Mythos; model-traits.ts, claudeRules): the way that model turns
 * thinking off (`disabled`, or Sonnet 5.5's `between_tools`), or, where it cannot be turned off,
 * the lowest effort. Models that think only when asked need nothing sent.
 */
function thinkingOff(claude: ClaudeRules | undefined): AnthropicReasoning | undefined {
  switch (claude?.thinksByDefault) {
    case "disabled":
      return { thinking: { type: "disabled" } };
    case "between_tools":
      return { thinking: { type: "between_tools" } };
    case "always":
      return { effort: "low" };
    default:
      return undefined;
  }
}

/**
 * Anthropic `thinking` (and `output_config.effort`) → an OpenAI `reasoning_effort`, the table
 * read backwards: a budget under 4,096 is `low`, under 16,384 `medium`, else `high`; adaptive
 * thinking's effort by name (`xhigh` and `max` are `high`, the highest every reasoning model
 * takes). Disabled thinking, or adaptive thinking with no effort (the model decides), send
 * nothing: the upstream's own default applies.
 */
export function openaiReasoningEffort(thinking: unknown, outputConfig: unknown): "low" | "medium" | "high" | undefined {
  const t = thinking as { type?: unknown; budget_tokens?: unknown } | null | undefined;
  if (t?.type === "disabled") return undefined;
  if (t?.type === "enabled") {
    const budget = typeof t.budget_tokens === "number" ? t.budget_tokens : MIN_THINKING_BUDGET;
    return budget < EFFORT_BUDGET.medium! ? "low" : budget < EFFORT_BUDGET.high! ? "medium" : "high";
  }
  // Adaptive thinking, or none named: the effort says how hard the model works either way.
  const effort = (outputConfig as { effort?: unknown } | null | undefined)?.effort;
  if (effort === "low" || effort === "medium") return effort;
  if (effort === "high" || effort === "xhigh" || effort === "max") return "high";
  return undefined;
}
