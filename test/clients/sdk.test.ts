import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream, withoutCacheMarks } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(() => {
  // Exactly what users do: change the base URL and the key, nothing else.
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
});

const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: "function", function: { name: "get_weather", description: "Weather by city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
];

describe.each([
  ["OpenAI upstream", OPENAI_MODEL],
  ["Anthropic upstream", ANTHROPIC_MODEL],
])("openai SDK against an %s", (_name, model) => {
  test("chat.completions.create", async () => {
    const completion = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "Hello SDK" }] });
    expect(completion.choices[0]!.message.content).toBe("Echo: Hello SDK");
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(completion.model).toBe(model);
    expect(completion.usage!.completion_tokens).toBe(3);
  });

  test("streaming with usage", async () => {
    const stream = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "Hello SDK" }], stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("Echo: Hello SDK");
    expect(usage!.completion_tokens).toBe(3);
  });

  test("models.list", async () => {
    const ids: string[] = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    expect(ids).toContain(model);
  });

  test("errors surface as typed SDK errors", async () => {
    const err = await openai.chat.completions.create({ model: "no/such-model", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const bad = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: "svc-sk-not-a-real-key-000000000000000000000", maxRetries: 0 });
    expect(await bad.models.list().catch((e) => e)).toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

describe.each([
  ["OpenAI upstream", OPENAI_MODEL],
  ["Anthropic upstream", ANTHROPIC_MODEL],
])("@anthropic-ai/sdk against an %s", (_name, model) => {
  test("messages.create", async () => {
    const message = await anthropic.messages.create({ model, max_tokens: 100, messages: [{ role: "user", content: "Hello SDK" }] });
    expect(message.content).toEqual([{ type: "text", text: "Echo: Hello SDK" } as Anthropic.TextBlock]);
    expect(message.stop_reason).toBe("end_turn");
    expect(message.usage.output_tokens).toBe(3);
  });

  test("messages.stream → finalMessage", async () => {
    const stream = anthropic.messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content: "Hello SDK" }] });
    let text = "";
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(text).toBe("Echo: Hello SDK");
    expect(final.content).toEqual([{ type: "text", text: "Echo: Hello SDK", citations: null } as Anthropic.TextBlock].map((b) => expect.objectContaining({ type: b.type, text: b.text })));
    expect(final.stop_reason).toBe("end_turn");
    expect(final.usage.output_tokens).toBe(3);
    expect(final.usage.input_tokens).toBeGreaterThan(0);
  });

  test("create with stream: true", async () => {
    const stream = await anthropic.messages.create({ model, max_tokens: 100, messages: [{ role: "user", content: "Hello SDK" }], stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types[0]).toBe("message_start");
    expect(types.at(-1)).toBe("message_stop");
  });

  test("errors surface as typed SDK errors", async () => {
    const err = await anthropic.messages.create({ model: "no/such-model", max_tokens: 5, messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
  });
});

describe("tool loops through the SDKs, across formats", () => {
  test("openai SDK, Anthropic upstream: streamed tool call, then the tool result goes back translated", async () => {
    upstream.reply({ kind: "fixture", name: "anthropic-tools.sse", split: "frames" });
    const stream = openai.chat.completions.stream({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "Weather in Paris?" }], tools });
    const completion = await stream.finalChatCompletion();
    const call = completion.choices[0]!.message.tool_calls![0]!;
    expect(completion.choices[0]!.finish_reason).toBe("tool_calls");
    expect(call.type === "function" && call.function.name).toBe("get_weather");
    expect(call.type === "function" && JSON.parse(call.function.arguments)).toEqual({ city: "Paris" });

    await openai.chat.completions.create({
      model: ANTHROPIC_MODEL,
      tools,
      messages: [{ role: "user", content: "Weather in Paris?" }, completion.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "18°C and sunny" }],
    });
    const sent = withoutCacheMarks(upstream.requests.at(-1)!.body);
    expect(sent.messages[1].content).toContainEqual(expect.objectContaining({ type: "tool_use", id: call.id, name: "get_weather", input: { city: "Paris" } }));
    expect(sent.messages[2]).toEqual({ role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18°C and sunny" }] });
    expect(sent.tools[0]).toMatchObject({ name: "get_weather", input_schema: { type: "object" } });
  });

  test("anthropic SDK, OpenAI upstream: streamed tool_use, then tool_result goes back translated", async () => {
    upstream.reply({ kind: "fixture", name: "openai-tools.sse", split: "bytes" });
    const anthropicTools: Anthropic.Tool[] = [{ name: "get_weather", description: "Weather by city", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
    const final = await anthropic.messages.stream({ model: OPENAI_MODEL, max_tokens: 200, tools: anthropicTools, messages: [{ role: "user", content: "Weather in Paris?" }] }).finalMessage();
    const toolUse = final.content.find((b) => b.type === "tool_use") as Anthropic.ToolUseBlock;
    expect(final.stop_reason).toBe("tool_use");
    expect(toolUse.name).toBe("get_weather");
    expect(toolUse.input).toEqual({ city: "Paris" });

    await anthropic.messages.create({
      model: OPENAI_MODEL,
      max_tokens: 200,
      tools: anthropicTools,
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: final.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: toolUse.id, content: "18°C" }] },
      ],
    });
    const sent = withoutCacheMarks(upstream.requests.at(-1)!.body);
    expect(sent.messages[1].tool_calls[0]).toEqual({ id: toolUse.id, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } });
    expect(sent.messages[2]).toEqual({ role: "tool", tool_call_id: toolUse.id, content: "18°C" });
    expect(sent.tools[0]).toEqual({ type: "function", function: { name: "get_weather", description: "Weather by city", parameters: anthropicTools[0]!.input_schema } });
  });
});
