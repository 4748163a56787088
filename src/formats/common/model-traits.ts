import type { ModelConfig } from "../../config/schema.ts";

/**
 * What an upstream model accepts of the fields the gateway translates from the other format. A
 * translated field must never make a vendor refuse a request it would otherwise take: a model
 * that does not reason refuses `reasoning_effort` / `thinking`, one without structured outputs
 * refuses `output_config.format`. The config says (`models[].reasoning`, `structured_output`);
 * else the vendor's own model families are recognised by name, and anything else is unknown —
 * nothing translated is sent to it that it could refuse.
 */

/** `effort`: OpenAI `reasoning_effort`; `budget`: Anthropic `thinking.budget_tokens`; `adaptive`: Anthropic adaptive thinking with `output_config.effort`. */
export type ReasoningStyle = "none" | "effort" | "budget" | "adaptive";
/** `native`: Anthropic `output_config.format`; `tool`: a forced tool whose input is the answer. */
export type StructuredOutputStyle = "native" | "tool";

export interface UpstreamTraits {
  /** Undefined: the gateway cannot tell, so reasoning fields are only passed on as the client wrote them. */
  reasoning: ReasoningStyle | undefined;
  structuredOutput: StructuredOutputStyle;
  /** Whether a request translated for Anthropic gets prompt-cache breakpoints (`models[].prompt_cache`). */
  cacheBreakpoints: boolean;
  /** Chat-completions fields the model refuses outright (see refusedParameters); none when unset. */
  refusedParameters?: readonly string[];
  /**
   * The model wants each earlier assistant turn that called tools to carry the reasoning it was
   * made with, as `reasoning_content` (DeepSeek's thinking mode, Moonshot's Kimi thinking models:
   * a 400 without it). See reasoningHistory.
   */
  reasoningHistory?: boolean;
  /**
   * OpenAI's chat completions take function tools on this model only with `reasoning_effort:
   * "none"`: any other effort, or none sent (its default is `medium`), is refused with a 400. See
   * toolsWithoutReasoning.
   */
  toolsNeedNoReasoning?: boolean;
  /** What a Claude model refuses or does unasked that a translation must fit (see claudeRules); absent when nothing. */
  claude?: ClaudeRules;
}

/**
 * What a Claude model, read off its name, refuses of what OpenAI clients commonly send, or does
 * without being asked. Each flag is absent when it does not apply.
 */
export interface ClaudeRules {
  /** Non-default `temperature`, `top_p` or `top_k` are refused (400), thinking or not. */
  refusesSampling?: true;
  /** A conversation that ends with an assistant turn (a prefill for the answer) is refused (400). */
  refusesPrefill?: true;
  /** Manual extended thinking (`thinking: {type: "enabled", budget_tokens}`) is refused (400): adaptive only. */
  refusesBudget?: true;
  /** `tool_choice` of type `any` or `tool` (forced tool use) is refused (400); `auto` and `none` are taken. */
  refusesForcedTool?: true;
  /**
   * The model thinks (adaptively) when a request names no thinking, and this turns it off:
   * `thinking: {type: "disabled"}`, `{type: "between_tools"}` (the lowest setting Sonnet 5.5
   * takes; `disabled` is refused), or nothing (`always`: any way to turn it off is refused).
   */
  thinksByDefault?: "disabled" | "between_tools" | "always";
  /** Thinking blocks come back empty unless `thinking.display` asks for `summarized` text. */
  omitsThinking?: true;
  /** The `output_config.effort` levels above `high` the model takes. */
  higherEfforts?: readonly ("xhigh" | "max")[];
}

/** What translators assume when nobody says: no reasoning fields, structured outputs as the vendor's API has them. */
export const UNKNOWN_TRAITS: UpstreamTraits = { reasoning: undefined, structuredOutput: "native", cacheBreakpoints: true };

type TraitSource = Pick<ModelConfig, "upstream_model" | "reasoning" | "structured_output" | "prompt_cache">;
/** A model's traits are read off its name once, not on every request that goes to it. */
const known = new WeakMap<TraitSource, { kind: string; traits: UpstreamTraits }>();

