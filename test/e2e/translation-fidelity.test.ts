/**
 * What a translation-fidelity probe found: requests translated for the other vendor that it would
 * refuse, and answers that reached a client in a shape its SDK does not expect. The fake upstream
 * records what the gateway sent; where it would not refuse what the real vendor refuses, the
 * assertion is on the recorded body, with the vendor's rule beside it.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, OPENAI_PRICING, post, useGateway } from "../helpers/gateway.ts";
import { openaiBody, openaiStream } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream();
/** OpenAI reasoning models by their upstream names (what decides which parameters they refuse). */
const reasoningModel = (name: string) => ({ id: `test/${name}`, provider: "fake-openai", upstream_model: name, category: "text", context_length: 200_000, pricing: OPENAI_PRICING });
const REASONING = ["gpt-5", "gpt-5-chat-latest", "o4-mini-2025-04-16", "o3", "o3-mini", "deepseek-v4-pro", "moonshotai/kimi-k2.6"];
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, extraModels: REASONING.map(reasoningModel) }));
const sent = () => upstream.requests.at(-1)!.body;
const parameters = { type: "object", properties: { q: { type: "string" } } };

describe("tool_choice none with parallel_tool_calls false → Anthropic", () => {
  // Anthropic's ToolChoiceNone is `{type: "none"}` alone: `disable_parallel_tool_use` exists on
  // auto, any and tool, and is refused beside none. Zed's agent sends exactly this pair.
  test("chat completions", async () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters } }];
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, tools, tool_choice: "none", parallel_tool_calls: false, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "none" });
  });

  test("the Responses API", async () => {
    const tools = [{ type: "function", name: "lookup", parameters }];
    const res = await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, store: false, tools, tool_choice: "none", parallel_tool_calls: false, input: "hi" });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "none" });
  });

  test("auto still takes the flag", async () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters } }];
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, tools, tool_choice: "auto", parallel_tool_calls: false, messages: [{ role: "user", content: "hi" }] });
    expect(sent().tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true });
  });
});

