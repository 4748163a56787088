import { ATTEMPT_HOOKS, type AbortListener, type AttemptHooks } from "../transport/transport.ts";

/** The limits of one upstream attempt, in milliseconds (a provider's `timeouts`). */
export interface DeadlineLimits {
  /** From the start of the attempt (connecting included) until the answer's head arrives. */
  firstByteMs: number;
  /** Longest silence between answer bytes once the head is in. */
  idleMs: number;
  /** The whole attempt, head to last byte. */
  totalMs: number;
}

export type DeadlineKind = "first_byte" | "idle" | "total";

/**
 * What a deadline reads the time from and sets its timer with: the process's own by default; a
 * test passes a clock it moves by hand, so a limit passes at an exact moment without sleeping.
 */
export interface DeadlineClock {
  now(): number;
  /** Calls `fn(arg)` after `ms`: the deadline passes itself, so it keeps no closure for its timer. */
  setTimer<T>(fn: (arg: T) => void, ms: number, arg: T): unknown;
  clearTimer(timer: unknown): void;
}

/** One clock for every deadline (a default written inline would be new closures per attempt). */
export const SYSTEM_CLOCK: DeadlineClock = {
  now: () => performance.now(),
  setTimer: (fn, ms, arg) => setTimeout(fn, ms, arg),
  clearTimer: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
};

/** The reason an attempt's signal carries when its deadline passes. */
export class DeadlineExpired extends Error {
  override readonly name = "TimeoutError";
  constructor(readonly kind: DeadlineKind) {
    super(kind === "first_byte" ? "the upstream did not answer in time" : kind === "idle" ? "the upstream went quiet" : "the upstream took too long");
  }
}

/**
 * One deadline per upstream attempt, covering connect, first byte, the silence between bytes
 * and the total — for JSON bodies, error bodies and streams alike. Whoever reads the upstream
 * calls `touch()` as bytes arrive; when a limit passes, `signal` aborts with a DeadlineExpired,
 * which aborts the transport's request and ends whatever was reading it.
 *
 * One lazily re-armed timer per attempt: `touch()` only records the time (it runs for every
 * chunk, and only ever moves the limit later), and the timer, when it fires, checks whether the
 * limit really passed or re-arms for what is left. A quiet stream costs one timer wake-up per
 * idle period, a busy one no more. Changes that can bring the limit closer (the head arriving,
 * the client catching up) re-arm at once.
 */
export class Deadline implements AttemptHooks {
  /** Made when `signal` is first asked for: our transport never asks (transport.ts, `attemptInit`). */
  #controller: AbortController | undefined;
  /** Set once the attempt aborts (never undefined then: see `#abortWith`). */
  #reason: unknown;
  /** Abort listeners added through the hooks (transport.ts): usually one, the transport's. */
  #listeners: AbortListener[] | undefined;
  /** The listeners being called by the abort (see `#abortWith`). */
  #dispatching: (AbortListener | undefined)[] | undefined;
  readonly #limits: DeadlineLimits;
  readonly #clock: DeadlineClock;
  readonly #started: number;
  #lastActivity: number;
  #headIn = false;
  #paused = false;
  #timer: unknown;
  /** When the armed timer fires (`now()` units). */
  #armedAt = 0;
  #expired: DeadlineKind | undefined;

  constructor(limits: DeadlineLimits, clock: DeadlineClock = SYSTEM_CLOCK) {
    this.#limits = limits;
    this.#clock = clock;
    this.#started = this.#lastActivity = clock.now();
    this.#arm();
  }

  /**
   * Told when the request's last byte is written, or its answer's head arrives (whichever a
   * transport can say): who pays for a request the client leaves (gateway/billing-session.ts).
   */
  sentTo: { promptSent: boolean } | undefined;

  /**
   * The most bytes the answer may be (AttemptHooks): a whole answer past what its request could be
   * given is cut where it passes that, not read to the transport's cap (64 MiB).
   */
  maxAnswerBytes: number | undefined;

  requestSent(): void {
    if (this.sentTo) this.sentTo.promptSent = true;
  }

  /** A transport reading a whole answer before handing it over: its head came, or more of its body. */
  answerProgress(head: boolean): void {
    if (head) this.headArrived();
    else this.#lastActivity = this.#clock.now();
  }

