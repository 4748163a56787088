/**
 * What the vendors bill beside the token counts, read from the answer (config/price-rules.ts):
 * OpenAI's Flex processing at half the standard price, Anthropic's US-only inference at 1.1× on
 * Claude 4.6 and later; and OpenAI's own API asked for the standard tier by name, so a project
 * whose default is Priority is not billed above what the tenant pays (a bill audit, 2026-11-30).
 */
import { describe, expect, test } from "bun:test";
import { runAdmin } from "../../src/cli/admin.ts";
import { hasOpenAITiers, maxPriceFactor, priceFactor } from "../../src/config/price-rules.ts";
import { resolveSettings } from "../../src/config/load-config.ts";
import { withoutUnpricedExtras } from "../../src/providers/openai/openai-adapter.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, chargeOf, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

const OPUS_46 = "test/opus-4-6";
const upstream = useFakeUpstream();
/** The fake upstream as OpenAI's own API (`openai_tiers`): its tiers and their prices. */
const OPENAI_ITSELF = "test/gpt-openai-itself";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 1_000,
  extraProviders: [{ id: "fake-openai-itself", kind: "openai", base_url: `${upstream.url}/v1`, api_key_env: "TEST_OPENAI_KEY", openai_tiers: true }],
  extraModels: [
    { id: OPUS_46, provider: "fake-anthropic", upstream_model: "claude-opus-4-6", category: "text", context_length: 200_000, owned_by: "anthropic", pricing: { input_per_mtok: 5_000, output_per_mtok: 25_000 } },
    { id: OPENAI_ITSELF, provider: "fake-openai-itself", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, owned_by: "openai", pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
  ],
}));
/** Long enough that each hold covers the 1,000 prompt tokens the fake upstream reports (a hold counts at most a token a byte). */
const ask = [{ role: "user", content: "hi ".repeat(2_000) }];

const openaiBody = (tier: string | undefined) => ({
  id: "chatcmpl-tier", object: "chat.completion", created: 1, model: "gpt-4o-mini", ...(tier ? { service_tier: tier } : {}),
  choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 },
});
const openaiStream = (tier: string) => [
  `data: ${JSON.stringify({ id: "chatcmpl-tier", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", service_tier: tier, choices: [{ index: 0, delta: { role: "assistant", content: "ok" }, finish_reason: null }] })}\n\n`,
  `data: ${JSON.stringify({ id: "chatcmpl-tier", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", service_tier: tier, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`,
  `data: ${JSON.stringify({ id: "chatcmpl-tier", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", service_tier: tier, choices: [], usage: { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 } })}\n\n`,
  "data: [DONE]\n\n",
];
const anthropicEvent = (name: string, data: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;
const anthropicStream = (geo: string) => [
  anthropicEvent("message_start", { message: { id: "msg_geo", type: "message", role: "assistant", model: "claude-opus-4-6", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1_000, output_tokens: 1, inference_geo: geo } } }),
  anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
  anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "ok" } }),
  anthropicEvent("content_block_stop", { index: 0 }),
  anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 100 } }),
  anthropicEvent("message_stop", {}),
];

const charge = (send: () => Promise<Response>) => chargeOf(gw, send);

