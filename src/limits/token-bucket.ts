/**
 * A token bucket as a pure function of its state and `now`, so it is tested without sleeping.
 * `capacity` tokens refill evenly over one minute: N requests per minute, bursts of up to N.
 */
export interface BucketState {
  tokens: number;
  updatedAt: number;
}

export interface BucketDecision {
  allowed: boolean;
  /** Whole requests still available after this one. */
  remaining: number;
  /** Milliseconds until one token is available again (0 when one is). */
  retryAfterMs: number;
  /** Milliseconds until the bucket is full again. */
  resetMs: number;
  /**
   * The store that keeps the buckets cannot answer (Redis down): the request is refused with
   * 503, never admitted unmetered (`allowed` is false with it).
   */
  unavailable?: true;
}

const MINUTE_MS = 60_000;

/** What a bucket of `perMinute` holds at `now`: its tokens then, refilled evenly since, up to full (a new bucket is full). */
export function refilled(state: BucketState | undefined, perMinute: number, now: number): number {
  if (!state) return perMinute;
  return Math.min(perMinute, state.tokens + Math.max(0, now - state.updatedAt) * (perMinute / MINUTE_MS));
}

export function takeToken(state: BucketState | undefined, perMinute: number, now: number, cost = 1): { state: BucketState; decision: BucketDecision } {
  const ratePerMs = perMinute / MINUTE_MS;
  const available = refilled(state, perMinute, now);
  // `cost` tokens at once (a weight: bytes, for limits/count-bytes.ts); a request is one.
  const allowed = available >= cost;
  const tokens = allowed ? available - cost : available;
  return {
    state: { tokens, updatedAt: now },
    decision: {
      allowed,
      remaining: Math.floor(tokens),
      retryAfterMs: tokens >= cost ? 0 : Math.ceil((cost - tokens) / ratePerMs),
      resetMs: Math.ceil((perMinute - tokens) / ratePerMs),
    },
  };
}

/** Retry-After is whole seconds, rounded up, never 0 for a refused request. */
export function retryAfterSeconds(decision: BucketDecision): number {
  return Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
}

/** OpenAI's x-ratelimit-reset-* style: "20ms", "1s", "6.5s", "1m0s". */
export function formatResetDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${Number(seconds.toFixed(3))}s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes}m${Number((seconds - minutes * 60).toFixed(3))}s`;
}
