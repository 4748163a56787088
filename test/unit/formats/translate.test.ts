import { describe, expect, test } from "bun:test";
import { openaiRequestToAnthropic } from "../../../src/formats/openai-chat/openai-to-anthropic.ts";
import { anthropicRequestToOpenAI } from "../../../src/formats/anthropic-messages/anthropic-to-openai.ts";
import { prepareUpstreamBody, effectiveMaxTokens, fitThinkingBudget, promptText } from "../../../src/formats/prepare-upstream.ts";
import type { ResolvedProvider } from "../../../src/config/load-config.ts";
import type { ModelConfig } from "../../../src/config/schema.ts";

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather by city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

describe("OpenAI request → Anthropic", () => {
  test("system, developer, tool calls and tool results", () => {
    const out = openaiRequestToAnthropic(
      {
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Use metric units." }] },
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
          { role: "tool", tool_call_id: "call_1", content: "18°C" },
          { role: "user", content: "And tomorrow?" },
        ],
        tools,
        tool_choice: "required",
        parallel_tool_calls: false,
        temperature: 1.6,
        stop: "END",
        user: "u-1",
        stream: true,
      },
      "claude-sonnet-4-5",
      1000,
    );
    expect(out.system).toBe("Be brief.\n\nUse metric units.");
    expect(out.model).toBe("claude-sonnet-4-5");
    expect(out.max_tokens).toBe(1000);
    expect(out.temperature).toBe(1);
    expect(out.stop_sequences).toEqual(["END"]);
    // A pseudonym, as the other direction sends (formats/common/end-user-id.ts).
    expect(out.metadata).toEqual({ user_id: new Bun.CryptoHasher("sha256").update("u-1").digest("hex") });
    expect(out.stream).toBe(true);
    expect(out.tools).toEqual([{ name: "get_weather", description: "Weather by city", input_schema: tools[0]!.function.parameters }]);
    expect(out.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
    expect(out.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather in Paris?" }] },
      // Prompt-cache marks (the client cannot set them): the end of the conversation and of the turn before.
      { role: "assistant", content: [{ type: "tool_use", id: "call_1", name: "get_weather", input: { city: "Paris" }, cache_control: { type: "ephemeral" } }] },
      // The tool result and the next user text share one user turn: Anthropic wants alternating roles.
      { role: "user", content: [{ type: "tool_result", tool_use_id: "call_1", content: "18°C" }, { type: "text", text: "And tomorrow?", cache_control: { type: "ephemeral" } }] },
    ]);
  });

  test("tool call ids Anthropic refuses (vLLM's `functions.get_weather:0`) are rewritten the same in the call and its result; valid ones go as they are", () => {
    const out = openaiRequestToAnthropic({
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: null, tool_calls: [
          { id: "functions.get_weather:0", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "functions.get_weather:1", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
          { id: "call_ok-1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
        ] },
        { role: "tool", tool_call_id: "functions.get_weather:0", content: "18°C" },
        { role: "tool", tool_call_id: "functions.get_weather:1", content: "20°C" },
        { role: "tool", tool_call_id: "call_ok-1", content: "2°C" },
      ],
    } as never, "m", 10);
    const calls = (out.messages[1]!.content as unknown as { id: string }[]).map((b) => b.id);
    const results = (out.messages[2]!.content as unknown as { tool_use_id: string }[]).map((b) => b.tool_use_id);
    expect(results).toEqual(calls);
    for (const id of calls) expect(id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(new Set(calls).size).toBe(3);
    expect(calls[2]).toBe("call_ok-1");
  });

  test("prompt-cache marks: two, on the last blocks that may carry one; none with models[].prompt_cache off", () => {
    const marks = (out: { messages: { content: unknown }[] }) => JSON.stringify(out).split('"cache_control"').length - 1;
    const long = openaiRequestToAnthropic({ messages: [{ role: "system", content: "s" }, { role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }, { role: "assistant", content: "d" }, { role: "user", content: "e" }] }, "m", 10);
    expect(marks(long)).toBe(2);
    expect(long.messages.at(-1)!.content).toEqual([{ type: "text", text: "e", cache_control: { type: "ephemeral" } }]);
    expect(long.messages.at(-2)!.content).toEqual([{ type: "text", text: "d", cache_control: { type: "ephemeral" } }]);
    expect(typeof long.system).toBe("string");
    // Never on a text block of only whitespace (Anthropic refuses those), nor does an empty part add a line;
    // a last user turn of whitespace is kept as written (dropped, the assistant's turn would be continued).
    const blank = openaiRequestToAnthropic({ messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: [{ type: "text", text: "" }, { type: "text", text: "  " }] }] } as never, "m", 10);
    expect(blank.messages.at(-1)).toEqual({ role: "user", content: [{ type: "text", text: "  " }] });
    expect(blank.messages.at(-2)!.content).toEqual([{ type: "text", text: "b", cache_control: { type: "ephemeral" } }]);
    expect(marks(blank)).toBe(2);
    const one = openaiRequestToAnthropic({ messages: [{ role: "user", content: "only" }] }, "m", 10);
    expect(marks(one)).toBe(1);
    const off = openaiRequestToAnthropic({ messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }] }, "m", 10, { reasoning: undefined, structuredOutput: "native", cacheBreakpoints: false });
    expect(marks(off)).toBe(0);
  });

  test("named tool choice and auto", () => {
    const named = openaiRequestToAnthropic({ messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "function", function: { name: "get_weather" } } }, "m", 10);
    expect(named.tool_choice).toEqual({ type: "tool", name: "get_weather" });
    const auto = openaiRequestToAnthropic({ messages: [{ role: "user", content: "x" }], tools, tool_choice: "auto" }, "m", 10);
    expect(auto.tool_choice).toEqual({ type: "auto" });
  });

  test("image parts are refused", () => {
    expect(() =>
      openaiRequestToAnthropic({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AA" } }] }] }, "m", 10),
    ).toThrow(/image/);
  });
});

