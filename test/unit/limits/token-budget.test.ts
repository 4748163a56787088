import { expect, test } from "bun:test";
import { spendTokens } from "../../../src/limits/token-budget.ts";

test("a budget in debt refills at its rate: admitted again the millisecond it is out of debt, and full after a minute", () => {
  // 6,000 a minute: 0.1 token a millisecond.
  let { state, decision } = spendTokens(undefined, 6_000, 0, 9_000, "admit");
  expect(decision.allowed).toBe(true);
  expect(state.tokens).toBe(-3_000);
  expect(decision.retryAfterMs).toBe(30_001);
  ({ state, decision } = spendTokens(state, 6_000, 29_999, 10, "admit"));
  expect(decision.allowed).toBe(false);
  expect(decision.remaining).toBe(0);
  expect(state.tokens).toBeCloseTo(-0.1, 6);
  ({ state, decision } = spendTokens(state, 6_000, 30_001, 10, "admit"));
  expect(decision.allowed).toBe(true);
  ({ state, decision } = spendTokens(state, 6_000, 200_000, 0, "settle"));
  expect(decision.remaining).toBe(6_000);
  expect(decision.resetMs).toBe(0);
});

test("settling gives back what a request did not use, up to a full budget; a settlement in debt is never refused", () => {
  let { state } = spendTokens(undefined, 1_000, 0, 800, "admit");
  ({ state } = spendTokens(state, 1_000, 0, -5_000, "settle"));
  expect(state.tokens).toBe(1_000);
  const { decision } = spendTokens({ tokens: -1_000, updatedAt: 0 }, 1_000, 0, 50, "settle");
  expect(decision.allowed).toBe(true);
});
