import { describe, expect, test } from "bun:test";
import { formatResetDuration, retryAfterSeconds, takeToken, type BucketState } from "../../../src/limits/token-bucket.ts";
import { createRateLimiter } from "../../../src/limits/rate-limiter.ts";

describe("token bucket (pure, no sleeping)", () => {
  test("60 per minute: a burst of 60 passes, the 61st is refused with Retry-After 1 s", () => {
    let state: BucketState | undefined;
    const t0 = 1_000_000;
    for (let i = 0; i < 60; i++) {
      const r = takeToken(state, 60, t0);
      expect(r.decision.allowed).toBe(true);
      expect(r.decision.remaining).toBe(59 - i);
      state = r.state;
    }
    const refused = takeToken(state, 60, t0);
    expect(refused.decision.allowed).toBe(false);
    expect(refused.decision.retryAfterMs).toBe(1000);
    expect(retryAfterSeconds(refused.decision)).toBe(1);
    expect(refused.decision.resetMs).toBe(60_000);
  });

  test("a weighted take (bytes: limits/count-bytes.ts) takes its cost at once, is refused while fewer are left, and waits until its cost is back", () => {
    const perMinute = 60_000;
    let { state, decision } = takeToken(undefined, perMinute, 0, 40_000);
    expect(decision).toMatchObject({ allowed: true, remaining: 20_000 });
    ({ state, decision } = takeToken(state, perMinute, 0, 40_000));
    // Nothing taken: the bucket keeps its 20,000, and 20 s bring back the 20,000 missing (1,000 a second).
    expect(decision).toMatchObject({ allowed: false, remaining: 20_000, retryAfterMs: 20_000 });
    expect(takeToken(state, perMinute, 19_999, 40_000).decision.allowed).toBe(false);
    expect(takeToken(state, perMinute, 20_000, 40_000).decision.allowed).toBe(true);
  });

  test("refills evenly: one token per second at 60/min", () => {
    let { state } = takeToken(undefined, 60, 0);
    for (let i = 0; i < 59; i++) state = takeToken(state, 60, 0).state;
    expect(takeToken(state, 60, 999).decision.allowed).toBe(false);
    const after = takeToken(state, 60, 1000);
    expect(after.decision.allowed).toBe(true);
    expect(after.decision.remaining).toBe(0);
    // A full minute later the whole burst is back.
    expect(takeToken(state, 60, 60_000).decision.remaining).toBe(59);
  });

  test("Retry-After rounds up and is at least 1", () => {
    let { state } = takeToken(undefined, 2, 0);
    state = takeToken(state, 2, 0).state;
    const refused = takeToken(state, 2, 0).decision;
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(30_000);
    expect(retryAfterSeconds(refused)).toBe(30);
    expect(retryAfterSeconds(takeToken(state, 2, 29_999).decision)).toBe(1);
  });

  test("reset durations are formatted like OpenAI's", () => {
    expect(formatResetDuration(20)).toBe("20ms");
    expect(formatResetDuration(1000)).toBe("1s");
    expect(formatResetDuration(6500)).toBe("6.5s");
    expect(formatResetDuration(60_000)).toBe("1m0s");
  });

  test("the limiter keeps one bucket per key", () => {
    let now = 0;
    const limiter = createRateLimiter(() => now);
    expect(limiter.take("a", 1).allowed).toBe(true);
    expect(limiter.take("a", 1).allowed).toBe(false);
    expect(limiter.take("b", 1).allowed).toBe(true);
    now = 60_000;
    expect(limiter.take("a", 1).allowed).toBe(true);
  });
});
