import { Elysia } from "elysia";
import { INVALID_KEY, type AccountStore } from "../../accounts/account-store.ts";
import type { Ledger } from "../../billing/ledger.ts";
import { microToCredits } from "../../billing/money.ts";
import { GatewayError, NO_RETRY } from "../../streaming/gateway-error.ts";
import { KEY_INFO_PATH, type Principals } from "../plugins/admission.ts";

export interface KeyRouteDeps {
  accounts: AccountStore;
  ledger: Ledger;
  /** limits.requests_per_minute: a key without its own limit has this one. */
  defaultPerMinute: number;
  principals: Principals;
  /** limits.max_concurrent_requests (null: unset, no cap): a key without its own cap has this one. */
  defaultMaxConcurrent?: number | null;
  /** limits.account_requests_per_minute and limits.account_max_concurrent_requests (unset: none), for accounts without their own. */
  defaultAccountPerMinute?: number | null;
  defaultAccountMaxConcurrent?: number | null;
  /** limits.account_tokens_per_minute (unset: none), for accounts without their own. */
  defaultAccountTokensPerMinute?: number | null;
}

/**
 * `GET /v1/key`: what the presented key may still do — its account's balance and what open
 * requests hold, the key's limits and what it spent in the current period. Authenticated like
 * every /v1 route, but free (no hold, no usage record) and outside the key's rate bucket
 * (plugins/admission.ts), so a client throttled or out of budget can still ask when that ends.
 */
export function keyRoute(deps: KeyRouteDeps) {
  return new Elysia({ name: "switchyard/key" }).get(KEY_INFO_PATH, async ({ request }) => {
    const principal = deps.principals.of(request);
    const [key, balance] = await Promise.all([deps.accounts.getKey(principal.keyId), deps.ledger.balance(principal.accountId)]);
    // Revoked between admission and here: as unknown as any other key that no longer works.
    if (!key || key.revoked_at !== null || !balance) {
      throw new GatewayError(401, "authentication", INVALID_KEY, NO_RETRY);
    }
    return {
      account: {
        balance: microToCredits(balance.balanceMicro),
        reserved: microToCredits(balance.heldMicro),
        // The limits on all the account's keys together that apply (its own, else the gateway's); null: none.
        rate_limit_per_minute: principal.accountRateLimitPerMinute ?? deps.defaultAccountPerMinute ?? null,
        max_concurrent_requests: principal.accountMaxConcurrentRequests ?? deps.defaultAccountMaxConcurrent ?? null,
        tokens_per_minute: principal.accountTokensPerMinute ?? deps.defaultAccountTokensPerMinute ?? null,
        // The operator suspended the account: every other request of its keys is a 403 until it is resumed.
        suspended: principal.accountSuspended,
      },
      key: {
        name: key.name,
        spend_limit: key.spend_limit,
        spend_limit_period: key.spend_limit_period,
        spent_in_period: key.spent_in_period,
        period_resets_at: key.period_resets_at,
        // The limit that applies, the gateway's default when the key has none of its own.
        rate_limit_per_minute: key.rate_limit_per_minute ?? deps.defaultPerMinute,
        expires_at: key.expires_at,
        // The models it may use (exact ids and prefix* patterns); null: every model.
        models: key.models,
        // The cap that applies, the gateway's default when the key has none; null: no cap.
        max_concurrent_requests: key.max_concurrent_requests ?? deps.defaultMaxConcurrent ?? null,
      },
    };
  });
}
