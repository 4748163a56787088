/**
 * A loopback fake of the OpenAI and Anthropic HTTP APIs for gateway tests.
 *
 * - Every request is recorded (headers lowercased, JSON body parsed when possible).
 * - Replies queued with `reply()` are used first (FIFO); with an empty queue the fake answers like the
 *   real vendors, byte for byte in shape: `POST /v1/chat/completions` (OpenAI) and `POST /v1/messages`
 *   (Anthropic) echo the last user message as `Echo: <text>`, streaming or not.
 * - Streamed bodies are written with Bun "direct" streams: each chunk is written, flushed and followed by
 *   a turn of the event loop (or `delayMs`), so split frames really leave as separate TCP writes.
 *   Client disconnects are observed through `cancel()` / the request signal (see `abortedStreams()`).
 *
 * - With an empty queue it also refuses, with the vendor's status and error body, what the real vendors
 *   refuse and a gateway could get wrong when it rewrites or translates a request (see `vendorRefusal`):
 *   Anthropic: a thinking budget under 1024 or not below max_tokens, adaptive thinking before Claude 4.6,
 *   a thinking budget with a forced tool, a temperature or top_p it does not take, structured outputs before
 *   Claude 4.5 or with a schema it refuses (open objects, numeric and length bounds), unknown roles,
 *   tool_use without its tool_result right after, and what the current Claude models refuse that older ones
 *   take (see `currentClaudeRefusal`); OpenAI: unknown roles, tool messages without
 *   tool_call_id or without the assistant tool_calls they answer, unanswered tool_calls, more than 4
 *   stop sequences, reasoning_effort on gpt-4* models, a temperature on reasoning models, a strict
 *   json_schema that is not closed and fully required, and (with `strict: true`) top-level fields
 *   that are not OpenAI's; OpenAI's Responses API (through `vendorRefusal`, which responses-wire.ts's
 *   `answerWith` calls): `max_output_tokens` under 16. Queued replies are never checked.
 * - `POST /v1/messages/count_tokens` answers `{input_tokens}` as Anthropic does.
 * - `POST /v1/embeddings` answers like OpenAI's embeddings API (see `fakeEmbedding` for the vectors),
 *   float or base64 as asked, and refuses malformed input with OpenAI's words.
 *
 * Note: Bun sends a streamed response's status line and headers together with its first body bytes, so a
 * stream whose first chunk never comes looks like `hang` to the client.
 */
import { beforeEach } from "bun:test";
import { readFileSync } from "node:fs";
import { fileFixture } from "./file-fixture.ts";

export interface RecordedRequest {
  method: string;
  /** URL pathname only (no query string); see `url` for the full URL. */
  path: string;
  headers: Record<string, string>;
  /** The body parsed as JSON, or `undefined` when empty or not JSON (see `rawBody`). */
  body: any;
  rawBody: string;
  /** Full request URL including the query string. */
  url: string;
}

export type Reply =
  | { kind: "json"; status?: number; headers?: Record<string, string>; body: unknown }
  | { kind: "text"; status?: number; headers?: Record<string, string>; body: string }
  /** Raw bytes, e.g. an image file the upstream serves. */
  | { kind: "bytes"; status?: number; headers?: Record<string, string>; body: Uint8Array }
  | {
      kind: "sse";
      status?: number;
      headers?: Record<string, string>;
      chunks: (string | Uint8Array)[];
      delayMs?: number;
      holdOpen?: boolean;
      /** With `holdOpen`: chunks written once `finishHeld()` lets the stream go on (the rest of a normal answer). */
      afterHold?: (string | Uint8Array)[];
    }
  | {
      kind: "fixture";
      name: string;
      split?: "frames" | "bytes" | number;
      delayMs?: number;
      status?: number;
      headers?: Record<string, string>;
      holdOpen?: boolean;
    }
  | { kind: "hang" };

export interface FakeUpstream {
  /** e.g. http://127.0.0.1:PORT (no trailing slash) */
  url: string;
  requests: RecordedRequest[];
  /** Queue a reply for the next request (FIFO); with an empty queue the default behaviour applies. */
  reply(r: Reply | ((req: RecordedRequest) => Reply)): void;
  /**
   * A standing rule consulted (after the queue) before the default behaviour: a reply, or undefined
   * for the default. Vendor keys that are refused or rate-limited for a while are told this way.
   */
  rule(fn: ((req: RecordedRequest) => Reply | undefined) | undefined): void;
  /** Responses currently streaming (not yet closed or cancelled). */
  openStreams(): number;
  /** Streaming responses whose client went away before the end (cancel observed). */
  abortedStreams(): number;
  /** Lets every `holdOpen` stream that is waiting go on: it writes its `afterHold` chunks, then its body closes. */
  finishHeld(): void;
  /** Clear recorded requests, the reply queue, the standing rule and the aborted-stream counter. */
  reset(): void;
  stop(): Promise<void>;
}

const FIXTURES_DIR = new URL("../fixtures/", import.meta.url);

/** The vendors whose recorded answers are fixtures, each in `test/fixtures/<vendor>/`. */
export const FIXTURE_VENDORS = ["anthropic", "openai"] as const;

