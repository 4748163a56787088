/**
 * The Vercel AI SDK 7 through the gateway, as its users write it (only the base URL and the key
 * change), against both upstream kinds: the default `openai()` provider (the Responses API),
 * `openai.chat()`, `@ai-sdk/anthropic` and `@ai-sdk/openai-compatible`. Each call is checked for
 * what a user relies on (text, streamed text, tool arguments, objects, usage equal to what the
 * upstream reported, the charge) and for what the upstream received, in its own format. The
 * fake upstream speaks each vendor's wire bytes; scripted answers say what the model says.
 * `openai()` runs as users leave it, with its default `store` (the gateway keeps answers so the
 * SDK's references to them resolve), and with `store: false`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createOpenAI, type OpenAIProvider } from "@ai-sdk/openai";
import { createAnthropic, type AnthropicProvider } from "@ai-sdk/anthropic";
import { createOpenAICompatible, type OpenAICompatibleProvider } from "@ai-sdk/openai-compatible";
import { APICallError, generateObject, generateText, Output, stepCountIs, streamText, tool, type LanguageModel } from "ai";
import { z } from "zod";
import { useFakeUpstream, vendorRefusal, withoutCacheMarks } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, ANTHROPIC_PRICING, OPENAI_MODEL, OPENAI_PRICING } from "../helpers/gateway.ts";
import { reasoningDialect, scriptedReply, type Script } from "../helpers/scripted-answers.ts";
import { recordingResponseStore } from "../helpers/recording-response-store.ts";
import { answerCostMicro as tokenCostMicro } from "../../src/billing/pricing.ts";

const upstream = useFakeUpstream();
const stored = recordingResponseStore();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, responseStore: stored.store }));

let openai: OpenAIProvider;
/** openai() as users make it, with a fetch that notes what the SDK sent the gateway (to see its item references). */
let watched: OpenAIProvider;
const sentToGateway: any[] = [];
let anthropic: AnthropicProvider;
let compatible: OpenAICompatibleProvider;
let warnings: typeof globalThis.AI_SDK_LOG_WARNINGS;

beforeAll(() => {
  // Exactly what users do: the base URL and the key, nothing else.
  openai = createOpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key });
  watched = createOpenAI({
    baseURL: `${gw.url}/v1`,
    apiKey: gw.key,
    fetch: (async (url: string | URL | Request, init?: RequestInit) => {
      if (typeof init?.body === "string") sentToGateway.push(JSON.parse(init.body));
      return fetch(url, init);
    }) as typeof fetch,
  });
  anthropic = createAnthropic({ baseURL: `${gw.url}/v1`, apiKey: gw.key });
  compatible = createOpenAICompatible({ name: "switchyard", baseURL: `${gw.url}/v1`, apiKey: gw.key, includeUsage: true });
  // The SDK prints a warning for generateObject (deprecated in 7) and for model ids it does not know.
  warnings = globalThis.AI_SDK_LOG_WARNINGS;
  globalThis.AI_SDK_LOG_WARNINGS = false;
});
afterAll(() => {
  globalThis.AI_SDK_LOG_WARNINGS = warnings;
});

type Vendor = "openai" | "anthropic";
type CallOptions = Parameters<typeof generateText>[0]["providerOptions"];

interface Client {
  name: string;
  model: (id: string) => LanguageModel;
  /** Options every call of this client is made with; none is needed through the gateway. */
  providerOptions?: CallOptions;
}

const CLIENTS: Client[] = [
  // The default: `store` true, so tool loops and chats refer to earlier answers by id.
  { name: "openai() (Responses API)", model: (id) => openai(id) },
  { name: "openai() with store: false", model: (id) => openai(id), providerOptions: { openai: { store: false } } },
  { name: "openai.chat()", model: (id) => openai.chat(id) },
  { name: "@ai-sdk/anthropic", model: (id) => anthropic(id) },
  { name: "@ai-sdk/openai-compatible", model: (id) => compatible(id) },
];

const PRICING: Record<string, typeof OPENAI_PRICING> = { [OPENAI_MODEL]: OPENAI_PRICING, [ANTHROPIC_MODEL]: ANTHROPIC_PRICING };

