import { describe, expect, test } from "bun:test";
import { createBodyBudget, giveShares, takeShares, type BodyShare } from "../../../src/limits/body-budget.ts";

describe("body budget", () => {
  test("a holder takes up to its share; past it the holder is refused and nothing is taken", () => {
    const budget = createBodyBudget({ perHolderBytes: 100, totalBytes: 1000 });
    expect(budget.take("a", 60)).toBeUndefined();
    expect(budget.take("a", 40)).toBeUndefined();
    expect(budget.take("a", 1)).toBe("holder");
    expect(budget.heldBy("a")).toBe(100);
    expect(budget.bytes).toBe(100);
    // Another holder has its own share.
    expect(budget.take("b", 100)).toBeUndefined();
  });

  test("past the total, whoever asks is refused as the total's, and nothing is taken", () => {
    const budget = createBodyBudget({ perHolderBytes: 100, totalBytes: 150 });
    expect(budget.take("a", 100)).toBeUndefined();
    expect(budget.take("b", 60)).toBe("total");
    expect(budget.heldBy("b")).toBe(0);
    expect(budget.take("b", 50)).toBeUndefined();
    expect(budget.bytes).toBe(150);
  });

  test("what is given back can be taken again, and an emptied holder leaves no entry", () => {
    const budget = createBodyBudget({ perHolderBytes: 100, totalBytes: 100 });
    expect(budget.take("a", 100)).toBeUndefined();
    budget.give("a", 30);
    expect(budget.heldBy("a")).toBe(70);
    expect(budget.take("b", 30)).toBeUndefined();
    budget.give("a", 70);
    budget.give("b", 30);
    expect(budget.bytes).toBe(0);
    expect(budget.heldBy("a")).toBe(0);
    expect(budget.take("a", 100)).toBeUndefined();
  });

  test("shares are taken all or none: a key's and its account's; the first refusal names its level, and what was taken before it is given back", () => {
    const keys = createBodyBudget({ perHolderBytes: 100, totalBytes: Number.POSITIVE_INFINITY });
    const accounts = createBodyBudget({ perHolderBytes: 150, totalBytes: 1000 });
    const of = (key: string, account: string): BodyShare[] => [{ budget: keys, holder: key, level: "key" }, { budget: accounts, holder: account, level: "account" }];
    expect(takeShares(of("k1", "a"), 100)).toBeUndefined();
    expect(takeShares(of("k1", "a"), 1)).toEqual({ refusal: "holder", level: "key" });
    expect(takeShares(of("k2", "a"), 60)).toEqual({ refusal: "holder", level: "account" });
    // k2's share was not kept when its account refused.
    expect(keys.heldBy("k2")).toBe(0);
    expect(takeShares(of("k2", "a"), 50)).toBeUndefined();
    giveShares(of("k1", "a"), 100);
    giveShares(of("k2", "a"), 50);
    expect([keys.bytes, accounts.bytes]).toEqual([0, 0]);
  });
});
