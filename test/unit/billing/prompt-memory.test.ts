import { expect, test } from "bun:test";
import { conversationKey, createPromptMemory, PROMPT_MEMORY_MS } from "../../../src/billing/prompt-memory.ts";

test("a conversation's last reported prompt is recalled for the vendors' shortest cache lifetime, then forgotten", () => {
  const memory = createPromptMemory();
  const key = conversationKey("acct_1", "openai/gpt-5", "session-1");
  memory.remember(key, 1_000, 0);
  memory.remember(key, 1_500, 10);
  expect(memory.recall(key, 10 + PROMPT_MEMORY_MS)).toBe(1_500);
  expect(memory.recall(key, 11 + PROMPT_MEMORY_MS)).toBeUndefined();
  expect(memory.recall(key, 0)).toBeUndefined();
  // Accounts and models never share one: the key holds all three.
  expect(conversationKey("acct_1", "m", "s")).not.toBe(conversationKey("acct_2", "m", "s"));
  expect(conversationKey("acct_1", "m", "s")).not.toBe(conversationKey("acct_1", "n", "s"));
});

test("bounded: past maxEntries the least recently stored go first", () => {
  const memory = createPromptMemory({ maxEntries: 2 });
  memory.remember("a", 1, 0);
  memory.remember("b", 2, 0);
  memory.remember("a", 3, 0);
  memory.remember("c", 4, 0);
  expect([memory.recall("a", 0), memory.recall("b", 0), memory.recall("c", 0)]).toEqual([3, undefined, 4]);
});
