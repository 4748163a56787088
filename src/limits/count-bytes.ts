import { takeToken, type BucketState } from "./token-bucket.ts";

/**
 * Free counting's bytes a minute per account, in this process (`limits.count_tokens_account_bytes_per_minute`).
 *
 * A count costs the gateway's request thread what its body costs: it is parsed, checked, and
 * written again for an Anthropic upstream's own `count_tokens`. Such a count never enters the
 * count queue (limits/count-queue.ts), so the queue's byte caps do not bound it, and a count's
 * bucket allows ten times the key's requests a minute. One account with ten keys sent 3.8 MB
 * counts, about 80 a second and all free. Another tenant's p50 went from 1.3 ms to 273 ms
 * (p99 715 ms). The same bodies sent straight to the vendor, at the same rate, moved it to
 * 3 ms (a hostile-tenant probe, twelfth).
 *
 * The bound is a token bucket of bytes per account: a count takes its declared body length, or
 * `unsizedBytes` when it declares none (a chunked body). It is taken on arrival, before the body
 * is read, so a refused flood costs no parse. The bucket is per account because that is the
 * tenant, whatever its number of keys. It is per process because it bounds that process's
 * thread, as the count queue does. Pure apart from its map; `now` is passed in.
 */
export interface CountBytes {
  /** Takes a count's bytes from its account's bucket: undefined when taken, else the wait in ms until they would be. */
  take(account: string, bytes: number): number | undefined;
}

/** Past this many accounts, buckets that have refilled are forgotten (a full bucket is the same as none). */
const SWEEP_AT = 10_000;
/**
 * A sweep walks every bucket, so it runs at most this often: buckets still refilling are kept,
 * and with more of them than `SWEEP_AT` every count walked them all on the request thread (30,000
 * accounts counting within a minute: 10 s of the loop for their 30,000 counts).
 */
const SWEEP_EVERY_MS = 1_000;

export function createCountBytes(o: { perMinute: number; unsizedBytes: number; now: () => number }): CountBytes {
  const buckets = new Map<string, BucketState>();
  let sweptAt = Number.NEGATIVE_INFINITY;
  const sweep = (at: number) => {
    sweptAt = at;
    for (const [account, state] of buckets) if (state.tokens + ((at - state.updatedAt) * o.perMinute) / 60_000 >= o.perMinute) buckets.delete(account);
  };
  return {
    take(account, bytes) {
      const at = o.now();
      if (buckets.size >= SWEEP_AT && at - sweptAt >= SWEEP_EVERY_MS) sweep(at);
      // No count costs more than a full bucket: a largest body still passes, once a minute.
      const cost = Math.min(o.perMinute, bytes > 0 ? bytes : o.unsizedBytes);
      const { state, decision } = takeToken(buckets.get(account), o.perMinute, at, cost);
      buckets.set(account, state);
      return decision.allowed ? undefined : decision.retryAfterMs;
    },
  };
}
