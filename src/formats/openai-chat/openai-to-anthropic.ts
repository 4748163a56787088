import { anthropicToolId } from "../common/tool-call-ids.ts";
import { jsonBudget, toolInput } from "../common/json-shape.ts";
import { openaiContentText } from "../common/content-text.ts";
import { pseudonymousUser } from "../common/end-user-id.ts";
import { UNKNOWN_TRAITS, type UpstreamTraits } from "../common/model-traits.ts";
import { anthropicReasoning } from "../common/reasoning.ts";
import { anthropicStructuredOutput } from "../common/structured-output.ts";
import type { Json, TranslationNotes } from "../common/wire-types.ts";
import type { AnthropicBlock, AnthropicMessage, MessagesRequest } from "../anthropic-messages/schema.ts";
import type { ChatRequest } from "./schema.ts";
import { continuesCallWithoutThinking } from "../anthropic-messages/thinking-history.ts";
import { CARRIED_THINKING, openaiEncryptedReasoning } from "../common/carried-thinking.ts";

/**
 * An OpenAI chat request → an Anthropic messages request. System messages move to
 * `system`, tool results become `tool_result` blocks in a user turn, and turns of the
 * same role are merged because Anthropic expects them to alternate. `response_format` and
 * `reasoning_effort` become structured outputs and thinking as far as the model (`traits`)
 * takes them; `notes` learns what the answer's handling must know (a forced answer tool).
 */