describe("OpenAI's Flex processing", () => {
  test("an answer the upstream says ran at flex is charged half the standard prices, streamed or not; the audit agrees", async () => {
    // gpt-4o-mini at 150 / 600: 1,000 in and 100 out are 210,000 micro-credits at standard, 105,000 at flex.
    upstream.reply({ kind: "json", body: openaiBody("flex") });
    const whole = await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, service_tier: "flex" }));
    expect(whole.micro).toBe(105_000);
    expect(whole.prices).toMatchObject({ input: 75, output: 300 });
    upstream.reply({ kind: "sse", chunks: openaiStream("flex") });
    expect((await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, service_tier: "flex", stream: true }))).micro).toBe(105_000);
    // A Responses client's flex reaches the upstream as flex, and is charged the same.
    upstream.reply({ kind: "json", body: openaiBody("flex") });
    expect((await charge(() => post(gw, "/v1/responses", { model: OPENAI_ITSELF, input: ask[0]!.content, service_tier: "flex", store: false }))).micro).toBe(105_000);
    expect(upstream.requests.at(-1)!.body.service_tier).toBe("flex");
    // Translated for an Anthropic client, the same.
    upstream.reply({ kind: "sse", chunks: openaiStream("flex") });
    expect((await charge(() => post(gw, "/v1/messages", { model: OPENAI_ITSELF, max_tokens: 200, messages: ask, stream: true }))).micro).toBe(105_000);
    const audit = await runAdmin(["audit"], { SWITCHYARD_DB: gw.dbPath });
    expect(audit.code).toBe(0);
    expect(JSON.parse(audit.out).mispriced).toEqual([]);
  });

  test("a flex stream whose usage chunk leaves the tier out (a proxy that rebuilds it) is charged at the tier its other chunks named", async () => {
    const chunks = openaiStream("flex");
    chunks[2] = chunks[2]!.replace('"service_tier":"flex",', "");
    expect(chunks[2]).not.toContain("service_tier");
    upstream.reply({ kind: "sse", chunks });
    expect((await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, service_tier: "flex", stream: true }))).micro).toBe(105_000);
    // A stream that named another tier before its usage is charged at that one.
    upstream.reply({ kind: "sse", chunks: openaiStream("default").map((c, i) => (i === 2 ? c.replace('"service_tier":"default",', "") : c)) });
    expect((await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, service_tier: "flex", stream: true }))).micro).toBe(210_000);
  });

  test("a flex stream its client leaves before the usage chunk (the tier unsaid) is charged at flex, the tier it asked for; a standard one at standard", async () => {
    const leaveAfterFirstChunk = async (tier: string | undefined) => {
      upstream.reply({ kind: "sse", holdOpen: true, chunks: [openaiStream(tier ?? "default")[0]!.replace(/"service_tier":"[a-z]+",/, "")] });
      const before = await gw.balanceMicro();
      const leave = new AbortController();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, stream: true, ...(tier ? { service_tier: tier } : {}) }, {}, leave.signal);
      const reader = res.body!.getReader();
      await reader.read();
      leave.abort();
      await reader.cancel().catch(() => {});
      for (let i = 0; i < 600 && gw.app.services.inflight.count > 0; i++) await Bun.sleep(5);
      await gw.app.services.settled();
      upstream.finishHeld();
      return before - (await gw.balanceMicro());
    };
    const standard = await leaveAfterFirstChunk(undefined);
    const flex = await leaveAfterFirstChunk("flex");
    expect(standard).toBeGreaterThan(0);
    // The same estimate at half the prices (each class rounded up on its own).
    expect(Math.abs(flex - standard / 2)).toBeLessThanOrEqual(2);
  });

  test("a flex request the upstream answered at another tier, or without saying, is charged the standard prices; so is flex from another server", async () => {
    for (const tier of ["default", undefined]) {
      upstream.reply({ kind: "json", body: openaiBody(tier) });
      expect((await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask, service_tier: "flex" }))).micro).toBe(210_000);
    }
    // Not OpenAI's own API (no openai_tiers, not api.openai.com): its `flex` is its own (Groq's costs its standard price).
    upstream.reply({ kind: "json", body: openaiBody("flex") });
    expect((await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, service_tier: "flex" }))).micro).toBe(210_000);
  });

  test("OpenAI's own API is asked for the standard tier by name; another server gets what the client sent", async () => {
    upstream.reply({ kind: "json", body: openaiBody(undefined) });
    await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_ITSELF, messages: ask }));
    expect(upstream.requests.at(-1)!.body.service_tier).toBe("default");
    upstream.reply({ kind: "json", body: openaiBody(undefined) });
    await charge(() => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask }));
    expect(upstream.requests.at(-1)!.body.service_tier).toBeUndefined();
  });

  test("OpenAI's own API is known by its host, its data-residency regions included (eu.api.openai.com; a bill audit); `openai_tiers` overrides", () => {
    for (const url of ["https://api.openai.com/v1", "https://eu.api.openai.com/v1", "https://EU.API.OPENAI.COM/v1"]) expect(hasOpenAITiers({ base_url: url })).toBe(true);
    for (const url of ["https://api.openai.com.evil.example/v1", "https://notapi.openai.com/v1", "https://openrouter.ai/api/v1", "not a url"]) expect(hasOpenAITiers({ base_url: url })).toBe(false);
    expect(hasOpenAITiers({ base_url: "https://eu.api.openai.com/v1", openai_tiers: false })).toBe(false);
    expect(hasOpenAITiers({ base_url: "http://127.0.0.1:1/v1", openai_tiers: true })).toBe(true);
  });

  test("the tiers OpenAI's own API is sent: the standard one by name unless the client asked for flex; other servers get what the client sent", () => {
    const sent = (tier: string | undefined, openaiItself: boolean) => (withoutUnpricedExtras({ model: "m", ...(tier ? { service_tier: tier } : {}) }, openaiItself) as { service_tier?: string }).service_tier;
    expect([undefined, "auto", "default", "priority", "scale", "flex"].map((t) => sent(t, true))).toEqual(["default", "default", "default", "default", "default", "flex"]);
    expect([undefined, "auto", "default", "priority", "scale", "flex"].map((t) => sent(t, false))).toEqual([undefined, "auto", "default", undefined, undefined, "flex"]);
  });
});

