import { imageMarkdown, type ErrorKind, type FinishReason, type StreamEvent } from "../../streaming/events.ts";
import type { ClientSink, EncodeContext } from "../../streaming/client-sink.ts";
import { collectAnswer } from "../common/collect-answer.ts";
import { isJsonObject } from "../common/json-shape.ts";
import { customInput } from "../common/custom-tools.ts";

const FINISH: Record<FinishReason, string> = {
  stop: "stop",
  stop_sequence: "stop",
  length: "length",
  tool_calls: "tool_calls",
  content_filter: "content_filter",
  // Chat has no refusal finish: a filter's is the nearest, and what it always was.
  refusal: "content_filter",
};
/** For a client that offered legacy `functions` (legacy-functions.ts): its call ends the answer as `function_call`. */
const LEGACY_FINISH: Record<FinishReason, string> = { ...FINISH, tool_calls: "function_call" };

const ERROR_TYPE: Record<ErrorKind, string> = {
  invalid_request: "invalid_request_error",
  authentication: "authentication_error",
  permission: "permission_error",
  not_found: "not_found_error",
  request_too_large: "invalid_request_error",
  insufficient_credits: "insufficient_quota",
  rate_limit: "rate_limit_error",
  upstream: "upstream_error",
  overloaded: "server_error",
  timeout: "timeout_error",
  internal: "server_error",
};

/** OpenAI's own codes for the kinds it has one for (its SDKs and agent frameworks read `code`). */
const ERROR_CODE: Partial<Record<ErrorKind, string>> = {
  authentication: "invalid_api_key",
  rate_limit: "rate_limit_exceeded",
  insufficient_credits: "insufficient_quota",
};

export function openaiErrorBody(kind: ErrorKind, message: string, detail?: { code?: string; param?: string }) {
  return { error: { message, type: ERROR_TYPE[kind], param: detail?.param ?? null, code: detail?.code ?? ERROR_CODE[kind] ?? null } };
}

const DONE = "data: [DONE]\n\n";

interface ChunkUsage {
  /** The whole prompt, cached parts included (OpenAI's `prompt_tokens`). */
  prompt: number;
  completion: number;
  /** The prompt's cache reads (`cached_tokens`) and writes, when the upstream reported them. */
  cached?: number;
  written?: number;
  /** Reasoning's share of `completion`, when known. */
  reasoning?: number;
}

/** OpenAI's usage object; `completion_tokens_details.reasoning_tokens` is part of `completion_tokens`, not added to it. */
function openaiUsage(usage: ChunkUsage) {
  // OpenAI has no cache writes; servers that report them (OpenRouter) name them `cache_write_tokens`.
  const prompt: Record<string, number> = { cached_tokens: usage.cached ?? 0 };
  if (usage.written) prompt.cache_write_tokens = usage.written;
  return {
    prompt_tokens: usage.prompt,
    completion_tokens: usage.completion,
    total_tokens: usage.prompt + usage.completion,
    prompt_tokens_details: prompt,
    completion_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
  };
}

/** The usage so far with an event's counts over it (later reports override earlier ones). */
function nextUsage(usage: ChunkUsage | undefined, e: Extract<StreamEvent, { type: "usage" }>): ChunkUsage {
  return {
    prompt: e.inputTokens ?? usage?.prompt ?? 0,
    completion: e.outputTokens ?? usage?.completion ?? 0,
    cached: e.cacheReadTokens ?? usage?.cached,
    written: e.cacheWriteTokens ?? usage?.written,
    reasoning: e.reasoningTokens ?? usage?.reasoning,
  };
}

/** The closing `choices: []` chunk that carries usage, for clients that asked for it. */
function usageChunk(ctx: EncodeContext, usage: ChunkUsage): string {
  const u = openaiUsage(usage);
  return `data: {"id":${JSON.stringify(ctx.id)},"object":"chat.completion.chunk","created":${ctx.created},"model":${JSON.stringify(ctx.model)},"choices":[],"usage":${JSON.stringify(u)}}\n\n`;
}
const KEEP_ALIVE = ": keep-alive\n\n";

