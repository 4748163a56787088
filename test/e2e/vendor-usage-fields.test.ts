/**
 * Usage fields of OpenAI-compatible servers that are not OpenAI's own, billed as their vendors bill
 * them (a bill audit, thirty-sixth session): Moonshot's (Kimi's) cache reads at the usage's top level
 * (`cached_tokens`), and its streams' usage inside the last chunk's choice (`choices[0].usage`); a
 * Claude model's 1-hour cache writes behind a server that reports its writes as one total
 * (OpenRouter's `cache_write_tokens`).
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { chargeOf, post, sseFrames, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
/** Kimi K2.6 at Moonshot's list prices (US$ 0.60 in, 0.15 cache hits, 2.50 out; US$ 1 = 1,000 credits). */
const KIMI = "test/kimi";
/** Claude Sonnet 4.5 through OpenRouter (an OpenAI-format server): Anthropic's cache multipliers by its name. */
const OPENROUTER_CLAUDE = "test/openrouter-claude";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 1_000,
  extraModels: [
    { id: OPENROUTER_CLAUDE, provider: "fake-openai", upstream_model: "anthropic/claude-sonnet-4.5", category: "text", context_length: 200_000, owned_by: "anthropic", pricing: { input_per_mtok: 3_000, output_per_mtok: 15_000 } },
    { id: KIMI, provider: "fake-openai", upstream_model: "kimi-k2.6", category: "text", context_length: 262_144, owned_by: "moonshot", pricing: { input_per_mtok: 600, output_per_mtok: 2_500, cache_read_per_mtok: 150 } },
  ],
}));
/** Long enough that the hold covers the 10,000 prompt tokens reported (a hold counts at most a token a byte). */
const ask = [{ role: "user", content: "hi ".repeat(12_000) }];
/** Moonshot's usage: 10,000 prompt tokens of which 8,000 hit its cache, 100 out. */
const KIMI_USAGE = { prompt_tokens: 10_000, completion_tokens: 100, total_tokens: 10_100, cached_tokens: 8_000 };
/** By hand: 2,000 fresh × 600 + 8,000 read × 150 + 100 out × 2,500. */
const VENDOR_MICRO = 2_000 * 600 + 8_000 * 150 + 100 * 2_500;