/** The usage record behind an answer: `resp_<id>`, `chatcmpl-<id>` and `msg_<id>` are all `req_<id>`. */
function usageRecord(answerId: string) {
  const requestId = `req_${answerId.replace(/^(?:resp_|chatcmpl-|msg_)/, "")}`;
  return gw.db
    .query<{ status: string; prompt_tokens: number; completion_tokens: number; estimated: number; cost_micro: number }, [string]>(
      "SELECT status, prompt_tokens, completion_tokens, estimated, cost_micro FROM usage_records WHERE request_id = ?",
    )
    .get(requestId);
}

/** Each answer recorded with the upstream's own counts and its price, and the balance down by exactly their sum. */
async function expectCharged(model: string, balanceBefore: number, answers: { id: string | undefined; input: number; output: number }[]) {
  let total = 0;
  const after = await gw.balanceMicro();
  for (const a of answers) {
    const cost = tokenCostMicro(PRICING[model], a.input, a.output);
    expect(a.id).toBeString();
    expect(usageRecord(a.id!)).toEqual({ status: "ok", prompt_tokens: a.input, completion_tokens: a.output, estimated: 0, cost_micro: cost });
    total += cost;
  }
  expect(total).toBeGreaterThan(0);
  expect(balanceBefore - after).toBe(total);
}

/**
 * Seconds on the wire, read as such: not milliseconds (thousands of years ahead), not zero. Same-format
 * answers keep the upstream's `created`, which the scripted answers fix in the past.
 */
function expectSaneTimestamp(timestamp: Date) {
  expect(timestamp.getTime()).toBeGreaterThan(Date.UTC(2025, 0, 1));
  expect(timestamp.getTime()).toBeLessThan(Date.now() + 60_000);
}

/** Text of a message content or tool result in either vendor's shape: a string, or text parts/blocks. */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (typeof p?.text === "string" ? p.text : "")).join("");
  return "";
}

/** The system prompt as the upstream received it: OpenAI system messages, Anthropic's `system`. */
function systemSent(vendor: Vendor, body: any): string {
  if (vendor === "anthropic") return textOf(body.system);
  return body.messages.filter((m: any) => m.role === "system" || m.role === "developer").map((m: any) => textOf(m.content)).join("\n");
}

const weatherInput = z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) });
const person = z.object({ name: z.string(), age: z.number() });

/** The ids of the item references in a Responses request the SDK sent. */
const references = (body: any): string[] => (body.input as any[]).filter((i) => i.type === "item_reference").map((i) => i.id);

/** The weather tool, noting each input it ran with. */
const weatherTool = (executed: unknown[] = []) => ({
  get_weather: tool({
    description: "Current weather for a city",
    inputSchema: weatherInput,
    execute: async (input) => {
      executed.push(input);
      return { temperature: 18, unit: input.unit, sky: "sunny" };
    },
  }),
});

