/**
 * Long-context prices (`pricing.long_context`): once a prompt — fresh input, cache reads and cache
 * writes together — is longer than the threshold, the whole answer is billed at the vendor's
 * long-context prices (Anthropic's Sonnet with the 1M context: input 2×, output 1.5×, cache prices
 * by the same multipliers), as the vendor bills it. The hold covers the dearer list, the record
 * names the prices it was charged at, and the audit recomputes it.
 */
import { describe, expect, test } from "bun:test";
import { runAdmin } from "../../src/cli/admin.ts";
import { priceListOf, worstCaseMicro } from "../../src/billing/pricing.ts";
import { withCacheDefaults } from "../../src/config/cache-prices.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, chargeOf, post, useGateway } from "../helpers/gateway.ts";
import { anthropicAdapter, betasForWindow } from "../../src/providers/anthropic/anthropic-adapter.ts";
import type { ResolvedProvider } from "../../src/config/load-config.ts";
import { scriptedReply, type ScriptUsage } from "../helpers/scripted-answers.ts";

const MODEL = "test/claude-1m";
/** The same model configured as most operators would: its base prices only. */
const PLAIN_1M = "test/claude-1m-plain";
/** Claude 4.6 and later: the 1M window at the standard price throughout. */
const OPUS_46_1M = "test/opus-4-6-1m";
/** Claude Haiku 5.5: $0.10 / $0.50 up to 100,000 prompt tokens, 5× both above. */
const HAIKU_55 = "test/haiku-5-5";
/** GPT-5.5 with its 1.05M window, base prices only: 2× input and 1.5× output above 272,000 prompt tokens. */
const GPT_55 = "test/gpt-5.5";
const SONNET = { input_per_mtok: 3_000, output_per_mtok: 15_000, long_context: { above_tokens: 200_000, input_per_mtok: 6_000, output_per_mtok: 22_500 } };

const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 10_000,
  extraModels: [
    { id: MODEL, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 1_000_000, owned_by: "anthropic", pricing: SONNET },
    { id: PLAIN_1M, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 1_000_000, owned_by: "anthropic", pricing: { input_per_mtok: 3_000, output_per_mtok: 15_000 } },
    { id: OPUS_46_1M, provider: "fake-anthropic", upstream_model: "claude-opus-4-6", category: "text", context_length: 1_000_000, owned_by: "anthropic", pricing: { input_per_mtok: 5_000, output_per_mtok: 25_000 } },
    { id: GPT_55, provider: "fake-openai", upstream_model: "gpt-5.5", category: "text", context_length: 1_050_000, owned_by: "openai", pricing: { input_per_mtok: 5_000, output_per_mtok: 30_000 } },
    { id: HAIKU_55, provider: "fake-anthropic", upstream_model: "claude-haiku-5-5", category: "text", context_length: 1_000_000, owned_by: "anthropic", pricing: { input_per_mtok: 100, output_per_mtok: 500 } },
  ],
}));

/** A prompt long enough that its hold may cover 205,000 tokens (the hold counts at most a token a byte). */
const PROMPT = "long context ".repeat(17_000);

function charged(usage: ScriptUsage, model = MODEL): Promise<{ micro: number; prices: Record<string, number> }> {
  upstream.reply(scriptedReply("anthropic", { text: "Read it all.", usage }));
  return chargeOf(gw, () => post(gw, "/v1/messages", { model, max_tokens: 1_000, messages: [{ role: "user", content: PROMPT }] }));
}

