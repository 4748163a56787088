import { takeToken, type BucketDecision, type BucketState } from "./token-bucket.ts";

/**
 * The RateLimitStore port: one decision per request, for a key and its limit. The in-process
 * store below answers synchronously; a shared one (Redis, for several processes) returns a
 * promise. Every implementation passes test/helpers/rate-limit-contract.ts (run by
 * test/contract/rate-limit.test.ts).
 */
export interface RateLimitStore {
  take(keyId: string, perMinute: number): BucketDecision | Promise<BucketDecision>;
  /** Shared stores only: whether they answer now (cheap, no round trip); `/ready` and metrics read it. */
  health?(): { reachable: boolean };
}

/** Buckets idle this long are full again and can be dropped without changing any decision. */
const IDLE_MS = 60_000;

/**
 * In-process buckets, one per key. Memory stays bounded: a bucket untouched for a minute is
 * full, so it is forgotten on the next sweep and recreated full on demand.
 */
export function createRateLimiter(now: () => number): { take(keyId: string, perMinute: number): BucketDecision } {
  const buckets = new Map<string, BucketState>();
  let lastSweep = now();

  return {
    take(keyId: string, perMinute: number): BucketDecision {
      const at = now();
      if (at - lastSweep > IDLE_MS) {
        lastSweep = at;
        for (const [id, bucket] of buckets) if (at - bucket.updatedAt > IDLE_MS) buckets.delete(id);
      }
      const { state, decision } = takeToken(buckets.get(keyId), perMinute, at);
      buckets.set(keyId, state);
      return decision;
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
