/**
 * OpenAI's Responses API answers, written as OpenAI writes them (event names on `event:` lines,
 * `sequence_number`s, the `obfuscation` padding on deltas, items added → parts → deltas → done,
 * the final response with its usage), for fake upstreams of `upstream_api: "responses"` models.
 * A script of output items becomes the stream's frames or the whole body; options add the quirks
 * a real connection has (keep-alive comments, CRLF line ends).
 */
import { vendorRefusal, type RecordedRequest, type Reply } from "./fake-upstream.ts";

export type ScriptItem =
  | { reasoning: string[]; encrypted?: string }
  | { text: string }
  | { refusal: string }
  | { call: { name: string; arguments: string; callId?: string } };

export interface Script {
  items: ScriptItem[];
  usage?: Record<string, unknown> | null;
  /** `incomplete` with its reason, or `failed` with an error; `completed` when unset. */
  status?: "completed" | "incomplete" | "failed";
  incompleteReason?: string;
  error?: { code: string; message: string };
  serviceTier?: string;
  /**
   * The response's `prompt_cache_retention`, which OpenAI echoes: what the request asked for
   * (`answerWith` fills it in), else `"24h"` (GPT-5.6 and later echo it unasked).
   */
  promptCacheRetention?: string;
  /**
   * Fields of the request the response repeats, as OpenAI's does in every event that carries it
   * (`instructions`, `tools`, …): `answerWith`'s `echoRequest` fills them from the request.
   */
  echo?: Record<string, unknown>;
  /** The response's id (OpenAI's `resp_…`). */
  id?: string;
  model?: string;
}

export const USAGE = (input: number, output: number, cached = 0, reasoning = 0) => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: reasoning },
  total_tokens: input + output,
});

/** The output items of a finished script, as the final response lists them. */
function outputItems(script: Script): Record<string, unknown>[] {
  return script.items.map((item, i) => {
    if ("reasoning" in item) {
      return { id: `rs_${i}`, type: "reasoning", summary: item.reasoning.map((text) => ({ type: "summary_text", text })), ...(item.encrypted ? { encrypted_content: item.encrypted } : {}) };
    }
    if ("text" in item) return { id: `msg_${i}`, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", annotations: [], logprobs: [], text: item.text }] };
    if ("refusal" in item) return { id: `msg_${i}`, type: "message", status: "completed", role: "assistant", content: [{ type: "refusal", refusal: item.refusal }] };
    return { id: `fc_${i}`, type: "function_call", status: "completed", arguments: item.call.arguments, call_id: item.call.callId ?? `call_${i}`, name: item.call.name };
  });
}

function response(script: Script, status: string, output: Record<string, unknown>[], usage: unknown) {
  return {
    id: script.id ?? "resp_upstream1",
    object: "response",
    created_at: 1764460800,
    status,
    background: false,
    error: status === "failed" ? (script.error ?? { code: "server_error", message: "The model failed." }) : null,
    incomplete_details: status === "incomplete" ? { reason: script.incompleteReason ?? "max_output_tokens" } : null,
    model: script.model ?? "gpt-6-sol-2026-10-01",
    output,
    parallel_tool_calls: true,
    reasoning: { effort: "medium", summary: "auto" },
    service_tier: script.serviceTier ?? "default",
    prompt_cache_retention: script.promptCacheRetention ?? "24h",
    store: false,
    text: { format: { type: "text" }, verbosity: "medium" },
    usage,
    ...script.echo,
  };
}

/** The whole answer (`stream` false). */
export function responsesBody(script: Script): Record<string, unknown> {
  return response(script, script.status ?? "completed", outputItems(script), script.usage === undefined ? USAGE(10, 5) : script.usage);
}

/** Pieces of text in the sizes a model streams them. */
function pieces(text: string, size = 4): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out.length > 0 ? out : [""];
}