/** The bytes of `test/fixtures/<vendor>/<name>`: a fixture's name starts with its vendor (`openai-text.sse`). */
export function readFixture(name: string): Uint8Array {
  const vendor = name.slice(0, name.indexOf("-"));
  return new Uint8Array(readFileSync(new URL(`${vendor}/${name}`, FIXTURES_DIR)));
}

const SSE_TYPE = "text/event-stream; charset=utf-8";
const JSON_TYPE = "application/json";
const encoder = new TextEncoder();

function contentTypeFor(name: string): string {
  if (name.endsWith(".sse")) return SSE_TYPE;
  if (name.endsWith(".json")) return JSON_TYPE;
  return "application/octet-stream";
}

/** Split at SSE frame boundaries (blank line: LF LF, CR LF CR LF or CR CR); each piece keeps its terminator. */
function splitFrames(bytes: Uint8Array): Uint8Array[] {
  const text = new TextDecoder().decode(bytes);
  const out: Uint8Array[] = [];
  const re = /\r\n\r\n|\n\n|\r\r/g;
  let start = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const end = m.index + m[0].length;
    out.push(encoder.encode(text.slice(start, end)));
    start = end;
  }
  if (start < text.length) out.push(encoder.encode(text.slice(start)));
  return out;
}

function splitEvery(bytes: Uint8Array, n: number): Uint8Array[] {
  const size = Math.max(1, Math.floor(n));
  const out: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
}

const sleep = (ms: number) => (ms > 0 ? Bun.sleep(ms) : new Promise<void>((r) => setImmediate(r)));

// ---------------------------------------------------------------------------------------------
// Default vendor behaviour
// ---------------------------------------------------------------------------------------------

type Vendor = "openai" | "anthropic";

/** Text of a message content: a string, or the `text` of text parts (tool_result content included). */
function textParts(content: unknown): string[] {
  if (typeof content === "string") return [content];
  if (!Array.isArray(content)) return [];
  const out: string[] = [];
  for (const part of content) {
    if (typeof part === "string") out.push(part);
    else if (part && typeof part === "object") {
      const p = part as Record<string, unknown>;
      if ((p.type === "text" || p.type === undefined) && typeof p.text === "string") out.push(p.text);
      else if (p.type === "tool_result") out.push(...textParts(p.content));
    }
  }
  return out;
}

interface Answer {
  text: string;
  /** Pieces whose concatenation is `text`, one per word (leading whitespace attached). */
  pieces: string[];
  promptTokens: number;
  completionTokens: number;
}

/**
 * `Echo: <text of the last user message>`; text parts are joined with a single space.
 * prompt tokens = ceil(characters of all message text / 4), at least 1 (Anthropic `system` counts too);
 * completion tokens = words in the answer.
 */
function buildAnswer(body: any, vendor: Vendor): Answer {
  const messages: any[] = Array.isArray(body?.messages) ? body.messages : [];
  let chars = 0;
  for (const m of messages) for (const t of textParts(m?.content)) chars += t.length;
  if (vendor === "anthropic") for (const t of textParts(body?.system)) chars += t.length;
  let lastUser = "";
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]?.role === "user") {
      lastUser = textParts(messages[i].content).join(" ");
      break;
    }
  }
  const text = `Echo: ${lastUser}`;
  const pieces: string[] = [...(text.match(/\s*\S+/g) ?? [])];
  const words = pieces.length;
  const rest = text.slice(pieces.join("").length);
  if (rest) {
    if (pieces.length) pieces[pieces.length - 1] += rest;
    else pieces.push(rest);
  }
  return { text, pieces, promptTokens: Math.max(1, Math.ceil(chars / 4)), completionTokens: words };
}

/** Dimensions of the fake's embeddings when a request names none (text-embedding-3-small's). */
export const FAKE_EMBEDDING_DIMENSIONS = 1536;

/**
 * The vector the fake answers for one input: float32 values (as OpenAI's are) from a generator
 * seeded by the input, scaled to length 1, so tests can compute what the upstream sent. Full
 * 24-bit mantissas, so any loss on the way (float64 bytes, big-endian, rounding) shows.
 */
export function fakeEmbedding(input: string | number[], dimensions = FAKE_EMBEDDING_DIMENSIONS): number[] {
  let seed = 2166136261;
  for (const c of typeof input === "string" ? input : input.join(",")) seed = Math.imul(seed ^ c.charCodeAt(0), 16777619);
  const raw: number[] = [];
  for (let i = 0; i < dimensions; i++) {
    // xorshift32
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    raw.push(((seed >>> 0) / 2 ** 32) * 2 - 1);
  }
  const norm = Math.hypot(...raw) || 1;
  return raw.map((x) => Math.fround(x / norm));
}

/** OpenAI's usage for embeddings: about 4 characters a token per string (at least 1), token arrays by length. */
export function fakeEmbeddingTokens(input: string | number[]): number {
  return typeof input === "string" ? Math.max(1, Math.ceil(input.length / 4)) : input.length;
}

/** Float32 values little-endian in base64, as OpenAI answers `encoding_format: "base64"`. */
export function fakeEmbeddingBase64(vector: number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString("base64");
}