export function upstreamTraits(kind: "openai" | "anthropic", model: TraitSource): UpstreamTraits {
  const cached = known.get(model);
  if (cached && cached.kind === kind) return cached.traits;
  const inferred = kind === "openai" ? openaiTraits(model.upstream_model) : anthropicTraits(model.upstream_model);
  const traits: UpstreamTraits = {
    reasoning: model.reasoning ?? inferred.reasoning,
    structuredOutput: model.structured_output ?? inferred.structuredOutput,
    cacheBreakpoints: model.prompt_cache !== "off",
  };
  // Refused because these models reason: one the config says does not (`models[].reasoning`) is sent them.
  if (kind === "openai" && traits.reasoning === "effort") traits.refusedParameters = refusedParameters(lastSegment(model.upstream_model));
  if (kind === "openai" && reasoningHistory(model.upstream_model)) traits.reasoningHistory = true;
  if (kind === "openai" && toolsWithoutReasoning(lastSegment(model.upstream_model))) traits.toolsNeedNoReasoning = true;
  if (kind === "anthropic") {
    const claude = claudeModel(lastSegment(model.upstream_model));
    const rules = claude ? claudeRules(claude.family, claude.version) : undefined;
    if (rules) traits.claude = rules;
  }
  known.set(model, { kind, traits });
  return traits;
}

/**
 * GPT-5 and every later family (`gpt-5.6-luna`, `gpt-6-luna`, `gpt-6.1-sol`, `gpt-10` …); not
 * `gpt-4o`, `gpt-oss` or `gpt-image-2`. Lowercase names without a vendor path.
 */
const GPT_5_OR_LATER = /^gpt-(?:[5-9]|[1-9]\d)(?!\d)/;

/**
 * Whether an OpenAI-kind model takes `verbosity` (Codex sends the Responses API's `text.verbosity`):
 * GPT-5's and later's. OpenAI refuses a value other than the default on other models, and other
 * servers do not know it.
 */
export function takesVerbosity(upstreamModel: string): boolean {
  return GPT_5_OR_LATER.test(lastSegment(upstreamModel));
}

/**
 * OpenAI's families: o-series, GPT-5 and later (GPT-6's Astra, Sol and Luna) and gpt-oss reason
 * (the `-chat` models do not); gpt-4*, gpt-3.5 and chatgpt-4o refuse `reasoning_effort`. The
 * name's last path segment counts, so `openai/o4-mini` behind OpenRouter is recognised too.
 */
function openaiTraits(upstreamModel: string): Omit<UpstreamTraits, "cacheBreakpoints"> {
  const name = lastSegment(upstreamModel);
  let reasoning: ReasoningStyle | undefined;
  if (GPT_5_OR_LATER.test(name)) reasoning = name.includes("-chat") ? "none" : "effort";
  else if (/^o\d+(-|$)/.test(name) || /^gpt-oss/.test(name)) reasoning = "effort";
  else if (/^(gpt-4|gpt-3\.5|chatgpt-)/.test(name)) reasoning = "none";
  return { reasoning, structuredOutput: "native" };
}

/**
 * What OpenAI's chat completions refuse on a reasoning model ("Unsupported parameter: 'stop' is not
 * supported with this model", code `unsupported_parameter`), by the model's name, where many
 * independent reports (agent frameworks' issues and fixes, LiteLLM's own table) agree:
 * - `stop` on GPT-5's reasoning models (gpt-5, -mini, -nano, 5.1, 5.2…; the `-chat` ones do not
 *   reason and are not asked), o3, o4-mini, o1-mini and o1-preview. o3-mini takes it (frameworks that
 *   drop it for o3 exempt o3-mini); for o1 itself no report says either way: neither loses it.
 * - `parallel_tool_calls` on the o-series (o1, o3-mini, o3, o4-mini), even `false`. GPT-5 takes it.
 * The spec's rule (4.2) is that a parameter the model does not support is ignored, not refused.
 */
