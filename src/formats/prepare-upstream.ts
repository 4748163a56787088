import type { ModelConfig } from "../config/schema.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { UpstreamKind } from "./common/wire-types.ts";
import { anthropicRequestToOpenAI } from "./anthropic-messages/anthropic-to-openai.ts";
import { openaiRequestToAnthropic, unforceToolChoice } from "./openai-chat/openai-to-anthropic.ts";
import { takesVerbosity, upstreamTraits } from "./common/model-traits.ts";
import { anthropicReasoning, BUDGET_SHARE, MIN_THINKING_BUDGET } from "./common/reasoning.ts";
import type { ClaudeRules, ReasoningStyle, UpstreamTraits } from "./common/model-traits.ts";
import type { TranslationNotes } from "./common/wire-types.ts";
import type { AnthropicMessage, MessagesRequest } from "./anthropic-messages/schema.ts";
import type { ChatMessage, ChatRequest } from "./openai-chat/schema.ts";
import { CARRIED_REASONING } from "./common/carried-thinking.ts";
import { withToolsForLegacyFunctions } from "./openai-chat/legacy-functions.ts";
import { withCustomToolsAsFunctions } from "./openai-chat/chat-custom-tools.ts";
import type { Logger } from "../log/log.ts";
import { continuesCallWithoutThinking } from "./anthropic-messages/thinking-history.ts";
import { withAnthropicToolIds } from "./common/tool-call-ids.ts";
import { chatToResponses } from "./openai-responses/chat-to-responses.ts";
import { openaiEncryptedReasoning } from "./common/carried-thinking.ts";

export { MIN_THINKING_BUDGET };

/** Fields of ours that no upstream should see. */
const GATEWAY_FIELDS = ["models"] as const;

/** The spec caps answers at `cap`; a request without a limit gets the cap, a model may lower it. */
export function effectiveMaxTokens(requested: number | null | undefined, cap: number): number {
  return typeof requested === "number" ? Math.min(requested, cap) : cap;
}

export function requestedMaxTokens(wire: UpstreamKind, body: Record<string, unknown>): number | undefined {
  const value = wire === "openai" ? (body.max_completion_tokens ?? body.max_tokens) : body.max_tokens;
  return typeof value === "number" ? value : undefined;
}

/** What goes upstream, and what the answer's handling must know about it. */
export interface PreparedUpstream {
  body: unknown;
  /** A forced tool whose call is the answer's text (structured output without the vendor's own). */
  answerTool?: string;
}

/**
 * The body the upstream receives. Same format: the client's body with only the gateway's
 * changes (model, token cap, usage reporting, reasoning fields the model refuses), so
 * parameters we do not model pass through. Different format: a translation, told what the
 * model takes (formats/common/model-traits.ts).
 */
