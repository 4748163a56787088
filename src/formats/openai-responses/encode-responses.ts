/**
 * The Responses API's answer, streamed and whole, from the event union. Past 300 lines because it
 * is one state machine (items open and close, sequence numbers, the final response, reasoning as
 * content or summary): split, the stream and the body could disagree.
 */
import { imageMarkdown, type ErrorKind, type FinishReason, type StreamEvent } from "../../streaming/events.ts";
import type { ClientSink, EncodeContext } from "../../streaming/client-sink.ts";
import type { ClientTool, ResponsesEcho } from "./responses-to-chat.ts";
import { sealThinking, type CarriedBlock } from "../common/carried-thinking.ts";
import { customInput } from "../common/custom-tools.ts";

/** What the Responses encoder needs from the request beyond the shared context. */
export interface ResponsesAnswerPlan {
  /** Upstream function name → the client's tool (custom tools, namespaced tools). */
  tools: Map<string, ClientTool>;
  echo: ResponsesEcho;
  /**
   * Called once with the final response when the answer ended normally (completed or
   * incomplete, never failed), before its last frame or body is handed over: a client that saw
   * the answer end can refer to it at once (the route keeps it for `item_reference`). False (or
   * a promise of it) when it was not kept after all: the final response then says `store: false`.
   */
  onFinal?: (response: ResponsesBody, sealed?: ReadonlyMap<string, string>) => boolean | void | Promise<boolean>;
  /**
   * The client asked for `reasoning.encrypted_content`: Anthropic's signed thinking blocks go out
   * sealed in the reasoning items, for the client to send back (formats/common/carried-thinking.ts).
   */
  sealThinking?: boolean;
  /**
   * The answer is kept for `previous_response_id`: its signed thinking is sealed for the kept copy
   * only (handed to `onFinal` by item id), as OpenAI keeps a stored answer's reasoning whatever
   * `include` asked; the client's items are as OpenAI writes them without `include`.
   */
  keepThinking?: boolean;
}

/** A plan whose `onFinal` answers at once: the whole body is then built without waiting. */
export type SyncResponsesAnswerPlan = Omit<ResponsesAnswerPlan, "onFinal"> & { onFinal?: (response: ResponsesBody, sealed?: ReadonlyMap<string, string>) => boolean | void };

/** The Responses API's `response` object as the encoder writes it. */
export type ResponsesBody = ReturnType<ReturnType<typeof createBuilder>["final"]>;

/** `reasoning.summary` values that ask for the reasoning as summary parts (OpenAI's, which Codex and the AI SDK read). */
const SUMMARY_VALUES = new Set(["auto", "concise", "detailed"]);

export const NO_PLAN: ResponsesAnswerPlan = {
  tools: new Map(),
  echo: {
    instructions: null,
    max_output_tokens: null,
    metadata: {},
    parallel_tool_calls: true,
    reasoning: { effort: null, summary: null },
    store: false,
    previous_response_id: null,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    user: null,
    prompt_cache_key: null,
    safety_identifier: null,
    truncation: "disabled",
  },
};

/** Error codes as OpenAI writes them in `error` events and `response.error`; Codex decides on retries by them. */
const ERROR_CODE: Record<ErrorKind, string> = {
  invalid_request: "invalid_request_error",
  authentication: "authentication_error",
  permission: "permission_error",
  not_found: "not_found_error",
  request_too_large: "invalid_request_error",
  insufficient_credits: "insufficient_quota",
  rate_limit: "rate_limit_exceeded",
  upstream: "server_error",
  // An upstream overloaded mid-answer is transient: `server_is_overloaded` is "the model is at
  // capacity, choose another" to Codex, which gave up; `server_error` it retries.
  overloaded: "server_error",
  timeout: "server_error",
  internal: "server_error",
};

const INCOMPLETE: Partial<Record<FinishReason, string>> = { length: "max_output_tokens", content_filter: "content_filter" };

const KEEP_ALIVE = ": keep-alive\n\n";

/** The delta event of each kind of item (reasoning's depends on where it goes: REASONING_AS). */
const DELTA_TYPE: Partial<Record<OpenItem["kind"], string>> = {
  message: "response.output_text.delta",
  refusal: "response.refusal.delta",
  function: "response.function_call_arguments.delta",
  custom: "response.function_call_arguments.delta",
};

type Item = Record<string, unknown> & { id: string; type: string };

