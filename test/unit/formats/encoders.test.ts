import { describe, expect, test } from "bun:test";
import type { StreamEvent } from "../../../src/streaming/events.ts";
import { createOpenAIEncoder, createOpenAIRelay, encodeOpenAIBody } from "../../../src/formats/openai-chat/encode-openai.ts";
import { createAnthropicEncoder, createAnthropicRelay, encodeAnthropicBody } from "../../../src/formats/anthropic-messages/encode-anthropic.ts";
import { createSseParser, type SseEvent } from "../../../src/streaming/sse-parser.ts";
import { openaiAdapter } from "../../../src/providers/openai/openai-adapter.ts";
import { anthropicAdapter } from "../../../src/providers/anthropic/anthropic-adapter.ts";
import { collectAnswer } from "../../../src/formats/common/collect-answer.ts";
import type { ClientSink } from "../../../src/streaming/client-sink.ts";

const ctx = { id: "id-1", created: 1_700_000_000, model: "vendor/model", includeUsage: true };

const answer: StreamEvent[] = [
  { type: "start", inputTokens: 20 },
  { type: "text", text: "Let me check " },
  { type: "text", text: "the weather. \u{1F324}" },
  { type: "tool-call", index: 0, id: "call_a", name: "get_weather", argumentsDelta: "" },
  { type: "tool-call", index: 0, argumentsDelta: '{"city":' },
  { type: "tool-call", index: 0, argumentsDelta: '"Paris"}' },
  { type: "tool-call", index: 1, id: "call_b", name: "get_time", argumentsDelta: "{}" },
  { type: "finish", reason: "tool_calls" },
  { type: "usage", inputTokens: 20, outputTokens: 31 },
];

function frames(text: string): SseEvent[] {
  const out: SseEvent[] = [];
  const parser = createSseParser({ onEvent: (e) => out.push(e) });
  parser.feed(text);
  parser.end();
  return out;
}

function encodeAll(sink: ClientSink, events: StreamEvent[]): string {
  let text = "";
  for (const e of events) text += sink.event(e);
  return text + sink.end();
}

/** What a client would reconstruct: the meaning, not the framing. */
function meaning(events: StreamEvent[]) {
  const a = collectAnswer(events);
  return { text: a.text, tools: a.tools, finish: a.finish, input: a.inputTokens, output: a.outputTokens };
}