describe.each([
  ["OpenAI", OPENAI_MODEL, "openai" as const],
  ["Anthropic", ANTHROPIC_MODEL, "anthropic" as const],
])("AI SDK against an %s upstream", (_name, modelId, vendor) => {
  describe.each(CLIENTS.map((c) => [c.name, c] as const))("%s", (_client, client) => {
    const providerOptions = client.providerOptions;

    test("generateText: the text, the upstream's usage, the finish reason, the system prompt in the upstream's place, and the charge", async () => {
      const script: Script = { text: "Paris is the capital of France.", usage: { input: 31, output: 9 } };
      upstream.reply(scriptedReply(vendor, script));
      const before = await gw.balanceMicro();
      const result = await generateText({ model: client.model(modelId), system: "Answer in one sentence.", prompt: "What is the capital of France?", maxRetries: 0, providerOptions });
      expect(result.text).toBe(script.text!);
      expect(result.finishReason).toBe("stop");
      expect(result.usage).toMatchObject({ inputTokens: 31, outputTokens: 9, totalTokens: 40 });
      // The answer names the model the client asked for, and when it was made.
      expect(result.response.modelId).toBe(modelId);
      expectSaneTimestamp(result.response.timestamp);

      const sent = upstream.requests[0]!;
      expect(sent.path).toBe(vendor === "openai" ? "/v1/chat/completions" : "/v1/messages");
      expect(sent.body.stream).not.toBe(true);
      expect(systemSent(vendor, sent.body)).toBe("Answer in one sentence.");
      expect(textOf(sent.body.messages.at(-1).content)).toBe("What is the capital of France?");
      await expectCharged(modelId, before, [{ id: result.response.id, input: 31, output: 9 }]);
    });

    test("streamText: the text stream in order, the finish reason, the upstream's usage, and the charge", async () => {
      const script: Script = { text: "One, two, three, four, five.", usage: { input: 23, output: 11 } };
      upstream.reply(scriptedReply(vendor, script));
      const before = await gw.balanceMicro();
      const errors: unknown[] = [];
      const result = streamText({ model: client.model(modelId), prompt: "Count to five.", maxRetries: 0, providerOptions, onError: ({ error }) => void errors.push(error) });
      const chunks: string[] = [];
      for await (const chunk of result.textStream) chunks.push(chunk);
      expect(errors).toEqual([]);
      // The upstream sent the text in several deltas; they arrive as deltas, in order.
      expect(chunks.length).toBeGreaterThan(1);
      expect(chunks.join("")).toBe(script.text!);
      expect(await result.finishReason).toBe("stop");
      expect(await result.usage).toMatchObject({ inputTokens: 23, outputTokens: 11, totalTokens: 34 });
      const response = await result.response;
      expect(response.modelId).toBe(modelId);
      expectSaneTimestamp(response.timestamp);
      expect(upstream.requests[0]!.body.stream).toBe(true);
      await expectCharged(modelId, before, [{ id: response.id, input: 23, output: 11 }]);
    });

    describe.each([["generateText"], ["streamText"]])("a tool() call with %s", (mode) => {
      test("arrives with parsed arguments; its result goes back and reaches the upstream in the upstream's format", async () => {
        const callId = vendor === "openai" ? "call_Wth9Kq2LmN4pR7sT" : "toolu_01Wth9Kq2LmN4pR7sTxYz";
        upstream.reply(scriptedReply(vendor, { text: "Let me check.", calls: [{ id: callId, name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }], usage: { input: 41, output: 17 } }));
        upstream.reply(scriptedReply(vendor, { text: "It is 18°C and sunny in Paris.", usage: { input: 88, output: 12 } }));
        const before = await gw.balanceMicro();
        const executed: unknown[] = [];
        const tools = weatherTool(executed);
        const request = { model: client.model(modelId), prompt: "Weather in Paris?", tools, stopWhen: stepCountIs(2), maxRetries: 0, providerOptions };
        let steps;
        if (mode === "generateText") {
          const result = await generateText(request);
          expect(result.text).toBe("It is 18°C and sunny in Paris.");
          expect(result.totalUsage).toMatchObject({ inputTokens: 129, outputTokens: 29 });
          steps = result.steps;
        } else {
          const errors: unknown[] = [];
          const result = streamText({ ...request, onError: ({ error }) => void errors.push(error) });
          expect(await result.text).toBe("It is 18°C and sunny in Paris.");
          expect(errors).toEqual([]);
          expect(await result.totalUsage).toMatchObject({ inputTokens: 129, outputTokens: 29 });
          steps = await result.steps;
        }

        // The model's call, parsed against the tool's schema, ran once with the model's arguments.
        expect(executed).toEqual([{ city: "Paris", unit: "celsius" }]);
        expect(steps).toHaveLength(2);
        expect(steps[0]!.finishReason).toBe("tool-calls");
        expect(steps[0]!.text).toBe("Let me check.");
        expect(steps[0]!.toolCalls).toEqual([expect.objectContaining({ type: "tool-call", toolCallId: callId, toolName: "get_weather", input: { city: "Paris", unit: "celsius" } })]);
        expect(steps[0]!.usage).toMatchObject({ inputTokens: 41, outputTokens: 17 });
        expect(steps[1]!.finishReason).toBe("stop");
        expect(steps[1]!.usage).toMatchObject({ inputTokens: 88, outputTokens: 12 });

        // The tool was offered in the upstream's format…
        expect(upstream.requests).toHaveLength(2);
        const [first, second] = upstream.requests.map((r) => r.body);
        if (vendor === "openai") {
          expect(first.tools).toEqual([{ type: "function", function: expect.objectContaining({ name: "get_weather", description: "Current weather for a city", parameters: expect.objectContaining({ type: "object", required: ["city", "unit"] }) }) }]);
        } else {
          expect(first.tools).toEqual([expect.objectContaining({ name: "get_weather", description: "Current weather for a city", input_schema: expect.objectContaining({ type: "object", required: ["city", "unit"] }) })]);
        }
        // …and the second step carried the whole turn back: the text before the call, the call, its result.
        const [assistant, answer] = second.messages.slice(-2);
        if (vendor === "openai") {
          expect(assistant).toMatchObject({ role: "assistant", content: "Let me check.", tool_calls: [{ id: callId, type: "function", function: { name: "get_weather" } }] });
          expect(assistant.tool_calls).toHaveLength(1);
          expect(JSON.parse(assistant.tool_calls[0].function.arguments)).toEqual({ city: "Paris", unit: "celsius" });
          expect(answer).toMatchObject({ role: "tool", tool_call_id: callId });
          expect(JSON.parse(textOf(answer.content))).toEqual({ temperature: 18, unit: "celsius", sky: "sunny" });
        } else {
          expect(assistant.role).toBe("assistant");
          expect(assistant.content).toMatchObject([
            { type: "text", text: "Let me check." },
            { type: "tool_use", id: callId, name: "get_weather", input: { city: "Paris", unit: "celsius" } },
          ]);
          expect(answer.role).toBe("user");
          expect(answer.content).toMatchObject([{ type: "tool_result", tool_use_id: callId }]);
          expect(JSON.parse(textOf(answer.content[0].content))).toEqual({ temperature: 18, unit: "celsius", sky: "sunny" });
        }
        await expectCharged(modelId, before, [
          { id: steps[0]!.response.id, input: 41, output: 17 },
          { id: steps[1]!.response.id, input: 88, output: 12 },
        ]);
      });
    });
  });

  /** The person schema, as the upstream was asked for it: `response_format` (OpenAI) or `output_config.format` (Anthropic's own structured output, which Claude Sonnet 4.5 has). */
  function expectSchemaAsked(sent: any, name?: string) {
    const schema = expect.objectContaining({ type: "object", properties: { name: { type: "string" }, age: { type: "number" } }, required: ["name", "age"] });
    if (vendor === "openai") expect(sent.response_format).toEqual({ type: "json_schema", json_schema: expect.objectContaining({ ...(name ? { name } : {}), schema }) });
    else expect(sent.output_config?.format).toEqual(expect.objectContaining({ type: "json_schema", schema }));
  }

  describe.each([
    ["openai() (Responses API), text.format", () => openai(modelId), undefined],
    ["openai.chat(), response_format", () => openai.chat(modelId), undefined],
  ])("structured output through %s", (_client, model, providerOptions) => {
    test("generateObject: the object comes back parsed; the upstream was asked for the schema in its own words", async () => {
      upstream.reply(scriptedReply(vendor, { text: '{"name":"Ada Lovelace","age":36}', usage: { input: 52, output: 14 } }));
      const before = await gw.balanceMicro();
      const result = await generateObject({ model: model(), schema: person, prompt: "A famous mathematician.", maxRetries: 0, providerOptions });
      expect(result.object).toEqual({ name: "Ada Lovelace", age: 36 });
      expect(result.finishReason).toBe("stop");
      expect(result.usage).toMatchObject({ inputTokens: 52, outputTokens: 14 });
      expectSchemaAsked(upstream.requests[0]!.body, "response");
      await expectCharged(modelId, before, [{ id: result.response.id, input: 52, output: 14 }]);
    });

    test("streamText with Output.object (AI SDK 7's way): partial objects as the JSON streams in, then the whole object", async () => {
      upstream.reply(scriptedReply(vendor, { text: '{"name":"Ada Lovelace","age":36}', usage: { input: 52, output: 14 } }));
      const errors: unknown[] = [];
      const result = streamText({ model: model(), output: Output.object({ schema: person }), prompt: "A famous mathematician.", maxRetries: 0, providerOptions, onError: ({ error }) => void errors.push(error) });
      const partials: unknown[] = [];
      for await (const partial of result.partialOutputStream) partials.push(partial);
      expect(errors).toEqual([]);
      expect(partials.length).toBeGreaterThan(1);
      expect(partials.at(-1)).toEqual({ name: "Ada Lovelace", age: 36 });
      expect(await result.output).toEqual({ name: "Ada Lovelace", age: 36 });
      expect(await result.usage).toMatchObject({ inputTokens: 52, outputTokens: 14 });
      expectSchemaAsked(upstream.requests[0]!.body, "response");
    });
  });

  test("generateObject through @ai-sdk/anthropic's JSON tool: a forced tool call in the upstream's format, its input is the object", async () => {
    // For a model id it does not know, the Anthropic provider asks for the object as a forced `json` tool call.
    upstream.reply(scriptedReply(vendor, { calls: [{ id: vendor === "openai" ? "call_J50n0bj3ct" : "toolu_01J50n0bj3ct", name: "json", arguments: '{"name":"Ada Lovelace","age":36}' }], usage: { input: 60, output: 15 } }));
    const before = await gw.balanceMicro();
    const result = await generateObject({ model: anthropic(modelId), schema: person, prompt: "A famous mathematician.", maxRetries: 0 });
    expect(result.object).toEqual({ name: "Ada Lovelace", age: 36 });
    expect(result.usage).toMatchObject({ inputTokens: 60, outputTokens: 15 });
    const sent = upstream.requests[0]!.body;
    if (vendor === "openai") {
      expect(sent.tools).toEqual([{ type: "function", function: expect.objectContaining({ name: "json" }) }]);
      expect(sent.tool_choice).toBe("required");
      expect(sent.parallel_tool_calls).toBe(false);
    } else {
      expect(sent.tools).toEqual([expect.objectContaining({ name: "json" })]);
      expect(sent.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
    }
    await expectCharged(modelId, before, [{ id: result.response.id, input: 60, output: 15 }]);
  });

  test("generateObject through @ai-sdk/anthropic's output_config.format: the object comes back parsed; the upstream was asked for the schema in its own words", async () => {
    upstream.reply(scriptedReply(vendor, { text: '{"name":"Ada Lovelace","age":36}', usage: { input: 47, output: 13 } }));
    const before = await gw.balanceMicro();
    const result = await generateObject({
      model: anthropic(modelId),
      schema: person,
      prompt: "A famous mathematician.",
      maxRetries: 0,
      providerOptions: { anthropic: { structuredOutputMode: "outputFormat" } },
    });
    expect(result.object).toEqual({ name: "Ada Lovelace", age: 36 });
    expect(result.usage).toMatchObject({ inputTokens: 47, outputTokens: 13 });
    expectSchemaAsked(upstream.requests[0]!.body);
    await expectCharged(modelId, before, [{ id: result.response.id, input: 47, output: 13 }]);
  });

  describe("openai() with its default store: earlier answers go back by id", () => {
    test("generateText with a tool, no providerOptions: step 2 names step 1's text by id, the gateway puts it back, and the upstream receives the text and the call in its own format", async () => {
      sentToGateway.length = 0;
      const keptBefore = stored.kept.length;
      const callId = vendor === "openai" ? "call_D3fau1tSt0re" : "toolu_01D3fau1tSt0re";
      upstream.reply(scriptedReply(vendor, { text: "Let me check.", calls: [{ id: callId, name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }], usage: { input: 41, output: 17 } }));
      upstream.reply(scriptedReply(vendor, { text: "It is 18°C and sunny in Paris.", usage: { input: 88, output: 12 } }));
      const before = await gw.balanceMicro();
      const executed: unknown[] = [];
      const result = await generateText({ model: watched(modelId), prompt: "Weather in Paris?", tools: weatherTool(executed), stopWhen: stepCountIs(2), maxRetries: 0 });
      expect(result.text).toBe("It is 18°C and sunny in Paris.");
      expect(executed).toEqual([{ city: "Paris", unit: "celsius" }]);

      // The SDK sent the earlier text as a reference to the first answer's message item…
      expect(sentToGateway).toHaveLength(2);
      expect(sentToGateway[1].store).toBeUndefined();
      const firstAnswer = result.steps[0]!.response.id!.slice("resp_".length);
      expect(references(sentToGateway[1])).toEqual([`msg_${firstAnswer}_0`]);
      expect(stored.kept.slice(keptBefore)).toEqual(result.steps.map((s) => s.response.id));
      // …and the upstream received it whole, with the call and its result, in its own words.
      const second = withoutCacheMarks(upstream.requests[1]!.body);
      const [assistant, answer] = second.messages.slice(-2);
      if (vendor === "openai") {
        expect(assistant).toEqual({ role: "assistant", content: "Let me check.", tool_calls: [{ id: callId, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' } }] });
        expect(answer).toMatchObject({ role: "tool", tool_call_id: callId });
      } else {
        expect(assistant).toEqual({ role: "assistant", content: [{ type: "text", text: "Let me check." }, { type: "tool_use", id: callId, name: "get_weather", input: { city: "Paris", unit: "celsius" } }] });
        expect(answer.content).toMatchObject([{ type: "tool_result", tool_use_id: callId }]);
      }
      await expectCharged(modelId, before, [
        { id: result.steps[0]!.response.id, input: 41, output: 17 },
        { id: result.steps[1]!.response.id, input: 88, output: 12 },
      ]);
    });

    test("a two-turn chat through messages history, no providerOptions: the second turn names the first answer by id; the upstream receives the whole conversation", async () => {
      sentToGateway.length = 0;
      upstream.reply(scriptedReply(vendor, { text: "Paris." }));
      upstream.reply(scriptedReply(vendor, { text: "Berlin." }));
      const firstQuestion = { role: "user" as const, content: "Capital of France?" };
      const first = await generateText({ model: watched(modelId), system: "Answer in one word.", messages: [firstQuestion], maxRetries: 0 });
      expect(first.text).toBe("Paris.");
      const errors: unknown[] = [];
      const second = streamText({
        model: watched(modelId),
        system: "Answer in one word.",
        messages: [firstQuestion, ...first.response.messages, { role: "user", content: "And of Germany?" }],
        maxRetries: 0,
        onError: ({ error }) => void errors.push(error),
      });
      expect(await second.text).toBe("Berlin.");
      expect(errors).toEqual([]);

      expect(references(sentToGateway[1])).toEqual([`msg_${first.response.id.slice("resp_".length)}_0`]);
      const sent = withoutCacheMarks(upstream.requests[1]!.body);
      expect(systemSent(vendor, sent)).toBe("Answer in one word.");
      expect(sent.messages.filter((m: any) => m.role !== "system").map((m: any) => [m.role, textOf(m.content)])).toEqual([
        ["user", "Capital of France?"],
        ["assistant", "Paris."],
        ["user", "And of Germany?"],
      ]);
    });

    test("store: false: the SDK sends whole items, and the gateway keeps nothing", async () => {
      sentToGateway.length = 0;
      const keptBefore = stored.kept.length;
      upstream.reply(scriptedReply(vendor, { text: "Let me check.", calls: [{ id: "call_N0St0re", name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }] }));
      upstream.reply(scriptedReply(vendor, { text: "Sunny." }));
      const result = await generateText({ model: watched(modelId), prompt: "Weather in Paris?", tools: weatherTool(), stopWhen: stepCountIs(2), maxRetries: 0, providerOptions: { openai: { store: false } } });
      expect(result.text).toBe("Sunny.");
      expect(sentToGateway.map((b) => b.store)).toEqual([false, false]);
      expect(sentToGateway.flatMap(references)).toEqual([]);
      expect(stored.kept.length).toBe(keptBefore);
      // Nothing to refer to afterwards either.
      const message = result.steps[0]!.response.id!.replace(/^resp_/, "msg_") + "_0";
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: modelId, input: [{ role: "user", content: "x" }, { type: "item_reference", id: message }] }),
      });
      expect(res.status).toBe(400);
    });

    test("a reference the gateway no longer holds (a restart, another worker): that step is a 400 naming the id and store: false, and only the first step is charged", async () => {
      upstream.reply(scriptedReply(vendor, { text: "Let me check.", calls: [{ id: "call_St0r3d", name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }], usage: { input: 41, output: 17 } }));
      const before = await gw.balanceMicro();
      const stepIds: string[] = [];
      const error = await generateText({
        model: openai(modelId),
        prompt: "Weather in Paris?",
        tools: weatherTool(),
        stopWhen: stepCountIs(2),
        maxRetries: 0,
        onStepEnd: (step) => {
          stepIds.push(step.response.id);
          stored.restart();
        },
      }).catch((e: unknown) => e);
      expect(APICallError.isInstance(error)).toBe(true);
      const apiError = error as APICallError;
      expect(apiError.statusCode).toBe(400);
      expect(apiError.message).toContain(`item_reference "msg_${stepIds[0]!.slice("resp_".length)}_0"`);
      expect(apiError.message).toContain("store: false");
      expect(upstream.requests).toHaveLength(1);
      await expectCharged(modelId, before, [{ id: stepIds[0], input: 41, output: 17 }]);
    });
  });

  describe("reasoning summaries through openai() (on the OpenAI kind, DeepSeek's reasoning_content dialect)", () => {
    // The SDK sends reasoning settings only to models it knows reason; gateway ids are not among them.
    const providerOptions = { openai: { reasoningSummary: "auto", forceReasoning: true } } satisfies CallOptions;
    const thinking = "France's capital is Paris.";

    test("generateText and streamText: the upstream's thinking is the step's reasoningText", async () => {
      sentToGateway.length = 0;
      upstream.reply(scriptedReply(reasoningDialect(vendor), { reasoning: thinking, text: "Paris." }));
      const whole = await generateText({ model: watched(modelId), prompt: "Capital of France?", maxRetries: 0, providerOptions });
      expect(whole.text).toBe("Paris.");
      expect(whole.finalStep.reasoningText).toBe(thinking);
      expect(sentToGateway[0].reasoning).toEqual({ summary: "auto" });

      upstream.reply(scriptedReply(reasoningDialect(vendor), { reasoning: thinking, text: "Paris." }));
      const errors: unknown[] = [];
      const streamed = streamText({ model: watched(modelId), prompt: "Capital of France?", maxRetries: 0, providerOptions, onError: ({ error }) => void errors.push(error) });
      const deltas: string[] = [];
      for await (const part of streamed.fullStream) if (part.type === "reasoning-delta") deltas.push(part.text);
      expect(errors).toEqual([]);
      expect(deltas.join("")).toBe(thinking);
      expect((await streamed.finalStep).reasoningText).toBe(thinking);
      expect(await streamed.text).toBe("Paris.");
    });

    test("a tool loop: step 2 names step 1's reasoning and text by id; the text reaches the upstream, and the thinking only as Anthropic's own signed block (an Anthropic upstream: the kept answer carries it; DeepSeek's has no seal)", async () => {
      sentToGateway.length = 0;
      upstream.reply(scriptedReply(reasoningDialect(vendor), { reasoning: thinking, text: "Let me check.", calls: [{ id: "call_R3as0n", name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }] }));
      upstream.reply(scriptedReply(vendor, { text: "Sunny." }));
      const result = await generateText({ model: watched(modelId), prompt: "Weather in Paris?", tools: weatherTool(), stopWhen: stepCountIs(2), maxRetries: 0, providerOptions });
      expect(result.text).toBe("Sunny.");
      expect(result.steps[0]!.reasoningText).toBe(thinking);
      const base = result.steps[0]!.response.id!.slice("resp_".length);
      expect(references(sentToGateway[1])).toEqual([`rs_${base}_0`, `msg_${base}_1`]);
      const second = upstream.requests[1]!;
      expect(second.rawBody).toContain("Let me check.");
      if (vendor === "anthropic") {
        // Kept with the answer, sealed, and put back where Anthropic wants it: first in the turn, signed.
        const assistant = second.body.messages.find((m: { role: string }) => m.role === "assistant");
        expect(assistant.content[0]).toMatchObject({ type: "thinking", thinking, signature: expect.any(String) });
      } else expect(second.rawBody).not.toContain(thinking);
    });
  });
});

describe("@ai-sdk/anthropic on an OpenAI-compatible upstream that interleaves parallel calls' arguments", () => {
  test("streamText gets each call whole, with its own arguments", async () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-Mix", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
    const call = (index: number, args: string, head?: { id: string; name: string }) =>
      chunk({ tool_calls: [{ index, ...(head ? { id: head.id, type: "function", function: { name: head.name, arguments: args } } : { function: { arguments: args } }) }] });
    upstream.reply({
      kind: "sse",
      chunks: [
        chunk({ role: "assistant", content: null }),
        call(0, '{"city":', { id: "call_Par1s", name: "get_weather" }),
        call(1, '{"city":', { id: "call_R0me", name: "get_weather" }),
        call(0, '"Paris","unit":"celsius"}'),
        call(1, '"Rome","unit":"celsius"}'),
        chunk({}, "tool_calls"),
        `data: ${JSON.stringify({ id: "chatcmpl-Mix", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [], usage: { prompt_tokens: 41, completion_tokens: 30, total_tokens: 71 } })}\n\n`,
        "data: [DONE]\n\n",
      ],
    });
    const errors: unknown[] = [];
    const result = streamText({ model: anthropic(OPENAI_MODEL), prompt: "Weather in Paris and Rome?", tools: weatherTool(), maxRetries: 0, onError: ({ error }) => void errors.push(error) });
    const calls = await result.toolCalls;
    expect(errors).toEqual([]);
    expect(calls.map((c) => [c.toolCallId, c.input])).toEqual([
      ["call_Par1s", { city: "Paris", unit: "celsius" }],
      ["call_R0me", { city: "Rome", unit: "celsius" }],
    ]);
    expect(await result.finishReason).toBe("tool-calls");
  });
});

