import { describe, expect, test } from "bun:test";
import { chatToResponses } from "../../../src/formats/openai-responses/chat-to-responses.ts";
import { prepareUpstream } from "../../../src/formats/prepare-upstream.ts";
import { CARRIED_THINKING, openaiReasoningSignature } from "../../../src/formats/common/carried-thinking.ts";
import { upstreamTraits } from "../../../src/formats/common/model-traits.ts";
import type { ChatRequest } from "../../../src/formats/openai-chat/schema.ts";
import type { ModelConfig } from "../../../src/config/schema.ts";
import type { ResolvedProvider } from "../../../src/config/load-config.ts";

const model = (upstream_model: string): ModelConfig => ({ id: `p/${upstream_model}`, provider: "p", upstream_model, upstream_api: "responses", category: "text", context_length: 1_000_000 }) as ModelConfig;
const provider = { id: "p", kind: "openai", base_url: "https://api.example/v1" } as unknown as ResolvedProvider;

describe("chat request → Responses API request", () => {
  test("messages become input items: instructions, developer turns, images, tool calls and their outputs, carried reasoning", () => {
    const assistant: Record<string | symbol, unknown> = {
      role: "assistant",
      content: "Looking.",
      tool_calls: [{ id: "call_1", type: "function", function: { name: "look", arguments: '{"at":"x"}' } }],
    };
    assistant[CARRIED_THINKING] = [
      { type: "thinking", thinking: "my plan", signature: openaiReasoningSignature("ENC1") },
      // Anthropic's own signed thinking: OpenAI cannot read it.
      { type: "thinking", thinking: "claude", signature: "EqQBCkgIAhABGAIiQ" },
    ];
    const body = chatToResponses(
      {
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Use tools." }] },
          { role: "user", content: [{ type: "text", text: "What is here?" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } }, { type: "input_audio", input_audio: {} }] },
          assistant as never,
          { role: "tool", tool_call_id: "call_1", content: "found it" },
          { role: "system", content: "Late rule." },
          { role: "assistant", content: null, refusal: "I won't." } as never,
        ],
      } as ChatRequest,
      "gpt-6-sol",
      1000,
      upstreamTraits("openai", model("gpt-6-sol")),
    );
    expect(body.instructions).toBe("Be brief.\n\nUse tools.");
    expect(body.input).toEqual([
      { role: "user", content: [{ type: "input_text", text: "What is here?" }, { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" }] },
      { type: "reasoning", summary: [{ type: "summary_text", text: "my plan" }], encrypted_content: "ENC1" },
      { role: "assistant", content: "Looking." },
      { type: "function_call", call_id: "call_1", name: "look", arguments: '{"at":"x"}' },
      { type: "function_call_output", call_id: "call_1", output: "found it" },
      { role: "developer", content: "Late rule." },
      { role: "assistant", content: "I won't." },
    ]);
    expect(body).toMatchObject({ model: "gpt-6-sol", store: false, max_output_tokens: 1000, include: ["reasoning.encrypted_content"], reasoning: { summary: "auto" } });
  });

  test("tools are not strict unless the client said so; tool_choice, response_format and verbosity find their places", () => {
    const notes: { dropped?: string[] } = {};
    const body = chatToResponses(
      {
        messages: [{ role: "user", content: "hi" }],
        tools: [
          { type: "function", function: { name: "loose", parameters: { type: "object" } } },
          { type: "function", function: { name: "tight", description: "d", parameters: { type: "object", properties: {}, additionalProperties: false }, strict: true } },
          { type: "custom", custom: { name: "free" } } as never,
        ],
        tool_choice: { type: "function", function: { name: "tight" } },
        parallel_tool_calls: false,
        response_format: { type: "json_schema", json_schema: { name: "answer", schema: { type: "object" }, strict: true } },
        verbosity: "low",
        reasoning_effort: "high",
        stop: ["END"],
        seed: 7,
        user: "u1",
        service_tier: "flex",
      } as ChatRequest,
      "gpt-6-sol",
      500,
      upstreamTraits("openai", model("gpt-6-sol")),
      notes,
    );
    expect(body.tools).toEqual([
      { type: "function", name: "loose", parameters: { type: "object" }, strict: false },
      { type: "function", name: "tight", description: "d", parameters: { type: "object", properties: {}, additionalProperties: false }, strict: true },
    ]);
    expect(body.tool_choice).toEqual({ type: "function", name: "tight" });
    expect(body.parallel_tool_calls).toBe(false);
    expect(body.text).toEqual({ format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true }, verbosity: "low" });
    expect(body.reasoning).toEqual({ effort: "high", summary: "auto" });
    expect(body).toMatchObject({ user: "u1", service_tier: "flex" });
    expect(body).not.toHaveProperty("stop");
    expect(body).not.toHaveProperty("seed");
    expect(notes.dropped).toEqual(expect.arrayContaining([expect.stringContaining("custom"), expect.stringContaining("stop"), expect.stringContaining("seed")]));
  });

  test("effort none asks for no reasoning summary; a model that does not reason is sent no reasoning", () => {
    const none = chatToResponses({ messages: [{ role: "user", content: "hi" }], reasoning_effort: "none" } as ChatRequest, "gpt-6-luna", 10, upstreamTraits("openai", model("gpt-6-luna")));
    expect(none.reasoning).toEqual({ effort: "none" });
    expect(none).not.toHaveProperty("include");
    const old = chatToResponses({ messages: [{ role: "user", content: "hi" }], reasoning_effort: "high" } as ChatRequest, "gpt-4.1", 10, upstreamTraits("openai", model("gpt-4.1")));
    expect(old).not.toHaveProperty("reasoning");
    expect(old).not.toHaveProperty("include");
  });

  test("legacy functions are sent as function tools", () => {
    const body = chatToResponses(
      { messages: [{ role: "user", content: "hi" }, { role: "assistant", content: null, function_call: { name: "f", arguments: "{}" } }, { role: "function", name: "f", content: "ok" }], functions: [{ name: "f", parameters: { type: "object" } }] } as unknown as ChatRequest,
      "gpt-6-sol",
      10,
    );
    expect(body.tools).toEqual([{ type: "function", name: "f", parameters: { type: "object" }, strict: false }]);
    expect((body.input as { type?: string }[]).map((i) => i.type ?? "message")).toEqual(["message", "function_call", "function_call_output"]);
  });
});