/**
 * Events → `chat.completion.chunk` frames. The invariant envelope is serialised once per
 * stream and only the delta is stringified per event: this runs for every token.
 */
export function createOpenAIEncoder(ctx: EncodeContext, options: { roleSent?: boolean } = {}): ClientSink & { noteText(): void; noteRole(): void } {
  const head = `data: {"id":${JSON.stringify(ctx.id)},"object":"chat.completion.chunk","created":${ctx.created},"model":${JSON.stringify(ctx.model)},"choices":[{"index":0,"delta":`;
  const tail = `,"logprobs":null,"finish_reason":null}]}\n\n`;
  let started = options.roleSent ?? false;
  let wroteText = false;
  let usage: ChunkUsage | undefined;
  const seenTools = new Set<number>();
  /** Calls that have had no argument text yet (see "finish"). */
  const withoutArguments = new Set<number>();
  /**
   * Calls to the client's custom tools, by index: their `{"input": …}` arguments gathered and each
   * call written whole once something else comes (`writeCustomCalls`), as a custom call with its
   * raw input (a JSON string's text cannot be unwrapped as it comes).
   */
  const customCalls = new Map<number, { id: string; name: string; args: string }>();
  /**
   * The custom calls gathered so far, written now: before anything that comes after them (a call
   * of another index, text, the finish), so calls go out in index order. openai-python's stream
   * helper places a call by its position in the list it has, not by its index: a function call at
   * index 1 written before the custom one at 0 was merged into it (a review).
   */
  const writeCustomCalls = (cut = false): string => {
    if (customCalls.size === 0) return "";
    let out = "";
    for (const [index, c] of customCalls) {
      const input = customInput(c.args, cut);
      out += opening(`"tool_calls":[{"index":${index},"id":${JSON.stringify(c.id)},"type":"custom","custom":{"name":${JSON.stringify(c.name)},"input":${JSON.stringify(input)}}}]`);
    }
    customCalls.clear();
    return out;
  };

  const chunk = (delta: string) => head + delta + tail;
  /** A legacy answer carries one call (the request asked for one at a time): the first; any other is left out. */
  const legacyCall = (e: StreamEvent & { type: "tool-call" }): string => {
    if (e.index !== 0) return "";
    if (!seenTools.has(0)) {
      seenTools.add(0);
      if (!e.argumentsDelta) withoutArguments.add(0);
      return chunk(`{"function_call":{"name":${JSON.stringify(e.name ?? "")},"arguments":${JSON.stringify(e.argumentsDelta)}}}`);
    }
    if (!e.argumentsDelta) return "";
    withoutArguments.delete(0);
    return chunk(`{"function_call":{"arguments":${JSON.stringify(e.argumentsDelta)}}}`);
  };
  /**
   * The role goes out with the answer's first content, as OpenAI's does: `content: ""` before text,
   * `content: null` before anything else (a tool call, a refusal, reasoning). The SDK's stream
   * helper builds the message from it, and a tool-call-only answer must end with `content: null`
   * as the whole answer has it, not "" (an SDK probe, twenty-eighth session).
   */
  const begin = (text = true) => {
    if (started) return "";
    started = true;
    return chunk(text ? `{"role":"assistant","content":""}` : `{"role":"assistant","content":null}`);
  };
  /** A first delta that carries the role itself (OpenAI's first tool-call chunk). */
  const opening = (rest: string) => {
    if (started) return chunk(`{${rest}}`);
    started = true;
    return chunk(`{"role":"assistant","content":null,${rest}}`);
  };
  /** Only reasoning so far, its role gone out with `content: null` (see "finish"). */
  let onlyReasoning = false;

  const sink: ClientSink & { noteText(): void; noteRole(): void } = {
    /** Text went out by another path (a relayed frame); a following image starts on a new paragraph. */
    noteText() {
      wroteText = true;
    },
    /** The answer's role went out by another path (a relayed frame): no chunk of ours says it again. */
    noteRole() {
      started = true;
    },
    event(e) {
      // A custom call is whole once anything else comes (vendors send a call's parts together).
      if (customCalls.size > 0 && e.type !== "usage" && e.type !== "finish" && e.type !== "error" && !(e.type === "tool-call" && customCalls.has(e.index))) {
        return writeCustomCalls() + sink.event(e);
      }
      switch (e.type) {
        case "text":
          wroteText = true;
          onlyReasoning = false;
          return begin() + chunk(`{"content":${JSON.stringify(e.text)}}`);
        case "refusal":
          // Where OpenAI itself writes a refusal: a chat client's SDK reads `refusal`, never `content`, for it.
          wroteText = true;
          onlyReasoning = false;
          return begin(false) + chunk(`{"refusal":${JSON.stringify(e.text)}}`);
        case "image": {
          const text = imageMarkdown(e.url, wroteText);
          wroteText = true;
          onlyReasoning = false;
          return begin() + chunk(`{"content":${JSON.stringify(text)}}`);
        }
        case "reasoning":
          // A signature alone (Anthropic's seal on its thinking) says nothing an OpenAI client can use.
          if (!e.text) return "";
          if (!started) onlyReasoning = true;
          return begin(false) + chunk(`{"reasoning_content":${JSON.stringify(e.text)}}`);
        case "redacted-reasoning":
          return "";
        case "tool-call": {
          onlyReasoning = false;
          if (ctx.legacyFunctions) return begin(false) + legacyCall(e);
          const custom = customCalls.get(e.index);
          if (custom) {
            custom.args += e.argumentsDelta;
            return "";
          }
          if (!seenTools.has(e.index) && e.name !== undefined && ctx.customTools?.has(e.name)) {
            seenTools.add(e.index);
            customCalls.set(e.index, { id: e.id ?? `call_${ctx.id}_${e.index}`, name: e.name, args: e.argumentsDelta });
            return "";
          }
          let call: string;
          if (!seenTools.has(e.index)) {
            seenTools.add(e.index);
            if (!e.argumentsDelta) withoutArguments.add(e.index);
            call = `{"index":${e.index},"id":${JSON.stringify(e.id ?? `call_${ctx.id}_${e.index}`)},"type":"function","function":{"name":${JSON.stringify(e.name ?? "")},"arguments":${JSON.stringify(e.argumentsDelta)}}}`;
          } else {
            if (e.argumentsDelta) withoutArguments.delete(e.index);
            call = `{"index":${e.index},"function":{"arguments":${JSON.stringify(e.argumentsDelta)}}}`;
          }
          return opening(`"tool_calls":[${call}]`);
        }
        case "usage":
          usage = nextUsage(usage, e);
          return "";
        case "finish": {
          // The client's custom tools' calls, whole (cut by the answer's limit: what the input had reached).
          let out = writeCustomCalls(e.reason === "length");
          // A call to a tool without parameters (Anthropic streams `input: {}` as no JSON at all):
          // its arguments are "{}", as a whole answer's are, never "" (which JSON.parse refuses).
          out += begin();
          // Only reasoning came: the whole answer's content is "" (encodeOpenAIBody), so the stream's
          // is too, not the null its role went out with (a review: `content.strip()` on a thinking
          // answer cut by max_tokens).
          if (onlyReasoning) {
            onlyReasoning = false;
            out += chunk(`{"content":""}`);
          }
          for (const index of withoutArguments) {
            out += chunk(ctx.legacyFunctions ? `{"function_call":{"arguments":"{}"}}` : `{"tool_calls":[{"index":${index},"function":{"arguments":"{}"}}]}`);
          }
          withoutArguments.clear();
          return out + head + `{}` + `,"logprobs":null,"finish_reason":"${(ctx.legacyFunctions ? LEGACY_FINISH : FINISH)[e.reason]}"}]}\n\n`;
        }
        case "error":
          // The shape the same error has before the stream starts (param, code), so an SDK reads `err.code` either way.
          return `data: ${JSON.stringify(openaiErrorBody(e.errorType, e.message))}\n\n`;
        case "start":
          // Nothing yet: the role goes with the first content, whose kind it depends on (begin).
          return "";
      }
    },
    frame(_raw, { events }) {
      let out = "";
      for (const e of events) out += sink.event(e);
      return out;
    },
    end() {
      let out = begin();
      if (ctx.includeUsage && usage) out += usageChunk(ctx, usage);
      return out + DONE;
    },
    keepAlive: () => KEEP_ALIVE,
  };
  return sink;
}

