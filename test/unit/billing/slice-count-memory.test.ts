import { describe, expect, test } from "bun:test";
import { createSliceCountMemory } from "../../../src/billing/slice-count-memory.ts";
import { createCountQueue } from "../../../src/limits/count-queue.ts";

/** A tokenizer that counts characters and records each slice it was given, in order. */
function recordingCounter() {
  const slices: string[] = [];
  return { slices, count: async (text: string) => (slices.push(text), text.length) };
}

describe("slice count memory", () => {
  test("a slice's count is recalled for its account only, and for that exact text", () => {
    const memory = createSliceCountMemory();
    memory.remember("acct_a", "hello world", 2);
    expect(memory.recall("acct_a", "hello world")).toBe(2);
    expect(memory.recall("acct_a", "hello world!")).toBeUndefined();
    expect(memory.recall("acct_b", "hello world")).toBeUndefined();
  });

  test("bounded per account (its own oldest go) and in all (the account longest idle gives way)", () => {
    const memory = createSliceCountMemory({ perAccount: 2, maxEntries: 3 });
    memory.remember("a", "a1", 1);
    memory.remember("a", "a2", 2);
    // a1 was used: a2 is now the oldest of a's, and goes when a adds a third.
    expect(memory.recall("a", "a1")).toBe(1);
    memory.remember("a", "a3", 3);
    expect(memory.recall("a", "a2")).toBeUndefined();
    expect(memory.recall("a", "a1")).toBe(1);
    // The memory is full at three: b's second slice takes one of a's (a was idle longest), not b's own.
    memory.remember("b", "b1", 1);
    memory.remember("b", "b2", 2);
    expect(memory.recall("b", "b1")).toBe(1);
    expect(memory.recall("b", "b2")).toBe(2);
    expect([memory.recall("a", "a1"), memory.recall("a", "a3")].filter((n) => n !== undefined)).toHaveLength(1);
  });
});

describe("a prompt counted again with more at its end (an agent's next turn)", () => {
  const turn1 = "abcd".repeat(5);
  const turn2 = turn1 + "efgh";

  test("only the slices past the start counted before go to the tokenizer, and the total is the whole text's", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4, remembered: createSliceCountMemory() });
    expect(await queue.count("k", turn1, undefined, undefined, "acct")).toBe(20);
    expect(tokenizer.slices).toHaveLength(5);
    expect(await queue.count("k", turn2, undefined, undefined, "acct")).toBe(24);
    expect(tokenizer.slices.slice(5)).toEqual(["efgh"]);
    // The same prompt again (a retry): nothing counted, answered without a turn.
    expect(await queue.count("k", turn2, undefined, undefined, "acct")).toBe(24);
    expect(tokenizer.slices).toHaveLength(6);
    expect(queue.size).toBe(0);
  });

  test("a limit is still honoured: a remembered start already past it answers at once", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4, remembered: createSliceCountMemory() });
    await queue.count("k", turn1, undefined, undefined, "acct");
    const counted = await queue.count("k", turn2, undefined, 10, "acct");
    expect(counted).toBeGreaterThan(10);
    expect(tokenizer.slices).toHaveLength(5);
  });

  test("another account's identical prompt is counted anew (what one tenant sent says nothing of another's)", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4, remembered: createSliceCountMemory() });
    await queue.count("k1", turn1, undefined, undefined, "acct_a");
    await queue.count("k2", turn1, undefined, undefined, "acct_b");
    expect(tokenizer.slices).toHaveLength(10);
  });
});
