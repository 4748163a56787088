/**
 * A model served by OpenAI's Responses API (`upstream_api: "responses"`), asked by Responses
 * clients: the fake upstream speaks the Responses wire byte for byte (event lines, sequence
 * numbers, obfuscation padding, CRLF, keep-alive comments, frames split anywhere), the gateway
 * sends the request as the Responses API takes it (nothing stored upstream, reasoning encrypted)
 * and bills the usage of `response.completed` exactly as the chat path bills the same counts.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, post, sseFrames } from "../helpers/gateway.ts";
import { answerWith, frameOf, responsesFrames, USAGE, type Script } from "../helpers/responses-wire.ts";

const RESPONSES_MODEL = "test/sol-resp";
const CHAT_TWIN = "test/sol-chat";
const PRICING = { input_per_mtok: 2000, output_per_mtok: 10000 };

const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  retry: { max_retries: 0 },
  extraModels: [
    { id: RESPONSES_MODEL, provider: "fake-openai", upstream_model: "gpt-6-sol", upstream_api: "responses", category: "text", context_length: 1_050_000, pricing: PRICING },
    { id: CHAT_TWIN, provider: "fake-openai", upstream_model: "gpt-6-sol", category: "text", context_length: 1_050_000, pricing: PRICING },
  ],
}));

const AGENT_TURN: Script = {
  items: [
    { reasoning: ["**Planning**\n\nI should check the weather."], encrypted: "gAAAAB-openai-encrypted-1" },
    { text: "Checking." },
    { call: { name: "get_weather", arguments: '{"city":"Paris"}', callId: "call_w1" } },
  ],
  usage: USAGE(1200, 340, 1024, 200),
};

const WEATHER_TOOL = { type: "function", name: "get_weather", description: "Weather by city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false }, strict: true };

function lastRecord() {
  return gw.db.query<{ status: string; cost_micro: number; prompt_tokens: number; completion_tokens: number; cache_read_tokens: number; reasoning_tokens: number; estimated: number }, []>(
    "SELECT status, cost_micro, prompt_tokens, completion_tokens, cache_read_tokens, reasoning_tokens, estimated FROM usage_records ORDER BY id DESC LIMIT 1",
  ).get()!;
}

/** The events of a Responses stream the gateway wrote, parsed. */
const eventsOf = (text: string) => sseFrames(text).map((f) => JSON.parse(f.data));

