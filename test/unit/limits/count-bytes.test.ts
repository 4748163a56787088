import { describe, expect, test } from "bun:test";
import { createCountBytes } from "../../../src/limits/count-bytes.ts";

describe("count bytes a minute per account (pure, no sleeping)", () => {
  test("an account past its bytes waits until they are back; another account is not touched", () => {
    let at = 0;
    const counts = createCountBytes({ perMinute: 60_000, unsizedBytes: 30_000, now: () => at });
    expect(counts.take("a", 40_000)).toBeUndefined();
    // 20,000 left; 40,000 more wait 20 s (1,000 bytes a second come back).
    expect(counts.take("a", 40_000)).toBe(20_000);
    expect(counts.take("b", 40_000)).toBeUndefined();
    // A count without a length weighs `unsizedBytes`; none weighs more than the whole bucket.
    at = 20_000;
    expect(counts.take("a", 0)).toBeUndefined();
    at = 200_000;
    expect(counts.take("a", 10_000_000)).toBeUndefined();
  });

  test("with more accounts in use than the sweep's mark, a count does not walk every account's bucket", () => {
    // Past SWEEP_AT (10,000) buckets, each take swept them all, and buckets still refilling are
    // kept: with 30,000 accounts counting within the same minute, every count walked 10,000 to
    // 30,000 buckets on the request thread (~400 million steps for these 30,000 counts).
    let at = 0;
    const counts = createCountBytes({ perMinute: 64 * 1024 * 1024, unsizedBytes: 1024 * 1024, now: () => at });
    const started = performance.now();
    for (let i = 0; i < 30_000; i++) {
      at = i / 1_000;
      expect(counts.take(`account-${i}`, 32 * 1024 * 1024)).toBeUndefined();
    }
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
