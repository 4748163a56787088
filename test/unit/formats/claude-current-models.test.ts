/**
 * The current Claude lineup (Sonnet 5.5, Opus 5.5, Fable 5.1, Haiku 5.5, and Sonnet 5, Opus 5,
 * 4.6–4.8 before them) as the translation from OpenAI's formats sees it: the names it recognises
 * wherever a model is served, and what each model refuses that an OpenAI client commonly sends.
 * The end-to-end side (the SDKs' requests through the gateway) is test/e2e/claude-current-models.test.ts.
 */
import { describe, expect, test } from "bun:test";
import type { ModelConfig } from "../../../src/config/schema.ts";
import { claudeModel, upstreamTraits } from "../../../src/formats/common/model-traits.ts";
import { anthropicReasoning } from "../../../src/formats/common/reasoning.ts";

const traits = (upstream_model: string, extra: Partial<ModelConfig> = {}) => upstreamTraits("anthropic", { upstream_model, ...extra });

describe("Claude model names", () => {
  test.each([
    ["claude-sonnet-5-5", "sonnet", 505],
    ["claude-opus-5-5", "opus", 505],
    ["claude-opus-5", "opus", 500],
    ["claude-sonnet-5-20260630", "sonnet", 500],
    ["claude-fable-5-1", "fable", 501],
    ["claude-fable-5", "fable", 500],
    ["claude-mythos-5-1", "mythos", 501],
    ["claude-mythos-preview", "mythos", 500],
    ["claude-haiku-5-5", "haiku", 505],
    ["claude-haiku-4-5-20251001", "haiku", 405],
    ["claude-opus-4-8", "opus", 408],
    ["claude-3-7-sonnet-latest", "sonnet", 307],
    ["claude-3-5-haiku-latest", "haiku", 305],
    // Vertex AI: `@date`.
    ["claude-sonnet-4-5@20250929", "sonnet", 405],
    ["claude-opus-4@20250514", "opus", 400],
    // Amazon Bedrock: a vendor prefix, a region prefix, a version suffix, or an ARN.
    ["anthropic.claude-sonnet-5-5", "sonnet", 505],
    ["us.anthropic.claude-opus-4-6-v1", "opus", 406],
    ["global.anthropic.claude-haiku-4-5-20251001-v1:0", "haiku", 405],
    ["anthropic.claude-3-7-sonnet-20250219-v1:0", "sonnet", 307],
    ["arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-fable-5-1", "fable", 501],
    // OpenRouter's names, dotted.
    ["anthropic/claude-sonnet-4.5", "sonnet", 405],
    ["anthropic/claude-opus-4.6", "opus", 406],
    ["anthropic/claude-3.7-sonnet", "sonnet", 307],
    ["Claude-Sonnet-5-5", "sonnet", 505],
  ])("%s is %s %i", (name, family, version) => {
    expect(claudeModel(name)).toEqual({ family: family as never, version });
  });

  test("other names are not Claude", () => {
    for (const name of ["gpt-5.5", "claude", "claude-latest", "my-claude-proxy", "kimi-k2"]) expect(claudeModel(name)).toBeUndefined();
  });

  test("Fable, Mythos and Haiku 5.5 think adaptively and take structured outputs", () => {
    for (const name of ["claude-fable-5-1", "claude-mythos-preview", "claude-haiku-5-5", "anthropic.claude-sonnet-5-5", "anthropic/claude-opus-4.6"]) {
      expect(traits(name)).toMatchObject({ reasoning: "adaptive", structuredOutput: "native" });
    }
    expect(traits("anthropic/claude-sonnet-4.5")).toMatchObject({ reasoning: "budget", structuredOutput: "native" });
  });
});

