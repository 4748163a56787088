/**
 * Counts requests between their reservation and their settlement, so shutdown (and tests)
 * can wait until every answer has been paid for.
 */
/** Why an attempt waiting for its upstream's head was ended: the gateway's stop cut it (attempt.ts answers 503). */
export class ShutdownCut extends Error {
  constructor() {
    super("the gateway is shutting down");
  }
}

export function createInflight() {
  let count = 0;
  let waiters: (() => void)[] = [];
  let cutting = false;
  /** Streams under way, each with how it ends itself at a cut (stream-answer.ts, `cuts`). */
  const streams = new Set<() => void>();
  /** Attempts waiting for their upstream's head (attempt.ts): a cut ends each with the gateway's 503. */
  const waiting = new Set<{ abort(reason: unknown): void }>();
  let allGone: (() => void) | undefined;
  const gone = () => {
    if (streams.size > 0 || waiting.size > 0 || !allGone) return;
    allGone();
    allGone = undefined;
  };
  return {
    /**
     * The gateway is about to cut what still runs (shutdown, past its grace): a request that ends
     * "cancelled" from now on was ended by us, not by its client (billing-session.ts). Streams
     * under way are told to end with an error frame their client can read, and requests still
     * waiting for their upstream's head get a 503 they can retry (their connections had been
     * closed without a word, and the access log blamed their clients: a new-operator probe).
     * Resolved once every one of them has ended (a stream waiting for a slow client may not: the
     * caller bounds the wait).
     */
    cut(): Promise<void> {
      cutting = true;
      for (const end of [...streams]) end();
      for (const attempt of [...waiting]) attempt.abort(new ShutdownCut());
      return streams.size === 0 && waiting.size === 0 ? Promise.resolve() : new Promise((resolve) => (allGone = resolve));
    },
    /** A stream under way: `end` ends it with an error frame when the gateway cuts. */
    watch(end: () => void): void {
      streams.add(end);
      // A stream that starts while the cut waits for the others (its head came meanwhile) is cut
      // too, once its loop runs: it would otherwise go on until the connections are closed under it.
      if (cutting) queueMicrotask(end);
    },
    /** The stream ended (whatever ended it). */
    unwatch(end: () => void): void {
      if (streams.delete(end)) gone();
    },
    /** An attempt waits for its upstream's head: a cut aborts it with ShutdownCut. */
    hold(attempt: { abort(reason: unknown): void }): void {
      waiting.add(attempt);
    },
    /** Its head came, or it ended otherwise. */
    release(attempt: { abort(reason: unknown): void }): void {
      if (waiting.delete(attempt)) gone();
    },
    get cutting(): boolean {
      return cutting;
    },
    begin(): void {
      count += 1;
    },
    end(): void {
      count -= 1;
      if (count === 0) {
        const ready = waiters;
        waiters = [];
        for (const resolve of ready) resolve();
      }
    },
    get count(): number {
      return count;
    },
    idle(): Promise<void> {
      return count === 0 ? Promise.resolve() : new Promise((resolve) => waiters.push(resolve));
    },
  };
}

export type Inflight = ReturnType<typeof createInflight>;
