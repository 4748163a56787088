import { dropRefusedCounts, hasRefusedCount, imageMarkdown, reportedCount, type ErrorKind, type FinishReason, type StreamEvent } from "../../streaming/events.ts";
import type { ClientSink, EncodeContext } from "../../streaming/client-sink.ts";
import { collectAnswer } from "../common/collect-answer.ts";
import { isJsonObject, JsonObjectProgress, jsonBudget, toolInput } from "../common/json-shape.ts";
import { anthropicToolId } from "../common/tool-call-ids.ts";
import { ToolArgumentsStream } from "../common/json-prefix.ts";

const STOP: Record<FinishReason, string> = {
  stop: "end_turn",
  stop_sequence: "stop_sequence",
  length: "max_tokens",
  tool_calls: "tool_use",
  content_filter: "refusal",
  refusal: "refusal",
};

/**
 * The stop reason, as the upstream ended. Another vendor's refusal (OpenAI's `refusal` field, its
 * finish a plain `stop`) ends `end_turn` with its words as the text: Claude Code takes Anthropic's
 * `refusal` for its own safety classifier's stop, sends the conversation again with a note saying so
 * (a second charged request), and ends the run as an error (a probe of the agent CLIs).
 */
function stopReason(finish: FinishReason | undefined, calledTools: boolean): string {
  // An answer that called tools and ended plainly ended for them: OpenAI's finish is `stop` when
  // `tool_choice` names a function, and some compatible servers (vLLM, Ollama) always say `stop`.
  // Anthropic says `tool_use` whenever the content has a call; agent loops and the AI SDK read
  // `end_turn` beside one as the run's end (an SDK probe, thirty-second session).
  if (calledTools && (finish === undefined || finish === "stop")) return "tool_use";
  return STOP[finish ?? "stop"];
}

const ERROR_TYPE: Record<ErrorKind, string> = {
  invalid_request: "invalid_request_error",
  authentication: "authentication_error",
  permission: "permission_error",
  not_found: "not_found_error",
  request_too_large: "request_too_large",
  insufficient_credits: "billing_error",
  rate_limit: "rate_limit_error",
  upstream: "api_error",
  overloaded: "overloaded_error",
  timeout: "timeout_error",
  internal: "api_error",
};

export function anthropicErrorBody(kind: ErrorKind, message: string, details?: Record<string, unknown>) {
  return { type: "error", error: details ? { type: ERROR_TYPE[kind], message, details } : { type: ERROR_TYPE[kind], message } };
}

/** Our input count is the whole prompt; Anthropic's `input_tokens` leaves out cached tokens. */
function uncached(input: number, cacheRead: number | undefined, cacheWrite: number | undefined): number {
  return Math.max(0, input - (cacheRead ?? 0) - (cacheWrite ?? 0));
}

/**
 * The cache counts of Anthropic's usage, as Anthropic always sends them (0 when nothing was read
 * or written, or the upstream did not say): both counts and the writes by lifetime
 * (`cache_creation`). The SDK's types have them on every message.
 */
function addCacheUsage(usage: Record<string, unknown>, read: number | undefined, write: number | undefined, write1h: number | undefined): void {
  usage.cache_creation_input_tokens = write ?? 0;
  usage.cache_read_input_tokens = read ?? 0;
  usage.cache_creation = { ephemeral_5m_input_tokens: (write ?? 0) - (write1h ?? 0), ephemeral_1h_input_tokens: write1h ?? 0 };
}

/** Anthropic's `service_tier` on a message's usage: "standard" for everything the gateway answers itself. */
const SERVICE_TIER = "standard";

const PING = "event: ping\ndata: {\"type\":\"ping\"}\n\n";

/** Content that, while an open call's arguments are incomplete, waits for them (see `waiting`). */
const WAITS_FOR_CALL: ReadonlySet<StreamEvent["type"]> = new Set(["text", "refusal", "image", "reasoning", "redacted-reasoning"]);

