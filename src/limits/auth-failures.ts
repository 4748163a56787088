/**
 * Failed admin authentications, counted per client address over a sliding minute. Only failures
 * count: an operator with the right token is never refused, however many wrong ones a scanner
 * sent from the same address (behind a load balancer every client may share one). Beyond the
 * limit a failure is answered 429 with Retry-After instead of 401, which tells a misconfigured
 * script to stop and keeps a scanner's flood cheap; guessing itself is stopped by the token's
 * length (config/ops-settings.ts, MIN_TOKEN_LENGTH), not by this.
 */

export interface AuthFailureOptions {
  /** Failures per address within `windowMs` answered as usual (401); those beyond get 429. */
  limit?: number;
  windowMs?: number;
  now?: () => number;
  /** Addresses remembered at most; the least recently failing is forgotten first (many addresses cost bounded memory). */
  maxAddresses?: number;
}

export interface AuthFailureVerdict {
  /** True once this address has failed more than `limit` times within the window. */
  throttled: boolean;
  /** Seconds until this address's next failure would be answered 401 again. */
  retryAfterSeconds: number;
}

export interface AuthFailures {
  /** Records one failed authentication from `address` and says how to answer it. */
  failed(address: string): AuthFailureVerdict;
  /** Whether `address` is past its limit now (nothing recorded). */
  throttled(address: string): boolean;
}

export function createAuthFailures(o: AuthFailureOptions = {}): AuthFailures {
  const limit = o.limit ?? 10;
  const windowMs = o.windowMs ?? 60_000;
  const now = o.now ?? Date.now;
  const maxAddresses = o.maxAddresses ?? 10_000;
  /** Per address, the times of its latest failures (at most limit + 1), oldest first. */
  const seen = new Map<string, number[]>();
  return {
    failed(address) {
      const t = now();
      const times = (seen.get(address) ?? []).filter((at) => t - at < windowMs);
      times.push(t);
      if (times.length > limit + 1) times.shift();
      // Re-inserted so the map's order is by last failure: the first entry is the one to forget.
      seen.delete(address);
      if (seen.size >= maxAddresses) seen.delete(seen.keys().next().value!);
      seen.set(address, times);
      const throttled = times.length > limit;
      // The next failure is answered 401 once the oldest of the last `limit` ones leaves the window.
      const oldest = times[times.length - limit]!;
      return { throttled, retryAfterSeconds: throttled ? Math.max(1, Math.ceil((oldest + windowMs - t) / 1000)) : 0 };
    },
    throttled(address) {
      const times = seen.get(address);
      if (!times || times.length <= limit) return false;
      // Past the limit while the last `limit + 1` failures all fall within the window.
      return now() - times[0]! < windowMs;
    },
  };
}
