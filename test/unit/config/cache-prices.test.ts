/** Cache prices a model's config leaves out: the vendors' published multipliers, by family (README, "Prompt caching"). */
import { describe, expect, test } from "bun:test";
import { familyName, withCacheDefaults } from "../../../src/config/cache-prices.ts";

const base = { input_per_mtok: 1000, output_per_mtok: 4000 };
const read = (kind: "openai" | "anthropic", model: string) => withCacheDefaults(base, kind, model).cache_read_per_mtok;

describe("cache price defaults", () => {
  test.each([
    ["gpt-5", 100], ["gpt-5-codex", 100], ["gpt-4.1-mini", 250], ["o3", 250], ["o4-mini", 250], ["codex-mini-latest", 250],
    ["gpt-4o-mini", 500], ["o1", 500], ["o3-mini", 500], ["llama-3.3-70b", 1000],
    // A vendor path, a fine-tune, a cloud's dotted vendor prefix: the family behind them.
    ["openai/gpt-4o", 500], ["ft:gpt-4o-mini-2024-07-18:acme::abc123", 500], ["openai.gpt-4.1", 250],
  ])("an OpenAI-kind %s reads the cache at %d", (model, price) => {
    expect(read("openai", model)).toBe(price);
  });

  test("Claude names take Anthropic's multipliers on any provider, Bedrock's and Vertex's spellings included", () => {
    for (const model of ["claude-sonnet-4-5", "anthropic/claude-sonnet-4-5", "anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "global.anthropic.claude-haiku-4-5", "claude-sonnet-4-5@20250929"]) {
      expect([model, withCacheDefaults(base, "openai", model)]).toEqual([model, { ...base, cache_read_per_mtok: 100, cache_write_per_mtok: 1250, cache_write_1h_per_mtok: 2000 }]);
    }
    expect(withCacheDefaults(base, "anthropic", "anything")).toMatchObject({ cache_read_per_mtok: 100, cache_write_1h_per_mtok: 2000 });
  });

  test("GPT-5.6 and later write to the cache at 1.25× input (OpenAI's cache_write_tokens), 2.5× for 12 hours; earlier families at input", () => {
    for (const model of ["gpt-5.6", "gpt-5.6-terra", "openai/gpt-5.7-mini", "gpt-5.10", "gpt-6", "gpt-6.1-codex", "gpt-6.2-sol", "gpt-10"]) {
      expect([model, withCacheDefaults(base, "openai", model)]).toEqual([model, { ...base, cache_read_per_mtok: 100, cache_write_per_mtok: 1250, cache_write_1h_per_mtok: 2500 }]);
    }
    for (const model of ["gpt-5", "gpt-5-mini", "gpt-5.1-codex", "gpt-5.5", "gpt-4.1", "gpt-4o"]) {
      expect([model, withCacheDefaults(base, "openai", model)]).toMatchObject([model, { cache_write_per_mtok: 1000, cache_write_1h_per_mtok: 1000 }]);
    }
    // GPT-6.2 Sol's model page: $2 input, $2.50 writes, "a 12-hour cache write costs $5"; its long-context list doubles both.
    const sol62 = withCacheDefaults({ input_per_mtok: 2_000, output_per_mtok: 10_000 }, "openai", "gpt-6.2-sol", 1_050_000);
    expect(sol62).toMatchObject({ cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000, long_context: { cache_write_per_mtok: 5_000, cache_write_1h_per_mtok: 10_000 } });
  });

  test("Claude 3 Haiku's own cache prices (1.2× 5-minute and 2× 1-hour writes, 0.12× reads); GPT-4.5's 50 % cached input", () => {
    // Anthropic's table: $0.25 input, $0.30 5m writes, $0.50 1h writes, $0.03 reads (1-hour writes were priced at 1.2×).
    expect(withCacheDefaults(base, "anthropic", "claude-3-haiku-20240307")).toEqual({ ...base, cache_read_per_mtok: 120, cache_write_per_mtok: 1200, cache_write_1h_per_mtok: 2000 });
    expect(withCacheDefaults(base, "anthropic", "claude-3-5-haiku-20241022")).toMatchObject({ cache_read_per_mtok: 100, cache_write_per_mtok: 1250 });
    expect(read("openai", "gpt-4.5-preview")).toBe(500);
  });

  test("Claude models whose reads cost less: Fable 5.1 and Mythos 5.1 at 0.025×, Opus 5.5 and Sonnet 5.5 at 0.05× (they were charged 0.1×)", () => {
    // Anthropic's table: Fable 5.1 $10 input, $0.25 reads; Opus 5.5 $4, $0.20; Sonnet 5.5 $2, $0.10 (since 7 October 2026).
    expect(withCacheDefaults({ input_per_mtok: 10_000, output_per_mtok: 50_000 }, "anthropic", "claude-fable-5-1")).toMatchObject({ cache_read_per_mtok: 250, cache_write_per_mtok: 12_500, cache_write_1h_per_mtok: 20_000 });
    expect(withCacheDefaults({ input_per_mtok: 10_000, output_per_mtok: 50_000 }, "anthropic", "claude-mythos-5-1").cache_read_per_mtok).toBe(250);
    expect(withCacheDefaults({ input_per_mtok: 4_000, output_per_mtok: 20_000 }, "anthropic", "claude-opus-5-5")).toMatchObject({ cache_read_per_mtok: 200, cache_write_per_mtok: 5_000, cache_write_1h_per_mtok: 8_000 });
    expect(withCacheDefaults({ input_per_mtok: 2_000, output_per_mtok: 10_000 }, "openai", "anthropic/claude-sonnet-5-5")).toMatchObject({ cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 4_000 });
    // Their predecessors and siblings keep 0.1×.
    for (const model of ["claude-fable-5", "claude-opus-5", "claude-sonnet-5", "claude-haiku-5-5", "claude-opus-4-8", "claude-fable-5-10"]) expect([model, read("anthropic", model)]).toEqual([model, 100]);
  });

  test("GPT-6.1 Sol reads at 0.05× input ($0.10 of $2), its long-context reads at 2× that; GPT-6 Sol and Luna at 0.1×", () => {
    // OpenAI's model pages: 6.1 Sol $2 / $0.10 cached / $2.50 writes / $10, above 272K $4 / $0.20 / $15.
    const sol61 = withCacheDefaults({ input_per_mtok: 2_000, output_per_mtok: 10_000 }, "openai", "gpt-6.1-sol", 1_050_000);
    expect(sol61).toMatchObject({ cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, long_context: { above_tokens: 272_000, input_per_mtok: 4_000, output_per_mtok: 15_000, cache_read_per_mtok: 200, cache_write_per_mtok: 5_000 } });
    expect(read("openai", "openai/gpt-6.1-sol-2026-09-29")).toBe(50);
    // GPT-6 Sol $2 / $0.20 / $2.50; Luna $0.10 / $0.01 / $0.125 (above 272K: $0.20 / $0.02 / $0.75).
    expect(withCacheDefaults({ input_per_mtok: 2_000, output_per_mtok: 10_000 }, "openai", "gpt-6-sol")).toMatchObject({ cache_read_per_mtok: 200, cache_write_per_mtok: 2_500 });
    expect(withCacheDefaults({ input_per_mtok: 100, output_per_mtok: 500 }, "openai", "gpt-6-luna", 1_050_000)).toMatchObject({
      cache_read_per_mtok: 10, cache_write_per_mtok: 125, long_context: { input_per_mtok: 200, output_per_mtok: 750, cache_read_per_mtok: 20, cache_write_per_mtok: 250 },
    });
    for (const model of ["gpt-6.10-sol", "gpt-6.1-terra", "gpt-6-sol"]) expect([model, read("openai", model)]).toEqual([model, 100]);
  });

  test("OpenRouter's dotted Claude names take their model's rules, not another version's", () => {
    // Sonnet 4.6's 1M window is billed flat: not Sonnet 4.5's 2× / 1.5× above 200,000 tokens.
    const big = (model: string, input = 3_000, output = 15_000) => withCacheDefaults({ input_per_mtok: input, output_per_mtok: output }, "openai", model, 1_000_000);
    expect(big("anthropic/claude-sonnet-4.6").long_context).toBeUndefined();
    expect(big("anthropic/claude-opus-4.7").long_context).toBeUndefined();
    expect(big("anthropic/claude-sonnet-4.5").long_context).toMatchObject({ above_tokens: 200_000, input_per_mtok: 6_000, output_per_mtok: 22_500 });
    // Sonnet 5.5's reads at 0.05×, Fable 5.1's at 0.025×, Haiku 5.5's 5× above 100,000.
    expect(big("anthropic/claude-sonnet-5.5", 2_000, 10_000).cache_read_per_mtok).toBe(100);
    expect(big("anthropic/claude-fable-5.1", 10_000, 50_000).cache_read_per_mtok).toBe(250);
    expect(big("anthropic/claude-haiku-5.5", 100, 500).long_context).toMatchObject({ above_tokens: 100_000, input_per_mtok: 500, output_per_mtok: 2_500 });
  });

  test("prices the config gives are kept", () => {
    expect(withCacheDefaults({ ...base, cache_read_per_mtok: 7 }, "openai", "gpt-5")).toMatchObject({ cache_read_per_mtok: 7, cache_write_per_mtok: 1000 });
  });

  test("family names", () => {
    expect(familyName("US.Anthropic.Claude-3-5")).toBe("claude-3-5");
    expect(familyName("ft:o4-mini:acme")).toBe("o4-mini:acme");
    expect(familyName("my.model")).toBe("my.model");
  });
});