describe("OpenAI encoder", () => {
  test("chunk sequence: role first, deltas, finish, usage chunk, [DONE]", () => {
    const list = frames(encodeAll(createOpenAIEncoder(ctx), answer));
    expect(list.at(-1)!.data).toBe("[DONE]");
    const chunks = list.slice(0, -1).map((f) => JSON.parse(f.data));
    for (const c of chunks) {
      expect(c).toMatchObject({ id: "id-1", object: "chat.completion.chunk", created: 1_700_000_000, model: "vendor/model" });
    }
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" });
    expect(chunks[1].choices[0].delta).toEqual({ content: "Let me check " });
    expect(chunks[3].choices[0].delta.tool_calls[0]).toEqual({ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } });
    expect(chunks[4].choices[0].delta.tool_calls[0]).toEqual({ index: 0, function: { arguments: '{"city":' } });
    const finish = chunks.find((c) => c.choices[0]?.finish_reason);
    expect(finish.choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: "tool_calls" });
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual({ prompt_tokens: 20, completion_tokens: 31, total_tokens: 51, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
  });

  test("an answer that opens with a tool call: the role rides in that chunk with content null, as OpenAI's does; reasoning first: content null too", () => {
    const calls: StreamEvent[] = [
      { type: "start" },
      { type: "tool-call", index: 0, id: "call_a", name: "get_weather", argumentsDelta: "" },
      { type: "tool-call", index: 0, argumentsDelta: "{}" },
      { type: "finish", reason: "tool_calls" },
    ];
    const chunks = frames(encodeAll(createOpenAIEncoder(ctx), calls)).slice(0, -1).map((f) => JSON.parse(f.data));
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } }] });
    expect(chunks[1].choices[0].delta).toEqual({ tool_calls: [{ index: 0, function: { arguments: "{}" } }] });
    const thought = frames(encodeAll(createOpenAIEncoder(ctx), [{ type: "start" }, { type: "reasoning", text: "hm" }, ...calls.slice(1)])).map((f) => f.data);
    expect(JSON.parse(thought[0]!).choices[0].delta).toEqual({ role: "assistant", content: null });
    // Only reasoning (a thinking answer cut by max_tokens): its content ends as the whole answer's, "".
    const onlyThought = frames(encodeAll(createOpenAIEncoder(ctx), [{ type: "start" }, { type: "reasoning", text: "hm" }, { type: "finish", reason: "length" }]));
    const deltas = onlyThought.slice(0, -1).map((f) => JSON.parse(f.data).choices[0]?.delta).filter(Boolean);
    expect(deltas).toEqual([{ role: "assistant", content: null }, { reasoning_content: "hm" }, { content: "" }, {}]);
    expect(encodeOpenAIBody([{ type: "reasoning", text: "hm" }, { type: "finish", reason: "length" }], ctx).choices[0].message.content).toBe("");
    // Nothing at all: the role still goes out, with the empty text OpenAI sends.
    expect(JSON.parse(frames(encodeAll(createOpenAIEncoder(ctx), [{ type: "start" }, { type: "finish", reason: "stop" }]))[0]!.data).choices[0].delta).toEqual({ role: "assistant", content: "" });
  });

  test("no usage chunk unless the client asked", () => {
    const list = frames(encodeAll(createOpenAIEncoder({ ...ctx, includeUsage: false }), answer));
    expect(list.some((f) => f.data.includes('"usage"'))).toBe(false);
    expect(list.at(-1)!.data).toBe("[DONE]");
  });

  test("error frame shape", () => {
    const text = createOpenAIEncoder(ctx).event({ type: "error", errorType: "upstream", message: "boom" });
    // The same shape as the error before a stream starts (OpenAI's own in-stream errors carry param and code too).
    expect(text).toBe('data: {"error":{"message":"boom","type":"upstream_error","param":null,"code":null}}\n\n');
    expect(createOpenAIEncoder(ctx).event({ type: "error", errorType: "rate_limit", message: "slow down" })).toBe('data: {"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}\n\n');
  });

  test("round trip through the OpenAI decoder keeps the meaning", () => {
    const decode = openaiAdapter.createStreamDecoder();
    const decoded = frames(encodeAll(createOpenAIEncoder(ctx), answer)).flatMap((f) => decode(f).events);
    expect(meaning(decoded)).toEqual(meaning(answer));
  });

  test("non-stream body", () => {
    const body = encodeOpenAIBody(answer, ctx);
    expect(body).toMatchObject({ id: "id-1", object: "chat.completion", model: "vendor/model", usage: { prompt_tokens: 20, completion_tokens: 31, total_tokens: 51 } });
    expect(body.choices[0]!.finish_reason).toBe("tool_calls");
    expect(body.choices[0]!.message.content).toBe("Let me check the weather. \u{1F324}");
    expect(body.choices[0]!.message.tool_calls).toEqual([
      { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
      { id: "call_b", type: "function", function: { name: "get_time", arguments: "{}" } },
    ]);
    expect(meaning(openaiAdapter.decodeBody(body))).toEqual(meaning(answer));
  });

  test("a refusal goes where OpenAI writes it (`refusal`, content null), streamed and whole, and decodes back as one", () => {
    const refusal: StreamEvent[] = [{ type: "refusal", text: "I can't " }, { type: "refusal", text: "help." }, { type: "finish", reason: "stop" }, { type: "usage", inputTokens: 5, outputTokens: 3 }];
    const streamed = frames(encodeAll(createOpenAIEncoder(ctx), refusal));
    const deltas = streamed.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices[0]?.delta);
    expect(deltas.filter((d) => d?.refusal).map((d) => d.refusal).join("")).toBe("I can't help.");
    expect(deltas.some((d) => d?.content)).toBe(false);
    const decode = openaiAdapter.createStreamDecoder();
    expect(streamed.flatMap((f) => decode(f).events).filter((e): boolean => e.type === "refusal")).toEqual(refusal.slice(0, 2));

    const body = encodeOpenAIBody(refusal, ctx);
    expect(body.choices[0]!.message).toEqual({ role: "assistant", content: null, refusal: "I can't help." });
    expect(openaiAdapter.decodeBody(body).filter((e) => e.type === "refusal")).toEqual([{ type: "refusal", text: "I can't help." }]);
  });
});