function refusedParameters(name: string): readonly string[] {
  const refused: string[] = [];
  if (/^gpt-5/.test(name) || /^(o3|o4-mini|o1-mini|o1-preview)(-\d{4}-\d{2}-\d{2})?$/.test(name)) refused.push("stop");
  if (/^o\d+(-|$)/.test(name)) refused.push("parallel_tool_calls");
  return refused;
}

/**
 * OpenAI models whose chat completions refuse function tools unless `reasoning_effort` is
 * `"none"` ("Function tools with reasoning_effort are not supported for gpt-6-luna in
 * /v1/chat/completions. To use function tools, use /v1/responses or set reasoning_effort to
 * 'none'."): GPT-5.4 and every later family, as OpenAI's model pages say ("Chat Completions
 * supports function calling only with `reasoning_effort` set to `none`": gpt-6-luna, gpt-6-sol)
 * and integrators' reports agree (gpt-5.4, gpt-5.6-luna/-sol/-terra, gpt-6-sol, gpt-6-astra). An
 * effort left out is refused too on GPT-5.6 and later (their default is `medium`). Not the GPT-5.4
 * mini and nano (reported to take tools with an effort), nor the `-chat` models (they do not reason).
 * GPT-6 Astra and GPT-6.1 Sol take no `none` at all: OpenAI offers their tools on the Responses
 * API only, so they are left as the client asked and the vendor's refusal says why.
 */
function toolsWithoutReasoning(name: string): boolean {
  if (!/^gpt-(?:5\.(?:[4-9]|[1-9]\d)|[6-9]|[1-9]\d)(?!\d)/.test(name) || name.includes("-chat")) return false;
  if (/-(?:mini|nano)(?![a-z])/.test(name)) return false;
  return !/^gpt-(?:6-astra|6\.1-sol)(?![a-z\d])/.test(name);
}

/**
 * Models served over chat completions that refuse a tool loop's next request unless each assistant
 * turn that called tools comes back with its `reasoning_content` ("Missing `reasoning_content`
 * field in the assistant message"): DeepSeek's (thinking mode, on by default in its current
 * models) and Moonshot's Kimi (K2 thinking and later), by name, wherever they are served (a
 * vendor's own API, OpenRouter's `deepseek/…`, `moonshotai/kimi-…`). Others are never sent the
 * field: OpenAI's own API refuses a message field it does not know.
 */
function reasoningHistory(upstreamModel: string): boolean {
  return /deepseek|kimi/i.test(upstreamModel);
}

/**
 * Claude's versions: thinking from 3.7 (with a budget), adaptive thinking from 4.6 (budgets are
 * deprecated there and refused by later models); structured outputs from 4.5. Fable and Mythos
 * (5 and later) are Claude 5 models like Opus and Sonnet.
 */
function anthropicTraits(upstreamModel: string): Omit<UpstreamTraits, "cacheBreakpoints"> {
  const version = claudeVersion(lastSegment(upstreamModel));
  if (version === undefined) return UNKNOWN_TRAITS;
  return {
    reasoning: version < 307 ? "none" : version < 406 ? "budget" : "adaptive",
    structuredOutput: version >= 405 ? "native" : "tool",
  };
}

/**
 * What each Claude model refuses or does unasked, by family and version, as Anthropic documents it
 * (platform.claude.com/docs/en/build-with-claude/thinking, "Limits and feature compatibility", and
 * each model's "What's new" and migration guide). Later versions of a family are taken to keep a
 * rule their predecessors brought in. Undefined when no rule applies.
 * - Sampling: Claude Opus 4.7 and later, Sonnet 5 and later, Haiku 5.5, every Fable and Mythos
 *   refuse non-default `temperature`, `top_p`, `top_k` on every request (no Sonnet or Haiku 4.7–4.9
 *   exists, so "4.7 and later" says it for every family).
 * - Prefill: Claude 4.6 and later (Opus 4.6, Sonnet 4.6 and every model after) refuse a last
 *   assistant turn; Sonnet 4.5, Haiku 4.5 and older continue it.
 * - Forced tool use: Claude Sonnet 5.5, Opus 5.5, Fable 5.1 and Mythos 5.1 refuse `tool_choice`
 *   `any` and `tool`; Haiku 5.5, Opus 5, Sonnet 5 and Fable 5 take them.
 * - Thinking with no `thinking` field: on for Sonnet 5, Opus 5 and Haiku 5.5 (`disabled` turns it
 *   off, at effort `high` or below), Sonnet 5.5 (`between_tools`; `disabled` is refused), and always
 *   on for Opus 5.5, Fable and Mythos (`disabled` is refused); off for Opus 4.6–4.8 and Sonnet 4.6.
 * - Effort above `high`: `max` on every adaptive model (Opus and Sonnet 4.6 and later, Haiku 5.5,
 *   Fable, Mythos), `xhigh` from Opus 4.7 on (not Opus or Sonnet 4.6).
 * - Thinking text: omitted unless `display: "summarized"` on Opus 4.7 and later, Sonnet 5 and
 *   later, Haiku 5.5, Fable and Mythos ("summarized" is the default before them).
 */
