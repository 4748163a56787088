import { Database } from "bun:sqlite";
import { countTokens } from "gpt-tokenizer";
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { readFixture, useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, startGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

const question = [{ role: "user", content: "Weather in Paris?" }];

/** A fixture cut in two at a frame boundary in its middle. */
function halves(bytes: Uint8Array): string[] {
  const text = new TextDecoder().decode(bytes);
  const cut = text.indexOf("\n\n", text.length / 2) + 2;
  return [text.slice(0, cut), text.slice(cut)];
}
const HELLO = "Hello! How can I help you today?";

function openaiView(body: string) {
  const frames = sseFrames(body);
  const chunks = frames.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
  const tools: Record<number, { id?: string; name?: string; arguments: string }> = {};
  for (const c of chunks) {
    for (const call of c.choices[0]?.delta?.tool_calls ?? []) {
      const t = (tools[call.index] ??= { arguments: "" });
      if (call.id) t.id = call.id;
      if (call.function?.name) t.name = call.function.name;
      t.arguments += call.function?.arguments ?? "";
    }
  }
  return {
    done: frames.at(-1)?.data === "[DONE]",
    text: chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""),
    finish: chunks.map((c) => c.choices[0]?.finish_reason).find(Boolean),
    usage: chunks.find((c) => c.usage)?.usage,
    tools: Object.values(tools),
  };
}

function anthropicView(body: string) {
  const events = sseFrames(body).map((f) => ({ name: f.event, data: JSON.parse(f.data) }));
  const blocks: Record<number, { type: string; text: string; json: string; id?: string; name?: string }> = {};
  for (const e of events) {
    if (e.name === "content_block_start") blocks[e.data.index] = { type: e.data.content_block.type, text: "", json: "", id: e.data.content_block.id, name: e.data.content_block.name };
    if (e.name === "content_block_delta") {
      const b = blocks[e.data.index]!;
      b.text += e.data.delta.text ?? "";
      b.json += e.data.delta.partial_json ?? "";
    }
  }
  const delta = events.find((e) => e.name === "message_delta")?.data;
  return { names: events.map((e) => e.name), blocks: Object.values(blocks), stop: delta?.delta.stop_reason, usage: delta?.usage, events };
}

/** An OpenAI chat chunk with the given fields (choices, usage). */
/** The tool calls OpenAI's SDK gathers from the gateway's stream (`finalChatCompletion`): [id, name, arguments]. */
async function sdkToolCalls(): Promise<string[][]> {
  const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  const completion = await sdk.chat.completions.stream({ model: OPENAI_MODEL, messages: [{ role: "user", content: "weather and time?" }] }).finalChatCompletion();
  return completion.choices[0]!.message.tool_calls!.map((c: any) => [c.id, c.function.name, c.function.arguments]);
}

const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-t", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;

describe("fixtures through the gateway, split every way", () => {
  for (const split of [undefined, "frames", "bytes", 7] as const) {
    test(`OpenAI text, split=${split ?? "whole"}: same-format and translated`, async () => {
      upstream.reply({ kind: "fixture", name: "openai-text.sse", split });
      const same = openaiView(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } })).text());
      expect(same).toMatchObject({ done: true, text: HELLO, finish: "stop", usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 } });

      upstream.reply({ kind: "fixture", name: "openai-text.sse", split });
      const translated = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
      expect(translated.blocks).toEqual([{ type: "text", text: HELLO, json: "", id: undefined, name: undefined }]);
      expect(translated.stop).toBe("end_turn");
      expect(translated.usage).toMatchObject({ input_tokens: 12, output_tokens: 9 });
    });

    test(`Anthropic text, split=${split ?? "whole"}: same-format and translated`, async () => {
      upstream.reply({ kind: "fixture", name: "anthropic-text.sse", split });
      const same = anthropicView(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: question, stream: true })).text());
      expect(same.blocks.map((b) => b.text).join("")).toBe(HELLO);
      expect(same.stop).toBe("end_turn");
      expect(same.names).toContain("ping");
      expect(same.events[0]!.data.message.model).toBe(ANTHROPIC_MODEL);

      upstream.reply({ kind: "fixture", name: "anthropic-text.sse", split });
      const translated = openaiView(await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stream: true, stream_options: { include_usage: true } })).text());
      expect(translated).toMatchObject({ done: true, text: HELLO, finish: "stop" });
      expect(translated.usage.completion_tokens).toBe(9);
      expect(translated.usage.prompt_tokens).toBe(12);
    });
  }

  test("CRLF line endings and keep-alive comments", async () => {
    upstream.reply({ kind: "fixture", name: "openai-crlf.sse", split: 5 });
    const view = openaiView(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text());
    expect(view).toMatchObject({ done: true, text: HELLO, finish: "stop" });
  });
});

