import { describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { countTokens as reference } from "gpt-tokenizer";
import { createTokenizer, promptTokenBound, roughTokenCount } from "../../../src/billing/token-estimate.ts";

const tokenizer = createTokenizer();
const countTokens = tokenizer.count;
const countTokensWhenIdle = tokenizer.countWhenIdle;

describe("token estimates", () => {
  test("counts match gpt-tokenizer's, and a long text is counted in slices at most one token per slice apart", async () => {
    tokenizer.load();
    const short = "Switchyard forwards each token as soon as it arrives. 汉字 and emoji 🚂 too.";
    expect(await countTokens(short)).toBe(reference(short));
    expect(await countTokens("")).toBe(0);
    const long = "The wagons roll over the hump and into their sorting tracks. ".repeat(400);
    const counted = await countTokens(long);
    const exact = reference(long);
    expect(Math.abs(counted - exact)).toBeLessThanOrEqual(Math.ceil(long.length / 2048));
    // Concurrent counts each get their own answer.
    const texts = ["one", "two words", "three short words", short];
    expect(await Promise.all(texts.map((t) => countTokens(t)))).toEqual(texts.map((t) => reference(t)));
  });

  test("a paid count (context fit, usage) waits for at most the one free count in the worker, never for the queue of them", async () => {
    await countTokens("warm"); // nothing else in the worker
    const order: string[] = [];
    const free = [1, 2, 3, 4].map((i) => countTokensWhenIdle("free text to count ".repeat(3000)).then(() => order.push(`free${i}`)));
    const paid = countTokens("a prompt near its context window").then(() => order.push("paid"));
    await Promise.all([...free, paid]);
    // The first free count was already in the worker; the others went only once it held nothing else.
    expect(order).toEqual(["free1", "paid", "free2", "free3", "free4"]);
  });

  test("a long count runs beside the event loop, not on it", async () => {
    await countTokens("warm"); // tables loaded
    // A megabyte without a space: the slowest text to count, tens of milliseconds of BPE.
    const hostile = "x".repeat(1_000_000);
    let turns = 0;
    let counting = true;
    const counted = countTokens(hostile).finally(() => (counting = false));
    while (counting) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      turns++;
    }
    expect(await counted).toBeGreaterThan(1000);
    // On the request thread the count would have finished before the loop turned even once.
    expect(turns).toBeGreaterThan(10);
  });

  test("without its worker (a build that left it out), counts fall back to the rough rule instead of waiting forever", async () => {
    // The module (and what it imports) in a folder of its own: the worker file it starts is not there.
    const dir = mkdtempSync(join(tmpdir(), "switchyard-tokenizer-"));
    try {
      mkdirSync(join(dir, "billing"));
      copyFileSync(new URL("../../../src/worker-url.ts", import.meta.url), join(dir, "worker-url.ts"));
      copyFileSync(new URL("../../../src/billing/token-estimate.ts", import.meta.url), join(dir, "billing", "token-estimate.ts"));
      const lonely = await import(join(dir, "billing", "token-estimate.ts"));
      const text = "internationalization ".repeat(10);
      expect(reference(text)).not.toBe(roughTokenCount(text));
      const alone = lonely.createTokenizer();
      expect(await alone.count(text)).toBe(roughTokenCount(text));
      // The next count tries a new worker, and falls back again.
      expect(await alone.count("abcdefgh")).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("hurried (a stop past its grace), a count in flight is answered by the rough rule at once, and so is every later one", async () => {
    const stopping = createTokenizer();
    // Sent before the thread has its tables (they take a second to load): it waits in the thread.
    const text = Array.from({ length: 5_000 }, (_, i) => `w${(i * 7919).toString(36)}`).join(" ");
    const inFlight = stopping.count(text);
    stopping.hurry();
    const started = performance.now();
    expect(await inFlight).toBe(roughTokenCount(text));
    expect(await stopping.count("later words")).toBe(roughTokenCount("later words"));
    expect(await stopping.countWhenIdle("a free count")).toBe(roughTokenCount("a free count"));
    expect(performance.now() - started).toBeLessThan(100);
  });

  test("the rough rule used when the tokenizer is unavailable, and the reservation bound", () => {
    expect(roughTokenCount("abcd".repeat(10))).toBe(10);
    expect(roughTokenCount("é")).toBe(1);
    // Bytes / 2 plus framing: never under what byte-level BPE can produce for the same bytes.
    expect(promptTokenBound(1000, 2)).toBe(500 + 16 + 8);
  });
});

test("a vendor's own tools are allowed for by their versioned types only: a thousand odd types hold nothing more", async () => {
  const { vendorToolsAllowance, vendorPromptAllowance, VENDOR_PROMPT_ALLOWANCE, VENDOR_TOOL_ALLOWANCE } = await import("../../../src/billing/token-estimate.ts");
  expect(vendorToolsAllowance({ tools: [{ type: "bash_20250124", name: "bash" }, { type: "text_editor_20250728", name: "e" }, { type: "computer_20250124", name: "c" }, { type: "memory_20250818", name: "m" }] })).toBe(4 * VENDOR_TOOL_ALLOWANCE);
  expect(vendorToolsAllowance({ tools: Array.from({ length: 1000 }, (_, i) => ({ type: `odd_${i}`, name: `t${i}` })) })).toBe(0);
  expect(vendorToolsAllowance({ tools: [{ type: "function", function: { name: "f" } }, { type: "custom", name: "c" }, { type: "bash", name: "b" }, { type: "bash_2025" }] })).toBe(0);
  expect(vendorPromptAllowance({})).toBe(VENDOR_PROMPT_ALLOWANCE);
});

test("the tools allowed for are exactly the vendor's client-run tools the Anthropic allow-list lets through (the two lists cannot drift apart)", async () => {
  const { vendorToolsAllowance, VENDOR_TOOL_ALLOWANCE } = await import("../../../src/billing/token-estimate.ts");
  const { isServerTool } = await import("../../../src/formats/anthropic-messages/server-tools.ts");
  for (const type of ["bash_20250124", "text_editor_20250728", "computer_20250124", "memory_20250818"]) {
    expect([type, isServerTool({ type }), vendorToolsAllowance({ tools: [{ type }] })]).toEqual([type, false, VENDOR_TOOL_ALLOWANCE]);
  }
  // Passed, but its cost is the tools in the body: nothing allowed for.
  for (const type of ["tool_search_tool_regex_20251119", "custom"]) expect([type, isServerTool({ type }), vendorToolsAllowance({ tools: [{ type }] })]).toEqual([type, false, 0]);
  // Dropped before the vendor sees them: nothing allowed for either.
  for (const type of ["web_search_20250305", "advisor_20260301", "bash_2025"]) expect([type, isServerTool({ type }), vendorToolsAllowance({ tools: [{ type }] })]).toEqual([type, true, 0]);
});