describe("Anthropic request → OpenAI: tool call ids", () => {
  test("an id past OpenAI's 40 characters is shortened the same in the call and its result; a short one goes as it is", () => {
    const long = `toolu_${"x".repeat(60)}`;
    const out = anthropicRequestToOpenAI({
      max_tokens: 10,
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: [{ type: "tool_use", id: long, name: "get_weather", input: { city: "Paris" } }, { type: "tool_use", id: "toolu_short", name: "get_weather", input: { city: "Rome" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: long, content: "18°C" }, { type: "tool_result", tool_use_id: "toolu_short", content: "20°C" }] },
      ],
    } as never, "m", 10, "max_tokens");
    const assistant = out.messages.find((m: { role: string }) => m.role === "assistant") as { tool_calls: { id: string }[] };
    const ids = assistant.tool_calls.map((c) => c.id);
    const answered = out.messages.filter((m: { role: string }) => m.role === "tool").map((m: { tool_call_id?: string }) => m.tool_call_id);
    expect(answered).toEqual(ids);
    expect(ids[0]!.length).toBeLessThanOrEqual(40);
    expect(ids[0]).not.toBe(long);
    expect(ids[1]).toBe("toolu_short");
  });
});

describe("Anthropic request → OpenAI", () => {
  test("system blocks, tool_use and tool_result ordering", () => {
    const out = anthropicRequestToOpenAI(
      {
        system: [{ type: "text", text: "Be brief." }],
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: [{ type: "thinking", thinking: "hmm", signature: "sig" }, { type: "text", text: "Checking." }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "18°C" }] }, { type: "text", text: "Thanks" }] },
        ],
        tools: [{ name: "get_weather", description: "Weather", input_schema: { type: "object" } }, { type: "web_search_20250305", name: "web_search" }],
        tool_choice: { type: "any", disable_parallel_tool_use: true },
        stop_sequences: ["END"],
        max_tokens: 100,
        stream: true,
        metadata: { user_id: "u-2" },
      },
      "gpt-4o-mini",
      100,
      "max_tokens",
    );
    expect(out.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "Checking.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "toolu_1", content: "18°C" },
      { role: "user", content: "Thanks" },
    ]);
    expect(out.tools).toEqual([{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object" } } }]);
    expect(out.tool_choice).toBe("required");
    expect(out.parallel_tool_calls).toBe(false);
    expect(out.stop).toEqual(["END"]);
    expect(out.stream_options).toEqual({ include_usage: true });
    expect(out.max_tokens).toBe(100);
    // Another vendor never sees the client's user id (Claude Code's holds device and session ids), only a stable hash of it.
    expect(out.user).toBe(new Bun.CryptoHasher("sha256").update("u-2").digest("hex"));
    // OpenAI refuses a `user` over 64 characters.
    expect((out.user as string).length).toBeLessThanOrEqual(64);
  });

  test("max_completion_tokens when the provider asks for it", () => {
    const out = anthropicRequestToOpenAI({ messages: [{ role: "user", content: "x" }], max_tokens: 5 }, "o3", 5, "max_completion_tokens");
    expect(out.max_completion_tokens).toBe(5);
    expect(out.max_tokens).toBeUndefined();
  });

  test("image blocks are refused, also inside tool results", () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: "AA" } };
    expect(() => anthropicRequestToOpenAI({ messages: [{ role: "user", content: [image] }] }, "m", 5, "max_tokens")).toThrow(/image/);
    expect(() =>
      anthropicRequestToOpenAI({ messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [image] }] }] }, "m", 5, "max_tokens"),
    ).toThrow(/image/);
  });
});

