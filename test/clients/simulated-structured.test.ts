/**
 * The quick start's simulated models answer what the SDKs' structured-output helpers ask for: a
 * forced tool gets a call with arguments of its schema's shape, a response schema gets JSON of
 * that shape (on `switchyard/echo`, an OpenAI-format upstream, and `switchyard/lorem`, an
 * Anthropic-format one reached through the translation), so `chat.completions.parse`,
 * `messages.parse` and a forced tool work as they do against a vendor.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

let gateway: GatewayProcess;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-simulated-structured-"));
  gateway = await startGatewayProcess({ SWITCHYARD_DB: join(dir, "gw.sqlite"), OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "", SWITCHYARD_CONFIG: "" });
});
afterAll(async () => {
  gateway?.child.kill("SIGKILL");
  await gateway?.child.exited;
  rmSync(dir, { recursive: true, force: true });
});

const weather = {
  type: "object",
  properties: { city: { type: "string" }, celsius: { type: "number" }, sunny: { type: "boolean" }, tags: { type: "array", items: { type: "string" } }, unit: { type: "string", enum: ["C", "F"] } },
  required: ["city", "celsius", "sunny", "tags", "unit"],
  additionalProperties: false,
} as const;

test("chat.completions.parse with a json_schema: JSON of the schema's shape, on both simulated models", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  for (const model of ["switchyard/echo", "switchyard/lorem"]) {
    const done = await openai.chat.completions.parse({
      model, messages: [{ role: "user", content: "Weather in Paris" }],
      response_format: { type: "json_schema", json_schema: { name: "weather", strict: true, schema: weather } },
    });
    const parsed = done.choices[0]!.message.parsed as Record<string, unknown>;
    expect([model, Object.keys(parsed).sort()]).toEqual([model, ["celsius", "city", "sunny", "tags", "unit"]]);
    expect([typeof parsed.city, typeof parsed.celsius, parsed.sunny, parsed.unit]).toEqual(["string", "number", true, "C"]);
    expect(Array.isArray(parsed.tags)).toBe(true);
  }
});

test("a forced tool gets a call with arguments of its parameters' shape (OpenAI and Anthropic clients, streamed or not)", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: weather } }];
  const whole = await openai.chat.completions.create({ model: "switchyard/echo", messages: [{ role: "user", content: "Paris" }], tools, tool_choice: { type: "function", function: { name: "get_weather" } } });
  expect(whole.choices[0]!.finish_reason).toBe("tool_calls");
  const call = whole.choices[0]!.message.tool_calls![0]! as { function: { name: string; arguments: string } };
  expect(call.function.name).toBe("get_weather");
  expect(Object.keys(JSON.parse(call.function.arguments)).sort()).toEqual(["celsius", "city", "sunny", "tags", "unit"]);

  const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: gateway.key, maxRetries: 0 });
  for (const model of ["switchyard/lorem", "switchyard/echo"]) {
    const message = await anthropic.messages.stream({
      model, max_tokens: 200, messages: [{ role: "user", content: "Paris" }],
      tools: [{ name: "get_weather", input_schema: weather as unknown as Anthropic.Tool.InputSchema }], tool_choice: { type: "tool", name: "get_weather" },
    }).finalMessage();
    expect([model, message.stop_reason]).toEqual([model, "tool_use"]);
    const use = message.content.find((b) => b.type === "tool_use") as { name: string; input: Record<string, unknown> };
    expect(use.name).toBe("get_weather");
    expect(Object.keys(use.input).sort()).toEqual(["celsius", "city", "sunny", "tags", "unit"]);
  }
});

test("a tool-call-only answer's content is null streamed as whole, translated (lorem answers in Anthropic's format) or not", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: weather } }];
  for (const model of ["switchyard/echo", "switchyard/lorem"]) {
    const ask = { model, messages: [{ role: "user" as const, content: "Paris" }], tools, tool_choice: "required" as const };
    const whole = await openai.chat.completions.create(ask);
    const streamed = await openai.chat.completions.stream(ask).finalChatCompletion();
    for (const done of [whole, streamed]) {
      expect([model, done.choices[0]!.finish_reason, done.choices[0]!.message.content]).toEqual([model, "tool_calls", null]);
      expect(done.choices[0]!.message.tool_calls).toHaveLength(1);
    }
  }
});

test("a required allowed subset forces its tool on the simulated echo (chat and Responses clients); an auto one does not", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const tools = [{ type: "function" as const, function: { name: "get_time", parameters: { type: "object", properties: {} } } }, { type: "function" as const, function: { name: "get_weather", parameters: weather } }];
  const subset = (mode: "auto" | "required") => ({ type: "allowed_tools" as const, allowed_tools: { mode, tools: [{ type: "function" as const, function: { name: "get_weather" } }] } });
  const forced = await openai.chat.completions.create({ model: "switchyard/echo", messages: [{ role: "user", content: "Paris" }], tools, tool_choice: subset("required") });
  expect((forced.choices[0]!.message.tool_calls![0]! as { function: { name: string } }).function.name).toBe("get_weather");
  const free = await openai.chat.completions.create({ model: "switchyard/echo", messages: [{ role: "user", content: "Paris" }], tools, tool_choice: subset("auto") });
  expect(free.choices[0]!.message.content).toBe("Echo: Paris");
  const response = await openai.responses.create({
    model: "switchyard/echo", store: false, input: "Paris",
    tools: tools.map((t) => ({ type: "function" as const, name: t.function.name, parameters: t.function.parameters as Record<string, unknown>, strict: false })),
    tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_weather" }] },
  });
  expect(response.output.find((o) => o.type === "function_call")).toMatchObject({ name: "get_weather" });
});

test("without a schema or a forced tool the echo is as before", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const done = await openai.chat.completions.create({ model: "switchyard/echo", messages: [{ role: "user", content: "Hello there" }] });
  expect(done.choices[0]!.message.content).toBe("Echo: Hello there");
});

test("legacy functions with a forced function_call: a function_call of its parameters' shape, on both simulated models, whole and streamed", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const legacy = { messages: [{ role: "user" as const, content: "Paris" }], functions: [{ name: "get_weather", parameters: weather }], function_call: { name: "get_weather" } };
  for (const model of ["switchyard/echo", "switchyard/lorem"]) {
    const whole = await openai.chat.completions.create({ model, ...legacy });
    const streamed = await openai.chat.completions.stream({ model, ...legacy }).finalChatCompletion();
    for (const done of [whole, streamed]) {
      expect([model, done.choices[0]!.finish_reason]).toEqual([model, "function_call"]);
      const call = done.choices[0]!.message.function_call!;
      expect(call.name).toBe("get_weather");
      expect(Object.keys(JSON.parse(call.arguments)).sort()).toEqual(["celsius", "city", "sunny", "tags", "unit"]);
    }
  }
});

test("an answer cut by max_tokens says so, as a vendor's does: finish_reason length, stop_reason max_tokens", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  for (const model of ["switchyard/echo", "switchyard/lorem"]) {
    const cut = await openai.chat.completions.create({ model, max_tokens: 2, messages: [{ role: "user", content: "Say something long, please" }] });
    expect([model, cut.choices[0]!.finish_reason, cut.usage!.completion_tokens]).toEqual([model, "length", 2]);
    const whole = await openai.chat.completions.create({ model, max_tokens: 200, messages: [{ role: "user", content: "Hi" }] });
    expect([model, whole.choices[0]!.finish_reason]).toEqual([model, "stop"]);
  }
  const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: gateway.key, maxRetries: 0 });
  const message = await anthropic.messages.create({ model: "switchyard/lorem", max_tokens: 2, messages: [{ role: "user", content: "Hi" }] });
  expect(message.stop_reason).toBe("max_tokens");
});

test("stop sequences end the answer before them, as a vendor's do: finish_reason stop, stop_reason stop_sequence naming it; streamed alike", async () => {
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: gateway.key, maxRetries: 0 });
  for (const model of ["switchyard/echo", "switchyard/lorem"]) {
    const content = "one two three four";
    const stop = model === "switchyard/lorem" ? "dolor" : "three";
    const said = model === "switchyard/lorem" ? "Lorem ipsum" : "Echo: one two";
    const ask = { model, messages: [{ role: "user" as const, content }], stop: ["nowhere", stop] };
    const whole = await openai.chat.completions.create(ask);
    const streamed = await openai.chat.completions.stream(ask).finalChatCompletion();
    for (const done of [whole, streamed]) expect([model, done.choices[0]!.message.content, done.choices[0]!.finish_reason]).toEqual([model, said, "stop"]);
    const message = await anthropic.messages.create({ model, max_tokens: 100, messages: [{ role: "user", content }], stop_sequences: [stop] });
    const streamedMessage = await anthropic.messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content }], stop_sequences: [stop] }).finalMessage();
    // Through the echo (an OpenAI-format upstream) the stop is OpenAI's `stop`, which does not say
    // whether a sequence or the model ended it: end_turn, as with a real OpenAI upstream.
    const ended = model === "switchyard/lorem" ? ["stop_sequence", stop] : ["end_turn", null];
    for (const m of [message, streamedMessage]) {
      expect([model, m.content.map((b) => (b.type === "text" ? b.text : "")).join(""), m.stop_reason, m.stop_sequence]).toEqual([model, said, ...ended]);
    }
  }
});

test("a schema whose definitions name each other gets a bounded answer, and other clients are not held meanwhile", async () => {
  // 30 properties, each a $ref to the same object of those properties: 30^4 values at depth 8,
  // 316 MB of answer made on the request thread (a hostile-tenant probe) from a 2 KB request to a free model.
  const properties = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`p${i}`, { $ref: "#/$defs/node" }]));
  const schema = { type: "object", properties, $defs: { node: { type: "object", properties } } };
  const pings: number[] = [];
  let asking = true;
  const pinger = (async () => {
    while (asking) {
      const t = performance.now();
      await (await fetch(`${gateway.url}/health`)).text();
      pings.push(performance.now() - t);
      await Bun.sleep(20);
    }
  })();
  const started = performance.now();
  const res = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "switchyard/echo", messages: [{ role: "user", content: "x ".repeat(4000) }], response_format: { type: "json_schema", json_schema: { name: "bomb", schema } } }),
  });
  const text = await res.text();
  const took = performance.now() - started;
  asking = false;
  await pinger;
  expect(res.status).toBe(200);
  expect(text.length).toBeLessThan(1024 * 1024);
  expect(took).toBeLessThan(2_000);
  expect(Math.max(...pings)).toBeLessThan(1_000);
  // Still a JSON object, filled depth first until the budget ran out.
  const content = (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
  expect(Object.keys(JSON.parse(content) as object)[0]).toBe("p0");
});