describe("what each Claude model refuses", () => {
  test.each([
    ["claude-opus-4-7", true],
    ["claude-opus-4-8", true],
    ["claude-sonnet-5", true],
    ["claude-sonnet-5-5", true],
    ["claude-opus-5-5", true],
    ["claude-haiku-5-5", true],
    ["claude-fable-5-1", true],
    ["claude-mythos-preview", true],
    ["claude-opus-4-6", false],
    ["claude-sonnet-4-6", false],
    ["claude-haiku-4-5", false],
    ["claude-3-7-sonnet-latest", false],
  ])("%s refuses non-default sampling parameters: %p", (name, refuses) => {
    expect(traits(name).claude?.refusesSampling === true).toBe(refuses);
  });

  test("an unknown model has no rules; the config's reasoning does not change them", () => {
    expect(traits("my-proxy-model").claude).toBeUndefined();
    expect(traits("claude-sonnet-5", { reasoning: "none" }).claude?.refusesSampling).toBe(true);
  });
});

describe("forced tool use", () => {
  test.each([
    ["claude-sonnet-5-5", true],
    ["claude-opus-5-5", true],
    ["claude-fable-5-1", true],
    ["claude-mythos-5-1", true],
    ["us.anthropic.claude-opus-5-5", true],
    ["claude-haiku-5-5", false],
    ["claude-sonnet-5", false],
    ["claude-opus-5", false],
    ["claude-fable-5", false],
    ["claude-mythos-preview", false],
    ["claude-opus-4-8", false],
  ])("%s refuses forced tool use: %p", (name, refuses) => {
    expect(traits(name).claude?.refusesForcedTool === true).toBe(refuses);
  });
});

describe("thinking unasked, and how it is turned off", () => {
  test.each([
    ["claude-sonnet-5", "disabled"],
    ["claude-opus-5", "disabled"],
    ["claude-haiku-5-5", "disabled"],
    ["claude-sonnet-5-5", "between_tools"],
    ["claude-opus-5-5", "always"],
    ["claude-fable-5-1", "always"],
    ["claude-fable-5", "always"],
    ["claude-mythos-preview", "always"],
    ["claude-opus-4-8", undefined],
    ["claude-sonnet-4-6", undefined],
    ["claude-haiku-4-5", undefined],
  ])("%s: %s", (name, off) => {
    expect(traits(name).claude?.thinksByDefault).toBe(off as never);
  });

  test("reasoning_effort none/minimal: the model's way off, the lowest effort, or nothing", () => {
    const rules = (name: string) => traits(name).claude;
    expect(anthropicReasoning("none", "adaptive", 8192, rules("claude-sonnet-5"))).toEqual({ thinking: { type: "disabled" } });
    expect(anthropicReasoning("minimal", "adaptive", 8192, rules("claude-sonnet-5-5"))).toEqual({ thinking: { type: "between_tools" } });
    expect(anthropicReasoning("none", "adaptive", 8192, rules("claude-opus-5-5"))).toEqual({ effort: "low" });
    expect(anthropicReasoning("none", "adaptive", 8192, rules("claude-opus-4-7"))).toBeUndefined();
    expect(anthropicReasoning("none", "budget", 8192, rules("claude-sonnet-4-5"))).toBeUndefined();
  });
});

describe("prefill", () => {
  test.each([
    ["claude-opus-4-6", true],
    ["claude-sonnet-4-6", true],
    ["claude-sonnet-5-5", true],
    ["claude-haiku-5-5", true],
    ["claude-fable-5-1", true],
    ["claude-sonnet-4-5", false],
    ["claude-haiku-4-5", false],
    ["claude-opus-4-1", false],
  ])("%s refuses a last assistant turn: %p", (name, refuses) => {
    expect(traits(name).claude?.refusesPrefill === true).toBe(refuses);
  });
});

describe("effort above high", () => {
  const rules = (name: string) => traits(name).claude;
  test.each([
    ["claude-sonnet-5-5", "xhigh", "xhigh"],
    ["claude-opus-4-7", "xhigh", "xhigh"],
    ["claude-haiku-5-5", "max", "max"],
    ["claude-fable-5-1", "max", "max"],
    ["claude-opus-4-6", "xhigh", "high"],
    ["claude-opus-4-6", "max", "max"],
    ["claude-sonnet-4-6", "xhigh", "high"],
  ])("%s: reasoning_effort %s is effort %s", (name, asked, effort) => {
    expect(anthropicReasoning(asked, "adaptive", 8192, rules(name))).toEqual({ thinking: { type: "adaptive" }, effort });
  });
});
