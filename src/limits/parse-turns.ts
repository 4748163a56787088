import { createFairQueue } from "./fair-queue.ts";

/**
 * Large request bodies take turns to be parsed: one at a time per process, round-robin across
 * accounts (and across an account's keys within its turns). A body of a few MB costs the request
 * thread tens of milliseconds to decode, check and parse, and the route's work that follows it in
 * the same task (measuring, re-encoding for the vendor) as much again. Ten keys of one account
 * sending such bodies at their default rates kept the thread busy, and every body that had arrived
 * was parsed before another tenant's small request was looked at: that tenant's p99 went from
 * 4 ms to 674 ms (hostile-tenant probe, nineteenth session). Taking turns, a tenant's backlog
 * waits here, not in the event loop's queue, so another tenant's request waits for at most the
 * one large body being parsed, and another tenant's large body for one turn of each account.
 *
 * A turn covers the route's work on the body up to the vendor request built from it: the body
 * plugin hands the turn's end to the request (`holdTurn`, by its abort signal) and the attempt
 * ends it once that request is built, before it is sent (`endTurnOf`), so no turn waits for a
 * network. Whatever ends a request first (a refusal, an error, its answer) ends its turn too, and
 * a turn is never held longer than `maxHoldMs`, so a path that forgets cannot stop the others.
 * While bodies wait, the next turn starts only once the thread has had as long again for everything
 * else as the last turn took (`schedule` with that delay): a backlog of large bodies takes at most
 * about half of the thread, whoever sends them, instead of all of it while it lasts. A body that
 * finds no backlog starts at once, in the next task. Bodies waiting here are bounded by the body budget they still hold
 * (json-body.ts), so there is no cap of its own.
 */
export interface ParseTurns {
  /** Resolves when it is this body's turn, with the function that ends the turn (call it once). */
  take(key: string, account: string): Promise<() => void>;
  /** Bodies waiting for or having their turn. */
  readonly size: number;
}

export interface ParseTurnsOptions {
  /** Starts the next turn after `delayMs` (default setImmediate for 0, else setTimeout). */
  schedule?: (run: () => void, delayMs: number) => void;
  /** Milliseconds, for a turn's length (default performance.now). */
  now?: () => number;
  /** A turn not ended this long after it started is ended (default 250 ms). */
  maxHoldMs?: number;
}

export function createParseTurns(o: ParseTurnsOptions = {}): ParseTurns {
  const schedule = o.schedule ?? ((run, delayMs) => (delayMs >= 1 ? setTimeout(run, delayMs) : setImmediate(run)));
  const now = o.now ?? (() => performance.now());
  const maxHoldMs = o.maxHoldMs ?? DEFAULT_MAX_HOLD_MS;
  type Waiter = { start: (done: () => void) => void };
  const queue = createFairQueue<Waiter>({ capacity: Number.POSITIVE_INFINITY, perKey: Number.POSITIVE_INFINITY });
  let running: Waiter | undefined;
  let starting = false;

  function startNext(): void {
    starting = false;
    if (running) return;
    const next = queue.next();
    if (!next) return;
    const waiter = next.item;
    running = waiter;
    let ended = false;
    const started = now();
    const end = () => {
      if (ended) return;
      ended = true;
      clearTimeout(cap);
      queue.remove(next.key, waiter);
      running = undefined;
      kick(Math.min(maxHoldMs, Math.max(0, now() - started)));
    };
    const cap = setTimeout(end, maxHoldMs);
    waiter.start(end);
  }

  /** Starts the next turn, `restMs` from now: the last turn's length, so the others get as long. */
  function kick(restMs = 0): void {
    if (starting || running || queue.size === 0) return;
    starting = true;
    schedule(startNext, restMs);
  }

  return {
    take(key, account) {
      return new Promise((resolve) => {
        queue.push(key, { start: resolve }, 1, account);
        kick();
      });
    },
    get size() {
      return queue.size;
    },
  };
}

/** Long enough for a large body's route work on a busy thread; short enough that a lost end costs little. */
const DEFAULT_MAX_HOLD_MS = 250;

/** Turns handed to requests, by their abort signal: the attempt has the signal, not the Request. */
const heldTurns = new WeakMap<AbortSignal, () => void>();

/** Set on a Request whose body holds a turn: its end looks the turn up; others' do not touch their signal. */
const HOLDS_TURN = Symbol("holds a parse turn");

/** The request holds the turn `end` ends, until `endTurnOf` (by its signal: the attempt has the signal, not the Request). */
export function holdTurn(request: Request, end: () => void): void {
  (request as Request & { [HOLDS_TURN]?: true })[HOLDS_TURN] = true;
  heldTurns.set(request.signal, end);
}

/** Whether the request holds a turn already (its large body's): it takes no second one. */
export function holdsTurn(request: Request): boolean {
  return (request as Request & { [HOLDS_TURN]?: true })[HOLDS_TURN] === true;
}

/** Ends the turn the request holds, if any (once: later calls do nothing). */
export function endTurnOf(signal: AbortSignal): void {
  const end = heldTurns.get(signal);
  if (!end) return;
  heldTurns.delete(signal);
  end();
}

/**
 * The same, for a request's end (a refusal: errors.ts): only a request that held a turn touches
 * `request.signal`, which Bun makes on first use, a cost every refusal would otherwise pay.
 */
export function endTurnOfRequest(request: Request): void {
  if ((request as Request & { [HOLDS_TURN]?: true })[HOLDS_TURN]) endTurnOf(request.signal);
}
