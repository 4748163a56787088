import { takeToken, type BucketDecision, type BucketState } from "./token-bucket.ts";

/** Buckets idle this long are full again and can be dropped without changing any decision. */
const IDLE_MS = 60_000;

/**
 * In-process buckets, one per key. Memory stays bounded: a bucket untouched for a minute is
 * full, so it is forgotten on the next sweep and recreated full on demand.
 */
export function createRateLimiter(now: () => number) {
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