describe("Anthropic's US-only inference", () => {
  test("on Claude 4.6 and later an answer that ran in the US is charged 1.1× every price; elsewhere, or on older models, the list price", async () => {
    // claude-opus-4-6 at 5,000 / 25,000: 1,000 in and 100 out are 7,500,000 at list, 8,250,000 at 1.1×.
    upstream.reply({ kind: "sse", chunks: anthropicStream("us") });
    const us = await charge(() => post(gw, "/v1/messages", { model: OPUS_46, max_tokens: 200, messages: ask, stream: true }));
    expect(us.micro).toBe(8_250_000);
    expect(us.prices).toMatchObject({ input: 5_500, output: 27_500, cacheRead: 550, cacheWrite5m: 6_875, cacheWrite1h: 11_000 });
    upstream.reply({ kind: "sse", chunks: anthropicStream("global") });
    expect((await charge(() => post(gw, "/v1/messages", { model: OPUS_46, max_tokens: 200, messages: ask, stream: true }))).micro).toBe(7_500_000);
    // Sonnet 4.5 was released before US-only inference cost more.
    upstream.reply({ kind: "sse", chunks: anthropicStream("us") });
    expect((await charge(() => post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 200, messages: ask, stream: true }))).micro).toBe(1_000 * 3_000 + 100 * 15_000);
  });

  test("the hold of a model it applies to covers 1.1×; which models each factor applies to", () => {
    const provider = (kind: "openai" | "anthropic", base_url: string) => ({ id: "p", kind, base_url, api_key_env: "K" });
    const model = (upstream_model: string, kind: "openai" | "anthropic" = "anthropic", base_url = "https://api.anthropic.com") =>
      resolveSettings({ providers: [provider(kind, base_url)], models: [{ id: "x/m", provider: "p", upstream_model, category: "text", context_length: 200_000, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }] }, { K: "k" }, "test").models[0]!;
    expect(maxPriceFactor(model("claude-opus-4-6"))).toBe(1.1);
    expect(maxPriceFactor(model("us.anthropic.claude-sonnet-4-6-20260301-v1:0", "openai", "https://bedrock.example/v1"))).toBe(1.1);
    expect(maxPriceFactor(model("claude-sonnet-5"))).toBe(1.1);
    for (const older of ["claude-sonnet-4-5", "claude-opus-4-1", "claude-3-7-sonnet-latest", "claude-haiku-4-5-20251001"]) expect([older, maxPriceFactor(model(older))]).toEqual([older, 1]);
    // Flex: OpenAI's families on OpenAI's own API only.
    expect(priceFactor(model("o4-mini", "openai", "https://api.openai.com/v1"), { serviceTier: "flex" })).toBe(0.5);
    expect(priceFactor(model("gpt-oss-120b", "openai", "https://api.groq.com/openai/v1"), { serviceTier: "flex" })).toBe(1);
    expect(priceFactor(model("llama-3.3-70b", "openai", "https://api.openai.com/v1"), { serviceTier: "flex" })).toBe(1);
  });
});
