/**
 * Counts requests between their reservation and their settlement, so shutdown (and tests)
 * can wait until every answer has been paid for.
 */
/** Why an upstream call waiting for its answer's head was ended: the gateway's stop cut it (attempt.ts answers 503). */
export class ShutdownCut extends Error {
  constructor(message = "the gateway is shutting down") {
    super(message);
  }
}

/**
 * The same cut while the gateway goes on: its shared ledger database has been out of reach for
 * nearly as long as other processes wait before they release its holds (Ledger.onHoldsAtRisk).
 * Nothing more is delivered against those holds; new answers wait for the database.
 */
export class LedgerLostCut extends ShutdownCut {
  constructor() {
    super("the gateway cannot reach its ledger database");
  }
}

export function createInflight() {
  let count = 0;
  let waiters: (() => void)[] = [];
  let cutting = false;
  /** Answers are cut as they start: the ledger's holds are at risk (`fence`). */
  let fenced = false;
  /** Why what runs is being cut: the stop, or the ledger out of reach. */
  let reason: ShutdownCut = new ShutdownCut();
  /** Streams under way, each with how it ends itself at a cut (stream-answer.ts, `cuts`), and whether it holds credit (the fence cuts only those). */
  const streams = new Map<() => void, boolean>();
  let streamsGone: (() => void) | undefined;
  /** What else a cut ends: the transport's calls still waiting for a head (app.ts). */
  const alsoCut: ((reason: ShutdownCut) => void)[] = [];
  /** Whole answers between the end of their reading and their return (their settlements' commits in between). */
  let delivering = 0;
  let delivered: (() => void)[] = [];
  /** The stop closed every connection (`server.stop(true)`): no answer can go out any more. */
  let closed = false;
  const inflight = {
    /**
     * The gateway is about to cut what still runs (shutdown, past its grace): a request that ends
     * "cancelled" from now on was ended by us, not by its client (billing-session.ts). Streams
     * under way are told to end with an error frame their client can read; upstream calls still
     * waiting for their head are ended with ShutdownCut, which their requests answer with a 503
     * to retry (their connections had been closed without a word, and the access log blamed
     * their clients: a new-operator probe). Resolved once every stream has ended (those waiting
     * for a slow client may not: the caller bounds the wait).
     */
    cut(): Promise<void> {
      cutting = true;
      reason = new ShutdownCut();
      for (const cut of alsoCut) cut(reason);
      for (const end of [...streams.keys()]) end();
      return streams.size === 0 ? Promise.resolve() : new Promise((resolve) => (streamsGone = resolve));
    },
    /**
     * The ledger's holds are at risk (`on`), or safe again. At risk, paid answers are cut as at a
     * stop (streams end with an error frame; calls waiting for a head, of any request, with a 503
     * to retry), and so is every paid stream that starts meanwhile (forward.ts refuses a paid
     * request's next attempt too), but the gateway goes on: free answers are served, and what was
     * cut settles as a stream its client left (charged for what it sent). Safe again, answers run
     * as before.
     */
    fence(on: boolean): void {
      fenced = on;
      if (!on) return;
      reason = new LedgerLostCut();
      for (const cut of alsoCut) cut(reason);
      for (const [end, paid] of [...streams]) if (paid) end();
    },
    get fenced(): boolean {
      return fenced;
    },
    /** Why what runs is being cut (read by a stream as it ends: its error frame says so). */
    get reason(): ShutdownCut {
      return reason;
    },
    /** A stream under way: `end` ends it with an error frame when the gateway cuts (`paid`: when the ledger's fence does too). */
    watch(end: () => void, paid = true): void {
      streams.set(end, paid);
      // A stream that starts while the cut waits for the others (its head came meanwhile) is cut
      // too, once its loop runs: it would otherwise go on until the connections are closed under it.
      if (cutting || (fenced && paid)) queueMicrotask(end);
    },
    /** The stream ended (whatever ended it). */
    unwatch(end: () => void): void {
      if (!streams.delete(end) || streams.size > 0 || !streamsGone) return;
      streamsGone();
      streamsGone = undefined;
    },
    /**
     * `cut` is called at the cut too. Registered once (app.ts: the upstream client), not per
     * request: a set of each attempt's deadline held until its head cost streams 13 % of their
     * CPU in a paired bench.
     */
    onCut(cut: (reason: ShutdownCut) => void): void {
      alsoCut.push(cut);
    },
    get cutting(): boolean {
      return cutting;
    },
    /**
     * A whole answer is read and about to be settled and returned; the function returned says it
     * was. Its body goes out only after its settlement's commit, so a stop that closed the
     * connections meanwhile charged it in full ("ok") for a body its client never got: a stop
     * waits for these (`delivered`) before it closes them.
     */
    delivering(): () => void {
      delivering += 1;
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        delivering -= 1;
        if (delivering > 0) return;
        const ready = delivered;
        delivered = [];
        for (const resolve of ready) resolve();
      };
    },
    /**
     * The stop is closing every connection now. A whole answer read after this never reaches its
     * client, whether or not its request's signal says so (it did not always: one was charged in
     * full for a reset), so it settles as cut (billing-session.ts: charged nothing).
     */
    closeConnections(): void {
      closed = true;
    },
    get connectionsClosed(): boolean {
      return closed;
    },
    /** Whole answers settling or being returned (see `delivering`). */
    get deliveringCount(): number {
      return delivering;
    },
    /** Resolves once no whole answer is settling or being returned. */
    delivered(): Promise<void> {
      return delivering === 0 ? Promise.resolve() : new Promise((resolve) => delivered.push(resolve));
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
    /** What a free stream watches: the stop cuts it, the ledger's fence does not (it holds no credit). */
    free: {
      watch: (end: () => void) => inflight.watch(end, false),
      unwatch: (end: () => void) => inflight.unwatch(end),
      get reason(): ShutdownCut {
        return reason;
      },
    },
  };
  return inflight;
}

export type Inflight = ReturnType<typeof createInflight>;