const frame = (name: string, data: string) => `event: ${name}\ndata: ${data}\n\n`;

/**
 * A call's id as an Anthropic client gets it: one Anthropic itself would take back
 * (common/tool-call-ids.ts). Another vendor's id may not be (Kimi's `functions.get_weather:0`), and
 * the client's next turn carries it, to whichever model answers; the rewrite is the one every
 * request to Anthropic gets, so that turn's call and result still match.
 */
const clientToolId = (id: string | undefined, ctx: EncodeContext, index: number) => (id === undefined ? `toolu_${ctx.id}_${index}` : anthropicToolId(id));

/**
 * Events → Anthropic message events. Blocks open lazily when their kind changes;
 * `message_delta` waits for the end because OpenAI upstreams report usage after
 * the finish reason, and Anthropic clients expect both in that one event.
 */
export function createAnthropicEncoder(ctx: EncodeContext): ClientSink {
  let started = false;
  let block = -1;
  let open: "text" | "thinking" | "redacted" | "tool" | null = null;
  let openTool = -1;
  /** The open tool call's arguments so far: whether they are whole decides if the next call may start. */
  let openToolArgs = new JsonObjectProgress();
  /** The open call's arguments as they go out: always JSON, whatever the upstream wrote (common/json-prefix.ts). */
  let openToolOut = new ToolArgumentsStream();
  const toolBlocks = new Map<number, number>();
  /**
   * Calls that began while another call's arguments were still incomplete, held whole until that
   * block can close. OpenAI-compatible servers may interleave the argument chunks of parallel
   * calls; Anthropic never sends a block's delta after its stop, and clients that take blocks in
   * order (the AI SDK's Anthropic provider) keep a call cut short if it comes. A call that starts
   * after the previous one's arguments form a whole JSON value streams at once, as usual.
   */
  const deferred = new Map<number, { id?: string; name?: string; args: JsonObjectProgress }>();
  let inputTokens = 0;
  /** Whether the upstream has said how many prompt tokens there were (else message_start carries the estimate). */
  let reportedInput = false;
  let outputTokens = 0;
  let reasoningTokens: number | undefined;
  let cacheRead: number | undefined;
  let cacheWrite: number | undefined;
  let cacheWrite1h: number | undefined;
  let finish: FinishReason | undefined;
  let stopSequence: string | undefined;
  let wroteText = false;

  const begin = () => {
    if (started) return "";
    started = true;
    const input = reportedInput ? uncached(inputTokens, cacheRead, cacheWrite) : (ctx.inputTokensEstimate ?? 0);
    const usage: Record<string, unknown> = { input_tokens: input };
    addCacheUsage(usage, cacheRead, cacheWrite, cacheWrite1h);
    usage.output_tokens = 0;
    usage.service_tier = SERVICE_TIER;
    const message = { id: ctx.id, type: "message", role: "assistant", model: ctx.model, content: [], stop_reason: null, stop_sequence: null, usage };
    return frame("message_start", JSON.stringify({ type: "message_start", message })) + PING;
  };
  const close = () => {
    if (open === null) return "";
    // Arguments that stopped being JSON are closed into an object (with the upstream's text as `_raw`).
    const rest = open === "tool" ? openToolOut.finish() : "";
    open = null;
    return (rest ? argsDelta(block, rest) : "") + frame("content_block_stop", `{"type":"content_block_stop","index":${block}}`);
  };
  const openBlock = (kind: NonNullable<typeof open>, contentBlock: string) => {
    const out = close() + (replaying ? "" : releaseDeferred(true));
    block += 1;
    open = kind;
    return out + frame("content_block_start", `{"type":"content_block_start","index":${block},"content_block":${contentBlock}}`);
  };
  const toolStart = (index: number, id: string | undefined, name: string | undefined) =>
    JSON.stringify({ type: "tool_use", id: clientToolId(id, ctx, index), name: name ?? "", input: {} });
  const argsDelta = (index: number, args: string) =>
    frame("content_block_delta", `{"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(args)}}}`);
  /**
   * The held calls, each a whole block, once the block before them closed. `wholeOnly` (another
   * block is about to open): only those whose arguments are already whole, in order up to the first
   * that is not; the rest stay held, for their chunks still to come, until the end.
   */
  const releaseDeferred = (wholeOnly: boolean): string => {
    if (deferred.size === 0) return "";
    let out = "";
    const calls: [number, { id?: string; name?: string; args: JsonObjectProgress }][] = [];
    for (const entry of deferred) {
      if (wholeOnly && !entry[1].args.whole) break;
      calls.push(entry);
    }
    for (const [index] of calls) deferred.delete(index);
    for (const [index, call] of calls) {
      block += 1;
      toolBlocks.set(index, block);
      out += frame("content_block_start", `{"type":"content_block_start","index":${block},"content_block":${toolStart(index, call.id, call.name)}}`);
      const args = new ToolArgumentsStream();
      const text = args.push(call.args.text) + args.finish();
      if (text.length > 0) out += argsDelta(block, text);
      out += frame("content_block_stop", `{"type":"content_block_stop","index":${block}}`);
    }
    return out;
  };

  /**
   * Text, thinking or images that came while the open call's arguments were still incomplete: held
   * until they are whole (or the answer ends), so the call's last chunks go out inside its block.
   * Anthropic never sends a block's delta after its stop; the AI SDK's provider cut the call there.
   */
  const waiting: StreamEvent[] = [];
  const callOpen = () => open === "tool" && !openToolArgs.whole;
  /** While what waited is written, calls held meanwhile stay held: they came after it. */
  let replaying = false;
  const releaseWaiting = (): string => {
    if (waiting.length === 0) return "";
    let out = "";
    replaying = true;
    try {
      for (const e of waiting.splice(0)) out += encode(e);
    } finally {
      replaying = false;
    }
    return out;
  };

  const encode = (e: StreamEvent): string => {
      if (WAITS_FOR_CALL.has(e.type) && (callOpen() || waiting.length > 0)) {
        waiting.push(e);
        return begin();
      }
      switch (e.type) {
        case "start":
          if (e.inputTokens !== undefined) {
            inputTokens = e.inputTokens;
            reportedInput = true;
          }
          return begin();
        case "usage":
          if (e.inputTokens !== undefined) {
            inputTokens = e.inputTokens;
            reportedInput = true;
          }
          if (e.outputTokens !== undefined) outputTokens = e.outputTokens;
          if (e.cacheReadTokens !== undefined) cacheRead = e.cacheReadTokens;
          if (e.cacheWriteTokens !== undefined) cacheWrite = e.cacheWriteTokens;
          if (e.cacheWrite1hTokens !== undefined) cacheWrite1h = e.cacheWrite1hTokens;
          if (e.reasoningTokens !== undefined) reasoningTokens = e.reasoningTokens;
          return "";
        case "text":
        case "refusal":
        case "image": {
          const text = e.type === "image" ? imageMarkdown(e.url, wroteText) : e.text;
          wroteText = true;
          let out = begin();
          if (open !== "text") out += openBlock("text", `{"type":"text","text":""}`);
          return out + frame("content_block_delta", `{"type":"content_block_delta","index":${block},"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`);
        }
        case "reasoning": {
          let out = begin();
          if (open !== "thinking") out += openBlock("thinking", `{"type":"thinking","thinking":"","signature":""}`);
          if (e.text) out += frame("content_block_delta", `{"type":"content_block_delta","index":${block},"delta":{"type":"thinking_delta","thinking":${JSON.stringify(e.text)}}}`);
          if (e.signature !== undefined) {
            // The signature seals this block: whatever thinking follows is a block of its own.
            out += frame("content_block_delta", `{"type":"content_block_delta","index":${block},"delta":{"type":"signature_delta","signature":${JSON.stringify(e.signature)}}}`);
            out += close();
          }
          return out;
        }
        case "redacted-reasoning":
          return begin() + openBlock("redacted", JSON.stringify({ type: "redacted_thinking", data: e.data })) + close();
        case "tool-call": {
          let out = begin();
          const held = deferred.get(e.index);
          if (held) {
            held.args.append(e.argumentsDelta);
            held.id ??= e.id;
            held.name ??= e.name;
            return out;
          }
          let index = toolBlocks.get(e.index);
          if (index === undefined) {
            if (deferred.size > 0 || callOpen()) {
              const args = new JsonObjectProgress();
              args.append(e.argumentsDelta);
              deferred.set(e.index, { id: e.id, name: e.name, args });
              return out;
            }
            out += openBlock("tool", toolStart(e.index, e.id, e.name));
            openTool = e.index;
            openToolArgs = new JsonObjectProgress();
            openToolOut = new ToolArgumentsStream();
            index = block;
            toolBlocks.set(e.index, index);
          }
          if (e.argumentsDelta.length === 0) return out;
          if (open === "tool" && openTool === e.index) {
            openToolArgs.append(e.argumentsDelta);
            const safe = openToolOut.push(e.argumentsDelta);
            if (safe.length > 0) out += argsDelta(index, safe);
            // Whole now: what waited for it goes out after it, then the calls held behind it.
            return waiting.length > 0 && !callOpen() ? out + releaseWaiting() + close() + releaseDeferred(true) : out;
          }
          // A chunk for a call whose block is closed (a malformed stream: its arguments were a whole
          // object, then more came) goes nowhere: the Anthropic SDK would add it to that block's
          // JSON, which then is not JSON, and throw, losing the whole answer.
          return out;
        }
        case "finish":
          finish = e.reason;
          stopSequence = e.stopSequence;
          return begin();
        case "error": {
          // What waited (text, held calls) went to the meter already: the client gets it before the error.
          const pending = waiting.length > 0 || deferred.size > 0 ? close() + releaseDeferred(false) + releaseWaiting() + close() : "";
          return pending + frame("error", JSON.stringify(anthropicErrorBody(e.errorType, e.message)));
        }
      }
  };

  const sink: ClientSink = {
    event: encode,
    frame(_raw, { events }) {
      let out = "";
      for (const e of events) out += sink.event(e);
      return out;
    },
    end() {
      // What waited for an incomplete call goes out after it (the call never became whole).
      let out = begin() + close() + releaseDeferred(false);
      out += releaseWaiting() + close();
      const usage: Record<string, unknown> = { input_tokens: uncached(inputTokens, cacheRead, cacheWrite), output_tokens: outputTokens };
      addCacheUsage(usage, cacheRead, cacheWrite, cacheWrite1h);
      if (reasoningTokens !== undefined) usage.output_tokens_details = { thinking_tokens: reasoningTokens };
      const delta = { stop_reason: stopReason(finish, toolBlocks.size > 0), stop_sequence: stopSequence ?? null };
      out += frame("message_delta", JSON.stringify({ type: "message_delta", delta, usage }));
      return out + frame("message_stop", `{"type":"message_stop"}`);
    },
    // An Anthropic stream opens with message_start, its pings after it (the SDKs' accumulators
    // expect it first): a keep-alive before anything else was written opens the message.
    keepAlive: () => begin() || PING,
  };
  return sink;
}