describe("tool-call ids another vendor wrote, on their way to Anthropic clients and to Anthropic", () => {
  // Anthropic takes `^[a-zA-Z0-9_-]+$` only: `messages.N.content.M.tool_use.id: String should match
  // pattern` refuses the whole request. vLLM's Kimi writes `functions.get_weather:0`.
  const RAW = "functions.get_weather:0";
  const ANTHROPIC_ID = /^[a-zA-Z0-9_-]+$/;
  const tools = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
  const call = { id: RAW, name: "get_weather", arguments: '{"city":"Paris"}' };
  const ask = { max_tokens: 50, tools, messages: [{ role: "user", content: "weather?" }] };
  /** The client's next turn: the call it got, and its result. */
  const nextTurn = (id: string) => [
    { role: "user", content: "weather?" },
    { role: "assistant", content: [{ type: "tool_use", id, name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: "sunny" }] },
  ];

  test("an Anthropic client gets an id Anthropic takes, the same one whole and streamed", async () => {
    upstream.reply(openaiBody({ calls: [call] }));
    const whole = (await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, ...ask })).json()) as { content: { type: string; id: string }[] };
    const id = whole.content.find((b) => b.type === "tool_use")!.id;
    expect(id).toMatch(ANTHROPIC_ID);

    upstream.reply(openaiStream({ calls: [call] }));
    const text = await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, stream: true, ...ask })).text();
    const starts = text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6))).filter((d) => d.type === "content_block_start");
    expect(starts.map((d) => d.content_block.id)).toEqual([id]);
  });

  test("the id an Anthropic client got goes back to either vendor with its call and result matching", async () => {
    upstream.reply(openaiBody({ calls: [call] }));
    const whole = (await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, ...ask })).json()) as { content: { type: string; id: string }[] };
    const id = whole.content.find((b) => b.type === "tool_use")!.id;

    expect((await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, tools, messages: nextTurn(id) })).status).toBe(200);
    expect(sent().messages[1].content[0].id).toBe(id);
    expect(sent().messages[2].content[0].tool_use_id).toBe(id);
    // The fake OpenAI refuses a tool message that answers no call, as OpenAI does.
    expect((await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, tools, messages: nextTurn(id) })).status).toBe(200);
    expect(sent().messages[1].tool_calls[0].id).toBe(sent().messages[2].tool_call_id);
  });

  test("an Anthropic client's history with another vendor's raw ids reaches Anthropic with safe ids that still pair", async () => {
    expect((await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, tools, messages: nextTurn(RAW) })).status).toBe(200);
    const id = sent().messages[1].content[0].id;
    expect(id).toMatch(ANTHROPIC_ID);
    expect(sent().messages[2].content[0].tool_use_id).toBe(id);

    // Counted as it would be sent (Anthropic's count_tokens refuses the same ids).
    expect((await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, tools, messages: nextTurn(RAW) })).status).toBe(200);
    expect(sent().messages[1].content[0].id).toBe(id);
    expect(sent().messages[2].content[0].tool_use_id).toBe(id);
  });

  test("an OpenAI client keeps the upstream's id as it came (OpenAI takes any string), whole and streamed, and its next turn pairs on Anthropic", async () => {
    const openaiTools = [{ type: "function", function: { name: "get_weather", parameters: tools[0]!.input_schema } }];
    upstream.reply(openaiBody({ calls: [call] }));
    const whole = (await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, tools: openaiTools, messages: [{ role: "user", content: "weather?" }] })).json()) as any;
    expect(whole.choices[0].message.tool_calls[0].id).toBe(RAW);

    upstream.reply(openaiStream({ calls: [call] }));
    const text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, tools: openaiTools, messages: [{ role: "user", content: "weather?" }] })).text();
    expect(text).toContain(JSON.stringify(RAW));

    const history = [
      { role: "user", content: "weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: RAW, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: RAW, content: "sunny" },
    ];
    expect((await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, tools: openaiTools, messages: history })).status).toBe(200);
    expect(sent().messages[1].content[0].id).toMatch(ANTHROPIC_ID);
    expect(sent().messages[2].content[0].tool_use_id).toBe(sent().messages[1].content[0].id);
  });
});

describe("a conversation of system messages only → Anthropic", () => {
  // OpenAI answers `messages: [{role: "system", …}]`, doing what it says; Anthropic refuses an empty
  // `messages` ("messages: at least one message is required"). The system text is the one user turn.
  test("chat completions", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: [{ role: "system", content: "Tell me a joke." }, { role: "developer", content: "Keep it short." }] });
    expect(res.status).toBe(200);
    expect(sent().messages).toMatchObject([{ role: "user", content: [{ type: "text", text: "Tell me a joke.\n\nKeep it short." }] }]);
    expect(sent().system).toBeUndefined();
  });

  test("the Responses API: instructions and a developer message", async () => {
    const res = await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, store: false, instructions: "Tell me a joke.", input: [{ role: "developer", content: "Keep it short." }] });
    expect(res.status).toBe(200);
    expect(sent().messages).toMatchObject([{ role: "user", content: [{ type: "text", text: "Tell me a joke.\n\nKeep it short." }] }]);
    expect(sent().system).toBeUndefined();
  });

  test("with a user turn, system stays system", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }] });
    expect(sent().system).toBe("Be brief.");
    expect(sent().messages).toMatchObject([{ role: "user", content: [{ type: "text", text: "hi" }] }]);
  });

  test("responses.inputTokens.count of instructions alone is Anthropic's count of what would be sent", async () => {
    upstream.reply({ kind: "json", body: { input_tokens: 17 } });
    const res = await post(gw, "/v1/responses/input_tokens", { model: ANTHROPIC_MODEL, instructions: "Tell me a joke." });
    expect(((await res.json()) as { input_tokens: number }).input_tokens).toBe(17);
    const count = upstream.requests.at(-1)!;
    expect(count.path).toBe("/v1/messages/count_tokens");
    expect(count.body.messages).toMatchObject([{ role: "user", content: [{ type: "text", text: "Tell me a joke." }] }]);
    expect(count.body.system).toBeUndefined();
  });
});

