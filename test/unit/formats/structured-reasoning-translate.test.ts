/**
 * Structured output and reasoning across the formats, as pure functions: the model traits the
 * translation reads, the effort ↔ budget table both ways, JSON schemas made acceptable to
 * Anthropic, both request translators, same-format preparation, the forced answer tool's
 * mapping back to text, and the encoders' thinking signatures and reasoning token counts.
 * The end-to-end tests with the SDKs are in test/e2e/structured-reasoning.test.ts.
 */
import { describe, expect, test } from "bun:test";
import type { ModelConfig } from "../../../src/config/schema.ts";
import type { ResolvedProvider } from "../../../src/config/load-config.ts";
import { resolveSettings } from "../../../src/config/load-config.ts";
import { claudeVersion, upstreamTraits, type UpstreamTraits } from "../../../src/formats/common/model-traits.ts";
import { anthropicReasoning, EFFORT_BUDGET, openaiReasoningEffort } from "../../../src/formats/common/reasoning.ts";
import { anthropicSchema, anthropicStructuredOutput, isOpenAIStrictSchema, openaiResponseFormat } from "../../../src/formats/common/structured-output.ts";
import { openaiRequestToAnthropic } from "../../../src/formats/openai-chat/openai-to-anthropic.ts";
import { anthropicRequestToOpenAI } from "../../../src/formats/anthropic-messages/anthropic-to-openai.ts";
import { prepareUpstream } from "../../../src/formats/prepare-upstream.ts";
import type { TranslationNotes } from "../../../src/formats/common/wire-types.ts";
import { createAnswerToolMapper } from "../../../src/formats/common/answer-tool.ts";
import type { StreamEvent } from "../../../src/streaming/events.ts";
import { createAnthropicEncoder, encodeAnthropicBody } from "../../../src/formats/anthropic-messages/encode-anthropic.ts";
import { createOpenAIEncoder, encodeOpenAIBody } from "../../../src/formats/openai-chat/encode-openai.ts";
import { encodeResponsesBody } from "../../../src/formats/openai-responses/encode-responses.ts";
import { anthropicAdapter } from "../../../src/providers/anthropic/anthropic-adapter.ts";
import { openaiAdapter } from "../../../src/providers/openai/openai-adapter.ts";
import { UsageMeter } from "../../../src/billing/usage-meter.ts";
import { createTokenizer } from "../../../src/billing/token-estimate.ts";

const tokenizer = createTokenizer();

const BUDGET: UpstreamTraits = { reasoning: "budget", structuredOutput: "native", cacheBreakpoints: true };
const ADAPTIVE: UpstreamTraits = { reasoning: "adaptive", structuredOutput: "native", cacheBreakpoints: true };
const OLD_CLAUDE: UpstreamTraits = { reasoning: "budget", structuredOutput: "tool", cacheBreakpoints: true };
const EFFORT: UpstreamTraits = { reasoning: "effort", structuredOutput: "native", cacheBreakpoints: true };
const NO_REASONING: UpstreamTraits = { reasoning: "none", structuredOutput: "native", cacheBreakpoints: true };

const user = (content: string) => ({ role: "user", content });
const strictSchema = {
  type: "object",
  properties: { city: { type: "string" }, temperature: { type: "number" } },
  required: ["city", "temperature"],
  additionalProperties: false,
};

