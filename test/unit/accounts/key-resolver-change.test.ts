import { expect, test } from "bun:test";
import { createCachedKeyResolver } from "../../../src/accounts/key-resolver.ts";
import type { AccountStore, ActiveKey } from "../../../src/accounts/account-store.ts";

const key = (accountRateLimitPerMinute: number | null): ActiveKey => ({
  keyId: "key_1", accountId: "acct_1", rateLimitPerMinute: null, expiresAt: null, models: null, maxConcurrentRequests: null, accountRateLimitPerMinute, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false,
});

/**
 * A lookup read from the shared store before this process changed the key's account (a PATCH)
 * answers the request that asked, but is not cached: the next request reads the change, within
 * the TTL too (a reviewer's finding: the old limits came back for 2 s).
 */
test("a read under way when its account changes is not cached, nor joined by the next request", async () => {
  const reads: ((found: ActiveKey) => void)[] = [];
  const store = { findActiveKey: () => new Promise<ActiveKey>((resolve) => reads.push(resolve)) } as unknown as AccountStore;
  const keys = createCachedKeyResolver(store, Date.now, { ttlMs: 60_000 });
  const first = keys.resolve("svc-sk-" + "a".repeat(43)) as Promise<ActiveKey | null>;
  expect(reads).toHaveLength(1);
  keys.forgetAccount("acct_1");
  // A request after the change reads again instead of waiting for the read that began before it.
  const second = keys.resolve("svc-sk-" + "a".repeat(43)) as Promise<ActiveKey | null>;
  expect(reads).toHaveLength(2);
  reads[0]!(key(null));
  reads[1]!(key(5));
  expect((await first)!.accountRateLimitPerMinute).toBeNull();
  expect((await second)!.accountRateLimitPerMinute).toBe(5);
  // The newer read is the one cached.
  expect((keys.resolve("svc-sk-" + "a".repeat(43)) as ActiveKey).accountRateLimitPerMinute).toBe(5);
});

test("without a change, concurrent misses share one read and its answer is cached", async () => {
  const reads: ((found: ActiveKey) => void)[] = [];
  const store = { findActiveKey: () => new Promise<ActiveKey>((resolve) => reads.push(resolve)) } as unknown as AccountStore;
  const keys = createCachedKeyResolver(store, Date.now, { ttlMs: 60_000 });
  const a = keys.resolve("svc-sk-" + "b".repeat(43));
  const b = keys.resolve("svc-sk-" + "b".repeat(43));
  expect(reads).toHaveLength(1);
  reads[0]!(key(7));
  expect([(await a)!.accountRateLimitPerMinute, (await b)!.accountRateLimitPerMinute]).toEqual([7, 7]);
  expect((keys.resolve("svc-sk-" + "b".repeat(43)) as ActiveKey).accountRateLimitPerMinute).toBe(7);
});