describe("Anthropic encoder", () => {
  test("event sequence with blocks, ping, message_delta usage", () => {
    const list = frames(encodeAll(createAnthropicEncoder(ctx), answer));
    expect(list.map((f) => f.event)).toEqual([
      "message_start", "ping",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "message_delta", "message_stop",
    ]);
    for (const f of list) expect(JSON.parse(f.data).type).toBe(f.event!);
    const start = JSON.parse(list[0]!.data);
    expect(start.message).toMatchObject({ id: "id-1", type: "message", role: "assistant", model: "vendor/model", content: [], usage: { input_tokens: 20 } });
    expect(JSON.parse(list[6]!.data).content_block).toEqual({ type: "tool_use", id: "call_a", name: "get_weather", input: {} });
    expect(JSON.parse(list[7]!.data).delta).toEqual({ type: "input_json_delta", partial_json: '{"city":' });
    const delta = JSON.parse(list[13]!.data);
    expect(delta.delta).toEqual({ stop_reason: "tool_use", stop_sequence: null });
    // The cache counts as Anthropic always sends them, 0 when none were reported.
    expect(delta.usage).toEqual({ input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 }, output_tokens: 31 });
  });

  /** Anthropic's rule: a block's deltas come between its start and its stop, one block open at a time. Returns each block's whole input. */
  function blocksInOrder(list: SseEvent[]): { name: string; input: string; at: number }[] {
    const blocks: { name: string; input: string; at: number }[] = [];
    let open: number | undefined;
    list.forEach((f, at) => {
      const data = JSON.parse(f.data);
      if (f.event === "content_block_start") {
        expect(open).toBeUndefined();
        open = data.index;
        expect(data.index).toBe(blocks.length);
        blocks.push({ name: data.content_block.name ?? data.content_block.type, input: "", at });
      } else if (f.event === "content_block_delta") {
        expect(data.index).toBe(open!);
        if (data.delta.type === "input_json_delta") blocks[data.index]!.input += data.delta.partial_json;
      } else if (f.event === "content_block_stop") {
        expect(data.index).toBe(open!);
        open = undefined;
      }
    });
    expect(open).toBeUndefined();
    return blocks;
  }

  test("parallel calls whose argument chunks interleave (as some OpenAI-compatible servers send them) stay each in its own block, never a delta after a stop", () => {
    const events: StreamEvent[] = [
      { type: "start", inputTokens: 20 },
      { type: "tool-call", index: 0, id: "call_a", name: "get_weather", argumentsDelta: '{"city":' },
      { type: "tool-call", index: 1, id: "call_b", name: "get_weather", argumentsDelta: '{"city":' },
      { type: "tool-call", index: 0, argumentsDelta: '"Paris"}' },
      { type: "tool-call", index: 1, argumentsDelta: '"Rome"}' },
      { type: "tool-call", index: 2, id: "call_c", name: "get_time", argumentsDelta: "" },
      { type: "finish", reason: "tool_calls" },
      { type: "usage", inputTokens: 20, outputTokens: 31 },
    ];
    const list = frames(encodeAll(createAnthropicEncoder(ctx), events));
    const blocks = blocksInOrder(list);
    expect(blocks.map((b) => [b.name, b.input])).toEqual([["get_weather", '{"city":"Paris"}'], ["get_weather", '{"city":"Rome"}'], ["get_time", ""]]);
    expect(list.slice(-2).map((f) => f.event)).toEqual(["message_delta", "message_stop"]);
    // Read back as an Anthropic client reads it: the same calls.
    const decode = anthropicAdapter.createStreamDecoder();
    expect(meaning(list.flatMap((f) => decode(f).events)).tools.map((t) => t.arguments)).toEqual(['{"city":"Paris"}', '{"city":"Rome"}', ""]);
  });

  test("calls that come one after another stream as they come: the next starts once the one before is whole", () => {
    const sink = createAnthropicEncoder(ctx);
    let text = sink.event({ type: "start", inputTokens: 20 });
    text += sink.event({ type: "tool-call", index: 0, id: "call_a", name: "get_weather", argumentsDelta: '{"city":"Paris"}' });
    // The second call's block opens (and the first closes) when its first chunk arrives, not at the end.
    const second = sink.event({ type: "tool-call", index: 1, id: "call_b", name: "get_time", argumentsDelta: '{"tz":' });
    expect(frames(second).map((f) => f.event)).toEqual(["content_block_stop", "content_block_start", "content_block_delta"]);
    text += second + sink.event({ type: "tool-call", index: 1, argumentsDelta: '"UTC"}' }) + sink.event({ type: "finish", reason: "tool_calls" }) + sink.end();
    expect(blocksInOrder(frames(text)).map((b) => b.input)).toEqual(['{"city":"Paris"}', '{"tz":"UTC"}']);
  });

  test("text after held calls comes after them", () => {
    const events: StreamEvent[] = [
      { type: "tool-call", index: 0, id: "call_a", name: "a", argumentsDelta: '{"x":' },
      { type: "tool-call", index: 1, id: "call_b", name: "b", argumentsDelta: "{}" },
      { type: "tool-call", index: 0, argumentsDelta: "1}" },
      { type: "text", text: "done" },
      { type: "finish", reason: "tool_calls" },
    ];
    const blocks = blocksInOrder(frames(encodeAll(createAnthropicEncoder(ctx), events)));
    expect(blocks.map((b) => [b.name, b.input])).toEqual([["a", '{"x":1}'], ["b", "{}"], ["text", ""]]);
  });

  test("a held call still incomplete when text or thinking comes stays held until its chunks are in", () => {
    const events: StreamEvent[] = [
      { type: "tool-call", index: 0, id: "call_a", name: "a", argumentsDelta: '{"x":' },
      { type: "tool-call", index: 1, id: "call_b", name: "b", argumentsDelta: '{"y":' },
      { type: "tool-call", index: 0, argumentsDelta: "1}" },
      { type: "text", text: "hmm" },
      { type: "reasoning", text: "thinking" },
      { type: "tool-call", index: 1, argumentsDelta: "2}" },
      { type: "finish", reason: "tool_calls" },
    ];
    const blocks = blocksInOrder(frames(encodeAll(createAnthropicEncoder(ctx), events)));
    expect(blocks.map((b) => [b.name, b.input])).toEqual([["a", '{"x":1}'], ["text", ""], ["thinking", ""], ["b", '{"y":2}']]);
  });

  test("text or thinking that comes while the open call's arguments are incomplete waits for them: no delta after a stop", () => {
    const events: StreamEvent[] = [
      { type: "tool-call", index: 0, id: "call_a", name: "weather", argumentsDelta: '{"city":' },
      { type: "text", text: "let me check" },
      { type: "reasoning", text: "hmm" },
      { type: "tool-call", index: 0, argumentsDelta: '"Paris"}' },
      { type: "text", text: " more" },
      { type: "finish", reason: "tool_calls" },
    ];
    const blocks = blocksInOrder(frames(encodeAll(createAnthropicEncoder(ctx), events)));
    expect(blocks.map((b) => [b.name, b.input])).toEqual([["weather", '{"city":"Paris"}'], ["text", ""], ["thinking", ""], ["text", ""]]);
    // A number is not whole arguments (more digits may come), and a call that never completes lets what waited out at the end;
    // arguments that are not an object go out at the end as the whole answer writes them (`{value}`), so `input` is an object.
    const never = blocksInOrder(frames(encodeAll(createAnthropicEncoder(ctx), [
      { type: "tool-call", index: 0, id: "call_n", name: "n", argumentsDelta: "12" },
      { type: "text", text: "x" },
      { type: "tool-call", index: 0, argumentsDelta: "3" },
      { type: "finish", reason: "tool_calls" },
    ])));
    expect(never.map((b) => [b.name, b.input])).toEqual([["n", '{"value":123}'], ["text", ""]]);
  });

  test("text that waited for a call goes out before a call that came after it; an error lets out what waited first", () => {
    const ordered = blocksInOrder(frames(encodeAll(createAnthropicEncoder(ctx), [
      { type: "tool-call", index: 0, id: "call_a", name: "a", argumentsDelta: '{"a"' },
      { type: "text", text: "T" },
      { type: "tool-call", index: 1, id: "call_b", name: "b", argumentsDelta: "{}" },
      { type: "tool-call", index: 0, argumentsDelta: ":1}" },
      { type: "finish", reason: "tool_calls" },
    ])));
    expect(ordered.map((b) => [b.name, b.input])).toEqual([["a", '{"a":1}'], ["text", ""], ["b", "{}"]]);
    const sink = createAnthropicEncoder(ctx);
    let text = "";
    for (const e of [{ type: "text", text: "x" }, { type: "tool-call", index: 0, id: "c", name: "f", argumentsDelta: '{"a"' }, { type: "text", text: "y" }] as StreamEvent[]) text += sink.event(e);
    text += sink.event({ type: "error", errorType: "upstream", message: "lost" });
    const list = frames(text);
    const said = list.filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta).filter((d) => d.type === "text_delta").map((d) => d.text);
    expect(said).toEqual(["x", "y"]);
    expect(list.at(-1)!.event).toBe("error");
  });

  test("stop reasons map", () => {
    const reasons = { stop: "end_turn", stop_sequence: "stop_sequence", length: "max_tokens", tool_calls: "tool_use", content_filter: "refusal" } as const;
    for (const [ours, theirs] of Object.entries(reasons)) {
      const list = frames(encodeAll(createAnthropicEncoder(ctx), [{ type: "text", text: "x" }, { type: "finish", reason: ours as keyof typeof reasons }]));
      expect(JSON.parse(list.find((f) => f.event === "message_delta")!.data).delta.stop_reason).toBe(theirs);
    }
  });

  test("error event shape", () => {
    const text = createAnthropicEncoder(ctx).event({ type: "error", errorType: "overloaded", message: "busy" });
    expect(text).toBe('event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n');
  });

  test("round trip through the Anthropic decoder keeps the meaning", () => {
    const decode = anthropicAdapter.createStreamDecoder();
    const decoded = frames(encodeAll(createAnthropicEncoder(ctx), answer)).flatMap((f) => decode(f).events);
    expect(meaning(decoded)).toEqual(meaning(answer));
  });

  test("non-stream body keeps block order and parses tool input", () => {
    const body = encodeAnthropicBody(answer, ctx);
    expect(body.content).toEqual([
      { type: "text", text: "Let me check the weather. \u{1F324}" },
      { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_b", name: "get_time", input: {} },
    ]);
    expect(body).toMatchObject({ id: "id-1", type: "message", role: "assistant", stop_reason: "tool_use", stop_sequence: null, usage: { input_tokens: 20, output_tokens: 31 } });
    expect(meaning(anthropicAdapter.decodeBody(body))).toEqual(meaning(answer));
  });

  test("cached prompt tokens are reported apart, as Anthropic does", () => {
    const list = frames(encodeAll(createAnthropicEncoder(ctx), [{ type: "text", text: "x" }, { type: "finish", reason: "stop" }, { type: "usage", inputTokens: 100, outputTokens: 5, cacheReadTokens: 60 }]));
    const delta = JSON.parse(list.find((f) => f.event === "message_delta")!.data);
    // Both cache counts, as Anthropic always sends them: no writes reported is 0 written.
    expect(delta.usage).toEqual({ input_tokens: 40, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 60, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 } });
  });
});