describe("model traits", () => {
  const traits = (kind: "openai" | "anthropic", upstream_model: string, extra: Partial<ModelConfig> = {}) => upstreamTraits(kind, { upstream_model, ...extra });

  test.each([
    ["openai", "o4-mini", "effort"],
    ["openai", "o3", "effort"],
    ["openai", "gpt-5", "effort"],
    ["openai", "gpt-5.1-codex", "effort"],
    ["openai", "openai/gpt-oss-120b", "effort"],
    ["openai", "openai/o4-mini", "effort"],
    ["openai", "gpt-5.6-luna", "effort"],
    ["openai", "gpt-6-luna", "effort"],
    ["openai", "gpt-6-sol", "effort"],
    ["openai", "openai/gpt-6.1-sol", "effort"],
    ["openai", "gpt-10", "effort"],
    ["openai", "gpt-5-chat-latest", "none"],
    ["openai", "gpt-4o-mini", "none"],
    ["openai", "gpt-4.1", "none"],
    ["openai", "gpt-3.5-turbo", "none"],
    ["openai", "llama-3.1-70b", undefined],
    ["anthropic", "claude-3-5-haiku-20241022", "none"],
    ["anthropic", "claude-3-7-sonnet-latest", "budget"],
    ["anthropic", "claude-sonnet-4-20250514", "budget"],
    ["anthropic", "claude-sonnet-4-5-20250929", "budget"],
    ["anthropic", "claude-haiku-4-5", "budget"],
    ["anthropic", "claude-opus-4-6", "adaptive"],
    ["anthropic", "claude-opus-5-5", "adaptive"],
    ["anthropic", "kimi-k2", undefined],
  ] as const)("%s %s reasons by %s", (kind, model, style) => {
    expect(traits(kind, model).reasoning).toBe(style);
  });

  test("GPT-5.4 and later take function tools on chat completions only without reasoning; not the 5.4 mini and nano, not Astra and 6.1 Sol (no `none` at all), not Anthropic", () => {
    for (const name of ["gpt-5.4", "gpt-5.5", "gpt-5.6-luna", "gpt-5.6-sol", "gpt-6-luna", "gpt-6-sol", "openai/gpt-6-luna", "gpt-6.1-terra", "gpt-7"]) {
      expect([name, traits("openai", name).toolsNeedNoReasoning]).toEqual([name, true]);
    }
    for (const name of ["gpt-5", "gpt-5.2", "gpt-5.4-mini", "gpt-5.4-nano", "gpt-5.3-chat-latest", "gpt-6-astra", "gpt-6.1-sol", "gpt-4o-mini", "o4-mini", "gpt-image-2", "gpt-4.1"]) {
      expect([name, traits("openai", name).toolsNeedNoReasoning]).toEqual([name, undefined]);
    }
    expect(traits("anthropic", "gpt-6-luna").toolsNeedNoReasoning).toBeUndefined();
  });

  test("structured outputs from Claude 4.5; a forced tool before; OpenAI-compatible models always have response_format", () => {
    expect(traits("anthropic", "claude-sonnet-4-5").structuredOutput).toBe("native");
    expect(traits("anthropic", "claude-opus-4-1-20250805").structuredOutput).toBe("tool");
    expect(traits("anthropic", "claude-3-7-sonnet-latest").structuredOutput).toBe("tool");
    expect(traits("anthropic", "some-compatible-model").structuredOutput).toBe("native");
    expect(traits("openai", "gpt-4o-mini").structuredOutput).toBe("native");
  });

  test("the config wins over the name", () => {
    expect(traits("openai", "my-reasoner", { reasoning: "effort" }).reasoning).toBe("effort");
    expect(traits("openai", "o3", { reasoning: "none" }).reasoning).toBe("none");
    expect(traits("anthropic", "claude-sonnet-4-5", { structured_output: "tool", reasoning: "adaptive" })).toEqual({ reasoning: "adaptive", structuredOutput: "tool", cacheBreakpoints: true });
    expect(traits("anthropic", "claude-sonnet-4-5", { prompt_cache: "off" }).cacheBreakpoints).toBe(false);
  });

  test("Claude versions: a date is not a minor version", () => {
    expect(claudeVersion("claude-opus-4-20250514")).toBe(400);
    expect(claudeVersion("claude-opus-4-1-20250805")).toBe(401);
    expect(claudeVersion("claude-sonnet-4-5@20250929")).toBe(405);
    expect(claudeVersion("claude-3-5-haiku-20241022")).toBe(305);
    expect(claudeVersion("claude-opus-4-10")).toBe(410);
    expect(claudeVersion("gpt-4o")).toBeUndefined();
  });

  test("the config refuses a style of the other vendor", () => {
    const config = (model: Record<string, unknown>) => ({
      providers: [{ id: "o", kind: "openai", base_url: "http://x" }, { id: "a", kind: "anthropic", base_url: "http://y" }],
      models: [{ id: "v/m", category: "free", context_length: 1000, upstream_model: "m", ...model }],
    });
    expect(() => resolveSettings(config({ provider: "o", reasoning: "budget" }), {}, "t")).toThrow(/reasoning: "budget" needs a provider of kind anthropic/);
    expect(() => resolveSettings(config({ provider: "a", reasoning: "effort" }), {}, "t")).toThrow(/reasoning: "effort" needs a provider of kind openai/);
    expect(() => resolveSettings(config({ provider: "o", structured_output: "tool" }), {}, "t")).toThrow(/structured_output/);
    expect(() => resolveSettings(config({ provider: "a", reasoning: "adaptive", structured_output: "tool" }), {}, "t")).not.toThrow();
  });
});

describe("reasoning_effort → thinking (the table)", () => {
  test.each([
    ["low", 1024],
    ["medium", 4096],
    ["high", 16_384],
    ["xhigh", 32_768],
  ])("%s is a budget of %i when max_tokens has room", (effort, budget) => {
    expect(anthropicReasoning(effort, "budget", 100_000)).toEqual({ thinking: { type: "enabled", budget_tokens: budget } });
  });

  test("a budget takes at most ¾ of max_tokens, and none at all when that is under 1,024", () => {
    expect(anthropicReasoning("high", "budget", 8192)).toEqual({ thinking: { type: "enabled", budget_tokens: 6144 } });
    expect(anthropicReasoning("medium", "budget", 2000)).toEqual({ thinking: { type: "enabled", budget_tokens: 1500 } });
    expect(anthropicReasoning("low", "budget", 1366)).toEqual({ thinking: { type: "enabled", budget_tokens: 1024 } });
    expect(anthropicReasoning("low", "budget", 1365)).toBeUndefined();
  });

  test("none and minimal mean no thinking; unknown values and models that do not think get none", () => {
    for (const effort of ["none", "minimal", "extreme", 3, undefined]) expect(anthropicReasoning(effort, "budget", 8192)).toBeUndefined();
    for (const style of ["none", "effort", undefined] as const) expect(anthropicReasoning("high", style, 8192)).toBeUndefined();
  });

  test("adaptive models get adaptive thinking and the effort by name (xhigh as high)", () => {
    expect(anthropicReasoning("low", "adaptive", 100)).toEqual({ thinking: { type: "adaptive" }, effort: "low" });
    expect(anthropicReasoning("medium", "adaptive", 8192)).toEqual({ thinking: { type: "adaptive" }, effort: "medium" });
    expect(anthropicReasoning("xhigh", "adaptive", 8192)).toEqual({ thinking: { type: "adaptive" }, effort: "high" });
    expect(anthropicReasoning("minimal", "adaptive", 8192)).toBeUndefined();
  });
});