/**
 * OpenAI upstream → OpenAI client: forward each chunk as the vendor sent it (logprobs,
 * refusals, annotations and fields we do not model survive), changing only what the
 * gateway owns: the model name, and the usage chunk the client did not ask for.
 */
export function createOpenAIRelay(ctx: EncodeContext): ClientSink {
  let sawUsage = false;
  let usage: ChunkUsage | undefined;
  // The role goes out once, in the first chunk of the answer: the vendor's, or ours (see `withRoles`).
  const encoder = createOpenAIEncoder(ctx);
  /** Choices whose role went out. */
  const roled = new Set<number>();
  /**
   * Gives the role to each choice's first delta that has none, as OpenAI's first chunk has it:
   * the openai SDK's stream helper throws "missing role for choice 0" at the end of an answer
   * whose chunks never said it, and compatible servers and proxies leave it out (a raw-TCP probe;
   * one-api#1037, LibreChat#1221). True when the chunk was changed.
   */
  const withRoles = (choices: unknown[]): boolean => {
    let changed = false;
    for (const choice of choices) {
      const { index, delta } = choice as { index: number; delta?: Record<string, unknown> };
      if (roled.has(index) || !isJsonObject(delta)) continue;
      roled.add(index);
      if (index === 0) encoder.noteRole();
      if (typeof delta.role === "string") continue;
      delta.role = "assistant";
      changed = true;
    }
    return changed;
  };
  const ours = `"model":${JSON.stringify(ctx.model)}`;
  const ourId = `"id":${JSON.stringify(ctx.id)}`;
  /** The vendor's `"id":"…"`: the answer's id is ours, so that it names the usage record. */
  let theirId: string | undefined;
  /** The vendor's `created`, which its chunks carry as they are: the usage chunk we add says the same. */
  let theirCreated: number | undefined;

  /**
   * The vendor's text with our model name and id in place of theirs, both found in the vendor's
   * own text and swapped in one pass (searching a string just built by concatenation would first
   * copy it whole).
   */
  const withOurs = (data: string, modelAt: number, model: string, idAt: number): string => {
    if (idAt === -1) return `${data.slice(0, modelAt)}${ours}${data.slice(modelAt + model.length)}`;
    const idEnd = idAt + theirId!.length;
    return idAt < modelAt
      ? `${data.slice(0, idAt)}${ourId}${data.slice(idEnd, modelAt)}${ours}${data.slice(modelAt + model.length)}`
      : `${data.slice(0, modelAt)}${ours}${data.slice(modelAt + model.length, idAt)}${ourId}${data.slice(idEnd)}`;
  };
  /** Swaps the model name and the id in the vendor's own text rather than re-serialising the frame. */
  const relay = (data: string, at: number, name: string) =>
    `data: ${withOurs(data, at, name, theirId === undefined ? -1 : data.indexOf(theirId))}\n\n`;

  /**
   * A chunk's head up to its first choice's delta, as the vendor writes it in every chunk of one
   * answer (id, object, created, model, fingerprint, `"choices":[{"index":0,"delta":{`), and
   * ours: learnt from the first chunk that is decoded. A text chunk that starts with it needs one
   * comparison and one look for markers past its text, not a search for each of its keys.
   */
  let head: { theirs: string; ours: string } | undefined;
  const learnHead = (data: string, model: string) => {
    const at = data.indexOf(CHOICE_DELTA);
    const modelAt = data.indexOf(model);
    const idAt = theirId === undefined ? -1 : data.indexOf(theirId);
    // Only a head that holds both (so both are swapped) and nothing else of meaning.
    if (at === -1 || modelAt === -1 || modelAt > at || idAt === -1 || idAt > at) return;
    PLAIN_TAIL.lastIndex = 0;
    if (PLAIN_TAIL.test(data.slice(0, at))) return;
    const theirHead = data.slice(0, at + CHOICE_DELTA.length);
    head = { theirs: theirHead, ours: withOurs(theirHead, modelAt, model, idAt) };
  };

  return {
    skim(raw, text) {
      // The decoder's template vouches for the JSON and that it means its text alone (a finish,
      // usage, a tool call would have made the template's frame mean more); its head, whose id and
      // model are swapped for ours, must open straight onto the text (no role: see withRoles).
      const data = raw.data;
      if (head === undefined || text === "" || !data.startsWith(head.theirs) || !data.startsWith(CONTENT, head.theirs.length)) return undefined;
      encoder.noteText();
      return `data: ${head.ours}${data.slice(head.theirs.length)}\n\n`;
    },
    frame(raw, decoded) {
      const events = decoded.events;
      // Vendors send images in fields the spec does not have; clients get them as markdown in the
      // text. A frame the gateway took images out of is written anew too, never relayed as sent.
      if (decoded.rewritten || events.some((e) => e.type === "image")) {
        let out = "";
        for (const e of events) {
          if (e.type !== "usage") out += encoder.event(e);
          else if (e.inputTokens !== undefined && e.outputTokens !== undefined) usage = nextUsage(undefined, e);
        }
        // What the encoder wrote opened with the role when it was the first.
        if (out) roled.add(0);
        return out;
      }
      if (events.some((e) => e.type === "text")) encoder.noteText();
      const parsed = decoded.parsed;
      if (parsed === undefined || parsed === null || typeof parsed !== "object") return ""; // [DONE] is re-sent by end()
      const chunk = parsed as Record<string, unknown>;
      // A vendor's error frame never goes out as it came: its text may carry internals.
      const failed = events.find((e) => e.type === "error");
      if (failed) return encoder.event(failed);
      // A chunk the SDKs would trip on (`choices: "x"`, `[null]`, `delta: 5`, `content: ["a"]`; the
      // openai SDK threw mid-stream, a raw-TCP probe): what it says is written anew, as ours. Its
      // usage (compatible servers send `choices: null` beside it) goes out in the end's usage chunk.
      if (!wellFormedChunk(chunk)) {
        let out = "";
        for (const e of events) {
          if (e.type !== "usage") out += encoder.event(e);
          else if (e.inputTokens !== undefined && e.outputTokens !== undefined) usage = nextUsage(undefined, e);
        }
        // What the encoder wrote opened with the role when it was the first.
        if (out) roled.add(0);
        return out;
      }
      // Counts the meter refused (negative, fractional, absurd) are not what is charged: such a
      // usage is not relayed, and the client that asked for usage gets the gateway's at the end.
      let refusedUsage = false;
      for (const e of events) {
        if (e.type !== "usage") continue;
        if (e.inputTokens === undefined || e.outputTokens === undefined) {
          refusedUsage = true;
          continue;
        }
        usage = nextUsage(undefined, e);
        // Reasoning the vendor counted apart from completion_tokens is billed inside it
        // (openai-adapter.ts, outputWithReasoning): the usage billed goes out at the end instead.
        if (e.outputTokens !== (chunk.usage as { completion_tokens?: unknown } | undefined)?.completion_tokens) refusedUsage = true;
        else sawUsage = true;
      }
      const choices = chunk.choices as unknown[] | undefined;
      if ((!ctx.includeUsage || refusedUsage) && (!choices || choices.length === 0) && chunk.usage) return "";
      // Refused counts beside choices, or tool calls under indexes that are not the calls' own:
      // the frame is written again (below), not relayed as sent.
      const stripped = refusedUsage && chunk.usage !== undefined;
      if (stripped) delete chunk.usage;
      const reindexed = reindexToolCalls(choices, events);
      const roledNow = withRoles(choices!);
      if (typeof chunk.id === "string") theirId = `"id":${JSON.stringify(chunk.id)}`;
      if (theirCreated === undefined && Number.isSafeInteger(chunk.created)) theirCreated = chunk.created as number;
      // Data sent in several lines is written anew in one: relayed as it came, its second line would lose its `data:`.
      if (!stripped && !reindexed && !roledNow && !raw.multiline && typeof chunk.model === "string") {
        const name = `"model":${JSON.stringify(chunk.model)}`;
        const at = raw.data.indexOf(name);
        if (at !== -1) {
          if (head === undefined) learnHead(raw.data, name);
          return relay(raw.data, at, name);
        }
      }
      chunk.model = ctx.model;
      if ("id" in chunk) chunk.id = ctx.id;
      return `data: ${JSON.stringify(chunk)}\n\n`;
    },
    event(e) {
      // Only the gateway's own events arrive here: an estimated usage or an error.
      if (e.type === "usage") {
        usage = nextUsage(usage, e);
        return "";
      }
      return encoder.event(e);
    },
    end() {
      return (ctx.includeUsage && usage && !sawUsage ? usageChunk(theirCreated === undefined ? ctx : { ...ctx, created: theirCreated }, usage) : "") + DONE;
    },
    keepAlive: () => KEEP_ALIVE,
  };
}

