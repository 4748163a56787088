import { describe, expect, test } from "bun:test";
import type { RateLimitStore } from "../../src/limits/rate-limiter.ts";
import { retryAfterSeconds, type BucketDecision } from "../../src/limits/token-bucket.ts";

let sequence = 0;
/** A key no other test (or earlier run against the same Redis) has used. */
const freshKey = () => `key_contract_${Date.now().toString(36)}_${(sequence++).toString(36)}`;

/**
 * The RateLimitStore contract: the in-process buckets and Redis decide alike. Time is real (the
 * Redis script reads Redis's own clock); the refill case uses a fast limit so it waits tens of
 * milliseconds, not seconds.
 */
export function rateLimitContract(name: string, make: () => Promise<RateLimitStore>): void {
  describe(`RateLimitStore contract: ${name}`, () => {
    const take = async (store: RateLimitStore, key: string, perMinute: number): Promise<BucketDecision> => store.take(key, perMinute);

    test("a burst of N passes for a limit of N per minute; the N+1th is refused with a Retry-After of at least 1 s", async () => {
      const store = await make();
      const key = freshKey();
      for (let i = 0; i < 10; i++) {
        const d = await take(store, key, 10);
        expect(d.allowed).toBe(true);
        expect(d.remaining).toBe(9 - i);
      }
      const refused = await take(store, key, 10);
      expect(refused.allowed).toBe(false);
      expect(refused.unavailable).toBeUndefined();
      expect(refused.remaining).toBe(0);
      expect(refused.retryAfterMs).toBeGreaterThan(5_000);
      expect(refused.retryAfterMs).toBeLessThanOrEqual(6_000);
      expect(retryAfterSeconds(refused)).toBeGreaterThanOrEqual(1);
      expect(refused.resetMs).toBeGreaterThan(50_000);
    });

    test("keys are independent", async () => {
      const store = await make();
      const [a, b] = [freshKey(), freshKey()];
      for (let i = 0; i < 3; i++) expect((await take(store, a, 3)).allowed).toBe(true);
      expect((await take(store, a, 3)).allowed).toBe(false);
      expect((await take(store, b, 3)).allowed).toBe(true);
    });

    test("tokens refill over time: at 1,200 a minute one comes back every 50 ms", async () => {
      const store = await make();
      const key = freshKey();
      let refused: BucketDecision | undefined;
      for (let i = 0; i < 1_400 && !refused; i++) {
        const d = await take(store, key, 1_200);
        if (!d.allowed) refused = d;
      }
      expect(refused).toBeDefined();
      expect(refused!.retryAfterMs).toBeLessThanOrEqual(50);
      await Bun.sleep(refused!.retryAfterMs + 60);
      expect((await take(store, key, 1_200)).allowed).toBe(true);
    });

    test("exact under concurrency: 200 takes at once on a limit of 10 admit exactly 10", async () => {
      const store = await make();
      const key = freshKey();
      const decisions = await Promise.all(Array.from({ length: 200 }, () => take(store, key, 10)));
      expect(decisions.filter((d) => d.allowed)).toHaveLength(10);
      expect(decisions.filter((d) => d.unavailable)).toHaveLength(0);
    });

    test("two buckets at once (a key's and its account's): a token from both, or from neither when either is empty", async () => {
      const store = await make();
      const [key, account] = [freshKey(), freshKey()];
      const both = async () => store.takeBoth({ id: key, perMinute: 5 }, { id: account, perMinute: 2 });
      const [k1, a1] = await both();
      expect([k1.allowed, k1.remaining, a1.allowed, a1.remaining]).toEqual([true, 4, true, 1]);
      await both();
      // The account's bucket is empty: refused, and the key's keeps its three.
      const [k3, a3] = await both();
      expect(a3.allowed).toBe(false);
      expect(a3.retryAfterMs).toBeGreaterThan(20_000);
      expect(k3.allowed).toBe(true);
      for (let i = 0; i < 5; i++) expect((await both())[1].allowed).toBe(false);
      for (let i = 0; i < 3; i++) expect((await take(store, key, 5)).allowed).toBe(true);
      expect((await take(store, key, 5)).allowed).toBe(false);
      // The key's bucket empty: the account's (refilled or not) is not spent by the refusal.
      const other = freshKey();
      const [k, a] = await store.takeBoth({ id: key, perMinute: 5 }, { id: other, perMinute: 3 });
      expect([k.allowed, a.allowed]).toEqual([false, true]);
      expect((await take(store, other, 3)).remaining).toBe(2);
    });

    test("two buckets at once, exact under concurrency: 200 at once on limits of 10 and 1,000 admit exactly 10, each taking from both", async () => {
      const store = await make();
      const [key, account] = [freshKey(), freshKey()];
      const decisions = await Promise.all(Array.from({ length: 200 }, () => store.takeBoth({ id: key, perMinute: 10 }, { id: account, perMinute: 1_000 })));
      expect(decisions.filter(([k, a]) => k.allowed && a.allowed)).toHaveLength(10);
      expect(decisions.filter(([k, a]) => k.unavailable || a.unavailable)).toHaveLength(0);
      // The account gave exactly the 10 admitted.
      expect((await take(store, account, 1_000)).remaining).toBeGreaterThanOrEqual(1_000 - 11);
      expect((await take(store, account, 1_000)).remaining).toBeLessThanOrEqual(1_000 - 12 + 1);
    });
  });
}