/** The stream's events, each `{type, sequence_number, …}`, in OpenAI's order. */
export function responsesEvents(script: Script): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  const add = (type: string, fields: Record<string, unknown>) => events.push({ type, sequence_number: events.length, ...fields });
  const pad = () => "x".repeat(1 + (events.length % 7));
  add("response.created", { response: response(script, "in_progress", [], null) });
  add("response.in_progress", { response: response(script, "in_progress", [], null) });
  const done = outputItems(script);
  script.items.forEach((item, output_index) => {
    const final = done[output_index]!;
    const item_id = final.id;
    if ("reasoning" in item) {
      add("response.output_item.added", { output_index, item: { id: item_id, type: "reasoning", summary: [] } });
      item.reasoning.forEach((text, summary_index) => {
        add("response.reasoning_summary_part.added", { item_id, output_index, summary_index, part: { type: "summary_text", text: "" } });
        for (const delta of pieces(text)) add("response.reasoning_summary_text.delta", { item_id, output_index, summary_index, delta, obfuscation: pad() });
        add("response.reasoning_summary_text.done", { item_id, output_index, summary_index, text });
        add("response.reasoning_summary_part.done", { item_id, output_index, summary_index, part: { type: "summary_text", text } });
      });
    } else if ("text" in item || "refusal" in item) {
      const refusal = "refusal" in item;
      const text = refusal ? item.refusal : item.text;
      add("response.output_item.added", { output_index, item: { id: item_id, type: "message", status: "in_progress", content: [], role: "assistant" } });
      add("response.content_part.added", { item_id, output_index, content_index: 0, part: refusal ? { type: "refusal", refusal: "" } : { type: "output_text", annotations: [], logprobs: [], text: "" } });
      for (const delta of pieces(text)) {
        if (refusal) add("response.refusal.delta", { item_id, output_index, content_index: 0, delta });
        else add("response.output_text.delta", { item_id, output_index, content_index: 0, delta, logprobs: [], obfuscation: pad() });
      }
      if (refusal) add("response.refusal.done", { item_id, output_index, content_index: 0, refusal: text });
      else add("response.output_text.done", { item_id, output_index, content_index: 0, text, logprobs: [] });
      add("response.content_part.done", { item_id, output_index, content_index: 0, part: (final.content as unknown[])[0] });
    } else {
      add("response.output_item.added", { output_index, item: { ...final, status: "in_progress", arguments: "" } });
      for (const delta of pieces(item.call.arguments, 7)) add("response.function_call_arguments.delta", { item_id, output_index, delta, obfuscation: pad() });
      add("response.function_call_arguments.done", { item_id, output_index, arguments: item.call.arguments });
    }
    add("response.output_item.done", { output_index, item: final });
  });
  const status = script.status ?? "completed";
  const usage = script.usage === undefined ? USAGE(10, 5) : script.usage;
  if (status === "failed") add("response.failed", { response: response(script, "failed", done, usage) });
  else add(`response.${status}`, { response: response(script, status, done, usage) });
  return events;
}

export interface WireOptions {
  /** The response repeats the request's `instructions` and `tools` (Script.echo), as OpenAI's does. */
  echoRequest?: boolean;
  /** Line ends: `\n` (OpenAI's) or `\r\n`. */
  crlf?: boolean;
  /** A `: keep-alive` comment before every n-th event. */
  keepAliveEvery?: number;
}

/** One event as its frame: `event:` line, `data:` line, blank line. */
export function frameOf(event: Record<string, unknown>, options: WireOptions = {}): string {
  const nl = options.crlf ? "\r\n" : "\n";
  return `event: ${String(event.type)}${nl}data: ${JSON.stringify(event)}${nl}${nl}`;
}

/** The stream's bytes as text, one string per event. */
export function responsesFrames(script: Script, options: WireOptions = {}): string[] {
  const nl = options.crlf ? "\r\n" : "\n";
  return responsesEvents(script).map((event, i) => (options.keepAliveEvery && i % options.keepAliveEvery === 0 ? `: keep-alive${nl}${nl}` : "") + frameOf(event, options));
}

/** Text cut into pieces of `size` bytes (frames split anywhere, inside a line or a CRLF). */
export function splitEvery(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/**
 * A fake upstream's reply to the next call: `script` streamed (with the wire's quirks) when asked
 * to stream, else whole; what OpenAI refuses is refused as it does (`vendorRefusal`); 404 off the
 * Responses API.
 */
export function answerWith(script: Script, wire: WireOptions & { split?: number } = {}): (req: RecordedRequest) => Reply {
  return (req) => {
    if (req.path !== "/v1/responses") return { kind: "json", status: 404, body: { error: { message: `not the Responses API: ${req.path}` } } };
    const refusal = vendorRefusal(req);
    if (refusal) return refusal;
    const asked = req.body?.prompt_cache_retention;
    let echoed = script.promptCacheRetention === undefined && typeof asked === "string" ? { ...script, promptCacheRetention: asked } : script;
    if (wire.echoRequest) echoed = { ...echoed, echo: { instructions: req.body?.instructions ?? null, tools: req.body?.tools ?? [] } };
    if (req.body?.stream !== true) return { kind: "json", body: responsesBody(echoed) };
    const frames = responsesFrames(echoed, wire);
    return { kind: "sse", chunks: wire.split ? splitEvery(frames.join(""), wire.split) : frames };
  };
}