export function openaiRequestToAnthropic(
  body: ChatRequest,
  upstreamModel: string,
  maxTokens: number,
  traits: UpstreamTraits = UNKNOWN_TRAITS,
  notes: TranslationNotes = {},
): MessagesRequest {
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  const push = (role: "user" | "assistant", blocks: AnthropicBlock[]) => {
    if (blocks.length === 0) return;
    const last = messages[messages.length - 1];
    if (last && last.role === role) (last.content as AnthropicBlock[]).push(...blocks);
    else messages.push({ role, content: blocks });
  };

  // All the history's tool calls together are parsed no further than one body's limits.
  const budget = jsonBudget();
  for (const m of body.messages) {
    switch (m.role) {
      case "system":
      case "developer":
        system.push(openaiContentText(m.content));
        break;
      case "user": {
        const text = openaiContentText(m.content);
        // Sent as written, whitespace too: dropped, a last user turn of "   " would leave the
        // conversation ending with the assistant's, which Anthropic continues (a prefill).
        push("user", text ? [{ type: "text", text }] : []);
        break;
      }
      case "assistant": {
        // Anthropic's own signed thinking this turn started with, carried by a Responses client (carried-thinking.ts).
        // Anthropic's own blocks only: OpenAI's reasoning carried the same way (a Responses upstream's) it would refuse.
        const blocks: AnthropicBlock[] = ((m as { [CARRIED_THINKING]?: AnthropicBlock[] })[CARRIED_THINKING] ?? []).filter((b) => openaiEncryptedReasoning(b.signature) === undefined);
        // An earlier refusal sent back as it came (`content: null, refusal: "…"`): what the assistant said.
        const refusal = (m as { refusal?: unknown }).refusal;
        const text = openaiContentText(m.content) || (typeof refusal === "string" ? refusal : "");
        if (text.trim()) blocks.push({ type: "text", text });
        for (const call of m.tool_calls ?? []) {
          blocks.push({ type: "tool_use", id: anthropicToolId(call.id), name: call.function?.name ?? "", input: toolInput(call.function?.arguments, budget) as Json });
        }
        push("assistant", blocks);
        break;
      }
      case "tool":
        push("user", [{ type: "tool_result", tool_use_id: anthropicToolId(m.tool_call_id ?? ""), content: openaiContentText(m.content) }]);
        break;
    }
  }

  // System (developer) messages alone are a conversation OpenAI answers, doing what they say;
  // Anthropic refuses `messages: []`. Their text is the one user turn instead, and there is no
  // system, so the model still does what it was told rather than greet an empty conversation.
  const instructions = system.join("\n\n");
  const onlySystem = messages.length === 0 && instructions.trim() !== "";
  if (onlySystem) push("user", [{ type: "text", text: instructions }]);
  // A conversation that ends with the assistant's words: OpenAI writes the next message, Anthropic
  // continues that one (a prefill), which Claude 4.6 and later refuse. For them the user's turn
  // asks for the next message, as OpenAI would write it.
  const last = messages[messages.length - 1];
  if (traits.claude?.refusesPrefill && last?.role === "assistant" && !(last.content as AnthropicBlock[]).some((b) => b.type === "tool_use")) {
    push("user", [{ type: "text", text: CONTINUE }]);
    (notes.dropped ??= []).push("prefill: the conversation ends with the assistant, which this model refuses; a user turn asks it to go on");
  }
  const out: MessagesRequest = { model: upstreamModel, messages, max_tokens: maxTokens };
  if (system.length > 0 && !onlySystem) out.system = instructions;
  if (body.stream) out.stream = true;
  if (traits.claude?.refusesSampling) {
    // Claude Opus 4.7, Sonnet 5 and later refuse a non-default temperature or top_p outright (spec
    // 4.2: ignored, not refused). The openai SDK's users, LangChain and the AI SDK often send them.
    for (const name of ["temperature", "top_p"] as const) {
      if (typeof body[name] === "number") (notes.dropped ??= []).push(`${name}: this model refuses sampling parameters`);
    }
  } else {
    // Anthropic's temperature range is 0–1; OpenAI's is 0–2. Clamping keeps the request valid and "more random" still means the most random Anthropic allows.
    if (typeof body.temperature === "number") out.temperature = Math.min(body.temperature, 1);
    // Anthropic's current models refuse both at once ("`temperature` and `top_p` cannot both be
    // specified for this model"), which OpenAI takes and some frameworks send: temperature is kept.
    if (typeof body.top_p === "number" && out.temperature === undefined) out.top_p = body.top_p;
  }
  // Anthropic refuses a stop sequence that is empty or only whitespace ("each stop sequence must
  // contain non-whitespace"); OpenAI clients often send "\n". Such sequences are left out.
  if (body.stop) {
    const stops = (Array.isArray(body.stop) ? body.stop : [body.stop]).filter((s) => typeof s === "string" && s.trim() !== "");
    if (stops.length > 0) out.stop_sequences = stops;
  }
  // OpenAI's end-user id (`safety_identifier`, or `user` it replaces) as a stable pseudonym: Anthropic
  // wants an opaque id in `metadata.user_id`, and clients often send an e-mail.
  const endUser = [(body as { safety_identifier?: unknown }).safety_identifier, body.user].find((id): id is string => typeof id === "string" && id !== "");
  if (endUser !== undefined) out.metadata = { user_id: pseudonymousUser(endUser) };
  if (body.tools?.length) {
    out.tools = body.tools
      .filter((tool) => tool.type === "function" && tool.function)
      .map((tool) => ({
        name: tool.function!.name,
        ...(tool.function!.description ? { description: tool.function!.description } : {}),
        input_schema: tool.function!.parameters ?? { type: "object", properties: {} },
      }));
  }
  const choice = toolChoice(body.tool_choice, body.parallel_tool_calls);
  if (choice && out.tools?.length) out.tool_choice = choice;

  const structured = anthropicStructuredOutput(body.response_format, traits.structuredOutput, new Set((out.tools ?? []).map((t) => t.name)));
  if (structured?.kind === "native") out.output_config = { format: structured.format };
  else if (structured?.kind === "tool") {
    // The answer arrives as this tool's input; with tools of the client's own, the model picks one of them or answers.
    const clientTools = out.tools?.length ?? 0;
    out.tools = [...(out.tools ?? []), structured.tool];
    const named = out.tool_choice?.type === "tool";
    if (!named) {
      const forced = clientTools === 0 || out.tool_choice?.type === "none" ? { type: "tool", name: structured.tool.name } : { type: "any" };
      // The client's `parallel_tool_calls: false` with its tools, read off the body: `none` carried no flag to keep.
      const serial = clientTools > 0 && body.parallel_tool_calls === false;
      out.tool_choice = { ...forced, ...(serial ? { disable_parallel_tool_use: true } : {}) };
    }
    notes.answerTool = structured.tool.name;
  }
  if (traits.claude?.refusesForcedTool && (out.tool_choice?.type === "any" || out.tool_choice?.type === "tool")) unforceToolChoice(out, notes);

  if (body.reasoning_effort !== undefined && body.reasoning_effort !== null) {
    const skipped = traits.reasoning === "budget" ? thinkingRefused(out, messages) : undefined;
    const reasoning = skipped ? undefined : anthropicReasoning(body.reasoning_effort, traits.reasoning, maxTokens, traits.claude);
    if (reasoning) {
      if ("thinking" in reasoning) out.thinking = reasoning.thinking;
      if ("effort" in reasoning) out.output_config = { ...out.output_config, effort: reasoning.effort };
      if (out.thinking?.type === "enabled" || out.thinking?.type === "adaptive") {
        // Anthropic takes no sampling changes with thinking on (temperature 1 only, top_p from 0.95).
        delete out.temperature;
        if (typeof out.top_p === "number" && out.top_p < 0.95) delete out.top_p;
      }
    } else (notes.dropped ??= []).push(`reasoning_effort: ${skipped ?? `no thinking for "${String(body.reasoning_effort)}" on this model`}`);
  }
  // The thinking text, where the model returns it empty unless asked (Claude Opus 4.7, Sonnet 5 and
  // later): OpenAI clients read it as `reasoning_content` or reasoning summaries, and on Sonnet 5.5,
  // Opus 5.5 and Fable 5.1 the notes the model writes between tool calls come back only there. A
  // model that thinks unasked is asked explicitly (the same as naming nothing, with the display).
  if (traits.reasoning === "adaptive" && traits.claude?.omitsThinking) {
    const thinks = out.thinking === undefined ? traits.claude.thinksByDefault !== undefined : out.thinking.type === "adaptive";
    if (thinks) out.thinking = { ...(out.thinking ?? { type: "adaptive" }), display: "summarized" };
  }
  if (traits.cacheBreakpoints) markCacheBreakpoints(messages);
  return out;
}