describe("stop reasons from upstreams", () => {
  test("OpenAI finish_reason → ours", () => {
    const decode = openaiAdapter.createStreamDecoder();
    const map = { stop: "stop", length: "length", tool_calls: "tool_calls", content_filter: "content_filter" };
    for (const [theirs, ours] of Object.entries(map)) {
      const events = decode({ event: undefined, id: undefined, retry: undefined, data: JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: theirs }] }) }).events;
      expect(events).toEqual([{ type: "finish", reason: ours as "stop" }]);
    }
  });

  test("Anthropic stop_reason → ours", () => {
    const map = { end_turn: "stop", stop_sequence: "stop_sequence", max_tokens: "length", tool_use: "tool_calls", refusal: "refusal" };
    for (const [theirs, ours] of Object.entries(map)) {
      const decode = anthropicAdapter.createStreamDecoder();
      decode({ event: "message_start", id: undefined, retry: undefined, data: '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}' });
      const events = decode({ event: "message_delta", id: undefined, retry: undefined, data: JSON.stringify({ type: "message_delta", delta: { stop_reason: theirs, stop_sequence: null }, usage: { output_tokens: 3 } }) }).events;
      expect(events).toContainEqual(expect.objectContaining({ type: "finish", reason: ours }));
    }
  });
});

