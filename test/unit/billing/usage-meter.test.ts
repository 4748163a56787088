import { describe, expect, test } from "bun:test";
import { UsageMeter } from "../../../src/billing/usage-meter.ts";
import { createTokenizer } from "../../../src/billing/token-estimate.ts";

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

  // What this costs in heap is measured by the bench (bench/memory.ts), not asserted here.
  test("a 24 MB answer does not stay in memory: what is kept for an estimate is the first piece (≤ 64 KB), which passed the budget, nothing after", async () => {
    const meter = new UsageMeter(countTokens);
    const PIECE = 64 * 1024;
    let decodedLate = 0;
    let firstPiece = 0;
    for (let i = 0; i < 384; i++) {
      // Distinct strings of ordinary words (long runs of one letter are the tokenizer's slowest
      // input, and its cache would carry them into other tests).
      const text = `${i}: ${words(PIECE / 6, i)}`.slice(0, PIECE);
      firstPiece ||= text.length;
      meter.observe({ type: "text", text });
      // Frames relayed after the sample is taken are measured by size, never decoded.
      if (i % 2 === 0) meter.defer({ data: "f".repeat(PIECE) }, () => (decodedLate++, [{ type: "text", text: `frame ${i}` }]));
      expect(meter.keptChars).toBe(firstPiece);
    }
    const usage = await meter.total(() => "");
    expect(decodedLate).toBe(0);
    expect(firstPiece).toBeGreaterThan(8 * 1024);
    expect(meter.keptChars).toBe(firstPiece);
    expect(usage.estimated).toBe(true);
    expect(usage.outputTokens).toBeGreaterThan(0);
  });

  test("relayed frames are decoded only when an estimate is needed, and only the sample's: a stream past the budget whose upstream reports costs no decoding", async () => {
    const frame = (i: number) => ({ data: `{"choices":[{"index":0,"delta":{"content":" word${i}"}}],"padding":"${"p".repeat(150)}"}` });
    const decodeText = (f: { data: string }) => [{ type: "text" as const, text: JSON.parse(f.data).choices[0].delta.content as string }];
    // Reported at the end (OpenAI's usage chunk): nothing decoded, however many frames passed.
    let decoded = 0;
    const reported = new UsageMeter(countTokens);
    for (let i = 0; i < 200; i++) reported.defer(frame(i), (f) => (decoded++, decodeText(f)));
    // Frames weigh four times their size: about 2 KB of them is the sample, held; the rest only measured.
    expect(reported.keptChars).toBeLessThan(2 * 1024 + 200);
    reported.observe({ type: "usage", inputTokens: 5, outputTokens: 400 });
    expect((await reported.total(() => "")).outputTokens).toBe(400);
    expect(decoded).toBe(0);
    // Not reported: the sample's frames are decoded, the rest counted at their text share.
    decoded = 0;
    const estimated = new UsageMeter(countTokens);
    for (let i = 0; i < 200; i++) estimated.defer(frame(i), (f) => (decoded++, decodeText(f)));
    const usage = await estimated.total(() => "x");
    expect(decoded).toBeLessThan(20);
    const exact = await countTokens(Array.from({ length: 200 }, (_, i) => ` word${i}`).join(""));
    expect(Math.abs(usage.outputTokens - exact) / exact).toBeLessThan(0.15);
  });

  test("frames that come after a sample of text alone are counted at their own text share, not character for character", async () => {
    const frame = (i: number) => ({ data: `{"choices":[{"index":0,"delta":{"content":" word${i}"}}],"padding":"${"p".repeat(150)}"}` });
    const decodeText = (f: { data: string }) => [{ type: "text" as const, text: JSON.parse(f.data).choices[0].delta.content as string }];
    const meter = new UsageMeter(countTokens);
    // Decoded text fills the budget first (a tool's long arguments, say), then relayed frames follow.
    const first = words(9_000 / 6, 7).slice(0, 9_000);
    meter.observe({ type: "text", text: first });
    for (let i = 0; i < 300; i++) meter.defer(frame(i), decodeText);
    const usage = await meter.total(() => "x");
    const exact = await countTokens(first + Array.from({ length: 300 }, (_, i) => ` word${i}`).join(""));
    expect(Math.abs(usage.outputTokens - exact) / exact).toBeLessThan(0.15);
  });

  test("below the budget everything is kept for an exact count; reported usage frees it all", () => {
    const meter = new UsageMeter(countTokens, 1_000);
    meter.observe({ type: "text", text: "x".repeat(600) });
    meter.observe({ type: "reasoning", text: "y".repeat(300) });
    // The reasoning counts twice: in the answer's sample and apart, for its own count.
    expect(meter.keptChars).toBe(600 + 300 + 300);
    meter.observe({ type: "usage", outputTokens: 10, reasoningTokens: 4 });
    expect(meter.keptChars).toBe(0);
  });

  test("once the upstream reports its output count, no text is kept at all", async () => {
    const meter = new UsageMeter(countTokens, 1_000);
    meter.observe({ type: "usage", inputTokens: 7, outputTokens: 3 });
    for (let i = 0; i < 100; i++) meter.observe({ type: "text", text: "x".repeat(500) });
    expect(await meter.total(() => "never counted")).toEqual({ inputTokens: 7, outputTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, estimated: false, images: 0 });
  });

  test("Anthropic's placeholder output count in message_start is not taken as the answer's", async () => {
    const { anthropicAdapter } = await import("../../../src/providers/anthropic/anthropic-adapter.ts");
    const decode = anthropicAdapter.createStreamDecoder();
    const meter = new UsageMeter(countTokens);
    const frames = [
      { event: "message_start", data: '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}' },
      { event: "content_block_start", data: '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}' },
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
