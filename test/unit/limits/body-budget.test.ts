import { describe, expect, test } from "bun:test";
import { createBodyBudget } from "../../../src/limits/body-budget.ts";

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
});