const EPHEMERAL = { type: "ephemeral" } as const;

/** The user turn after an assistant's last words, for a model that refuses to continue them (a prefill). */
const CONTINUE = "Continue.";

/**
 * Prompt-cache breakpoints for a request an OpenAI-format client sent (it cannot mark them, and
 * Anthropic caches nothing unmarked, so every turn of an agent's loop was fresh input: a CLI
 * probe's Codex sessions read nothing from the cache, ~10× the price of cached reads). The end of
 * the conversation is marked, so the next turn finds this one cached, and the end of the message
 * before it, which this turn finds from the last one (Anthropic looks back 20 blocks from a mark).
 * Two of Anthropic's four marks; tools and system come before them and are cached with them. A
 * prompt below the model's minimum (1,024 tokens, 2,048 on Haiku) is not cached and costs the same.
 */
function markCacheBreakpoints(messages: AnthropicMessage[]): void {
  let marked = 0;
  for (let i = messages.length - 1; i >= 0 && marked < 2; i--) {
    const blocks = messages[i]!.content as AnthropicBlock[];
    // The last block that may carry a mark: thinking blocks may not, nor empty text.
    const last = blocks.findLast((b) => b.type !== "thinking" && b.type !== "redacted_thinking" && !(b.type === "text" && !String(b.text ?? "").trim()));
    if (!last) continue;
    (last as AnthropicBlock & { cache_control?: typeof EPHEMERAL }).cache_control = EPHEMERAL;
    marked++;
  }
}

