/**
 * What a whole answer is expected to take of its account's share of unread answers before it is
 * made (limits/unread-answers.ts, gateway/plan.ts `expectedAnswerBytes`): nothing for streams and
 * small answers, its logprobs (OpenAI chat only) and `n` answers at their limit, an image model's
 * images at max_image_bytes.
 */
import { expect, test } from "bun:test";
import { resolveSettings } from "../../../src/config/load-config.ts";
import { expectedAnswerBytes } from "../../../src/gateway/plan.ts";
import type { ModelConfig } from "../../../src/config/schema.ts";

const PRICE = { input_per_mtok: 1, output_per_mtok: 1 };
const settings = resolveSettings({
  providers: [
    { id: "o", kind: "openai", base_url: "http://127.0.0.1:1/v1" },
    { id: "a", kind: "anthropic", base_url: "http://127.0.0.1:1" },
  ],
  models: [
    { id: "o/chat", provider: "o", upstream_model: "gpt-6-luna", category: "text", context_length: 100_000, pricing: PRICE },
    { id: "o/resp", provider: "o", upstream_model: "gpt-6.1-sol", upstream_api: "responses", category: "text", context_length: 100_000, pricing: PRICE },
    { id: "a/claude", provider: "a", upstream_model: "claude-sonnet-5-5", category: "text", context_length: 100_000, pricing: PRICE },
    { id: "o/image", provider: "o", upstream_model: "gpt-image-2.6-flare", upstream_api: "images", category: "image", context_length: 32_000, pricing: PRICE },
  ],
}, {}, "test");
const model = (id: string) => settings.models.find((m) => m.id === id) as ModelConfig;
const PACED = 64 * 1024;
const at = (id: string, maxTokens: number) => ({ model: model(id), maxTokens });
const logprobs = { logprobs: true, top_logprobs: 20 };

test("an ordinary answer, a stream, and a small answer expect nothing", () => {
  expect(expectedAnswerBytes(settings, "openai", {}, [at("o/chat", 8192)], PACED)).toBe(0);
  expect(expectedAnswerBytes(settings, "openai", { stream: true, ...logprobs }, [at("o/chat", 8192)], PACED)).toBe(0);
  expect(expectedAnswerBytes(settings, "openai", logprobs, [at("o/chat", 16)], PACED)).toBe(0);
});

test("logprobs and n at the answer limit, OpenAI's chat API only; the dearest candidate's; at most max_response_bytes", () => {
  expect(expectedAnswerBytes(settings, "openai", logprobs, [at("o/chat", 8192)], PACED)).toBe(8192 * (4 + 21 * 64));
  expect(expectedAnswerBytes(settings, "openai", { n: 8 }, [at("o/chat", 8192)], PACED)).toBe(8 * 8192 * 4);
  // Neither Anthropic nor the Responses API is asked for logprobs or several answers.
  expect(expectedAnswerBytes(settings, "openai", { n: 8, ...logprobs }, [at("a/claude", 8192)], PACED)).toBe(0);
  expect(expectedAnswerBytes(settings, "openai", { n: 8, ...logprobs }, [at("o/resp", 8192)], PACED)).toBe(0);
  expect(expectedAnswerBytes(settings, "openai", logprobs, [at("a/claude", 8192), at("o/chat", 4096)], PACED)).toBe(4096 * (4 + 21 * 64));
  expect(expectedAnswerBytes(settings, "openai", { n: 128, ...logprobs }, [at("o/chat", 8192)], PACED)).toBe(settings.limits.max_response_bytes);
});

test("an image model's answer expects its image at max_image_bytes in base64, streamed or not (the images API answers whole)", () => {
  const image = Math.ceil((settings.limits.max_image_bytes * 4) / 3);
  expect(expectedAnswerBytes(settings, "openai", {}, [at("o/image", 0)], PACED)).toBe(image);
  expect(expectedAnswerBytes(settings, "openai", { stream: true }, [at("o/image", 0)], PACED)).toBe(image);
  expect(expectedAnswerBytes(settings, "anthropic", {}, [at("o/image", 0)], PACED)).toBe(image);
});
