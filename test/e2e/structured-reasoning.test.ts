/**
 * Structured output and reasoning across the formats, end to end with the official SDKs: the
 * fake upstream speaks each vendor's wire bytes and refuses what the vendors refuse here (schemas
 * Anthropic cannot take, structured outputs before Claude 4.5, adaptive thinking before 4.6,
 * thinking with a forced tool or after unsigned tool calls, reasoning_effort on gpt-4o, a strict
 * schema OpenAI would refuse), so a field translated wrongly fails as it would in production.
 * The tables themselves are tested in test/unit/formats/structured-reasoning-translate.test.ts.
 */
import { Database } from "bun:sqlite";
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { jsonSchemaOutputFormat } from "@anthropic-ai/sdk/helpers/json-schema";
import { useFakeUpstream, vendorRefusal, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { useGateway, post, sseFrames, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";
import { anthropicBody, anthropicStream, deepseekBody, deepseekStream, openaiBody, openaiStream, SCRIPTED_SIGNATURE } from "../helpers/scripted-answers.ts";
import { answerCostMicro } from "../../src/billing/pricing.ts";

const options = { strict: true, thinkingHistory: true };
const upstream = useFakeUpstream(options);
/** An OpenAI reasoning model, an adaptive-thinking Claude, a Claude without structured outputs. */
const O4 = "test/o4-mini";
const OPUS = "test/opus";
const CLAUDE_4 = "test/claude-4";
const pricing = { input_per_mtok: 3000, output_per_mtok: 15000 };
const extraModels = [
  { id: O4, provider: "fake-openai", upstream_model: "o4-mini", category: "text", context_length: 200_000, pricing },
  { id: OPUS, provider: "fake-anthropic", upstream_model: "claude-opus-4-6", category: "text", context_length: 200_000, pricing },
  { id: CLAUDE_4, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-20250514", category: "text", context_length: 200_000, pricing },
];
const gw = useGateway(() => ({ upstreamUrl: upstream.url, extraModels, credits: 1000, retry: { max_retries: 0 } }));
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
});

/** The scripted answer, unless the vendor would have refused the request (then its refusal, as the default replies do). */
function answer(reply: Reply) {
  upstream.reply((rec: RecordedRequest) => vendorRefusal(rec, options) ?? reply);
}
const sent = () => upstream.requests.at(-1)!.body;

const weather = {
  type: "object",
  properties: { city: { type: "string" }, temperature: { type: "number" } },
  required: ["city", "temperature"],
  additionalProperties: false,
} as const;
const PARIS = { city: "Paris", temperature: 18 };
const ask = [{ role: "user" as const, content: "Weather in Paris, as JSON?" }];

describe("structured output: OpenAI clients, Anthropic upstreams", () => {
  test("chat.completions.parse with a json_schema: the upstream gets output_config.format with the schema, the SDK .parsed", async () => {
    answer(anthropicBody({ text: JSON.stringify(PARIS) }));
    const completion = await openai.chat.completions.parse({
      model: ANTHROPIC_MODEL,
      messages: ask,
      response_format: { type: "json_schema", json_schema: { name: "weather", schema: weather, strict: true } },
    });
    expect(sent().output_config).toEqual({ format: { type: "json_schema", schema: weather } });
    expect(sent().response_format).toBeUndefined();
    expect(sent().tools).toBeUndefined();
    expect(completion.choices[0]!.message.parsed).toEqual(PARIS);
    expect(completion.choices[0]!.message.content).toBe(JSON.stringify(PARIS));
  });

  test("constraints Anthropic refuses reach it as words in the description, not as keywords", async () => {
    const bounded = { ...weather, properties: { city: { type: "string", minLength: 1 }, temperature: { type: "number", minimum: -90, maximum: 60 } } };
    answer(anthropicBody({ text: JSON.stringify(PARIS) }));
    const completion = await openai.chat.completions.parse({ model: ANTHROPIC_MODEL, messages: ask, response_format: { type: "json_schema", json_schema: { name: "weather", schema: bounded } } });
    expect(completion.choices[0]!.message.parsed).toEqual(PARIS);
    const schema = sent().output_config.format.schema;
    expect(schema.properties.temperature).toEqual({ type: "number", description: "{minimum: -90, maximum: 60}" });
    expect(JSON.stringify(schema)).not.toContain('"minimum"');
  });

  test("a model without structured outputs: a forced tool, streamed back as the answer's text, not as a tool call", async () => {
    const json = JSON.stringify(PARIS);
    answer(anthropicStream({ calls: [{ id: "toolu_01", name: "json_answer", arguments: json }] }));
    const stream = openai.chat.completions.stream({
      model: CLAUDE_4,
      messages: ask,
      response_format: { type: "json_schema", json_schema: { name: "weather", schema: weather, strict: true } },
      stream_options: { include_usage: true },
    });
    let deltas = "";
    const toolDeltas: unknown[] = [];
    for await (const chunk of stream) {
      deltas += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.choices[0]?.delta?.tool_calls) toolDeltas.push(chunk.choices[0].delta.tool_calls);
    }
    const final = await stream.finalChatCompletion();
    expect(sent().output_config).toBeUndefined();
    expect(sent().tools).toEqual([{ name: "json_answer", description: expect.any(String), input_schema: weather }]);
    expect(sent().tool_choice).toEqual({ type: "tool", name: "json_answer" });
    expect(deltas).toBe(json);
    expect(toolDeltas).toEqual([]);
    expect(final.choices[0]!.message.parsed).toEqual(PARIS);
    expect(final.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(final.choices[0]!.finish_reason).toBe("stop");
  });

  test("json_object (no Anthropic equivalent): a forced tool taking any object; the whole body has the JSON as content", async () => {
    answer(anthropicBody({ calls: [{ id: "toolu_01", name: "json_answer", arguments: JSON.stringify({ colors: ["red", "green"] }) }] }));
    const completion = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "Two colors as JSON." }], response_format: { type: "json_object" } });
    expect(sent().tools).toEqual([{ name: "json_answer", description: expect.any(String), input_schema: { type: "object" } }]);
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ colors: ["red", "green"] });
    expect(completion.choices[0]!.message.tool_calls).toBeUndefined();
    expect(completion.choices[0]!.finish_reason).toBe("stop");
  });
});

