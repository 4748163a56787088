import type { ModelConfig } from "../config/schema.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { WireFormat } from "../providers/provider.ts";
import { anthropicRequestToOpenAI } from "../translate/anthropic-to-openai.ts";
import { openaiRequestToAnthropic } from "../translate/openai-to-anthropic.ts";
import type { AnthropicBody, OpenAIChatBody } from "../translate/wire-types.ts";
import type { Logger } from "../log.ts";

/** Fields of ours that no upstream should see. */
const GATEWAY_FIELDS = ["models"] as const;

/** The spec caps answers at `cap`; a request without a limit gets the cap, a model may lower it. */
export function effectiveMaxTokens(requested: number | null | undefined, cap: number): number {
  return typeof requested === "number" ? Math.min(requested, cap) : cap;
}

export function requestedMaxTokens(format: WireFormat, body: Record<string, unknown>): number | undefined {
  const value = format === "openai" ? (body.max_completion_tokens ?? body.max_tokens) : body.max_tokens;
  return typeof value === "number" ? value : undefined;
}

/**
 * The body the upstream receives. Same format: the client's body with only the gateway's
 * changes (model, token cap, usage reporting), so parameters we do not model pass through.
 * Different format: a translation.
 */
export function prepareUpstreamBody(
  clientFormat: WireFormat,
  body: Record<string, unknown>,
  model: ModelConfig,
  provider: ResolvedProvider,
  maxTokens: number,
  log?: Logger,
): unknown {
  if (model.upstream_api === "images") return imagesRequest(clientFormat, body, model);
  if (model.category === "embedding") return embeddingsRequest(body, model);
  if (clientFormat === "openai" && provider.kind === "anthropic") {
    return openaiRequestToAnthropic(body as OpenAIChatBody, model.upstream_model, maxTokens);
  }
  const field = provider.max_tokens_field ?? "max_tokens";
  if (clientFormat === "anthropic" && provider.kind === "openai") {
    return anthropicRequestToOpenAI(body as AnthropicBody, model.upstream_model, maxTokens, field);
  }
  const out: Record<string, unknown> = { ...body, model: model.upstream_model };
  for (const name of GATEWAY_FIELDS) delete out[name];
  if (provider.kind === "anthropic") {
    out.max_tokens = maxTokens;
    fitThinkingBudget(out, maxTokens, model, log);
    return out;
  }
  delete out.max_tokens;
  delete out.max_completion_tokens;
  out[field] = maxTokens;
  if (out.stream === true) {
    // Usage is always counted, so the upstream is always asked for it; the client's own choice is honoured on the way back.
    const options = out.stream_options && typeof out.stream_options === "object" ? out.stream_options : {};
    out.stream_options = { ...options, include_usage: true };
  } else delete out.stream_options;
  return out;
}

/** Anthropic's smallest thinking budget; a smaller one is refused. */
export const MIN_THINKING_BUDGET = 1024;

/**
 * Anthropic refuses `thinking.budget_tokens` that is not below `max_tokens` or is under 1024.
 * Clients size the budget against the max_tokens they asked for (Claude Code: 32000 and 31999),
 * so once the gateway's cap lowers max_tokens the budget is lowered with it, to max_tokens − 1
 * (the same relation the client chose). When max_tokens leaves no room for the smallest budget,
 * thinking is turned off, together with the context-management edits that only apply to it.
 */
export function fitThinkingBudget(body: Record<string, unknown>, maxTokens: number, model: ModelConfig, log?: Logger): void {
  const thinking = body.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (!thinking || typeof thinking !== "object" || thinking.type !== "enabled" || typeof thinking.budget_tokens !== "number") return;
  const budget = thinking.budget_tokens;
  if (budget < maxTokens && budget >= MIN_THINKING_BUDGET) return;
  if (maxTokens > MIN_THINKING_BUDGET) {
    body.thinking = { ...thinking, budget_tokens: Math.max(MIN_THINKING_BUDGET, Math.min(budget, maxTokens - 1)) };
    return;
  }
  delete body.thinking;
  const management = body.context_management as { edits?: { type?: unknown }[] } | undefined;
  if (management && Array.isArray(management.edits)) {
    const edits = management.edits.filter((e) => !(typeof e?.type === "string" && e.type.startsWith("clear_thinking")));
    if (edits.length > 0) body.context_management = { ...management, edits };
    else delete body.context_management;
  }
  log?.("info", "thinking turned off: max_tokens leaves no room for the smallest thinking budget", {
    model: model.id, max_tokens: maxTokens, budget_tokens: budget, minimum: MIN_THINKING_BUDGET,
  });
}

/** All message text of a request, for estimating prompt tokens when an upstream reports none. */
export function promptText(format: WireFormat, body: Record<string, unknown>): string {
  const parts: string[] = [];
  const add = (content: unknown) => {
    if (typeof content === "string") parts.push(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        const p = part as Record<string, unknown>;
        if (typeof p.text === "string") parts.push(p.text);
        else if (p.content !== undefined) add(p.content);
        else if (p.input !== undefined) parts.push(JSON.stringify(p.input));
      }
    }
  };
  if (format === "anthropic") add(body.system);
  for (const m of (body.messages as Record<string, unknown>[]) ?? []) {
    add(m.content);
    const calls = m.tool_calls as { function?: { name?: string; arguments?: string } }[] | undefined;
    for (const call of calls ?? []) parts.push(call.function?.name ?? "", call.function?.arguments ?? "");
  }
  if (body.tools) parts.push(JSON.stringify(body.tools));
  return parts.join("\n");
}

/**
 * The images API takes one prompt: the text of the last user message. Earlier turns are not
 * sent (the API has no place for them); what the user asks for last is what gets drawn.
 */
function imagesRequest(format: WireFormat, body: Record<string, unknown>, model: ModelConfig): Record<string, unknown> {
  const messages = (body.messages as { role: string; content: unknown }[]) ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const prompt = lastUser ? promptText(format, { messages: [lastUser] }).trim() : "";
  const out: Record<string, unknown> = { model: model.upstream_model, prompt, n: 1 };
  // gpt-image models always answer base64 and refuse the parameter; DALL·E needs it to.
  if (!model.upstream_model.startsWith("gpt-image")) out.response_format = "b64_json";
  return out;
}

/**
 * The embeddings API's body: the client's as it is (`input`, `encoding_format`, `dimensions`,
 * `user`, and whatever a compatible server knows beyond them), with the upstream's model name.
 * The encoding the client asked for is asked of the upstream too, so its vectors pass unchanged.
 */
function embeddingsRequest(body: Record<string, unknown>, model: ModelConfig): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body, model: model.upstream_model };
  for (const name of GATEWAY_FIELDS) delete out[name];
  return out;
}