describe("OpenAI's end-user id → Anthropic's metadata.user_id", () => {
  // Anthropic: "a uuid, hash value, or other opaque identifier … do not include any identifying
  // information such as name, email address, or phone number". The other direction already hashes.
  const hex = (id: string) => new Bun.CryptoHasher("sha256").update(id).digest("hex");

  test("`user` goes as its SHA-256, never as written", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, user: "alice@example.com", messages: [{ role: "user", content: "hi" }] });
    expect(sent().metadata).toEqual({ user_id: hex("alice@example.com") });
  });

  test("`safety_identifier` (which replaces `user`) too, on chat and the Responses API", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, safety_identifier: "alice@example.com", messages: [{ role: "user", content: "hi" }] });
    expect(sent().metadata).toEqual({ user_id: hex("alice@example.com") });
    await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, store: false, safety_identifier: "u-123", user: "alice@example.com", input: "hi" });
    expect(sent().metadata).toEqual({ user_id: hex("u-123") });
  });
});

describe("parameters OpenAI's reasoning models refuse are left out (spec 4.2: ignored, not refused)", () => {
  // "Unsupported parameter: 'stop' is not supported with this model" (o3, o4-mini, GPT-5's reasoning
  // models; o3-mini takes it) and the same for `parallel_tool_calls` on the o-series, even `false`.
  const anthropicTools = [{ name: "lookup", input_schema: parameters }];
  const fromAnthropic = (model: string) =>
    post(gw, "/v1/messages", { model: `test/${model}`, max_tokens: 2000, stop_sequences: ["END"], tools: anthropicTools, tool_choice: { type: "auto", disable_parallel_tool_use: true }, messages: [{ role: "user", content: "hi" }] });
  const fromChat = (model: string) =>
    post(gw, "/v1/chat/completions", { model: `test/${model}`, stop: ["END"], tools: [{ type: "function", function: { name: "lookup", parameters } }], parallel_tool_calls: false, messages: [{ role: "user", content: "hi" }] });

  test.each([
    ["gpt-5", { stop: undefined, parallel_tool_calls: false }],
    ["gpt-5-chat-latest", { stop: ["END"], parallel_tool_calls: false }],
    ["o4-mini-2025-04-16", { stop: undefined, parallel_tool_calls: undefined }],
    ["o3", { stop: undefined, parallel_tool_calls: undefined }],
    ["o3-mini", { stop: ["END"], parallel_tool_calls: undefined }],
  ])("%s, translated from Anthropic and sent as a chat client wrote it", async (model, expected) => {
    for (const send of [fromAnthropic, fromChat]) {
      expect((await send(model)).status).toBe(200);
      expect({ stop: sent().stop, parallel_tool_calls: sent().parallel_tool_calls }).toEqual(expected);
      expect(sent().tools).toHaveLength(1);
    }
  });

  test("from the Responses API", async () => {
    const tools = [{ type: "function", name: "lookup", parameters }];
    expect((await post(gw, "/v1/responses", { model: "test/o3", store: false, tools, parallel_tool_calls: false, input: "hi" })).status).toBe(200);
    expect(sent().parallel_tool_calls).toBeUndefined();
    await post(gw, "/v1/responses", { model: "test/gpt-5", store: false, tools, parallel_tool_calls: false, input: "hi" });
    expect(sent().parallel_tool_calls).toBe(false);
  });

  test("other models get both", async () => {
    await fromChat("gpt");
    expect({ stop: sent().stop, parallel_tool_calls: sent().parallel_tool_calls }).toEqual({ stop: ["END"], parallel_tool_calls: false });
  });
});

