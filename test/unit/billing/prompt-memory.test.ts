import { expect, test } from "bun:test";
import { conversationKey, createPromptMemory, PROMPT_MEMORY_MS } from "../../../src/billing/prompt-memory.ts";

test("a conversation's last remembered prompt is recalled within the vendors' shortest cache lifetime, once", () => {
  const memory = createPromptMemory();
  const key = conversationKey("openai/gpt-5", "session-1");
  memory.remember("acct_1", key, 1_000, 0);
  memory.remember("acct_1", key, 1_500, 10);
  expect(memory.recall("acct_1", key, 10 + PROMPT_MEMORY_MS)).toBe(1_500);
  // Used up: one cached turn discounts one cancelled one.
  expect(memory.recall("acct_1", key, 10 + PROMPT_MEMORY_MS)).toBeUndefined();
  memory.remember("acct_1", key, 1_500, 10);
  expect(memory.recall("acct_1", key, 11 + PROMPT_MEMORY_MS)).toBeUndefined();
  // Another account never sees it; another model is another key.
  memory.remember("acct_1", key, 900, 0);
  expect(memory.recall("acct_2", key, 0)).toBeUndefined();
  expect(conversationKey("m", "s")).not.toBe(conversationKey("n", "s"));
  expect(memory.recall("acct_1", key, 0)).toBe(900);
});

test("bounded per account: a tenant's many conversations push out only its own", () => {
  const memory = createPromptMemory({ perAccount: 2, maxEntries: 100 });
  memory.remember("victim", "v", 7, 0);
  for (let i = 0; i < 1_000; i++) memory.remember("attacker", `a${i}`, 1, 0);
  expect(memory.recall("victim", "v", 0)).toBe(7);
  expect([memory.recall("attacker", "a0", 0), memory.recall("attacker", "a998", 0), memory.recall("attacker", "a999", 0)]).toEqual([undefined, 1, 1]);
});

test("bounded in all: past maxEntries the account longest idle gives one up", () => {
  const memory = createPromptMemory({ perAccount: 10, maxEntries: 2 });
  memory.remember("a", "x", 1, 0);
  memory.remember("b", "y", 2, 0);
  memory.remember("c", "z", 3, 0);
  expect([memory.recall("a", "x", 0), memory.recall("b", "y", 0), memory.recall("c", "z", 0)]).toEqual([undefined, 2, 3]);
});
