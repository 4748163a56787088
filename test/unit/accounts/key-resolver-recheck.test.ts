import { expect, test } from "bun:test";
import { createCachedKeyResolver, createKeyResolver } from "../../../src/accounts/key-resolver.ts";
import type { AccountStore, ActiveKey } from "../../../src/accounts/account-store.ts";

/**
 * `recheck` is what a request under way asks before each upstream attempt (gateway/forward.ts): it
 * must read the store only when the cached lookup was dropped (a revoke, a change, the cache's age),
 * never once per attempt, and then read by the key's hash as `resolve` does.
 */
const PRESENTED = "svc-sk-" + "r".repeat(43);
const active = (over: Partial<ActiveKey> = {}): ActiveKey => ({
  keyId: "key_1", accountId: "acct_1", rateLimitPerMinute: null, expiresAt: null, models: null, maxConcurrentRequests: null, accountRateLimitPerMinute: null, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false, ...over,
});

/** A key table of one key: `revoked` makes its lookup find nothing; every lookup counted. */
function oneKey(found: () => ActiveKey | null) {
  const seen = { reads: 0, hashes: new Set<string>() };
  const find = (hash: string) => {
    seen.reads++;
    seen.hashes.add(hash);
    return found();
  };
  return { seen, find };
}

test("SQLite's resolver: no read while the cached lookup stands; read again by hash once dropped (revoked: null); its expiry read from the key itself", () => {
  let revoked = false;
  let listener = () => {};
  const { seen, find } = oneKey(() => (revoked ? null : active({ expiresAt: 5_000 })));
  let now = 1_000;
  const keys = createKeyResolver({ findActiveKey: find }, () => now, { onChange: (fn) => void (listener = fn), sync: () => {} });
  const principal = keys.resolve(PRESENTED) as ActiveKey;
  expect(seen.reads).toBe(1);
  for (let i = 0; i < 1_000; i++) expect(keys.recheck(principal)).toBe(principal);
  expect(seen.reads).toBe(1);
  // Past its expiry, with nothing dropped: refused without a read.
  now = 5_000;
  expect(keys.recheck(principal)).toBeNull();
  expect(seen.reads).toBe(1);
  now = 1_000;
  // Another connection's commit (the change watch) drops the cache: the next recheck reads, once.
  listener();
  expect(keys.recheck(principal)).toEqual(principal);
  expect(seen.reads).toBe(2);
  // Revoked in this process: `forget` drops it, and the read by its hash finds nothing.
  revoked = true;
  keys.forget("key_1");
  expect(keys.recheck(principal)).toBeNull();
  expect(seen.reads).toBe(3);
  expect(seen.hashes.size).toBe(1);
});

test("PostgreSQL's resolver: no read within the TTL; read again once it ages out or is forgotten, by hash", async () => {
  let revoked = false;
  const { seen, find } = oneKey(() => (revoked ? null : active()));
  const keys = createCachedKeyResolver({ findActiveKey: async (hash: string) => find(hash) } as unknown as AccountStore, Date.now, { ttlMs: 60 });
  const principal = (await keys.resolve(PRESENTED))!;
  expect(seen.reads).toBe(1);
  for (let i = 0; i < 1_000; i++) expect(keys.recheck(principal)).toBe(principal);
  expect(seen.reads).toBe(1);
  // Revoked elsewhere: seen once the lookup is older than the TTL.
  revoked = true;
  expect(keys.recheck(principal)).toBe(principal);
  await Bun.sleep(70);
  expect(await keys.recheck(principal)).toBeNull();
  expect(seen.reads).toBe(2);
  // Revoked here: forgotten at once.
  revoked = false;
  const again = (await keys.resolve(PRESENTED))!;
  revoked = true;
  keys.forget("key_1");
  expect(await keys.recheck(again)).toBeNull();
  expect(seen.hashes.size).toBe(1);
});

test("PostgreSQL's resolver while the store is down: admission's failed read is not made again by the request's recheck", async () => {
  let down = false;
  let reads = 0;
  const store = {
    findActiveKey: async () => {
      reads++;
      if (down) throw new Error("connection refused");
      return active();
    },
  } as unknown as AccountStore;
  const keys = createCachedKeyResolver(store, Date.now, { ttlMs: 40 });
  await keys.resolve(PRESENTED);
  await Bun.sleep(50);
  down = true;
  // Admission: the lookup is past its TTL, the read fails, the key seen within the minute still resolves.
  const admitted = (await keys.resolve(PRESENTED))!;
  expect(reads).toBe(2);
  // Before each attempt: no second read of a store that just failed (each could wait out its timeout).
  expect(keys.recheck(admitted)).toBe(admitted);
  expect(keys.recheck(admitted)).toBe(admitted);
  expect(reads).toBe(2);
  // Once the TTL has passed since that failure, the store is asked again.
  await Bun.sleep(50);
  down = false;
  expect(await keys.recheck(admitted)).toEqual(admitted);
  expect(reads).toBe(3);
});

test("PostgreSQL's resolver: a flood of made-up keys that fills its cache of keys not found leaves the keys found (their stale entries answer while the store is down)", async () => {
  let down = false;
  const good = active();
  const store = {
    findActiveKey: async (hash: string) => {
      if (down) throw new Error("store unreachable");
      return hash === goodHash ? good : null;
    },
  } as unknown as AccountStore;
  const keys = createCachedKeyResolver(store, Date.now, { ttlMs: 1 });
  const { hashKey } = await import("../../../src/accounts/account-store.ts");
  const goodHash = hashKey(PRESENTED);
  expect(await keys.resolve(PRESENTED)).toEqual(good);
  expect(keys.known!(PRESENTED)).toBe(true);
  // More made-up keys than the cache holds (100,000): its unknown half empties, the found half stays.
  for (let i = 0; i < 100_001; i += 1_000) await Promise.all(Array.from({ length: 1_000 }, (_, j) => keys.resolve(`svc-sk-${String(i + j).padStart(43, "m")}`)));
  expect(keys.known!(PRESENTED)).toBe(true);
  expect(keys.known!(`svc-sk-${"0".padStart(43, "m")}`)).toBe(false);
  await Bun.sleep(5);
  down = true;
  expect(await keys.resolve(PRESENTED)).toEqual(good);
}, 30_000);