describe("tool calls stream across formats", () => {
  test("OpenAI tool_calls → Anthropic tool_use with input_json_delta", async () => {
    upstream.reply({ kind: "fixture", name: "openai-tools.sse", split: "frames" });
    const view = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
    const tool = view.blocks.find((b) => b.type === "tool_use")!;
    expect(tool.name).toBe("get_weather");
    expect(tool.id).toBeString();
    expect(JSON.parse(tool.json)).toEqual({ city: "Paris" });
    expect(view.stop).toBe("tool_use");
  });

  test("Anthropic tool_use → OpenAI tool_calls arguments", async () => {
    upstream.reply({ kind: "fixture", name: "anthropic-tools.sse", split: "bytes" });
    const view = openaiView(await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stream: true })).text());
    expect(view.text).toBe("Let me check.");
    expect(view.tools.length).toBe(1);
    expect(view.tools[0]!.name).toBe("get_weather");
    expect(view.tools[0]!.id).toMatch(/^toolu_/);
    expect(JSON.parse(view.tools[0]!.arguments)).toEqual({ city: "Paris" });
    expect(view.finish).toBe("tool_calls");
  });

  test("a tool without parameters: Anthropic streams no JSON for it; chat and Responses clients get arguments \"{}\", never \"\"", async () => {
    const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    const noArgs = () => [
      ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } }),
      ev("content_block_start", { index: 0, content_block: { type: "tool_use", id: "toolu_01NoArgs", name: "get_goal", input: {} } }),
      ev("content_block_delta", { index: 0, delta: { type: "input_json_delta", partial_json: "" } }),
      ev("content_block_stop", { index: 0 }),
      ev("message_delta", { delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 9 } }),
      ev("message_stop", {}),
    ];
    upstream.reply({ kind: "sse", chunks: noArgs() });
    const chat = openaiView(await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stream: true })).text());
    expect(chat.tools.map((t) => [t.name, t.arguments])).toEqual([["get_goal", "{}"]]);
    expect(chat.finish).toBe("tool_calls");
    upstream.reply({ kind: "sse", chunks: noArgs() });
    const frames = sseFrames(await (await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, input: "goal?", stream: true })).text());
    const done = frames.filter((f) => f.event === "response.function_call_arguments.done").map((f) => JSON.parse(f.data).arguments);
    expect(done).toEqual(["{}"]);
    const deltas = frames.filter((f) => f.event === "response.function_call_arguments.delta").map((f) => JSON.parse(f.data).delta).join("");
    expect(deltas).toBe("{}");
    const final = JSON.parse(frames.find((f) => f.event === "response.completed")!.data).response;
    expect(final.output).toEqual([expect.objectContaining({ type: "function_call", name: "get_goal", arguments: "{}", status: "completed" })]);
  });

  test("calls an upstream announces all at index 0, each with its name and own id, are separate calls; one id on every chunk, or another id without a name, is one call", async () => {
    // As some OpenAI-compatible servers stream parallel calls: every call at index 0, told apart by its id.
    const twoAtZero = () => [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"city":"Paris"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_b", type: "function", function: { name: "get_time", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"zone":"CET"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
      chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 12, total_tokens: 22 } }),
      "data: [DONE]\n\n",
    ];
    upstream.reply({ kind: "sse", chunks: twoAtZero() });
    const messages = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
    expect(messages.blocks.map((b) => [b.type, b.id, b.name, b.json])).toEqual([
      ["tool_use", "call_a", "get_weather", '{"city":"Paris"}'],
      ["tool_use", "call_b", "get_time", '{"zone":"CET"}'],
    ]);
    expect(messages.stop).toBe("tool_use");

    // An OpenAI client of the same upstream (frames relayed): the calls under their own indexes,
    // as OpenAI's SDK gathers them; the text of each frame otherwise as the vendor wrote it.
    upstream.reply({ kind: "sse", chunks: twoAtZero() });
    const relayed = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text());
    const indexes = relayed.filter((f) => f.data.includes("tool_calls\":[")).map((f) => JSON.parse(f.data).choices[0].delta.tool_calls.map((c: any) => [c.index, c.id ?? null]));
    expect(indexes).toEqual([[[0, "call_a"]], [[0, null]], [[1, "call_b"]], [[1, null]]]);
    upstream.reply({ kind: "sse", chunks: twoAtZero() });
    expect(await sdkToolCalls()).toEqual([
      ["call_a", "get_weather", '{"city":"Paris"}'],
      ["call_b", "get_time", '{"zone":"CET"}'],
    ]);

    upstream.reply({ kind: "sse", chunks: twoAtZero() });
    const frames = sseFrames(await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "weather and time?", stream: true })).text());
    const final = JSON.parse(frames.find((f) => f.event === "response.completed")!.data).response;
    expect(final.output.map((o: any) => [o.type, o.call_id, o.name, o.arguments])).toEqual([
      ["function_call", "call_a", "get_weather", '{"city":"Paris"}'],
      ["function_call", "call_b", "get_time", '{"zone":"CET"}'],
    ]);
    // One item after the other: the second call is added once the first is done.
    const items = frames.filter((f) => f.event === "response.output_item.added" || f.event === "response.output_item.done").map((f) => `${f.event!.slice(21)} ${JSON.parse(f.data).item.call_id}`);
    expect(items).toEqual(["added call_a", "done call_a", "added call_b", "done call_b"]);

    // The id on every chunk of one call (as other servers send it): one call, its arguments whole.
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_c", type: "function", function: { name: "get_weather", arguments: '{"ci' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_c", function: { arguments: 'ty":"Rome"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
      "data: [DONE]\n\n",
    ] });
    const one = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
    expect(one.blocks.map((b) => [b.type, b.id, b.name, b.json])).toEqual([["tool_use", "call_c", "get_weather", '{"city":"Rome"}']]);

    // Another id on a call's later chunks, without a name (servers that change it as they go): still one call.
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_d", type: "function", function: { name: "read_file", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "chunk_2", function: { arguments: '{"pa' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "chunk_3", function: { arguments: 'th":"a.txt"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
      "data: [DONE]\n\n",
    ] });
    const unstable = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
    expect(unstable.blocks.map((b) => [b.type, b.id, b.name, b.json])).toEqual([["tool_use", "call_d", "read_file", '{"path":"a.txt"}']]);
  });

  test("calls streamed without an index: a chunk with no name continues the last call, a known id its own, a named one starts the next", async () => {
    const indexless = () => [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ id: "call_e", type: "function", function: { name: "get_weather", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ function: { arguments: '{"city":' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ id: "call_e", function: { arguments: '"Oslo"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ id: "call_f", type: "function", function: { name: "get_time", arguments: '{"zone":"CET"}' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
      "data: [DONE]\n\n",
    ];
    upstream.reply({ kind: "sse", chunks: indexless() });
    const view = anthropicView(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true })).text());
    expect(view.blocks.map((b) => [b.type, b.id, b.name, b.json])).toEqual([
      ["tool_use", "call_e", "get_weather", '{"city":"Oslo"}'],
      ["tool_use", "call_f", "get_time", '{"zone":"CET"}'],
    ]);

    // An OpenAI client of the same upstream: every relayed call gets the index OpenAI's SDK gathers it by.
    upstream.reply({ kind: "sse", chunks: indexless() });
    expect(await sdkToolCalls()).toEqual([
      ["call_e", "get_weather", '{"city":"Oslo"}'],
      ["call_f", "get_time", '{"zone":"CET"}'],
    ]);
  });

  test("a tool call cut by the token limit is an incomplete item in the Responses API, never a completed call", async () => {
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"city":"Mün' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "length" }] }),
      chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }),
      "data: [DONE]\n\n",
    ] });
    const frames = sseFrames(await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "weather?", stream: true, max_output_tokens: 5 })).text());
    const final = JSON.parse(frames.at(-1)!.data).response;
    expect(final.status).toBe("incomplete");
    expect(final.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(final.output).toEqual([expect.objectContaining({ type: "function_call", status: "incomplete", arguments: '{"city":"Mün' })]);
    // Never announced as done: an agent runs a call when its item is done (Codex does, whatever its status).
    expect(frames.filter((f) => f.event === "response.output_item.done" || f.event === "response.function_call_arguments.done")).toEqual([]);
  });

  test("a free-form tool's call cut by the token limit is incomplete too, with the input it had reached, never announced as done", async () => {
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_p", type: "function", function: { name: "apply_patch", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"input":"*** Begin Patch\\n*** Add File: one.txt\\n+one\\n' } }] }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "length" }] }),
      chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }),
      "data: [DONE]\n\n",
    ] });
    const tools = [{ type: "custom", name: "apply_patch", description: "Apply a patch" }];
    const frames = sseFrames(await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "patch it", tools, stream: true, max_output_tokens: 5 })).text());
    const final = JSON.parse(frames.at(-1)!.data).response;
    expect(final.status).toBe("incomplete");
    expect(final.output).toEqual([expect.objectContaining({ type: "custom_tool_call", status: "incomplete", input: "*** Begin Patch\n*** Add File: one.txt\n+one\n" })]);
    expect(frames.filter((f) => f.event === "response.output_item.done" || f.event === "response.custom_tool_call_input.done")).toEqual([]);
  });

  test("non-stream tool calls both ways", async () => {
    upstream.reply({ kind: "fixture", name: "anthropic-tools.json" });
    const openai = (await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question })).json()) as any;
    expect(openai.choices[0].finish_reason).toBe("tool_calls");
    expect(JSON.parse(openai.choices[0].message.tool_calls[0].function.arguments)).toEqual({ city: "Paris" });

    upstream.reply({ kind: "fixture", name: "openai-tools.json" });
    const anthropic = (await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, messages: question })).json()) as any;
    expect(anthropic.stop_reason).toBe("tool_use");
    expect(anthropic.content.find((b: { type: string }) => b.type === "tool_use")).toMatchObject({ name: "get_weather", input: { city: "Paris" } });
  });
});