describe("same-format preparation", () => {
  const openaiProvider = { id: "p", kind: "openai", base_url: "http://x", apiKey: "k", timeouts: {} } as unknown as ResolvedProvider;
  const anthropicProvider = { ...openaiProvider, kind: "anthropic" } as ResolvedProvider;
  const model = { id: "v/m", upstream_model: "up-model" } as ModelConfig;

  test("OpenAI passthrough keeps unknown fields, caps tokens, forces usage", () => {
    const body = { model: "v/m", models: ["v/m"], messages: [], stream: true, response_format: { type: "json_object" }, logprobs: true, max_tokens: 9000, max_completion_tokens: 20000 };
    const out = prepareUpstreamBody("openai", body, model, openaiProvider, effectiveMaxTokens(9000, 8192)) as Record<string, unknown>;
    expect(out.model).toBe("up-model");
    expect(out.models).toBeUndefined();
    expect(out.response_format).toEqual({ type: "json_object" });
    expect(out.logprobs).toBe(true);
    expect(out.max_tokens).toBe(8192);
    expect(out.max_completion_tokens).toBeUndefined();
    expect(out.stream_options).toEqual({ include_usage: true });
    expect(body.max_tokens).toBe(9000); // the client's body is not mutated
  });

  test("Anthropic passthrough keeps thinking and caps max_tokens", () => {
    const body = { model: "v/m", messages: [], max_tokens: 50_000, thinking: { type: "enabled", budget_tokens: 2000 } };
    const out = prepareUpstreamBody("anthropic", body, model, anthropicProvider, effectiveMaxTokens(50_000, 8192)) as Record<string, unknown>;
    expect(out.max_tokens).toBe(8192);
    expect(out.thinking).toEqual({ type: "enabled", budget_tokens: 2000 });
    expect(out.model).toBe("up-model");
  });

  test("Anthropic passthrough: another vendor's tool ids become ones Anthropic takes, call and result alike; Anthropic's own history is not copied", () => {
    const raw = "functions.get_weather:0";
    const messages = [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: [{ type: "tool_use", id: raw, name: "get_weather", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: raw, content: "18°C" }] },
    ];
    const out = prepareUpstreamBody("anthropic", { model: "v/m", messages, max_tokens: 10 }, model, anthropicProvider, 10) as { messages: { content: unknown }[] };
    const blocks = (i: number) => out.messages[i]!.content as { id?: string; tool_use_id?: string }[];
    expect(blocks(1)[0]!.id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(blocks(2)[0]!.tool_use_id).toBe(blocks(1)[0]!.id!);
    expect(out.messages[0]).toBe(messages[0]!);
    expect(messages[1]!.content[0]).toMatchObject({ id: raw }); // the client's body is not mutated

    const own = [messages[0]!, { role: "assistant", content: [{ type: "tool_use", id: "toolu_01A", name: "get_weather", input: {} }] }];
    expect((prepareUpstreamBody("anthropic", { model: "v/m", messages: own, max_tokens: 10 }, model, anthropicProvider, 10) as { messages: unknown }).messages).toBe(own);
  });

  test("missing max_tokens gets the cap", () => {
    expect(effectiveMaxTokens(undefined, 8192)).toBe(8192);
    expect(effectiveMaxTokens(100, 8192)).toBe(100);
  });
});

