import { describe, expect, test } from "bun:test";
import { createResponsesEncoder, encodeResponsesBody, type ResponsesAnswerPlan, type SyncResponsesAnswerPlan } from "../../../../src/formats/openai-responses/encode-responses.ts";
import { responsesToChat } from "../../../../src/formats/openai-responses/responses-to-chat.ts";
import type { StreamEvent } from "../../../../src/streaming/events.ts";
import type { EncodeContext } from "../../../../src/streaming/client-sink.ts";
import { sseFrames } from "../../../helpers/gateway.ts";

const ctx: EncodeContext = { id: "resp_0123abcd", created: 1761565012, model: "test/gpt", includeUsage: false };

function run(events: StreamEvent[], plan?: ResponsesAnswerPlan, end = true) {
  const sink = createResponsesEncoder(ctx, plan);
  let text = "";
  for (const e of events) text += sink.event(e);
  if (end) text += sink.end();
  return sseFrames(text).map((f) => ({ event: f.event, ...JSON.parse(f.data) }));
}

const planFor = (tools: unknown[]): SyncResponsesAnswerPlan => responsesToChat({ input: "x", tools });

describe("Responses encoder: a call is announced done only when it is whole and the answer is", () => {
  const done = (frames: { type: string }[]) => frames.filter((f) => f.type === "response.output_item.done" || f.type.endsWith("arguments.done") || f.type.endsWith("input.done"));

  test("a finish then a cut connection: nothing done, the failed response's call incomplete", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "call_r", name: "read", argumentsDelta: '{"path":"a"}' },
      { type: "finish", reason: "tool_calls" },
      { type: "error", errorType: "upstream", message: "The connection to the upstream provider was lost." },
    ], undefined, false);
    expect(done(frames)).toEqual([]);
    expect(frames.at(-1)).toMatchObject({ type: "response.failed", response: { output: [expect.objectContaining({ type: "function_call", status: "incomplete" })] } });
  });

  test("chunks that trail the finish still belong to their call: one item, whole", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "call_r", name: "read", argumentsDelta: '{"path":' },
      { type: "finish", reason: "tool_calls" },
      { type: "tool-call", index: 0, argumentsDelta: '"a"}' },
    ]);
    expect(done(frames).filter((f) => f.type === "response.output_item.done")).toEqual([expect.objectContaining({ item: expect.objectContaining({ name: "read", arguments: '{"path":"a"}', status: "completed" }) })]);
  });

  test("a free-form call cut inside an escape keeps the input it had reached", () => {
    const plan = planFor([{ type: "custom", name: "apply_patch", description: "Apply a patch" }]);
    for (const cut of ['{"input":"abc\\u00', '{"input":"abc\\', '{"input":"abc', '{"input":"abc"', '{"input":"abc" ']) {
      const frames = run([{ type: "tool-call", index: 0, id: "call_c", name: "apply_patch", argumentsDelta: cut }, { type: "finish", reason: "length" }], plan);
      expect([cut, frames.at(-1).response.output]).toEqual([cut, [expect.objectContaining({ type: "custom_tool_call", status: "incomplete", input: "abc" })]]);
    }
  });

  test("a finished free-form call whose JSON is not `{input}` is still announced, its text the input; whitespace arguments are {}", () => {
    const plan = planFor([{ type: "custom", name: "apply_patch", description: "Apply a patch" }, { type: "function", name: "f", parameters: { type: "object", properties: {} } }]);
    const frames = run([
      { type: "tool-call", index: 0, id: "call_c", name: "apply_patch", argumentsDelta: '{"patch":"*** Begin"}' },
      { type: "tool-call", index: 1, id: "call_f", name: "f", argumentsDelta: "  " },
      { type: "finish", reason: "tool_calls" },
    ], plan);
    const items = frames.filter((f) => f.type === "response.output_item.done").map((f) => f.item);
    expect(items).toEqual([
      expect.objectContaining({ type: "custom_tool_call", status: "completed", input: '{"patch":"*** Begin"}' }),
      expect.objectContaining({ type: "function_call", status: "completed", arguments: "  {}" }),
    ]);
  });

  test("arguments that are not whole JSON at the end make an incomplete call, never done, whatever the finish said", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "call_b", name: "read", argumentsDelta: '{"path":"a' },
      { type: "finish", reason: "tool_calls" },
    ]);
    expect(done(frames)).toEqual([]);
    expect(frames.at(-1).response.output).toEqual([expect.objectContaining({ type: "function_call", status: "incomplete", arguments: '{"path":"a' })]);
  });
});