export function claudeRules(family: ClaudeFamily, version: number): ClaudeRules | undefined {
  const rules: ClaudeRules = {};
  if (version >= 407) rules.refusesSampling = true;
  if (version >= 406) rules.refusesPrefill = true;
  // "Claude 4.7 and later models do not support it and reject requests that use it" (extended thinking).
  if (version >= 407) rules.refusesBudget = true;
  if (((family === "opus" || family === "sonnet") && version >= 505) || ((family === "fable" || family === "mythos") && version >= 501)) rules.refusesForcedTool = true;
  if (family === "fable" || family === "mythos" || (family === "opus" && version >= 505)) rules.thinksByDefault = "always";
  else if (family === "sonnet" && version >= 505) rules.thinksByDefault = "between_tools";
  else if (((family === "opus" || family === "sonnet") && version >= 500) || (family === "haiku" && version >= 505)) rules.thinksByDefault = "disabled";
  if (version >= 407) rules.omitsThinking = true;
  if (version >= 406 && (family !== "haiku" || version >= 505)) rules.higherEfforts = version >= 407 ? ["xhigh", "max"] : ["max"];
  return Object.keys(rules).length > 0 ? rules : undefined;
}

/** Claude's model families, as their names spell them. */
export type ClaudeFamily = "opus" | "sonnet" | "haiku" | "fable" | "mythos";

/**
 * A Claude model's family and version (major × 100 + minor) read off its name wherever it is
 * served: `claude-sonnet-4-5-20250929` → sonnet 405, `claude-opus-4-20250514` → opus 400,
 * `claude-3-7-sonnet-latest` → sonnet 307, `claude-fable-5-1` → fable 501, Vertex's
 * `claude-sonnet-4-5@20250929`, Bedrock's `us.anthropic.claude-opus-4-6-v1` and
 * `anthropic.claude-sonnet-5-5`, OpenRouter's dotted `anthropic/claude-sonnet-4.5`. Claude Mythos
 * Preview (`claude-mythos-preview`, no number) counts as Mythos 5. Undefined when not Claude.
 */
export function claudeModel(name: string): { family: ClaudeFamily; version: number } | undefined {
  const lower = name.toLowerCase();
  // A minor version is one or two digits; eight are a date.
  const named = /claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:[-.](\d{1,2})(?!\d))?/.exec(lower);
  if (named) return { family: named[1] as ClaudeFamily, version: Number(named[2]) * 100 + Number(named[3] ?? 0) };
  const numbered = /claude-(\d+)(?:[-.](\d{1,2})(?!\d))?-(opus|sonnet|haiku)/.exec(lower);
  if (numbered) return { family: numbered[3] as ClaudeFamily, version: Number(numbered[1]) * 100 + Number(numbered[2] ?? 0) };
  if (/claude-mythos-preview/.test(lower)) return { family: "mythos", version: 500 };
  return undefined;
}

/** Claude's version alone (see claudeModel); undefined when not Claude. */
export function claudeVersion(name: string): number | undefined {
  return claudeModel(name)?.version;
}

function lastSegment(name: string): string {
  return name.slice(name.lastIndexOf("/") + 1).toLowerCase();
}
