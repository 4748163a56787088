/**
 * Usage fields of OpenAI-compatible servers that are not OpenAI's own, billed as their vendors bill
 * them (a bill audit, thirty-sixth session): Moonshot's (Kimi's) cache reads at the usage's top level
 * (`cached_tokens`), and its streams' usage inside the last chunk's choice (`choices[0].usage`).
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { chargeOf, post, sseFrames, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
/** Kimi K2.6 at Moonshot's list prices (US$ 0.60 in, 0.15 cache hits, 2.50 out; US$ 1 = 1,000 credits). */
const KIMI = "test/kimi";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 1_000,
  extraModels: [
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
