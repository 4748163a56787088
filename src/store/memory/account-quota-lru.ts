import { createByteLru, type ByteLru } from "./byte-lru.ts";

/**
 * Byte-bounded LRUs, one per account, under one total: an account over its own quota evicts its
 * own least recently used entries, never another's. The total is a safety net for memory: it is
 * reached only when more accounts than `totalMaxBytes / accountMaxBytes` are full at once, and
 * then the account holding the most bytes loses its oldest entry first (the writer itself on a
 * tie), so an account holding less than the others never pays for them. Pure apart from the
 * clock it is given: no timers, no I/O. The same rules run in Redis (store/redis/redis-response-store.ts).
 */
export interface AccountQuotaLruOptions {
  /** Most bytes one account holds; its own oldest go first past it. */
  accountMaxBytes: number;
  /** Most bytes all accounts hold together. */
  totalMaxBytes: number;
  /** An entry unused (neither set nor read) for longer than this is gone. */
  ttlMs: number;
  now: () => number;
}

export interface AccountQuotaLru<V> {
  /** The value, which counts as a use of it. */
  get(account: string, key: string): V | undefined;
  /** Keeps `value`; false, keeping nothing (and dropping an older value under the key), when `bytes` exceed the quota or the total. */
  set(account: string, key: string, value: V, bytes: number): boolean;
  /** True when the key was held (and unexpired) for the account. */
  delete(account: string, key: string): boolean;
  /** Bytes the account holds now. */
  bytesOf(account: string): number;
  /** Bytes all accounts hold now. */
  readonly bytes: number;
}

interface Account<V> {
  lru: ByteLru<V>;
  usedAt: number;
}

export function createAccountQuotaLru<V>(o: AccountQuotaLruOptions): AccountQuotaLru<V> {
  // Ordered by last use, oldest first (re-inserted at each use), like byte-lru's entries: an
  // account idle for the TTL has nothing left that can be read, and is dropped whole from the front.
  const accounts = new Map<string, Account<V>>();
  let total = 0;

  const sweepIdle = (now: number) => {
    for (const [name, account] of accounts) {
      if (now - account.usedAt <= o.ttlMs) return;
      accounts.delete(name);
      total -= account.lru.bytes;
    }
  };
  /** The account, moved to the back of the line; created when `create`. */
  const use = (name: string, now: number, create: boolean): Account<V> | undefined => {
    let account = accounts.get(name);
    if (account) accounts.delete(name);
    else if (create) account = { lru: createByteLru<V>({ maxBytes: o.accountMaxBytes, ttlMs: o.ttlMs, now: o.now }), usedAt: now };
    if (!account) return undefined;
    account.usedAt = now;
    accounts.set(name, account);
    return account;
  };
  /** Runs `fn` on the account's LRU, keeping the total in step with what it frees or adds. */
  const counted = <T>(account: Account<V>, fn: (lru: ByteLru<V>) => T): T => {
    const before = account.lru.bytes;
    const result = fn(account.lru);
    total += account.lru.bytes - before;
    return result;
  };

  /** Past the total: the account with the most evictable bytes (the writer's new entry is not) loses its oldest. */
  const fitTotal = (writer: string, key: string, bytes: number) => {
    while (total > o.totalMaxBytes) {
      let victim: string | undefined;
      let most = 0;
      for (const [name, account] of accounts) {
        const evictable = name === writer ? account.lru.bytes - bytes : account.lru.bytes;
        if (evictable > most || (evictable === most && name === writer && evictable > 0)) {
          victim = name;
          most = evictable;
        }
      }
      if (victim === undefined) return;
      const account = accounts.get(victim)!;
      counted(account, (lru) => lru.evictOldest(victim === writer ? key : undefined));
      if (account.lru.size === 0) accounts.delete(victim);
    }
  };

  return {
    get(name, key) {
      const now = o.now();
      sweepIdle(now);
      const account = accounts.get(name);
      if (!account) return undefined;
      const value = counted(account, (lru) => lru.get(key));
      if (value !== undefined) use(name, now, false);
      return value;
    },
    set(name, key, value, bytes) {
      const now = o.now();
      sweepIdle(now);
      if (bytes > o.accountMaxBytes || bytes > o.totalMaxBytes) {
        const account = accounts.get(name);
        if (account) counted(account, (lru) => lru.delete(key));
        return false;
      }
      const account = use(name, now, true)!;
      counted(account, (lru) => lru.set(key, value, bytes));
      fitTotal(name, key, bytes);
      return true;
    },
    delete(name, key) {
      const now = o.now();
      sweepIdle(now);
      const account = accounts.get(name);
      if (!account) return false;
      // Only an entry that could still be read counts as deleted: an expired one is already gone.
      const held = counted(account, (lru) => lru.get(key) !== undefined && lru.delete(key));
      if (account.lru.size === 0) accounts.delete(name);
      return held;
    },
    bytesOf(name) {
      sweepIdle(o.now());
      const account = accounts.get(name);
      if (!account) return 0;
      counted(account, (lru) => lru.sweep());
      return account.lru.bytes;
    },
    get bytes() {
      return total;
    },
  };
}
