/**
 * Scripted upstream answers in each vendor's streaming wire format, for tests that need the
 * model to say something specific (call a tool, think first, stop at the token cap). The
 * frames are shaped like the vendors' own (see the recorded fixtures in test/fixtures/openai/
 * and test/fixtures/anthropic/).
 */
import type { RecordedRequest, Reply } from "./fake-upstream.ts";

export interface ScriptedCall {
  id: string;
  name: string;
  /** The arguments as JSON text, exactly as the model writes them. */
  arguments: string;
}

export interface Script {
  reasoning?: string;
  text?: string;
  calls?: ScriptedCall[];
  /** Why the model stopped; default: tool calls when there are any, else a normal stop. */
  stop?: "stop" | "length" | "tool_calls";
  /**
   * `reasoning`: the reasoning share of `output`, reported as each vendor does (left out when undefined).
   * `input` is fresh input; the cache counts come on top of it, written as each vendor does:
   * Anthropic apart from `input_tokens` (writes split by lifetime in `cache_creation`), OpenAI inside
   * `prompt_tokens` (`cached_tokens`; writes as `cache_write_tokens`, OpenRouter's dialect).
   */
  usage?: ScriptUsage;
}

export interface ScriptUsage {
  input: number;
  output: number;
  reasoning?: number;
  cacheRead?: number;
  cacheWrite5m?: number;
  cacheWrite1h?: number;
}

/** Anthropic's cache fields of a usage object (both counts, and the writes by lifetime). */
function anthropicCache(u: ScriptUsage) {
  const w5 = u.cacheWrite5m ?? 0;
  const w1 = u.cacheWrite1h ?? 0;
  return { cache_creation_input_tokens: w5 + w1, cache_read_input_tokens: u.cacheRead ?? 0, cache_creation: { ephemeral_5m_input_tokens: w5, ephemeral_1h_input_tokens: w1 } };
}