/** The whole number written at `at` (a block's index), or -1. */
function indexAt(data: string, at: number): number {
  let n = 0;
  let i = at;
  for (let c = data.charCodeAt(i); c >= 48 && c <= 57; c = data.charCodeAt(++i)) n = n * 10 + (c - 48);
  return i === at || i - at > 6 ? -1 : n;
}

/** The `type` of a frame's data, when it is an event name (the name of a frame sent without one). */
function typeNamed(parsed: unknown): string | undefined {
  const type = (parsed as { type?: unknown } | null)?.type;
  return typeof type === "string" && /^[a-z_]{1,64}$/.test(type) ? type : undefined;
}

/**
 * Anthropic upstream → Anthropic client: frames go out as the vendor wrote them (thinking
 * signatures, citations, server tools survive); only message_start is rewritten, to carry
 * the gateway's model id.
 *
 * What the Anthropic SDK's stream helper reads without checking is never relayed missing (it
 * threw, "undefined is not an object", while the answer was billed `ok`; a raw-TCP probe):
 * `message_start` gets a message, a content list and a usage (the prompt's estimate) when it came
 * without; a `message_delta` without usage is held as one with a refused count is (below); a
 * `content_block_delta` whose delta is no object is dropped.
 *
 * A usage the meter refused a count of (negative, fractional, absurd, not a number) is not shown as
 * it came, since the bill used other counts. In `message_start` the refused counts are dropped
 * (the prompt's becomes the gateway's estimate, as a translated stream's is). A `message_delta`
 * with one waits: for the answer's end, where it leaves without them and with the output the
 * gateway counted (Anthropic's `message_delta` always carries `output_tokens`), or for an error,
 * which it goes out before, as a sound one would have; a later sound one replaces it.
 *
 * A `message_delta` count lower than the same count before it (SGLang's `input_tokens: 0`, a
 * second delta's smaller output) is shown as the earlier one, which the meter billed
 * (`cumulativeUsage` in the adapter): relayed as it came, the SDK's final usage (overwritten
 * field by field) said 0 input and 3 output for an answer billed 9 and 30, and Claude Code reads
 * that input to know how full its context is (a raw-TCP probe, twenty-first session).
 */