describe("Responses clients → a Responses upstream", () => {
  test("streamed: the request goes nearly as written (nothing stored upstream, reasoning encrypted), the answer and its bill come from response.completed", async () => {
    upstream.reply(answerWith(AGENT_TURN, { crlf: true, keepAliveEvery: 3, split: 7 }));
    const res = await post(gw, "/v1/responses", {
      model: RESPONSES_MODEL,
      instructions: "You are terse.",
      input: [{ role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }] }],
      tools: [WEATHER_TOOL],
      reasoning: { effort: "high", summary: "auto" },
      include: ["reasoning.encrypted_content"],
      store: false,
      stream: true,
    });
    expect(res.status).toBe(200);
    const events = eventsOf(await res.text());
    const sent = upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/responses");
    expect(sent.headers.authorization).toStartWith("Bearer ");
    const body = sent.body;
    expect(body.model).toBe("gpt-6-sol");
    expect(body.store).toBe(false);
    expect(body.include).toEqual(["reasoning.encrypted_content"]);
    expect(body.reasoning).toEqual({ effort: "high", summary: "auto" });
    expect(body.stream).toBe(true);
    expect(body.instructions).toBe("You are terse.");
    expect(body.input).toEqual([{ role: "user", content: "Weather in Paris?" }]);
    expect(body.tools).toEqual([{ type: "function", name: "get_weather", description: "Weather by city", parameters: WEATHER_TOOL.parameters, strict: true }]);
    expect(typeof body.max_output_tokens).toBe("number");
    for (const chatField of ["messages", "reasoning_effort", "stream_options", "max_tokens", "max_completion_tokens"]) expect(body).not.toHaveProperty(chatField);

    const done = events.at(-1);
    expect(done.type).toBe("response.completed");
    const output = done.response.output;
    expect(output.map((i: any) => i.type)).toEqual(["reasoning", "message", "function_call"]);
    expect(output[0].summary).toEqual([{ type: "summary_text", text: "**Planning**\n\nI should check the weather." }]);
    // The client keeps OpenAI's reasoning sealed, to send back.
    expect(output[0].encrypted_content).toStartWith("swy-thinking-1.");
    expect(output[1].content[0].text).toBe("Checking.");
    expect(output[2]).toMatchObject({ call_id: "call_w1", name: "get_weather", arguments: '{"city":"Paris"}', status: "completed" });
    expect(done.response.usage).toEqual({ input_tokens: 1200, input_tokens_details: { cached_tokens: 1024 }, output_tokens: 340, output_tokens_details: { reasoning_tokens: 200 }, total_tokens: 1540 });
    // Sequence numbers are the gateway's own, one after the other.
    expect(events.map((e: any) => e.sequence_number)).toEqual(events.map((_: unknown, i: number) => i));

    await gw.app.services.settled();
    const record = lastRecord();
    expect(record).toMatchObject({ status: "ok", prompt_tokens: 1200, completion_tokens: 340, cache_read_tokens: 1024, reasoning_tokens: 200, estimated: 0 });
    expect(record.cost_micro).toBeGreaterThan(0);
  });

  test("the next turn carries the reasoning back: OpenAI's encrypted content before the call it was made for, without item ids", async () => {
    upstream.reply(answerWith(AGENT_TURN));
    const first: any = await (await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Weather in Paris?", tools: [WEATHER_TOOL], include: ["reasoning.encrypted_content"], store: false })).json();
    upstream.reply(answerWith({ items: [{ text: "It is sunny." }] }));
    const res = await post(gw, "/v1/responses", {
      model: RESPONSES_MODEL,
      input: [{ role: "user", content: "Weather in Paris?" }, ...first.output, { type: "function_call_output", call_id: "call_w1", output: "sunny, 21°C" }],
      tools: [WEATHER_TOOL],
      include: ["reasoning.encrypted_content"],
      store: false,
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).output[0].content[0].text).toBe("It is sunny.");
    expect(upstream.requests.at(-1)!.body.input).toEqual([
      { role: "user", content: "Weather in Paris?" },
      { type: "reasoning", summary: [{ type: "summary_text", text: "**Planning**\n\nI should check the weather." }], encrypted_content: "gAAAAB-openai-encrypted-1" },
      { role: "assistant", content: "Checking." },
      { type: "function_call", call_id: "call_w1", name: "get_weather", arguments: '{"city":"Paris"}' },
      { type: "function_call_output", call_id: "call_w1", output: "sunny, 21°C" },
    ]);
  });

  test("previous_response_id: the gateway's stored answer gives the upstream its reasoning back (nothing kept at OpenAI)", async () => {
    upstream.reply(answerWith(AGENT_TURN));
    const first: any = await (await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Weather in Paris?", tools: [WEATHER_TOOL] })).json();
    expect(first.store).toBe(true);
    expect(upstream.requests.at(-1)!.body.store).toBe(false);
    upstream.reply(answerWith({ items: [{ text: "Sunny." }] }));
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, previous_response_id: first.id, input: [{ type: "function_call_output", call_id: "call_w1", output: "sunny" }], tools: [WEATHER_TOOL] });
    expect(res.status).toBe(200);
    const input = upstream.requests.at(-1)!.body.input;
    expect(input.map((i: any) => i.type ?? i.role)).toEqual(["user", "reasoning", "assistant", "function_call", "function_call_output"]);
    expect(input[1].encrypted_content).toBe("gAAAAB-openai-encrypted-1");
  });

  test("whole answers: the upstream is asked for one, and the client gets the Responses body made from it", async () => {
    upstream.reply(answerWith({ items: [{ text: "Hello." }], usage: USAGE(30, 4) }));
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", store: false });
    expect(res.status).toBe(200);
    const body: any = await res.json();
    expect(upstream.requests.at(-1)!.body.stream).toBeUndefined();
    expect(body.status).toBe("completed");
    expect(body.output_text ?? body.output[0].content[0].text).toBe("Hello.");
    expect(body.usage).toMatchObject({ input_tokens: 30, output_tokens: 4 });
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "ok", prompt_tokens: 30, completion_tokens: 4, estimated: 0 });
  });

  test("an incomplete answer (the token limit) is incomplete for the client too, and billed its usage", async () => {
    upstream.reply(answerWith({ items: [{ text: "Once upon a" }], status: "incomplete", incompleteReason: "max_output_tokens", usage: USAGE(12, 16) }));
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Tell a story", max_output_tokens: 16, stream: true, store: false });
    const events = eventsOf(await res.text());
    expect(events.at(-1).type).toBe("response.incomplete");
    expect(events.at(-1).response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(upstream.requests.at(-1)!.body.max_output_tokens).toBe(16);
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "ok", prompt_tokens: 12, completion_tokens: 16, estimated: 0 });
  });
});

