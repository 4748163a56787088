/**
 * Bytes of whole (non-streamed) answers an account's requests hold in this process: answers being
 * sent that their clients have not taken yet, and answers expected of requests still under way
 * whose size is known before they are asked (an embeddings list: so many vectors of so many
 * dimensions). A whole answer waits in memory until its client reads it, and nothing else bounded
 * how many one account stacks: 40 base64 embeddings requests (~33 MB answers, ~US$0.0003 each) on
 * connections never read took the gateway from 330 MB to 4 GB in 35 s (a hostile-tenant probe,
 * twenty-third session). A request that finds its account's share full is refused (429) before it
 * holds anything; an answer larger than the share alone always fits, and an answer that turns out
 * larger than expected is counted as it is (it was made, and is paid for).
 *
 * Streams are read from their upstream only as fast as their clients read (stream-answer.ts), so
 * a stream holds only what waits for a client slower than its upstream: counted here while it
 * waits (STALLED_STREAM_BYTES and the write waited on). Uncounted, a tenant's streams nobody read
 * held ~310 MB per 1,000 (a hostile-tenant probe, twenty-fourth session), bounded only by its
 * keys' request rates, and keys are free to make.
 *
 * Per process: what it bounds is this process's memory.
 */
export interface UnreadAnswers {
  /** A hold of `expectedBytes` for one request of `accountId`, or undefined when the account's share is full. */
  admit(accountId: string, expectedBytes: number): UnreadHold | undefined;
}

/** One request's bytes in its account's share. */
export interface UnreadHold {
  /** What the answer takes now that it is written (its UTF-8 bytes). */
  resize(bytes: number): void;
  /** Gives the bytes back: the answer was taken, given up or never came. Only the first call counts. */
  release(): void;
}

/** A hold that counts nothing: an answer small enough to be handed over whole, or no share configured. */
export const NO_HOLD: UnreadHold = { resize() {}, release() {} };

export function createUnreadAnswers(o: { perAccountBytes: number }): UnreadAnswers {
  const held = new Map<string, number>();
  const add = (accountId: string, bytes: number) => {
    if (bytes === 0) return;
    const left = (held.get(accountId) ?? 0) + bytes;
    // Accounts come and go: an empty one leaves no entry behind.
    if (left > 0) held.set(accountId, left);
    else held.delete(accountId);
  };
  return {
    admit(accountId, expectedBytes) {
      const mine = held.get(accountId) ?? 0;
      if (mine > 0 && mine + expectedBytes > o.perAccountBytes) return undefined;
      const size = Math.max(0, expectedBytes);
      add(accountId, size);
      return new Hold(add, accountId, size);
    },
  };
}

/** A class, not closures: every request makes one, and an object of two closures costs more to make. */
class Hold implements UnreadHold {
  private released = false;
  constructor(private readonly add: (accountId: string, bytes: number) => void, private readonly accountId: string, private size: number) {}
  resize(bytes: number): void {
    if (this.released) return;
    this.add(this.accountId, bytes - this.size);
    this.size = bytes;
  }
  release(): void {
    if (this.released) return;
    this.released = true;
    this.add(this.accountId, -this.size);
  }
}
