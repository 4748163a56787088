import { takeToken, type BucketDecision, type BucketState } from "./token-bucket.ts";
import { spendTokens, type TokenSpend } from "./token-budget.ts";

/**
 * The RateLimitStore port: one decision per request, for a key and its limit. The in-process
 * store below answers synchronously; a shared one (Redis, for several processes) returns a
 * promise. Every implementation passes test/helpers/rate-limit-contract.ts (run by
 * test/contract/rate-limit.test.ts).
 */
export interface RateLimitStore {
  take(keyId: string, perMinute: number): BucketDecision | Promise<BucketDecision>;
  /**
   * Two buckets at once (a key's and its account's): a token is taken from both, or from neither
   * when either is empty, so a request one of them refuses spends nothing of the other. Each
   * decision says what its bucket holds; `allowed` is that bucket's own answer.
   */
  takeBoth(first: BucketAsk, second: BucketAsk): [BucketDecision, BucketDecision] | Promise<[BucketDecision, BucketDecision]>;
  /**
   * An account's tokens a minute (limits/token-budget.ts): `admit` takes a request's expected
   * tokens unless the bucket is in debt; `settle` takes (or, negative, gives back) the difference
   * once it is known. Its buckets are apart from the request buckets' (same ids never meet).
   */
  spend(id: string, perMinute: number, tokens: number, how: TokenSpend): BucketDecision | Promise<BucketDecision>;
  /** Shared stores only: whether they answer now (cheap, no round trip); `/ready` and metrics read it. */
  health?(): { reachable: boolean };
}

/** One bucket asked for a token: its id and its limit. */
export interface BucketAsk {
  id: string;
  perMinute: number;
}

/** Buckets idle this long are full again and can be dropped without changing any decision. */
const IDLE_MS = 60_000;

/**
 * In-process buckets, one per key. Memory stays bounded: a bucket untouched for a minute is
 * full, so it is forgotten on the next sweep and recreated full on demand.
 */
export function createRateLimiter(now: () => number): { take(keyId: string, perMinute: number): BucketDecision; takeBoth(first: BucketAsk, second: BucketAsk): [BucketDecision, BucketDecision]; spend(id: string, perMinute: number, tokens: number, how: TokenSpend): BucketDecision } {
  const buckets = new Map<string, BucketState>();
  // Token budgets apart: a budget in debt (negative) must never be read as a request bucket.
  const budgets = new Map<string, BucketState>();
  let lastSweep = now();
  const clock = (): number => {
    const at = now();
    if (at - lastSweep > IDLE_MS) {
      lastSweep = at;
      for (const [id, bucket] of buckets) if (at - bucket.updatedAt > IDLE_MS) buckets.delete(id);
      // A budget's debt is at most a minute's tokens: after two idle minutes it is full.
      for (const [id, budget] of budgets) if (at - budget.updatedAt > 2 * IDLE_MS) budgets.delete(id);
    }
    return at;
  };

  return {
    take(keyId: string, perMinute: number): BucketDecision {
      const { state, decision } = takeToken(buckets.get(keyId), perMinute, clock());
      buckets.set(keyId, state);
      return decision;
    },
    takeBoth(first: BucketAsk, second: BucketAsk): [BucketDecision, BucketDecision] {
      const at = clock();
      const a = takeToken(buckets.get(first.id), first.perMinute, at);
      const b = takeToken(buckets.get(second.id), second.perMinute, at);
      if (a.decision.allowed && b.decision.allowed) {
        buckets.set(first.id, a.state);
        buckets.set(second.id, b.state);
        return [a.decision, b.decision];
      }
      // Neither is taken: each keeps what it held (refilled to now).
      return [untaken(buckets, first, a, at), untaken(buckets, second, b, at)];
    },
    spend(id: string, perMinute: number, tokens: number, how: TokenSpend): BucketDecision {
      const { state, decision } = spendTokens(budgets.get(id), perMinute, clock(), tokens, how);
      budgets.set(id, state);
      return decision;
    },
  };
}

/** A bucket whose token was not taken after all: its refill is kept, its decision says what it still holds. */
function untaken(buckets: Map<string, BucketState>, ask: BucketAsk, taken: { state: BucketState; decision: BucketDecision }, at: number): BucketDecision {
  if (!taken.decision.allowed) {
    buckets.set(ask.id, taken.state);
    return taken.decision;
  }
  const tokens = taken.state.tokens + 1;
  buckets.set(ask.id, { tokens, updatedAt: at });
  return { ...taken.decision, remaining: Math.floor(tokens), resetMs: Math.ceil((ask.perMinute - tokens) / (ask.perMinute / 60_000)) };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