interface OpenItem {
  index: number;
  item: Item;
  /** Text, a refusal or reasoning so far, or a tool call's arguments. */
  text: string;
  /** `refusal`: a message whose one content part is a refusal (OpenAI's ResponseOutputRefusal). */
  kind: "message" | "refusal" | "reasoning" | "function" | "custom";
  /** Frame prefix of this item's deltas, built once: deltas run per token. */
  deltaHead: string;
  /** What follows `output_index` in each delta frame: the part's place in the item (none for calls). */
  deltaWhere: string;
  /** A reasoning item's signed thinking blocks so far, and where in its text the block not yet sealed starts (plan.sealThinking). */
  blocks?: CarriedBlock[];
  sealedAt?: number;
}

/**
 * How a reasoning item carries the upstream's thinking. OpenAI shows reasoning to API clients
 * as summary parts, when asked (`reasoning.summary`); that is what the AI SDK and Codex read.
 * Unasked, the thinking is the item's `reasoning_text` content, as open-weight models' reasoning
 * is in OpenAI's API.
 */
const REASONING_AS = {
  content: {
    part: "reasoning_text",
    field: "content",
    where: `,"content_index":0`,
    delta: "response.reasoning_text.delta",
    textDone: "response.reasoning_text.done",
    partAdded: "response.content_part.added",
    partDone: "response.content_part.done",
    index: { content_index: 0 },
  },
  summary: {
    part: "summary_text",
    field: "summary",
    where: `,"summary_index":0`,
    delta: "response.reasoning_summary_text.delta",
    textDone: "response.reasoning_summary_text.done",
    partAdded: "response.reasoning_summary_part.added",
    partDone: "response.reasoning_summary_part.done",
    index: { summary_index: 0 },
  },
} as const;

/**
 * Events → the Responses API's answer: one state machine writes the stream's events (with
 * their `sequence_number`s) and builds the final response object, so a streamed answer and a
 * whole body always agree. Text and reasoning items close when another item starts; a tool call
 * stays open until the upstream finishes (its arguments may still grow, and an agent runs a call
 * when its item is done: only a whole answer's calls are). A call that starts while another is
 * open is held, whole, and goes out after it at the end: parallel calls come one item after the
 * other, as OpenAI streams them, never a second call added before the first is done. (Text or
 * reasoning that comes while a call is open still goes out as it comes, as its own item.)
 */
