/**
 * OpenAI-format and Responses-format clients against the current Claude models through the
 * gateway's translation: what the openai SDK, Codex, LangChain and the AI SDK commonly send
 * (temperature, top_p, tool_choice "required" or a named function, reasoning_effort) must not make
 * the model refuse the request. The fake Anthropic refuses what each model refuses, in Anthropic's
 * words (test/helpers/fake-upstream.ts), so a 200 here is a request the vendor takes; the assertions
 * on the recorded body say what was sent instead. The rules: test/unit/formats/claude-current-models.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_PRICING, post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { anthropicBody, anthropicStream } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream();
/** Each model by its API id, served by the fake Anthropic as `test/<id>`. */
const CLAUDES = ["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1", "claude-haiku-5-5", "claude-sonnet-5", "claude-opus-5", "claude-opus-4-7", "claude-opus-4-6", "claude-sonnet-4-5"];
const claude = (name: string) => ({ id: `test/${name}`, provider: "fake-anthropic", upstream_model: name, category: "text", context_length: 200_000, pricing: ANTHROPIC_PRICING });
/** Sonnet 5.5 that the config says does not reason (`models[].reasoning` wins over the name). */
const QUIET = { ...claude("claude-sonnet-5-5"), id: "test/quiet-sonnet", reasoning: "none" };
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, extraModels: [...CLAUDES.map(claude), QUIET] }));
const sent = () => upstream.requests.at(-1)!.body;
const chat = (name: string, body: Record<string, unknown>) => post(gw, "/v1/chat/completions", { model: `test/${name}`, messages: [{ role: "user", content: "hi" }], ...body });
const responses = (name: string, body: Record<string, unknown>) => post(gw, "/v1/responses", { model: `test/${name}`, store: false, input: "hi", ...body });

describe("sampling parameters", () => {
  // "On Claude Fable 5.1, …, Claude Opus 5, Claude Opus 4.8, Claude Opus 4.7, and Claude Sonnet 5,
  // non-default temperature, top_p, or top_k values return a 400 error on every request" (thinking
  // docs); Sonnet 5.5 and Haiku 5.5 likewise (their migration guides).
  test.each(["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1", "claude-haiku-5-5", "claude-sonnet-5", "claude-opus-4-7"])("%s: temperature and top_p are left out", async (name) => {
    const res = await chat(name, { temperature: 0.2, top_p: 0.9 });
    expect(res.status).toBe(200);
    expect(sent()).not.toHaveProperty("temperature");
    expect(sent()).not.toHaveProperty("top_p");
    const viaResponses = await responses(name, { temperature: 0, top_p: 0.5 });
    expect(viaResponses.status).toBe(200);
    expect(sent()).not.toHaveProperty("temperature");
    expect(sent()).not.toHaveProperty("top_p");
  });

  test.each(["claude-opus-4-6", "claude-sonnet-4-5"])("%s still takes them", async (name) => {
    expect((await chat(name, { temperature: 0.2 })).status).toBe(200);
    expect(sent().temperature).toBe(0.2);
  });
});

describe("forced tool use", () => {
  // "Claude Sonnet 5.5 rejects both with a 400 error … Send tool_choice: {"type": "auto"} … say in
  // the prompt when to use it" (Sonnet 5.5 migration guide); likewise Opus 5.5 and Fable 5.1.
  const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
  const chatTools = [{ type: "function", function: { name: "get_weather", parameters } }, { type: "function", function: { name: "get_time", parameters } }];
  const responsesTools = [{ type: "function", name: "get_weather", parameters }, { type: "function", name: "get_time", parameters }];

  test.each(["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1"])("%s: required is auto, and the system prompt asks for a tool", async (name) => {
    const res = await chat(name, { tools: chatTools, tool_choice: "required", parallel_tool_calls: false, messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Weather in Paris?" }] });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true });
    expect(sent().system).toStartWith("You are terse.\n\n");
    expect(sent().system).toContain("calling one of the provided tools");
  });

  test.each(["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1"])("%s: a named function is auto, and the system prompt names it", async (name) => {
    const res = await chat(name, { tools: chatTools, tool_choice: { type: "function", function: { name: "get_time" } } });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "auto" });
    expect(sent().system).toContain("calling the `get_time` tool");
    const viaResponses = await responses(name, { tools: responsesTools, tool_choice: { type: "function", name: "get_weather" } });
    expect(viaResponses.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "auto" });
    expect(sent().system).toContain("calling the `get_weather` tool");
  });

  test("structured output through the answer tool asks for it in the prompt too (json_object on Opus 5.5)", async () => {
    const res = await chat("claude-opus-5-5", { response_format: { type: "json_object" } });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "auto" });
    expect(sent().system).toContain("calling the `json_answer` tool");
  });

  test.each(["claude-haiku-5-5", "claude-sonnet-5", "claude-opus-5", "claude-sonnet-4-5"])("%s still takes a forced tool", async (name) => {
    expect((await chat(name, { tools: chatTools, tool_choice: "required" })).status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "any" });
    expect(sent()).not.toHaveProperty("system");
  });
});