describe("thinking → reasoning_effort (the table read backwards)", () => {
  test.each([
    [1024, "low"],
    [4095, "low"],
    [4096, "medium"],
    [16_383, "medium"],
    [16_384, "high"],
    [31_999, "high"],
  ])("a budget of %i is %s", (budget, effort) => {
    expect(openaiReasoningEffort({ type: "enabled", budget_tokens: budget }, undefined)).toBe(effort as "low");
  });

  test("each effort survives the round trip through a budget", () => {
    for (const effort of ["low", "medium", "high"]) {
      const there = anthropicReasoning(effort, "budget", 1_000_000)!;
      expect(openaiReasoningEffort(there.thinking, undefined)).toBe(effort as "low");
    }
    expect(Object.keys(EFFORT_BUDGET)).toEqual(["low", "medium", "high", "xhigh"]);
  });

  test("adaptive thinking by its effort; disabled, or no effort named, sends nothing", () => {
    expect(openaiReasoningEffort({ type: "adaptive" }, { effort: "low" })).toBe("low");
    expect(openaiReasoningEffort({ type: "adaptive" }, { effort: "medium" })).toBe("medium");
    expect(openaiReasoningEffort({ type: "adaptive", display: "omitted" }, { effort: "max" })).toBe("high");
    expect(openaiReasoningEffort({ type: "adaptive" }, undefined)).toBeUndefined();
    expect(openaiReasoningEffort({ type: "disabled" }, { effort: "high" })).toBeUndefined();
    expect(openaiReasoningEffort(undefined, undefined)).toBeUndefined();
    // The effort alone still says how hard the model works.
    expect(openaiReasoningEffort(undefined, { effort: "xhigh" })).toBe("high");
  });
});