const chunk = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id: "chatcmpl-kimi", object: "chat.completion.chunk", created: 1, model: "kimi-k2.6", ...o })}\n\n`;
/** A Kimi stream as Moonshot sends it: the usage inside the last chunk's choice, none beside it. */
const kimiStream = () => [
  chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hello from Kimi." }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop", usage: KIMI_USAGE }] }),
  "data: [DONE]\n\n",
];
const kimiBody = { id: "chatcmpl-kimi", object: "chat.completion", created: 1, model: "kimi-k2.6", choices: [{ index: 0, message: { role: "assistant", content: "Hello from Kimi." }, finish_reason: "stop" }], usage: KIMI_USAGE };

describe("Moonshot's (Kimi's) usage", () => {
  test("a whole answer's top-level cached_tokens are cache reads", async () => {
    upstream.reply({ kind: "json", body: kimiBody });
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: KIMI, messages: ask }))).micro).toBe(VENDOR_MICRO);
    // Translated for an Anthropic client: the same charge, the reads shown as Anthropic shows them.
    upstream.reply({ kind: "json", body: kimiBody });
    let shown: any;
    expect((await chargeOf(gw, async () => {
      const res = await post(gw, "/v1/messages", { model: KIMI, max_tokens: 200, messages: ask });
      shown = await res.clone().json();
      return res;
    })).micro).toBe(VENDOR_MICRO);
    expect(shown.usage).toMatchObject({ input_tokens: 2_000, cache_read_input_tokens: 8_000, output_tokens: 100 });
  });

  test("a stream's usage inside its last choice is the vendor's count, on every client format", async () => {
    for (const [path, body] of [
      ["/v1/chat/completions", { model: KIMI, messages: ask, stream: true, stream_options: { include_usage: true } }],
      ["/v1/messages", { model: KIMI, max_tokens: 200, messages: ask, stream: true }],
      ["/v1/responses", { model: KIMI, input: ask[0]!.content, stream: true, store: false }],
    ] as const) {
      upstream.reply({ kind: "sse", chunks: kimiStream() });
      let text = "";
      const { micro } = await chargeOf(gw, async () => {
        const res = await post(gw, path, body);
        text = await res.clone().text();
        return res;
      });
      expect({ path, micro }).toEqual({ path, micro: VENDOR_MICRO });
      if (path === "/v1/chat/completions") {
        // The client that asked for usage is told what it is billed, reads included.
        const usage = sseFrames(text).map((f) => (f.data === "[DONE]" ? undefined : JSON.parse(f.data).usage)).findLast(Boolean);
        expect(usage).toMatchObject({ prompt_tokens: 10_000, completion_tokens: 100, prompt_tokens_details: { cached_tokens: 8_000 } });
      }
    }
    // Not estimated: the records carry the vendor's counts.
    const estimated = gw.db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage_records WHERE estimated").get()!.n;
    expect(estimated).toBe(0);
  });
});

describe("a Claude model's cache writes reported as one total by an OpenAI-format server", () => {
  /** OpenRouter's usage: 10,000 prompt tokens, 8,000 of them written to the cache, 100 out. */
  const usage = { prompt_tokens: 10_000, completion_tokens: 100, total_tokens: 10_100, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 8_000 } };
  const body = { id: "gen-1", object: "chat.completion", created: 1, model: "anthropic/claude-sonnet-4.5", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage };
  const stream = () => [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "ok" }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    chunk({ choices: [], usage }),
    "data: [DONE]\n\n",
  ];
  const marked = (ttl?: string) => [
    { role: "system", content: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral", ...(ttl ? { ttl } : {}) } }] },
    { role: "user", content: [{ type: "text", text: "hi ".repeat(12_000), cache_control: { type: "ephemeral", ...(ttl ? { ttl } : {}) } }] },
  ];
  /** By hand, Anthropic's multipliers of 3,000: 2,000 fresh × 3,000 + 8,000 written × 6,000 (1 hour) or 3,750 (5 minutes) + 100 out × 15,000. */
  const HOUR_MICRO = 2_000 * 3_000 + 8_000 * 6_000 + 100 * 15_000;
  const FIVE_MINUTES_MICRO = 2_000 * 3_000 + 8_000 * 3_750 + 100 * 15_000;

  test("every mark asked for an hour: 1-hour writes, streamed or not", async () => {
    upstream.reply({ kind: "json", body });
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: OPENROUTER_CLAUDE, messages: marked("1h") }))).micro).toBe(HOUR_MICRO);
    expect(upstream.requests.at(-1)!.body.messages[1].content[0].cache_control).toEqual({ type: "ephemeral", ttl: "1h" });
    upstream.reply({ kind: "sse", chunks: stream() });
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: OPENROUTER_CLAUDE, messages: marked("1h"), stream: true }))).micro).toBe(HOUR_MICRO);
    const row = gw.db.query<{ w5: number; w1: number }, []>("SELECT cache_write_5m_tokens AS w5, cache_write_1h_tokens AS w1 FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(row).toEqual({ w5: 0, w1: 8_000 });
  });

  test("a dense prompt written whole for the hour is held for it, and charged in full", async () => {
    // A token a byte (digits), all of it written for the hour, one token out: the hold must cover 2× input, not 1.25×.
    const dense = { prompt_tokens: 4_000, completion_tokens: 1, total_tokens: 4_001, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 4_000 } };
    upstream.reply({ kind: "json", body: { ...body, usage: dense } });
    const messages = [{ role: "user", content: [{ type: "text", text: "7".repeat(4_000), cache_control: { type: "ephemeral", ttl: "1h" } }] }];
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: OPENROUTER_CLAUDE, messages, max_tokens: 1 }))).micro).toBe(4_000 * 6_000 + 1 * 15_000);
  });

  test("5-minute marks, or none, stay 5-minute writes", async () => {
    upstream.reply({ kind: "json", body });
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: OPENROUTER_CLAUDE, messages: marked() }))).micro).toBe(FIVE_MINUTES_MICRO);
    upstream.reply({ kind: "json", body });
    expect((await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: OPENROUTER_CLAUDE, messages: ask }))).micro).toBe(FIVE_MINUTES_MICRO);
  });
});