export function prepareUpstream(
  wire: UpstreamKind,
  body: Record<string, unknown>,
  model: ModelConfig,
  provider: ResolvedProvider,
  maxTokens: number,
  log?: Logger,
): PreparedUpstream {
  if (model.upstream_api === "images") return { body: imagesRequest(wire, body, model) };
  if (model.category === "embedding") return { body: embeddingsRequest(body, model) };
  const traits = upstreamTraits(provider.kind, model);
  const notes: TranslationNotes = {};
  if (model.upstream_api === "responses") return { body: responsesRequest(wire, body, model, traits, maxTokens, notes, log) };
  // OpenAI's reasoning models refuse `max_tokens` ("Use 'max_completion_tokens' instead"): a
  // provider that does not say which field it takes gets the newer one for them (Codex sends no
  // limit, the gateway always sets one, and its first turn on o3 was refused; a probe).
  const field = provider.max_tokens_field ?? (traits.reasoning === "effort" ? "max_completion_tokens" : "max_tokens");
  let out: Record<string, unknown>;
  if (wire === "openai" && provider.kind === "anthropic") {
    out = openaiRequestToAnthropic(withCustomToolsAsFunctions(withToolsForLegacyFunctions(body as ChatRequest)), model.upstream_model, maxTokens, traits, notes);
  } else if (wire === "anthropic" && provider.kind === "openai") {
    out = anthropicRequestToOpenAI(body as MessagesRequest, model.upstream_model, maxTokens, field, traits, notes);
  } else {
    out = { ...body, model: model.upstream_model };
    for (const name of GATEWAY_FIELDS) delete out[name];
    if (provider.kind === "anthropic") {
      out.max_tokens = maxTokens;
      fitThinkingStyle(out, traits.reasoning, maxTokens, notes);
      if (traits.claude) fitClaudeRules(out, traits.claude, maxTokens, notes);
      fitThinkingBudget(out, maxTokens, model, log, typeof body.max_tokens === "number" ? body.max_tokens : undefined);
      dropUnsignedThinking(out);
      if (Array.isArray(out.messages)) out.messages = withAnthropicToolIds(out.messages as AnthropicMessage[]);
      if (thinkingWithoutItsBlock(out)) {
        dropThinking(out);
        (notes.dropped ??= []).push("thinking: the tool call this turn continues was made without thinking (another model answered it)");
      }
    } else {
      delete out.max_tokens;
      delete out.max_completion_tokens;
      out[field] = maxTokens;
      // An image model reached as a fallback makes one answer (gateway/handle-chat.ts refuses n > 1 asked of one).
      if (model.category === "image") delete out.n;
      if (out.stream === true) {
        // Usage is always counted, so the upstream is always asked for it; the client's own choice is honoured on the way back.
        const options = out.stream_options && typeof out.stream_options === "object" ? out.stream_options : {};
        out.stream_options = { ...options, include_usage: true };
      } else delete out.stream_options;
      // Spec 4.2: a parameter the model does not support is ignored, not refused (OpenAI refuses
      // `reasoning_effort` on gpt-4o; Codex and other Responses clients send it to every model).
      if (traits.reasoning === "none" && out.reasoning_effort != null) {
        delete out.reasoning_effort;
        (notes.dropped ??= []).push("reasoning_effort: this model does not reason");
      }
      if (traits.reasoningHistory) out.messages = withReasoningHistory(out.messages as ChatMessage[]);
      // `verbosity` is a hint, so left out where it is not known to be taken (spec 4.2; model-traits.ts).
      if (out.verbosity != null && !takesVerbosity(model.upstream_model)) {
        delete out.verbosity;
        (notes.dropped ??= []).push("verbosity: only GPT-5 and later models take it");
      }
    }
  }
  // Spec 4.2 again, on every path to an OpenAI-kind upstream (same format, from Anthropic, from the
  // Responses API): what the model refuses outright (model-traits.ts, refusedParameters) is left
  // out. An Anthropic client's stop_sequences are lost to such a model: it cannot be told them.
  if (provider.kind === "openai") dropRefusedParameters(out, traits, notes);
  // OpenAI's chat completions refuse function tools on GPT-5.4 and later unless the model is told
  // not to reason (model-traits.ts, toolsWithoutReasoning): an agent's every turn carries tools, and
  // without this each one was a 400. The model answers without reasoning; the Responses API, which
  // the gateway does not call upstream, is where OpenAI offers both.
  if (provider.kind === "openai" && traits.toolsNeedNoReasoning && carriesFunctionTools(out) && out.reasoning_effort !== "none") {
    if (out.reasoning_effort != null) (notes.dropped ??= []).push(`reasoning_effort: ${String(out.reasoning_effort)} (this model takes function tools on chat completions only with "none")`);
    out.reasoning_effort = "none";
  }
  if (notes.dropped?.length) log?.("debug", "fields not sent to this upstream", { model: model.id, dropped: notes.dropped });
  return { body: out, answerTool: notes.answerTool };
}