  /**
   * An AbortSignal that aborts with the attempt, for what needs one (`fetch`, image downloads):
   * made on first use, already aborted if the attempt is. A transport finds the deadline's hooks
   * on it too (transport.ts).
   */
  get signal(): AbortSignal {
    let controller = this.#controller;
    if (!controller) {
      controller = this.#controller = new AbortController();
      (controller.signal as AbortSignal & { [ATTEMPT_HOOKS]?: AttemptHooks })[ATTEMPT_HOOKS] = this;
      if (this.aborted) controller.abort(this.#reason);
    }
    return controller.signal;
  }

  /** Whether the attempt has ended for a reason (a limit passed, the client left, the caller ended it). */
  get aborted(): boolean {
    return this.#reason !== undefined;
  }

  /** Why: a DeadlineExpired, or the caller's reason; undefined until aborted. */
  get reason(): unknown {
    return this.#reason;
  }

  addAbortListener(fn: AbortListener): void {
    // Once aborted (the listeners being called included) a new one would never run.
    if (this.aborted) return;
    (this.#listeners ??= []).push(fn);
  }

  removeAbortListener(fn: AbortListener): void {
    const dispatching = this.#dispatching;
    if (dispatching) {
      // Emptied rather than spliced while they are being called: one removed then is skipped.
      const at = dispatching.indexOf(fn);
      if (at !== -1) dispatching[at] = undefined;
      return;
    }
    const listeners = this.#listeners;
    const at = listeners ? listeners.indexOf(fn) : -1;
    if (at !== -1) listeners!.splice(at, 1);
  }

  /**
   * Aborts the signal, then tells its listeners, as "abort" event listeners are told: each once,
   * the reason set, none added from then on (even by another listener), one removed meanwhile
   * skipped, and one that throws reported without keeping the others from running.
   */
  #abortWith(reason: unknown): void {
    // As AbortController.abort(): no reason given is an AbortError, whatever reads it.
    reason ??= new DOMException("This operation was aborted", "AbortError");
    const listeners = this.#listeners;
    this.#listeners = undefined;
    this.#dispatching = listeners;
    this.#reason = reason;
    this.#controller?.abort(reason);
    if (listeners) {
      for (const fn of listeners) {
        try {
          if (typeof fn === "function") fn();
          else fn?.handleEvent();
        } catch (err) {
          reportError(err);
        }
      }
    }
    this.#dispatching = undefined;
  }

  /** Which limit passed, once one has. */
  get expired(): DeadlineKind | undefined {
    return this.#expired;
  }

  /**
   * A client's signal this deadline listens to until the answer's head arrives, then no longer
   * (attempt.ts: a whole answer is read to its end from then, whether or not its client stays).
   * A field, not a callback: a request keeps no closure of its own for it.
   */
  detachOnHead: AbortSignal | undefined;

  /** The answer's head arrived: from now on the idle limit applies instead of the first-byte one. */
  headArrived(): void {
    if (this.detachOnHead) {
      this.detachOnHead.removeEventListener("abort", this);
      this.detachOnHead = undefined;
    }
    this.#headIn = true;
    this.#lastActivity = this.#clock.now();
    this.#rearm();
  }

  /** Answer bytes arrived. */
  touch(): void {
    this.#lastActivity = this.#clock.now();
  }

  /**
   * The reader is waiting for the client, not for the upstream (back-pressure): silence from the
   * upstream is then ours, not its fault. The total limit still runs.
   */
  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#lastActivity = this.#clock.now();
    this.#rearm();
  }

  /** The attempt is over (answered, failed or given up); the timer stops. */
  clear(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
  }

  /**
   * The client's request was aborted: the deadline is that signal's "abort" listener itself (an
   * EventListener object), so an attempt adds no closure of its own for it (gateway/attempt.ts).
   */
  handleEvent(): void {
    this.abort(new DOMException("client disconnected", "AbortError"));
  }

  /** Ends the attempt now for a reason of the caller's (the client left, the stream ended). */
  abort(reason: unknown): void {
    this.clear();
    if (!this.aborted) this.#abortWith(reason);
  }

  /** When the nearest limit passes (`now()` units). A number, not a pair: it runs at every head. */
  #nextAt(): number {
    const total = this.#started + this.#limits.totalMs;
    const other = !this.#headIn ? this.#started + this.#limits.firstByteMs : this.#paused ? Infinity : this.#lastActivity + this.#limits.idleMs;
    return other < total ? other : total;
  }

  /** Which limit `at` (a value of `#nextAt()`) is: the total one wins ties, as there. */
  #kindOf(at: number): DeadlineKind {
    if (at === this.#started + this.#limits.totalMs) return "total";
    return this.#headIn ? "idle" : "first_byte";
  }

  /**
   * The nearest limit may now come sooner than the timer is set for (only touch() never moves it
   * closer). A timer set for earlier stays: when it fires it finds the limit later and re-arms,
   * so the usual head (idle limit later than the first-byte one) costs no second timer.
   */
  #rearm(): void {
    if (this.aborted) return;
    if (this.#timer !== undefined && this.#nextAt() >= this.#armedAt) return;
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#arm();
  }

  #arm(): void {
    const at = this.#nextAt();
    this.#armedAt = at;
    this.#timer = this.#clock.setTimer(Deadline.#fire, Math.max(0, at - this.#clock.now()), this);
  }

  /** The timer's callback, one for every deadline (each passes itself). */
  static #fire(this: void, deadline: Deadline): void {
    deadline.#fired();
  }

  #fired(): void {
    this.#timer = undefined;
    if (this.aborted) return;
    const at = this.#nextAt();
    // Timers may fire a little early; what is left is waited for again.
    if (this.#clock.now() + 1 < at) return this.#arm();
    const kind = this.#kindOf(at);
    this.#expired = kind;
    this.#abortWith(new DeadlineExpired(kind));
  }
}
