import type { KeyLimits, KeySummary } from "./account-store.ts";
import { MAX_KEY_MODELS } from "./admin-input.ts";

/** What a key an account holder makes may reach, set by the gateway (the holder sets none of it). */
export interface HolderKeyCeiling {
  models?: string[];
  rate_limit_per_minute?: number;
  max_concurrent_requests?: number;
}

/**
 * A key an account holder makes in the console is no wider than what the operator set on the
 * account's keys, field by field: if any of its keys (revoked ones too) has a model list, the new
 * key may use the models of those lists; if any has its own rate or cap on requests at once, the
 * new key has the largest of them. A field no key sets stays the gateway's default. Keys that leave
 * a field to the default do not widen it, so a key the holder made before the operator restricted
 * the account, or the revoking of the operator's keys, widens nothing; an operator who wants wider
 * keys for the account sets the wider values on one. Without this, a holder's new key took the
 * gateway's defaults, every model and no cap on requests at once, around the limits the operator
 * had set on the account's keys (a hostile-tenant probe, 2026-11-30). Pure.
 */
export function holderKeyCeiling(keys: readonly KeyLimits[]): HolderKeyCeiling {
  const ceiling: HolderKeyCeiling = {};
  const lists = keys.filter((k) => k.models !== null);
  // At most as many as a key may list: a narrower list, never a refusal of a field the holder did not send.
  if (lists.length > 0) ceiling.models = [...new Set(lists.flatMap((k) => k.models!))].slice(0, MAX_KEY_MODELS);
  const rates = keys.flatMap((k) => (k.rate_limit_per_minute === null ? [] : [k.rate_limit_per_minute]));
  if (rates.length > 0) ceiling.rate_limit_per_minute = Math.max(...rates);
  const caps = keys.flatMap((k) => (k.max_concurrent_requests === null ? [] : [k.max_concurrent_requests]));
  if (caps.length > 0) ceiling.max_concurrent_requests = Math.max(...caps);
  return ceiling;
}

/** How many keys an account's holders may make in a day (the operator's admin API is not limited). */
export const HOLDER_KEYS_PER_DAY = 20;
/** The window HOLDER_KEYS_PER_DAY counts keys over. */
export const HOLDER_KEY_WINDOW_MS = 86_400_000;

/**
 * Milliseconds until an account's holder may make another key, or 0 when they may now: at most
 * HOLDER_KEYS_PER_DAY keys of the account (whoever made them, revoked ones too) in the last 24 hours.
 * Each new key starts with a full rate-limit bucket and no requests under way, so making and
 * revoking keys in a loop escaped both: 34,550 answers in 20 s on a key limited to 10 a minute, and
 * 50 streams at once under a cap of 2 (a hostile-tenant probe, 2026-11-30). Pure.
 */
export function holderKeyWait(keys: readonly Pick<KeySummary, "created_at">[], now: number): number {
  const recent = keys.map((k) => Date.parse(k.created_at)).filter((at) => at > now - HOLDER_KEY_WINDOW_MS).sort((a, b) => a - b);
  if (recent.length < HOLDER_KEYS_PER_DAY) return 0;
  // The day's allowance comes back as the oldest of the ones that fill it leave the window.
  return recent[recent.length - HOLDER_KEYS_PER_DAY]! + HOLDER_KEY_WINDOW_MS - now;
}
