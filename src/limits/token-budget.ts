import { refilled, type BucketDecision, type BucketState } from "./token-bucket.ts";

/**
 * An account's tokens a minute (`tokens_per_minute`), as a pure function of its state and `now`.
 * Vendors limit each key's tokens a minute per model, and every tenant behind a gateway shares
 * those keys: one tenant sending long prompts back to back used the vendor's minute, and the
 * others' requests met the vendor's 429 (a hostile-tenant probe). Requests a minute do not bound
 * it (one request may carry 200,000 tokens), nor does credit.
 *
 * The bucket holds up to a minute's tokens and refills evenly, as the request buckets do
 * (token-bucket.ts), but a request's tokens are known only once it is answered. So, as OpenAI
 * and LiteLLM do, a request is admitted while the bucket is not in debt, and what it is expected
 * to use (its prompt, estimated before it is sent) is taken at once; when it is settled the
 * difference from what the vendor counted (prompt and answer) is taken or given back. The
 * bucket may go into debt by one request; its debt is bounded by a minute's tokens, so one
 * request larger than the budget waits at most a minute of refill behind it, never an hour.
 */
export type TokenSpend = "admit" | "settle";

const MINUTE_MS = 60_000;

/**
 * Takes `tokens` (negative: gives them back) from a bucket of `perMinute`. `admit`: a request
 * asking to start, refused (nothing taken) while the bucket is in debt; `settle`: the difference
 * a settled request makes, always applied. The decision's `remaining` is the whole tokens left
 * (0 in debt), `retryAfterMs` the wait until the bucket is out of debt.
 */
export function spendTokens(state: BucketState | undefined, perMinute: number, now: number, tokens: number, how: TokenSpend): { state: BucketState; decision: BucketDecision } {
  const available = refilled(state, perMinute, now);
  const allowed = how === "settle" || available > 0;
  const left = allowed ? Math.min(perMinute, Math.max(-perMinute, available - tokens)) : available;
  return { state: { tokens: left, updatedAt: now }, decision: budgetDecision(left, perMinute, allowed) };
}

/** What a bucket holding `left` tokens of `perMinute` says. */
function budgetDecision(left: number, perMinute: number, allowed: boolean): BucketDecision {
  const ratePerMs = perMinute / MINUTE_MS;
  return {
    allowed,
    remaining: Math.max(0, Math.floor(left)),
    // Out of debt once the bucket holds more than nothing: a millisecond past zero.
    retryAfterMs: left > 0 ? 0 : Math.ceil(-left / ratePerMs) + 1,
    resetMs: Math.ceil((perMinute - left) / ratePerMs),
  };
}