describe("an Anthropic model with long-context prices", () => {
  test("a prompt at or under the threshold is billed at the base prices, one over it wholly at the long-context ones; the audit agrees", async () => {
    // 150,000 fresh + 40,000 read + 10,000 written = 200,000: not above the threshold.
    const under = await charged({ input: 150_000, cacheRead: 40_000, cacheWrite5m: 10_000, output: 100 });
    expect(under.micro).toBe(150_000 * 3_000 + 40_000 * 300 + 10_000 * 3_750 + 100 * 15_000);
    expect(under.prices).toMatchObject({ input: 3_000, output: 15_000, cacheRead: 300, cacheWrite5m: 3_750, cacheWrite1h: 6_000 });

    // 10,000 fresh + 195,000 read = 205,000: every token, output too, at the long-context prices.
    const over = await charged({ input: 10_000, cacheRead: 195_000, output: 100 });
    expect(over.micro).toBe(10_000 * 6_000 + 195_000 * 600 + 100 * 22_500);
    expect(over.prices).toMatchObject({ input: 6_000, output: 22_500, cacheRead: 600, cacheWrite5m: 7_500, cacheWrite1h: 12_000 });

    const audit = await runAdmin(["audit"], { SWITCHYARD_DB: gw.dbPath });
    expect(audit.code).toBe(0);
    expect(JSON.parse(audit.out).mispriced).toEqual([]);
  });
});

