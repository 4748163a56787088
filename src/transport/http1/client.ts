import { createFetchTransport } from "../fetch-transport.ts";
import { MAX_SAME_ORIGIN_REDIRECTS, sameOriginRedirect } from "../same-origin-redirect.ts";
import { answerCap, attemptHooksOfInit, type AttemptHooks, type Transport } from "../transport.ts";
import { exchange, UpstreamConnectionError } from "./exchange.ts";
import { createPool, type Connection } from "./pool.ts";
import { parseTarget, serializePost, type Target } from "./request-writer.ts";

export { fastReader, wholeBody, wholeReader } from "./body-queue.ts";
export { UpstreamConnectionError } from "./exchange.ts";

/**
 * HTTP/1.1 client for upstream API calls, on `Bun.connect` sockets served by the same event
 * loop as the gateway's own connections. It implements the Transport port.
 *
 * Why not `fetch`: Bun runs `fetch` on a separate HTTP thread, so every call and every body
 * chunk crosses threads. Measured on the bench's loopback (docs/benchmarks.md): the call alone
 * cost 15–20 µs of the request thread, a JSON proxy spent 31 µs of CPU per request on `fetch`
 * against 22 µs on this client, and its p50 latency was 18 µs lower. Upstream calls are narrow
 * (a POST with a JSON body to a fixed origin), so the client is small; anything outside that
 * (other methods, non-string bodies, an HTTP(S) proxy in the environment) goes to `fetch`.
 *
 * The rules it keeps against a broken or hostile upstream (docs/decisions.md, "Transport"):
 * - a request goes out again only when a pooled connection failed before any byte of an answer
 *   arrived (the keep-alive race), once, on a new connection; a new connection's failure is the
 *   caller's to judge;
 * - answers are bounded (`maxResponseBytes`, counted after decoding), on every path;
 * - a connection whose framing left anything in doubt is destroyed, never pooled (pool.ts,
 *   response-parser.ts).
 *
 * The answer is a standard `Response`, so callers cannot tell the two apart.
 */
export interface Http1ClientOptions {
  /** Extra TLS trust (tests use a private CA); the system store is always used. */
  ca?: string;
  /** Seconds an idle pooled connection is kept; under common server keep-alive timeouts. */
  idleSeconds?: number;
  /** Idle connections kept per origin. */
  maxIdlePerOrigin?: number;
  /**
   * How long a freed connection rests before it carries another request, once its origin has
   * sent an answer nobody asked for (pool.ts): a late copy of an answer lands on an idle
   * connection, which is destroyed, instead of being read as another request's answer. Default
   * 10 ms; 0 never rests.
   */
  reuseAfterMs?: number;
  /** How long an origin keeps that rest after its last unasked-for answer. Default 10 minutes. */
  probationMs?: number;
  /**
   * While an origin is on probation: `close` (default) gives each of its connections one request,
   * so no late copy can ever be read as another request's answer; `rest` reuses them after
   * `reuseAfterMs` (fewer connections, but a copy later than the rest still crosses).
   */
  reuseOnProbation?: "close" | "rest";
  /** Requests the client cannot carry (see above). Defaults to the global `fetch`; capped like ours. */
  fallback?: Transport;
  /** An HTTP(S) proxy is configured (config/env.ts, upstreamViaProxy): every call goes to `fallback`, which honours it. */
  viaProxy?: boolean;
  /** Largest answer body accepted, after decoding; beyond it the call or its body fails with ResponseTooLargeError. */
  maxResponseBytes?: number;
  /**
   * Runs a function once the event loop's current turn has run all its I/O callbacks. The
   * gateway passes the one it holds its own writes with (gateway/end-of-turn.ts), so all of
   * a turn's writes share one wake-up. Default: `setImmediate`.
   */
  atEndOfTurn?: (fn: () => void) => void;
  /**
   * Asked as each request on a new connection is about to be written: true holds the write
   * until the turn ends, so a busy turn's requests leave together. The gateway says yes while
   * other requests are in flight. Default: write at once.
   */
  coalesce?: () => boolean;
  /**
   * A connect a call gave up on is taken over by a later call only while it is younger than this
   * (ms; default 3 s): an older one waits for a SYN retransmission that may be a minute away
   * (see `connect`). Tests shorten it.
   */
  adoptConnectsYoungerThanMs?: number;
  /** Connects under way to one origin past which calls take over an older one rather than open another (default 64). */
  maxPendingConnectsPerOrigin?: number;
}

