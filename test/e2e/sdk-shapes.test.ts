/**
 * What the official SDKs expect that a translating gateway may forget: the fields Anthropic's
 * usage always has, requests the Anthropic API would refuse though OpenAI takes them, one
 * `created` for a whole stream, and no retries of a refusal a retry cannot change.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const question = [{ role: "user" as const, content: "Hello" }];

describe("Anthropic usage on answers translated from an OpenAI upstream", () => {
  test("has service_tier and the cache counts with their split, whole and streamed, as Anthropic's own answers do", async () => {
    const sdk = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const whole = await sdk.messages.create({ model: OPENAI_MODEL, max_tokens: 50, messages: question });
    const streamed = await sdk.messages.stream({ model: OPENAI_MODEL, max_tokens: 50, messages: question }).finalMessage();
    for (const message of [whole, streamed]) {
      expect(message.usage.service_tier).toBe("standard");
      expect(message.usage.cache_creation).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 });
      expect(message.usage.cache_read_input_tokens).toBe(0);
      expect(message.usage.cache_creation_input_tokens).toBe(0);
      expect(message.usage.input_tokens).toBeGreaterThan(0);
      expect(message.usage.output_tokens).toBeGreaterThan(0);
    }
  });
});

describe("OpenAI requests for an Anthropic upstream, as the Anthropic API takes them", () => {
  test("stop sequences that are empty or only whitespace are left out (Anthropic refuses them); the others go", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stop: ["\n", "", "END", "  "] });
    expect(upstream.requests.at(-1)!.body.stop_sequences).toEqual(["END"]);
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stop: "\n" });
    expect(upstream.requests.at(-1)!.body.stop_sequences).toBeUndefined();
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stop: "###" });
    expect(upstream.requests.at(-1)!.body.stop_sequences).toEqual(["###"]);
  });

  test("temperature and top_p together: temperature goes, top_p does not (Anthropic refuses both at once); either alone goes", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, temperature: 0.3, top_p: 0.9 });
    let sent = upstream.requests.at(-1)!.body;
    expect(sent.temperature).toBe(0.3);
    expect(sent.top_p).toBeUndefined();
    await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, input: "Hello", temperature: 0.3, top_p: 0.9 });
    sent = upstream.requests.at(-1)!.body;
    expect([sent.temperature, sent.top_p]).toEqual([0.3, undefined]);
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, top_p: 0.9 });
    expect(upstream.requests.at(-1)!.body.top_p).toBe(0.9);
  });
});

test("a relayed stream whose usage the gateway adds: the usage chunk has the vendor's created, as every other chunk", async () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", ...body })}\n\n`;
  upstream.reply({ kind: "sse", chunks: [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    "data: [DONE]\n\n",
  ] });
  const frames = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } })).text());
  const chunks = frames.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
  expect(chunks.at(-1)!.usage).toBeDefined();
  expect(new Set(chunks.map((c) => c.created))).toEqual(new Set([1700000000]));
});

test("a relayed stream with chunks of shapes the SDK would trip on: written anew, and the openai SDK reads the answer to its end", async () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", ...body })}\n\n`;
  upstream.reply({ kind: "sse", chunks: [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hel" }, finish_reason: null }] }),
    chunk({ choices: "str" }),
    chunk({ choices: [null] }),
    chunk({ choices: [{ index: 0, delta: 5, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: { content: ["a"] }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: { tool_calls: [null] }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: { content: "lo" }, finish_reason: 7 }] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    "data: [DONE]\n\n",
  ] });
  const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  const stream = await sdk.chat.completions.create({ model: OPENAI_MODEL, messages: question, stream: true });
  let text = "";
  const finishes: unknown[] = [];
  for await (const part of stream) {
    for (const choice of part.choices) {
      text += choice.delta.content ?? "";
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
  }
  expect(text).toBe("Hello");
  expect(finishes).toEqual(["stop"]);
  // The helper that gathers a whole message from the stream reads it too.
  upstream.reply({ kind: "sse", chunks: [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, finish_reason: null }] }),
    chunk({ choices: [null] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    "data: [DONE]\n\n",
  ] });
  const final = await sdk.chat.completions.stream({ model: OPENAI_MODEL, messages: question }).finalChatCompletion();
  expect(final.choices[0]!.message.content).toBe("Hi");
});

test("a chunk without `choices` (an empty object, a bare array, usage alone) is not relayed as it came: the SDK's stream helper reads the answer, and the usage reaches a client that asked for it", async () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", ...body })}\n\n`;
  const frames = () => [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, finish_reason: null }] }),
    "data: {}\n\n",
    "data: []\n\n",
    chunk({}),
    chunk({ choices: [{ index: 0, delta: { content: " there" }, finish_reason: "stop" }] }),
    chunk({ usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } }),
    "data: [DONE]\n\n",
  ];
  const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  for (const includeUsage of [false, true]) {
    upstream.reply({ kind: "sse", chunks: frames() });
    const final = await sdk.chat.completions.stream({ model: OPENAI_MODEL, messages: question, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) }).finalChatCompletion();
    expect(final.choices[0]!.message.content).toBe("Hi there");
    if (includeUsage) expect(final.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 2 });
  }
  upstream.reply({ kind: "sse", chunks: frames() });
  const relayed = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } })).text());
  for (const f of relayed) if (f.data !== "[DONE]") expect(Array.isArray(JSON.parse(f.data).choices)).toBe(true);
});

describe("chunks of compatible servers that leave out what OpenAI always sends, relayed: the openai SDK's stream helper reads the answer", () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", ...body })}\n\n`;
  const usage = { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 };
  const tools = [{ type: "function" as const, function: { name: "lookup", parameters: { type: "object", properties: {} } } }];
  const call = (fields: object) => chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_1", ...fields }] }, finish_reason: null }] });
  const callEnd = chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }], usage });
  const cases: [string, string[], "text" | "tool"][] = [
    ["no role in any chunk", [chunk({ choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }] }), chunk({ choices: [{ index: 0, delta: { content: " there" }, finish_reason: "stop" }], usage })], "text"],
    ["no choice index", [chunk({ choices: [{ delta: { role: "assistant", content: "Hi" }, finish_reason: null }] }), chunk({ choices: [{ delta: { content: " there" }, finish_reason: "stop" }], usage })], "text"],
    ["neither role nor index", [chunk({ choices: [{ delta: { content: "Hi" } }] }), chunk({ choices: [{ delta: { content: " there" }, finish_reason: "stop" }], usage })], "text"],
    ["logprobs that are not lists", [chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, logprobs: { content: 5 }, finish_reason: null }] }), chunk({ choices: [{ index: 0, delta: { content: " there" }, finish_reason: "stop" }], usage })], "text"],
    ["a tool call without its type", [call({ function: { name: "lookup", arguments: "{}" } }), callEnd], "tool"],
    ["a tool call whose function is null at first", [call({ type: "function", function: null }), chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { name: "lookup", arguments: "{}" } }] }, finish_reason: null }] }), callEnd], "tool"],
  ];
  test.each(cases)("%s", async (_name, frames, kind) => {
    upstream.reply({ kind: "sse", chunks: [...frames, "data: [DONE]\n\n"] });
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const final = await sdk.chat.completions.stream({ model: OPENAI_MODEL, messages: question, ...(kind === "tool" ? { tools } : {}) }).finalChatCompletion();
    const message = final.choices[0]!.message;
    expect(message.role).toBe("assistant");
    if (kind === "text") expect(message.content).toBe("Hi there");
    else expect(message.tool_calls).toMatchObject([{ id: "call_1", type: "function", function: { name: "lookup", arguments: "{}" } }]);
  });

  test("a vendor that sends the role has it relayed once, as it came", async () => {
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
      "data: [DONE]\n\n",
    ] });
    const text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text();
    expect(text.match(/"role":"assistant"/g)).toHaveLength(1);
  });
});

test("odd chunks after the stream's usual head are not relayed as they came either; compatible servers' choices: null usage and content parts still reach the client", async () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", ...body })}\n\n`;
  const text = (content: string, extra: object = {}) => chunk({ choices: [{ index: 0, delta: { content }, finish_reason: null }], ...extra });
  upstream.reply({ kind: "sse", chunks: [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }),
    text("A"),
    text("B"),
    // Text chunks that start as the usual ones do, then go wrong: a null choice, a role that is a number.
    `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"C"},"finish_reason":null},null]}\n\n`,
    `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"D","role":5},"finish_reason":null}]}\n\n`,
    // Mistral's Magistral: content as parts (its thinking), relayed as it came.
    chunk({ choices: [{ index: 0, delta: { content: [{ type: "thinking", thinking: [{ type: "text", text: "hmm" }] }] }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    // DeepSeek, Groq, vLLM: the usage chunk with choices null.
    chunk({ choices: null, usage: { prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 } }),
    "data: [DONE]\n\n",
  ] });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, stream_options: { include_usage: true } });
  const chunks = sseFrames(await res.text()).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
  for (const c of chunks) {
    expect(Array.isArray(c.choices)).toBe(true);
    for (const choice of c.choices) {
      expect(choice).toBeObject();
      if (choice.delta?.role !== undefined) expect(typeof choice.delta.role).toBe("string");
    }
  }
  const said = chunks.flatMap((c) => c.choices.map((choice: any) => (typeof choice.delta?.content === "string" ? choice.delta.content : ""))).join("");
  expect(said).toBe("ABCD");
  expect(chunks.some((c) => c.choices.some((choice: any) => Array.isArray(choice.delta?.content) && choice.delta.content[0].type === "thinking"))).toBe(true);
  expect(chunks.filter((c) => c.usage).map((c) => c.usage)).toEqual([expect.objectContaining({ prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 })]);
});

test("the vendor refusing the gateway's own key: a 502 with x-should-retry false, which the SDKs obey instead of retrying", async () => {
  upstream.reply({ kind: "json", status: 401, body: { error: { message: "Incorrect API key provided: sk-bench", type: "invalid_request_error", param: null, code: "invalid_api_key" } } });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
  expect(res.status).toBe(502);
  expect(res.headers.get("x-should-retry")).toBe("false");
  const body = (await res.json()) as any;
  expect(body.error.message).toMatch(/refused the gateway's credentials/);
  expect(body.error.message).not.toMatch(/sk-bench/);

  const before = upstream.requests.length;
  // One refusal queued each time: a retry would find the fake vendor answering (200), and the SDK would not raise.
  upstream.reply({ kind: "json", status: 401, body: { error: { message: "Incorrect API key provided", type: "invalid_request_error", param: null, code: "invalid_api_key" } } });
  const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 2 });
  const err = await sdk.chat.completions.create({ model: OPENAI_MODEL, messages: question }).catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.InternalServerError);
  expect(upstream.requests.length - before).toBe(1);
  // The vendor's own wait goes on with it, and still says not to retry.
  upstream.reply({ kind: "json", status: 401, headers: { "retry-after": "5" }, body: { error: { message: "Incorrect API key provided", type: "invalid_request_error", param: null, code: "invalid_api_key" } } });
  const waited = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
  expect([waited.status, waited.headers.get("x-should-retry"), waited.headers.get("retry-after")]).toEqual([502, "false", "5"]);
  await waited.text();
  upstream.reply({ kind: "json", status: 401, body: { error: { message: "Incorrect API key provided", type: "invalid_request_error", param: null, code: "invalid_api_key" } } });
  const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 2 });
  const err2 = await anthropic.messages.create({ model: OPENAI_MODEL, max_tokens: 10, messages: question }).catch((e) => e);
  expect(err2).toBeInstanceOf(Anthropic.InternalServerError);
  expect(upstream.requests.length - before).toBe(3);
});

describe("what the vendor bills above the price book is not asked for (a tenant probe, 2026-11-29)", () => {
  test("OpenAI: service_tier priority and scale are dropped (the standard tier answers); flex and auto pass", async () => {
    for (const tier of ["priority", "scale", "flex", "auto"]) {
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, service_tier: tier, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect([tier, upstream.requests.at(-1)!.body.service_tier]).toEqual([tier, tier === "priority" || tier === "scale" ? undefined : tier]);
    }
  });

  test("OpenAI: spoken answers (audio, modalities audio) and web_search_options are dropped: the model answers in text, the rest goes", async () => {
    const cases: [Record<string, unknown>, unknown][] = [
      [{ modalities: ["text", "audio"], audio: { voice: "alloy", format: "wav" } }, ["text"]],
      [{ modalities: ["audio"] }, ["text"]],
      [{ modalities: ["text"] }, ["text"]],
      [{ web_search_options: { search_context_size: "high" } }, undefined],
    ];
    for (const [extra, modalities] of cases) {
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, user: "u1", ...extra, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const sent = upstream.requests.at(-1)!.body;
      expect([extra, sent.audio, sent.web_search_options, sent.modalities, sent.user]).toEqual([extra, undefined, undefined, modalities, "u1"]);
    }
  });

  test("OpenAI-format servers' own paid searches are dropped (OpenRouter's web plugin, xAI's Live Search); OpenRouter's other plugins go", async () => {
    const cases: [Record<string, unknown>, unknown][] = [
      [{ plugins: [{ id: "web", max_results: 50 }] }, undefined],
      [{ plugins: [{ id: "web" }, { id: "response-healing" }] }, [{ id: "response-healing" }]],
      [{ plugins: [{ id: "file-parser", pdf: { engine: "pdf-text" } }] }, [{ id: "file-parser", pdf: { engine: "pdf-text" } }]],
      [{ search_parameters: { mode: "on", max_search_results: 30 } }, undefined],
    ];
    for (const [extra, plugins] of cases) {
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, user: "u1", ...extra, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const sent = upstream.requests.at(-1)!.body;
      expect([extra, sent.plugins, sent.search_parameters, sent.user]).toEqual([extra, plugins, undefined, "u1"]);
    }
  });

  test("OpenAI: a predicted output's rejected tokens are billed as the vendor bills them, past max_tokens; without a prediction output stops at max_tokens", async () => {
    const prediction = { type: "content", content: "const answer = 42; // the file as it is now\n".repeat(40) };
    const usage = { prompt_tokens: 20, completion_tokens: 400, total_tokens: 420, completion_tokens_details: { reasoning_tokens: 0, accepted_prediction_tokens: 5, rejected_prediction_tokens: 390 } };
    const charged = async (extra: Record<string, unknown>) => {
      upstream.reply({ kind: "json", body: { id: "chatcmpl-p", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "const answer = 43;" }, finish_reason: "stop" }], usage } });
      const before = await gw.balanceMicro();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: [{ role: "user", content: "fix it" }], ...extra });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      return before - (await gw.balanceMicro());
    };
    expect(await charged({ prediction })).toBe(20 * 150 + 400 * 600);
    expect(upstream.requests.at(-1)!.body.prediction).toEqual(prediction);
    expect(await charged({})).toBe(20 * 150 + 10 * 600);
  });

  test("Anthropic: speed fast is dropped (standard speed answers); the rest of the request is untouched", async () => {
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, speed: "fast", metadata: { user_id: "u1" }, messages: [{ role: "user", content: "hi" }] }, { "anthropic-version": "2023-06-01" });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.speed).toBeUndefined();
    expect(sent.metadata).toEqual({ user_id: "u1" });
  });

  // Claude Code's WebSearch request, as it sends it.
  const webSearch = { type: "web_search_20250305", name: "web_search", max_uses: 8 };
  const clientTool = { name: "lookup", description: "Look a word up", input_schema: { type: "object", properties: { word: { type: "string" } } } };
  const anthropicDefined = { type: "text_editor_20250728", name: "str_replace_based_edit_tool" };
  const v = { "anthropic-version": "2023-06-01" };

  test("Anthropic server tools (web search, web fetch, code execution) never reach the vendor; the client's tools and Anthropic-defined client tools go", async () => {
    for (const stream of [false, true]) {
      const res = await post(gw, "/v1/messages", {
        model: ANTHROPIC_MODEL, max_tokens: 20, stream, messages: question, tool_choice: { type: "auto" },
        tools: [webSearch, clientTool, { type: "web_fetch_20250910", name: "web_fetch" }, anthropicDefined, { type: "code_execution_20250825", name: "code_execution" }],
        mcp_servers: [{ type: "url", url: "https://mcp.example.com/sse", name: "x" }], container: "container_1",
      }, v);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const sent = upstream.requests.at(-1)!.body;
      expect(sent.tools).toEqual([clientTool, anthropicDefined]);
      expect(sent.tool_choice).toEqual({ type: "auto" });
      expect([sent.mcp_servers, sent.container]).toEqual([undefined, undefined]);
    }
  });

  test("an allow-list, not a deny-list: the advisor and any tool type not the client's own are dropped, tool search and the client-run tools go; compaction (a vendor-side model call) is dropped, clearing tool uses goes", async () => {
    const toolSearch = { type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" };
    const custom = { type: "custom", name: "typed", input_schema: { type: "object" } };
    const res = await post(gw, "/v1/messages", {
      model: ANTHROPIC_MODEL, max_tokens: 20, messages: question,
      tools: [clientTool, { type: "advisor_20260301", name: "advisor", model: "claude-opus-4-6", max_uses: 5 }, { type: "some_future_server_tool_20270101", name: "future" }, toolSearch, custom, { type: "bash_20250124", name: "bash" }],
      context_management: { edits: [{ type: "clear_tool_uses_20250919" }, { type: "compact_20260112", trigger: { type: "input_tokens", value: 50_000 } }] },
      compaction: { enabled: true },
    }, v);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([clientTool, toolSearch, custom, { type: "bash_20250124", name: "bash" }]);
    expect(sent.context_management).toEqual({ edits: [{ type: "clear_tool_uses_20250919" }] });
    expect(sent.compaction).toBeUndefined();
    // Only compaction asked for: no context_management at all.
    await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question, context_management: { edits: [{ type: "compact_20260112" }] } }, v)).arrayBuffer();
    expect("context_management" in upstream.requests.at(-1)!.body).toBe(false);
  });

  test("on an OpenAI upstream, Anthropic's bash, text editor and memory tools go as functions taking their documented input, and their calls come back as tool_use; computer does not go, nor a choice naming it", async () => {
    const tools = [clientTool, { type: "bash_20250124", name: "bash" }, anthropicDefined, { type: "memory_20250818", name: "memory" }, { type: "computer_20250124", name: "computer", display_width_px: 1024, display_height_px: 768 }];
    upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "gpt", choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "bash", arguments: '{"command":"ls -la"}' } }] }, finish_reason: "tool_calls" }], usage: { prompt_tokens: 50, completion_tokens: 5, total_tokens: 55 } } });
    const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 200, messages: question, tools, tool_choice: { type: "tool", name: "bash" } }, v);
    expect(res.status).toBe(200);
    const answer = (await res.json()) as any;
    expect(answer.stop_reason).toBe("tool_use");
    expect(answer.content).toEqual([expect.objectContaining({ type: "tool_use", name: "bash", input: { command: "ls -la" } })]);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools.map((t: any) => t.function.name)).toEqual(["lookup", "bash", "str_replace_based_edit_tool", "memory"]);
    const byName = Object.fromEntries(sent.tools.map((t: any) => [t.function.name, t.function]));
    expect(byName.bash.parameters.properties.command.type).toBe("string");
    expect(byName.str_replace_based_edit_tool.parameters.required).toEqual(["command", "path"]);
    expect(byName.str_replace_based_edit_tool.parameters.properties.command.enum).toEqual(["view", "create", "str_replace", "insert"]);
    expect(byName.memory.parameters.properties.command.enum).toContain("rename");
    for (const f of sent.tools) expect(typeof f.function.description).toBe("string");
    expect(sent.tool_choice).toEqual({ type: "function", function: { name: "bash" } });
    // A forced tool that cannot go: the choice goes with it (the upstream refuses a choice naming no tool it was sent).
    await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 200, messages: question, tools, tool_choice: { type: "tool", name: "computer" } }, v)).arrayBuffer();
    expect(upstream.requests.at(-1)!.body.tool_choice).toBeUndefined();
    // The older text editor keeps undo_edit.
    await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 200, messages: question, tools: [{ type: "text_editor_20250124", name: "str_replace_editor" }] }, v)).arrayBuffer();
    expect(upstream.requests.at(-1)!.body.tools[0].function.parameters.properties.command.enum).toContain("undo_edit");
  });

  test("a request whose only tool is a server tool goes without tools or tool_choice (Anthropic refuses a choice without tools); counts too", async () => {
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question, tools: [webSearch], tool_choice: { type: "any" } }, v);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    let sent = upstream.requests.at(-1)!.body;
    expect(["tools" in sent, "tool_choice" in sent, sent.messages]).toEqual([false, false, question]);
    const counted = await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: question, tools: [webSearch, clientTool] }, v);
    expect(counted.status).toBe(200);
    await counted.arrayBuffer();
    expect(upstream.requests.at(-1)!.path).toBe("/v1/messages/count_tokens");
    sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([clientTool]);
  });

  test("forcing a server tool is a 400 that says why, on every upstream, before anything is sent", async () => {
    const before = upstream.requests.length;
    for (const model of [ANTHROPIC_MODEL, OPENAI_MODEL]) {
      for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
        const res = await post(gw, path, { model, max_tokens: 20, messages: question, tools: [webSearch, clientTool], tool_choice: { type: "tool", name: "web_search" } }, v);
        expect([model, path, res.status]).toEqual([model, path, 400]);
        const body = (await res.json()) as any;
        expect(body.type).toBe("error");
        expect(body.error.type).toBe("invalid_request_error");
        expect(body.error.message).toMatch(/web_search.*server tool/);
      }
    }
    expect(upstream.requests.length).toBe(before);
    // Forcing the client's own tool goes as it came.
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question, tools: [webSearch, clientTool], tool_choice: { type: "tool", name: "lookup" } }, v);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(upstream.requests.at(-1)!.body.tool_choice).toEqual({ type: "tool", name: "lookup" });
  });
});

describe("an Anthropic stream relayed to an Anthropic client, with frames missing what the SDK reads unchecked", () => {
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const start = ev("message_start", { message: { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } });
  const blockStart = ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
  const delta = ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello there" } });
  const blockStop = ev("content_block_stop", { index: 0 });
  const messageDelta = ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } });
  const stop = ev("message_stop", {});
  const bareStart = (message: object) => ev("message_start", { message: { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", stop_reason: null, stop_sequence: null, ...message } });
  const cases: [string, string[]][] = [
    ["a message_delta without usage", [start, blockStart, delta, blockStop, ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null } }), stop]],
    ["a message_delta whose usage is null", [start, blockStart, delta, blockStop, ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: null }), stop]],
    ["a content_block_delta without its delta", [start, blockStart, ev("content_block_delta", { index: 0 }), delta, blockStop, messageDelta, stop]],
    ["a content_block_delta whose delta is null", [start, blockStart, ev("content_block_delta", { index: 0, delta: null }), delta, blockStop, messageDelta, stop]],
    ["a message_start without its message", [ev("message_start", {}), blockStart, delta, blockStop, messageDelta, stop]],
    ["a message_start whose message has no usage", [bareStart({ content: [] }), blockStart, delta, blockStop, messageDelta, stop]],
    ["a message_start whose content is null", [bareStart({ content: null, usage: { input_tokens: 12, output_tokens: 1 } }), blockStart, delta, blockStop, messageDelta, stop]],
  ];
  test.each(cases)("%s: the SDK reads the whole message, its output count the one billed", async (_name, chunks) => {
    upstream.reply({ kind: "sse", chunks });
    const sdk = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const message = await sdk.messages.stream({ model: ANTHROPIC_MODEL, max_tokens: 50, messages: question }).finalMessage();
    expect(message.content).toEqual([{ type: "text", text: "Hello there" } as never]);
    expect(message.stop_reason).toBe("end_turn");
    await gw.app.services.settled();
    const record = gw.db.query<{ status: string; completion_tokens: number }, []>("SELECT status, completion_tokens FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(record.status).toBe("ok");
    expect(message.usage.output_tokens).toBe(record.completion_tokens);
  });
});
