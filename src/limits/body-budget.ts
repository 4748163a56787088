/**
 * Bytes of request bodies still arriving, per holder (a key, or for requests without one the
 * client's address) and in all. A body on its way is held in memory until its last byte, and
 * nothing else bounds how many there are: a tenant that sent all but the last bytes of 100
 * bodies of 10 MB, then a byte every 30 s (under the connection's idle timeout), took the
 * gateway from 119 MB to 1.2 GB, and `max_concurrent_requests` is only taken once a body is read.
 * A body takes its declared length when its reading starts (a chunked one, each piece as it
 * comes) and gives it back when its reading ends, whichever way it ends.
 *
 * Per process: what it bounds is this process's memory.
 */
export interface BodyBudgetOptions {
  /** Most bytes one holder's bodies may have on their way at once; never less than one largest body. */
  perHolderBytes: number;
  /** Most bytes of all holders' bodies at once. */
  totalBytes: number;
}

/** Why a body was not taken: its holder's share is full (429), or everyone's (503). */
export type BodyRefusal = "holder" | "total";

export interface BodyBudget {
  /** Takes `bytes` for `holder`, or says why not (and takes nothing). */
  take(holder: string, bytes: number): BodyRefusal | undefined;
  /** Gives back what `take` took. */
  give(holder: string, bytes: number): void;
  /** Bytes taken, all holders. */
  readonly bytes: number;
  /** Bytes taken by `holder`. */
  heldBy(holder: string): number;
}

export function createBodyBudget(o: BodyBudgetOptions): BodyBudget {
  const held = new Map<string, number>();
  let total = 0;
  return {
    take(holder, bytes) {
      const mine = held.get(holder) ?? 0;
      if (mine + bytes > o.perHolderBytes) return "holder";
      if (total + bytes > o.totalBytes) return "total";
      held.set(holder, mine + bytes);
      total += bytes;
      return undefined;
    },
    give(holder, bytes) {
      const left = (held.get(holder) ?? 0) - bytes;
      // Holders come and go (addresses, keys): an empty one leaves no entry behind.
      if (left > 0) held.set(holder, left);
      else held.delete(holder);
      total -= bytes;
    },
    get bytes() {
      return total;
    },
    heldBy: (holder) => held.get(holder) ?? 0,
  };
}

/** Who a share is: what a refusal names (the key's, the account's, the client address's). */
export type ShareLevel = "key" | "account" | "address";

/** One place a body's bytes are counted: a budget and the holder in it. */
export interface BodyShare {
  budget: BodyBudget;
  holder: string;
  level: ShareLevel;
}

/**
 * Takes `bytes` from every share, in order, or from none: the first that refuses says why (its
 * level, or "total"), and what the ones before it took is given back.
 */
export function takeShares(shares: readonly BodyShare[], bytes: number): { refusal: BodyRefusal; level: ShareLevel } | undefined {
  for (let i = 0; i < shares.length; i++) {
    const refusal = shares[i]!.budget.take(shares[i]!.holder, bytes);
    if (refusal === undefined) continue;
    for (let j = 0; j < i; j++) shares[j]!.budget.give(shares[j]!.holder, bytes);
    return { refusal, level: shares[i]!.level };
  }
  return undefined;
}

/** Gives back what `takeShares` took. */
export function giveShares(shares: readonly BodyShare[], bytes: number): void {
  for (const share of shares) share.budget.give(share.holder, bytes);
}
