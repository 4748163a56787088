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

    test("tokens a minute: a request is admitted while the budget is not in debt and takes its expected tokens; the settlement takes or gives back the difference", async () => {
      const store = await make();
      const account = freshKey();
      const spend = async (tokens: number, how: "admit" | "settle") => store.spend(account, 6_000, tokens, how);
      const first = await spend(4_000, "admit");
      expect([first.allowed, first.remaining, first.retryAfterMs]).toEqual([true, 2_000, 0]);
      // Admitted with 2,000 left though it expects 5,000: the budget goes into debt by it.
      const second = await spend(5_000, "admit");
      expect(second.allowed).toBe(true);
      expect(second.remaining).toBe(0);
      // In debt (about 3,000 at 100 a second): refused, nothing taken, told to wait about 30 s.
      const refused = await spend(1, "admit");
      expect(refused.allowed).toBe(false);
      expect(refused.unavailable).toBeUndefined();
      expect(refused.retryAfterMs).toBeGreaterThan(29_000);
      expect(refused.retryAfterMs).toBeLessThanOrEqual(30_002);
      expect((await spend(1, "admit")).retryAfterMs).toBeLessThanOrEqual(refused.retryAfterMs);
      // The first answer used 500 of its 4,000: 3,500 come back, and the budget is out of debt.
      const settled = await spend(-3_500, "settle");
      expect(settled.allowed).toBe(true);
      expect(settled.remaining).toBeGreaterThanOrEqual(500);
      expect(settled.remaining).toBeLessThanOrEqual(510);
      expect((await spend(100, "admit")).allowed).toBe(true);
      // A settlement always applies, even in debt; the debt stops at a minute's tokens.
      expect((await spend(1_000_000, "settle")).allowed).toBe(true);
      const deep = await spend(1, "admit");
      expect(deep.allowed).toBe(false);
      expect(deep.retryAfterMs).toBeGreaterThan(59_000);
      expect(deep.retryAfterMs).toBeLessThanOrEqual(60_002);
      // What is given back never fills past a minute's tokens.
      await spend(-1_000_000, "settle");
      expect((await spend(0, "settle")).remaining).toBe(6_000);
    });

    test("tokens a minute apart from requests a minute: the same id names two buckets", async () => {
      const store = await make();
      const id = freshKey();
      await store.spend(id, 10, 1_000, "settle");
      expect((await take(store, id, 10)).allowed).toBe(true);
      expect((await store.spend(id, 10, 1, "admit")).allowed).toBe(false);
    });

    test("tokens a minute, exact under concurrency: of 50 requests at once expecting 150 each on a budget of 1,000, exactly 7 start (the seventh into debt)", async () => {
      const store = await make();
      const account = freshKey();
      const decisions = await Promise.all(Array.from({ length: 50 }, () => store.spend(account, 1_000, 150, "admit")));
      expect(decisions.filter((d) => d.allowed)).toHaveLength(7);
      expect(decisions.filter((d) => d.unavailable)).toHaveLength(0);
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