describe("JSON schemas for Anthropic's structured outputs", () => {
  test("a strict OpenAI schema is already acceptable and goes as it is", () => {
    expect(anthropicSchema(strictSchema)).toEqual(strictSchema);
  });

  test("refused constraints move into the description; objects are closed; oneOf is anyOf", () => {
    const schema = {
      type: "object",
      properties: {
        age: { type: "integer", minimum: 0, maximum: 150, description: "Years." },
        name: { type: "string", minLength: 1, pattern: "^[A-Z]" },
        email: { type: "string", format: "email" },
        when: { type: "string", format: "week" },
        tags: { type: "array", items: { type: "string" }, minItems: 2 },
        pet: { oneOf: [{ type: "object", properties: { kind: { const: "cat" } }, required: ["kind"] }, { type: "null" }] },
      },
      required: ["age"],
    };
    expect(anthropicSchema(schema)).toEqual({
      type: "object",
      properties: {
        age: { type: "integer", description: "Years.\n\n{minimum: 0, maximum: 150}" },
        name: { type: "string", description: '{minLength: 1, pattern: "^[A-Z]"}' },
        email: { type: "string", format: "email" },
        when: { type: "string", description: '{format: "week"}' },
        tags: { type: "array", items: { type: "string" }, description: "{minItems: 2}" },
        pet: { anyOf: [{ type: "object", properties: { kind: { const: "cat" } }, additionalProperties: false, required: ["kind"] }, { type: "null" }] },
      },
      additionalProperties: false,
      required: ["age"],
    });
    expect(schema.properties.age.minimum).toBe(0); // the client's schema is not changed
  });

  test("what closing would change is not expressible: open objects, untyped nodes, recursion", () => {
    expect(anthropicSchema({ type: "object" })).toBeUndefined();
    expect(anthropicSchema({ type: "object", properties: { a: { type: "string" } }, additionalProperties: true })).toBeUndefined();
    expect(anthropicSchema({ type: "object", properties: { meta: { type: "object", additionalProperties: { type: "string" } } } })).toBeUndefined();
    expect(anthropicSchema({ type: "object", properties: { anything: {} }, additionalProperties: false })).toBeUndefined();
    expect(anthropicSchema({ type: "object", properties: { child: { $ref: "#" } }, additionalProperties: false })).toBeUndefined();
    const tree = { type: "object", properties: { root: { $ref: "#/$defs/node" } }, additionalProperties: false, $defs: { node: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/node" } } }, additionalProperties: false } } };
    expect(anthropicSchema(tree)).toBeUndefined();
    // Definitions that do not reach themselves are fine.
    const flat = { type: "object", properties: { a: { $ref: "#/$defs/leaf" } }, required: ["a"], additionalProperties: false, $defs: { leaf: { type: "string" } } };
    expect(anthropicSchema(flat)).toEqual({ $defs: { leaf: { type: "string" } }, type: "object", properties: { a: { $ref: "#/$defs/leaf" } }, additionalProperties: false, required: ["a"] });
    // An empty object closed by the client says what it means.
    expect(anthropicSchema({ type: "object", additionalProperties: false })).toEqual({ type: "object", properties: {}, additionalProperties: false });
  });

  test("loops between definitions are found however long, across $defs and definitions; shared ones (a diamond) are no loop", () => {
    const obj = (...refs: string[]) => ({ type: "object", properties: Object.fromEntries(refs.map((r, i) => [`p${i}`, { $ref: r }])), required: refs.map((_, i) => `p${i}`), additionalProperties: false });
    const root = { type: "object", properties: { a: { $ref: "#/$defs/a" } }, required: ["a"], additionalProperties: false };
    const loop = { ...root, $defs: { a: obj("#/$defs/b"), b: obj("#/definitions/c") }, definitions: { c: obj("#/$defs/a") } };
    expect(anthropicSchema(loop)).toBeUndefined();
    const diamond = { ...root, $defs: { a: obj("#/$defs/b", "#/$defs/c"), b: obj("#/$defs/d"), c: obj("#/$defs/d"), d: { type: "string" } } };
    expect(anthropicSchema(diamond)).toBeDefined();
    // A ref to something that is not a definition (a path inside one) leads nowhere.
    expect(anthropicSchema({ ...root, $defs: { a: obj("#/$defs/a/properties/x") } })).toBeDefined();
  });

  test("a chain of 20,000 definitions, each referring to the next and to a shared leaf, is walked without running out of stack", () => {
    const n = 20_000;
    const defs: Record<string, unknown> = { leaf: { type: "string" } };
    for (let i = 0; i < n; i++) {
      const refs = i + 1 < n ? [`#/$defs/d${i + 1}`, "#/$defs/leaf"] : ["#/$defs/leaf"];
      defs[`d${i}`] = { type: "object", properties: Object.fromEntries(refs.map((r, j) => [`p${j}`, { $ref: r }])), required: refs.map((_, j) => `p${j}`), additionalProperties: false };
    }
    const chain = { type: "object", properties: { head: { $ref: "#/$defs/d0" } }, required: ["head"], additionalProperties: false, $defs: defs };
    expect(anthropicSchema(chain)).toBeDefined();
    // Closed at its end: a loop through all of them.
    (defs[`d${n - 1}`] as { properties: Record<string, unknown> }).properties.back = { $ref: "#/$defs/d0" };
    expect(anthropicSchema(chain)).toBeUndefined();
  });

  test("response_format → output_config.format, or a forced answer tool where that cannot say it", () => {
    const json_schema = { type: "json_schema", json_schema: { name: "weather", schema: strictSchema, strict: true } };
    expect(anthropicStructuredOutput(json_schema, "native", new Set())).toEqual({ kind: "native", format: { type: "json_schema", schema: strictSchema } });
    const old = anthropicStructuredOutput(json_schema, "tool", new Set());
    expect(old).toMatchObject({ kind: "tool", tool: { name: "json_answer", input_schema: strictSchema } });
    const open = anthropicStructuredOutput({ type: "json_schema", json_schema: { name: "any", schema: { type: "object" } } }, "native", new Set());
    expect(open).toMatchObject({ kind: "tool", tool: { input_schema: { type: "object" } } });
    const object = anthropicStructuredOutput({ type: "json_object" }, "native", new Set(["json_answer"]));
    expect(object).toMatchObject({ kind: "tool", tool: { name: "_json_answer", input_schema: { type: "object" } } });
    // A Responses text.format without a schema comes as `{}`: the tool still takes an object.
    expect(anthropicStructuredOutput({ type: "json_schema", json_schema: { name: "x", schema: {} } }, "native", new Set())).toMatchObject({ kind: "tool", tool: { input_schema: { type: "object" } } });
    expect(anthropicStructuredOutput({ type: "text" }, "native", new Set())).toBeUndefined();
    expect(anthropicStructuredOutput(undefined, "native", new Set())).toBeUndefined();
  });

  test("output_config.format → response_format, strict only when OpenAI's strict rules hold", () => {
    expect(openaiResponseFormat({ type: "json_schema", schema: strictSchema })).toEqual({ type: "json_schema", json_schema: { name: "output", schema: strictSchema, strict: true } });
    const optional = { ...strictSchema, required: ["city"] };
    expect(openaiResponseFormat({ type: "json_schema", schema: optional })).toEqual({ type: "json_schema", json_schema: { name: "output", schema: optional, strict: false } });
    expect(isOpenAIStrictSchema({ type: "object", properties: { a: { type: "object", properties: {} } }, required: ["a"], additionalProperties: false })).toBe(false);
    expect(isOpenAIStrictSchema({ type: "object", properties: { a: { anyOf: [{ type: "string" }, { type: "null" }] } }, required: ["a"], additionalProperties: false })).toBe(true);
    expect(isOpenAIStrictSchema({ type: "array", items: { type: "string" } })).toBe(false);
    expect(openaiResponseFormat(undefined)).toBeUndefined();
  });
});

describe("OpenAI request → Anthropic: response_format and reasoning_effort", () => {
  const translate = (body: Record<string, unknown>, traits: UpstreamTraits, notes: TranslationNotes = {}, maxTokens = 8192) =>
    openaiRequestToAnthropic({ messages: [user("Weather in Paris?")], ...body } as never, "claude", maxTokens, traits, notes);

  test("json_schema → output_config.format; reasoning_effort → a budget; sampling Anthropic refuses with thinking is left out", () => {
    const out = translate({ response_format: { type: "json_schema", json_schema: { name: "w", schema: strictSchema, strict: true } }, reasoning_effort: "medium", temperature: 0.3, top_p: 0.5 }, BUDGET);
    expect(out.output_config).toEqual({ format: { type: "json_schema", schema: strictSchema } });
    expect(out.thinking).toEqual({ type: "enabled", budget_tokens: 4096 });
    expect(out.temperature).toBeUndefined();
    expect(out.top_p).toBeUndefined();
    expect(out.tools).toBeUndefined();
  });

  test("adaptive models: thinking adaptive, the effort beside the format", () => {
    const out = translate({ response_format: { type: "json_schema", json_schema: { name: "w", schema: strictSchema } }, reasoning_effort: "high", top_p: 0.97 }, ADAPTIVE);
    expect(out.thinking).toEqual({ type: "adaptive" });
    expect(out.output_config).toEqual({ format: { type: "json_schema", schema: strictSchema }, effort: "high" });
    expect(out.top_p).toBe(0.97);
  });

  test("no reasoning_effort, or a model that does not think: no thinking, sampling untouched", () => {
    expect(translate({ temperature: 0.3 }, BUDGET)).toMatchObject({ temperature: 0.3 });
    expect(translate({ temperature: 0.3 }, BUDGET).thinking).toBeUndefined();
    const notes: TranslationNotes = {};
    const out = translate({ reasoning_effort: "high", temperature: 0.3 }, NO_REASONING, notes);
    expect(out.thinking).toBeUndefined();
    expect(out.temperature).toBe(0.3);
    expect(notes.dropped).toEqual([expect.stringContaining("reasoning_effort")]);
    expect(translate({ reasoning_effort: "minimal" }, BUDGET).thinking).toBeUndefined();
  });

  test("an older model: a forced answer tool, and no thinking (Anthropic refuses thinking with a forced tool)", () => {
    const notes: TranslationNotes = {};
    const out = translate({ response_format: { type: "json_schema", json_schema: { name: "w", description: "The weather.", schema: strictSchema } }, reasoning_effort: "high" }, OLD_CLAUDE, notes);
    expect(out.output_config).toBeUndefined();
    expect(out.tools).toEqual([{ name: "json_answer", description: expect.stringContaining("The weather."), input_schema: strictSchema }]);
    expect(out.tool_choice).toEqual({ type: "tool", name: "json_answer" });
    expect(out.thinking).toBeUndefined();
    expect(notes).toEqual({ answerTool: "json_answer", dropped: [expect.stringContaining("forced tool")] });
  });

  test("json_object beside the client's tools: the model calls one of them or answers through the answer tool", () => {
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
    const notes: TranslationNotes = {};
    const auto = translate({ response_format: { type: "json_object" }, tools, parallel_tool_calls: false }, BUDGET, notes);
    expect(auto.tools!.map((t) => t.name)).toEqual(["get_weather", "json_answer"]);
    expect(auto.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
    expect(notes.answerTool).toBe("json_answer");
    // A tool the client names stays forced; "none" leaves only the answer.
    expect(translate({ response_format: { type: "json_object" }, tools, tool_choice: { type: "function", function: { name: "get_weather" } } }, BUDGET).tool_choice).toEqual({ type: "tool", name: "get_weather" });
    expect(translate({ response_format: { type: "json_object" }, tools, tool_choice: "none" }, BUDGET).tool_choice).toEqual({ type: "tool", name: "json_answer" });
  });

  test("a forced tool of the client's, or a turn that goes on after tool calls, gets no thinking", () => {
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
    expect(translate({ reasoning_effort: "high", tools, tool_choice: "required" }, BUDGET).thinking).toBeUndefined();
    const notes: TranslationNotes = {};
    const continued = translate(
      {
        messages: [
          user("Weather in Paris?"),
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_1", content: "18°C" },
        ],
        tools,
        reasoning_effort: "high",
      },
      BUDGET,
      notes,
    );
    expect(continued.thinking).toBeUndefined();
    expect(notes.dropped![0]).toContain("signed thinking block");
    // The next turn, after the answer, thinks again.
    const next = translate(
      {
        messages: [
          user("Weather in Paris?"),
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_1", content: "18°C" },
          { role: "assistant", content: "18°C in Paris." },
          user("And Rome?"),
        ],
        tools,
        reasoning_effort: "high",
      },
      BUDGET,
    );
    expect(next.thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
  });
});

describe("Anthropic request → OpenAI: output_config.format and thinking", () => {
  const translate = (body: Record<string, unknown>, traits: UpstreamTraits, notes: TranslationNotes = {}) =>
    anthropicRequestToOpenAI({ messages: [user("Weather?")], ...body } as never, "o4-mini", 8192, "max_completion_tokens", traits, notes);

  test("output_config.format → response_format; thinking → reasoning_effort for a reasoning model, without sampling it refuses", () => {
    const out = translate({ output_config: { format: { type: "json_schema", schema: strictSchema } }, thinking: { type: "enabled", budget_tokens: 10_000 }, temperature: 1, top_p: 0.9 }, EFFORT);
    expect(out.response_format).toEqual({ type: "json_schema", json_schema: { name: "output", schema: strictSchema, strict: true } });
    expect(out.reasoning_effort).toBe("medium");
    expect(out.temperature).toBeUndefined();
    expect(out.top_p).toBeUndefined();
    expect(out.output_config).toBeUndefined();
    expect(out.thinking).toBeUndefined();
  });

  test("Claude Code's adaptive thinking with an effort", () => {
    expect(translate({ thinking: { type: "adaptive", display: "omitted" }, output_config: { effort: "high" } }, EFFORT).reasoning_effort).toBe("high");
    expect(translate({ thinking: { type: "disabled" } }, EFFORT).reasoning_effort).toBeUndefined();
  });

  test("a model not known to reason gets no reasoning_effort, and keeps its sampling", () => {
    for (const traits of [NO_REASONING, { reasoning: undefined, structuredOutput: "native", cacheBreakpoints: true } as UpstreamTraits]) {
      const notes: TranslationNotes = {};
      const out = translate({ thinking: { type: "enabled", budget_tokens: 20_000 }, temperature: 0.5 }, traits, notes);
      expect(out.reasoning_effort).toBeUndefined();
      expect(out.temperature).toBe(0.5);
      expect(notes.dropped).toEqual([expect.stringContaining("thinking")]);
    }
  });
});

describe("same-format preparation", () => {
  const provider = (kind: "openai" | "anthropic") => ({ id: "p", kind, base_url: "http://x", apiKey: "k", timeouts: {} }) as unknown as ResolvedProvider;
  const model = (upstream_model: string, extra: Partial<ModelConfig> = {}) => ({ id: "v/m", upstream_model, ...extra }) as ModelConfig;

  test("reasoning_effort is left out for a model that refuses it, kept for one that reasons or is unknown", () => {
    const body = { messages: [user("x")], reasoning_effort: "low" };
    expect((prepareUpstream("openai", body, model("gpt-4o-mini"), provider("openai"), 100).body as any).reasoning_effort).toBeUndefined();
    expect((prepareUpstream("openai", body, model("o4-mini"), provider("openai"), 100).body as any).reasoning_effort).toBe("low");
    expect((prepareUpstream("openai", body, model("qwen3-32b"), provider("openai"), 100).body as any).reasoning_effort).toBe("low");
    expect((prepareUpstream("openai", body, model("gpt-4o-mini", { reasoning: "effort" }), provider("openai"), 100).body as any).reasoning_effort).toBe("low");
  });

  test("function tools to GPT-5.4 and later: reasoning_effort \"none\", on every path (OpenAI's chat completions refuse tools with any other effort, or none sent)", () => {
    const tools = [{ type: "function", function: { name: "Read", parameters: { type: "object" } } }];
    const sent = (wire: "openai" | "anthropic", body: Record<string, unknown>, name: string) => prepareUpstream(wire, body, model(name), provider("openai"), 100).body as any;
    // Same format: the client's effort, or none, becomes "none"; without tools it is kept.
    expect(sent("openai", { messages: [user("x")], tools, reasoning_effort: "high" }, "gpt-6-luna").reasoning_effort).toBe("none");
    expect(sent("openai", { messages: [user("x")], tools }, "gpt-6-sol").reasoning_effort).toBe("none");
    expect(sent("openai", { messages: [user("x")], functions: [{ name: "f", parameters: {} }] }, "gpt-6-luna").reasoning_effort).toBe("none");
    expect(sent("openai", { messages: [user("x")], reasoning_effort: "high" }, "gpt-6-luna").reasoning_effort).toBe("high");
    expect(sent("openai", { messages: [user("x")], tools: [], reasoning_effort: "low" }, "gpt-6-luna").reasoning_effort).toBe("low");
    // Claude Code's thinking, translated: "none" when it brings tools.
    const claudeCode = { model: "claude-sonnet-5-5", max_tokens: 32_000, messages: [user("x")], thinking: { type: "adaptive" }, output_config: { effort: "high" }, tools: [{ name: "Read", input_schema: { type: "object" } }] };
    expect(sent("anthropic", claudeCode, "gpt-6-luna").reasoning_effort).toBe("none");
    expect(sent("anthropic", { ...claudeCode, tools: undefined }, "gpt-6-luna").reasoning_effort).toBe("high");
    // Models that take tools with an effort, or that take no "none" at all, are sent what the client asked.
    expect(sent("openai", { messages: [user("x")], tools, reasoning_effort: "high" }, "gpt-5.4-mini").reasoning_effort).toBe("high");
    expect(sent("openai", { messages: [user("x")], tools, reasoning_effort: "high" }, "gpt-6.1-sol").reasoning_effort).toBe("high");
    expect(sent("openai", { messages: [user("x")], tools }, "o4-mini").reasoning_effort).toBeUndefined();
    // An Anthropic-kind upstream is never told.
    expect((prepareUpstream("openai", { messages: [user("x")], tools }, model("gpt-6-luna"), provider("anthropic"), 100).body as any).reasoning_effort).toBeUndefined();
  });

  test("verbosity goes to GPT-5 and later models only", () => {
    const body = { messages: [user("x")], verbosity: "low" };
    for (const name of ["gpt-5.5", "gpt-6-luna", "gpt-6.1-sol"]) expect((prepareUpstream("openai", body, model(name), provider("openai"), 100).body as any).verbosity).toBe("low");
    for (const name of ["gpt-4o", "qwen3-32b"]) expect((prepareUpstream("openai", body, model(name), provider("openai"), 100).body as any).verbosity).toBeUndefined();
  });

  test("adaptive thinking for a model that takes a budget: a budget by the effort, the effort left out, the format kept", () => {
    const body = { messages: [user("x")], thinking: { type: "adaptive", display: "omitted" }, output_config: { effort: "medium", format: { type: "json_schema", schema: strictSchema } } };
    const out = prepareUpstream("anthropic", body, model("claude-sonnet-4-5"), provider("anthropic"), 8192).body as any;
    expect(out.thinking).toEqual({ type: "enabled", display: "omitted", budget_tokens: 4096 });
    expect(out.output_config).toEqual({ format: { type: "json_schema", schema: strictSchema } });
    // Adaptive models keep it as sent; models that do not think get neither.
    expect((prepareUpstream("anthropic", body, model("claude-opus-4-6"), provider("anthropic"), 8192).body as any).thinking).toEqual(body.thinking);
    const none = prepareUpstream("anthropic", { ...body, context_management: { edits: [{ type: "clear_thinking_20251015" }] } }, model("claude-3-5-haiku-20241022"), provider("anthropic"), 8192).body as any;
    expect(none.thinking).toBeUndefined();
    expect(none.context_management).toBeUndefined();
    expect(none.output_config).toEqual({ format: body.output_config.format });
  });

  test("a thinking block without a signature (another vendor's reasoning, as the gateway wrote it) is not sent to Anthropic", () => {
    const signed = { type: "thinking", thinking: "a", signature: "EqQB" };
    const body = {
      messages: [user("x"), { role: "assistant", content: [{ type: "thinking", thinking: "b", signature: "" }, signed, { type: "text", text: "hi" }] }, user("y")],
    };
    const out = prepareUpstream("anthropic", body, model("claude-sonnet-4-5"), provider("anthropic"), 8192).body as any;
    expect(out.messages[1].content).toEqual([signed, { type: "text", text: "hi" }]);
    expect(body.messages[1]!.content).toHaveLength(3);
    // Nothing to drop: the very same messages.
    const clean = { messages: [user("x")] };
    expect((prepareUpstream("anthropic", clean, model("claude-sonnet-4-5"), provider("anthropic"), 8192).body as any).messages).toBe(clean.messages);
  });

  test("the forced answer tool is named for the answer's handling", () => {
    const body = { messages: [user("x")], response_format: { type: "json_object" } };
    expect(prepareUpstream("openai", body, model("claude-sonnet-4-20250514"), provider("anthropic"), 8192).answerTool).toBe("json_answer");
    expect(prepareUpstream("openai", body, model("gpt-4o"), provider("openai"), 8192).answerTool).toBeUndefined();
  });
});

describe("the forced answer tool comes back as text", () => {
  test("its arguments stream as text; other calls are renumbered; the finish is a stop", () => {
    const map = createAnswerToolMapper("json_answer");
    const out = [
      ...map([{ type: "start" }, { type: "tool-call", index: 0, id: "toolu_1", name: "json_answer", argumentsDelta: "" }]),
      ...map([{ type: "tool-call", index: 0, argumentsDelta: '{"city":' }]),
      ...map([{ type: "tool-call", index: 0, argumentsDelta: '"Paris"}' }]),
      ...map([{ type: "finish", reason: "tool_calls" }, { type: "usage", outputTokens: 9 }]),
    ];
    expect(out).toEqual([
      { type: "start" },
      { type: "text", text: '{"city":' },
      { type: "text", text: '"Paris"}' },
      { type: "finish", reason: "stop" },
      { type: "usage", outputTokens: 9 },
    ]);
  });

  test("a client tool called beside it keeps its call, numbered from 0, and the finish says tool calls", () => {
    const map = createAnswerToolMapper("json_answer");
    const out = map([
      { type: "tool-call", index: 0, id: "toolu_1", name: "json_answer", argumentsDelta: "{}" },
      { type: "tool-call", index: 1, id: "toolu_2", name: "get_weather", argumentsDelta: '{"city":"Rome"}' },
      { type: "finish", reason: "tool_calls" },
    ]);
    expect(out).toEqual([
      { type: "text", text: "{}" },
      { type: "tool-call", index: 0, id: "toolu_2", name: "get_weather", argumentsDelta: '{"city":"Rome"}' },
      { type: "finish", reason: "tool_calls" },
    ]);
  });

  test("an empty object that streamed no input is still an answer", () => {
    const map = createAnswerToolMapper("json_answer");
    expect(map([{ type: "tool-call", index: 0, id: "t", name: "json_answer", argumentsDelta: "" }, { type: "finish", reason: "tool_calls" }])).toEqual([
      { type: "text", text: "{}" },
      { type: "finish", reason: "stop" },
    ]);
  });
});

describe("thinking in answers: signatures, redacted thinking, reasoning tokens", () => {
  const ctx = { id: "id-1", created: 1_700_000_000, model: "vendor/model", includeUsage: true };
  const thought: StreamEvent[] = [
    { type: "start", inputTokens: 20 },
    { type: "reasoning", text: "Let me " },
    { type: "reasoning", text: "think." },
    { type: "reasoning", text: "", signature: "sig-1" },
    { type: "redacted-reasoning", data: "opaque" },
    { type: "text", text: "Checking." },
    { type: "tool-call", index: 0, id: "toolu_1", name: "get_weather", argumentsDelta: "{}" },
    { type: "reasoning", text: "Now answer.", signature: "sig-2" },
    { type: "text", text: "Done." },
    { type: "finish", reason: "stop" },
    { type: "usage", inputTokens: 20, outputTokens: 50, reasoningTokens: 30 },
  ];

  test("Anthropic's decoder keeps signatures, redacted thinking and the thinking count", () => {
    const decode = anthropicAdapter.createStreamDecoder();
    const frame = (data: unknown) => decode({ event: (data as { type: string }).type, data: JSON.stringify(data), id: undefined, retry: undefined }).events;
    frame({ type: "message_start", message: { id: "m", type: "message", role: "assistant", content: [], usage: { input_tokens: 3, output_tokens: 1 } } });
    expect(frame({ type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } })).toEqual([]);
    expect(frame({ type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "EqQB" } })).toEqual([{ type: "reasoning", text: "", signature: "EqQB" }]);
    expect(frame({ type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data: "EmwK" } })).toEqual([{ type: "redacted-reasoning", data: "EmwK" }]);
    expect(frame({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 40, output_tokens_details: { thinking_tokens: 25 } } })[0]).toMatchObject({ type: "usage", outputTokens: 40, reasoningTokens: 25 });
    const body = anthropicAdapter.decodeBody({ content: [{ type: "thinking", thinking: "t", signature: "s" }, { type: "redacted_thinking", data: "d" }, { type: "text", text: "x" }] });
    expect(body).toEqual([{ type: "reasoning", text: "t", signature: "s" }, { type: "redacted-reasoning", data: "d" }, { type: "text", text: "x" }]);
  });

  test("OpenAI's decoder takes completion_tokens_details.reasoning_tokens", () => {
    const events = openaiAdapter.decodeBody({ choices: [{ message: { content: "x" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 40, completion_tokens_details: { reasoning_tokens: 32 } } });
    expect(events.at(-1)).toMatchObject({ type: "usage", outputTokens: 40, reasoningTokens: 32 });
  });

  test("Anthropic body: each thinking block in its place, with its own signature", () => {
    const body = encodeAnthropicBody(thought, ctx);
    expect(body.content).toEqual([
      { type: "thinking", thinking: "Let me think.", signature: "sig-1" },
      { type: "redacted_thinking", data: "opaque" },
      { type: "text", text: "Checking." },
      { type: "tool_use", id: "toolu_1", name: "get_weather", input: {} },
      { type: "thinking", thinking: "Now answer.", signature: "sig-2" },
      { type: "text", text: "Done." },
    ]);
    expect(body.usage).toMatchObject({ output_tokens: 50, output_tokens_details: { thinking_tokens: 30 } });
  });

  test("Anthropic stream: the signature closes its block; redacted thinking is a block of its own", () => {
    let text = "";
    const sink = createAnthropicEncoder(ctx);
    for (const e of thought) text += sink.event(e);
    text += sink.end();
    const events = text.split("\n\n").filter((f) => f.includes("data: {")).map((f) => JSON.parse(f.slice(f.indexOf("data: ") + 6)));
    const starts = events.filter((e) => e.type === "content_block_start").map((e) => e.content_block.type);
    expect(starts).toEqual(["thinking", "redacted_thinking", "text", "tool_use", "thinking", "text"]);
    const signatures = events.filter((e) => e.delta?.type === "signature_delta").map((e) => [e.index, e.delta.signature]);
    expect(signatures).toEqual([[0, "sig-1"], [4, "sig-2"]]);
    expect(events.find((e) => e.type === "content_block_start" && e.index === 1).content_block).toEqual({ type: "redacted_thinking", data: "opaque" });
  });

  test("OpenAI: reasoning_content without signatures, reasoning tokens inside completion_tokens", () => {
    const body = encodeOpenAIBody(thought, ctx);
    expect(body.choices[0]!.message.reasoning_content).toBe("Let me think.Now answer.");
    expect(body.usage).toEqual({ prompt_tokens: 20, completion_tokens: 50, total_tokens: 70, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 30 } });
    let text = "";
    const sink = createOpenAIEncoder(ctx);
    for (const e of thought) text += sink.event(e);
    text += sink.end();
    expect(text).not.toContain("sig-1");
    expect(text).not.toContain("opaque");
    const usage = text.split("\n\n").filter((f) => f.includes('"usage"')).map((f) => JSON.parse(f.slice(6)).usage);
    expect(usage).toEqual([{ prompt_tokens: 20, completion_tokens: 50, total_tokens: 70, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 30 } }]);
  });

  test("Responses: reasoning items of the text only, reasoning tokens in output_tokens_details", () => {
    const response = encodeResponsesBody(thought, { ...ctx, id: "resp_1" });
    expect(response.output.filter((o: any) => o.type === "reasoning").map((o: any) => o.content[0].text)).toEqual(["Let me think.", "Now answer."]);
    expect(response.usage).toMatchObject({ output_tokens: 50, output_tokens_details: { reasoning_tokens: 30 } });
  });

  test("the meter: the upstream's reasoning count, else an estimate from the thinking text; output counted once", async () => {
    const reported = new UsageMeter(tokenizer.count);
    for (const e of thought) reported.observe(e);
    expect(await reported.reasoningTokens()).toBe(30);
    expect((await reported.total(() => "")).outputTokens).toBe(50);

    const unreported = new UsageMeter(tokenizer.count);
    unreported.observe({ type: "reasoning", text: "The user wants the weather in Paris, so I will call the tool." });
    unreported.observe({ type: "text", text: "Checking." });
    unreported.observe({ type: "usage", inputTokens: 10, outputTokens: 40 });
    expect(unreported.reasoningReported).toBe(false);
    const estimate = (await unreported.reasoningTokens())!;
    expect(estimate).toBeGreaterThan(8);
    expect(estimate).toBeLessThan(20);
    expect((await unreported.total(() => "")).outputTokens).toBe(40);

    const none = new UsageMeter(tokenizer.count);
    none.observe({ type: "text", text: "Hi." });
    expect(await none.reasoningTokens()).toBeUndefined();
  });
});