const OBF_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/** Deterministic stand-in for OpenAI's random `obfuscation` padding. */
function obfuscation(i: number): string {
  const len = 1 + ((i * 7) % 12);
  let s = "";
  for (let k = 0; k < len; k++) s += OBF_ALPHABET[(i * 31 + k * 17) % OBF_ALPHABET.length];
  return s;
}

function openaiUsage(a: Answer) {
  return {
    prompt_tokens: a.promptTokens,
    completion_tokens: a.completionTokens,
    total_tokens: a.promptTokens + a.completionTokens,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function openaiError(status: number, message: string, type = "invalid_request_error", code: string | null = null): Reply {
  return { kind: "json", status, body: { error: { message, type, param: null, code } } };
}

function anthropicError(status: number, type: string, message: string, requestId: string): Reply {
  return { kind: "json", status, headers: { "request-id": requestId }, body: { type: "error", error: { type, message }, request_id: requestId } };
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

interface StreamState {
  finished: boolean;
  aborted: boolean;
  release: () => void;
}

/** One fake upstream for a test file, with nothing queued or recorded at the start of each test. */
export interface FakeUpstreamOptions {
  /** Also refuse OpenAI requests with top-level fields OpenAI does not know (off by default: some tests pass extra fields through on purpose). */
  strict?: boolean;
  /** Pause between the chunks of the default streamed answers (default: one turn of the event loop). */
  streamDelayMs?: number;
  /**
   * Also refuse, as Anthropic does, thinking when the last assistant turn with tool calls does not
   * start with a thinking block (off by default: Claude Code's recorded turns were answered
   * without thinking, so their history has none, which the real vendor never sees).
   */
  thinkingHistory?: boolean;
}

export function useFakeUpstream(options: FakeUpstreamOptions = {}): FakeUpstream {
  const upstream = fileFixture("the fake upstream", () => startFakeUpstream(options), (u) => u.stop());
  beforeEach(() => upstream.reset());
  return upstream;
}

/** Every top-level parameter of OpenAI's chat completions API. */
const OPENAI_CHAT_FIELDS = new Set([
  "model", "messages", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs", "max_completion_tokens",
  "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
  "prompt_cache_retention", "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop", "store",
  "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
]);
const OPENAI_ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);
const ANTHROPIC_ROLES = new Set(["user", "assistant", "system"]);

/** What OpenAI answers with 400 for a body the gateway built wrong, in OpenAI's words; undefined when it would accept it. */
function openaiRefusal(body: any, strict: boolean): string | undefined {
  if (strict) for (const field of Object.keys(body)) if (!OPENAI_CHAT_FIELDS.has(field)) return `Unrecognized request argument supplied: ${field}`;
  // OpenAI's limit for end-user ids (the gateway hashes Claude Code's metadata.user_id into `user`).
  for (const field of ["user", "safety_identifier"]) {
    const id = body[field];
    if (typeof id === "string" && id.length > 64) return `Invalid '${field}': string too long. Expected a string with maximum length 64, but got a string with length ${id.length} instead.`;
  }
  if (Array.isArray(body.stop) && body.stop.length > 4) return `Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length ${body.stop.length} instead.`;
  const model = String(body.model ?? "");
  // Models that do not reason refuse reasoning controls; those that do refuse other sampling than the default.
  if (body.reasoning_effort != null && /^(gpt-4|gpt-3\.5|chatgpt-)/.test(model)) return "Unsupported parameter: 'reasoning_effort' is not supported with this model.";
  if (/^(o\d|gpt-5)/.test(model) && typeof body.temperature === "number" && body.temperature !== 1) {
    return `Unsupported value: 'temperature' does not support ${body.temperature} with this model. Only the default (1) value is supported.`;
  }
  const format = body.response_format;
  if (format?.type === "json_schema" && format.json_schema?.strict === true) {
    const problem = strictSchemaProblem(format.json_schema.schema, []);
    if (problem) return `Invalid schema for response_format '${format.json_schema.name}': ${problem}`;
  }
  const messages: any[] = body.messages;
  let pending = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!OPENAI_ROLES.has(m?.role)) {
      return `Invalid value: '${String(m?.role)}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.`;
    }
    if (m.role === "tool") {
      if (typeof m.tool_call_id !== "string") return `Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.`;
      if (!pending.delete(m.tool_call_id)) return `Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.`;
      continue;
    }
    if (pending.size > 0) {
      return `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...pending].join(", ")}`;
    }
    if (m.role === "assistant" && Array.isArray(m.tool_calls)) pending = new Set(m.tool_calls.map((c: any) => c?.id));
  }
  return undefined;
}

/** What OpenAI's strict mode refuses in a schema (objects must be closed and require every property), in its words. */
function strictSchemaProblem(node: any, path: string[]): string | undefined {
  if (!node || typeof node !== "object") return undefined;
  const where = `In context=(${path.map((p) => `'${p}'`).join(", ")}${path.length === 1 ? "," : ""})`;
  if (node.type === "object" || node.properties) {
    if (node.additionalProperties !== false) return `${where}, 'additionalProperties' is required to be supplied and to be false.`;
    const missing = Object.keys(node.properties ?? {}).filter((k) => !(node.required ?? []).includes(k));
    if (missing.length) return `${where}, 'required' is required to be supplied and to be an array including every key in properties. Missing '${missing[0]}'.`;
  }
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const problem = strictSchemaProblem(child, [...path, "properties", key]);
    if (problem) return problem;
  }
  if (node.items) return strictSchemaProblem(node.items, [...path, "items"]);
  return undefined;
}