describe("adaptive thinking on every step of a tool loop", () => {
  // "Adaptive thinking, including on models where thinking is on by default, supports forced tool
  // use" and "In extended (manual) mode, the API additionally enforces that the final assistant turn
  // … begins with a thinking block. Adaptive mode relaxes this" (thinking docs). Only budgets
  // (Sonnet 4.5 here) skip thinking on such steps.
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
  const loop = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "call_1", content: "18°C" },
  ];

  test.each(["claude-opus-4-6", "claude-opus-4-7"])("%s: the step after the tool results thinks at the client's effort", async (name) => {
    expect((await chat(name, { messages: loop, tools, reasoning_effort: "low" })).status).toBe(200);
    expect(sent().thinking).toMatchObject({ type: "adaptive" });
    expect(sent().output_config).toEqual({ effort: "low" });
  });

  test("a forced tool keeps adaptive thinking (Opus 4.6)", async () => {
    expect((await chat("claude-opus-4-6", { tools, tool_choice: "required", reasoning_effort: "medium" })).status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "any" });
    expect(sent().thinking).toEqual({ type: "adaptive" });
    expect(sent().output_config).toEqual({ effort: "medium" });
  });

  test("a budget model still skips it", async () => {
    expect((await chat("claude-sonnet-4-5", { messages: loop, tools, reasoning_effort: "low" })).status).toBe(200);
    expect(sent()).not.toHaveProperty("thinking");
  });
});

test("an Anthropic client's adaptive thinking stays on a step whose call another vendor's model made", async () => {
  const messages = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_other1", name: "get_weather", input: {} }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_other1", content: "18°C" }] },
  ];
  const tools = [{ name: "get_weather", input_schema: { type: "object", properties: {} } }];
  const res = await post(gw, "/v1/messages", { model: "test/claude-opus-4-6", max_tokens: 2000, tools, thinking: { type: "adaptive" }, messages });
  expect(res.status).toBe(200);
  expect(sent().thinking).toEqual({ type: "adaptive" });
});

describe("reasoning_effort none or minimal on the models that think unasked", () => {
  // Sonnet 5 and Opus 5 think with no `thinking` field and take `disabled` (Opus 5 at effort high or
  // below), Haiku 5.5 likewise; Sonnet 5.5 refuses `disabled` and turns thinking off with
  // `between_tools`; Opus 5.5 and Fable 5.1 cannot turn it off (thinking docs, the models' guides).
  test.each([
    ["claude-sonnet-5", { type: "disabled" }],
    ["claude-opus-5", { type: "disabled" }],
    ["claude-haiku-5-5", { type: "disabled" }],
    ["claude-sonnet-5-5", { type: "between_tools" }],
  ])("%s: thinking off as the model takes it", async (name, thinking) => {
    expect((await chat(name, { reasoning_effort: "none" })).status).toBe(200);
    expect(sent().thinking).toEqual(thinking);
    expect(sent()).not.toHaveProperty("output_config");
    expect((await responses(name, { reasoning: { effort: "minimal" } })).status).toBe(200);
    expect(sent().thinking).toEqual(thinking);
  });

  test.each(["claude-opus-5-5", "claude-fable-5-1"])("%s: thinking cannot be turned off, so the lowest effort", async (name) => {
    expect((await chat(name, { reasoning_effort: "none" })).status).toBe(200);
    expect(sent().thinking?.type).not.toBe("disabled");
    expect(sent().output_config).toEqual({ effort: "low" });
  });

  test.each(["claude-opus-4-7", "claude-opus-4-6", "claude-sonnet-4-5"])("%s thinks only when asked: nothing is sent", async (name) => {
    expect((await chat(name, { reasoning_effort: "none" })).status).toBe(200);
    expect(sent()).not.toHaveProperty("thinking");
    expect(sent()).not.toHaveProperty("output_config");
  });
});