export interface Http1Client {
  fetch: Transport;
  /** Open sockets, pooled or busy (bench and tests check nothing leaks). */
  openConnections(): number;
  /**
   * The gateway is stopping: calls still waiting for their answer's first byte reject with
   * `reason`, and so does every call after this one (gateway/inflight.ts), unless `lasting` is
   * false (the gateway goes on: only the calls waiting now). Calls through `fetch` (a proxy) are
   * left to the stop.
   */
  cut(reason: Error, lasting?: boolean): void;
  close(): void;
}

/** A late copy within this of its answer never reaches another request (pool.ts). */
const DEFAULT_REUSE_AFTER_MS = 10;
const DEFAULT_PROBATION_MS = 10 * 60_000;
/** Enough for the rest above at some 20,000 requests a second to one origin. */
const DEFAULT_MAX_IDLE_PER_ORIGIN = 1024;

const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/**
 * Linux retransmits an unanswered SYN 1 s apart for its first tries on recent kernels
 * (tcp_syn_linear_timeouts, 4: after 1, 1, 1, 1, 1, 2, 4, 8 … s, measured here), doubling from the
 * first on older ones (1, 2, 4 … s), up to a minute apart. A connect younger than this retries
 * within a second (two on older kernels).
 */
const DEFAULT_ADOPT_CONNECTS_YOUNGER_THAN_MS = 3_000;
/** Sockets left waiting on one dead origin, beyond the calls waiting at once (see `connect`). */
const DEFAULT_MAX_PENDING_CONNECTS_PER_ORIGIN = 64;