function createBuilder(ctx: EncodeContext, plan: ResponsesAnswerPlan, frames: boolean) {
  const base = ctx.id.slice(ctx.id.indexOf("_") + 1);
  const summary = plan.echo.reasoning.summary;
  const reasoningAs = REASONING_AS[typeof summary === "string" && SUMMARY_VALUES.has(summary) ? "summary" : "content"];
  const output: Item[] = [];
  let seq = 0;
  let began = false;
  let current: OpenItem | undefined;
  const toolsByEvent = new Map<number, OpenItem>();
  /** Calls that started while another was open, by their event index: they go out at the end (see above). */
  const heldTools = new Map<number, { id?: string; name?: string; args: string }>();
  let finish: FinishReason | undefined;
  let usage = { input: 0, output: 0, cached: undefined as number | undefined, written: undefined as number | undefined, reasoning: undefined as number | undefined };
  let wroteText = false;
  let out = "";
  /** Whether the answer is kept for later references: the route's choice, until keeping it fails. */
  let store = plan.echo.store;
  /** Signed thinking is gathered for the client (`include`) or for the kept copy. */
  const sealing = plan.sealThinking === true || plan.keepThinking === true;
  /** The client asked for a schema's JSON (`text.format`): a refusal goes in its own part, which parsers leave alone. */
  const format = (plan.echo.text as { format?: { type?: unknown } } | null | undefined)?.format?.type;
  const structured = format === "json_schema" || format === "json_object";
  /** Reasoning items' sealed thinking for the kept copy only, by item id (see keepThinking). */
  const sealedForKeeping = new Map<string, string>();

  const emit = (type: string, fields: Record<string, unknown>) => {
    const n = seq++;
    if (frames) out += `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, ...fields })}\n\n`;
  };

  const response = (status: string, extra: Record<string, unknown> = {}) => {
    const e = plan.echo;
    return {
      id: ctx.id,
      object: "response",
      created_at: ctx.created,
      status,
      background: false,
      error: null,
      incomplete_details: null,
      instructions: e.instructions,
      max_output_tokens: e.max_output_tokens,
      max_tool_calls: null,
      model: ctx.model,
      output: status === "in_progress" ? [] : output,
      parallel_tool_calls: e.parallel_tool_calls,
      previous_response_id: e.previous_response_id,
      prompt_cache_key: e.prompt_cache_key,
      reasoning: e.reasoning,
      // Whether the answer is kept for later references (the route decides; see onFinal).
      store,
      temperature: e.temperature,
      text: e.text,
      tool_choice: e.tool_choice,
      tools: e.tools,
      top_p: e.top_p,
      truncation: e.truncation,
      usage: null as unknown,
      user: e.user,
      safety_identifier: e.safety_identifier,
      metadata: e.metadata,
      ...extra,
    };
  };

  const begin = () => {
    if (began) return;
    began = true;
    emit("response.created", { response: response("in_progress") });
    emit("response.in_progress", { response: response("in_progress") });
  };

  const open = (kind: OpenItem["kind"], item: Item): OpenItem => {
    begin();
    const index = output.length;
    output.push(item);
    emit("response.output_item.added", { output_index: index, item: { ...item } });
    const deltaType = DELTA_TYPE[kind] ?? reasoningAs.delta;
    const deltaHead = `event: ${deltaType}\ndata: {"type":"${deltaType}","sequence_number":`;
    const deltaWhere = kind === "message" || kind === "refusal" ? `,"content_index":0` : kind === "reasoning" ? reasoningAs.where : "";
    const opened: OpenItem = { index, item, text: "", kind, deltaHead, deltaWhere };
    if (kind === "message") emit("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part: { type: "output_text", text: "", annotations: [] } });
    if (kind === "refusal") emit("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part: { type: "refusal", refusal: "" } });
    if (kind === "reasoning") emit(reasoningAs.partAdded, { item_id: item.id, output_index: index, ...reasoningAs.index, part: { type: reasoningAs.part, text: "" } });
    return opened;
  };

  /** A delta frame: only the text is stringified per token. */
  const delta = (o: OpenItem, text: string) => {
    o.text += text;
    const n = seq++;
    if (!frames) return;
    const tail = o.kind === "message" ? `,"logprobs":[]}` : "}";
    out += `${o.deltaHead}${n},"item_id":${JSON.stringify(o.item.id)},"output_index":${o.index}${o.deltaWhere},"delta":${JSON.stringify(text)}${tail}\n\n`;
  };

  const close = (o: OpenItem, status: "completed" | "incomplete") => {
    const { item, index, text } = o;
    switch (o.kind) {
      case "message": {
        const part = { type: "output_text", text, annotations: [] };
        emit("response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text, logprobs: [] });
        emit("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
        item.content = [part];
        item.status = status;
        break;
      }
      case "refusal": {
        const part = { type: "refusal", refusal: text };
        emit("response.refusal.done", { item_id: item.id, output_index: index, content_index: 0, refusal: text });
        emit("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
        item.content = [part];
        item.status = status;
        break;
      }
      case "reasoning": {
        const part = { type: reasoningAs.part, text };
        emit(reasoningAs.textDone, { item_id: item.id, output_index: index, ...reasoningAs.index, text });
        emit(reasoningAs.partDone, { item_id: item.id, output_index: index, ...reasoningAs.index, part });
        item[reasoningAs.field] = [part];
        if (o.blocks?.length) {
          const sealed = sealThinking(o.blocks);
          if (plan.sealThinking) item.encrypted_content = sealed;
          else sealedForKeeping.set(item.id, sealed);
        }
        break;
      }
      case "function": {
        // A call without parameters has "{}" for arguments, as a whole answer's, never "".
        if (text.trim() === "" && status === "completed") delta(o, "{}");
        item.arguments = o.text;
        item.status = status;
        // A cut call is not handed over as done: agents (Codex) run a call when its item is done,
        // whatever its status. It stays in the final response's output, incomplete.
        if (status === "incomplete") return;
        emit("response.function_call_arguments.done", { item_id: item.id, output_index: index, name: item.name, arguments: o.text });
        break;
      }
      case "custom": {
        // The upstream called a function taking `{input}`; the client asked for a free-form tool.
        const input = customInput(text, status === "incomplete");
        item.input = input;
        item.status = status;
        if (status === "incomplete") return;
        emit("response.custom_tool_call_input.delta", { item_id: item.id, output_index: index, delta: input });
        emit("response.custom_tool_call_input.done", { item_id: item.id, output_index: index, input });
        break;
      }
    }
    emit("response.output_item.done", { output_index: index, item });
  };

  const closeCurrent = () => {
    if (current) close(current, "completed");
    current = undefined;
  };

  /**
   * Tool calls share the answer's status: one cut off by the token limit or a failure is incomplete
   * too, and so is one whose arguments are not whole JSON whatever the upstream said (an agent must
   * not run half a call).
   */
  const closeAll = (status: "completed" | "incomplete") => {
    if (current) close(current, status);
    current = undefined;
    const closeCall = (tool: OpenItem) => close(tool, status === "completed" && !wholeCall(tool) ? "incomplete" : status);
    for (const tool of [...toolsByEvent.values()].sort((a, b) => a.index - b.index)) closeCall(tool);
    toolsByEvent.clear();
    // The held calls, each whole: added, its arguments, done (or left incomplete as the others are).
    for (const [index, held] of heldTools) {
      const tool = openTool(index, held.id, held.name);
      addArguments(tool, held.args);
      closeCall(tool);
    }
    heldTools.clear();
  };

  const openTool = (index: number, id: string | undefined, name: string | undefined): OpenItem => {
    const upstreamName = name ?? "";
    const client = plan.tools.get(upstreamName);
    const callId = id ?? `call_${base}_${index}`;
    const namespace = client?.namespace ? { namespace: client.namespace } : {};
    return client?.custom
      ? open("custom", { id: `ctc_${base}_${output.length}`, type: "custom_tool_call", call_id: callId, name: client.name, input: "", ...namespace })
      : open("function", { id: `fc_${base}_${output.length}`, type: "function_call", status: "in_progress", call_id: callId, name: client?.name ?? upstreamName, arguments: "", ...namespace });
  };

  const addArguments = (tool: OpenItem, args: string) => {
    if (!args) return;
    // A custom tool's input is a JSON string inside the arguments: it goes out whole once they are complete.
    if (tool.kind === "custom") tool.text += args;
    else delta(tool, args);
  };

  /** The reasoning item thinking goes to: the open one, else a new one. */
  const reasoningItem = (): OpenItem => {
    if (current?.kind !== "reasoning") {
      closeCurrent();
      // As OpenAI writes it: `summary` always, `content` only when that is where the text goes.
      current = open("reasoning", { id: `rs_${base}_${output.length}`, type: "reasoning", summary: [], ...(reasoningAs.field === "content" ? { content: [] } : {}) });
    }
    return current;
  };

  /** Text, or a refusal: each a message of its own kind (a refusal is a message whose part is one). */
  const text = (t: string, kind: "message" | "refusal" = "message") => {
    if (current?.kind !== kind) {
      closeCurrent();
      current = open(kind, { id: `msg_${base}_${output.length}`, type: "message", status: "in_progress", role: "assistant", content: [] });
    }
    wroteText = true;
    delta(current, t);
  };

  const finalUsage = () => ({
    input_tokens: usage.input,
    // Cache writes as OpenAI reports them (GPT-5.6 and later bill them at 1.25× input), when there were any.
    input_tokens_details: usage.written ? { cached_tokens: usage.cached ?? 0, cache_write_tokens: usage.written } : { cached_tokens: usage.cached ?? 0 },
    output_tokens: usage.output,
    output_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
    total_tokens: usage.input + usage.output,
  });

  const finalResponse = () => {
    const reason = finish && INCOMPLETE[finish];
    return reason ? response("incomplete", { incomplete_details: { reason }, usage: finalUsage() }) : response("completed", { usage: finalUsage() });
  };

  const take = () => {
    const s = out;
    out = "";
    return s;
  };

  return {
    event(e: StreamEvent): string {
      switch (e.type) {
        case "start":
          begin();
          break;
        case "text":
          if (e.text) text(e.text);
          else begin();
          break;
        case "refusal":
          // OpenAI's own place for it when the client asked for structured output: `responses.parse`
          // leaves a refusal unparsed (output_parsed null) instead of throwing on its words. Else its
          // words as text: Codex shows nothing of a refusal part and drops the turn from its history
          // (a probe of the agent CLIs).
          if (e.text) text(e.text, structured ? "refusal" : "message");
          break;
        case "image":
          text(imageMarkdown(e.url, wroteText));
          break;
        case "redacted-reasoning":
          // Hidden thinking is the client's only to send back, sealed, when it asked to.
          if (sealing) (reasoningItem().blocks ??= []).push({ type: "redacted_thinking", data: e.data });
          break;
        case "reasoning": {
          // A signature alone (Anthropic's seal on its thinking) is not the client's to read; it
          // seals the block for a client that keeps reasoning to send it back.
          const seal = sealing && e.signature !== undefined && e.signature !== "";
          if (!e.text && !seal) break;
          const item = reasoningItem();
          if (e.text) delta(item, e.text);
          if (seal) {
            // The block is the item's text since the last seal (an item may hold several blocks).
            (item.blocks ??= []).push({ type: "thinking", thinking: item.text.slice(item.sealedAt ?? 0), signature: e.signature! });
            item.sealedAt = item.text.length;
          }
          break;
        }
        case "tool-call": {
          let tool = toolsByEvent.get(e.index);
          if (!tool) {
            const held = heldTools.get(e.index);
            if (held) {
              held.args += e.argumentsDelta;
              held.id ??= e.id;
              held.name ??= e.name;
              break;
            }
            if (toolsByEvent.size > 0) {
              // Another call is open: this one waits, whole, until the end (see createBuilder).
              // The text before it is over, as when a call opens: what comes after is another message.
              closeCurrent();
              heldTools.set(e.index, { id: e.id, name: e.name, args: e.argumentsDelta });
              break;
            }
            closeCurrent();
            tool = openTool(e.index, e.id, e.name);
            toolsByEvent.set(e.index, tool);
          }
          addArguments(tool, e.argumentsDelta);
          break;
        }
        case "usage":
          usage = {
            input: e.inputTokens ?? usage.input,
            output: e.outputTokens ?? usage.output,
            cached: e.cacheReadTokens ?? usage.cached,
            written: e.cacheWriteTokens ?? usage.written,
            reasoning: e.reasoningTokens ?? usage.reasoning,
          };
          break;
        case "finish":
          // Items close at the end (`end()`), or as incomplete if the stream fails before it: a
          // finish followed by a cut connection is not a whole answer, and chunks that trail the
          // finish still belong to their call.
          finish = e.reason;
          begin();
          break;
        case "error": {
          begin();
          // What already went out stays in the failed response's output, as incomplete items.
          closeAll("incomplete");
          const code = ERROR_CODE[e.errorType];
          emit("error", { code, message: e.message, param: null });
          // A failed answer is not kept (only whole ones are): it says so, so no client refers to it later.
          emit("response.failed", { response: response("failed", { error: { code, message: e.message }, usage: finalUsage(), store: false }) });
          break;
        }
      }
      return take();
    },
    end(): string | Promise<string> {
      begin();
      const reason = finish && INCOMPLETE[finish];
      closeAll(reason ? "incomplete" : "completed");
      const final = finalResponse();
      const last = (kept: boolean | void) => {
        if (kept === false && store) {
          store = false;
          final.store = false;
        }
        emit(reason ? "response.incomplete" : "response.completed", { response: final });
        return take();
      };
      const kept = plan.onFinal?.(final, sealedForKeeping);
      return kept instanceof Promise ? kept.then(last) : last(kept);
    },
    /** The whole answer, once `end()` ran. */
    final: () => finalResponse(),
  };
}

/** Whether a call's arguments are whole: JSON for a function (empty: none, "{}"), an input a free-form call can be read from. */
function wholeCall(o: { kind: string; text: string }): boolean {
  if (o.kind === "function") {
    if (o.text.trim() === "") return true;
    try {
      JSON.parse(o.text);
      return true;
    } catch {
      return false;
    }
  }
  if (o.kind === "custom") {
    try {
      // Any JSON is whole (a model that ignored `{input}` still answered; its text is the input).
      JSON.parse(o.text);
      return true;
    } catch {
      // Text that is not JSON at all is taken as the input itself; a cut `{"input":"…` is not whole.
      return !/^\s*\{/.test(o.text);
    }
  }
  return true;
}

/** Events → Responses API stream events (`event:` named, numbered), for `stream: true`. */
export function createResponsesEncoder(ctx: EncodeContext, plan: ResponsesAnswerPlan = NO_PLAN): ClientSink {
  const builder = createBuilder(ctx, plan, true);
  return {
    event: (e) => builder.event(e),
    frame(_raw, { events }) {
      let out = "";
      for (const e of events) out += builder.event(e);
      return out;
    },
    end: () => builder.end(),
    keepAlive: () => KEEP_ALIVE,
    // response.failed carries usage: it shows what the failed answer was charged for.
    usageOnFailure: true,
  };
}

/** Events of a whole answer → a Responses API `response` object. */
export function encodeResponsesBody(events: StreamEvent[], ctx: EncodeContext, plan?: SyncResponsesAnswerPlan): ResponsesBody;
export function encodeResponsesBody(events: StreamEvent[], ctx: EncodeContext, plan: ResponsesAnswerPlan): ResponsesBody | Promise<ResponsesBody>;
export function encodeResponsesBody(events: StreamEvent[], ctx: EncodeContext, plan: ResponsesAnswerPlan = NO_PLAN): ResponsesBody | Promise<ResponsesBody> {
  const builder = createBuilder(ctx, plan, false);
  for (const e of events) builder.event(e);
  const ended = builder.end();
  return typeof ended === "string" ? builder.final() : ended.then(() => builder.final());
}