/** The newest usage record, once everything so far has settled. */
async function lastUsage() {
  await gw.app.services.settled();
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ prompt_tokens: number; completion_tokens: number; estimated: number; cost_micro: number; status: string }, []>(
      "SELECT prompt_tokens, completion_tokens, estimated, cost_micro, status FROM usage_records ORDER BY id DESC LIMIT 1",
    ).get()!;
  } finally {
    db.close();
  }
}

describe("usage is always counted", () => {

  test("reported usage is charged exactly", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "fixture", name: "openai-text.sse" });
    await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text();
    const record = await lastUsage();
    expect(record).toMatchObject({ prompt_tokens: 12, completion_tokens: 9, estimated: 0, status: "ok" });
    expect(record.cost_micro).toBe(12 * 150 + 9 * 600);
    expect(before - (await gw.balanceMicro())).toBe(record.cost_micro);
  });

  test("an upstream that reports nothing is estimated with the tokenizer and marked", async () => {
    upstream.reply({ kind: "fixture", name: "openai-no-usage.sse" });
    const view = openaiView(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } })).text());
    expect(view.done).toBe(true);
    expect(view.usage.completion_tokens).toBeGreaterThan(0);
    expect(view.usage.prompt_tokens).toBeGreaterThan(0);
    const record = await lastUsage();
    expect(record.estimated).toBe(1);
    expect(record.completion_tokens).toBe(view.usage.completion_tokens);
    // Counted with the real tokenizer, not guessed from the length.
    expect(record.completion_tokens).toBe(countTokens(HELLO));
    expect(record.cost_micro).toBeGreaterThan(0);
  });
});