/**
 * A request for OpenAI's Responses API (`upstream_api: "responses"`), from the chat request every
 * client format travels in (chat-to-responses.ts); an Anthropic client's is made a chat request
 * first, as for a chat upstream. Function tools and reasoning go together here: the chat path's
 * `reasoning_effort: "none"` for tools (toolsNeedNoReasoning) is not needed, and not applied.
 */
function responsesRequest(wire: UpstreamKind, body: Record<string, unknown>, model: ModelConfig, traits: UpstreamTraits, maxTokens: number, notes: TranslationNotes, log?: Logger): Record<string, unknown> {
  const chat = wire === "anthropic" ? anthropicRequestToOpenAI(body as MessagesRequest, model.upstream_model, maxTokens, "max_completion_tokens", traits, notes) : withCustomToolsAsFunctions(body as ChatRequest);
  const out = chatToResponses(chat, model.upstream_model, maxTokens, traits, notes);
  // `verbosity` is GPT-5's (see prepareUpstream); what the model refuses outright is left out, as on chat.
  const text = out.text as { verbosity?: unknown } | undefined;
  if (text?.verbosity !== undefined && !takesVerbosity(model.upstream_model)) {
    delete text.verbosity;
    if (Object.keys(text).length === 0) delete out.text;
    (notes.dropped ??= []).push("verbosity: only GPT-5 and later models take it");
  }
  dropRefusedParameters(out, traits, notes);
  if (notes.dropped?.length) log?.("debug", "fields not sent to this upstream", { model: model.id, dropped: notes.dropped });
  return out;
}

/** What the model refuses outright (model-traits.ts, refusedParameters), left out (spec 4.2). */
function dropRefusedParameters(out: Record<string, unknown>, traits: UpstreamTraits, notes: TranslationNotes): void {
  for (const name of traits.refusedParameters ?? []) {
    if (out[name] === undefined) continue;
    delete out[name];
    (notes.dropped ??= []).push(`${name}: this model refuses it`);
  }
}

/** Function tools (or legacy `functions`) in a chat-completions body. */
function carriesFunctionTools(body: Record<string, unknown>): boolean {
  return (Array.isArray(body.tools) && body.tools.length > 0) || (Array.isArray(body.functions) && body.functions.length > 0);
}

/**
 * Assistant turns that called tools, with the reasoning a Responses client carried for them
 * (carried-thinking.ts, CARRIED_REASONING) as `reasoning_content`, for a model that refuses a tool
 * loop's next request without it (model-traits.ts). The messages are copied only when one changes;
 * a chat client's own `reasoning_content` goes as it wrote it.
 */
function withReasoningHistory(messages: ChatMessage[]): ChatMessage[] {
  let out: ChatMessage[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as ChatMessage & { [CARRIED_REASONING]?: string; reasoning_content?: unknown };
    if (m.role !== "assistant" || !m.tool_calls?.length || m[CARRIED_REASONING] === undefined || m.reasoning_content !== undefined) continue;
    out ??= messages.slice();
    out[i] = { ...m, reasoning_content: m[CARRIED_REASONING] } as ChatMessage;
  }
  return out ?? messages;
}

/** The body alone (tests, callers that do not read answers). */
export function prepareUpstreamBody(
  wire: UpstreamKind,
  body: Record<string, unknown>,
  model: ModelConfig,
  provider: ResolvedProvider,
  maxTokens: number,
  log?: Logger,
): unknown {
  return prepareUpstream(wire, body, model, provider, maxTokens, log).body;
}

/**
 * Thinking with a budget asked for on a turn Anthropic would refuse it on
 * (anthropic-messages/thinking-history.ts). Adaptive thinking is taken there: only manual extended
 * thinking wants the turn to start with a thinking block.
 */
function thinkingWithoutItsBlock(body: Record<string, unknown>): boolean {
  const thinking = body.thinking as { type?: unknown } | undefined;
  if (!thinking || typeof thinking !== "object" || thinking.type !== "enabled" || !Array.isArray(body.messages)) return false;
  return continuesCallWithoutThinking(body.messages as AnthropicMessage[]);
}

