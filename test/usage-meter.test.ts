import { describe, expect, test } from "bun:test";
import { UsageMeter } from "../src/billing/usage-meter.ts";
import { createTokenizer } from "../src/billing/token-estimate.ts";

const { count: countTokens } = createTokenizer();

const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `w${(i * 7919 + seed) % 10007}`).join(" ") + " ";

describe("usage meter", () => {
  test("a long answer with no reported usage is counted from a sample at its rate: within a few percent of an exact count", async () => {
    const pieces = Array.from({ length: 60 }, (_, i) => words(300, i));
    const spilling = new UsageMeter(countTokens, 4_096);
    const keeping = new UsageMeter(countTokens, Number.MAX_SAFE_INTEGER);
    for (const text of pieces) {
      spilling.observe({ type: "text", text });
      keeping.observe({ type: "text", text });
    }
    const [a, b] = await Promise.all([spilling.total(() => "prompt"), keeping.total(() => "prompt")]);
    expect(a.estimated).toBe(true);
    expect(b.outputTokens).toBe(await countTokens(pieces.join("")));
    expect(Math.abs(a.outputTokens - b.outputTokens) / b.outputTokens).toBeLessThan(0.05);
  });

  test("a 24 MB answer does not stay in memory: what is kept for an estimate is bounded", async () => {
    const meter = new UsageMeter(countTokens);
    Bun.gc(true);
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 384; i++) {
      // Distinct strings of ordinary words (long runs of one letter are the tokenizer's slowest
      // input, and its cache would carry them into other tests).
      const text = `${i}: ${words(64 * 1024 / 6, i)}`.slice(0, 64 * 1024);
      meter.observe({ type: "text", text });
      if (i % 2 === 0) meter.defer(() => [{ type: "text", text: `frame ${i}` }], 64 * 1024);
    }
    Bun.gc(true);
    const grown = process.memoryUsage().heapUsed - before;
    expect(grown).toBeLessThan(8 * 1024 * 1024);
    const usage = await meter.total(() => "");
    expect(usage.estimated).toBe(true);
    expect(usage.outputTokens).toBeGreaterThan(0);
  }, 30_000);

  test("once the upstream reports its output count, no text is kept at all", async () => {
    const meter = new UsageMeter(countTokens, 1_000);
    meter.observe({ type: "usage", inputTokens: 7, outputTokens: 3 });
    for (let i = 0; i < 100; i++) meter.observe({ type: "text", text: "x".repeat(500) });
    expect(await meter.total(() => "never counted")).toEqual({ inputTokens: 7, outputTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, estimated: false, images: 0 });
  });

  test("Anthropic's placeholder output count in message_start is not taken as the answer's", async () => {
    const { anthropicAdapter } = await import("../src/providers/anthropic/anthropic-adapter.ts");
    const decode = anthropicAdapter.createStreamDecoder();
    const meter = new UsageMeter(countTokens);
    const frames = [
      { event: "message_start", data: '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}' },
      { event: "content_block_delta", data: '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a fairly long answer of several words"}}' },
      { event: "message_delta", data: '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":"n/a"}}' },
    ];
    for (const f of frames) for (const e of decode({ ...f, id: undefined, retry: undefined }).events) meter.observe(e);
    const usage = await meter.total(() => "");
    expect(usage.inputTokens).toBe(12);
    expect(usage.estimated).toBe(true);
    expect(usage.outputTokens).toBeGreaterThan(3);
  });
});