describe("structured output: Anthropic clients, OpenAI upstreams", () => {
  test("messages.parse with output_config.format: the upstream gets response_format (strict), the SDK parsed_output", async () => {
    answer(openaiBody({ text: JSON.stringify(PARIS) }));
    const format = jsonSchemaOutputFormat(weather);
    const message = await anthropic.messages.parse({ model: OPENAI_MODEL, max_tokens: 500, messages: ask, output_config: { format } });
    expect(sent().response_format).toEqual({ type: "json_schema", json_schema: { name: "output", schema: format.schema, strict: true } });
    expect(sent().output_config).toBeUndefined();
    expect(message.content).toEqual([expect.objectContaining({ type: "text", text: JSON.stringify(PARIS) })]);
    expect(message.parsed_output).toEqual(PARIS);
  });

  test("a schema with an optional property goes as strict: false (OpenAI refuses it strict), streamed", async () => {
    const optional = { ...weather, required: ["city"] };
    answer(openaiStream({ text: '{"city":"Paris"}' }));
    const final = await anthropic.messages.stream({ model: OPENAI_MODEL, max_tokens: 500, messages: ask, output_config: { format: { type: "json_schema", schema: optional } } }).finalMessage();
    expect(sent().response_format.json_schema).toEqual({ name: "output", schema: optional, strict: false });
    expect(final.content).toEqual([expect.objectContaining({ type: "text", text: '{"city":"Paris"}' })]);
  });
});

describe.each([
  ["an OpenAI upstream", OPENAI_MODEL, "openai"],
  ["an Anthropic upstream", ANTHROPIC_MODEL, "anthropic"],
] as const)("structured output through the Responses API, %s", (_name, model, vendor) => {
  test("responses.parse with text.format json_schema: output_parsed", async () => {
    answer(vendor === "openai" ? openaiBody({ text: JSON.stringify(PARIS) }) : anthropicBody({ text: JSON.stringify(PARIS) }));
    const response = await openai.responses.parse({ model, input: "Weather in Paris, as JSON?", text: { format: { type: "json_schema", name: "weather", schema: weather, strict: true } } });
    if (vendor === "openai") expect(sent().response_format).toEqual({ type: "json_schema", json_schema: { name: "weather", schema: weather, strict: true } });
    else expect(sent().output_config).toEqual({ format: { type: "json_schema", schema: weather } });
    expect(response.output_parsed).toEqual(PARIS);
    expect(response.text?.format).toMatchObject({ type: "json_schema", name: "weather" });
  });

  test("text.format json_object, streamed: the JSON is the output text", async () => {
    const json = JSON.stringify({ colors: ["red"] });
    answer(vendor === "openai" ? openaiStream({ text: json }) : anthropicStream({ calls: [{ id: "toolu_01", name: "json_answer", arguments: json }] }));
    const stream = openai.responses.stream({ model, input: "A color as JSON.", text: { format: { type: "json_object" } } });
    const final = await stream.finalResponse();
    if (vendor === "openai") expect(sent().response_format).toEqual({ type: "json_object" });
    else expect(sent().tool_choice).toEqual({ type: "tool", name: "json_answer" });
    expect(final.output.map((o) => o.type)).toEqual(["message"]);
    expect(final.output_text).toBe(json);
  });
});

