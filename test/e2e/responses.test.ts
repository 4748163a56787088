/**
 * POST /v1/responses through the official openai SDK, against both upstream kinds: the fake
 * upstream speaks each vendor's own wire bytes, the gateway translates the Responses request to
 * chat and writes the answer in the Responses API's shape.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { useFakeUpstream, withoutCacheMarks } from "../helpers/fake-upstream.ts";
import { useGateway, post, sseFrames, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";
import { reasoningDialect, scripted, scriptedReply } from "../helpers/scripted-answers.ts";
import { recordingResponseStore } from "../helpers/recording-response-store.ts";
import { until } from "../helpers/until.ts";
import type { Logger } from "../../src/log/log.ts";
import { NO_RESPONSE_STORE } from "../../src/formats/openai-responses/response-store.ts";

const upstream = useFakeUpstream();
const logLines: string[] = [];
const capture: Logger = (level, message, fields) => logLines.push(JSON.stringify({ level, message, ...fields }));
const stored = recordingResponseStore();
// A parse turn held by the test is not ended for it at 250 ms (the turns test below).
const gw = useGateway(() => ({ upstreamUrl: upstream.url, log: capture, retry: { max_retries: 0 }, responseStore: stored.store, parseTurnMaxHoldMs: 60_000 }));
let openai: OpenAI;

beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
});

const weather: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_weather",
  description: "Weather by city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
  strict: true,
};

const applyPatch: OpenAI.Responses.CustomTool = {
  type: "custom",
  name: "apply_patch",
  description: "Edit files with a patch.",
  format: { type: "grammar", syntax: "lark", definition: 'start: "*** Begin Patch" LF hunk+ "*** End Patch"' },
};

/** The chat messages (OpenAI upstream) or system + messages (Anthropic upstream) the upstream got last. */
const lastUpstream = () => upstream.requests.at(-1)!;

/** Text of a message content in either vendor's shape: a string, or text parts/blocks. */
const textOf = (content: unknown): string =>
  typeof content === "string" ? content : Array.isArray(content) ? content.map((p) => (typeof p?.text === "string" ? p.text : "")).join("") : "";

/** The conversation an upstream received, as [role, text] (system prompts left out). */
const dialogue = (body: any): [string, string][] => body.messages.filter((m: any) => m.role !== "system").map((m: any) => [m.role, textOf(m.content)]);

function usageRecord(requestId: string) {
  return gw.db.query<{ status: string; cost_micro: number; completion_tokens: number }, [string]>("SELECT status, cost_micro, completion_tokens FROM usage_records WHERE request_id = ?").get(requestId);
}

