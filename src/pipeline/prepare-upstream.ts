import type { ModelConfig } from "../config/schema.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { WireFormat } from "../providers/provider.ts";
import { anthropicRequestToOpenAI } from "../translate/anthropic-to-openai.ts";
import { openaiRequestToAnthropic } from "../translate/openai-to-anthropic.ts";
import type { AnthropicBody, OpenAIChatBody } from "../translate/wire-types.ts";

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
): unknown {
  if (model.upstream_api === "images") return imagesRequest(clientFormat, body, model);
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
