/**
 * The ConcurrencyStore port (issue 32 item 4): how many requests one key has under way. A place is
 * taken when a request has been planned and before credits are held, and given back once, when it
 * is settled (gateway/billing-session.ts, in the same `finally` that ends its in-flight count):
 * a stream holds its place until it ends, whichever way — completed, failed, or its client gone.
 * The in-process store below answers synchronously; a shared one may return a promise.
 */
export interface ConcurrencyStore {
  /**
   * A place for one more request of `keyId` while fewer than `limit` are under way, or null (the
   * caller answers 429). `release` gives the place back; calling it again does nothing.
   */
  acquire(keyId: string, limit: number): ConcurrencySlot | null | Promise<ConcurrencySlot | null>;
  /**
   * A place among `first`'s and among `second`'s (a key's and its account's) at once, or neither:
   * the slot, or which of them was full. Shared stores answer it in one round trip.
   */
  acquireBoth(first: PlaceAsk, second: PlaceAsk): PlacePair | Promise<PlacePair>;
}

/** One count asked for a place: its id and its cap. */
export interface PlaceAsk {
  id: string;
  limit: number;
}

/** Both places taken (one slot gives both back), or which count was full. */
export type PlacePair = { slot: ConcurrencySlot } | { full: "first" | "second" };

export interface ConcurrencySlot {
  release(): void;
}

/** A place for requests without a cap: nothing to give back. */
export const NO_SLOT: ConcurrencySlot = { release() {} };

/**
 * Places counted in this process's memory, one counter per key with requests under way (a key
 * with none has no entry, so memory follows what is running, not how many keys exist). With
 * several workers each counts its own requests: docs/decisions.md, "Requests at once per key".
 */
export function createConcurrencyLimiter() {
  const running = new Map<string, number>();
  const limiter = {
    acquire(keyId: string, limit: number): ConcurrencySlot | null {
      const now = running.get(keyId) ?? 0;
      if (now >= limit) return null;
      running.set(keyId, now + 1);
      let held = true;
      return {
        release() {
          if (!held) return;
          held = false;
          const left = (running.get(keyId) ?? 1) - 1;
          if (left <= 0) running.delete(keyId);
          else running.set(keyId, left);
        },
      };
    },
    acquireBoth(first: PlaceAsk, second: PlaceAsk): PlacePair {
      const one = limiter.acquire(first.id, first.limit);
      if (!one) return { full: "first" };
      const two = limiter.acquire(second.id, second.limit);
      if (!two) {
        one.release();
        return { full: "second" };
      }
      return {
        slot: {
          release() {
            two.release();
            one.release();
          },
        },
      };
    },
    /** Requests of this key under way now (tests, metrics). */
    underWay(keyId: string): number {
      return running.get(keyId) ?? 0;
    },
  };
  return limiter;
}

export type ConcurrencyLimiter = ReturnType<typeof createConcurrencyLimiter>;

/** The 429's words: the cap, whose it is, and that waiting for one of the key's (account's) own requests to end is the way. */
export function concurrencyRefusal(limit: number, whose: "key" | "account" = "key"): string {
  const scope = whose === "key" ? "this key" : "this account (all its keys together)";
  return `Too many requests at once for ${scope}: at most ${limit} may be under way (max_concurrent_requests), streams included until they end. Retry when one of them has finished.`;
}