describe("a Claude model configured with a window past 200,000 tokens and base prices only", () => {
  test("takes Anthropic's long-context prices above 200,000 tokens, as the vendor bills it (it was charged the base prices: 47 % under)", async () => {
    // A Claude Code `sonnet[1m]` turn: 5,000 fresh, 200,000 read, 1,000 written, 500 out (within the hold PROMPT gets).
    const over = await charged({ input: 5_000, cacheRead: 200_000, cacheWrite5m: 1_000, output: 500 }, PLAIN_1M);
    expect(over.micro).toBe(5_000 * 6_000 + 200_000 * 600 + 1_000 * 7_500 + 500 * 22_500);
    expect(over.prices).toMatchObject({ input: 6_000, output: 22_500, cacheRead: 600, cacheWrite5m: 7_500, cacheWrite1h: 12_000 });
    const under = await charged({ input: 1_000, cacheRead: 100_000, output: 100 }, PLAIN_1M);
    expect(under.micro).toBe(1_000 * 3_000 + 100_000 * 300 + 100 * 15_000);
  });

  test("Claude 4.6 and later bill their 1M window at the standard price throughout (charged 2× input and 1.5× output above 200,000 tokens)", async () => {
    // A Claude Code turn on Opus 4.6 with its 1M window: 5,000 fresh, 200,000 read, 1,000 written, 500 out.
    const over = await charged({ input: 5_000, cacheRead: 200_000, cacheWrite5m: 1_000, output: 500 }, OPUS_46_1M);
    expect(over.micro).toBe(5_000 * 5_000 + 200_000 * 500 + 1_000 * 6_250 + 500 * 25_000);
    expect(over.prices).toMatchObject({ input: 5_000, output: 25_000, cacheRead: 500, cacheWrite5m: 6_250, cacheWrite1h: 10_000 });
    for (const name of ["claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-6-20260217", "claude-opus-4-8", "claude-sonnet-5", "claude-opus-5-5", "claude-fable-5-1", "us.anthropic.claude-sonnet-4-6-v1:0"]) {
      expect([name, withCacheDefaults({ input_per_mtok: 3_000, output_per_mtok: 15_000 }, "anthropic", name, 1_000_000).long_context]).toEqual([name, undefined]);
    }
    for (const name of ["claude-sonnet-4", "claude-sonnet-4-0", "claude-sonnet-4-20250514", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5@20250929", "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-latest"]) {
      expect([name, withCacheDefaults({ input_per_mtok: 3_000, output_per_mtok: 15_000 }, "anthropic", name, 1_000_000).long_context?.input_per_mtok]).toEqual([name, 6_000]);
    }
  });

  test("Claude Haiku 5.5 bills a prompt above 100,000 tokens wholly at 5× its prices (it was charged $0.10 / $0.50 throughout: 80 % under)", async () => {
    // 20,000 fresh + 130,000 read = 150,000: above Haiku 5.5's threshold.
    const over = await charged({ input: 20_000, cacheRead: 130_000, cacheWrite1h: 2_000, output: 800 }, HAIKU_55);
    expect(over.micro).toBe(20_000 * 500 + 130_000 * 50 + 2_000 * 1_000 + 800 * 2_500);
    expect(over.prices).toMatchObject({ input: 500, output: 2_500, cacheRead: 50, cacheWrite5m: 625, cacheWrite1h: 1_000 });
    const under = await charged({ input: 10_000, cacheRead: 90_000, output: 800 }, HAIKU_55);
    expect(under.micro).toBe(10_000 * 100 + 90_000 * 10 + 800 * 500);
    expect(under.prices).toMatchObject({ input: 100, output: 500, cacheRead: 10, cacheWrite5m: 125, cacheWrite1h: 200 });
  });

  test("a Claude model with the standard window, or any non-Claude model, gets no long-context list", () => {
    expect(withCacheDefaults({ input_per_mtok: 3_000, output_per_mtok: 15_000 }, "anthropic", "claude-sonnet-4-5", 200_000).long_context).toBeUndefined();
    expect(withCacheDefaults({ input_per_mtok: 400, output_per_mtok: 1_600 }, "openai", "gpt-4.1-mini", 1_047_576).long_context).toBeUndefined();
    // Another vendor's model behind an Anthropic-format API (Kimi's, MiniMax's) has no such prices.
    expect(withCacheDefaults({ input_per_mtok: 600, output_per_mtok: 2_500 }, "anthropic", "kimi-k2-0905-preview", 262_144).long_context).toBeUndefined();
    // A claude name behind an OpenAI-format server (OpenRouter, Bedrock's gateway) is Anthropic's model and bill.
    expect(withCacheDefaults({ input_per_mtok: 3_000, output_per_mtok: 15_000 }, "openai", "anthropic/claude-sonnet-4-5", 1_000_000).long_context).toMatchObject({ above_tokens: 200_000, input_per_mtok: 6_000, output_per_mtok: 22_500 });
  });
});

describe("an OpenAI model configured with a window past 272,000 tokens and base prices only", () => {
  test("OpenAI's GPT-5.4 and later bill a prompt above 272,000 tokens wholly at 2× input and 1.5× output (they were charged the standard prices)", async () => {
    // A Codex turn (Responses API) on GPT-5.5 with its 1.05M window: 20,000 fresh, 280,000 cached, 1,000 out (600 reasoning).
    const turn = (usage: ScriptUsage) => {
      upstream.reply(scriptedReply("openai", { text: "Done.", usage }));
      return chargeOf(gw, () => post(gw, "/v1/responses", { model: GPT_55, input: "long context ".repeat(25_000), stream: true }));
    };
    const over = await turn({ input: 20_000, cacheRead: 280_000, output: 1_000, reasoning: 600 });
    expect(over.micro).toBe(20_000 * 10_000 + 280_000 * 1_000 + 1_000 * 45_000);
    expect(over.prices).toMatchObject({ input: 10_000, output: 45_000, cacheRead: 1_000 });
    const under = await turn({ input: 2_000, cacheRead: 270_000, output: 1_000 });
    expect(under.micro).toBe(2_000 * 5_000 + 270_000 * 500 + 1_000 * 30_000);
    // The families: GPT-5.4 (not its 400K mini and nano) and every later one; GPT-5.6's cache writes (1.25×) scale too.
    const long = (name: string) => withCacheDefaults({ input_per_mtok: 1_000, output_per_mtok: 6_000 }, "openai", name, 1_050_000).long_context;
    for (const name of ["gpt-5.4", "gpt-5.4-pro", "gpt-5.5", "gpt-5.5-pro-2026-05-01", "openai/gpt-5.5", "gpt-5.6-sol", "gpt-5.6-luna", "gpt-6"]) {
      expect([name, long(name)?.above_tokens, long(name)?.input_per_mtok, long(name)?.output_per_mtok]).toEqual([name, 272_000, 2_000, 9_000]);
    }
    expect(long("gpt-5.6-terra")).toMatchObject({ cache_read_per_mtok: 200, cache_write_per_mtok: 2_500 });
    for (const name of ["gpt-5.4-mini", "gpt-5.4-nano", "gpt-5.3-codex", "gpt-5.1", "gpt-5", "gpt-4.1"]) expect([name, long(name)]).toEqual([name, undefined]);
    // A window that cannot pass the threshold needs no list.
    expect(withCacheDefaults({ input_per_mtok: 1_000, output_per_mtok: 6_000 }, "openai", "gpt-5.5", 272_000).long_context).toBeUndefined();
  });
});

describe("the price book", () => {
  const pricing = withCacheDefaults(SONNET, "anthropic", "claude-sonnet-4-5");

  test("long-context cache prices left out take the vendor's multipliers of the long-context input price", () => {
    expect(pricing.long_context).toEqual({ above_tokens: 200_000, input_per_mtok: 6_000, output_per_mtok: 22_500, cache_read_per_mtok: 600, cache_write_per_mtok: 7_500, cache_write_1h_per_mtok: 12_000 });
  });

  test("the list changes strictly above the threshold, and each list is one object (one price id)", () => {
    expect(priceListOf(pricing, 200_000).input).toBe(3_000);
    expect(priceListOf(pricing, 200_001).input).toBe(6_000);
    expect(priceListOf(pricing, 300_000)).toBe(priceListOf(pricing, 200_001));
  });

  test("the hold prices a prompt that may be over the threshold at the dearer list, and one that cannot be at the base list", () => {
    // Dearest prompt class: the 1-hour write (2× input).
    expect(worstCaseMicro(pricing, 100_000, 1_000, 0)).toBe(100_000 * 6_000 + 1_000 * 15_000);
    expect(worstCaseMicro(pricing, 250_000, 1_000, 0)).toBe(250_000 * 12_000 + 1_000 * 22_500);
    // An operator's long-context list that is cheaper (odd, but configurable): the hold still covers the base one.
    const cheaper = { ...pricing, long_context: { ...pricing.long_context!, input_per_mtok: 1, output_per_mtok: 1, cache_read_per_mtok: 1, cache_write_per_mtok: 1, cache_write_1h_per_mtok: 1 } };
    expect(worstCaseMicro(cheaper, 250_000, 1_000, 0)).toBe(250_000 * 6_000 + 1_000 * 15_000);
  });
});

describe("Anthropic's 1M-context beta", () => {
  const sentBeta = async (model: string, beta: string) => {
    upstream.reply(scriptedReply("anthropic", { text: "ok" }));
    const res = await post(gw, "/v1/messages", { model, max_tokens: 10, messages: [{ role: "user", content: "hi" }] }, { "anthropic-beta": beta });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    return upstream.requests.at(-1)!.headers["anthropic-beta"];
  };

  test("is dropped for a model configured with the standard window (the vendor would take, and bill, a prompt past it); other betas go", async () => {
    expect(await sentBeta(ANTHROPIC_MODEL, "context-1m-2025-08-07")).toBeUndefined();
    expect(await sentBeta(ANTHROPIC_MODEL, "context-1m-2025-08-07, interleaved-thinking-2025-05-14")).toBe("interleaved-thinking-2025-05-14");
    expect(await sentBeta(ANTHROPIC_MODEL, "interleaved-thinking-2025-05-14")).toBe("interleaved-thinking-2025-05-14");
  });

  test("goes for a model configured with a window above 200,000 tokens", async () => {
    expect(await sentBeta(MODEL, "context-1m-2025-08-07")).toBe("context-1m-2025-08-07");
  });

  test("the operator's betas for the provider and the client's both go", () => {
    // Written in the config's own case: one header, lower case, both lists.
    const provider = { id: "a", kind: "anthropic", base_url: "https://api.anthropic.com", headers: { "Anthropic-Beta": "extended-cache-ttl-2025-04-11" }, apiKey: "k" } as unknown as ResolvedProvider;
    const call = anthropicAdapter.buildRequest(provider, { model: "m", messages: [] }, new Headers({ "anthropic-beta": "interleaved-thinking-2025-05-14" }));
    expect(call.headers["anthropic-beta"]).toBe("extended-cache-ttl-2025-04-11,interleaved-thinking-2025-05-14");
    expect(call.headers["Anthropic-Beta"]).toBeUndefined();
    expect(betasForWindow("extended-cache-ttl-2025-04-11,Context-1M-2025-08-07", 200_000)).toBe("extended-cache-ttl-2025-04-11");
  });
});