describe("Anthropic request → OpenAI, what agent clients send", () => {
  const translate = (body: Record<string, unknown>) => anthropicRequestToOpenAI({ messages: [], ...body } as never, "gpt-4.1", 100, "max_tokens");

  test("system turns inside messages stay where they were, as system messages", () => {
    const out = translate({
      system: "top",
      messages: [
        { role: "user", content: "one" },
        { role: "system", content: [{ type: "text", text: "mid", cache_control: { type: "ephemeral" } }, { type: "text", text: "more" }] },
        { role: "assistant", content: "two" },
        { role: "system", content: "late" },
      ],
    });
    expect(out.messages).toEqual([
      { role: "system", content: "top" },
      { role: "user", content: "one" },
      { role: "system", content: "mid\nmore" },
      { role: "assistant", content: "two" },
      { role: "system", content: "late" },
    ]);
  });

  test("text blocks are separated by a newline, in every role", () => {
    const out = translate({
      system: [{ type: "text", text: "a" }, { type: "text", text: "b" }],
      messages: [
        { role: "user", content: [{ type: "text", text: "<reminder>" }, { type: "text", text: "Write it" }] },
        { role: "assistant", content: [{ type: "text", text: "First." }, { type: "text", text: "Second." }] },
      ],
    });
    expect(out.messages.map((m) => m.content)).toEqual(["a\nb", "<reminder>\nWrite it", "First.\nSecond."]);
  });

  test("a failed tool result says so in the tool message", () => {
    const out = translate({
      messages: [
        { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "Write", input: {} }, { type: "tool_use", id: "t2", name: "Read", input: {} }] },
        { role: "user", content: [
          { type: "tool_result", tool_use_id: "t1", is_error: true, content: "<tool_use_error>File has not been read yet</tool_use_error>" },
          { type: "tool_result", tool_use_id: "t2", is_error: false, content: [{ type: "text", text: "ok" }] },
        ] },
      ],
    });
    expect(out.messages.slice(1)).toEqual([
      { role: "tool", tool_call_id: "t1", content: "Error: <tool_use_error>File has not been read yet</tool_use_error>" },
      { role: "tool", tool_call_id: "t2", content: "ok" },
    ]);
  });

  test("Anthropic-only fields are not sent; at most 4 stop sequences; the user id only as a hash", () => {
    const userId = JSON.stringify({ device_id: "d".repeat(64), account_uuid: "", session_id: "s" });
    const out = translate({
      messages: [{ role: "user", content: "hi" }],
      thinking: { type: "enabled", budget_tokens: 31999 },
      output_config: { effort: "high" },
      context_management: { edits: [] },
      top_k: 5,
      service_tier: "auto",
      stop_sequences: ["1", "2", "3", "4", "5"],
      metadata: { user_id: userId },
    });
    expect(Object.keys(out).sort()).toEqual(["max_tokens", "messages", "model", "stop", "user"]);
    expect(out.stop).toEqual(["1", "2", "3", "4"]);
    expect(out.user).toMatch(/^[0-9a-f]{64}$/);
    expect(out.user).toBe(translate({ metadata: { user_id: userId } }).user);
    expect(JSON.stringify(out)).not.toContain("dddd");
  });
});