export function createHttp1Client(options: Http1ClientOptions = {}): Http1Client {
  const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const fallback = createFetchTransport(maxBytes, options.fallback);
  const viaProxy = options.viaProxy ?? false;
  const coalesce = options.coalesce;
  const atEndOfTurn = options.atEndOfTurn ?? ((fn: () => void) => void setImmediate(fn));
  /**
   * A request on a pooled connection is written once the turn's callbacks have run: an
   * unsolicited answer that arrived before this turn's poll reaches the connection's idle check
   * first, even when its callback comes after ours. A connection freed during this very turn
   * waits for one more poll, since what came after its answer is not even polled yet.
   */
  const afterNextPoll = (write: () => void) => atEndOfTurn(() => atEndOfTurn(write));
  const pool = createPool({
    ca: options.ca,
    idleSeconds: options.idleSeconds ?? 30,
    maxIdlePerOrigin: options.maxIdlePerOrigin ?? DEFAULT_MAX_IDLE_PER_ORIGIN,
    reuseAfterMs: options.reuseAfterMs ?? DEFAULT_REUSE_AFTER_MS,
    probationMs: options.probationMs ?? DEFAULT_PROBATION_MS,
    reuseOnProbation: options.reuseOnProbation ?? "close",
  });

  /** Set by `cut`: the stop's reason, which every later call is refused with. */
  let cutWith: Error | undefined;
  /** Calls whose connection is still opening: a cut ends them at once (see `connect`). */
  const opening = new Set<Opening>();
  /** Connects under way by origin, and those their call gave up on: a later call may take one over (see `connect`). */
  const connecting = new Map<string, OriginConnects>();
  const adoptYoungerThanMs = options.adoptConnectsYoungerThanMs ?? DEFAULT_ADOPT_CONNECTS_YOUNGER_THAN_MS;
  const maxPendingConnects = options.maxPendingConnectsPerOrigin ?? DEFAULT_MAX_PENDING_CONNECTS_PER_ORIGIN;

  /** Parsed once per URL: the same few upstream URLs serve every request. */
  const targets = new Map<string, Target | null>();
  function targetOf(url: string): Target | null {
    let target = targets.get(url);
    if (target === undefined) {
      target = parseTarget(url);
      if (targets.size > 1000) targets.clear();
      targets.set(url, target);
    }
    return target;
  }

  /**
   * A new connection for one call, given up as soon as the call is aborted (its deadline, its
   * client) or cut: a connect the upstream never answers (its SYN dropped by a firewall, a host
   * gone from the network) is otherwise only ended by the kernel, two minutes later on Linux, and
   * the call, its client's hold and its place waited that long past `first_byte_ms`, whether or not
   * the client was still there (a raw-TCP probe).
   *
   * `Bun.connect` cannot be called off, so a connect given up goes on without its call: a later
   * call to that origin takes it over rather than opening another, and one that opens with nobody
   * waiting is closed, as a call's own connection is when the call ends. Without that, every call
   * to an unreachable origin left a socket waiting for the kernel: a few requests a second held
   * thousands of descriptors until the process could open no more (the probe's 40 calls every
   * 200 ms held 40 more each time).
   *
   * Only a young connect is taken over (`adoptConnectsYoungerThanMs`), the youngest first: an old
   * one waits for its next SYN retransmission, which doubles up to a minute apart, so once the
   * upstream came back every call that took it over waited for that retransmission or its own
   * deadline, where a new connect completed at once (a raw-TCP probe: 502s at a 2.5 s deadline
   * 12 s into an outage, against a fresh client's 200). Older ones are left to the kernel, and
   * closed if they ever open. The sockets left waiting are then about (the kernel's ~2 minutes ÷
   * that age) per caller, and at most `maxPendingConnectsPerOrigin` connects are under way to one
   * origin: past that, a call takes over the youngest whatever its age, except that one new
   * connect still goes out per `adoptConnectsYoungerThanMs`, so a young one is always there to
   * notice the upstream's return; when any connect to the origin opens, the calls still waiting on
   * old ones are moved to new connects (`rehome`), which now open at once.
   */
  function connect(target: Target, aborts: AttemptHooks | AbortSignal | undefined): Promise<Connection> {
    if (aborts?.aborted) return Promise.reject(aborts.reason);
    return new Promise<Connection>((resolve, reject) => {
      let origin = connecting.get(target.origin);
      if (!origin) connecting.set(target.origin, (origin = { target, underWay: [], abandoned: [] }));
      const adopted = origin.abandoned.length > 0 ? adoptable(origin) : undefined;
      const call = new Opening(aborts, resolve, reject, opening, abandon);
      if (adopted) call.wait(adopted);
      else call.wait(start(origin));
    });
  }

  /** A new connect to the origin, told to `connected` when it opens or fails. */
  function start(origin: OriginConnects): PendingConnect {
    const pending = new PendingConnect(origin, performance.now());
    origin.underWay.push(pending);
    pool.connect(origin.target).then(
      (conn) => connected(pending, conn),
      (err) => connected(pending, undefined, new UpstreamConnectionError(`could not connect to the upstream: ${(err as Error).message ?? err}`, false)),
    );
    return pending;
  }

  /** The abandoned connect a new call takes over, out of the origin's list; none when a new connect is better (see `connect`). */
  function adoptable(origin: OriginConnects): PendingConnect | undefined {
    const list = origin.abandoned;
    let youngest = 0;
    for (let i = 1; i < list.length; i++) if (list[i]!.startedAt > list[youngest]!.startedAt) youngest = i;
    const pending = list[youngest]!;
    const now = performance.now();
    if (now - pending.startedAt >= adoptYoungerThanMs) {
      const underWay = origin.underWay;
      if (underWay.length < maxPendingConnects) return undefined;
      // At the limit: still one new connect per period, the young one that notices the upstream's return.
      if (now - underWay[underWay.length - 1]!.startedAt >= adoptYoungerThanMs) return undefined;
    }
    list.splice(youngest, 1);
    return pending;
  }

  /** A connect's outcome, to the call that waits for it; else the connection is closed unused (see `connect`). */
  function connected(pending: PendingConnect, conn: Connection | undefined, error?: Error): void {
    const origin = pending.origin;
    const at = origin.abandoned.indexOf(pending);
    if (at >= 0) origin.abandoned.splice(at, 1);
    origin.underWay.splice(origin.underWay.indexOf(pending), 1);
    if (origin.underWay.length === 0) connecting.delete(origin.target.origin);
    else if (conn) rehome(origin);
    const call = pending.waiter;
    pending.waiter = null;
    if (call?.end()) {
      if (conn) call.resolve(conn);
      else call.reject(error);
      return;
    }
    if (conn) pool.destroy(conn, cutWith ?? new Error("the call gave up while its connection was opening"));
  }

  /**
   * A connect to the origin opened, so it is reachable again: calls waiting on connects older than
   * the adoption age (their next SYN may be a minute away) get new ones, which open at once. The
   * old connects are left as abandoned ones are. Connects are under way in the order they started.
   */
  function rehome(origin: OriginConnects): void {
    const oldBefore = performance.now() - adoptYoungerThanMs;
    const underWay = origin.underWay;
    const moved: Opening[] = [];
    for (let i = 0; i < underWay.length && underWay[i]!.startedAt <= oldBefore; i++) {
      const old = underWay[i]!;
      if (!old.waiter) continue;
      moved.push(old.waiter);
      old.waiter = null;
      origin.abandoned.push(old);
    }
    for (const call of moved) call.wait(start(origin));
  }

  /** A call gave up on its connect: the connect is left for a later call to that origin. */
  function abandon(pending: PendingConnect): void {
    pending.waiter = null;
    pending.origin.abandoned.push(pending);
  }

  /**
   * A call `fetch` makes (through a proxy, or one this client does not carry). It cannot say when
   * the request's last byte went, so the request counts as sent once handed over: a client that
   * leaves from then on pays for its prompt (gateway/billing-session.ts), as it does on our own
   * connections once the request is written; a connection that fails is a refusal, which takes it
   * back. Counted at the answer's head instead, leaving during a proxied non-stream request was
   * free prompt processing (a probe, 2026-11-30).
   */
  function viaFallback(url: string, init: RequestInit): Promise<Response> {
    const answer = fallback(url, init);
    attemptHooksOfInit(init)?.requestSent?.();
    return answer;
  }

  /** `hops`: same-origin redirects followed so far (see below). */
  async function request(url: string, init: RequestInit, hops: number): Promise<Response> {
    const method = (init.method ?? "GET").toUpperCase();
    const headers = init.headers;
    if (viaProxy || method !== "POST" || typeof init.body !== "string" || !isPlainRecord(headers)) return viaFallback(url, init);
    const target = targetOf(url);
    if (!target) return viaFallback(url, init);
    // An attempt's deadline comes as hooks (transport.ts, `attemptInit`): reading `init.signal` would make its AbortSignal.
    const hooks = attemptHooksOfInit(init);
    const signal = hooks ? undefined : (init.signal ?? undefined);
    const aborts = hooks ?? signal;
    if (aborts?.aborted) throw aborts.reason;
    if (cutWith) throw cutWith;
    const message = serializePost(target, headers, init.body);
    const cap = answerCap(hooks, maxBytes);

    let res: Response | undefined;
    const pooled = pool.take(target.origin);
    if (pooled) {
      try {
        res = await exchange(pool, pooled, message, { method, hooks, signal, maxBytes: cap, hold: pooled.cooling ? afterNextPoll : atEndOfTurn, reused: true });
      } catch (err) {
        // The keep-alive race: the server dropped the connection (or timed it out, 408) before answering. Once, on a new one.
        if (!(err instanceof UpstreamConnectionError && err.replayable) || aborts?.aborted) throw err;
      }
    }
    if (!res) {
      const conn = await connect(target, aborts);
      // Cut while its connection was opening (the pool knew no owner for it yet): never sent.
      if (cutWith) {
        pool.destroy(conn, cutWith);
        throw cutWith;
      }
      res = await exchange(pool, conn, message, { method, hooks, signal, maxBytes: cap, hold: coalesce?.() ? atEndOfTurn : null });
    }
    // A 307 or 308 to the request's own origin is followed, as the fallback does (same-origin-redirect.ts).
    if ((res.status === 307 || res.status === 308) && hops < MAX_SAME_ORIGIN_REDIRECTS) {
      const next = sameOriginRedirect(url, res, method, init.body);
      if (next !== null) {
        res.body?.cancel().catch(() => {});
        return request(next, init, hops + 1);
      }
    }
    return res;
  }

  return {
    fetch: (url, init) => request(url, init, 0),
    openConnections: () => pool.size(),
    cut(reason, lasting = true) {
      if (lasting) cutWith = reason;
      for (const call of [...opening]) call.giveUp(reason);
      pool.cut(reason);
    },
    close: () => pool.close(),
  };
}

