import { hostname } from "node:os";
import { monotonicClock, staleWindowSql, storedPeriod, windowSql, windowStarts, type SpendBudget } from "../../billing/spend-period.ts";
import { acceptableSettlement, budgetRefusal, type Hold, type Ledger, type LedgerHealth, type RejectionLog, type ReserveResult, type Settlement } from "../../billing/ledger.ts";
import type { Logger } from "../../log/log.ts";
import { randomId } from "../ids.ts";
import { classifyPgFailure as classifyFailure, describePgFailure, int, PgTimeoutError, recycleIfStale, withTimeout, type Pg, type PgFailure } from "./pg-client.ts";
import { creditAccount, debitAccount } from "./pg-credits.ts";
import { DB_NOW_MS } from "./pg-migrations.ts";
import { cacheSavingsMicro, priceListId, priceListJson } from "../../billing/pricing.ts";
import { readSpill, SpillMismatchError, unknownAccounts } from "../spill-file.ts";
import { databaseIdentity, spillOwnership } from "./pg-spill.ts";
import { createSettlementQueue, type QueuedSettlement, type RejectionCounter } from "../../billing/settlement-queue.ts";

export interface PgLedgerOptions {
  now: () => number;
  log?: Logger;
  /** Settlements that may wait unwritten; past this, free requests are refused too. */
  maxQueued?: number;
  /** Our own bound on every statement (PostgreSQL's statement_timeout is the other). */
  timeoutMs?: number;
  /** How long deadlocks and lock timeouts may go on before the store counts as failing. */
  busyLimitMs?: number;
  /** Longest pause between retries while the store fails (recovery is seen within this). */
  retryMaxMs?: number;
  /** This process's heartbeat, which is also the idle probe: `/ready` learns of a dead database without traffic. */
  heartbeatMs?: number;
  /** A process silent this long, holding nothing, has its `gateway_instances` row deleted by a sweep (default an hour). */
  forgetAfterMs?: number;
  /** A process whose heartbeat is older than this is dead: its holds are released. */
  staleAfterMs?: number;
  /** How often this process looks for holds of dead processes (and expired ones). */
  sweepIntervalMs?: number;
  /** A hold outlives its request by at most this long even if its process lives: longer than any upstream deadline. */
  holdTtlMs?: number;
  instanceId?: string;
  /** Told of each batch's settlements once committed (spend alerts, alerts/alert-monitor.ts); must not throw. */
  onCommitted?: (settlements: Settlement[]) => void;
  /**
   * A folder for the spill file (charges kept while the database is unreachable, and settlements
   * still unwritten when the grace at close runs out), one per process, named after the database's
   * identity (read from it) so a start replays only its own database's, and replayed only once its
   * process is gone (pg-spill.ts); unset: none (they are logged). The gateway sets it
   * (SWITCHYARD_SPILL_DIR, default ./data). `database`: its URL, which older versions named files
   * after (theirs are replayed too).
   */
  spill?: { dir: string; database: string };
}

type Counter = RejectionCounter;

interface Queued extends QueuedSettlement {
  /** A settlement, or (`release`) a hold to void without a record. */
  release?: true;
  /** What this process held for the request (0: nothing, a free model). */
  held: number;
}

interface HeldAmount {
  accountId: string;
  keyId: string;
  amount: number;
}

interface WaitingReservation {
  hold: Hold;
  resolve: (result: ReserveResult) => void;
}

/** Reservations of one account taken by one statement at most. */
const MAX_RESERVE_GROUP = 500;
/** Settlements written per transaction at most. */
const MAX_BATCH = 1_000;
/** Holds of dead processes released per sweep at most (the next sweep takes the rest). */
const SWEEP_BATCH = 1_000;

/**
 * The shared ledger on PostgreSQL, for any number of gateway processes.
 *
 * A reservation is a row in `holds`, keyed by the request id, inserted by ONE statement that
 * also adds its amount to `accounts.held_micro` and `api_keys.held_micro`; CHECK constraints
 * (balance − held ≥ 0, spent + held ≤ limit) make that statement fail when funds are short, so
 * two processes can never both take the last credit (no read-check-write across a round trip).
 * Reservations of one account that arrive while its statement runs wait for it, then go
 * together in one statement (`RESERVE_MANY`), so a hot account's row is locked once per group,
 * not once per request; an account with nothing in flight is never held up.
 *
 * Settlements are group-committed as in the SQLite ledger: queued, and written many per
 * statement by one writer that starts a new batch as soon as the last one committed; the
 * pipeline waits for the commit before a paid answer's final byte. A batch is ONE autocommit
 * statement (`SETTLE_BATCH`), one round trip: inside it, its accounts and then its keys are
 * locked in sorted order (reservations take one account, then its key), so batches from several
 * processes never deadlock (deadlocks and lock timeouts are retried anyway), and no row lock is
 * held while the client is away. Each settlement deletes its hold, inserts its usage record
 * (ON CONFLICT DO NOTHING: a settlement written twice charges once) and posts at most the hold.
 *
 * Every statement is bounded (pg-client.ts). A database that cannot be reached or cannot write
 * marks the store failing: paid requests are refused (`reserve` answers `unavailable` at once,
 * `admits(true)` is false), settlements wait in a bounded queue and are retried with backoff,
 * and are written once when it answers again. A batch whose commit was ambiguous (the
 * connection died after the statement was sent) is simply sent again: the usage records make it
 * idempotent.
 *
 * Processes die with holds open. Each process heartbeats (`gateway_instances`); any process
 * releases the holds of one whose heartbeat is older than `staleAfterMs`, and holds past their
 * expiry, locking accounts with FOR UPDATE SKIP LOCKED so sweepers never wait on each other or
 * on settlements.
 */