describe("relays skim plain text frames and decode the rest", () => {
  const ctx = { id: "chatcmpl-x", created: 1, model: "ours/model", includeUsage: false };
  const sse = (data: string, event?: string): SseEvent => ({ data, event, id: undefined, retry: undefined });
  const head = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[';
  const plain = (text: string, rest = "") => `${head}{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}]${rest}}`;
  /**
   * A relay and its decoder as stream-answer.ts runs them: the first frames are decoded (the relay
   * learns how the vendor writes its model name, the decoder its text frames); later ones are
   * skimmed only when the decoder reads them on its template, and the relay takes them.
   */
  const openaiRelay = () => {
    const relay = createOpenAIRelay(ctx);
    const decode = openaiAdapter.createStreamDecoder();
    for (const first of [sse(`${head}{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`), sse(plain("first")), sse(plain("second")), sse(plain("third"))]) relay.frame(first, decode(first));
    return {
      skim(raw: SseEvent): string | undefined {
        const text = decode.readText!(raw);
        return text === undefined ? undefined : relay.skim!(raw, text);
      },
    };
  };

  test("a plain OpenAI text chunk is forwarded as sent, with only the model and the id swapped", () => {
    const out = openaiRelay().skim!(sse(plain('He said "hi" \\ "finish_reason":"stop"')));
    expect(out).toBe(`data: ${plain('He said "hi" \\ "finish_reason":"stop"').replace('"gpt-4o-mini-2024-07-18"', '"ours/model"').replace('"id":"c"', '"id":"chatcmpl-x"')}\n\n`);
  });

  test.each([
    ["text and finish in one chunk", `${head}{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`],
    ["text and usage in one chunk", plain("x", ',"usage":{"prompt_tokens":1,"completion_tokens":1}')],
    ["an error beside the text", `{"error":{"message":"boom"},${plain("x").slice(1)}`],
    ["a second choice", `${head}{"index":0,"delta":{"content":"x"}},{"index":1,"delta":{"content":"y"}}]}`],
    ["text with tool calls", `${head}{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`],
    ["text with reasoning", `${head}{"index":0,"delta":{"content":"x","reasoning_content":"hmm"}}]}`],
    ["text with images", `${head}{"index":0,"delta":{"content":"x","images":[]}}]}`],
    ["an empty text", plain("")],
    ["a frame cut short", plain("x").slice(0, -1)],
    ["another model name", plain("x").replace("gpt-4o-mini-2024-07-18", "gpt-4o")],
    ["another id", plain("x").replace('"id":"c"', '"id":"d"')],
    ["an error after the text", plain("x", ',"error":{"message":"boom"}')],
    ["keys in another order", `{"choices":[{"delta":{"content":"x"},"index":0}],"model":"gpt-4o-mini-2024-07-18"}`],
  ])("decoded, not skimmed: %s", (_name, data) => {
    expect(openaiRelay().skim!(sse(data))).toBeUndefined();
  });

  test("nothing is skimmed before a frame has been decoded", () => {
    const decode = openaiAdapter.createStreamDecoder();
    expect(decode.readText!(sse(plain("x")))).toBeUndefined();
    expect(createOpenAIRelay(ctx).skim!(sse(plain("x")), "x")).toBeUndefined();
  });

  test("Anthropic: text deltas are forwarded as sent; every other event is decoded", () => {
    const relay = createAnthropicRelay(ctx);
    const decode = anthropicAdapter.createStreamDecoder();
    const skim = (raw: SseEvent) => {
      const text = decode.readText!(raw);
      return text === undefined ? undefined : relay.skim!(raw, text);
    };
    const delta = '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}';
    const start = '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}';
    const blockStart = '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}';
    // Not before its block started, nor before a text delta was parsed: decoded (and failed as out of order).
    expect(skim(sse(delta, "content_block_delta"))).toBeUndefined();
    for (const [data, event] of [[start, "message_start"], [blockStart, "content_block_start"], [delta, "content_block_delta"]] as const) relay.frame(sse(data, event), decode(sse(data, event)));
    expect(skim(sse(delta.replace("Hi", "Ho"), "content_block_delta"))).toBe(`event: content_block_delta\ndata: ${delta.replace("Hi", "Ho")}\n\n`);
    expect(skim(sse('{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}', "content_block_delta"))).toBeUndefined();
    expect(skim(sse('{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}', "content_block_delta"))).toBeUndefined();
    expect(skim(sse('{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}', "content_block_delta"))).toBeUndefined();
    expect(skim(sse('{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"delta":5}', "content_block_delta"))).toBeUndefined();
    expect(skim(sse('{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}', "message_delta"))).toBeUndefined();
    expect(skim(sse('{"type":"message_start","message":{"model":"claude"}}', "message_start"))).toBeUndefined();
  });
});

describe("chat completions' custom tool calls (chat-custom-tools.ts)", () => {
  const ctx = { id: "chatcmpl-c", created: 1, model: "ours/model", includeUsage: false, customTools: new Set(["exec"]) };
  const callsOf = (text: string) => frames(text).filter((f) => f.data !== "[DONE]").flatMap((f) => JSON.parse(f.data).choices?.[0]?.delta?.tool_calls ?? []);

  test("a custom call goes out whole, in index order before a later function call and before text that follows it (a review: openai-python merged a function call at index 1 written first into the custom one at 0)", () => {
    const events: StreamEvent[] = [
      { type: "start" },
      { type: "tool-call", index: 0, id: "toolu_1", name: "exec", argumentsDelta: '{"inp' },
      { type: "tool-call", index: 0, argumentsDelta: 'ut":"ls -la"}' },
      { type: "tool-call", index: 1, id: "toolu_2", name: "get_weather", argumentsDelta: '{"city":"Paris"}' },
      { type: "finish", reason: "tool_calls" },
    ];
    expect(callsOf(encodeAll(createOpenAIEncoder(ctx), events))).toEqual([
      { index: 0, id: "toolu_1", type: "custom", custom: { name: "exec", input: "ls -la" } },
      { index: 1, id: "toolu_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
    ]);
    const withText = encodeAll(createOpenAIEncoder(ctx), [events[0]!, events[1]!, events[2]!, { type: "text", text: "done" }, events[4]!]);
    const deltas = frames(withText).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices[0].delta);
    expect(deltas.findIndex((d) => d.tool_calls)).toBeLessThan(deltas.findIndex((d) => d.content === "done"));
    // The whole answer's body: the same call.
    expect(encodeOpenAIBody(events, ctx).choices[0]!.message.tool_calls).toEqual([
      { id: "toolu_1", type: "custom", custom: { name: "exec", input: "ls -la" } },
      { id: "toolu_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
    ]);
  });

  test("OpenAI's own streamed custom call is relayed as sent (no empty `function` added) and its input counted as output text", () => {
    const relay = createOpenAIRelay({ ...ctx, customTools: undefined });
    const decode = openaiAdapter.createStreamDecoder();
    const head = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-5","choices":[{"index":0,"delta":';
    const sse = (data: string): SseEvent => ({ data, event: undefined, id: undefined, retry: undefined });
    const parts = [
      `${head}{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"custom","custom":{"name":"exec","input":""}}]},"finish_reason":null}]}`,
      `${head}{"tool_calls":[{"index":0,"custom":{"input":"ls "}}]},"finish_reason":null}]}`,
      `${head}{"tool_calls":[{"index":0,"custom":{"input":"-la"}}]},"finish_reason":null}]}`,
    ];
    let out = "";
    const events: StreamEvent[] = [];
    for (const p of parts) {
      const decoded = decode(sse(p));
      events.push(...decoded.events);
      out += relay.frame(sse(p), decoded);
    }
    expect(out).not.toContain('"function"');
    expect(callsOf(out)).toEqual([
      { index: 0, id: "call_1", type: "custom", custom: { name: "exec", input: "" } },
      { index: 0, custom: { input: "ls " } },
      { index: 0, custom: { input: "-la" } },
    ]);
    expect(events.filter((e) => e.type === "tool-call")).toEqual([
      { type: "tool-call", index: 0, id: "call_1", name: "exec", argumentsDelta: "" },
      { type: "tool-call", index: 0, id: undefined, name: undefined, argumentsDelta: "ls " },
      { type: "tool-call", index: 0, id: undefined, name: undefined, argumentsDelta: "-la" },
    ]);
  });
});