describe("prepareUpstream for upstream_api responses", () => {
  test("GPT-6 Sol with tools keeps the effort asked: no reasoning_effort none as on chat completions", () => {
    const { body } = prepareUpstream("openai", { model: "x", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }], reasoning_effort: "high", stream: true }, model("gpt-6-sol"), provider, 4096);
    expect(body).toMatchObject({ reasoning: { effort: "high", summary: "auto" }, max_output_tokens: 4096, stream: true });
    expect(body).not.toHaveProperty("reasoning_effort");
    expect(body).not.toHaveProperty("stream_options");
  });

  test("an Anthropic request (Claude Code's thinking) becomes a reasoning effort; verbosity goes to GPT-5 and later only", () => {
    const { body } = prepareUpstream(
      "anthropic",
      { model: "claude-sonnet-4-5", max_tokens: 32000, system: "You are Claude Code.", messages: [{ role: "user", content: "fix it" }], thinking: { type: "enabled", budget_tokens: 31999 }, tools: [{ name: "Bash", input_schema: { type: "object" } }] },
      model("gpt-6.1-sol"),
      provider,
      32000,
    );
    expect(body).toMatchObject({ instructions: "You are Claude Code.", reasoning: { effort: "high", summary: "auto" }, tools: [{ type: "function", name: "Bash", parameters: { type: "object" }, strict: false }] });
    const { body: old } = prepareUpstream("openai", { messages: [{ role: "user", content: "hi" }], verbosity: "low" }, model("o3"), provider, 10);
    expect(old).not.toHaveProperty("text");
  });
});

describe("reasoning out of sight on the Responses upstream", () => {
  test("an answer asked to reason (reasoning.effort) is read to its end for its usage; effort none is not", async () => {
    const { reasonsOutOfSight } = await import("../../../src/gateway/unseen-reasoning.ts");
    const gpt41 = model("gpt-4.1");
    expect(reasonsOutOfSight("openai", gpt41, { reasoning: { effort: "high" } })).toBe(true);
    expect(reasonsOutOfSight("openai", model("gpt-6-sol"), { reasoning: { effort: "none" } })).toBe(false);
    expect(reasonsOutOfSight("openai", gpt41, {})).toBe(false);
  });
});

describe("chat's allowed_tools → the Responses API's", () => {
  const tool = (name: string) => ({ type: "function" as const, function: { name, parameters: { type: "object", properties: {} } } });
  const ask = (mode: string, names: string[]) =>
    chatToResponses(
      { messages: [{ role: "user", content: "go" }], tools: [tool("a"), tool("b"), tool("c")], tool_choice: { type: "allowed_tools", allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) } } } as unknown as ChatRequest,
      "gpt-6.1-sol",
      1000,
    );
  test("the subset and its mode reach the upstream (every tool still listed); dropped, a required subset could be answered in text", () => {
    const body = ask("required", ["a", "b"]);
    expect(body.tool_choice).toEqual({ type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "a" }, { type: "function", name: "b" }] });
    expect((body.tools as unknown[]).length).toBe(3);
    expect(ask("auto", ["c"]).tool_choice).toEqual({ type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "c" }] });
  });
});