describe("relayed frames", () => {
  test("skimmed text frames and decoded ones together: all text through, finish and usage still seen", async () => {
    const frame = (body: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"vendor-model","choices":[${body}}\n\n`;
    upstream.reply({
      kind: "sse",
      chunks: [
        frame('{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]'),
        frame('{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]'),
        frame('{"index":0,"delta":{"content":"lo \\"there\\""},"finish_reason":null}]'),
        // Text and finish in one chunk, as some vendors send it.
        frame('{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]'),
        frame('],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}'),
        "data: [DONE]\n\n",
      ],
    });
    const body = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text();
    const view = openaiView(body);
    expect(view).toMatchObject({ done: true, text: 'Hello "there"!', finish: "stop" });
    expect(body).not.toContain("vendor-model");
    // The client did not ask for usage: the usage chunk is not relayed, but it is charged.
    expect(view.usage).toBeUndefined();
    expect(await lastUsage()).toMatchObject({ prompt_tokens: 5, completion_tokens: 3, estimated: 0, status: "ok" });
  });
});

describe("connection handling", () => {
  test("client disconnect aborts the upstream request", async () => {
    upstream.reply({ kind: "sse", holdOpen: true, chunks: ['data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n'] });
    const controller = new AbortController();
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true }, {}, controller.signal);
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain("Hi");
    expect(upstream.openStreams()).toBe(1);
    controller.abort();
    const deadline = Date.now() + 3000;
    while (upstream.abortedStreams() < 1 && Date.now() < deadline) await Bun.sleep(20);
    expect(upstream.abortedStreams()).toBe(1);
    expect(upstream.openStreams()).toBe(0);
  });

  test("a stream whose upstream is quiet longer than the server idle timeout survives, with keep-alives", async () => {
    const quiet = await startGateway({ upstreamUrl: upstream.url, idleTimeoutSeconds: 1, keepaliveMs: 300 });
    try {
      // The whole answer, in two writes with 2.5 s of silence between them: longer than the server's 1 s idle timeout.
      // Both formats' silences at once (each reply chosen by the path it answers, whichever reaches
      // the upstream first): the suite waits 2.5 s, not 5 (the suite's own time, nineteenth session).
      const quietReply = (req: { path: string }) =>
        ({ kind: "sse", chunks: halves(readFixture(req.path.endsWith("/messages") ? "anthropic-text.sse" : "openai-text.sse")), delayMs: 2500 }) as const;
      upstream.reply(quietReply);
      upstream.reply(quietReply);
      const [text, text2] = await Promise.all([
        post(quiet, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true }).then((res) => res.text()),
        post(quiet, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true }).then((res) => res.text()),
      ]);
      expect(text).toContain(": keep-alive");
      expect(openaiView(text)).toMatchObject({ done: true, text: HELLO, finish: "stop" });

      const view = anthropicView(text2);
      expect(view.stop).toBe("end_turn");
      expect(view.names.filter((n) => n === "ping").length).toBeGreaterThan(1);
    } finally {
      await quiet.stop();
    }
  }, 30_000);
});

describe("a stream that arrived whole before its head goes out is one body; one still arriving is a stream", () => {
  test("whole: Content-Length framing, the same frames, charged; trickling: chunked, its first frame long before its end", async () => {
    upstream.reply({ kind: "fixture", name: "openai-text.sse" });
    const whole = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } });
    expect(whole.headers.get("content-type")).toStartWith("text/event-stream");
    const wholeBody = await whole.text();
    expect(whole.headers.get("content-length")).toBe(String(Buffer.byteLength(wholeBody)));
    expect(whole.headers.get("transfer-encoding")).toBeNull();
    const wholeView = openaiView(wholeBody);
    expect(wholeView.done).toBe(true);
    expect(wholeView.text).toBe(HELLO);
    expect(wholeView.usage?.completion_tokens).toBeGreaterThan(0);

    upstream.reply({ kind: "fixture", name: "openai-text.sse", split: "frames", delayMs: 80 });
    const started = performance.now();
    const trickling = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } });
    expect(trickling.headers.get("content-length")).toBeNull();
    const reader = trickling.body!.getReader();
    const first = await reader.read();
    const firstAt = performance.now() - started;
    let rest = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    const endAt = performance.now() - started;
    // Frames come 80 ms apart: the first is out while the others are still on their way.
    expect(endAt - firstAt).toBeGreaterThan(150);
    const tricklingView = openaiView(new TextDecoder().decode(first.value) + rest);
    expect(tricklingView).toEqual({ ...wholeView, usage: tricklingView.usage });
    expect(tricklingView.usage).toEqual(wholeView.usage);
  });
});