/**
 * A thinking block with no signature can only be one the gateway wrote from another vendor's
 * reasoning (Anthropic signs all of its own); Anthropic refuses it, so it is left out. The
 * messages are copied only when there is one.
 */
function dropUnsignedThinking(body: Record<string, unknown>): void {
  const messages = body.messages as AnthropicMessage[] | undefined;
  if (!Array.isArray(messages)) return;
  // OpenAI's reasoning carried as a signature (an answer of a Responses upstream) is not Anthropic's either.
  const unsigned = (b: { type: string; signature?: unknown }) => b.type === "thinking" && (typeof b.signature !== "string" || b.signature === "" || openaiEncryptedReasoning(b.signature) !== undefined);
  if (!messages.some((m) => m.role === "assistant" && Array.isArray(m.content) && m.content.some(unsigned))) return;
  body.messages = messages.map((m) =>
    m.role === "assistant" && Array.isArray(m.content) && m.content.some(unsigned) ? { ...m, content: m.content.filter((b) => !unsigned(b)) } : m,
  );
}

/**
 * Thinking in the form the model takes. Clients name the model they think they reach, and an
 * alias may send them to another one (Claude Code asks `claude-opus-5-5` for adaptive thinking,
 * `claude-*` may lead to Sonnet 4.5, which refuses it): adaptive thinking for a model that takes
 * budgets becomes a budget by the effort table (formats/common/reasoning.ts, `high` when none is
 * named, as Anthropic's default), without `output_config.effort`; a model that does not think
 * gets neither. Models that take adaptive thinking still accept budgets, so those stay.
 */
export function fitThinkingStyle(body: Record<string, unknown>, style: ReasoningStyle | undefined, maxTokens: number, notes: TranslationNotes = {}): void {
  const thinking = body.thinking as { type?: unknown } | undefined;
  const config = body.output_config as Record<string, unknown> | undefined;
  const dropEffort = () => {
    if (!config || config.effort === undefined) return;
    const { effort: _, ...rest } = config;
    if (Object.keys(rest).length > 0) body.output_config = rest;
    else delete body.output_config;
  };
  if (style === "none" && (thinking !== undefined || config?.effort !== undefined)) {
    if (thinking !== undefined) dropThinking(body);
    dropEffort();
    (notes.dropped ??= []).push("thinking: this model does not think");
  } else if (style === "budget" && thinking && typeof thinking === "object" && thinking.type === "adaptive") {
    const { type: _, ...rest } = thinking;
    const budget = anthropicReasoning(config?.effort ?? "high", "budget", maxTokens);
    if (budget) body.thinking = { ...rest, ...budget.thinking };
    else dropThinking(body);
    dropEffort();
    (notes.dropped ??= []).push(budget ? "thinking.adaptive: this model takes a budget" : "thinking: max_tokens leaves no room for it");
  }
}

/**
 * An Anthropic client's own request, fitted to what the Claude model it reaches refuses outright
 * (spec 4.2: a parameter the model does not support is ignored, not refused). Clients name the
 * model they think they reach: Claude Code pinned to `claude-sonnet-4-5` (retired; the built-in
 * aliases send it to Sonnet 5.5) asks for budgeted thinking, other SDK users a temperature or a
 * forced tool, all of which Claude 4.7 and later (forced tools: Sonnet and Opus 5.5, Fable and
 * Mythos 5.1) refuse with a 400. Budgeted thinking becomes adaptive thinking (the model's default
 * effort; the budget has no equivalent), sampling parameters are left out, and a forced tool is
 * `auto` with the system prompt naming it, as the translations do. A prefill is left as written:
 * on this path it is the client's own text to continue, which a made-up user turn would change.
 */