const stringOrNone = (v: unknown) => v === undefined || v === null || typeof v === "string";
const listOrNone = (v: unknown) => v === undefined || v === null || Array.isArray(v);

/**
 * Whether a chunk has the shape the SDKs read without checking: `choices` an array of objects,
 * each `delta` an object whose `content`/`role`/`refusal` are strings (or null) and whose
 * `tool_calls` are objects, `finish_reason` a string or null, `usage` an object or null, each choice
 * numbered, its `logprobs` lists. A chunk
 * without `choices` (`{}`, a bare array, usage alone) is not one: the openai SDK's stream helper
 * iterates `chunk.choices` and threw on it (a raw-TCP probe); what it says is written anew.
 */
function wellFormedChunk(chunk: Record<string, unknown>): boolean {
  const choices = chunk.choices;
  if (!Array.isArray(choices)) return false;
  if (chunk.usage !== undefined && chunk.usage !== null && !isJsonObject(chunk.usage)) return false;
  for (const choice of choices) {
    // Without a numeric index the SDK throws ("invalid choice index"); the decoder reads it as the answer's.
    if (!isJsonObject(choice) || !Number.isSafeInteger(choice.index) || (choice.index as number) < 0 || !stringOrNone(choice.finish_reason)) return false;
    // The SDK spreads a choice's logprobs lists into its own.
    const logprobs = choice.logprobs;
    if (logprobs !== undefined && logprobs !== null && (!isJsonObject(logprobs) || !listOrNone(logprobs.content) || !listOrNone(logprobs.refusal))) return false;
    const delta = choice.delta;
    if (delta === undefined) continue;
    if (!isJsonObject(delta) || !stringOrNone(delta.role) || !stringOrNone(delta.refusal)) return false;
    // Content parts (Mistral's Magistral streams its thinking so) are objects; anything else is not content.
    if (!stringOrNone(delta.content) && !(Array.isArray(delta.content) && delta.content.every(isJsonObject))) return false;
    const calls = delta.tool_calls;
    if (calls !== undefined && calls !== null && (!Array.isArray(calls) || !calls.every(isJsonObject))) return false;
  }
  return true;
}