/** Keywords Anthropic's structured outputs refuse in a schema. */
const ANTHROPIC_UNSUPPORTED_SCHEMA = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "maxItems", "uniqueItems", "oneOf"];

/** What Anthropic's structured outputs refuse in a schema, in words like its own. */
function anthropicSchemaProblem(node: any, path: string): string | undefined {
  if (!node || typeof node !== "object") return undefined;
  for (const key of ANTHROPIC_UNSUPPORTED_SCHEMA) if (key in node) return `output_config.format.schema${path}: property '${key}' is not supported`;
  if (node.type === "object" && node.additionalProperties !== false) return `output_config.format.schema${path}: For 'object' type, 'additionalProperties' must be explicitly set to false`;
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const problem = anthropicSchemaProblem(child, `${path}.properties.${key}`);
    if (problem) return problem;
  }
  for (const [i, child] of (node.anyOf ?? []).entries()) {
    const problem = anthropicSchemaProblem(child, `${path}.anyOf.${i}`);
    if (problem) return problem;
  }
  if (node.items) return anthropicSchemaProblem(node.items, `${path}.items`);
  return undefined;
}

/** Claude's family and version as major × 100 + minor (claude-sonnet-4-5 → sonnet 405); undefined for other names. */
function claudeModel(model: string): { family: string; version: number } | undefined {
  const m = /claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:-(\d{1,2})(?!\d))?/.exec(model);
  return m ? { family: m[1]!, version: Number(m[2]) * 100 + Number(m[3] ?? 0) } : undefined;
}

/**
 * What the current Claude models refuse of a request that older ones take, in Anthropic's words
 * (platform.claude.com/docs/en/build-with-claude/thinking, "Limits and feature compatibility";
 * each model's migration guide): non-default sampling parameters (Opus 4.7, Sonnet 5 and later),
 * a last assistant turn (Claude 4.6 and later), forced tool use (Sonnet and Opus 5.5, Fable and Mythos 5.1), thinking budgets (Opus 4.7, Sonnet 5
 * and later), thinking turned off where it cannot be (Sonnet 5.5 takes `between_tools` instead;
 * Opus 5.5, Fable, Mythos take neither), `between_tools` anywhere else or with other fields.
 */
function currentClaudeRefusal(body: any, claude: { family: string; version: number } | undefined): string | undefined {
  if (!claude) return undefined;
  const messages: any[] = Array.isArray(body.messages) ? body.messages : [];
  if (claude.version >= 406 && messages.at(-1)?.role === "assistant") return "This model does not support assistant message prefill. The conversation must end with a user message.";
  if (claude.version >= 407) {
    for (const name of ["temperature", "top_p", "top_k"]) {
      if (body[name] !== undefined && body[name] !== null && !(name !== "top_k" && body[name] === 1)) return `${name}: a non-default value is not supported for this model.`;
    }
  }
  const forcedToolRefused = ((claude.family === "opus" || claude.family === "sonnet") && claude.version >= 505) || ((claude.family === "fable" || claude.family === "mythos") && claude.version >= 501);
  if (forcedToolRefused && (body.tool_choice?.type === "any" || body.tool_choice?.type === "tool")) return 'tool_choice: type "tool" and "any" are not supported for this model.';
  const effort = body.output_config?.effort;
  if ((effort === "xhigh" && claude.version < 407) || (effort === "max" && (claude.version < 406 || (claude.family === "haiku" && claude.version < 505)))) return `output_config.effort: '${effort}' is not supported for this model.`;
  const thinking = body.thinking;
  const adaptiveOnly = "Use \"thinking.type.adaptive\" and \"output_config.effort\" to control thinking behavior.";
  if (thinking?.type === "enabled" && claude.version >= 407) return `"thinking.type.enabled" is not supported for this model. ${adaptiveOnly}`;
  const sonnet55 = claude.family === "sonnet" && claude.version >= 505;
  const alwaysThinks = claude.family === "fable" || claude.family === "mythos" || (claude.family === "opus" && claude.version >= 505);
  if (thinking?.type === "disabled" && sonnet55) return 'To turn thinking off on this model, send "thinking": {"type": "between_tools"} instead of {"type": "disabled"}. The model does not think before responding. The short updates it writes between tool calls come back as thinking blocks.';
  if (thinking?.type === "disabled" && alwaysThinks) return `"thinking.type.disabled" is not supported for this model. ${adaptiveOnly}`;
  if (thinking?.type === "between_tools") {
    if (!sonnet55) return "thinking.type: 'between_tools' is not supported for this model.";
    if (Object.keys(thinking).length > 1) return "thinking.between_tools: Extra inputs are not permitted";
    if (body.output_config?.effort === "xhigh" || body.output_config?.effort === "max") return "thinking.type 'between_tools' is not supported at effort xhigh or max.";
  }
  if (thinking?.display !== undefined && !["summarized", "omitted", "updates"].includes(thinking.display)) return `thinking.display: Input should be 'summarized', 'omitted' or 'updates'`;
  return undefined;
}