/** Splits text into a few pieces, so deltas really arrive in parts. */
function pieces(text: string, n = 3): string[] {
  if (text.length <= n) return [text];
  const size = Math.ceil(text.length / n);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/**
 * The wire dialects a script is written in: OpenAI's chat completions, the same wire as DeepSeek
 * and vLLM extend it (the reasoning text in `reasoning_content`, which OpenAI's chat API never
 * sends), and Anthropic's messages.
 */
export type Dialect = "openai" | "deepseek" | "anthropic";

/**
 * The dialect that carries reasoning text on an upstream kind: Anthropic's thinking blocks, and on
 * the OpenAI kind DeepSeek's `reasoning_content` (OpenAI's own chat API reports only a count).
 */
export const reasoningDialect = (vendor: "openai" | "anthropic"): Dialect => (vendor === "openai" ? "deepseek" : vendor);

function noReasoningText(s: Script): void {
  if (s.reasoning) throw new Error("OpenAI's chat API sends no reasoning text: script it in the deepseek dialect (reasoning_content)");
}

/** OpenAI's chat completions stream; a script with reasoning text is refused (see `deepseekStream`). */
export function openaiStream(s: Script): Reply {
  noReasoningText(s);
  return chatStream(s, "gpt-4o-mini-2024-07-18");
}

/** DeepSeek's (and vLLM's) chat completions stream: OpenAI's, with the thinking as `reasoning_content` deltas first. */
export function deepseekStream(s: Script): Reply {
  return chatStream(s, "deepseek-reasoner");
}

function chatStream(s: Script, model: string): Reply {
  const head = { id: "chatcmpl-Scripted0000000000000000000", object: "chat.completion.chunk", created: 1761565012, model, service_tier: "default", system_fingerprint: "fp_560af6e559" };
  const chunk = (delta: unknown, finish: string | null = null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null })}\n\n`;
  const chunks = [chunk({ role: "assistant", content: s.calls?.length && !s.text ? null : "", refusal: null })];
  if (s.reasoning) for (const p of pieces(s.reasoning)) chunks.push(chunk({ reasoning_content: p }));
  if (s.text) for (const p of pieces(s.text)) chunks.push(chunk({ content: p }));
  s.calls?.forEach((call, index) => {
    chunks.push(chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] }));
    for (const p of pieces(call.arguments)) chunks.push(chunk({ tool_calls: [{ index, function: { arguments: p } }] }));
  });
  chunks.push(chunk({}, s.stop ?? (s.calls?.length ? "tool_calls" : "stop")));
  const usage = s.usage ?? { input: 50, output: 10 };
  chunks.push(`data: ${JSON.stringify({ ...head, choices: [], usage: openaiUsage(usage) })}\n\n`);
  chunks.push("data: [DONE]\n\n");
  return { kind: "sse", chunks };
}

export function anthropicStream(s: Script): Reply {
  const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify({ type, ...(data as object) })}\n\n`;
  const usage = s.usage ?? { input: 50, output: 10 };
  const chunks = [
    ev("message_start", {
      message: { id: "msg_01Scripted000000000000", type: "message", role: "assistant", model: "claude-sonnet-4-5-20250929", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: usage.input, ...anthropicCache(usage), output_tokens: 1 } },
    }),
  ];
  let block = 0;
  if (s.reasoning) {
    chunks.push(ev("content_block_start", { index: block, content_block: { type: "thinking", thinking: "", signature: "" } }));
    for (const p of pieces(s.reasoning)) chunks.push(ev("content_block_delta", { index: block, delta: { type: "thinking_delta", thinking: p } }));
    chunks.push(ev("content_block_delta", { index: block, delta: { type: "signature_delta", signature: SIGNATURE } }));
    chunks.push(ev("content_block_stop", { index: block++ }));
  }
  if (s.text) {
    chunks.push(ev("content_block_start", { index: block, content_block: { type: "text", text: "" } }));
    for (const p of pieces(s.text)) chunks.push(ev("content_block_delta", { index: block, delta: { type: "text_delta", text: p } }));
    chunks.push(ev("content_block_stop", { index: block++ }));
  }
  for (const call of s.calls ?? []) {
    chunks.push(ev("content_block_start", { index: block, content_block: { type: "tool_use", id: call.id, name: call.name, input: {} } }));
    chunks.push(ev("content_block_delta", { index: block, delta: { type: "input_json_delta", partial_json: "" } }));
    for (const p of pieces(call.arguments)) chunks.push(ev("content_block_delta", { index: block, delta: { type: "input_json_delta", partial_json: p } }));
    chunks.push(ev("content_block_stop", { index: block++ }));
  }
  const stop = s.stop === "length" ? "max_tokens" : s.stop === "stop" ? "end_turn" : s.calls?.length ? "tool_use" : "end_turn";
  chunks.push(ev("message_delta", { delta: { stop_reason: stop, stop_sequence: null }, usage: anthropicDeltaUsage(usage) }));
  chunks.push(ev("message_stop", {}));
  return { kind: "sse", chunks };
}

const SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";

function openaiUsage(u: ScriptUsage) {
  const writes = (u.cacheWrite5m ?? 0) + (u.cacheWrite1h ?? 0);
  const prompt = u.input + (u.cacheRead ?? 0) + writes;
  const cached = u.cacheRead !== undefined || writes > 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    ...(cached ? { prompt_tokens_details: { cached_tokens: u.cacheRead ?? 0, ...(writes > 0 ? { cache_write_tokens: writes } : {}), audio_tokens: 0 } } : {}),
    ...(u.reasoning !== undefined ? { completion_tokens_details: { reasoning_tokens: u.reasoning } } : {}),
  };
}

/** message_delta's usage: the output, and (as Anthropic's API has since 2025) the prompt's counts again when they are cached. */
function anthropicDeltaUsage(u: ScriptUsage) {
  const cached = u.cacheRead !== undefined || u.cacheWrite5m !== undefined || u.cacheWrite1h !== undefined;
  return {
    ...(cached ? { input_tokens: u.input, ...anthropicCache(u) } : {}),
    output_tokens: u.output,
    ...(u.reasoning !== undefined ? { output_tokens_details: { thinking_tokens: u.reasoning } } : {}),
  };
}