describe("reasoning controls: OpenAI effort → Anthropic thinking", () => {
  test.each([
    ["low", 1024],
    ["medium", 4096],
    ["high", 6144], // 16,384 by the table, at most ¾ of the 8,192 max_tokens
  ] as const)("reasoning_effort %s → a thinking budget of %i; the temperature Anthropic refuses with thinking is left out", async (effort, budget) => {
    answer(anthropicBody({ reasoning: "Paris, in spring.", text: "18°C." }));
    const completion = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: ask, reasoning_effort: effort, temperature: 0.2 });
    expect(sent().thinking).toEqual({ type: "enabled", budget_tokens: budget });
    expect(sent().max_tokens).toBe(8192);
    expect(sent().temperature).toBeUndefined();
    expect(completion.choices[0]!.message.content).toBe("18°C.");
  });

  test("an adaptive-thinking model gets adaptive thinking and the effort", async () => {
    answer(anthropicBody({ text: "18°C." }));
    await openai.chat.completions.create({ model: OPUS, messages: ask, reasoning_effort: "high" });
    expect(sent().thinking).toEqual({ type: "adaptive" });
    expect(sent().output_config).toEqual({ effort: "high" });
  });

  test("Responses reasoning.effort: a budget for Claude, reasoning_effort for a reasoning model, nothing for gpt-4o-mini", async () => {
    answer(anthropicBody({ text: "18°C." }));
    await openai.responses.create({ model: ANTHROPIC_MODEL, input: "Weather?", reasoning: { effort: "medium" } });
    expect(sent().thinking).toEqual({ type: "enabled", budget_tokens: 4096 });
    answer(openaiBody({ text: "18°C." }));
    await openai.responses.create({ model: O4, input: "Weather?", reasoning: { effort: "medium" } });
    expect(sent().reasoning_effort).toBe("medium");
    answer(openaiBody({ text: "18°C." }));
    await openai.responses.create({ model: OPENAI_MODEL, input: "Weather?", reasoning: { effort: "medium" } });
    expect(sent().reasoning_effort).toBeUndefined();
  });

  test("a tool loop with reasoning_effort: the step after the tool results goes without thinking (Anthropic would want a signed block)", async () => {
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    answer(anthropicBody({ reasoning: "Call the tool.", calls: [{ id: "toolu_01", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const first = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: ask, tools, reasoning_effort: "low" });
    expect(sent().thinking).toEqual({ type: "enabled", budget_tokens: 1024 });
    const call = first.choices[0]!.message.tool_calls![0]!;
    answer(anthropicBody({ text: "18°C in Paris." }));
    const second = await openai.chat.completions.create({
      model: ANTHROPIC_MODEL,
      messages: [...ask, first.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "18°C" }],
      tools,
      reasoning_effort: "low",
    });
    expect(sent().thinking).toBeUndefined();
    expect(second.choices[0]!.message.content).toBe("18°C in Paris.");
  });

  test("an Anthropic client's tool loop whose call another vendor's model made (a fallback, a /model switch): that step goes without thinking, the next with its own", async () => {
    const tools = [{ name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }];
    // Turn 1 came from an OpenAI-kind model: a tool call with no thinking block before it.
    const fromOther: Anthropic.MessageParam = { role: "assistant", content: [{ type: "tool_use", id: "toolu_other1", name: "get_weather", input: { city: "Paris" } }] };
    const results: Anthropic.MessageParam = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_other1", content: "18°C" }] };
    answer(anthropicBody({ text: "18°C in Paris." }));
    const message = await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 3000, tools, thinking: { type: "enabled", budget_tokens: 1024 }, messages: [...ask, fromOther, results] });
    expect(sent().thinking).toBeUndefined();
    expect(message.content).toEqual([expect.objectContaining({ type: "text", text: "18°C in Paris." })]);
    // A call Claude made after its signed thinking keeps thinking on.
    const own: Anthropic.MessageParam = { role: "assistant", content: [{ type: "thinking", thinking: "Call the tool.", signature: SCRIPTED_SIGNATURE }, { type: "tool_use", id: "toolu_own1", name: "get_weather", input: { city: "Rome" } }] };
    answer(anthropicBody({ text: "20°C in Rome." }));
    await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 3000, tools, thinking: { type: "enabled", budget_tokens: 1024 }, messages: [...ask, own, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_own1", content: "20°C" }] }] });
    expect(sent().thinking).toEqual({ type: "enabled", budget_tokens: 1024 });
  });
});