describe("a tool loop's reasoning back to models that want it (DeepSeek's thinking mode, Kimi's thinking models: 400 \"Missing reasoning_content\" without it; a probe of the agent CLIs)", () => {
  const call = { id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":"x"}' } };
  const assistantOf = (body: Record<string, any>) => (body.messages as Record<string, any>[]).find((m) => m.role === "assistant")!;

  test("Claude Code's thinking blocks on a tool-calling turn go back as reasoning_content to those models only", async () => {
    const messages = [
      { role: "user", content: "look it up" },
      { role: "assistant", content: [{ type: "thinking", thinking: "I should look it up.", signature: "" }, { type: "tool_use", id: "toolu_01", name: "lookup", input: { q: "x" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "found" }] },
    ];
    const tools = [{ name: "lookup", input_schema: parameters }];
    for (const [model, carried] of [["test/deepseek-v4-pro", true], ["test/moonshotai/kimi-k2.6", true], [OPENAI_MODEL, false], ["test/o3", false]] as const) {
      const res = await post(gw, "/v1/messages", { model, max_tokens: 100, tools, messages });
      expect([model, res.status]).toEqual([model, 200]);
      expect([model, assistantOf(sent()).reasoning_content]).toEqual([model, carried ? "I should look it up." : undefined]);
    }
  });

  test("Codex's reasoning items before its calls go back as reasoning_content of that turn, to those models only", async () => {
    const input = [
      { role: "user", content: "look it up" },
      { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "I should look it up." }] },
      { type: "function_call", call_id: "call_1", name: "lookup", arguments: '{"q":"x"}' },
      { type: "function_call_output", call_id: "call_1", output: "found" },
    ];
    const tools = [{ type: "function", name: "lookup", parameters }];
    for (const [model, carried] of [["test/deepseek-v4-pro", true], [OPENAI_MODEL, false]] as const) {
      const res = await post(gw, "/v1/responses", { model, store: false, tools, input });
      expect([model, res.status]).toEqual([model, 200]);
      const assistant = assistantOf(sent());
      expect(assistant.tool_calls).toEqual([call]);
      expect([model, assistant.reasoning_content]).toEqual([model, carried ? "I should look it up." : undefined]);
    }
  });
});

describe("OpenAI's reasoning models take max_completion_tokens (they refuse max_tokens) when the provider does not say which field", () => {
  test("o3 and gpt-5 get max_completion_tokens; gpt-4o-mini keeps max_tokens", async () => {
    for (const [model, field] of [["test/o3", "max_completion_tokens"], ["test/gpt-5", "max_completion_tokens"], [OPENAI_MODEL, "max_tokens"]] as const) {
      const res = await post(gw, "/v1/responses", { model, store: false, input: "hi" });
      expect([model, res.status]).toEqual([model, 200]);
      const body = sent();
      expect([model, typeof body[field], field === "max_tokens" ? body.max_completion_tokens : body.max_tokens]).toEqual([model, "number", undefined]);
    }
  });
});

describe("a call that ends `stop` (OpenAI with tool_choice naming a function; vLLM, Ollama always) → Anthropic clients", () => {
  // Anthropic says `tool_use` whenever the content has a call: agent loops and the AI SDK read
  // `end_turn` beside one as the run's end (an SDK probe, thirty-second session).
  const call = { id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' };
  const ask = (stream: boolean) =>
    post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 100, stream, tools: [{ name: "get_weather", input_schema: parameters }], tool_choice: { type: "tool", name: "get_weather" }, messages: [{ role: "user", content: "Weather in Paris?" }] });

  test("whole and streamed: stop_reason tool_use", async () => {
    upstream.reply(openaiBody({ calls: [call], stop: "stop" }));
    const whole: any = await (await ask(false)).json();
    expect(whole.content.at(-1)).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Paris" } });
    expect(whole.stop_reason).toBe("tool_use");
    upstream.reply(openaiStream({ calls: [call], stop: "stop" }));
    const text = await (await ask(true)).text();
    expect(text).toContain('"type":"tool_use"');
    expect(text).toContain('"stop_reason":"tool_use"');
  });

  test("a cut answer stays max_tokens, and text alone stays end_turn", async () => {
    upstream.reply(openaiBody({ calls: [call], stop: "length" }));
    expect(((await (await ask(false)).json()) as any).stop_reason).toBe("max_tokens");
    upstream.reply(openaiBody({ text: "Sunny." }));
    expect(((await (await ask(false)).json()) as any).stop_reason).toBe("end_turn");
  });
});