describe("thinking budget against the effective max_tokens", () => {
  const model = { id: "m/x" } as ModelConfig;
  const fit = (thinking: unknown, maxTokens: number, extra: Record<string, unknown> = {}, asked?: number) => {
    const body: Record<string, unknown> = { thinking, ...extra };
    fitThinkingBudget(body, maxTokens, model, undefined, asked);
    return body;
  };

  test("a budget at or over max_tokens comes down to ¾ of max_tokens; a valid one is left alone", () => {
    expect(fit({ type: "enabled", budget_tokens: 31999, display: "omitted" }, 8192).thinking).toEqual({ type: "enabled", budget_tokens: 6144, display: "omitted" });
    expect(fit({ type: "enabled", budget_tokens: 8192 }, 8192).thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
    expect(fit({ type: "enabled", budget_tokens: 4000 }, 8192).thinking).toEqual({ type: "enabled", budget_tokens: 4000 });
    expect(fit({ type: "adaptive" }, 100).thinking).toEqual({ type: "adaptive" });
  });

  test("under a cap (max_tokens lowered from what was asked), a budget over ¾ comes down to ¾; one within ¾ stays", () => {
    expect(fit({ type: "enabled", budget_tokens: 32_000 }, 8192, {}, 64_000).thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
    expect(fit({ type: "enabled", budget_tokens: 7000 }, 8192, {}, 64_000).thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
    expect(fit({ type: "enabled", budget_tokens: 6000 }, 8192, {}, 64_000).thinking).toEqual({ type: "enabled", budget_tokens: 6000 });
    // Not capped: the client's own split of its max_tokens.
    expect(fit({ type: "enabled", budget_tokens: 7000 }, 8192, {}, 8192).thinking).toEqual({ type: "enabled", budget_tokens: 7000 });
    // ¾ of 1,300 is 975, under the vendor's minimum: no thinking rather than none of the answer.
    expect(fit({ type: "enabled", budget_tokens: 32_000 }, 1300, {}, 64_000).thinking).toBeUndefined();
  });

  test("no room for 1024: thinking and the edits that clear it are dropped, other edits stay", () => {
    const edits = [{ type: "clear_thinking_20251015", keep: "all" }, { type: "clear_tool_uses_20250919" }];
    const out = fit({ type: "enabled", budget_tokens: 2000 }, 1024, { context_management: { edits } });
    expect(out.thinking).toBeUndefined();
    expect(out.context_management).toEqual({ edits: [edits[1]] });
    expect(fit({ type: "enabled", budget_tokens: 1024 }, 1025).thinking).toEqual({ type: "enabled", budget_tokens: 1024 });
  });
});

test("promptText counts a response schema as prompt, as the vendors do (OpenAI response_format, Anthropic output_config)", () => {
  const schema = { type: "object", properties: { distinctive_field_name: { type: "string" } } };
  const openai = promptText("openai", { messages: [{ role: "user", content: "hi" }], response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
  const anthropic = promptText("anthropic", { messages: [{ role: "user", content: "hi" }], output_config: { format: { type: "json_schema", schema } } });
  for (const text of [openai, anthropic]) expect(text).toContain("distinctive_field_name");
});

test("promptText reads every part the vendor reads: an assistant's refusal (as a part or the message's own) and a part of an unknown kind whole; not earlier turns' thinking, which the vendor drops", () => {
  const text = promptText("openai", {
    messages: [
      { role: "user", content: "question" },
      { role: "assistant", content: [{ type: "refusal", refusal: "REFUSAL-PART" }] },
      { role: "assistant", content: null, refusal: "REFUSAL-FIELD" },
      { role: "user", content: [{ type: "future_kind", payload: "UNKNOWN-PART" }] },
    ],
  });
  for (const piece of ["question", "REFUSAL-PART", "REFUSAL-FIELD", "UNKNOWN-PART"]) expect(text).toContain(piece);
  const anthropic = promptText("anthropic", { messages: [{ role: "assistant", content: [{ type: "thinking", thinking: "THOUGHT", signature: "s" }, { type: "redacted_thinking", data: "OPAQUE" }, { type: "text", text: "said" }] }] });
  expect(anthropic).not.toContain("THOUGHT");
  expect(anthropic).not.toContain("OPAQUE");
  expect(anthropic).toContain("said");
});