describe("reasoning controls: Anthropic thinking → OpenAI effort", () => {
  test("a budget → reasoning_effort by the table; thinking blocks in the history stay behind", async () => {
    answer(openaiBody({ text: "18°C." }));
    await anthropic.messages.create({
      model: O4,
      max_tokens: 12_000,
      thinking: { type: "enabled", budget_tokens: 10_000 },
      messages: [
        { role: "user", content: "Weather in Rome?" },
        { role: "assistant", content: [{ type: "thinking", thinking: "Rome.", signature: SCRIPTED_SIGNATURE }, { type: "text", text: "20°C." }] },
        ...ask,
      ],
    });
    expect(sent().reasoning_effort).toBe("medium");
    expect(sent().thinking).toBeUndefined();
    expect(upstream.requests.at(-1)!.rawBody).not.toContain(SCRIPTED_SIGNATURE);
    expect(sent().messages.map((m: any) => m.content)).toEqual(["Weather in Rome?", "20°C.", ask[0]!.content]);
  });

  test("Claude Code's adaptive thinking and effort → reasoning_effort; a model that does not reason gets none", async () => {
    answer(openaiBody({ text: "18°C." }));
    await anthropic.messages.create({ model: O4, max_tokens: 1000, thinking: { type: "adaptive" }, output_config: { effort: "low" }, messages: ask });
    expect(sent().reasoning_effort).toBe("low");
    answer(openaiBody({ text: "18°C." }));
    const message = await anthropic.messages.create({ model: OPENAI_MODEL, max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: ask });
    expect(sent().reasoning_effort).toBeUndefined();
    expect(message.content).toEqual([expect.objectContaining({ type: "text", text: "18°C." })]);
  });
});