/**
 * Why Anthropic would refuse thinking with a budget (manual extended thinking) on this request, if
 * it would: a forced tool (the client's or the structured-output one) cannot be combined with it,
 * and a turn that continues after tool calls must start with the signed thinking block an OpenAI
 * client never has. Adaptive thinking has neither rule ("Adaptive thinking … supports forced tool
 * use"; "Adaptive mode relaxes this: no assistant turn needs to start with one"), so it is asked on
 * every step of a tool loop, with the client's effort.
 */
function thinkingRefused(out: MessagesRequest, messages: AnthropicMessage[]): string | undefined {
  if (out.tool_choice?.type === "any" || out.tool_choice?.type === "tool") return "thinking cannot be combined with a forced tool";
  if (continuesCallWithoutThinking(messages)) return "a turn that continues after tool calls would need the signed thinking block it started with";
  return undefined;
}

/**
 * OpenAI's `{type: "allowed_tools", allowed_tools: {mode, tools}}` (a subset the model may call,
 * every tool still listed so the prompt cache holds): Anthropic has no subset, so its mode decides,
 * as on the Responses path (`required` → `any`, else `auto`), and a required subset of one function
 * is that tool by name. Dropped, `required` was lost: the model could answer without a call.
 */
function allowedTools(allowed: { mode?: unknown; tools?: unknown } | undefined): MessagesRequest["tool_choice"] {
  if (allowed?.mode !== "required") return { type: "auto" };
  const tools = Array.isArray(allowed.tools) ? (allowed.tools as { type?: unknown; function?: { name?: unknown } }[]) : [];
  const only = tools.length === 1 && tools[0]?.type === "function" ? tools[0].function?.name : undefined;
  return typeof only === "string" && only !== "" ? { type: "tool", name: only } : { type: "any" };
}

/**
 * A forced tool (`tool_choice: "required"` or a named function, or the structured-output answer
 * tool) for a model that refuses forced tool use: `auto`, and the system prompt says which tool to
 * call, as Anthropic's migration guides advise ("say in the prompt when to use it"). The model
 * follows it, but may still answer in text: the client gets that text as the answer. The flag
 * against parallel calls stays on `auto`, which takes it.
 */
export function unforceToolChoice(out: MessagesRequest, notes: TranslationNotes): void {
  const { type, name, ...rest } = out.tool_choice!;
  out.tool_choice = { type: "auto", ...rest };
  const instruction = type === "tool" && name
    ? `Respond to this request by calling the \`${name}\` tool rather than answering in text.`
    : "Respond to this request by calling one of the provided tools rather than answering in text.";
  // An Anthropic client's system may be blocks (Claude Code's carry cache marks): the line is a block after them.
  if (Array.isArray(out.system)) out.system = [...out.system, { type: "text", text: instruction }];
  else out.system = typeof out.system === "string" && out.system !== "" ? `${out.system}\n\n${instruction}` : instruction;
  (notes.dropped ??= []).push(`tool_choice: ${type === "tool" ? `the tool ${name}` : "any tool"} asked in the system prompt instead (this model refuses forced tool use)`);
}

function toolChoice(choice: unknown, parallel: boolean | undefined): MessagesRequest["tool_choice"] | undefined {
  let out: MessagesRequest["tool_choice"] | undefined;
  if (choice === "auto") out = { type: "auto" };
  else if (choice === "none") out = { type: "none" };
  else if (choice === "required") out = { type: "any" };
  else if (choice && typeof choice === "object") {
    const c = choice as { type?: unknown; function?: { name?: string }; allowed_tools?: { mode?: unknown; tools?: unknown } };
    if (c.type === "allowed_tools") out = allowedTools(c.allowed_tools);
    else if (c.function?.name) out = { type: "tool", name: c.function.name };
  }
  // Anthropic's `{type: "none"}` has no `disable_parallel_tool_use` (only auto, any and tool take
  // it) and is refused with it; no call means none in parallel either. Zed's agent sends the pair.
  if (parallel === false && out?.type !== "none") out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true };
  return out;
}


