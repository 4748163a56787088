import type { ModelConfig } from "../config/schema.ts";
import type { RateLimitStore } from "../limits/rate-limiter.ts";
import { formatResetDuration, retryAfterSeconds, type BucketDecision } from "../limits/token-bucket.ts";
import { GatewayError } from "../streaming/gateway-error.ts";

/**
 * What a request holds of its account's tokens a minute (limits/token-budget.ts): its expected
 * tokens, taken when it starts; `settle` takes the difference once the vendor's count is known
 * (or gives them back: a request refused before any upstream answered used none). Once.
 */
export interface TokenHold {
  /**
   * `used`: prompt and answer tokens counted; `cacheReads` of them were read from the vendor's
   * cache, which count only where `model`'s vendor counts them (see holdTokens).
   */
  settle(used: number, model?: ModelConfig, cacheReads?: number): void;
}

export const NO_TOKEN_HOLD: TokenHold = { settle() {} };

/**
 * Tokens a request is expected to use before the vendor counts them: a token per 4 bytes of the
 * body (English prose and JSON run 3.5–4.5), at least 1. The settlement corrects it either way;
 * only how far concurrent requests can go past the budget before their counts land depends on it.
 */
export function expectedTokens(bodyBytes: number): number {
  return Math.max(1, Math.ceil(bodyBytes / 4));
}

/**
 * Takes `expected` tokens from the account's budget of `perMinute` (its own `tokens_per_minute`,
 * else limits.account_tokens_per_minute; the caller asks only when there is one). The settlement
 * counts what the model's vendor counts against its own tokens a minute: `readsCount` says
 * whether cache reads are among them (OpenAI counts every prompt token; Anthropic leaves cache
 * reads out of its input tokens a minute, so a Claude Code session of 150,000 cached tokens a
 * turn is not a 150,000-token turn to it, nor to this budget). 429 while the
 * budget is in debt, with OpenAI's `x-ratelimit-*-tokens` headers and a Retry-After; 503 when
 * the store cannot be asked (a limit that cannot be checked is not skipped, as rate limits).
 */
export function holdTokens(limiter: RateLimitStore, accountId: string, perMinute: number, expected: number, readsCount: (model: ModelConfig) => boolean): TokenHold | Promise<TokenHold> {
  const id = `account:${accountId}`;
  const granted = (decision: BucketDecision): TokenHold => {
    if (decision.unavailable) throw unchecked();
    if (!decision.allowed) {
      const wait = retryAfterSeconds(decision);
      throw new GatewayError(429, "rate_limit", `This account's tokens a minute are used up (its limit is ${perMinute} prompt and answer tokens a minute, all its keys together). Retry in ${wait} s.`, {
        "retry-after": String(wait),
        "x-ratelimit-limit-tokens": String(perMinute),
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": formatResetDuration(decision.resetMs),
      }, { code: "rate_limit_exceeded" });
    }
    let settled = false;
    return {
      settle(used, model, cacheReads = 0) {
        if (settled) return;
        settled = true;
        const counted = model && !readsCount(model) ? used - cacheReads : used;
        const difference = Math.max(0, Math.round(counted)) - expected;
        if (difference === 0) return;
        // A settlement the store cannot take is lost: the budget is a fairness bound, not money.
        try {
          const done = limiter.spend(id, perMinute, difference, "settle");
          if (done instanceof Promise) done.catch(() => {});
        } catch {}
      },
    };
  };
  let decided: BucketDecision | Promise<BucketDecision>;
  try {
    decided = limiter.spend(id, perMinute, expected, "admit");
  } catch {
    throw unchecked();
  }
  if (!(decided instanceof Promise)) return granted(decided);
  return decided.then(granted, () => {
    throw unchecked();
  });
}

function unchecked(): GatewayError {
  return new GatewayError(503, "overloaded", "The gateway cannot check this account's tokens a minute right now. Retry in a few seconds.", { "retry-after": "5" });
}
