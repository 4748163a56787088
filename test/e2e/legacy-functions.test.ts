/**
 * OpenAI's legacy function calling (`functions`, `function_call`, `role: "function"`): an OpenAI
 * upstream gets it as sent; an Anthropic one gets tools, and the client gets its call back as
 * `message.function_call` / `delta.function_call` with finish reason `function_call`.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { scriptedReply } from "../helpers/scripted-answers.ts";
import { withToolsForLegacyFunctions } from "../../src/formats/openai-chat/legacy-functions.ts";
import type { ChatRequest } from "../../src/formats/openai-chat/schema.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));

const weather = { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };
const call = { id: "toolu_01Legacy0000000000000000", name: "get_weather", arguments: '{"city":"Paris"}' };
const ask = [{ role: "user", content: "Weather in Paris?" }];

describe("legacy functions to an Anthropic upstream", () => {
  test("go as tools, one call at a time; function_call names the forced tool", async () => {
    upstream.reply(scriptedReply("anthropic", { calls: [call] }));
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: ask, functions: [weather], function_call: { name: "get_weather" } });
    expect(res.status).toBe(200);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([{ name: "get_weather", description: "The weather in a city", input_schema: weather.parameters }]);
    expect(sent.tool_choice).toEqual({ type: "tool", name: "get_weather", disable_parallel_tool_use: true });
    expect(sent.functions).toBeUndefined();
    expect(sent.function_call).toBeUndefined();
  });

  test("a whole answer's call comes back as message.function_call, finish reason function_call", async () => {
    upstream.reply(scriptedReply("anthropic", { calls: [call] }));
    const body = (await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: ask, functions: [weather] })).json()) as any;
    const choice = body.choices[0];
    expect(choice.finish_reason).toBe("function_call");
    expect(choice.message.function_call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(choice.message.tool_calls).toBeUndefined();
    expect(choice.message.content).toBeNull();
  });

  test("a streamed call comes as delta.function_call (name first, then arguments), and the openai SDK assembles it", async () => {
    upstream.reply(scriptedReply("anthropic", { calls: [call] }));
    const frames = sseFrames(await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: ask, functions: [weather], stream: true })).text());
    const deltas = frames.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices[0]);
    const calls = deltas.filter((c) => c.delta.function_call).map((c) => c.delta.function_call);
    expect(calls[0].name).toBe("get_weather");
    expect(calls.slice(1).every((c) => c.name === undefined)).toBe(true);
    expect(calls.map((c) => c.arguments).join("")).toBe('{"city":"Paris"}');
    expect(deltas.some((c) => c.delta.tool_calls)).toBe(false);
    expect(deltas.at(-1)!.finish_reason).toBe("function_call");

    upstream.reply(scriptedReply("anthropic", { calls: [call] }));
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const stream = sdk.chat.completions.stream({ model: ANTHROPIC_MODEL, messages: ask as never, functions: [weather] } as never);
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]!.message.function_call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(final.choices[0]!.finish_reason).toBe("function_call");
  });

  test("a conversation with a legacy call and its function result goes as tool_use and tool_result that match", async () => {
    upstream.reply(scriptedReply("anthropic", { text: "It is sunny in Paris." }));
    const res = await post(gw, "/v1/chat/completions", {
      model: ANTHROPIC_MODEL,
      functions: [weather],
      messages: [...ask, { role: "assistant", content: null, function_call: { name: "get_weather", arguments: '{"city":"Paris"}' } }, { role: "function", name: "get_weather", content: "sunny, 21 °C" }],
    });
    // The fake refuses a tool_result without its tool_use right before, as Anthropic does.
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toBe("It is sunny in Paris.");
    const messages = upstream.requests.at(-1)!.body.messages;
    const use = messages[1].content.find((b: { type: string }) => b.type === "tool_use");
    const result = messages[2].content.find((b: { type: string }) => b.type === "tool_result");
    expect(use).toMatchObject({ name: "get_weather", input: { city: "Paris" } });
    expect(result).toMatchObject({ tool_use_id: use.id, content: "sunny, 21 °C" });
  });
});

describe("legacy functions to an OpenAI upstream", () => {
  test("go as sent, and the vendor's function_call reaches the client, whole and streamed", async () => {
    const vendorBody = {
      id: "chatcmpl-up", object: "chat.completion", created: 1700000000, model: "gpt-4o-mini",
      choices: [{ index: 0, message: { role: "assistant", content: null, function_call: { name: "get_weather", arguments: '{"city":"Paris"}' } }, logprobs: null, finish_reason: "function_call" }],
    };
    // Without usage, so the gateway writes the answer anew from its events: the call must survive that too.
    upstream.reply({ kind: "json", body: vendorBody });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, functions: [weather], function_call: "auto" });
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.functions).toEqual([weather]);
    expect(sent.function_call).toBe("auto");
    expect(sent.tools).toBeUndefined();
    const choice = ((await res.json()) as any).choices[0];
    expect(choice.message.function_call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(choice.finish_reason).toBe("function_call");

    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1700000000, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      chunk({ role: "assistant", content: null, function_call: { name: "get_weather", arguments: "" } }),
      chunk({ function_call: { arguments: '{"city":' } }),
      chunk({ function_call: { arguments: '"Paris"}' } }),
      chunk({}, "function_call"),
      "data: [DONE]\n\n",
    ] });
    const frames = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, functions: [weather], stream: true })).text());
    const deltas = frames.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices[0]).filter(Boolean);
    expect(deltas.map((c) => c.delta.function_call?.arguments ?? "").join("")).toBe('{"city":"Paris"}');
    expect(deltas.at(-1)!.finish_reason).toBe("function_call");
  });
});

describe("withToolsForLegacyFunctions", () => {
  const base = { model: "m", messages: [{ role: "user", content: "hi" }] } as ChatRequest;

  test("a call nobody answered goes as nothing, a result without its call as the user's text (Anthropic refuses either as a tool block)", () => {
    const out = withToolsForLegacyFunctions({
      ...base,
      messages: [
        { role: "function", name: "lookup", content: "context injected by the app" },
        { role: "user", content: "hi" },
        { role: "assistant", content: null, function_call: { name: "a", arguments: "{}" } },
        { role: "user", content: "never mind" },
        { role: "assistant", content: "Thinking aloud.", function_call: { name: "b", arguments: "{}" } },
        { role: "user", content: "go on" },
        // A result after a user turn no longer answers the call before it (Anthropic wants it right after).
        { role: "function", name: "b", content: "late" },
      ],
    } as unknown as ChatRequest);
    expect(out.messages).toEqual([
      { role: "user", content: "lookup returned: context injected by the app" },
      { role: "user", content: "hi" },
      { role: "user", content: "never mind" },
      { role: "assistant", content: "Thinking aloud." },
      { role: "user", content: "go on" },
      { role: "user", content: "b returned: late" },
    ]);
  });


  test("the same object when nothing is legacy; tools the client sent win over functions", () => {
    expect(withToolsForLegacyFunctions(base)).toBe(base);
    const both = { ...base, tools: [{ type: "function", function: { name: "t" } }], functions: [weather] } as ChatRequest;
    const out = withToolsForLegacyFunctions(both);
    expect(out.tools).toEqual(both.tools);
    expect(out.parallel_tool_calls).toBeUndefined();
    expect((out as Record<string, unknown>).functions).toBeUndefined();
  });

  test("function_call none / auto / a name become tool_choice; a tool_choice the client sent stays", () => {
    const choiceOf = (function_call: unknown, extra: object = {}) => withToolsForLegacyFunctions({ ...base, functions: [weather], function_call, ...extra } as ChatRequest).tool_choice;
    expect(choiceOf("none")).toBe("none");
    expect(choiceOf("auto")).toBe("auto");
    expect(choiceOf({ name: "get_weather" })).toEqual({ type: "function", function: { name: "get_weather" } });
    expect(choiceOf("auto", { tool_choice: "required" })).toBe("required");
  });

  test("each function result answers the latest open call of its name, whatever the order", () => {
    const out = withToolsForLegacyFunctions({
      ...base,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: null, function_call: { name: "a", arguments: "{}" } },
        { role: "function", name: "a", content: "A1" },
        { role: "assistant", content: null, function_call: { name: "b", arguments: "{}" } },
        { role: "function", name: "b", content: "B1" },
      ],
    } as unknown as ChatRequest);
    const ids = out.messages.map((m) => m.tool_calls?.[0]?.id ?? m.tool_call_id);
    expect(out.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "tool"]);
    expect(ids[1]).toBe(ids[2]);
    expect(ids[3]).toBe(ids[4]);
    expect(ids[1]).not.toBe(ids[3]);
    expect((out.messages[1] as Record<string, unknown>).function_call).toBeUndefined();
    expect((out.messages[2] as Record<string, unknown>).name).toBeUndefined();
  });
});