/**
 * The first choice's tool calls under the indexes the decoder gave them (each call of a delta is
 * one tool-call event, in order). Some OpenAI-compatible servers put every parallel call at index
 * 0, each with its own id, or leave the index out; OpenAI's SDKs gather a stream's calls by index,
 * so relayed as sent the second call's arguments were glued onto the first's, or the calls were
 * lost. A call's first chunk gets its `type` when it has none, and a call whose `function` is no
 * object gets what the decoder read of it: the openai SDK's stream helper throws on either ("tool
 * call snapshot missing `type`"; compatible servers leave `type` out; a raw-TCP probe). True when
 * a call was changed (the frame must then be written anew).
 */
function reindexToolCalls(choices: unknown[] | undefined, events: readonly StreamEvent[]): boolean {
  const choice = choices?.[0] as { index?: unknown; delta?: { tool_calls?: unknown } } | undefined;
  const calls = choice?.delta?.tool_calls;
  if (!Array.isArray(calls) || (choice!.index ?? 0) !== 0) return false;
  let changed = false;
  let next = 0;
  for (const call of calls) {
    if (call === null || typeof call !== "object" || Array.isArray(call)) continue;
    while (next < events.length && events[next]!.type !== "tool-call") next++;
    const event = events[next++];
    if (event?.type !== "tool-call") break;
    const c = call as { index?: unknown; type?: unknown; function?: unknown; custom?: unknown };
    // A custom tool's call (OpenAI's own: `custom: {name, input}`) has no `function` to fill in.
    const custom = c.type === "custom" || (c.type === undefined && isJsonObject(c.custom));
    if (c.index !== event.index) {
      c.index = event.index;
      changed = true;
    }
    // The decoder names a call in its first chunk only.
    const first = event.name !== undefined;
    if (first && c.type === undefined) {
      c.type = custom ? "custom" : "function";
      changed = true;
    }
    if (!custom && !isJsonObject(c.function)) {
      c.function = first ? { name: event.name, arguments: event.argumentsDelta } : { arguments: event.argumentsDelta };
      changed = true;
    }
  }
  return changed;
}