export function createAnthropicRelay(ctx: EncodeContext): ClientSink {
  const encoder = createAnthropicEncoder(ctx);
  /** The highest of each cumulative count shown so far (message_start's output is a placeholder, not one). */
  const shown: Partial<Record<(typeof CUMULATIVE_COUNTS)[number], number>> = {};
  /** Raises, in place, a count below one shown before; notes the rest. Whether it changed anything. */
  const neverLower = (usage: Record<string, unknown>, fields: readonly (typeof CUMULATIVE_COUNTS)[number][]): boolean => {
    let raised = false;
    for (const field of fields) {
      const count = reportedCount(usage[field]);
      if (count === undefined) continue;
      const before = shown[field];
      if (before !== undefined && before > count) {
        usage[field] = before;
        raised = true;
      } else shown[field] = count;
    }
    return raised;
  };
  let heldDelta: { data: Record<string, unknown>; usage: Record<string, unknown> } | undefined;
  /** The output the meter holds: the last usable count reported, or its estimate told at the end. */
  let meteredOutput: number | undefined;
  const noteOutput = (e: StreamEvent) => {
    if (e.type === "usage" && e.outputTokens !== undefined) meteredOutput = e.outputTokens;
  };
  const releaseDelta = (): string => {
    if (!heldDelta) return "";
    const { data, usage } = heldDelta;
    heldDelta = undefined;
    dropRefusedCounts(usage);
    if (usage.output_tokens === undefined) usage.output_tokens = meteredOutput ?? 0;
    neverLower(usage, CUMULATIVE_COUNTS);
    return frame("message_delta", JSON.stringify(data));
  };
  /** Blocks the upstream started: a text delta of any other is decoded, and fails the answer as out of order. */
  const blocks = new Set<number>();
  /** The block under way (the last started): text the gateway rewrote continues it. */
  let current: number | undefined;
  /**
   * A text frame whose text the gateway changed (a known secret split across frames taken out,
   * gateway/stream-answer.ts): its text as a delta of the block under way. A text block's start
   * goes out without its text, which follows as that delta.
   */
  const rewrittenText = (name: string | undefined, parsed: unknown, events: readonly StreamEvent[]): string => {
    let out = "";
    if (name === "content_block_start" && isJsonObject(parsed) && isJsonObject(parsed.content_block) && parsed.content_block.type === "text") {
      if (typeof parsed.index === "number") blocks.add((current = parsed.index));
      parsed.content_block.text = "";
      out += frame(name, JSON.stringify(parsed));
    }
    let text = "";
    for (const e of events) if (e.type === "text") text += e.text;
    if (text !== "" && current !== undefined) out += frame("content_block_delta", JSON.stringify({ type: "content_block_delta", index: current, delta: { type: "text_delta", text } }));
    return out;
  };
  return {
    skim(raw, text) {
      // Text deltas carry nothing the gateway changes or counts (usage comes in message_delta). The
      // decoder's template vouches for the JSON; its block must be one this relay saw start.
      const data = raw.data;
      if (text === "" || raw.event !== "content_block_delta" || !data.startsWith(TEXT_DELTA_START)) return undefined;
      if (!blocks.has(indexAt(data, TEXT_DELTA_START.length))) return undefined;
      return frame("content_block_delta", data);
    },
    frame(raw, { parsed, events, rewritten }) {
      for (const e of events) noteOutput(e);
      // A vendor's error frame never goes out as it came: its text may carry internals.
      const failed = events.find((e) => e.type === "error");
      if (failed) return releaseDelta() + encoder.event(failed);
      // A frame is named by its data's type, as the decoder reads it, whatever its `event:` line
      // says (or without one): the Anthropic SDK dispatches on the name, so a text delta sent as
      // `event: ping` was counted and shown to a chat client, and skipped by the SDK (a raw-TCP probe).
      const name = typeNamed(parsed) ?? raw.event;
      if (rewritten && events.every((e) => e.type === "text")) return rewrittenText(name, parsed, events);
      if (name === "content_block_start") {
        const index = (parsed as { index?: unknown } | null)?.index;
        if (typeof index === "number") blocks.add((current = index));
      }
      if (name === "message_start" && parsed && typeof parsed === "object") {
        const data = parsed as { message?: unknown };
        // What the SDK reads without checking is made whole (see below): a message, its content list, its usage.
        if (!isJsonObject(data.message)) data.message = { type: "message", role: "assistant", content: [], stop_reason: null, stop_sequence: null };
        const message = data.message as Record<string, unknown>;
        message.model = ctx.model;
        // The answer's id is ours: it names the usage record (req_<same>).
        message.id = ctx.id;
        if (!Array.isArray(message.content)) message.content = [];
        const usage = message.usage;
        // The prompt's counts as the vendor sent them are what later deltas are held to; an
        // estimate put in for a refused one is not (the meter takes a later delta's count then).
        if (isJsonObject(usage) && !hasRefusedCount(usage)) neverLower(usage, PROMPT_COUNTS);
        if (!isJsonObject(usage)) message.usage = { input_tokens: ctx.inputTokensEstimate ?? 0, output_tokens: 0 };
        else if (hasRefusedCount(usage)) {
          const hadInput = usage.input_tokens != null;
          const hadOutput = usage.output_tokens != null;
          dropRefusedCounts(usage);
          if (hadInput && usage.input_tokens === undefined) usage.input_tokens = ctx.inputTokensEstimate ?? 0;
          if (hadOutput && usage.output_tokens === undefined) usage.output_tokens = 0;
        }
        return frame("message_start", JSON.stringify(parsed));
      }
      // The last frame leaves only after the answer is settled (end()).
      if (name === "message_stop") return "";
      // A delta that is no object says nothing, and the SDK reads its `type` unchecked.
      if (name === "content_block_delta" && !isJsonObject((parsed as { delta?: unknown } | null)?.delta)) return "";
      if (name === "message_delta" && parsed && typeof parsed === "object") {
        const data = parsed as Record<string, unknown>;
        // No usage at all (compatible servers leave it out): held as a refused one is, to go out
        // with the output the gateway counted, which the SDK reads unchecked.
        if (!isJsonObject(data.usage)) data.usage = {};
        const usage = data.usage as Record<string, unknown>;
        if (Object.keys(usage).length === 0 || hasRefusedCount(usage)) {
          heldDelta = { data, usage };
          return "";
        }
        // Counts are cumulative and the stop reason final: a sound delta supersedes a held one.
        heldDelta = undefined;
        if (neverLower(usage, CUMULATIVE_COUNTS)) return frame(name, JSON.stringify(data));
      }
      // Data sent in several lines goes out in one (JSON) or line by line: relayed as it came, its
      // second line would lose its `data:`.
      const data = !raw.multiline ? raw.data : parsed !== undefined ? JSON.stringify(parsed) : raw.data.replaceAll("\n", "\ndata: ");
      return name ? frame(name, data) : `data: ${data}\n\n`;
    },
    event(e) {
      // The meter's estimate, told at the end when the upstream reported no usable output.
      if (e.type === "usage") {
        noteOutput(e);
        return "";
      }
      return e.type === "error" ? releaseDelta() + encoder.event(e) : encoder.event(e);
    },
    end: () => releaseDelta() + frame("message_stop", `{"type":"message_stop"}`),
    keepAlive: () => PING,
  };
}