/** One origin's connects under way (in the order they started), and those of them no call waits for (see `connect`). */
interface OriginConnects {
  target: Target;
  underWay: PendingConnect[];
  abandoned: PendingConnect[];
}

/** A connect under way, when it began (`performance.now()`), and the call waiting for it, if one still is. */
class PendingConnect {
  waiter: Opening | null = null;
  constructor(
    readonly origin: OriginConnects,
    readonly startedAt: number,
  ) {}
}

/**
 * One call waiting for its new connection: its abort (the deadline's hooks or a signal) or the
 * client's cut rejects it at once. It is its own abort listener (handleEvent), as the exchange is.
 */
class Opening {
  private done = false;
  /** The connect it waits for (another once `rehome` moves it). */
  private pending: PendingConnect | null = null;

  constructor(
    private readonly aborts: AttemptHooks | AbortSignal | undefined,
    readonly resolve: (conn: Connection) => void,
    readonly reject: (reason: unknown) => void,
    private readonly opening: Set<Opening>,
    private readonly abandon: (pending: PendingConnect) => void,
  ) {
    opening.add(this);
    if (aborts && "addAbortListener" in aborts) aborts.addAbortListener(this);
    else aborts?.addEventListener("abort", this);
  }

  /** Waits for this connect's outcome (`connected` tells the call). */
  wait(pending: PendingConnect): void {
    this.pending = pending;
    pending.waiter = this;
  }

  /** Stops waiting: true the first time (the call still wants an outcome). */
  end(): boolean {
    if (this.done) return false;
    this.done = true;
    this.opening.delete(this);
    const aborts = this.aborts;
    if (aborts && "removeAbortListener" in aborts) aborts.removeAbortListener(this);
    else aborts?.removeEventListener("abort", this);
    return true;
  }

  /** Aborted or cut: the call is rejected now; its connect goes on for another (see `connect`). */
  giveUp(reason: unknown): void {
    if (!this.end()) return;
    this.abandon(this.pending!);
    this.reject(reason);
  }

  /** The call was aborted while its connection was opening. */
  handleEvent(): void {
    this.giveUp(this.aborts?.reason ?? new DOMException("aborted", "AbortError"));
  }
}

function isPlainRecord(value: unknown): value is Record<string, string> {
  if (value === undefined || value === null || typeof value !== "object" || Array.isArray(value)) return false;
  if (value instanceof Headers) return false;
  for (const key in value) if (typeof (value as Record<string, unknown>)[key] !== "string") return false;
  return true;
}