describe.each([
  ["OpenAI upstream", OPENAI_MODEL, "openai" as const],
  ["Anthropic upstream", ANTHROPIC_MODEL, "anthropic" as const],
])("responses API against an %s", (_name, model, vendor) => {
  test("responses.create: output_text, completed, usage, and an id that names the usage record", async () => {
    const response = await openai.responses.create({ model, input: "Hello SDK", instructions: "Answer briefly.", metadata: { ticket: "42" } });
    expect(response.object).toBe("response");
    expect(response.status).toBe("completed");
    expect(response.output_text).toBe("Echo: Hello SDK");
    expect(response.output).toHaveLength(1);
    expect(response.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Echo: Hello SDK", annotations: [] }] });
    expect(response.model).toBe(model);
    expect(response.instructions).toBe("Answer briefly.");
    expect(response.metadata).toEqual({ ticket: "42" });
    expect(response.usage!.output_tokens).toBe(3);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + 3);
    expect(response.id).toMatch(/^resp_/);
    await gw.app.services.settled();
    const record = usageRecord(`req_${response.id.slice("resp_".length)}`);
    expect(record).toMatchObject({ status: "ok", completion_tokens: 3 });
    expect(record!.cost_micro).toBeGreaterThan(0);

    // instructions lead the conversation as the system prompt; metadata is ours, not the upstream's.
    const sent = withoutCacheMarks(lastUpstream().body);
    if (vendor === "openai") expect(sent.messages[0]).toEqual({ role: "system", content: "Answer briefly." });
    else expect(sent.system).toBe("Answer briefly.");
    expect(sent.metadata).toBeUndefined();
  });

  test("create with stream: true — the events the SDK types, numbered from 0 without gaps", async () => {
    const stream = await openai.responses.create({ model, input: "Hello SDK", stream: true });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(completed.response.output[0]).toMatchObject({ type: "message", content: [{ text: "Echo: Hello SDK" }] });
    expect(completed.response.usage!.output_tokens).toBe(3);
    expect(completed.response.id).toBe((events[0] as OpenAI.Responses.ResponseCreatedEvent).response.id);
  });

  test("responses.stream: delta events and finalResponse", async () => {
    const stream = openai.responses.stream({ model, input: [{ role: "user", content: [{ type: "input_text", text: "Hello SDK" }] }] });
    let text = "";
    stream.on("response.output_text.delta", (e) => (text += e.delta));
    const final = await stream.finalResponse();
    expect(text).toBe("Echo: Hello SDK");
    expect(final.output_text).toBe("Echo: Hello SDK");
    expect(final.status).toBe("completed");
  });

  test("a function tool call, then its output goes back translated", async () => {
    upstream.reply(scripted(vendor, { text: "Let me check.", calls: [{ id: "call_w1", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const stream = openai.responses.stream({ model, input: "Weather in Paris?", tools: [weather], tool_choice: "auto" });
    const argDeltas: string[] = [];
    stream.on("response.function_call_arguments.delta", (e) => argDeltas.push(e.delta));
    const first = await stream.finalResponse();
    expect(first.output.map((o) => o.type)).toEqual(["message", "function_call"]);
    const call = first.output[1] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: "function_call", name: "get_weather", call_id: "call_w1", status: "completed" });
    expect(JSON.parse(call.arguments)).toEqual({ city: "Paris" });
    expect(argDeltas.join("")).toBe(call.arguments);

    const sentTools = lastUpstream().body.tools;
    if (vendor === "openai") expect(sentTools).toEqual([{ type: "function", function: { name: "get_weather", description: "Weather by city", parameters: weather.parameters, strict: true } }]);
    else expect(sentTools).toEqual([{ name: "get_weather", description: "Weather by city", input_schema: weather.parameters }]);

    const second = await openai.responses.create({
      model,
      tools: [weather],
      input: [{ role: "user", content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: "function_call_output", call_id: call.call_id, output: "18°C and sunny" }],
    });
    expect(second.status).toBe("completed");
    const sent = withoutCacheMarks(lastUpstream().body);
    if (vendor === "openai") {
      expect(sent.messages.slice(1)).toEqual([
        { role: "assistant", content: "Let me check.", tool_calls: [{ id: "call_w1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
        { role: "tool", tool_call_id: "call_w1", content: "18°C and sunny" },
      ]);
    } else {
      expect(sent.messages.slice(1)).toEqual([
        { role: "assistant", content: [{ type: "text", text: "Let me check." }, { type: "tool_use", id: "call_w1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_w1", content: "18°C and sunny" }] },
      ]);
    }
  });

  test("a tool call in a whole (non-stream) answer", async () => {
    upstream.reply({ kind: "fixture", name: vendor === "openai" ? "openai-tools.json" : "anthropic-tools.json" });
    const response = await openai.responses.create({ model, input: "Weather in Paris?", tools: [weather] });
    const call = response.output.find((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ name: "get_weather", call_id: vendor === "openai" ? "call_Rk3vN8pQw2Lz7TmY5sXb1HcD" : "toolu_01A09q90qw90lq917835lq9", status: "completed" });
    expect(JSON.parse(call.arguments)).toEqual({ city: "Paris" });
    expect(response.status).toBe("completed");
    expect(response.usage!.output_tokens).toBe(vendor === "openai" ? 15 : 54);
  });

  test("a custom tool is a one-string function upstream; its call comes back as custom_tool_call", async () => {
    const patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n";
    upstream.reply(scripted(vendor, { calls: [{ id: "call_p1", name: "apply_patch", arguments: JSON.stringify({ input: patch }) }] }));
    const stream = openai.responses.stream({ model, input: "Create a.txt", tools: [applyPatch] });
    const inputDone: string[] = [];
    stream.on("response.custom_tool_call_input.done", (e) => inputDone.push(e.input));
    const first = await stream.finalResponse();
    expect(first.output).toEqual([expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", call_id: "call_p1", input: patch })]);
    expect(inputDone).toEqual([patch]);

    const tool = vendor === "openai" ? lastUpstream().body.tools[0].function : lastUpstream().body.tools[0];
    expect(tool.name).toBe("apply_patch");
    expect(tool.description).toContain("Edit files with a patch.");
    expect(tool.description).toContain('start: "*** Begin Patch"');
    expect(tool[vendor === "openai" ? "parameters" : "input_schema"]).toMatchObject({ type: "object", properties: { input: { type: "string" } }, required: ["input"] });

    await openai.responses.create({
      model,
      tools: [applyPatch],
      input: [{ role: "user", content: "Create a.txt" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: "custom_tool_call_output", call_id: "call_p1", output: "Done" }],
    });
    const sent = withoutCacheMarks(lastUpstream().body);
    if (vendor === "openai") {
      expect(sent.messages[1].tool_calls).toEqual([{ id: "call_p1", type: "function", function: { name: "apply_patch", arguments: JSON.stringify({ input: patch }) } }]);
      expect(sent.messages[2]).toEqual({ role: "tool", tool_call_id: "call_p1", content: "Done" });
    } else {
      expect(sent.messages[1].content).toEqual([{ type: "tool_use", id: "call_p1", name: "apply_patch", input: { input: patch } }]);
      expect(sent.messages[2].content).toEqual([{ type: "tool_result", tool_use_id: "call_p1", content: "Done" }]);
    }
  });

  test("max_output_tokens reached: status incomplete, incomplete_details, response.incomplete", async () => {
    upstream.reply(scripted(vendor, { text: "A long answer that was cut", stop: "length" }));
    const events: string[] = [];
    const stream = openai.responses.stream({ model, input: "Write a lot", max_output_tokens: 16 });
    stream.on("event", (e) => events.push(e.type));
    const final = await stream.finalResponse();
    expect(final.status).toBe("incomplete");
    expect(final.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(final.output_text).toBe("A long answer that was cut");
    expect(final.output[0]).toMatchObject({ type: "message", status: "incomplete" });
    expect(events.at(-1)).toBe("response.incomplete");
    expect(events).not.toContain("response.completed");
    expect(lastUpstream().body.max_tokens).toBe(16);

    upstream.reply({ kind: "fixture", name: vendor === "openai" ? "openai-text.json" : "anthropic-text.json" });
    const whole = await openai.responses.create({ model, input: "x", max_output_tokens: 16 });
    expect(whole.max_output_tokens).toBe(16);
  });

  test("reasoning from the upstream becomes a reasoning item before the message (on the OpenAI kind, DeepSeek's reasoning_content dialect)", async () => {
    upstream.reply(scripted(reasoningDialect(vendor), { reasoning: "The user greets; greet back.", text: "Hi!" }));
    const stream = openai.responses.stream({ model, input: "Hello" });
    let reasoning = "";
    stream.on("response.reasoning_text.delta", (e) => (reasoning += e.delta));
    const final = await stream.finalResponse();
    expect(reasoning).toBe("The user greets; greet back.");
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(final.output[0]).toMatchObject({ type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "The user greets; greet back." }] });
    expect(final.output_text).toBe("Hi!");

    // Sent back in the next turn (as Codex does), the reasoning item is not the next upstream's to read.
    await openai.responses.create({ model, input: [{ role: "user", content: "Hello" }, ...(final.output as OpenAI.Responses.ResponseInputItem[]), { role: "user", content: "Again" }] });
    expect(lastUpstream().rawBody).not.toContain("The user greets");
  });

  test("reasoning.summary asked: the thinking comes as the reasoning item's summary, streamed with OpenAI's summary events (on the OpenAI kind, DeepSeek's reasoning_content dialect)", async () => {
    const thinking = "The user greets; greet back.";
    upstream.reply(scripted(reasoningDialect(vendor), { reasoning: thinking, text: "Hi!" }));
    const stream = openai.responses.stream({ model, input: "Hello", reasoning: { summary: "auto" } });
    const events: ResponseStreamEvent[] = [];
    stream.on("event", (e) => events.push(e));
    let summary = "";
    stream.on("response.reasoning_summary_text.delta", (e) => (summary += e.delta));
    const final = await stream.finalResponse();
    expect(summary).toBe(thinking);
    const reasoningId = final.output[0]!.id;
    expect(final.output[0]).toEqual({ id: expect.stringMatching(/^rs_/), type: "reasoning", summary: [{ type: "summary_text", text: thinking }] });
    expect(final.output_text).toBe("Hi!");
    expect(final.reasoning).toMatchObject({ summary: "auto" });

    const types = events.map((e) => e.type);
    expect(types.slice(2, 10)).toEqual([
      "response.output_item.added",
      "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
      "response.output_item.done",
    ]);
    expect(types).not.toContain("response.reasoning_text.delta");
    for (const e of events.slice(3, 9)) expect(e).toMatchObject({ item_id: reasoningId, output_index: 0, summary_index: 0 });
    expect(events[3]).toMatchObject({ part: { type: "summary_text", text: "" } });
    expect(events[7]).toMatchObject({ text: thinking });
    expect(events[8]).toMatchObject({ part: { type: "summary_text", text: thinking } });
    expect(events[2]).toMatchObject({ item: { id: reasoningId, type: "reasoning", summary: [] } });
    expect((events[2] as OpenAI.Responses.ResponseOutputItemAddedEvent).item).not.toHaveProperty("content");

    // A whole body, asked for a detailed summary, carries the same item.
    upstream.reply(scriptedReply(reasoningDialect(vendor), { reasoning: thinking, text: "Hi!" }));
    const whole = await openai.responses.create({ model, input: "Hello", reasoning: { summary: "detailed" } });
    expect(whole.output[0]).toEqual({ id: expect.stringMatching(/^rs_/), type: "reasoning", summary: [{ type: "summary_text", text: thinking }] });
    expect(whole.output_text).toBe("Hi!");
  });

  test("a request that brings in stored answers (previous_response_id) waits for the large bodies' turn, as a body of their size would; one that does not, does not", async () => {
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    upstream.reply(scriptedReply(vendor, { text: "Paris." }));
    const first = await openai.responses.create({ model, input: "Capital of France?" });
    // Another tenant's large body being parsed: its turn is held here, then ended.
    const endTurn = await gw.app.services.parseTurns.take("other-key", "other-account");
    const order: string[] = [];
    upstream.reply(scriptedReply(vendor, { text: "Rome." }));
    upstream.reply(scriptedReply(vendor, { text: "Berlin." }));
    const chained = openai.responses.create({ model, previous_response_id: first.id, input: "And of Germany?" }).then(() => order.push("chained"));
    // Waiting behind the held turn (the held one and it).
    await until("the chained request waits for a turn", 10_000, () => gw.app.services.parseTurns.size === 2);
    await openai.responses.create({ model, input: "Capital of Italy?" }).then(() => order.push("plain"));
    expect(gw.app.services.parseTurns.size).toBe(2);
    order.push("turn ended");
    endTurn();
    await chained;
    expect(order).toEqual(["plain", "turn ended", "chained"]);
    // Its turn ended with its expansion, before its answer.
    expect(gw.app.services.parseTurns.size).toBe(0);
  });

  test("a chained request whose client left while it waited for its turn does none of its work once the turn comes", async () => {
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    upstream.reply(scriptedReply(vendor, { text: "Paris." }));
    const first = await openai.responses.create({ model, input: "Capital of France?" });
    const sent = upstream.requests.length;
    const endTurn = await gw.app.services.parseTurns.take("other-key", "other-account");
    const leaving = new AbortController();
    const chained = openai.responses.create({ model, previous_response_id: first.id, input: "And of Germany?" }, { signal: leaving.signal }).catch((e) => e);
    await until("the chained request waits for a turn", 10_000, () => gw.app.services.parseTurns.size === 2);
    leaving.abort();
    expect(await chained).toBeInstanceOf(OpenAI.APIUserAbortError);
    endTurn();
    await until("its turn came and went", 10_000, () => gw.app.services.parseTurns.size === 0);
    await gw.app.services.settled();
    expect(upstream.requests.length).toBe(sent);
    // Not even its chain was read.
    expect(stored.read).not.toContain(first.id);
  });

  test("previous_response_id continues stored answers: the upstream gets every earlier turn in its own format; instructions are not carried over", async () => {
    upstream.reply(scriptedReply(vendor, { text: "Paris." }));
    const first = await openai.responses.create({ model, instructions: "Answer in one word.", input: "Capital of France?" });
    expect((first as unknown as { store: boolean }).store).toBe(true);
    expect(first.previous_response_id).toBeNull();

    upstream.reply(scriptedReply(vendor, { text: "Berlin." }));
    const second = await openai.responses.create({ model, previous_response_id: first.id, input: "And of Germany?" });
    expect(second.output_text).toBe("Berlin.");
    expect(second.previous_response_id).toBe(first.id);
    expect(dialogue(lastUpstream().body)).toEqual([
      ["user", "Capital of France?"],
      ["assistant", "Paris."],
      ["user", "And of Germany?"],
    ]);
    // As at OpenAI, the earlier request's instructions do not carry over to the next.
    expect(lastUpstream().rawBody).not.toContain("Answer in one word.");

    // Streamed, continuing the continuation: the whole chain, oldest first.
    upstream.reply(scripted(vendor, { text: "Rome." }));
    const third = await openai.responses.stream({ model, previous_response_id: second.id, input: [{ role: "user", content: "And of Italy?" }] }).finalResponse();
    expect(third.output_text).toBe("Rome.");
    expect(dialogue(lastUpstream().body)).toEqual([
      ["user", "Capital of France?"],
      ["assistant", "Paris."],
      ["user", "And of Germany?"],
      ["assistant", "Berlin."],
      ["user", "And of Italy?"],
    ]);
  });

  test("previous_response_id after a function call: the call and the client's output reach the upstream as a call and its result", async () => {
    upstream.reply(scriptedReply(vendor, { calls: [{ id: "call_prev1", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const first = await openai.responses.create({ model, input: "Weather in Paris?", tools: [weather] });
    const call = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.call_id).toBe("call_prev1");

    upstream.reply(scriptedReply(vendor, { text: "18°C and sunny." }));
    const second = await openai.responses.create({ model, tools: [weather], previous_response_id: first.id, input: [{ type: "function_call_output", call_id: call.call_id, output: "18°C, sunny" }] });
    expect(second.output_text).toBe("18°C and sunny.");
    const sent = withoutCacheMarks(lastUpstream().body);
    if (vendor === "openai") {
      expect(sent.messages).toEqual([
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_prev1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
        { role: "tool", tool_call_id: "call_prev1", content: "18°C, sunny" },
      ]);
    } else {
      expect(sent.messages.slice(1)).toEqual([
        { role: "assistant", content: [{ type: "tool_use", id: "call_prev1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_prev1", content: "18°C, sunny" }] },
      ]);
    }
  });

  test("item_reference input items are replaced by the stored items they name, in the upstream's format", async () => {
    upstream.reply(scriptedReply(vendor, { text: "Let me check.", calls: [{ id: "call_ref1", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const first = await openai.responses.create({ model, input: "Weather in Paris?", tools: [weather] });
    const [message, call] = first.output as [OpenAI.Responses.ResponseOutputMessage, OpenAI.Responses.ResponseFunctionToolCall];
    upstream.reply(scriptedReply(vendor, { text: "Sunny." }));
    await openai.responses.create({
      model,
      tools: [weather],
      input: [
        { role: "user", content: "Weather in Paris?" },
        { type: "item_reference", id: message.id },
        { type: "item_reference", id: call.id! },
        { type: "function_call_output", call_id: "call_ref1", output: "sunny" },
      ],
    });
    const sent = withoutCacheMarks(lastUpstream().body);
    if (vendor === "openai") {
      expect(sent.messages.slice(1)).toEqual([
        { role: "assistant", content: "Let me check.", tool_calls: [{ id: "call_ref1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
        { role: "tool", tool_call_id: "call_ref1", content: "sunny" },
      ]);
    } else {
      expect(sent.messages.slice(1)).toEqual([
        { role: "assistant", content: [{ type: "text", text: "Let me check." }, { type: "tool_use", id: "call_ref1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_ref1", content: "sunny" }] },
      ]);
    }
  });

  test("hosted tools are dropped (and logged); namespace tools are flattened and their calls come back namespaced", async () => {
    upstream.reply(scripted(vendor, { calls: [{ id: "call_n1", name: "crm__lookup", arguments: '{"email":"a@b.c"}' }] }));
    const final = await openai.responses.stream({
      model,
      input: "Who is a@b.c?",
      tools: [
        { type: "web_search" },
        { type: "namespace", name: "crm", description: "CRM tools", tools: [{ type: "function", name: "lookup", parameters: { type: "object", properties: { email: { type: "string" } } }, strict: false }] },
      ] as OpenAI.Responses.Tool[],
    }).finalResponse();
    expect(final.output[0]).toMatchObject({ type: "function_call", name: "lookup", namespace: "crm", call_id: "call_n1" });
    const names = (lastUpstream().body.tools as any[]).map((t) => t.function?.name ?? t.name);
    expect(names).toEqual(["crm__lookup"]);
    expect(logLines.join("\n")).toContain("tool:web_search");
  });
});

describe("responses API requests the gateway refuses or adapts", () => {
  test("an unknown previous_response_id or item_reference is a 400 in OpenAI's error shape that names the id and what to send instead", async () => {
    const err = await openai.responses.create({ model: OPENAI_MODEL, input: "x", previous_response_id: "resp_123" }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toContain('previous_response_id "resp_123" names no response');
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", previous_response_id: "resp_123" });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { message: expect.stringContaining("Send the whole conversation in `input`"), type: "invalid_request_error", param: null, code: null } });

    const ref = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ role: "user", content: "x" }, { type: "item_reference", id: "msg_unknown_0" }] });
    expect(ref.status).toBe(400);
    const { error } = (await ref.json()) as any;
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toContain('item_reference "msg_unknown_0"');
    expect(error.message).toContain("Send the item itself");
    expect(error.message).toContain("store: false");
    expect(upstream.requests).toHaveLength(0);
  });

  test("store: true (or left out, OpenAI's default) keeps the answer: it says store true; the SDK's retrieve gets it back as returned", async () => {
    const before = stored.kept.length;
    const response = await openai.responses.create({ model: OPENAI_MODEL, input: "Hello SDK", store: true });
    expect(response.output_text).toBe("Echo: Hello SDK");
    expect((response as unknown as { store: boolean }).store).toBe(true);
    const omitted = await openai.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    expect((omitted as unknown as { store: boolean }).store).toBe(true);
    expect(stored.kept.slice(before)).toEqual([response.id, omitted.id]);
    expect(await openai.responses.retrieve(response.id)).toEqual(response);
  });

  test("store: false keeps nothing, streamed or not: the answer says store false, and its items cannot be referred to", async () => {
    const before = stored.kept.length;
    upstream.reply(scriptedReply("openai", { text: "Not kept.", calls: [{ id: "call_nk", name: "get_weather", arguments: "{}" }] }));
    const whole = await openai.responses.create({ model: OPENAI_MODEL, input: "x", tools: [weather], store: false });
    expect((whole as unknown as { store: boolean }).store).toBe(false);
    upstream.reply(scripted("deepseek", { reasoning: "Private thoughts.", text: "Not kept either." }));
    const streamed = await openai.responses.stream({ model: OPENAI_MODEL, input: "x", store: false, reasoning: { summary: "auto" } }).finalResponse();
    expect(streamed.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(stored.kept.length).toBe(before);

    for (const item of [...whole.output, ...streamed.output]) {
      const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ role: "user", content: "x" }, { type: "item_reference", id: item.id }] });
      expect(res.status).toBe(400);
    }
    for (const id of [whole.id, streamed.id]) {
      const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", previous_response_id: id });
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.message).toContain(id);
    }
    expect(upstream.requests).toHaveLength(2);
  });

  test("stored answers belong to the account that made them: another account's key cannot refer to them", async () => {
    const first = await openai.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    const account = await gw.app.services.accounts.createAccount("other", 10_000_000);
    const otherKey = (await gw.app.services.accounts.createKey(account.id, "other"))!.key;
    const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: otherKey, maxRetries: 0 });
    const byReference = await other.responses.create({ model: OPENAI_MODEL, input: [{ role: "user", content: "x" }, { type: "item_reference", id: first.output[0]!.id! }] }).catch((e) => e);
    expect(byReference).toBeInstanceOf(OpenAI.BadRequestError);
    const byPrevious = await other.responses.create({ model: OPENAI_MODEL, input: "x", previous_response_id: first.id }).catch((e) => e);
    expect(byPrevious).toBeInstanceOf(OpenAI.BadRequestError);
    // The owner still can.
    const own = await openai.responses.create({ model: OPENAI_MODEL, input: "Again", previous_response_id: first.id });
    expect(own.status).toBe("completed");
    expect(upstream.requests).toHaveLength(2);
  });

  test("a function tool in chat completions' nested shape is a 400 that says the Responses API's, not dropped", async () => {
    // Dropped as an unknown tool, it took tool_choice "required" with it: a text answer, no call.
    for (const model of [OPENAI_MODEL, ANTHROPIC_MODEL]) {
      const res = await post(gw, "/v1/responses", {
        model, input: "weather in Paris?", tool_choice: "required",
        tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
      });
      expect(res.status).toBe(400);
      const error = ((await res.json()) as { error: { type: string; message: string } }).error;
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toStartWith('a tool of type function needs a name: the Responses API\'s tools are flat ({"type": "function", "name", "parameters"})');
    }
    expect(upstream.requests).toHaveLength(0);
  });

  test("schema errors, unknown models and empty input get OpenAI-shaped errors with the spec's status", async () => {
    const bad = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", temperature: 5 });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error).toMatchObject({ type: "invalid_request_error", message: expect.stringContaining("temperature") });
    const missing = await openai.responses.create({ model: "no/such-model", input: "x" }).catch((e) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const empty = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [] });
    expect(empty.status).toBe(422);
    expect(((await empty.json()) as any).error).toMatchObject({ type: "invalid_request_error", message: "input must contain at least one item." });
    // Only items no chat upstream takes: the same 422, in the Responses API's words, naming them.
    const unsendable = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ type: "bogus" }, { type: "web_search_call", id: "ws_1" }] });
    expect(unsendable.status).toBe(422);
    const message = ((await unsendable.json()) as any).error.message as string;
    expect(message).toStartWith("input must contain at least one message");
    expect(message).toContain('"bogus"');
    expect(message).toContain('"web_search_call"');
    expect(message).not.toContain("messages");
    const role = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ type: "message", role: "robot", content: "x" }] });
    expect(role.status).toBe(400);
    expect(((await role.json()) as any).error.message).toContain('role "robot"');
    const image = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] }] });
    expect(image.status).toBe(400);
    // The part named as the client sent it, not as it travels through chat (a probe of the SDKs: "image_url").
    expect(((await image.json()) as any).error.message).toStartWith('content part type "input_image" is not supported');
    const file = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: [{ role: "user", content: [{ type: "input_text", text: "read" }, { type: "input_file", file_id: "file-abc" }] }] });
    expect(file.status).toBe(400);
    expect(((await file.json()) as any).error.message).toStartWith('content part type "input_file" is not supported');
    expect(upstream.requests).toHaveLength(0);
  });

  test("text.format json_schema and prompt_cache_key reach an OpenAI upstream in chat's words; reasoning.effort not a model that refuses it", async () => {
    const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"], additionalProperties: false };
    await openai.responses.create({
      model: OPENAI_MODEL,
      input: "x",
      text: { format: { type: "json_schema", name: "answer", schema, strict: true } },
      reasoning: { effort: "low" },
      prompt_cache_key: "session-1",
      temperature: 0.2,
      top_p: 0.9,
    });
    const sent = withoutCacheMarks(lastUpstream().body);
    expect(sent.response_format).toEqual({ type: "json_schema", json_schema: { name: "answer", schema, strict: true } });
    // gpt-4o-mini refuses reasoning_effort, so it is left out (structured-reasoning.test.ts: a reasoning model gets it).
    expect(sent.reasoning_effort).toBeUndefined();
    expect(sent.prompt_cache_key).toBe("session-1");
    expect(sent.temperature).toBe(0.2);
    expect(sent.top_p).toBe(0.9);
    expect(sent.input).toBeUndefined();
    expect(sent.text).toBeUndefined();
  });

  test("the models fallback list: a failing first model, answered by the next, still in the Responses shape", async () => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
    const response = await openai.responses.create({ model: OPENAI_MODEL, models: [ANTHROPIC_MODEL], input: "Hello SDK" } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(response.model).toBe(ANTHROPIC_MODEL);
    expect(response.output_text).toBe("Echo: Hello SDK");
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/chat/completions", "/v1/messages"]);
  });

  test("an upstream failing mid-stream: an error event, then response.failed; the SDK raises", async () => {
    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse", split: "frames", delayMs: 30 });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", stream: true });
    const frames = sseFrames(await res.text());
    const types = frames.map((f) => f.event);
    expect(types.slice(-2)).toEqual(["error", "response.failed"]);
    const failed = JSON.parse(frames.at(-1)!.data);
    expect(failed.response.status).toBe("failed");
    // Only whole answers are kept: a failed one says it was not, and is not found later.
    expect(failed.response.store).toBe(false);
    expect((await fetch(`${gw.url}/v1/responses/${failed.response.id}`, { headers: { authorization: `Bearer ${gw.key}` } })).status).toBe(404);
    expect(failed.response.error).toEqual({ code: "server_error", message: expect.any(String) });
    expect(types).not.toContain("response.completed");

    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse", split: "frames", delayMs: 30 });
    const err = await openai.responses.stream({ model: OPENAI_MODEL, input: "x" }).finalResponse().catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
  });

  /** An OpenAI chunk of text, as an upstream streams it. */
  const textChunk = (text: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`;

  test("an upstream that stops without finishing: the stream ends with response.failed, never completed; what went out stays in its output, incomplete", async () => {
    upstream.reply({ kind: "sse", delayMs: 30, chunks: [textChunk("Ha"), textChunk("lf")] });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", stream: true });
    const frames = sseFrames(await res.text());
    const types = frames.map((f) => f.event);
    expect(types.slice(-2)).toEqual(["error", "response.failed"]);
    expect(types).not.toContain("response.completed");
    const failed = JSON.parse(frames.at(-1)!.data).response;
    expect(failed.output).toEqual([expect.objectContaining({ type: "message", status: "incomplete", content: [{ type: "output_text", text: "Half", annotations: [] }] })]);
    expect(types).toContain("response.output_item.done");
  });

  /** The last usage record, once every settlement is written (a failed stream settles after its last frame). */
  /** The first keep-alive (and with it the head) at 100 ms: a stream can start before its first text. */
  const quick = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, server: { keepalive_ms: 100 } }));
  const lastRecord = async () => {
    await gw.app.services.settled();
    return gw.db.query<{ prompt_tokens: number; completion_tokens: number; status: string; estimated: number; cost_micro: number }, []>(
      "SELECT prompt_tokens, completion_tokens, status, estimated, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1",
    ).get();
  };

  test("a failed answer's usage is what it was charged for: the estimate when the upstream reported none", async () => {
    upstream.reply({ kind: "sse", delayMs: 30, chunks: [textChunk("The answer is"), textChunk(" forty and then some more words"), 'data: {"id":"c","object":"chat.co'] });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "What is the answer?", stream: true });
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.event).toBe("response.failed");
    const usage = JSON.parse(frames.at(-1)!.data).response.usage;
    const record = (await lastRecord())!;
    expect(record).toMatchObject({ status: "stream_failed", estimated: 1 });
    expect(record.cost_micro).toBeGreaterThan(0);
    expect(record.completion_tokens).toBeGreaterThan(0);
    expect(usage).toMatchObject({ input_tokens: record.prompt_tokens, output_tokens: record.completion_tokens, total_tokens: record.prompt_tokens + record.completion_tokens });
  });

  test("an Anthropic upstream's error frame after some text: the failed response's usage is the reported input and the estimated output, as charged", async () => {
    upstream.reply({ kind: "fixture", name: "anthropic-midstream-error.sse", split: "frames", delayMs: 30 });
    const res = await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, input: "Hi", stream: true });
    const frames = sseFrames(await res.text());
    expect(frames.map((f) => f.event).slice(-2)).toEqual(["error", "response.failed"]);
    const usage = JSON.parse(frames.at(-1)!.data).response.usage;
    const record = (await lastRecord())!;
    expect(record).toMatchObject({ status: "stream_failed", prompt_tokens: 12 });
    expect(record.completion_tokens).toBeGreaterThan(1);
    expect(usage).toMatchObject({ input_tokens: 12, output_tokens: record.completion_tokens });
  });

  test("a failure after the role chunk, before any answer: the head waited for the first text, so it is a 502, nothing charged", async () => {
    upstream.reply({ kind: "sse", delayMs: 30, chunks: [
      'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
      'data: {"id":"c","object":"chat.co',
    ] });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "What is the answer?", stream: true });
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.message).toMatch(/malformed|ended the answer early/);
    expect((await lastRecord())).toMatchObject({ status: "upstream_error", cost_micro: 0 });
  });

  test("a failure after the stream started (a keep-alive went out) but before any answer shows no estimate: nothing was charged", async () => {
    upstream.reply({ kind: "sse", delayMs: 250, chunks: [
      'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
      'data: {"id":"c","object":"chat.co',
    ] });
    const res = await post(quick, "/v1/responses", { model: OPENAI_MODEL, input: "What is the answer?", stream: true });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.event).toBe("response.failed");
    expect(JSON.parse(frames.at(-1)!.data).response.usage).toMatchObject({ input_tokens: 0, output_tokens: 0 });
    await quick.app.services.settled();
    expect(quick.db.query<{ status: string; cost_micro: number }, []>("SELECT status, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()).toMatchObject({ status: "stream_failed", cost_micro: 0 });
  });

  test("a failure in what arrived before the stream started: a 502 the SDK raises, nothing charged", async () => {
    upstream.reply({ kind: "sse", chunks: ['data: {"id":"c","object":"chat.co'] });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "What is the answer?", stream: true });
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.message).toMatch(/malformed|ended the answer early/);
    expect((await lastRecord())).toMatchObject({ status: "upstream_error", cost_micro: 0 });
  });
});

describe("storage switched off (responses.store_max_bytes: 0)", () => {
  const off = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, responses: { store_max_bytes: 0 } }));

  test("answers say store false; references are refused as unsupported before anything reaches the upstream", async () => {
    const client = new OpenAI({ baseURL: `${off.url}/v1`, apiKey: off.key, maxRetries: 0 });
    const first = await client.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    expect((first as unknown as { store: boolean }).store).toBe(false);
    const byReference = await client.responses.create({ model: OPENAI_MODEL, input: [{ role: "user", content: "x" }, { type: "item_reference", id: first.output[0]!.id! }] }).catch((e) => e);
    expect(byReference).toBeInstanceOf(OpenAI.BadRequestError);
    expect(byReference.message).toContain("configured to store no responses");
    expect(byReference.message).toContain("store: false");
    const byPrevious = await client.responses.create({ model: OPENAI_MODEL, input: "x", previous_response_id: first.id }).catch((e) => e);
    expect(byPrevious).toBeInstanceOf(OpenAI.BadRequestError);
    expect(byPrevious.message).toContain("previous_response_id is not supported");
    expect(upstream.requests).toHaveLength(1);
  });
});

describe("a store that fails to keep", () => {
  const failing = useGateway(() => ({
    upstreamUrl: upstream.url,
    retry: { max_retries: 0 },
    responseStore: { ...NO_RESPONSE_STORE, enabled: true, maxAnswerBytes: 1 << 20, keep: async () => { throw new RangeError("out of memory"); } },
  }));

  test("fails no answer, streamed or not: the client gets it whole, and its final response says store false", async () => {
    const client = new OpenAI({ baseURL: `${failing.url}/v1`, apiKey: failing.key, maxRetries: 0 });
    const whole = await client.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    expect(whole.output_text).toBe("Echo: Hello SDK");
    expect((whole as unknown as { store: boolean }).store).toBe(false);
    const streamed = await client.responses.stream({ model: ANTHROPIC_MODEL, input: "Hello SDK" }).finalResponse();
    expect(streamed.status).toBe("completed");
    expect(streamed.output_text).toBe("Echo: Hello SDK");
    expect((streamed as unknown as { store: boolean }).store).toBe(false);
  });
});

describe("byte-split streams", () => {
  test.each([
    ["OpenAI", OPENAI_MODEL, "openai-tools.sse"],
    ["Anthropic", ANTHROPIC_MODEL, "anthropic-tools.sse"],
  ])("%s upstream split at every byte: the SDK reads the gateway's Responses stream", async (_name, model, fixture) => {
    upstream.reply({ kind: "fixture", name: fixture, split: "bytes" });
    const final = await openai.responses.stream({ model, input: "Weather in Paris?", tools: [weather] }).finalResponse();
    const call = final.output.find((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(JSON.parse(call.arguments)).toEqual({ city: "Paris" });
  });

  test("the gateway's own Responses stream, handed to the SDK one byte at a time, parses to the same response", async () => {
    // The real answer, re-delivered to the SDK's SSE parser in one-byte chunks.
    const byteByByte = new OpenAI({
      baseURL: `${gw.url}/v1`,
      apiKey: gw.key,
      maxRetries: 0,
      fetch: async (url, init) => {
        const res = await fetch(url, init);
        const bytes = new Uint8Array(await res.arrayBuffer());
        let i = 0;
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (i < bytes.length) controller.enqueue(bytes.slice(i, ++i));
            else controller.close();
          },
        });
        return new Response(body, { status: res.status, headers: res.headers });
      },
    });
    upstream.reply(scripted("anthropic", { reasoning: "Think.", text: "Checking.", calls: [{ id: "toolu_1", name: "get_weather", arguments: '{"city":"Paris"}' }] }));
    const final = await byteByByte.responses.stream({ model: ANTHROPIC_MODEL, input: "Weather?", tools: [weather] }).finalResponse();
    expect(final.status).toBe("completed");
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message", "function_call"]);
    expect(final.output_text).toBe("Checking.");
    expect(final.output[2]).toMatchObject({ call_id: "toolu_1", arguments: '{"city":"Paris"}' });
  });
});