describe("Responses encoder", () => {
  test("every frame is named by its type and numbered in order; the streamed final response equals the whole body", () => {
    const events: StreamEvent[] = [
      { type: "start" },
      { type: "reasoning", text: "Hmm." },
      { type: "text", text: "Hel" },
      { type: "text", text: "lo" },
      { type: "tool-call", index: 0, id: "call_1", name: "f", argumentsDelta: '{"a"' },
      { type: "tool-call", index: 0, argumentsDelta: ":1}" },
      { type: "finish", reason: "tool_calls" },
      { type: "usage", inputTokens: 10, outputTokens: 5, cacheReadTokens: 4 },
    ];
    const frames = run(events);
    for (const f of frames) expect(f.event).toBe(f.type);
    expect(frames.map((f) => f.sequence_number)).toEqual(frames.map((_, i) => i));
    const completed = frames.at(-1)!;
    expect(completed.type).toBe("response.completed");
    expect(completed.response.usage).toEqual({ input_tokens: 10, input_tokens_details: { cached_tokens: 4 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 });
    expect(completed.response.output.map((o: any) => o.type)).toEqual(["reasoning", "message", "function_call"]);
    expect(encodeResponsesBody(events, ctx)).toEqual(completed.response);
    // Item ids carry the answer's id, so they are unique and lead back to it.
    for (const item of completed.response.output) expect(item.id).toContain("0123abcd");
  });

  test("tool calls whose argument deltas interleave each keep their own arguments", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "a", name: "f", argumentsDelta: '{"x":' },
      { type: "tool-call", index: 1, id: "b", name: "g", argumentsDelta: '{"y":' },
      { type: "tool-call", index: 0, argumentsDelta: "1}" },
      { type: "tool-call", index: 1, argumentsDelta: "2}" },
      { type: "finish", reason: "tool_calls" },
    ]);
    const output = frames.at(-1)!.response.output;
    expect(output.map((o: any) => [o.call_id, o.name, o.arguments])).toEqual([["a", "f", '{"x":1}'], ["b", "g", '{"y":2}']]);
    const done = frames.filter((f) => f.type === "response.function_call_arguments.done").map((f) => f.arguments);
    expect(done).toEqual(['{"x":1}', '{"y":2}']);
  });

  test("parallel calls go out one item after the other, as OpenAI streams them: the second is added only after the first is done", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "a", name: "f", argumentsDelta: '{"x":1}' },
      { type: "tool-call", index: 1, id: "b", name: "g", argumentsDelta: '{"y":' },
      { type: "tool-call", index: 1, argumentsDelta: "2}" },
      { type: "tool-call", index: 2, id: "c", name: "h", argumentsDelta: "{}" },
      { type: "finish", reason: "tool_calls" },
    ]);
    const items = frames.filter((f) => f.type === "response.output_item.added" || f.type === "response.output_item.done").map((f) => `${f.type.slice(21)} ${f.item.call_id}`);
    expect(items).toEqual(["added a", "done a", "added b", "done b", "added c", "done c"]);
    // Every delta of an item comes between its added and its done, and names that item.
    let open: string | undefined;
    for (const f of frames) {
      if (f.type === "response.output_item.added") open = f.item.id;
      if (f.type === "response.function_call_arguments.delta") expect(f.item_id).toBe(open);
      if (f.type === "response.output_item.done") open = undefined;
    }
    expect(frames.at(-1)!.response.output.map((o: any) => [o.call_id, o.arguments, o.status])).toEqual([["a", '{"x":1}', "completed"], ["b", '{"y":2}', "completed"], ["c", "{}", "completed"]]);
    // The output indexes count up in that order too.
    expect(frames.filter((f) => f.type === "response.output_item.added").map((f) => f.output_index)).toEqual([0, 1, 2]);
  });

  test("text around a held call stays two messages, in the order it came", () => {
    const body = encodeResponsesBody([
      { type: "tool-call", index: 0, id: "a", name: "f", argumentsDelta: "{}" },
      { type: "text", text: "hello" },
      { type: "tool-call", index: 1, id: "b", name: "g", argumentsDelta: "{}" },
      { type: "text", text: "world" },
      { type: "finish", reason: "tool_calls" },
    ], ctx);
    expect(body.output.map((o: any) => o.type === "message" ? `message ${o.content[0].text}` : `call ${o.call_id}`)).toEqual(["call a", "message hello", "message world", "call b"]);
  });

  test("a held call of an answer that fails is in the failed response's output, incomplete, and never announced done", () => {
    const frames = run([
      { type: "tool-call", index: 0, id: "a", name: "f", argumentsDelta: '{"x":1}' },
      { type: "tool-call", index: 1, id: "b", name: "g", argumentsDelta: '{"y":2}' },
      { type: "error", errorType: "upstream", message: "The connection to the upstream provider was lost." },
    ], undefined, false);
    expect(frames.filter((f) => f.type === "response.output_item.done")).toEqual([]);
    expect(frames.at(-1)).toMatchObject({ type: "response.failed" });
    expect(frames.at(-1)!.response.output.map((o: any) => [o.call_id, o.status])).toEqual([["a", "incomplete"], ["b", "incomplete"]]);
  });

  test("a custom tool's input: the `input` field, else a bare JSON string, else the text as the model wrote it", () => {
    const plan = planFor([{ type: "custom", name: "apply_patch" }]);
    const inputOf = (args: string) => encodeResponsesBody([{ type: "tool-call", index: 0, id: "c", name: "apply_patch", argumentsDelta: args }, { type: "finish", reason: "tool_calls" }], ctx, plan).output[0];
    expect(inputOf('{"input":"*** Begin Patch\\n"}')).toMatchObject({ type: "custom_tool_call", input: "*** Begin Patch\n", call_id: "c" });
    expect(inputOf('"just text"')).toMatchObject({ input: "just text" });
    expect(inputOf("*** Begin Patch (not JSON)")).toMatchObject({ input: "*** Begin Patch (not JSON)" });
    expect(inputOf('{"patch":"x"}')).toMatchObject({ input: '{"patch":"x"}' });
  });

  test("a call without an upstream id gets one derived from the answer's id", () => {
    const body = encodeResponsesBody([{ type: "tool-call", index: 0, name: "f", argumentsDelta: "{}" }], ctx);
    expect(body.output[0]).toMatchObject({ call_id: "call_0123abcd_0" });
  });

  test("images from the upstream are markdown in the message text, after text on a new paragraph", () => {
    const body = encodeResponsesBody([{ type: "text", text: "Here:" }, { type: "image", url: "data:image/png;base64,AAAA" }, { type: "finish", reason: "stop" }], ctx);
    expect((body as any).output[0].content[0].text).toBe("Here:\n\n![image](data:image/png;base64,AAAA)");
  });

  test("an error before any output: created, in_progress, error, failed — never completed", () => {
    const frames = run([{ type: "error", errorType: "overloaded", message: "The upstream provider is overloaded; retry shortly." }], undefined, false);
    expect(frames.map((f) => f.type)).toEqual(["response.created", "response.in_progress", "error", "response.failed"]);
    // Transient: `server_error`, which Codex retries (`server_is_overloaded` made it give up: "choose another model").
    expect(frames[2]).toMatchObject({ code: "server_error", message: "The upstream provider is overloaded; retry shortly.", param: null });
    expect(frames[3].response).toMatchObject({ status: "failed", error: { code: "server_error" } });
  });

  test("content filtered: incomplete with its reason", () => {
    const body = encodeResponsesBody([{ type: "text", text: "x" }, { type: "finish", reason: "content_filter" }], ctx);
    expect(body).toMatchObject({ status: "incomplete", incomplete_details: { reason: "content_filter" } });
  });

  test("reasoning.summary asked: summary part events in OpenAI's order and shape, the item's summary in the stream and the body alike", () => {
    const plan = responsesToChat({ input: "x", reasoning: { summary: "concise" } });
    const events: StreamEvent[] = [
      { type: "reasoning", text: "Think " },
      { type: "reasoning", text: "twice." },
      { type: "reasoning", text: "", signature: "sig" },
      { type: "text", text: "Done." },
      { type: "finish", reason: "stop" },
    ];
    const frames = run(events, plan);
    const id = "rs_0123abcd_0";
    expect(frames.slice(2, 10).map(({ event: _e, sequence_number: _n, ...f }) => f)).toEqual([
      { type: "response.output_item.added", output_index: 0, item: { id, type: "reasoning", summary: [] } },
      { type: "response.reasoning_summary_part.added", item_id: id, output_index: 0, summary_index: 0, part: { type: "summary_text", text: "" } },
      { type: "response.reasoning_summary_text.delta", item_id: id, output_index: 0, summary_index: 0, delta: "Think " },
      { type: "response.reasoning_summary_text.delta", item_id: id, output_index: 0, summary_index: 0, delta: "twice." },
      { type: "response.reasoning_summary_text.done", item_id: id, output_index: 0, summary_index: 0, text: "Think twice." },
      { type: "response.reasoning_summary_part.done", item_id: id, output_index: 0, summary_index: 0, part: { type: "summary_text", text: "Think twice." } },
      { type: "response.output_item.done", output_index: 0, item: { id, type: "reasoning", summary: [{ type: "summary_text", text: "Think twice." }] } },
      { type: "response.output_item.added", output_index: 1, item: expect.objectContaining({ type: "message" }) },
    ]);
    const completed = frames.at(-1)!.response;
    expect(completed.output[0]).toEqual({ id, type: "reasoning", summary: [{ type: "summary_text", text: "Think twice." }] });
    expect(encodeResponsesBody(events, ctx, plan)).toEqual(completed);
    // Unasked (or asked with a value that is not a summary), the thinking is the item's content.
    for (const summary of [undefined, null, "none"]) {
      const body = encodeResponsesBody(events, ctx, responsesToChat({ input: "x", reasoning: { summary } }));
      expect(body.output[0]).toEqual({ id, type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "Think twice." }] });
    }
  });

  test("the final response is handed over once, before response.completed, for completed and incomplete answers, never for failed ones", () => {
    const finals: unknown[] = [];
    const plan = { ...planFor([]), onFinal: (r: unknown) => void finals.push(structuredClone(r)) };
    const sink = createResponsesEncoder(ctx, plan);
    sink.event({ type: "text", text: "Hi" });
    sink.event({ type: "finish", reason: "stop" });
    expect(finals).toHaveLength(0);
    const closing = sseFrames(sink.end() as string).map((f) => JSON.parse(f.data));
    expect(finals).toEqual([closing.at(-1)!.response]);
    expect(encodeResponsesBody([{ type: "text", text: "Cut" }, { type: "finish", reason: "length" }], ctx, plan)).toEqual(finals[1] as never);
    expect(finals[1]).toMatchObject({ status: "incomplete" });
    run([{ type: "text", text: "x" }, { type: "error", errorType: "upstream", message: "lost" }], plan, false);
    expect(finals).toHaveLength(2);
  });

  test("keep-alive is an SSE comment, which both the SDK and Codex skip", () => {
    expect(createResponsesEncoder(ctx).keepAlive()).toBe(": keep-alive\n\n");
  });
});