describe("money on the Responses upstream", () => {
  test("the same counts cost the same as on chat completions (cached reads, reasoning inside output)", async () => {
    // A prompt the reported 5,000 tokens fit (the gateway bills no more prompt than a request could be).
    const prompt = "word ".repeat(6000);
    upstream.reply(answerWith({ items: [{ text: "A" }], usage: USAGE(5000, 800, 4096, 300) }));
    const before = await gw.balanceMicro();
    await (await post(gw, "/v1/chat/completions", { model: RESPONSES_MODEL, messages: [{ role: "user", content: prompt }], stream: true })).text();
    const viaResponses = before - (await gw.balanceMicro());
    upstream.reply({
      kind: "sse",
      chunks: [
        `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"A"}}]}\n\n`,
        `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
        `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5000,"completion_tokens":800,"prompt_tokens_details":{"cached_tokens":4096},"completion_tokens_details":{"reasoning_tokens":300}}}\n\n`,
        "data: [DONE]\n\n",
      ],
    });
    const middle = await gw.balanceMicro();
    await (await post(gw, "/v1/chat/completions", { model: CHAT_TWIN, messages: [{ role: "user", content: prompt }], stream: true })).text();
    const viaChat = middle - (await gw.balanceMicro());
    expect(viaResponses).toBe(viaChat);
    // 904 fresh input at 2,000, 4,096 cached at 0.1× (GPT-6 Sol's reads), 800 output at 10,000 (reasoning inside it).
    expect(viaResponses).toBe(904 * 2000 + 4096 * 200 + 800 * 10000);
  });

  test("an answer that repeats large instructions and tools (as OpenAI's does in response.created, in_progress and completed) under a small max_output_tokens is answered and billed, not cut as more than its limit", async () => {
    // 200 KB of instructions and 40 KB of tools, 16 tokens asked: the echo alone is ~15× what the
    // answer's frames may carry for 16 tokens. Cut, it was a free 502, the vendor's prompt unpaid.
    const instructions = "Answer in one word. ".repeat(10_000);
    const tools = Array.from({ length: 100 }, (_, i) => ({ ...WEATHER_TOOL, name: `tool_${i}`, description: "Looks something up. ".repeat(20) }));
    const usage = USAGE(52_000, 2);
    for (const [path, body] of [
      ["/v1/responses", { model: RESPONSES_MODEL, instructions, tools, input: "Is Paris the capital of France?", max_output_tokens: 16, stream: true, store: false }],
      ["/v1/chat/completions", { model: RESPONSES_MODEL, messages: [{ role: "system", content: instructions }, { role: "user", content: "Is Paris the capital of France?" }], tools: tools.map(({ name, description, parameters }) => ({ type: "function", function: { name, description, parameters } })), max_tokens: 16, stream: true }],
    ] as const) {
      upstream.reply(answerWith({ items: [{ text: "Yes" }], usage }, { echoRequest: true }));
      const before = await gw.balanceMicro();
      const res = await post(gw, path, body);
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toContain(`"Yes"`);
      expect(text).not.toContain("far more than the answer's token limit");
      await gw.app.services.settled();
      expect(lastRecord()).toMatchObject({ status: "ok", prompt_tokens: 52_000, completion_tokens: 2, estimated: 0 });
      expect(before - (await gw.balanceMicro())).toBe(52_000 * 2000 + 2 * 10000);
    }
  });

  test("an upstream error status is a 502 that costs nothing", async () => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", stream: true, store: false });
    expect(res.status).toBe(502);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("a whole answer that failed (200 with status failed) is a 502 that costs nothing", async () => {
    upstream.reply(answerWith({ items: [], status: "failed" }));
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", store: false });
    expect(res.status).toBe(502);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("response.failed mid-answer: the client sees the failure after what came, charged the usage the vendor reported", async () => {
    upstream.reply(answerWith({ items: [{ text: "Partial answer" }], status: "failed", error: { code: "server_error", message: "internal" }, usage: USAGE(40, 3) }));
    const res = await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", stream: true, store: false });
    const events = eventsOf(await res.text());
    expect(events.some((e: any) => e.type === "response.output_text.delta")).toBe(true);
    expect(events.at(-1).type).toBe("response.failed");
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "stream_failed", prompt_tokens: 40, completion_tokens: 3, estimated: 0 });
  });

  test("a mid-stream error event fails the answer; a stream cut before response.completed is charged by estimate, as on chat", async () => {
    const frames = responsesFrames({ items: [{ text: "Some words that were sent" }] });
    upstream.reply({ kind: "sse", chunks: [...frames.slice(0, 7), frameOf({ type: "error", sequence_number: 7, code: "server_error", message: "broke", param: null })] });
    const failed = eventsOf(await (await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", stream: true, store: false })).text());
    expect(failed.at(-1).type).toBe("response.failed");
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "stream_failed", estimated: 1 });

    upstream.reply({ kind: "sse", chunks: frames.slice(0, 7) });
    const cut = eventsOf(await (await post(gw, "/v1/responses", { model: RESPONSES_MODEL, input: "Hi", stream: true, store: false })).text());
    expect(cut.at(-1).type).toBe("response.failed");
    await gw.app.services.settled();
    const record = lastRecord();
    expect(record).toMatchObject({ status: "stream_failed", estimated: 1 });
    expect(record.completion_tokens).toBeGreaterThan(0);
  });
});
