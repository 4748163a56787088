/**
 * A Claude Code session and a Codex session on the built-in catalogue's models, at the prices it
 * ships with (config/defaults.ts, cache prices filled in by config/cache-prices.ts), through every
 * client format, checked against the vendors' price lists of 2026-11-30 (a bill audit, third
 * round; US$ 1 = 1,000 credits):
 * - Claude Opus 5.5: $4 in, $20 out, cache reads $0.20, writes $5 (5 min) / $8 (1 h); Claude
 *   Sonnet 5.5: $2 / $10, reads $0.10, writes $2.50 / $4; Claude Haiku 4.5: $1 / $5, reads $0.10,
 *   writes $1.25 / $2 (platform.claude.com's pricing page and model pages). Anthropic's
 *   `input_tokens` leaves the cached tokens out.
 * - GPT-6 Luna: $0.10 / $0.50, cached $0.01, writes $0.125; GPT-6 Sol: $2 / $10, cached $0.20,
 *   writes $2.50 (developers.openai.com model pages). OpenAI's `prompt_tokens` includes them.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { chargeOf, post, useGateway } from "../helpers/gateway.ts";
import { scriptedReply, type Script } from "../helpers/scripted-answers.ts";
import { builtInModel as model } from "../helpers/built-in-models.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  retry: { max_retries: 0 },
  extraModels: [
    model("anthropic/claude-opus-5-5", "fake-anthropic"),
    model("anthropic/claude-sonnet-5-5", "fake-anthropic"),
    model("anthropic/claude-haiku-4-5", "fake-anthropic"),
    model("openai/gpt-6-luna", "fake-openai"),
    model("openai/gpt-6-sol", "fake-openai"),
  ],
}));

/** Enough prompt that the counts reported are within what the request could hold. */
const PROMPT = "agent context ".repeat(30_000);
function body(path: string, id: string, stream: boolean) {
  const m = `audit/${id}`;
  if (path === "/v1/responses") return { model: m, input: PROMPT, stream, store: false };
  if (path === "/v1/messages") return { model: m, max_tokens: 8_000, system: [{ type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral", ttl: "1h" } }], messages: [{ role: "user", content: PROMPT }], thinking: { type: "adaptive" }, stream };
  return { model: m, messages: [{ role: "user", content: PROMPT }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) };
}
const paths = ["/v1/messages", "/v1/chat/completions", "/v1/responses"];

/** A Claude Code turn: 300 fresh, 60,000 read, 3,000 written for 5 minutes and 2,000 for an hour; 1,200 out of which 800 thinking. */
const CLAUDE_TURN: Script = { reasoning: "", text: "Reading the file.", calls: [{ id: "toolu_1", name: "Read", arguments: '{"file_path":"a.ts"}' }], usage: { input: 300, cacheRead: 60_000, cacheWrite5m: 3_000, cacheWrite1h: 2_000, output: 1_200, reasoning: 800 } };
const claudePrices = { "anthropic/claude-opus-5-5": [4_000, 20_000, 200, 5_000, 8_000], "anthropic/claude-sonnet-5-5": [2_000, 10_000, 100, 2_500, 4_000], "anthropic/claude-haiku-4-5": [1_000, 5_000, 100, 1_250, 2_000] } as const;

/** A Codex turn on chat completions: 40,000 prompt tokens of which 36,000 cached and 2,000 written; 900 out of which 600 reasoning. */
const CODEX_TURN: Script = { text: "Running it.", calls: [{ id: "call_1", name: "shell", arguments: '{"command":["ls"]}' }], usage: { input: 2_000, cacheRead: 36_000, cacheWrite5m: 2_000, output: 900, reasoning: 600 } };
const openaiPrices = { "openai/gpt-6-luna": [100, 500, 10, 125], "openai/gpt-6-sol": [2_000, 10_000, 200, 2_500] } as const;

describe("the built-in Claude models, a Claude Code turn", () => {
  for (const [id, [input, output, read, write5m, write1h]] of Object.entries(claudePrices)) {
    for (const path of paths) {
      for (const stream of [true, false]) {
        test(`${id} → ${path}, ${stream ? "streamed" : "whole"}`, async () => {
          upstream.reply(scriptedReply("anthropic", CLAUDE_TURN));
          const { micro } = await chargeOf(gw, () => post(gw, path, body(path, id, stream)));
          expect(micro).toBe(300 * input + 60_000 * read + 3_000 * write5m + 2_000 * write1h + 1_200 * output);
        });
      }
    }
  }
});

describe("the built-in GPT-6 models on chat completions, a Codex turn", () => {
  for (const [id, [input, output, read, write]] of Object.entries(openaiPrices)) {
    for (const path of paths) {
      for (const stream of [true, false]) {
        test(`${id} → ${path}, ${stream ? "streamed" : "whole"}`, async () => {
          upstream.reply(scriptedReply("openai", CODEX_TURN));
          const { micro } = await chargeOf(gw, () => post(gw, path, body(path, id, stream)));
          expect(micro).toBe(Math.ceil(2_000 * input + 36_000 * read + 2_000 * write + 900 * output));
        });
      }
    }
  }
});