describe("thinking text comes back: display summarized where the model omits it", () => {
  // "`omitted` … This is the default on Claude Fable 5.1, …, Claude Opus 5, Claude Sonnet 5, Claude
  // Opus 4.8, Claude Opus 4.7"; on Sonnet 5.5 and Opus 5.5 "text between tool calls comes back in
  // thinking blocks … empty at the default display" (thinking docs; the 5.5 models' guides).
  test.each(["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1", "claude-haiku-5-5", "claude-sonnet-5", "claude-opus-5"])("%s thinks unasked: asked for the summary even without reasoning_effort", async (name) => {
    expect((await chat(name, {})).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive", display: "summarized" });
    expect((await responses(name, { reasoning: { effort: "medium" } })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive", display: "summarized" });
    expect(sent().output_config).toEqual({ effort: "medium" });
  });

  test("Opus 4.7 thinks when asked, and is asked for the summary then", async () => {
    expect((await chat("claude-opus-4-7", {})).status).toBe(200);
    expect(sent()).not.toHaveProperty("thinking");
    expect((await chat("claude-opus-4-7", { reasoning_effort: "high" })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive", display: "summarized" });
  });

  test("models that summarize anyway, and thinking turned off, get no display", async () => {
    expect((await chat("claude-opus-4-6", { reasoning_effort: "high" })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive" });
    expect((await chat("claude-sonnet-5-5", { reasoning_effort: "none" })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "between_tools" });
    expect((await chat("claude-opus-5-5", { reasoning_effort: "none" })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive", display: "summarized" });
    expect(sent().output_config).toEqual({ effort: "low" });
  });

  test("a model the config says does not reason is sent no thinking", async () => {
    expect((await chat("quiet-sonnet", { reasoning_effort: "high" })).status).toBe(200);
    expect(sent()).not.toHaveProperty("thinking");
    expect(sent()).not.toHaveProperty("output_config");
  });
});

describe("the notes between tool calls reach OpenAI-format clients as reasoning", () => {
  // With display "summarized" a progress update is a thinking block with text before the tool_use
  // it introduces; OpenAI clients read thinking as `reasoning_content` (chat) or reasoning items.
  const note = "Found the expired token path; editing auth.py next.";
  const call = { id: "toolu_01", name: "edit_file", arguments: '{"path":"auth.py"}' };
  const tools = [{ type: "function", function: { name: "edit_file", parameters: { type: "object", properties: { path: { type: "string" } } } } }];

  test("chat completions, whole and streamed", async () => {
    upstream.reply(anthropicBody({ reasoning: note, calls: [call] }));
    const whole = (await (await chat("claude-sonnet-5-5", { tools })).json()) as any;
    expect(whole.choices[0].message.reasoning_content).toBe(note);
    expect(whole.choices[0].message.tool_calls[0].function).toEqual({ name: "edit_file", arguments: call.arguments });

    upstream.reply(anthropicStream({ reasoning: note, calls: [call] }));
    const text = await (await chat("claude-sonnet-5-5", { tools, stream: true })).text();
    const deltas = sseFrames(text).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices?.[0]?.delta ?? {});
    expect(deltas.map((d) => d.reasoning_content ?? "").join("")).toBe(note);
    expect(deltas.some((d) => d.tool_calls)).toBe(true);
  });

  test("the Responses API: a reasoning item whose summary is the note (Codex asks for summaries), before the call", async () => {
    upstream.reply(anthropicBody({ reasoning: note, calls: [call] }));
    const body = (await (await responses("claude-opus-5-5", { reasoning: { summary: "auto" }, tools: [{ type: "function", name: "edit_file", parameters: tools[0]!.function.parameters }] })).json()) as any;
    const types = body.output.map((i: any) => i.type);
    expect(types).toEqual(["reasoning", "function_call"]);
    expect(body.output[0].summary.map((p: any) => p.text).join("")).toBe(note);
  });
});

describe("a conversation that ends with the assistant", () => {
  // "Claude Sonnet 5.5 rejects a prefilled last assistant turn with a 400 error, as Claude Sonnet
  // 4.6 and Claude Sonnet 5 do. Claude Sonnet 4.5, Claude Haiku 4.5, and older models accept one"
  // (Sonnet 5.5 migration guide; "prefill removal" in What's new in Claude 4.6). OpenAI answers such
  // a conversation with the next assistant message.
  const ending = [{ role: "user", content: "Name a colour." }, { role: "assistant", content: "Blue." }];

  test.each(["claude-sonnet-5-5", "claude-opus-4-6", "claude-haiku-5-5"])("%s: a user turn asks for the next message", async (name) => {
    expect((await chat(name, { messages: ending })).status).toBe(200);
    const messages = sent().messages;
    expect(messages.at(-2)).toMatchObject({ role: "assistant", content: [{ type: "text", text: "Blue." }] });
    expect(messages.at(-1).role).toBe("user");
    expect(messages.at(-1).content[0].text).toBe("Continue.");
    const viaResponses = await responses(name, { input: [{ role: "user", content: "Name a colour." }, { type: "message", role: "assistant", content: [{ type: "output_text", text: "Blue." }] }] });
    expect(viaResponses.status).toBe(200);
    expect(sent().messages.at(-1).role).toBe("user");
  });

  test("Sonnet 4.5 still continues it", async () => {
    expect((await chat("claude-sonnet-4-5", { messages: ending })).status).toBe(200);
    expect(sent().messages.at(-1).role).toBe("assistant");
  });
});

test.each([
  ["claude-sonnet-5-5", "xhigh"],
  ["claude-opus-4-6", "high"],
])("reasoning_effort xhigh on %s is effort %s (xhigh where the model takes it)", async (name, effort) => {
  expect((await chat(name, { reasoning_effort: "xhigh" })).status).toBe(200);
  expect(sent().output_config).toEqual({ effort });
});

describe("an Anthropic client's own request, fitted to the Claude it reaches (an alias may send it to a stricter model than it named)", () => {
  const messages = (name: string, body: Record<string, unknown>) => post(gw, "/v1/messages", { model: `test/${name}`, max_tokens: 32_000, messages: [{ role: "user", content: "hi" }], ...body });
  // Claude Code pinned to claude-sonnet-4-5: its system blocks, budgeted thinking and temperature.
  const claudeCode = {
    system: [{ type: "text", text: "You are Claude Code." }, { type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
    thinking: { type: "enabled", budget_tokens: 31_999 },
    temperature: 1,
  };
  const tools = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];

  test.each(["claude-sonnet-5-5", "claude-opus-4-7", "claude-fable-5-1"])("%s: budgeted thinking is adaptive, sampling parameters are left out", async (name) => {
    upstream.reply(anthropicBody({ text: "ok" }));
    const res = await messages(name, { ...claudeCode, top_k: 5 });
    expect(res.status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive" });
    for (const field of ["temperature", "top_p", "top_k"]) expect(sent()).not.toHaveProperty(field);
    expect(sent().system).toEqual(claudeCode.system);
  });

  test("Sonnet 5.5: a forced tool is auto, and a block after the client's system blocks names it", async () => {
    upstream.reply(anthropicBody({ text: "ok" }));
    const res = await messages("claude-sonnet-5-5", { system: claudeCode.system, tools, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true } });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true });
    expect(sent().system).toEqual([...claudeCode.system, { type: "text", text: expect.stringContaining("`get_weather`") }]);
  });

  test("thinking disabled is said the way the model takes it: between_tools on Sonnet 5.5, the lowest effort where it cannot be off", async () => {
    // The SDKs' `thinking: {type: "disabled"}` to a name an alias sends to Sonnet or Opus 5.5: a 400 each.
    expect((await messages("claude-sonnet-5-5", { thinking: { type: "disabled" }, output_config: { effort: "max" } })).status).toBe(200);
    expect(sent()).toMatchObject({ thinking: { type: "between_tools" }, output_config: { effort: "high" } });
    for (const name of ["claude-opus-5-5", "claude-fable-5-1"]) {
      expect((await messages(name, { thinking: { type: "disabled" } })).status).toBe(200);
      expect(sent()).not.toHaveProperty("thinking");
      expect(sent().output_config).toEqual({ effort: "low" });
    }
    expect((await messages("claude-sonnet-5", { thinking: { type: "disabled" } })).status).toBe(200);
    expect(sent().thinking).toEqual({ type: "disabled" });
  });

  test("the models that take them get the client's budget, temperature and forced tool as written", async () => {
    upstream.reply(anthropicBody({ text: "ok" }));
    expect((await messages("claude-sonnet-4-5", { ...claudeCode, top_k: 5 })).status).toBe(200);
    // (The budget itself fitted under the gateway's answer cap, as for every budget model.)
    expect(sent()).toMatchObject({ thinking: { type: "enabled", budget_tokens: expect.any(Number) }, temperature: 1, top_k: 5 });
    upstream.reply(anthropicBody({ text: "ok" }));
    expect((await messages("claude-opus-5", { tools, tool_choice: { type: "any" } })).status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "any" });
  });
});
