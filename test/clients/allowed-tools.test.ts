/**
 * The openai SDK's `tool_choice: {type: "allowed_tools", allowed_tools: {mode, tools}}` on chat
 * completions, to an Anthropic upstream. Anthropic has no allowed subset, so the mode decides, as
 * on the Responses path: `required` must call a tool (`any`, or the one tool by name when the
 * subset holds one), `auto` may. Before, the choice was dropped: a `required` subset reached
 * Anthropic as its default `auto`, and the model could answer without calling anything (an SDK
 * probe, seventeenth session).
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
let openai: OpenAI;
beforeAll(() => {
  openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
});

const fn = (name: string): OpenAI.Chat.Completions.ChatCompletionFunctionTool => ({ type: "function", function: { name, parameters: { type: "object", properties: { q: { type: "string" } } } } });
const tools = [fn("search"), fn("fetch"), fn("delete_file")];
const allowed = (mode: "auto" | "required", names: string[]): OpenAI.Chat.Completions.ChatCompletionAllowedToolChoice => ({
  type: "allowed_tools",
  allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) },
});
const sent = () => upstream.requests.at(-1)!.body;

async function ask(tool_choice: OpenAI.Chat.Completions.ChatCompletionToolChoiceOption, extra: Partial<OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming> = {}) {
  const completion = await openai.chat.completions.create({ model: ANTHROPIC_MODEL, tools, tool_choice, messages: [{ role: "user", content: "Find the docs." }], ...extra });
  expect(completion.choices[0]!.message.content).toBe("Echo: Find the docs.");
  return sent();
}

describe("allowed_tools → an Anthropic upstream", () => {
  test("mode required over several tools: the model must call one (any); every tool is still listed", async () => {
    const body = await ask(allowed("required", ["search", "fetch"]));
    expect(body.tool_choice).toEqual({ type: "any" });
    expect(body.tools.map((t: { name: string }) => t.name)).toEqual(["search", "fetch", "delete_file"]);
  });

  test("mode required over one tool: that tool by name", async () => {
    expect((await ask(allowed("required", ["search"]))).tool_choice).toEqual({ type: "tool", name: "search" });
  });

  test("mode auto: auto, with parallel_tool_calls false kept as Anthropic's flag", async () => {
    expect((await ask(allowed("auto", ["search"]))).tool_choice).toEqual({ type: "auto" });
    expect((await ask(allowed("required", ["search", "fetch"]), { parallel_tool_calls: false })).tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
  });
});

test("an OpenAI upstream gets the choice as the client sent it", async () => {
  const choice = allowed("required", ["search"]);
  await openai.chat.completions.create({ model: OPENAI_MODEL, tools, tool_choice: choice, messages: [{ role: "user", content: "Find the docs." }] });
  expect(sent().tool_choice).toEqual(choice);
});

test("the Responses API: an Anthropic upstream reads the subset by its mode (one tool by name, several any); an OpenAI upstream keeps the subset", async () => {
  const rtools: OpenAI.Responses.Tool[] = ["search", "fetch", "delete_file"].map((name) => ({ type: "function", name, parameters: { type: "object", properties: {} }, strict: false }));
  const choice = (names: string[], mode: "auto" | "required" = "required"): OpenAI.Responses.ToolChoiceAllowed => ({ type: "allowed_tools", mode, tools: names.map((name) => ({ type: "function", name })) });
  await openai.responses.create({ model: ANTHROPIC_MODEL, store: false, tools: rtools, tool_choice: choice(["fetch"]), input: "Find the docs." });
  expect(sent().tool_choice).toEqual({ type: "tool", name: "fetch" });
  await openai.responses.create({ model: ANTHROPIC_MODEL, store: false, tools: rtools, tool_choice: choice(["search", "fetch"]), input: "Find the docs." });
  expect(sent().tool_choice).toEqual({ type: "any" });
  // An OpenAI chat upstream gets chat's allowed_tools: the model may call search or fetch, never delete_file.
  for (const mode of ["auto", "required"] as const) {
    await openai.responses.create({ model: OPENAI_MODEL, store: false, tools: rtools, tool_choice: choice(["search", "fetch"], mode), input: "Find the docs." });
    expect(sent().tool_choice).toEqual(allowed(mode, ["search", "fetch"]));
    expect(sent().tools.map((t: { function: { name: string } }) => t.function.name)).toEqual(["search", "fetch", "delete_file"]);
  }
});