function fitClaudeRules(body: Record<string, unknown>, rules: ClaudeRules, maxTokens: number, notes: TranslationNotes): void {
  const thinking = body.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (rules.refusesBudget && thinking && typeof thinking === "object" && thinking.type === "enabled") {
    const { type: _, budget_tokens: __, ...rest } = thinking;
    body.thinking = { ...rest, type: "adaptive" };
    (notes.dropped ??= []).push("thinking.budget_tokens: this model thinks adaptively only");
  }
  // Thinking turned off the way the model takes it, as the translations say it (reasoning.ts,
  // thinkingOff): Sonnet 5.5 refuses `disabled` for `between_tools` (which takes no other field, nor
  // effort xhigh or max beside it); Opus 5.5, Fable and Mythos cannot turn it off, and think at their lowest effort.
  if (thinking && typeof thinking === "object" && thinking.type === "disabled" && (rules.thinksByDefault === "between_tools" || rules.thinksByDefault === "always")) {
    const off = anthropicReasoning("none", "adaptive", maxTokens, rules)!;
    const config = body.output_config as Record<string, unknown> | undefined;
    if ("thinking" in off) {
      body.thinking = off.thinking;
      if (config && (config.effort === "xhigh" || config.effort === "max")) body.output_config = { ...config, effort: "high" };
    } else {
      delete body.thinking;
      if (config?.effort === undefined) body.output_config = { ...config, effort: off.effort };
    }
    (notes.dropped ??= []).push(`thinking.disabled: this model takes ${"thinking" in off ? off.thinking.type : "its lowest effort"} instead`);
  }
  if (rules.refusesSampling) {
    for (const name of ["temperature", "top_p", "top_k"]) {
      if (body[name] === undefined) continue;
      delete body[name];
      (notes.dropped ??= []).push(`${name}: this model refuses sampling parameters`);
    }
  }
  const choice = (body as MessagesRequest).tool_choice;
  if (rules.refusesForcedTool && (choice?.type === "any" || choice?.type === "tool")) unforceToolChoice(body as MessagesRequest, notes);
}

/** Thinking off, with the context-management edits that only apply to it. */
function dropThinking(body: Record<string, unknown>): void {
  delete body.thinking;
  const management = body.context_management as { edits?: { type?: unknown }[] } | undefined;
  if (management && Array.isArray(management.edits)) {
    const edits = management.edits.filter((e) => !(typeof e?.type === "string" && e.type.startsWith("clear_thinking")));
    if (edits.length > 0) body.context_management = { ...management, edits };
    else delete body.context_management;
  }
}

/**
 * Anthropic refuses `thinking.budget_tokens` that is not below `max_tokens` or is under 1024.
 * Clients size the budget against the max_tokens they asked for (Claude Code: 32000 and 31999;
 * Qwen Code: 64000 and 32000). Once the gateway's cap lowers max_tokens, a budget that no longer
 * fits, or that would take more than ¾ of what is left, is lowered to ¾ of max_tokens (as the
 * effort table's budgets are, formats/common/reasoning.ts): at least a quarter stays for the answer or
 * the tool call, which is what the client wanted thinking for. Lowered under 1024 (the vendor's
 * smallest budget), thinking is turned off, together with the context-management edits that only
 * apply to it. Both are logged. A budget the client chose within its own uncapped max_tokens is
 * its business and stays. `asked`: the client's max_tokens (undefined when it sent none).
 */