/** How OpenAI writes a chunk that carries only text, for the first choice: its delta, then the text. */
const CHOICE_DELTA = '"choices":[{"index":0,"delta":{';
const CONTENT = '"content":"';
/**
 * Keys that give a chunk more meaning than its text (a finish of any value but null, usage,
 * images, tool calls, reasoning, a second delta, an error, a role after the text) and a null in
 * an array (a choice that is none, which the SDKs trip on): such chunks are decoded. One pass
 * finds any of them (a `[null` in the text itself only costs that chunk a decoding). So does an
 * escaped letter (`\u0069mages` is `images` to a parser): a key written that way slipped past the
 * names, and an upstream's images went out raw, unfetched, uncounted and uncharged (a probe).
 */
const PLAIN_TAIL = /"(?:finish_reason":(?!null)|usage":\{|images"|tool_calls"|reasoning|delta"|error"|role")|\[null|null\]|\\u00[4-7][0-9A-Fa-f]/g;

/** Events of a whole answer → a `chat.completion` body. */
export function encodeOpenAIBody(events: StreamEvent[], ctx: EncodeContext) {
  const answer = collectAnswer(events);
  // `content` is null beside tool calls or a refusal and no text, as OpenAI answers them.
  const content = answer.text.length > 0 || (answer.tools.length === 0 && answer.refusal.length === 0) ? answer.text : null;
  const message: Record<string, unknown> = { role: "assistant", content, refusal: answer.refusal || null };
  if (answer.reasoning) message.reasoning_content = answer.reasoning;
  if (answer.tools.length > 0 && ctx.legacyFunctions) {
    message.function_call = { name: answer.tools[0]!.name, arguments: answer.tools[0]!.arguments };
  } else if (answer.tools.length > 0) {
    message.tool_calls = answer.tools.map((t, i) => {
      const id = t.id ?? `call_${ctx.id}_${i}`;
      return ctx.customTools?.has(t.name)
        ? { id, type: "custom", custom: { name: t.name, input: customInput(t.arguments, answer.finish === "length") } }
        : { id, type: "function", function: { name: t.name, arguments: t.arguments } };
    });
  }
  return {
    id: ctx.id,
    object: "chat.completion",
    created: ctx.created,
    model: ctx.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: (ctx.legacyFunctions ? LEGACY_FINISH : FINISH)[answer.finish ?? "stop"] }],
    usage: openaiUsage({ prompt: answer.inputTokens, completion: answer.outputTokens, cached: answer.cacheReadTokens, written: answer.cacheWriteTokens, reasoning: answer.reasoningTokens }),
  };
}