/** The script as a whole OpenAI `chat.completion` body; a script with reasoning text is refused (see `deepseekBody`). */
export function openaiBody(s: Script): Reply {
  noReasoningText(s);
  return chatBody(s, "gpt-4o-mini-2024-07-18");
}

/** The script as a whole DeepSeek `chat.completion` body: OpenAI's, with the thinking in `message.reasoning_content`. */
export function deepseekBody(s: Script): Reply {
  return chatBody(s, "deepseek-reasoner");
}

function chatBody(s: Script, model: string): Reply {
  const usage = s.usage ?? { input: 50, output: 10 };
  const message: Record<string, unknown> = { role: "assistant", content: s.text ?? null, refusal: null, annotations: [] };
  if (s.reasoning) message.reasoning_content = s.reasoning;
  if (s.calls?.length) message.tool_calls = s.calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  const finish = s.stop ?? (s.calls?.length ? "tool_calls" : "stop");
  return {
    kind: "json",
    body: { id: "chatcmpl-Scripted0000000000000000000", object: "chat.completion", created: 1761565012, model, choices: [{ index: 0, message, logprobs: null, finish_reason: finish }], usage: openaiUsage(usage) },
  };
}

/** The script as a whole Anthropic `message` body; `noUsage` leaves usage out (a compatible server that reports none). */
export function anthropicBody(s: Script & { noUsage?: boolean }): Reply {
  const usage = s.usage ?? { input: 50, output: 10 };
  const content: unknown[] = [];
  if (s.reasoning) content.push({ type: "thinking", thinking: s.reasoning, signature: SIGNATURE });
  if (s.text) content.push({ type: "text", text: s.text });
  for (const call of s.calls ?? []) content.push({ type: "tool_use", id: call.id, name: call.name, input: JSON.parse(call.arguments) });
  const stop = s.stop === "length" ? "max_tokens" : s.stop === "stop" ? "end_turn" : s.calls?.length ? "tool_use" : "end_turn";
  const body: Record<string, unknown> = { id: "msg_01Scripted000000000000", type: "message", role: "assistant", model: "claude-sonnet-4-5-20250929", content, stop_reason: stop, stop_sequence: null };
  if (!s.noUsage) body.usage = { input_tokens: usage.input, ...anthropicCache(usage), ...anthropicDeltaUsage(usage) };
  return { kind: "json", body };
}

/** The signature every scripted Anthropic thinking block carries. */
export const SCRIPTED_SIGNATURE = SIGNATURE;

/** The same script as a stream in a dialect's wire format. */
export function scripted(dialect: Dialect, s: Script): Reply {
  return dialect === "openai" ? openaiStream(s) : dialect === "deepseek" ? deepseekStream(s) : anthropicStream(s);
}

/**
 * The script in the upstream's format and in the shape the request asks for: a stream when it
 * says `stream: true`, else a whole body. Clients that stream some calls and not others (the AI
 * SDK's generateText and streamText) get the same answer either way.
 */
export function scriptedReply(dialect: Dialect, s: Script): (req: RecordedRequest) => Reply {
  return (req) => (req.body?.stream === true ? scripted(dialect, s) : dialect === "openai" ? openaiBody(s) : dialect === "deepseek" ? deepseekBody(s) : anthropicBody(s));
}

/**
 * A streamed answer that waits after its first `after` frames, as a vendor's does while the model
 * thinks out of sight before the answer begins: `fillers` (Anthropic's pings, a Responses or
 * OpenRouter keep-alive comment) written `delayMs` apart (every frame of it is, the fake upstream's
 * pace being one for the whole stream).
 */
export function withWait(reply: Reply, after: number, fillers: string[], delayMs: number): Reply {
  if (reply.kind !== "sse") throw new Error("withWait takes a streamed answer");
  return { ...reply, chunks: [...reply.chunks.slice(0, after), ...fillers, ...reply.chunks.slice(after)], delayMs };
}
