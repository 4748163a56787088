/**
 * Reasoning items sent back whole, by id, without their encrypted content: what the openai SDK's
 * documented tool loop does (`input: [...input, ...response.output, {type: "function_call_output"}]`,
 * store left at its default) and what LangChain's `ChatOpenAI({useResponsesApi: true})` does with
 * the AIMessage it was given. OpenAI puts a stored reasoning item back from its id; on an Anthropic
 * upstream the gateway does the same from the kept answer, so the step after the tool results
 * thinks, starting with the signed block (the fake upstream refuses thinking otherwise, as
 * Anthropic does). Before, that step went without thinking (an SDK probe, seventeenth session).
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { ChatOpenAI } from "@langchain/openai";
import { HumanMessage, ToolMessage, type AIMessage } from "@langchain/core/messages";
import { z } from "zod";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, useGateway } from "../helpers/gateway.ts";
import { anthropicStream, scriptedReply, SCRIPTED_SIGNATURE } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream({ thinkingHistory: true });
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
let openai: OpenAI;
beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
});

const thought = "The user wants the weather; I should call the tool.";
const call = { id: "toolu_01W3ath3r", name: "get_weather", arguments: '{"city":"Paris"}' };
const tools: OpenAI.Responses.Tool[] = [
  { type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false }, strict: true },
];
const signedBlock = { type: "thinking", thinking: thought, signature: SCRIPTED_SIGNATURE };
/** The assistant turn of the last request the upstream received. */
const lastAssistant = () => upstream.requests.at(-1)!.body.messages.find((m: { role: string }) => m.role === "assistant");

/** A first step that thinks and calls the tool, and the request that continues it with the output items sent back whole. */
async function toolLoop(client: OpenAI, store: boolean | undefined) {
  upstream.reply(scriptedReply("anthropic", { reasoning: thought, text: "Let me look.", calls: [call] }));
  const first = await client.responses.create({ model: ANTHROPIC_MODEL, input: "Weather in Paris?", reasoning: { effort: "low" }, tools, ...(store === undefined ? {} : { store }) });
  const reasoning = first.output.find((item) => item.type === "reasoning")!;
  // Not asked for with `include`: the item the client holds has no encrypted content.
  expect(reasoning.encrypted_content ?? undefined).toBeUndefined();
  const fc = first.output.find((item) => item.type === "function_call")!;
  upstream.reply(scriptedReply("anthropic", { reasoning: "It is sunny.", text: "Sunny in Paris." }));
  const second = await client.responses.create({
    model: ANTHROPIC_MODEL,
    reasoning: { effort: "low" },
    tools,
    input: [{ role: "user", content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: "function_call_output", call_id: fc.call_id, output: "18°C, sunny" }],
  });
  return { first, second };
}

describe("openai SDK: a tool loop that sends response.output back, store left at its default", () => {
  test("the step after the tool results thinks, its assistant turn starting with the kept answer's signed thinking", async () => {
    const { second } = await toolLoop(openai, undefined);
    expect(second.output_text).toBe("Sunny in Paris.");
    expect(upstream.requests).toHaveLength(2);
    expect(upstream.requests[1]!.body.thinking).toEqual({ type: "enabled", budget_tokens: 1024 });
    expect(lastAssistant().content[0]).toEqual(signedBlock);
    expect(lastAssistant().content.at(-1)).toMatchObject({ type: "tool_use", id: call.id, name: "get_weather" });
  });

  test("a first step sent with store: false was not kept: the next step goes without thinking, as before", async () => {
    const { second } = await toolLoop(openai, false);
    expect(second.output_text).toBe("Sunny in Paris.");
    expect(upstream.requests[1]!.body.thinking).toBeUndefined();
    expect(lastAssistant().content[0]).toMatchObject({ type: "text", text: "Let me look." });
  });

  test("another account's reasoning item is not restored (its answer is not this account's)", async () => {
    upstream.reply(scriptedReply("anthropic", { reasoning: thought, text: "Let me look.", calls: [call] }));
    const first = await openai.responses.create({ model: ANTHROPIC_MODEL, input: "Weather in Paris?", reasoning: { effort: "low" }, tools });
    // A second account on the same gateway (the same store), holding the first one's output items.
    const account = await gw.app.services.accounts.createAccount("other", 1_000_000_000);
    const key = (await gw.app.services.accounts.createKey(account.id, "other"))!;
    const stranger = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key.key, maxRetries: 0 });
    const fc = first.output.find((item) => item.type === "function_call")!;
    upstream.reply(scriptedReply("anthropic", { text: "Sunny." }));
    await stranger.responses.create({
      model: ANTHROPIC_MODEL,
      reasoning: { effort: "low" },
      tools,
      input: [{ role: "user", content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: "function_call_output", call_id: fc.call_id, output: "sunny" }],
    });
    expect(upstream.requests.at(-1)!.body.thinking).toBeUndefined();
    expect(upstream.requests.at(-1)!.rawBody).not.toContain(SCRIPTED_SIGNATURE);
  });

  test("streamed with responses.stream(): the same", async () => {
    upstream.reply(anthropicStream({ reasoning: thought, text: "Let me look.", calls: [call] }));
    const first = await openai.responses.stream({ model: ANTHROPIC_MODEL, input: "Weather in Paris?", reasoning: { effort: "low" }, tools }).finalResponse();
    const fc = first.output.find((item) => item.type === "function_call")!;
    upstream.reply(anthropicStream({ text: "Sunny in Paris." }));
    const second = await openai.responses
      .stream({ model: ANTHROPIC_MODEL, reasoning: { effort: "low" }, tools, input: [{ role: "user", content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: "function_call_output", call_id: fc.call_id, output: "sunny" }] })
      .finalResponse();
    expect(second.output_text).toBe("Sunny in Paris.");
    expect(upstream.requests[1]!.body.thinking).toBeDefined();
    expect(lastAssistant().content[0]).toEqual(signedBlock);
  });
});

describe("LangChain ChatOpenAI on the Responses API", () => {
  test("a tool loop with reasoning: the step after the tool message thinks, with the signed block", async () => {
    // LangChain sends `reasoning` only to model names it knows reason (o…, gpt-5, gpt-6); for a
    // gateway id, `modelKwargs` says it.
    const model = new ChatOpenAI({ model: ANTHROPIC_MODEL, apiKey: gw.key, configuration: { baseURL: `${gw.url}/v1` }, maxRetries: 0, useResponsesApi: true, modelKwargs: { reasoning: { effort: "low" } } })
      .bindTools([{ name: "get_weather", description: "Weather by city", schema: z.object({ city: z.string() }) }]);
    upstream.reply(scriptedReply("anthropic", { reasoning: thought, text: "Let me look.", calls: [call] }));
    const first = (await model.invoke("Weather in Paris?")) as AIMessage;
    expect(first.tool_calls).toEqual([expect.objectContaining({ id: call.id, name: "get_weather", args: { city: "Paris" } })]);
    expect(upstream.requests[0]!.body.thinking).toBeDefined();
    upstream.reply(scriptedReply("anthropic", { reasoning: "It is sunny.", text: "Sunny in Paris." }));
    const second = await model.invoke([new HumanMessage("Weather in Paris?"), first, new ToolMessage({ tool_call_id: call.id, content: "18°C, sunny" })]);
    expect(second.text).toBe("Sunny in Paris.");
    expect(upstream.requests[1]!.body.thinking).toBeDefined();
    expect(lastAssistant().content[0]).toEqual(signedBlock);
  });
});