/** The same for Anthropic, in Anthropic's words. */
function anthropicRefusal(body: any, options: FakeUpstreamOptions): string | undefined {
  if (typeof body.max_tokens !== "number") return "max_tokens: Field required";
  const claude = claudeModel(String(body.model ?? ""));
  const version = claude?.version;
  const current = currentClaudeRefusal(body, claude);
  if (current) return current;
  const thinking = body.thinking;
  if (thinking?.type === "enabled") {
    if (typeof thinking.budget_tokens !== "number" || thinking.budget_tokens < 1024) return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
    if (thinking.budget_tokens >= body.max_tokens) {
      return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size";
    }
  }
  if (thinking?.type === "adaptive" && version !== undefined && version < 406) return "thinking.type: 'adaptive' is not supported for this model. Use 'enabled' with budget_tokens.";
  if (thinking?.type === "enabled" || thinking?.type === "adaptive") {
    if (typeof body.temperature === "number" && body.temperature !== 1) return "`temperature` may only be set to 1 when thinking is enabled or in extended thinking mode. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking";
    if (typeof body.top_p === "number" && body.top_p < 0.95) return "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking";
  }
  // Manual extended thinking only: adaptive thinking takes a forced tool, and no turn needs to start
  // with a thinking block (platform.claude.com/docs/en/build-with-claude/thinking, "Thinking with tool use").
  if (thinking?.type === "enabled") {
    if (body.tool_choice?.type === "any" || body.tool_choice?.type === "tool") return "Thinking may not be enabled when tool_choice forces tool use.";
    const messages: any[] = Array.isArray(body.messages) ? body.messages : [];
    const last = messages.findLastIndex((m) => m?.role === "assistant");
    const blocks: any[] = last === -1 || !Array.isArray(messages[last].content) ? [] : messages[last].content;
    if (options.thinkingHistory && blocks.some((b) => b?.type === "tool_use") && blocks[0]?.type !== "thinking" && blocks[0]?.type !== "redacted_thinking") {
      return `messages.${last}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${blocks[0]?.type}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking`;
    }
  }
  const format = body.output_config?.format;
  if (format !== undefined) {
    if (version !== undefined && version < 405) return "output_config.format: structured outputs are not supported for this model.";
    if (format?.type !== "json_schema" || !format.schema || typeof format.schema !== "object") return "output_config.format.schema: Field required";
    const problem = anthropicSchemaProblem(format.schema, "");
    if (problem) return problem;
  }
  const messages: any[] = body.messages;
  let pending: string[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!ANTHROPIC_ROLES.has(m?.role)) return `messages.${i}.role: Input should be 'user', 'assistant' or 'system'`;
    const blocks: any[] = Array.isArray(m.content) ? m.content : [];
    const results = blocks.filter((b) => b?.type === "tool_result").map((b) => b.tool_use_id);
    if (pending.length > 0) {
      const missing = pending.filter((id) => !results.includes(id));
      if (m.role !== "user" || missing.length > 0) {
        return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ") || pending.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
      }
    }
    const known = new Set(pending);
    for (const id of results) {
      if (!known.has(id)) {
        return `messages.${i}.content: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
      }
    }
    pending = m.role === "assistant" ? blocks.filter((b) => b?.type === "tool_use").map((b) => b.id) : [];
  }
  return undefined;
}

/** What OpenAI's Responses API answers with 400 for a body the gateway built wrong, in OpenAI's words. */
function responsesRefusal(body: any): { message: string; param: string; code: string } | undefined {
  const max = body?.max_output_tokens;
  // The Responses API's floor (chat completions and Anthropic take 1).
  if (typeof max === "number" && max < 16) {
    return { message: `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got ${max} instead.`, param: "max_output_tokens", code: "integer_below_min_value" };
  }
  return undefined;
}

/**
 * The refusal the real vendor would answer this request with (by its path: chat completions,
 * the Responses API or messages), or undefined when it would accept it. For reply functions that
 * answer something of their own but should still be refused like the default replies are.
 */
export function vendorRefusal(rec: RecordedRequest, options: FakeUpstreamOptions = {}): Reply | undefined {
  if (rec.path === "/v1/responses") {
    const refusal = responsesRefusal(rec.body);
    return refusal ? { kind: "json", status: 400, body: { error: { message: refusal.message, type: "invalid_request_error", param: refusal.param, code: refusal.code } } } : undefined;
  }
  if (!rec.body || typeof rec.body !== "object" || !Array.isArray(rec.body.messages)) return undefined;
  if (rec.path === "/v1/chat/completions") {
    const refusal = openaiRefusal(rec.body, options.strict === true);
    return refusal ? openaiError(400, refusal) : undefined;
  }
  if (rec.path === "/v1/messages") {
    const refusal = anthropicRefusal(rec.body, options);
    return refusal ? anthropicError(400, "invalid_request_error", refusal, "req_011CFakeRefusal") : undefined;
  }
  return undefined;
}

export async function startFakeUpstream(options: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const requests: RecordedRequest[] = [];
  const queue: (Reply | ((req: RecordedRequest) => Reply))[] = [];
  const live = new Set<StreamState>();
  const hangs = new Set<() => void>();
  let aborted = 0;
  let rule: ((req: RecordedRequest) => Reply | undefined) | undefined;
  let seq = 0;
  let stopping = false;

  const pad = (n: number, width: number) => String(n).padStart(width, "0");

  function streamResponse(
    chunks: (string | Uint8Array)[],
    opts: { status?: number; headers: Record<string, string>; delayMs?: number; holdOpen?: boolean; afterHold?: (string | Uint8Array)[] },
    signal: AbortSignal,
  ): Response {
    let releaseHold!: () => void;
    const held = new Promise<void>((r) => (releaseHold = r));
    const state: StreamState = { finished: false, aborted: false, release: releaseHold };
    live.add(state);
    const onGone = () => {
      if (state.finished || state.aborted) return;
      state.aborted = true;
      aborted++;
      live.delete(state);
      releaseHold();
    };
    signal.addEventListener("abort", onGone, { once: true });
    const finish = () => {
      if (!state.aborted && !state.finished) {
        state.finished = true;
        live.delete(state);
      }
      signal.removeEventListener("abort", onGone);
    };

    const body = new ReadableStream({
      type: "direct",
      async pull(controller) {
        try {
          for (let i = 0; i < chunks.length; i++) {
            if (state.aborted || stopping) break;
            if (i > 0) await sleep(opts.delayMs ?? 0);
            if (state.aborted || stopping) break;
            const written = await controller.write(chunks[i]);
            await controller.flush();
            if (written === 0 && (typeof chunks[i] === "string" ? chunks[i].length : (chunks[i] as Uint8Array).length) > 0) {
              onGone();
              break;
            }
            // Give the socket a turn so every chunk leaves as its own TCP write.
            if (opts.delayMs === undefined || opts.delayMs <= 0) await sleep(0);
          }
          if (opts.holdOpen && !state.aborted && !stopping) {
            await held;
            for (const chunk of opts.afterHold ?? []) {
              if (state.aborted || stopping) break;
              await controller.write(chunk);
              await controller.flush();
              await sleep(0);
            }
          }
        } catch {
          onGone();
        }
        finish();
        if (!state.aborted) {
          try {
            controller.close();
          } catch {
            /* already gone */
          }
        }
      },
      cancel() {
        onGone();
      },
    });
    return new Response(body, { status: opts.status ?? 200, headers: opts.headers });
  }

  function render(reply: Reply, req: Request): Response | Promise<Response> {
    switch (reply.kind) {
      case "json":
        return new Response(JSON.stringify(reply.body), {
          status: reply.status ?? 200,
          headers: { "content-type": JSON_TYPE, ...reply.headers },
        });
      case "bytes":
        return new Response(reply.body, { status: reply.status ?? 200, headers: { "content-type": "application/octet-stream", ...reply.headers } });
      case "text":
        return new Response(reply.body, {
          status: reply.status ?? 200,
          headers: { "content-type": "text/plain; charset=utf-8", ...reply.headers },
        });
      case "sse":
        return streamResponse(
          reply.chunks,
          { status: reply.status, headers: { "content-type": SSE_TYPE, "cache-control": "no-cache", ...reply.headers }, delayMs: reply.delayMs, holdOpen: reply.holdOpen, afterHold: reply.afterHold },
          req.signal,
        );
      case "fixture": {
        const bytes = readFixture(reply.name);
        const split = reply.split;
        const chunks =
          split === "frames" ? splitFrames(bytes) : split === "bytes" ? splitEvery(bytes, 1) : typeof split === "number" ? splitEvery(bytes, split) : [bytes];
        const type = contentTypeFor(reply.name);
        const headers: Record<string, string> = { "content-type": type };
        if (type === SSE_TYPE) headers["cache-control"] = "no-cache";
        return streamResponse(chunks, { status: reply.status, headers: { ...headers, ...reply.headers }, delayMs: reply.delayMs, holdOpen: reply.holdOpen }, req.signal);
      }
      case "hang":
        return new Promise<Response>((resolve) => {
          const done = () => {
            hangs.delete(done);
            resolve(new Response(null, { status: 503 }));
          };
          if (stopping) return done();
          hangs.add(done);
          req.signal.addEventListener("abort", done, { once: true });
        });
    }
  }

  function defaultReply(rec: RecordedRequest): Reply {
    const n = ++seq;
    const anthropicish =
      rec.path.startsWith("/v1/messages") || rec.path.startsWith("/v1/complete") || "anthropic-version" in rec.headers || "x-api-key" in rec.headers;
    const reqId = anthropicish ? `req_011CFake${pad(n, 16)}` : `req_${pad(n, 32)}`;

    if (rec.method === "POST" && rec.path === "/v1/chat/completions") return openaiDefault(rec, n, reqId);
    if (rec.method === "POST" && rec.path === "/v1/messages") return anthropicDefault(rec, n, reqId);
    if (rec.method === "POST" && rec.path === "/v1/embeddings") return embeddingsDefault(rec, reqId);
    if (rec.method === "POST" && rec.path === "/v1/messages/count_tokens") {
      if (!Array.isArray(rec.body?.messages)) return anthropicError(400, "invalid_request_error", "messages: Field required", reqId);
      const tools = rec.body.tools ? Math.ceil(JSON.stringify(rec.body.tools).length / 4) : 0;
      return { kind: "json", headers: { "request-id": reqId }, body: { input_tokens: buildAnswer(rec.body, "anthropic").promptTokens + tools } };
    }
    // The model lists, as the vendors answer them (key pools probe a refused key with them).
    if (rec.method === "GET" && rec.path === "/v1/models") {
      return anthropicish
        ? { kind: "json", headers: { "request-id": reqId }, body: { data: [{ type: "model", id: "claude-sonnet-4-5", display_name: "Claude Sonnet 4.5", created_at: "2025-09-29T00:00:00Z" }], has_more: false, first_id: "claude-sonnet-4-5", last_id: "claude-sonnet-4-5" } }
        : { kind: "json", headers: { "x-request-id": reqId }, body: { object: "list", data: [{ id: "gpt-4o-mini", object: "model", created: 1721172741, owned_by: "system" }] } };
    }
    if (anthropicish) return anthropicError(404, "not_found_error", "Not Found", reqId);
    const r = openaiError(404, `Invalid URL (${rec.method} ${rec.path})`);
    return { ...r, headers: { "x-request-id": reqId } } as Reply;
  }

  function openaiDefault(rec: RecordedRequest, n: number, reqId: string): Reply {
    const body = rec.body;
    if (!body || typeof body !== "object" || Array.isArray(body)) {
      const r = openaiError(
        400,
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
      );
      return { ...r, headers: { "x-request-id": reqId } } as Reply;
    }
    if (!Array.isArray(body.messages)) {
      const r = openaiError(400, "Missing required parameter: 'messages'.", "invalid_request_error", "missing_required_parameter");
      return { ...r, headers: { "x-request-id": reqId } } as Reply;
    }
    const refusal = openaiRefusal(body, options.strict === true);
    if (refusal) return { ...openaiError(400, refusal), headers: { "x-request-id": reqId } } as Reply;
    const a = buildAnswer(body, "openai");
    const id = `chatcmpl-FakeUp${pad(n, 23)}`;
    const created = Math.floor(Date.now() / 1000);
    const model = typeof body.model === "string" ? body.model : "gpt-4o-mini-2024-07-18";
    const fingerprint = "fp_560af6e559";
    const headers = { "x-request-id": reqId, "openai-processing-ms": "42" };

    if (body.stream !== true) {
      const completion = {
        id,
        object: "chat.completion",
        created,
        model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: a.text, refusal: null, annotations: [] },
            logprobs: null,
            finish_reason: "stop",
          },
        ],
        usage: openaiUsage(a),
        service_tier: "default",
        system_fingerprint: fingerprint,
      };
      // OpenAI pretty-prints its JSON bodies and ends them with a newline.
      return { kind: "text", headers: { "content-type": JSON_TYPE, ...headers }, body: JSON.stringify(completion, null, 2) + "\n" };
    }

    const includeUsage = body.stream_options?.include_usage === true;
    const includeObf = body.stream_options?.include_obfuscation !== false;
    let k = 0;
    const chunk = (choices: unknown[], usage?: unknown) => {
      const c: Record<string, unknown> = {
        id,
        object: "chat.completion.chunk",
        created,
        model,
        service_tier: "default",
        system_fingerprint: fingerprint,
        choices,
      };
      if (includeUsage) c.usage = usage ?? null;
      if (includeObf) c.obfuscation = obfuscation(n + k++);
      return `data: ${JSON.stringify(c)}\n\n`;
    };
    const choice = (delta: unknown, finish: string | null = null) => ({ index: 0, delta, logprobs: null, finish_reason: finish });
    const chunks = [chunk([choice({ role: "assistant", content: "", refusal: null })])];
    for (const p of a.pieces) chunks.push(chunk([choice({ content: p })]));
    chunks.push(chunk([choice({}, "stop")]));
    if (includeUsage) chunks.push(chunk([], openaiUsage(a)));
    chunks.push("data: [DONE]\n\n");
    return { kind: "sse", headers, chunks, delayMs: options.streamDelayMs };
  }

  /** `POST /v1/embeddings` as OpenAI answers it, refusing what it refuses with its words. */
  function embeddingsDefault(rec: RecordedRequest, reqId: string): Reply {
    const body = rec.body;
    const refuse = (message: string, param: string | null = null): Reply => ({
      kind: "json", status: 400, headers: { "x-request-id": reqId }, body: { error: { message, type: "invalid_request_error", param, code: null } },
    });
    if (!body || typeof body !== "object" || Array.isArray(body)) return refuse("We could not parse the JSON body of your request.");
    if (body.input === undefined) return refuse("'input' is a required property");
    const input = body.input;
    const inputs: (string | number[])[] = typeof input === "string" ? [input] : Array.isArray(input) && typeof input[0] === "number" ? [input] : Array.isArray(input) ? input : [];
    const valid = (x: unknown) => (typeof x === "string" && x.length > 0) || (Array.isArray(x) && x.length > 0 && x.every((t) => Number.isInteger(t) && t >= 0));
    if (inputs.length === 0 || inputs.length > 2048 || !inputs.every(valid)) return refuse("'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.");
    if (body.encoding_format !== undefined && body.encoding_format !== "float" && body.encoding_format !== "base64") {
      return refuse(`Invalid value: '${String(body.encoding_format)}'. Supported values are: 'float' and 'base64'.`, "encoding_format");
    }
    const dimensions = body.dimensions ?? FAKE_EMBEDDING_DIMENSIONS;
    if (!Number.isInteger(dimensions) || dimensions < 1 || dimensions > 3072) return refuse("Invalid value for 'dimensions' = " + String(dimensions) + ". Must be between 1 and 3072.", "dimensions");
    let tokens = 0;
    const data = inputs.map((one, index) => {
      tokens += fakeEmbeddingTokens(one);
      const vector = fakeEmbedding(one, dimensions);
      return { object: "embedding", index, embedding: body.encoding_format === "base64" ? fakeEmbeddingBase64(vector) : vector };
    });
    const model = typeof body.model === "string" ? body.model : "text-embedding-3-small";
    const answer = { object: "list", data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } };
    // OpenAI pretty-prints its JSON bodies and ends them with a newline.
    return {
      kind: "text",
      headers: { "content-type": JSON_TYPE, "x-request-id": reqId, "openai-model": model, "openai-processing-ms": "23", "openai-version": "2020-10-01" },
      body: JSON.stringify(answer, null, 2) + "\n",
    };
  }

  function anthropicDefault(rec: RecordedRequest, n: number, reqId: string): Reply {
    const body = rec.body;
    if (!body || typeof body !== "object" || Array.isArray(body)) {
      return anthropicError(400, "invalid_request_error", "There was an issue with the JSON body of the request.", reqId);
    }
    if (!Array.isArray(body.messages)) return anthropicError(400, "invalid_request_error", "messages: Field required", reqId);
    const refusal = anthropicRefusal(body, options);
    if (refusal) return anthropicError(400, "invalid_request_error", refusal, reqId);
    const a = buildAnswer(body, "anthropic");
    const id = `msg_01FakeUp${pad(n, 16)}`;
    const model = typeof body.model === "string" ? body.model : "claude-sonnet-4-5-20250929";
    const headers = { "request-id": reqId };
    const usage = (output: number) => ({
      input_tokens: a.promptTokens,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
      output_tokens: output,
      service_tier: "standard",
    });

    if (body.stream !== true) {
      const message = {
        id,
        type: "message",
        role: "assistant",
        model,
        content: [{ type: "text", text: a.text }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: usage(a.completionTokens),
      };
      return { kind: "json", headers, body: message };
    }

    const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
    const chunks = [
      ev("message_start", {
        type: "message_start",
        message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) },
      }),
      ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
      ev("ping", '{"type": "ping"}'),
      ...a.pieces.map((p) => ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: p } })),
      ev("content_block_stop", { type: "content_block_stop", index: 0 }),
      ev("message_delta", {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: { input_tokens: a.promptTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: a.completionTokens },
      }),
      ev("message_stop", { type: "message_stop" }),
    ];
    return { kind: "sse", headers, chunks, delayMs: options.streamDelayMs };
  }

  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const headers: Record<string, string> = {};
      req.headers.forEach((v, k) => (headers[k.toLowerCase()] = v));
      const rawBody = await req.text();
      let body: any;
      if (rawBody.length) {
        try {
          body = JSON.parse(rawBody);
        } catch {
          body = undefined;
        }
      }
      const rec: RecordedRequest = { method: req.method, path: url.pathname, headers, body, rawBody, url: req.url };
      requests.push(rec);
      const next = queue.shift();
      let reply: Reply;
      try {
        reply = next === undefined ? (rule?.(rec) ?? defaultReply(rec)) : typeof next === "function" ? next(rec) : next;
      } catch (e) {
        return new Response(`fake upstream: reply function threw: ${e}`, { status: 500 });
      }
      return render(reply, req);
    },
  });

  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    reply(r) {
      queue.push(r);
    },
    rule(fn) {
      rule = fn;
    },
    openStreams: () => live.size,
    abortedStreams: () => aborted,
    finishHeld() {
      for (const s of live) s.release();
    },
    reset() {
      requests.length = 0;
      queue.length = 0;
      rule = undefined;
      aborted = 0;
    },
    async stop() {
      stopping = true;
      for (const s of live) s.release();
      for (const h of [...hangs]) h();
      await Bun.sleep(0);
      await server.stop(true);
    },
  };
}

/**
 * A recorded body without the prompt-cache marks the gateway adds to requests it translated for
 * Anthropic (formats/openai-chat/openai-to-anthropic.ts), for tests about what else was sent.
 */
export function withoutCacheMarks<T>(value: T): T {
  return JSON.parse(JSON.stringify(value), (key, v) => (key === "cache_control" ? undefined : v)) as T;
}