/** Anthropic's usage counts that are cumulative across a stream's frames; the prompt's come in message_start too. */
const PROMPT_COUNTS = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] as const;
const CUMULATIVE_COUNTS = [...PROMPT_COUNTS, "output_tokens"] as const;

const TEXT_DELTA_START = '{"type":"content_block_delta","index":';
const TEXT_DELTA = '"delta":{"type":"text_delta","text":"';

/** Events of a whole answer → an Anthropic `message` body. */
export function encodeAnthropicBody(events: StreamEvent[], ctx: EncodeContext) {
  const answer = collectAnswer(events);
  const content: unknown[] = [];
  // The answer's tool calls together are parsed no further than one body's limits.
  const budget = jsonBudget();
  for (const part of answer.order) {
    const last = content.at(-1) as { type: string; text: string } | undefined;
    // A refusal is text here, one block with the text beside it, as the stream writes it.
    if ((part.kind === "text" || part.kind === "refusal") && last?.type === "text") last.text += part.text;
    else if (part.kind === "text" || part.kind === "refusal") content.push({ type: "text", text: part.text });
    // Anthropic's own signature when it thought; another vendor's reasoning has none to give.
    else if (part.kind === "reasoning") content.push({ type: "thinking", thinking: part.text, signature: part.signature ?? "" });
    else if (part.kind === "redacted-reasoning") content.push({ type: "redacted_thinking", data: part.data });
    else {
      const tool = answer.tools[part.index]!;
      content.push({ type: "tool_use", id: clientToolId(tool.id, ctx, part.index), name: tool.name, input: toolInput(tool.arguments, budget) });
    }
  }
  const usage: Record<string, unknown> = { input_tokens: uncached(answer.inputTokens, answer.cacheReadTokens, answer.cacheWriteTokens) };
  addCacheUsage(usage, answer.cacheReadTokens, answer.cacheWriteTokens, answer.cacheWrite1hTokens);
  usage.output_tokens = answer.outputTokens;
  usage.service_tier = SERVICE_TIER;
  if (answer.reasoningTokens !== undefined) usage.output_tokens_details = { thinking_tokens: answer.reasoningTokens };
  return {
    id: ctx.id,
    type: "message",
    role: "assistant",
    model: ctx.model,
    content,
    stop_reason: stopReason(answer.finish, answer.tools.length > 0),
    stop_sequence: answer.stopSequence ?? null,
    usage,
  };
}