export async function createPostgresLedger(sql: Pg, o: PgLedgerOptions): Promise<Ledger & RejectionLog & { sweep(): Promise<number>; instanceId: string }> {
  /** What a failure means (pg-client.ts); one that says the pool's sessions are stale has them replaced. */
  const classifyPgFailure = (err: unknown): PgFailure => {
    recycleIfStale(sql, err);
    return classifyFailure(err);
  };
  // Never backwards (spend-period.ts): what it stamps and the windows it picks move forward only.
  const now = monotonicClock(o.now);
  const log = o.log ?? (() => {});
  const maxQueued = o.maxQueued ?? 50_000;
  const timeoutMs = o.timeoutMs ?? 2_000;
  const busyLimitMs = o.busyLimitMs ?? 1_000;
  const retryMaxMs = o.retryMaxMs ?? 1_000;
  const heartbeatMs = o.heartbeatMs ?? 2_000;
  const staleAfterMs = o.staleAfterMs ?? 30_000;
  const sweepIntervalMs = o.sweepIntervalMs ?? 10_000;
  const forgetAfterMs = o.forgetAfterMs ?? 3_600_000;
  const holdTtlMs = o.holdTtlMs ?? 31 * 60_000;
  const instanceId = o.instanceId ?? randomId("gw", 9);
  const bounded = <T>(promise: Promise<T>, what: string) => withTimeout(promise, timeoutMs, what);

  // ── Holds this process took (the database has all of them; these are what we settle against). ──
  const holds = new Map<string, HeldAmount>();
  /** Accounts with a reservation statement in flight, and the reservations waiting for it to end. */
  const reserving = new Map<string, WaitingReservation[]>();

  let closed = false;

  /** Heartbeats under way: a clean stop waits for them, or one landing after it would bring the row back. */
  const beating = new Set<Promise<unknown>>();
  /** Price lists this process has seen committed: each is sent once, with the first batch charged at it. */
  const pricesWritten = new Set<number>();
  /** This process's spill file and those of processes that are gone (see PgLedgerOptions.spill). */
  const spills = o.spill ? spillOwnership({ dir: o.spill.dir, database: await bounded(databaseIdentity(sql), "database identity"), formerly: o.spill.database, instanceId }) : undefined;
  /**
   * Spill files of processes that are gone, taken over by this one (their locks held): each is
   * removed once every settlement in it is written (`pending` empties).
   */
  const adopted = new Map<string, { pending: Set<string>; done(): void; release(): void }>();
  /** Settlements written (or dropped): the files taken over that are now written whole go. */
  const written = (batch: Queued[]) => {
    if (adopted.size === 0) return;
    for (const [path, file] of adopted) {
      for (const q of batch) file.pending.delete(q.settlement.requestId);
      if (file.pending.size > 0) continue;
      adopted.delete(path);
      file.done();
      log("info", "settlements from the spill file of a stopped process are written", { path });
    }
  };
  /**
   * A look for stopped processes' spill files is under way (adoptOrphans). True from the start:
   * the sweeper's timer is set before the start's first heartbeat returns, and a sweep that came
   * first read this before it was declared (a ReferenceError in the log whenever the heartbeat
   * took longer than a sweep interval) and, declared earlier but false, would have taken the files
   * before the start's own look, which stops the start on a file of unknown accounts.
   */
  let adopting = true;
  /** Files of accounts this database does not have, already logged (see SpillMismatchError). */
  const mismatched = new Set<string>();
  /**
   * Since when this process's heartbeats have been written without a failure. After the database
   * was unreachable every process's heartbeat is stale, the living's too: a process only takes
   * others for dead once it has itself been writing for longer than a living one takes to come
   * back (`staleAfterMs`, plus a statement's timeout for a heartbeat that was under way during the
   * outage). Otherwise the first process back would release the holds of the others while their
   * settlements still wait in memory, and the credit those holds kept could be spent twice.
   */
  let healthySince: number | undefined;
  /**
   * When the last heartbeat that was written had been sent (this process's clock). Other processes
   * take this one for dead once its row's heartbeat is `staleAfterMs` old, and release its holds:
   * `riskAfterMs` after it (heartbeats failing since), every answer under way is cut
   * (`onHoldsAtRisk`), before anything more is delivered against a hold another process may
   * release. A scale-out probe: a gateway cut off from PostgreSQL for 48 s streamed two answers
   * whole after their holds were swept at 34 s and the account spent the credit again on another
   * gateway; one answer went unbilled. The margin leaves a statement's timeout and a heartbeat's
   * interval (this check runs with the heartbeat) before the earliest sweep.
   */
  // On the process's own monotonic clock: a wall clock stepped forward would fence a healthy process.
  let lastBeatSent = performance.now();
  let holdsAtRisk = false;
  const riskListeners: ((atRisk: boolean) => void)[] = [];
  const riskAfterMs = staleAfterMs - Math.min(heartbeatMs + timeoutMs, staleAfterMs / 3);
  const tellRisk = (atRisk: boolean) => {
    if (holdsAtRisk === atRisk) return;
    holdsAtRisk = atRisk;
    if (atRisk) log("error", "PostgreSQL unreachable for nearly as long as other processes wait before releasing this one's holds: paid answers under way are cut", { unreachableMs: Math.round(performance.now() - lastBeatSent), openHolds: holds.size });
    else log("info", "PostgreSQL reached again: answers are served again");
    for (const listener of riskListeners) {
      try {
        listener(atRisk);
      } catch (err) {
        log("error", "a listener of the holds' risk failed", { error: String(err) });
      }
    }
  };
  const heartbeat = (): Promise<unknown> => {
    if (closed) return Promise.resolve();
    const sent = performance.now();
    const beat = bounded(sql.unsafe(
      `INSERT INTO gateway_instances (id, hostname, pid, started_at, heartbeat_at) VALUES ($1, $2, $3, ${DB_NOW_MS}, ${DB_NOW_MS})
       ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`,
      [instanceId, hostname(), process.pid],
    ), "heartbeat");
    beating.add(beat);
    void beat.then(() => {
      healthySince ??= now();
      lastBeatSent = Math.max(lastBeatSent, sent);
      tellRisk(false);
    }, () => (healthySince = undefined));
    void beat.finally(() => beating.delete(beat)).catch(() => {});
    return beat;
  };
  /** Whether stale heartbeats may be taken for dead processes now (see `healthySince`). */
  const judgesOthers = () => healthySince !== undefined && now() - healthySince >= staleAfterMs + timeoutMs;

  /**
   * The batch, refusal counters included, as ONE autocommit statement (`SETTLE_BATCH`): one round
   * trip, no BEGIN … COMMIT across awaits, so an account's row lock is held for the statement's
   * own execution and its commit, never while the client is away. (With a transaction, a hot
   * account's reservations queued behind a batch that waited for a free connection and then held
   * the row across five round trips: docs/benchmarks.md, "Hot account".)
   */
  async function writeBatch(batch: Queued[], counters: Counter[], at: number): Promise<void> {
    if (batch.length === 0 && counters.length === 0) return;
    const newPrices = new Map<number, string>();
    const rows = JSON.stringify(batch.map((q) => {
      const s = q.settlement;
      const c = s.classes;
      let pid: number | null = null;
      if (s.prices) {
        pid = priceListId(s.prices);
        if (!pricesWritten.has(pid)) newPrices.set(pid, priceListJson(s.prices));
      }
      return { r: s.requestId, a: s.accountId, k: s.keyId, m: s.model, p: s.provider, pt: s.promptTokens, ct: s.completionTokens, e: s.estimated,
        c: s.costMicro, s: s.status, l: Math.round(s.latencyMs), h: q.held, rec: !q.release, ch: q.charge !== false, cr: s.clientRequestId ?? null,
        fi: c ? c.freshInput : s.promptTokens, rd: c?.cacheRead ?? 0, w5: c?.cacheWrite5m ?? 0, w1: c?.cacheWrite1h ?? 0, rs: c?.reasoning ?? 0, im: c?.images ?? 0, pid,
        sv: c && s.prices ? cacheSavingsMicro(c, s.prices) : 0 };
    }));
    const counterRows = JSON.stringify(counters.map((c) => ({ k: c.keyId, mi: c.minute, st: c.status, n: c.count })));
    const priceRows = JSON.stringify([...newPrices].map(([id, prices]) => ({ id, prices })));
    const { day, week, month } = windowStarts(at);
    await bounded(sql.unsafe(SETTLE_BATCH, [rows, at, counterRows, priceRows, day, week, month]), "settlement batch");
    for (const id of newPrices.keys()) pricesWritten.add(id);
  }

  /**
   * Releases holds whose process stopped heartbeating, and holds past their expiry. Accounts are
   * locked first, sorted, with SKIP LOCKED (an account a settlement or another sweeper is
   * working on is left for the next sweep), then the holds are deleted and the keys updated.
   */
  async function sweep(): Promise<number> {
    const stale = judgesOthers();
    // The rows of processes gone long ago, once they hold nothing: each kill -9 left one for ever
    // (17 of 20 rows after a day of faults; a scale-out probe). A process that comes back writes
    // its row again with its next heartbeat.
    // Housekeeping: its failure must not keep the holds below from being released.
    if (stale) {
      await bounded(sql.unsafe(
        `DELETE FROM gateway_instances i WHERE i.heartbeat_at < ${DB_NOW_MS} - $1 AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.instance_id = i.id)`,
        [forgetAfterMs],
      ), "forget instances").catch((err) => log("warn", "forgetting stopped processes failed; the next sweep retries", { error: describePgFailure(err) }));
    }
    const candidates = await bounded(sql.unsafe(
      `SELECT DISTINCT h.account_id FROM holds h LEFT JOIN gateway_instances i ON i.id = h.instance_id
        WHERE h.expires_at < ${DB_NOW_MS} OR ($2 AND (i.heartbeat_at IS NULL OR i.heartbeat_at < ${DB_NOW_MS} - $1))
        LIMIT ${SWEEP_BATCH}`,
      [staleAfterMs, stale],
    ), "sweep") as { account_id: string }[];
    if (candidates.length === 0) return 0;
    const released = await bounded(sql.begin(async (tx) => {
      const locked = (await tx`SELECT id FROM accounts WHERE id = ANY(${candidates.map((c) => c.account_id)}::text[]) ORDER BY id FOR UPDATE SKIP LOCKED`) as { id: string }[];
      if (locked.length === 0) return 0;
      const gone = (await tx.unsafe(SWEEP, [locked.map((l) => l.id), staleAfterMs, stale])) as { account_id: string; key_id: string; amount_micro: string }[];
      if (gone.length === 0) return 0;
      const byAccount = new Map<string, number>();
      const byKey = new Map<string, number>();
      for (const g of gone) {
        byAccount.set(g.account_id, (byAccount.get(g.account_id) ?? 0) + int(g.amount_micro));
        byKey.set(g.key_id, (byKey.get(g.key_id) ?? 0) + int(g.amount_micro));
      }
      const keys = [...byKey.keys()].sort();
      await tx`SELECT 1 FROM api_keys WHERE id = ANY(${keys}::text[]) ORDER BY id FOR UPDATE`;
      await tx.unsafe(LIFT, [JSON.stringify([...byAccount].map(([id, n]) => ({ id, n }))), JSON.stringify([...byKey].map(([id, n]) => ({ id, n })))]);
      return gone.length;
    }), "sweep");
    if (released > 0) log("warn", "released holds of gateway processes that stopped (or of requests past their expiry)", { released });
    return released;
  }

  // Group commit and everything that can go wrong with it: billing/settlement-queue.ts. The
  // heartbeat doubles as the probe: it is a write, so it fails when writes would.
  const settlements = createSettlementQueue<Queued>({
    write: (batch, counters, at) => writeBatch(batch, counters, at),
    probe: () => heartbeat().then(() => {}),
    classify: classifyPgFailure,
    describe: describePgFailure,
    committed(batch) {
      for (const q of batch) holds.delete(q.settlement.requestId);
      written(batch);
      o.onCommitted?.(batch.map((q) => q.settlement));
    },
    dropped(q) {
      holds.delete(q.settlement.requestId);
      written([q]);
    },
    // Its own file, which no other process replays while this one lives: so charges settled while
    // the database is unreachable are kept in it before their answers end, as on SQLite (a kill -9
    // then lost them), and it goes once they are written.
    spill: spills
      ? (queued) => spills.keep(queued.filter((q) => !q.release).map((q) => ({ settlement: q.settlement, held: q.held, ...(q.charge === false ? { charge: false as const } : {}) })))
      : undefined,
    unspill: spills ? () => spills.unkeep() : undefined,
  }, { now, log, maxQueued, maxBatch: MAX_BATCH, busyLimitMs, retryMaxMs, probeIntervalMs: heartbeatMs });

  // The heartbeat runs whatever the load: other processes sweep a process whose heartbeat stops.
  const ticker = setInterval(() => {
    if (closed) return;
    heartbeat().catch((err) => settlements.failed(classifyPgFailure(err) === "busy" ? "busy" : "storage", err));
    if (!holdsAtRisk && performance.now() - lastBeatSent >= riskAfterMs) tellRisk(true);
  }, heartbeatMs);
  ticker.unref?.();
  const sweeper = setInterval(() => {
    if (closed || settlements.failing) return;
    void adoptOrphans(false).catch((err) => log("warn", "looking for spill files of stopped processes failed; the next sweep looks again", { error: String(err) }));
    extendOpenHolds()
      .catch((err) => log("warn", "extending this process's open holds failed; the next sweep retries", { error: describePgFailure(err) }))
      .then(sweep)
      .catch((err) => log("warn", "hold sweep failed; the next one retries", { error: describePgFailure(err) }));
  }, sweepIntervalMs);
  sweeper.unref?.();

  const enqueue = (q: Queued): Promise<void> => settlements.enqueue(q);

  /**
   * Moves the expiry of this process's open holds (those it still waits to settle or release) a
   * whole TTL on once less than half of it is left. A hold's TTL covers one attempt (the longest
   * provider total_ms, plus a minute), but one request may make several under it: `models`
   * fallbacks, a move to another vendor key, retries. Swept mid-request by any process, its hold
   * was gone, the answer was delivered charged 0, and its credit was spent again meanwhile (a
   * scale-out probe). The expiry now catches only holds their living process no longer knows of.
   */
  async function extendOpenHolds(): Promise<void> {
    if (holds.size === 0) return;
    // On the database's clock, as holds are made and swept by it (a host behind it extended too late, a review).
    await bounded(sql.unsafe(
      `UPDATE holds SET expires_at = ${DB_NOW_MS} + $3::bigint
        WHERE instance_id = $1 AND request_id = ANY($2::text[]) AND expires_at < ${DB_NOW_MS} + $3::bigint / 2`,
      [instanceId, [...holds.keys()], holdTtlMs],
    ), "extend holds");
  }

  /** A hold whose reservation may or may not have committed (the answer was lost): void it later. */
  const voidUncertain = (hold: Hold) => {
    void enqueue({ settlement: releaseOf(hold), release: true, held: 0 });
  };

  /**
   * Why a hold was refused, read after the refusal (only refusals pay for this read): the first of
   * the balance, the account's spend limit and the key's that it does not fit, with what is free.
   */
  async function refusal(hold: Hold, last = false): Promise<ReserveResult | typeof ROOM_NOW> {
    try {
      const [rows, keys] = await bounded(Promise.all([
        sql`SELECT balance_micro, held_micro, spend_limit_micro, spend_limit_period, period_spent_micro, period_start FROM accounts WHERE id = ${hold.accountId}`,
        sql`SELECT held_micro, spend_limit_micro, spend_limit_period, period_spent_micro, period_start FROM api_keys WHERE id = ${hold.keyId}`,
      ]), "refusal");
      const [a] = rows;
      if (!a) return { ok: false, reason: "balance", availableMicro: 0 };
      const free = int(a.balance_micro) - int(a.held_micro);
      if (free < hold.amountMicro) return { ok: false, reason: "balance", availableMicro: Math.max(0, free) };
      const at = now();
      const [k] = keys;
      return budgetRefusal("account_spend_limit", budgetOf(a), int(a.held_micro), hold.amountMicro, at)
        ?? (k ? budgetRefusal("key_spend_limit", budgetOf(k), int(k.held_micro), hold.amountMicro, at) : undefined)
        // Nothing short now: a settlement freed room between the statement and this read.
        ?? (last ? { ok: false, reason: "balance", availableMicro: Math.max(0, free) } : ROOM_NOW);
    } catch {
      return { ok: false, reason: "balance", availableMicro: 0 };
    }
  }

  const unavailable = (): ReserveResult => ({ ok: false, reason: "unavailable", message: settlements.lastError ?? "the ledger's queue is full" });

  /** The statement that grants holds in order while they fit (`RESERVE_MANY`); answers the request ids granted. */
  async function grant(batch: Hold[]): Promise<Set<string>> {
    const at = now();
    const { day, week, month } = windowStarts(at);
    const rows = JSON.stringify(batch.map((h, o) => ({ o, r: h.requestId, a: h.accountId, k: h.keyId, m: h.amountMicro })));
    const answer = (await bounded(sql.unsafe(RESERVE_MANY, [rows, instanceId, at, holdTtlMs, day, week, month]), "reserve")) as { r: string }[];
    return new Set(answer.map((row) => row.r));
  }

  /** One reservation, one statement: granted when it fits the balance and both spend limits, else refused with the reason. */
  async function reserveOne(hold: Hold, again = false): Promise<ReserveResult> {
    let refused: ReserveResult | typeof ROOM_NOW | undefined;
    try {
      if (!(await grant([hold])).has(hold.requestId)) refused = await refusal(hold, again);
    } catch (err) {
      // A CHECK (the balance's last line) or an unknown account (the hold's foreign key).
      if (classifyPgFailure(err) !== "data") return reserveFailed([hold], err);
      refused = await refusal(hold, again);
    }
    // Refused, yet nothing is short when the reason is read: a settlement freed room meanwhile. Asked
    // once more rather than refused with a balance's words the balance does not bear out (under
    // load, a spend-limit refusal read "top up the account" with 99,261 credits free; a scale-out probe).
    if (refused === ROOM_NOW) return reserveOne(hold, true);
    if (refused) return refused;
    holds.set(hold.requestId, { accountId: hold.accountId, keyId: hold.keyId, amount: hold.amountMicro });
    return { ok: true };
  }

  /** The store failed (not the funds): nothing may run; a hold that may have committed is voided later. */
  function reserveFailed(batch: Hold[], err: unknown): ReserveResult {
    const kind = classifyPgFailure(err);
    // The statement may have committed before its answer was lost: void what it may hold.
    if (kind === "storage") {
      for (const hold of batch) voidUncertain(hold);
      // No answer in time says little of the store: the statement may only have waited behind
      // others on its connection that wait for a row locked elsewhere (one tenant's account held
      // every tenant's reservations past the timeout, and the whole ledger was marked failing; a
      // scale-out probe). The heartbeat, a write of its own every 2 s, says whether the store is gone.
      if (!(err instanceof PgTimeoutError)) settlements.failed(kind, err);
    }
    log(kind === "busy" ? "warn" : "error", "reservation failed", { error: describePgFailure(err), holds: batch.length });
    return { ok: false, reason: "unavailable", message: describePgFailure(err) };
  }

  /**
   * The reservations that arrived for an account while its last statement ran go together, in
   * one statement (`RESERVE_MANY`), then the next group, until none wait. A hot account's row is
   * then locked once per group instead of once per request (each lock held through a commit),
   * which is what bounded how many requests a second one account admits. Other accounts are not
   * held up: each account has its own queue, and one with nothing in flight goes at once.
   */
  function nextReservations(accountId: string): void {
    const waiting = reserving.get(accountId);
    if (!waiting || waiting.length === 0) {
      reserving.delete(accountId);
      return;
    }
    const group = waiting.splice(0, MAX_RESERVE_GROUP);
    void reserveGroup(group).finally(() => nextReservations(accountId));
  }

  async function reserveGroup(group: WaitingReservation[]): Promise<void> {
    // Asked again: the store may have failed, or another call taken the hold, while they waited.
    const pending: WaitingReservation[] = [];
    for (const w of group) {
      if (!settlements.admits(true)) w.resolve(unavailable());
      else if (holds.has(w.hold.requestId)) w.resolve({ ok: true });
      else pending.push(w);
    }
    if (pending.length === 0) return;
    if (pending.length === 1) return pending[0]!.resolve(await reserveOne(pending[0]!.hold));
    const holdsOf = pending.map((w) => w.hold);
    let granted: Set<string>;
    try {
      granted = await grant(holdsOf);
    } catch (err) {
      // A CHECK or foreign key: some hold the group's arithmetic let through cannot be taken
      // (it should not happen; the constraints are the last line). Each alone decides.
      if (classifyPgFailure(err) === "data") granted = new Set();
      else {
        const failed = reserveFailed(holdsOf, err);
        for (const w of pending) w.resolve(failed);
        return;
      }
    }
    const refused: WaitingReservation[] = [];
    for (const w of pending) {
      if (granted.has(w.hold.requestId)) {
        holds.set(w.hold.requestId, { accountId: w.hold.accountId, keyId: w.hold.keyId, amount: w.hold.amountMicro });
        w.resolve({ ok: true });
      } else refused.push(w);
    }
    // Not granted in the group: perhaps only because an earlier one in it did not fit either
    // (the group grants in order while the running sums fit). Each is asked alone, which refuses
    // exactly as a reservation that came alone would, with what is free.
    await Promise.all(refused.map(async (w) => w.resolve(await reserveOne(w.hold))));
  }

  await heartbeat();

  /**
   * Spill files of this database (this host's) whose processes are gone (pg-spill.ts: never a
   * living process's): their settlements queued like new ones, each charging at most what its
   * request held; a record that exists already charges nothing (its request id is unique), so a
   * file replayed twice, or a settlement both in it and in this process's own file, charges once.
   * A file goes once its settlements are written. At the start, and while running once the
   * database answers (a process that died during an outage and is not started again).
   */
  async function adoptOrphans(atStart: boolean): Promise<void> {
    if (!spills || closed || (adopting && !atStart)) return;
    adopting = true;
    try {
      const files = spills.orphans();
      for (const [i, file] of files.entries()) {
        const spilled = readSpill(file.path, log);
        if (spilled.length === 0) {
          file.done();
          continue;
        }
        try {
          const ids = [...new Set(spilled.map((s) => s.settlement.accountId))];
          const found = new Set((await bounded(sql`SELECT id FROM accounts WHERE id = ANY(${ids}::text[])`, "spill accounts")).map((r: { id: string }) => r.id));
          const unknown = unknownAccounts(spilled, (id) => found.has(id));
          if (unknown.length > 0) throw new SpillMismatchError(file.path, spilled.length, unknown);
        } catch (err) {
          file.release();
          if (atStart) {
            // The start stops: the files after this one are left, unlocked, for the next.
            for (const rest of files.slice(i + 1)) rest.release();
            throw err;
          }
          // Said once per file: it stays until an operator moves it (or restores the database).
          if (!(err instanceof SpillMismatchError) || !mismatched.has(file.path)) log("error", err instanceof SpillMismatchError ? err.message : "a stopped process's spill file could not be checked; the next sweep tries again", { path: file.path, error: String(err) });
          if (err instanceof SpillMismatchError) mismatched.add(file.path);
          continue;
        }
        // Closed while the accounts were looked up: left for the next process.
        if (closed) {
          file.release();
          continue;
        }
        log("warn", "writing settlements a stopped process kept in its spill file", { settlements: spilled.length, path: file.path });
        adopted.set(file.path, { ...file, pending: new Set(spilled.map((s) => s.settlement.requestId)) });
        for (const s of spilled) void enqueue({ settlement: s.settlement, held: s.held, ...(s.charge === false ? { charge: false as const } : {}) });
      }
    } finally {
      adopting = false;
    }
  }

  if (spills) {
    try {
      // Taken now: a folder it cannot lock in says so at the start, not in the middle of an outage.
      spills.claim();
    } catch (err) {
      log("warn", "no spill file of its own: charges settled while PostgreSQL is unreachable wait in memory only (a kill -9 then loses them) until one can be made", { dir: o.spill!.dir, error: String(err) });
    }
    try {
      await adoptOrphans(true);
    } catch (err) {
      for (const file of adopted.values()) file.release();
      spills.release();
      throw err;
    }
  }

  return {
    instanceId,
    sweep,

    reserve(hold: Hold): Promise<ReserveResult> {
      if (!settlements.admits(true)) return Promise.resolve(unavailable());
      if (holds.has(hold.requestId)) return Promise.resolve({ ok: true });
      const waiting = reserving.get(hold.accountId);
      if (waiting) return new Promise((resolve) => waiting.push({ hold, resolve }));
      // Nothing in flight for this account: this reservation goes at once, alone.
      reserving.set(hold.accountId, []);
      return reserveOne(hold).finally(() => nextReservations(hold.accountId));
    },

    settle(settlement: Settlement): Promise<void> {
      return enqueue({ settlement: acceptableSettlement(settlement, log), held: holds.get(settlement.requestId)?.amount ?? 0 });
    },

    async release(requestId: string): Promise<void> {
      const held = holds.get(requestId);
      if (!held) return;
      await enqueue({ settlement: releaseOf({ requestId, accountId: held.accountId, keyId: held.keyId, amountMicro: held.amount }), release: true, held: 0 });
    },

    async topUp(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean> {
      return bounded(creditAccount(sql, accountId, amountMicro, now(), idempotencyKey), "top-up");
    },

    async debit(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean> {
      return bounded(debitAccount(sql, accountId, amountMicro, now(), idempotencyKey), "debit");
    },

    async balance(accountId: string) {
      const [row] = await bounded(sql`SELECT balance_micro, held_micro FROM accounts WHERE id = ${accountId}`, "balance");
      return row ? { balanceMicro: int(row.balance_micro), heldMicro: int(row.held_micro) } : null;
    },

    flush: () => settlements.flush(),
    admits: (paid) => settlements.admits(paid),
    health: () => settlements.health(),

    openHolds: () => holds.size,
    onHoldsAtRisk(listener) {
      riskListeners.push(listener);
    },

    async close(graceMs = 5_000): Promise<void> {
      closed = true;
      clearInterval(ticker);
      clearInterval(sweeper);
      // Holds nothing will settle now are voided with the last batch.
      for (const [requestId, held] of holds) {
        void settlements.enqueue({ settlement: releaseOf({ requestId, accountId: held.accountId, keyId: held.keyId, amountMicro: held.amount }), release: true, held: 0 });
      }
      await settlements.close(graceMs);
      // Files taken over and not written whole stay for the next start (what this process kept of them is in its own).
      for (const file of adopted.values()) file.release();
      adopted.clear();
      spills?.release();
      if (settlements.health().queued === 0) {
        // A clean stop: this process's row goes, so nobody sweeps for it.
        await Promise.allSettled([...beating]);
        await bounded(sql`DELETE FROM gateway_instances WHERE id = ${instanceId}`, "deregister").catch(() => {});
      }
    },

    abandon(): void {
      closed = true;
      clearInterval(ticker);
      clearInterval(sweeper);
      settlements.abandon();
    },

    countRejection: (keyId, status, at) => settlements.countRejection(keyId, status, at),
  };
}

/** A refusal whose reason, read after it, shows room now (pg-ledger's reserveOne asks again). */
const ROOM_NOW = Symbol("room now");

function releaseOf(hold: Hold): Settlement {
  return { requestId: hold.requestId, accountId: hold.accountId, keyId: hold.keyId, model: "", provider: "", promptTokens: 0, completionTokens: 0, estimated: false, costMicro: 0, status: "released", latencyMs: 0 };
}

/**
 * Reservations of one account (one alone, or those that waited while its last statement ran), one
 * statement. $1: JSON rows {o: order, r: request, a: account, k: key, m: amount}, $2 instance,
 * $3 now, $4 ttl, $5 / $6 / $7 the current day's, week's and month's starts. Locks the account(s),
 * then the key(s), sorted (as every other statement takes them); grants, in order, each hold while
 * the running sums of the group's amounts fit what the account has free, its spend limit's room and
 * the key's (a limit's room: the limit − what was charged in its current period − what is held;
 * a count whose window is not the current one rolled over and counts 0), all read under the lock,
 * so at their latest committed values; inserts
 * those holds (ON CONFLICT (request_id) DO NOTHING: a hold taken twice is held once) and adds them
 * to the held totals. Answers the request ids granted. One that is not granted may still fit
 * (the sums count earlier ones that did not): the caller asks it alone. The CHECK constraints stay
 * the last line: if the arithmetic let through a hold they refuse, the whole statement fails and
 * nothing is held.
 */
/**
 * A row's spend-limit window: $5 / $6 / $7 are the current day's, week's and month's starts in both
 * statements that read or move period counts (a lifetime limit's window is 0).
 */
const windowOf = (row: string) => windowSql(row, "$5::bigint", "$6::bigint", "$7::bigint");
const WINDOW = windowOf("");
/** A row's room under its spend limit (NULL: none), counting what was charged in the current window (or a later one: spentInPeriod). */
const LIMIT_ROOM = `spend_limit_micro - (CASE WHEN ${staleWindowSql("", WINDOW)} THEN 0 ELSE period_spent_micro END) - held_micro`;
/**
 * A charge (`d.charge`) added to the current window's count, or starting it when the period rolled
 * over. Never backwards: a batch stamped before a new window began, committed after another
 * process's batch started that window, counts in its own closed window, not over the new one's
 * count (which would forget what the new window had charged).
 */
const STALE = (table: string) => staleWindowSql(table, windowOf(table));
const PERIOD_CHARGE = (table: string) =>
  `period_spent_micro = CASE WHEN ${table}.period_start = ${windowOf(table)} THEN ${table}.period_spent_micro + d.charge
                             WHEN ${STALE(table)} THEN d.charge
                             ELSE ${table}.period_spent_micro END,
   period_start = CASE WHEN ${STALE(table)} THEN ${windowOf(table)} ELSE ${table}.period_start END`;

const RESERVE_MANY = `
WITH input AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset($1::text::jsonb) AS x(o integer, r text, a text, k text, m bigint)
), locked_accounts AS MATERIALIZED (
  SELECT id, balance_micro - held_micro AS free, ${LIMIT_ROOM} AS room FROM accounts WHERE id IN (SELECT a FROM input) ORDER BY id FOR NO KEY UPDATE
), locked_keys AS MATERIALIZED (
  SELECT id, ${LIMIT_ROOM} AS free FROM api_keys
   WHERE id IN (SELECT k FROM input) AND (SELECT COUNT(*) FROM locked_accounts) >= 0 ORDER BY id FOR NO KEY UPDATE
), fits AS MATERIALIZED (
  SELECT i.r, i.a, i.k, i.m FROM (
    SELECT input.*, SUM(m) OVER (PARTITION BY a ORDER BY o) AS account_sum, SUM(m) OVER (PARTITION BY k ORDER BY o) AS key_sum FROM input
  ) i
  JOIN locked_accounts la ON la.id = i.a
  LEFT JOIN locked_keys lk ON lk.id = i.k
  WHERE i.account_sum <= la.free AND (la.room IS NULL OR i.account_sum <= la.room) AND (lk.free IS NULL OR i.key_sum <= lk.free)
), h AS (
  INSERT INTO holds (request_id, account_id, key_id, amount_micro, instance_id, created_at, expires_at)
  SELECT r, a, k, m, $2, $3, ${DB_NOW_MS} + $4 FROM fits ORDER BY r
  ON CONFLICT (request_id) DO NOTHING
  RETURNING account_id, key_id, amount_micro
), accounts_done AS (
  UPDATE accounts SET held_micro = accounts.held_micro + d.n
    FROM (SELECT account_id, SUM(amount_micro) AS n FROM h GROUP BY account_id) d WHERE accounts.id = d.account_id
  RETURNING 1
), keys_done AS (
  UPDATE api_keys SET held_micro = api_keys.held_micro + d.n
    FROM (SELECT key_id, SUM(amount_micro) AS n FROM h GROUP BY key_id) d WHERE api_keys.id = d.key_id
  RETURNING 1
)
SELECT r FROM fits`;

/**
 * A batch of settlements and releases, and the refusal counters, in one statement (so one
 * autocommit transaction, one round trip). $1: settlements as JSON rows, $2: the time recorded,
 * $3: counters as JSON rows, $4: price lists this process has not written yet (usually none),
 * $5 / $6 / $7: the day's, week's and month's starts at $2, the windows charges count in.
 *
 * In order, each step gated on the one before by an uncorrelated sub-select (PostgreSQL runs it
 * once, as an InitPlan, before the step reads its first row — the "One-Time Filter" of the plan):
 * 1. lock the batch's accounts, then its keys, each `ORDER BY id` (the lock a reservation's
 *    UPDATE takes, account first then key), so batches of several processes never deadlock
 *    whatever order the later steps touch rows in;
 * 2. delete the holds; insert the usage records, sorted, `ON CONFLICT (request_id) DO NOTHING`,
 *    charging at most the hold (the row's, or what this process held if a sweeper released it
 *    meanwhile) and only for records inserted, so a settlement written twice — in one batch, by
 *    two processes, or again after a commit whose answer was lost — charges once;
 * 3. apply the sums once per account and key; upsert the counters, sorted.
 * A CHECK that fails (a balance that cannot cover a charge whose hold was swept) aborts the whole
 * statement: the settlement queue then splits the batch to find that one.
 *
 * Every sub-statement sees the snapshot taken when the statement started; rows another
 * transaction changed before we locked them are re-read at their latest version (READ COMMITTED's
 * re-check), so `balance_micro - charge` is applied to the committed value, and a hold a sweeper
 * deleted meanwhile is not lifted twice (the DELETE skips it, so it adds nothing to `lift`).
 */
const SETTLE_BATCH = `
WITH input AS MATERIALIZED (
  SELECT DISTINCT ON (r) * FROM jsonb_to_recordset($1::text::jsonb)
    AS x(r text, a text, k text, m text, p text, pt bigint, ct bigint, e boolean, c bigint, s text, l integer, h bigint, rec boolean, ch boolean, cr text,
         fi bigint, rd bigint, w5 bigint, w1 bigint, rs bigint, im integer, pid bigint, sv bigint)
  ORDER BY r, rec DESC
), locked_accounts AS MATERIALIZED (
  SELECT id, ${LIMIT_ROOM} AS room FROM accounts WHERE id IN (SELECT a FROM input) ORDER BY id FOR NO KEY UPDATE
), locked_keys AS MATERIALIZED (
  SELECT id, ${LIMIT_ROOM} AS room FROM api_keys WHERE id IN (SELECT k FROM input) AND (SELECT COUNT(*) FROM locked_accounts) >= 0 ORDER BY id FOR NO KEY UPDATE
), locked AS MATERIALIZED (
  SELECT COUNT(*) AS locked_rows FROM locked_keys
), lifted AS (
  DELETE FROM holds USING input WHERE holds.request_id = input.r AND (SELECT locked_rows FROM locked) >= 0
  RETURNING holds.request_id, holds.account_id, holds.key_id, holds.amount_micro
), recorded AS (
  INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at, client_request_id,
                             fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, price_id, held_micro, cache_savings_micro)
  SELECT i.r, i.a, i.k, i.m, i.p, i.pt, i.ct, i.e,
         CASE WHEN i.ch THEN GREATEST(0, LEAST(i.c, COALESCE(l.amount_micro, i.h))) ELSE 0 END, i.s, i.l, $2, i.cr,
         i.fi, i.rd, i.w5, i.w1, i.rs, i.im, i.pid,
         -- The hold only where it capped the charge (as SQLite writes it).
         CASE WHEN NOT i.ch THEN 0 WHEN i.c > GREATEST(0, COALESCE(l.amount_micro, i.h)) THEN GREATEST(0, COALESCE(l.amount_micro, i.h)) END, i.sv
    FROM input i LEFT JOIN lifted l ON l.request_id = i.r
   WHERE i.rec
   ORDER BY i.r
  ON CONFLICT (request_id) DO NOTHING
  RETURNING request_id, account_id, key_id, cost_micro
), swept AS (
  -- Charges whose hold a sweeper released meanwhile: no room was kept for them.
  SELECT r.account_id, r.key_id, r.cost_micro FROM recorded r LEFT JOIN lifted l ON l.request_id = r.request_id WHERE l.request_id IS NULL AND r.cost_micro > 0
), per_account AS (
  SELECT id, SUM(charge) AS charge, SUM(lift) AS lift, SUM(unheld) AS unheld FROM (
    SELECT account_id AS id, cost_micro AS charge, 0::bigint AS lift, 0::bigint AS unheld FROM recorded
    UNION ALL SELECT account_id, 0, amount_micro, 0 FROM lifted
    UNION ALL SELECT account_id, 0, 0, cost_micro FROM swept
  ) d GROUP BY id
), per_key AS (
  SELECT id, SUM(charge) AS charge, SUM(lift) AS lift, SUM(unheld) AS unheld FROM (
    SELECT key_id AS id, cost_micro AS charge, 0::bigint AS lift, 0::bigint AS unheld FROM recorded
    UNION ALL SELECT key_id, 0, amount_micro, 0 FROM lifted
    UNION ALL SELECT key_id, 0, 0, cost_micro FROM swept
  ) d GROUP BY id
), limit_guard AS (
  -- A charge whose hold was swept must still fit its spend limits' rooms (as read under the lock:
  -- the limit − the period's charges − the holds, its own lifted ones given back); else the
  -- statement fails like the balance's CHECK, and the settlement is recorded without its charge.
  -- Charges within their holds were counted in the room already and never trip it.
  -- (The failing cast names the row, so it is not a constant the planner would fold and raise always.)
  SELECT CAST('a charge whose hold was released would pass the spend limit of ' || x.id AS integer) AS refused FROM (
    SELECT d.id FROM per_account d JOIN locked_accounts la ON la.id = d.id WHERE d.unheld > 0 AND la.room IS NOT NULL AND d.charge - d.lift > la.room
    UNION ALL
    SELECT d.id FROM per_key d JOIN locked_keys lk ON lk.id = d.id WHERE d.unheld > 0 AND lk.room IS NOT NULL AND d.charge - d.lift > lk.room
  ) x LIMIT 1
), accounts_done AS (
  UPDATE accounts SET balance_micro = accounts.balance_micro - d.charge, held_micro = accounts.held_micro - d.lift, ${PERIOD_CHARGE("accounts")}
    FROM per_account d WHERE accounts.id = d.id
  RETURNING 1
), keys_done AS (
  UPDATE api_keys SET spent_micro = api_keys.spent_micro + d.charge, held_micro = api_keys.held_micro - d.lift, ${PERIOD_CHARGE("api_keys")}
    FROM per_key d WHERE api_keys.id = d.id
  RETURNING 1
), counted AS (
  INSERT INTO rejection_counts (key_id, minute, status, count)
  SELECT x.k, x.mi, x.st, x.n FROM jsonb_to_recordset($3::text::jsonb) AS x(k text, mi bigint, st integer, n bigint)
   WHERE (SELECT locked_rows FROM locked) >= 0
   ORDER BY x.k, x.mi, x.st
  ON CONFLICT (key_id, minute, status) DO UPDATE SET count = rejection_counts.count + excluded.count
  RETURNING 1
), priced AS (
  INSERT INTO price_lists (id, prices, created_at)
  SELECT x.id, x.prices, $2 FROM jsonb_to_recordset($4::text::jsonb) AS x(id bigint, prices text) ORDER BY x.id
  ON CONFLICT (id) DO NOTHING
  RETURNING 1
)
SELECT (SELECT COUNT(*) FROM recorded) AS recorded, (SELECT COUNT(*) FROM lifted) AS lifted, (SELECT refused FROM limit_guard) AS guarded`;

/** Deletes the sweepable holds of the accounts this transaction locked ($1); $2: how old a heartbeat means a dead process; $3: whether stale heartbeats count now. */
const SWEEP = `
DELETE FROM holds h USING holds h2 LEFT JOIN gateway_instances i ON i.id = h2.instance_id
 WHERE h.request_id = h2.request_id AND h.account_id = ANY($1::text[])
   AND (h2.expires_at < ${DB_NOW_MS} OR ($3 AND (i.heartbeat_at IS NULL OR i.heartbeat_at < ${DB_NOW_MS} - $2)))
RETURNING h.account_id, h.key_id, h.amount_micro`;

/** Lowers held totals by what a sweep released ($1: accounts, $2: keys, JSON [{id, n}]). */
const LIFT = `
WITH accounts_done AS (
  UPDATE accounts SET held_micro = accounts.held_micro - d.n FROM jsonb_to_recordset($1::text::jsonb) AS d(id text, n bigint) WHERE accounts.id = d.id
  RETURNING 1
)
UPDATE api_keys SET held_micro = api_keys.held_micro - d.n FROM jsonb_to_recordset($2::text::jsonb) AS d(id text, n bigint) WHERE api_keys.id = d.id`;

/** A row's spend limit as the shared arithmetic reads it (billing/spend-period.ts). */
function budgetOf(row: Record<string, unknown>): SpendBudget {
  return {
    limitMicro: row.spend_limit_micro === null || row.spend_limit_micro === undefined ? null : int(row.spend_limit_micro),
    period: storedPeriod(row.spend_limit_period),
    periodSpentMicro: int(row.period_spent_micro),
    periodStart: int(row.period_start),
  };
}