export function fitThinkingBudget(body: Record<string, unknown>, maxTokens: number, model: ModelConfig, log?: Logger, asked?: number): void {
  const thinking = body.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (!thinking || typeof thinking !== "object" || thinking.type !== "enabled" || typeof thinking.budget_tokens !== "number") return;
  const budget = thinking.budget_tokens;
  const room = Math.floor(maxTokens * BUDGET_SHARE);
  const capped = asked !== undefined && asked > maxTokens;
  if (budget < MIN_THINKING_BUDGET) {
    // Below the vendor's minimum the client meant "a little": the minimum, when it fits.
    if (MIN_THINKING_BUDGET < maxTokens) {
      body.thinking = { ...thinking, budget_tokens: MIN_THINKING_BUDGET };
      return;
    }
  } else {
    if (budget < maxTokens && !(capped && budget > room)) return;
    if (room >= MIN_THINKING_BUDGET) {
      body.thinking = { ...thinking, budget_tokens: room };
      log?.("info", "thinking budget lowered: the max_tokens cap leaves a quarter for the answer", {
        model: model.id, max_tokens: maxTokens, asked_max_tokens: asked, budget_tokens: budget, lowered_to: room,
      });
      return;
    }
  }
  dropThinking(body);
  log?.("info", "thinking turned off: max_tokens leaves no room for the smallest thinking budget", {
    model: model.id, max_tokens: maxTokens, budget_tokens: budget, minimum: MIN_THINKING_BUDGET,
  });
}

/** All message text of a request, for estimating prompt tokens when an upstream reports none. */
export function promptText(wire: UpstreamKind, body: Record<string, unknown>): string {
  const parts: string[] = [];
  const add = (content: unknown) => {
    if (typeof content === "string") parts.push(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        const p = part as Record<string, unknown>;
        if (p === null || typeof p !== "object") continue;
        if (typeof p.text === "string") parts.push(p.text);
        // An assistant's refusal is prompt too: 290 KB of refusal the vendor billed as 120,000
        // tokens were counted as none when a client left before the usage (a probe).
        else if (typeof p.refusal === "string") parts.push(p.refusal);
        // Earlier turns' thinking is not: Anthropic drops it from the prompt (counting it refused
        // long agent sessions near the window that the vendor takes; a reviewer).
        else if (p.type === "thinking" || p.type === "redacted_thinking") continue;
        else if (p.content !== undefined) add(p.content);
        else if (p.input !== undefined) parts.push(JSON.stringify(p.input));
        // A part of a kind not read above is counted whole rather than not at all.
        else parts.push(JSON.stringify(p));
      }
    }
  };
  // In the order the vendors read a prompt (and cache its start): tools and schemas, the system
  // prompt, then the conversation; a conversation's next turn starts with this one's text
  // (billing/prompt-memory.ts compares the starts).
  if (body.tools) parts.push(JSON.stringify(body.tools));
  if (body.functions) parts.push(JSON.stringify(body.functions));
  // A response schema is prompt too, as the vendors count it (OpenAI's `response_format`, Anthropic's `output_config`).
  if (body.response_format && typeof body.response_format === "object") parts.push(JSON.stringify(body.response_format));
  if (body.output_config && typeof body.output_config === "object") parts.push(JSON.stringify(body.output_config));
  if (wire === "anthropic") add(body.system);
  for (const m of (body.messages as Record<string, unknown>[]) ?? []) {
    add(m.content);
    if (typeof m.refusal === "string") parts.push(m.refusal);
    const calls = m.tool_calls as { function?: { name?: string; arguments?: string }; custom?: { name?: string; input?: string } }[] | undefined;
    // A custom tool's call carries its raw input instead of arguments (chat-custom-tools.ts).
    for (const call of calls ?? []) parts.push(call.function?.name ?? call.custom?.name ?? "", call.function?.arguments ?? call.custom?.input ?? "");
    // Legacy function calling: the call an assistant turn made.
    if (m.function_call && typeof m.function_call === "object") parts.push(JSON.stringify(m.function_call));
  }
  return parts.join("\n");
}

/**
 * The images API takes one prompt: the text of the last user message. Earlier turns are not
 * sent (the API has no place for them); what the user asks for last is what gets drawn.
 */
function imagesRequest(wire: UpstreamKind, body: Record<string, unknown>, model: ModelConfig): Record<string, unknown> {
  const messages = (body.messages as { role: string; content: unknown }[]) ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const prompt = lastUser ? promptText(wire, { messages: [lastUser] }).trim() : "";
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