describe("@ai-sdk/anthropic with thinking on, in a tool loop, under the vendor's checks", () => {
  describe.each([
    ["an Anthropic upstream", ANTHROPIC_MODEL, "anthropic" as const],
    ["an OpenAI-kind upstream (DeepSeek's reasoning_content)", OPENAI_MODEL, "openai" as const],
  ])("%s", (_name, modelId, vendor) => {
    test.each([["generateText"], ["streamText"]])("%s: two parallel calls, their results, and the answer; the step after the tools starts with the signed thinking (Anthropic refuses it otherwise)", async (mode) => {
      const dialect = reasoningDialect(vendor);
      const id = (n: number) => (vendor === "openai" ? `call_th${n}` : `toolu_th${n}`);
      upstream.rule((rec) => {
        const refusal = vendorRefusal(rec, { strict: true, thinkingHistory: true });
        if (refusal) return refusal;
        const results = JSON.stringify(rec.body.messages).includes(vendor === "openai" ? '"role":"tool"' : '"tool_result"');
        return scriptedReply(dialect, results
          ? { reasoning: "Both answered.", text: "Sunny in Paris and Rome." }
          : { reasoning: "Ask for both cities.", calls: [{ id: id(1), name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }, { id: id(2), name: "get_weather", arguments: '{"city":"Rome","unit":"celsius"}' }] })(rec);
      });
      const executed: unknown[] = [];
      const options = {
        model: anthropic(modelId), prompt: "Weather in Paris and Rome?", tools: weatherTool(executed), stopWhen: stepCountIs(3), maxRetries: 0, maxOutputTokens: 4000,
        providerOptions: { anthropic: { thinking: { type: "enabled", budgetTokens: 2000 } } },
      } as const;
      let steps;
      let text;
      if (mode === "generateText") ({ steps, text } = await generateText(options));
      else {
        const errors: unknown[] = [];
        const result = streamText({ ...options, onError: ({ error }) => void errors.push(error) });
        await result.consumeStream();
        expect(errors).toEqual([]);
        [steps, text] = await Promise.all([result.steps, result.text]);
      }
      expect(text).toBe("Sunny in Paris and Rome.");
      expect(steps.map((s) => s.reasoningText)).toEqual(["Ask for both cities.", "Both answered."]);
      expect(executed).toEqual([{ city: "Paris", unit: "celsius" }, { city: "Rome", unit: "celsius" }]);
      const calls = upstream.requests.filter((r) => r.method === "POST");
      expect(calls).toHaveLength(2);
      const second = calls[1]!.body;
      if (vendor === "anthropic") {
        const [assistant, results] = second.messages.slice(-2);
        expect(assistant.content.map((b: any) => b.type)).toEqual(["thinking", "tool_use", "tool_use"]);
        expect(assistant.content[0]).toMatchObject({ thinking: "Ask for both cities.", signature: expect.stringMatching(/.+/) });
        expect(results.content.map((b: any) => b.tool_use_id)).toEqual([id(1), id(2)]);
      } else {
        // DeepSeek's thinking has no signature to carry: the turn goes back as calls and results.
        expect(second.messages.slice(-3).map((m: any) => [m.role, m.tool_call_id ?? m.tool_calls?.map((c: any) => c.id).join()])).toEqual([["assistant", `${id(1)},${id(2)}`], ["tool", id(1)], ["tool", id(2)]]);
      }
    });
  });
});