describe("thinking in answers", () => {
  const thinking = "The user asks about Paris. Spring, so mild: about 18°C.";

  test("an Anthropic upstream's thinking streams to an OpenAI client as reasoning_content deltas, with its token count", async () => {
    answer(anthropicStream({ reasoning: thinking, text: "18°C.", usage: { input: 40, output: 30, reasoning: 21 } }));
    const stream = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: ask, stream: true, stream_options: { include_usage: true }, reasoning_effort: "low" });
    let reasoning = "";
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    let reasoningChunks = 0;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      if (delta?.reasoning_content) {
        reasoning += delta.reasoning_content;
        reasoningChunks++;
      }
      text += delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(reasoning).toBe(thinking);
    expect(reasoningChunks).toBeGreaterThan(1);
    expect(text).toBe("18°C.");
    expect(usage).toMatchObject({ prompt_tokens: 40, completion_tokens: 30, completion_tokens_details: { reasoning_tokens: 21 } });
  });

  test("a whole body: reasoning_content, and reasoning tokens estimated from the thinking when Anthropic does not count them", async () => {
    answer(anthropicBody({ reasoning: thinking, text: "18°C.", usage: { input: 40, output: 30 } }));
    const completion = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: ask });
    const message = completion.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
    expect(message.reasoning_content).toBe(thinking);
    expect(message.content).toBe("18°C.");
    expect(completion.usage!.completion_tokens).toBe(30);
    const estimated = completion.usage!.completion_tokens_details!.reasoning_tokens!;
    expect(estimated).toBeGreaterThan(8);
    expect(estimated).toBeLessThan(30);
  });

  test("an OpenAI client gets no reasoning count when nothing was thought", async () => {
    answer(anthropicBody({ text: "18°C.", usage: { input: 40, output: 3 } }));
    const completion = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, messages: ask });
    expect(completion.usage!.completion_tokens_details).toEqual({ reasoning_tokens: 0 });
  });

  test("a Responses client gets a reasoning item and output_tokens_details.reasoning_tokens, streamed (estimated, from Anthropic) and whole (reported, in DeepSeek's reasoning_content dialect)", async () => {
    answer(anthropicStream({ reasoning: thinking, text: "18°C.", usage: { input: 40, output: 30 } }));
    const stream = openai.responses.stream({ model: ANTHROPIC_MODEL, input: "Weather in Paris?", reasoning: { effort: "low" } });
    let reasoning = "";
    stream.on("response.reasoning_text.delta", (e) => (reasoning += e.delta));
    const final = await stream.finalResponse();
    expect(reasoning).toBe(thinking);
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(final.output[0]).toMatchObject({ type: "reasoning", content: [{ type: "reasoning_text", text: thinking }] });
    expect(final.usage!.output_tokens).toBe(30);
    expect(final.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(8);
    expect(final.usage!.output_tokens_details.reasoning_tokens).toBeLessThan(30);

    answer(deepseekBody({ reasoning: thinking, text: "18°C.", usage: { input: 40, output: 300, reasoning: 270 } }));
    const whole = await openai.responses.create({ model: O4, input: "Weather in Paris?", reasoning: { effort: "high" } });
    expect(whole.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(whole.usage).toMatchObject({ output_tokens: 300, output_tokens_details: { reasoning_tokens: 270 } });
  });

  test("reasoning_content from an OpenAI-kind upstream (DeepSeek's dialect) reaches an Anthropic client as a thinking block, with the count", async () => {
    answer(deepseekStream({ reasoning: thinking, text: "18°C.", usage: { input: 40, output: 300, reasoning: 270 } }));
    const final = await anthropic.messages.stream({ model: O4, max_tokens: 2000, thinking: { type: "enabled", budget_tokens: 1024 }, messages: ask }).finalMessage();
    expect(sent().reasoning_effort).toBe("low");
    expect(final.content).toEqual([expect.objectContaining({ type: "thinking", thinking, signature: "" }), expect.objectContaining({ type: "text", text: "18°C." })]);
    expect(final.usage).toMatchObject({ output_tokens: 300, output_tokens_details: { thinking_tokens: 270 } });
  });

  test("an Anthropic upstream's signature survives for an Anthropic client: relayed stream, and a body the gateway writes itself", async () => {
    answer(anthropicStream({ reasoning: thinking, text: "18°C." }));
    const streamed = await anthropic.messages.stream({ model: ANTHROPIC_MODEL, max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: ask }).finalMessage();
    expect(streamed.content[0]).toEqual(expect.objectContaining({ type: "thinking", thinking, signature: SCRIPTED_SIGNATURE }));

    // No usage in the body: the gateway counts it and writes the answer from the events.
    answer(anthropicBody({ reasoning: thinking, text: "18°C.", noUsage: true }));
    const whole = await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: ask });
    expect(whole.content).toEqual([{ type: "thinking", thinking, signature: SCRIPTED_SIGNATURE }, { type: "text", text: "18°C." }] as Anthropic.ContentBlock[]);
    expect(whole.usage.output_tokens).toBeGreaterThan(0);

    // Sent back in the next turn, it reaches Anthropic as it was.
    answer(anthropicBody({ text: "Yes." }));
    await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: [...ask, { role: "assistant", content: whole.content }, { role: "user", content: "Sure?" }] });
    expect(sent().messages[1].content[0]).toEqual({ type: "thinking", thinking, signature: SCRIPTED_SIGNATURE });
  });
});

describe("billing counts reasoning once", () => {
  test("an answer with 100 output tokens, 60 of them thinking, is charged 100 output tokens", async () => {
    answer(anthropicStream({ reasoning: "Think about Paris in spring.", text: "18°C.", usage: { input: 50, output: 100, reasoning: 60 } }));
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: ask, stream: true, stream_options: { include_usage: true }, reasoning_effort: "medium" });
    const chunks = sseFrames(await res.text()).filter((f) => f.data.startsWith("{")).map((f) => JSON.parse(f.data));
    expect(chunks.at(-1).usage).toEqual({ prompt_tokens: 50, completion_tokens: 100, total_tokens: 150, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 60 } });
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    try {
      const record = db.query<{ prompt_tokens: number; completion_tokens: number; cost_micro: number }, []>("SELECT prompt_tokens, completion_tokens, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
      expect(record).toEqual({ prompt_tokens: 50, completion_tokens: 100, cost_micro: answerCostMicro(pricing, 50, 100, 0) });
    } finally {
      db.close();
    }
  });
});
