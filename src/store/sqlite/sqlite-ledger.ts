import type { Database } from "bun:sqlite";
import { chargeBudget, monotonicClock, staleWindowSql, storedPeriod, windowSql, windowStarts, type SpendBudget } from "../../billing/spend-period.ts";
import { acceptableSettlement, budgetRefusal, type Hold, type Ledger, type LedgerHealth, type RejectionLog, type ReserveResult, type Settlement } from "../../billing/ledger.ts";
import { createChangeWatch, type ChangeWatch } from "./change-watch.ts";
import type { Logger } from "../../log/log.ts";
import { creditWriter, debitWriter } from "./credits.ts";
import { createRollupFolder } from "./sqlite-rollups.ts";
import { keepInSpill, reserveSpillRoom, readSpill, removeSpill, removeSpillTemporaries, SpillMismatchError, unknownAccounts } from "../spill-file.ts";
import { LedgerFileGoneError, ledgerFiles } from "./file-identity.ts";
import { classifyWriteFailure, describeWriteFailure, retryWhileBusy } from "./sqlite-errors.ts";
import { cacheSavingsMicro, priceListId, priceListJson } from "../../billing/pricing.ts";
import { createSettlementQueue, type QueuedSettlement, type RejectionCounter, type SettlementQueueOptions } from "../../billing/settlement-queue.ts";

export interface SqliteLedgerOptions {
  now: () => number;
  /** Shared with the key cache, so a request reads data_version at most once. */
  changes?: ChangeWatch;
  log?: Logger;
  /** Settlements that may wait unwritten; past this, free requests are refused too. */
  maxQueued?: number;
  /** How long another connection may hold the write lock before the store counts as failing. */
  busyLimitMs?: number;
  /** Longest pause between retries while the store fails (recovery is seen within this). */
  retryMaxMs?: number;
  /** An idle gateway writes a probe this often, so `/ready` learns of a dead disk without traffic. */
  probeIntervalMs?: number;
  /** Group commit's wait for settlements on their way (billing/settlement-queue.ts). */
  commitDelay?: SettlementQueueOptions["commitDelay"];
  /** Told of each batch's settlements once committed (spend alerts, alerts/alert-monitor.ts); must not throw. */
  onCommitted?: (settlements: Settlement[]) => void;
  /**
   * Where settlements still unwritten at close are kept (and replayed from at the next start);
   * default `<database file>.spill`, none for a database in memory.
   */
  spillPath?: string;
  /**
   * Disk held at start for the spill file (`<spill>.reserve`), given up when a spill finds the disk
   * full (store/spill-file.ts). The gateway's start asks for 4 MiB (~10,000 settlements); 0: none.
   */
  spillReserveBytes?: number;
}



interface Queued extends QueuedSettlement {}

/** Settlements written per transaction at most. */
const MAX_BATCH = 512;
/** Usage records per INSERT statement (22 parameters each at most; SQLite allows 32,766). */
const ROWS_PER_INSERT = 64;
/**
 * A usage record's columns: the plain ones every record sets, then those that keep their defaults
 * (0, or NULL for the hold) on most records: answers without cached prompt, reasoning or images,
 * charged less than their hold. A chunk of such records binds 15 parameters a record instead of 22
 * (a tenth of what settling costs); the row stored is the same.
 */
const PLAIN_COLUMNS = `request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at, client_request_id,
  fresh_input_tokens, price_id`;
const CLASS_COLUMNS = "cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, held_micro, cache_savings_micro";
const insertSql = (full: boolean) => `INSERT OR IGNORE INTO usage_records (${PLAIN_COLUMNS}${full ? `, ${CLASS_COLUMNS}` : ""})`;
const rowSql = (full: boolean) => `(${Array.from({ length: full ? 22 : 15 }, () => "?").join(", ")})`;
/** Thrown inside a chunked write to roll it back: some record of the batch already existed. */
const ALREADY_RECORDED = new Error("a usage record of the batch already exists");

/** An account's balance and its own spend limit, cached. */
interface AccountBooks extends SpendBudget {
  balance: number;
}

interface HeldAmount {
  accountId: string;
  keyId: string;
  amount: number;
}

/**
 * The embedded ledger on one SQLite file, for one gateway process (src/store/sqlite/gateway-lock.ts
 * enforces that).
 *
 * Holds live in memory, checked against the balance SQLite has: JavaScript runs one request at a
 * time, so check and hold cannot interleave, and a reservation costs no write (a write per
 * request cost the WAL an fsync every few hundred). A process that dies takes its holds with it.
 *
 * Settlements are group-committed (billing/settlement-queue.ts: the queue, its retries and what
 * a failing store means are shared with the PostgreSQL ledger): one transaction for everything
 * that finished in a turn of the event loop, each settlement's debit and usage record together.
 * The pipeline waits for that commit before a paid answer's final byte (docs/decisions.md, "Money
 * across kill -9"); in WAL mode with synchronous=NORMAL a commit is in the OS's hands once it
 * returns, so it survives the process.
 *
 * The connection never waits for a lock (busy_timeout = 0): a held write lock leaves the queue
 * to a retry timer instead of freezing the event loop. Idempotent by request id: a usage record
 * that already exists charges nothing again.
 */
export function createSqliteLedger(db: Database, o: SqliteLedgerOptions): Ledger & RejectionLog {
  // Never backwards (spend-period.ts): what it stamps and the windows it picks move forward only.
  const now = monotonicClock(o.now);
  const log = o.log ?? (() => {});
  const changes = o.changes ?? createChangeWatch(db);
  const maxQueued = o.maxQueued ?? 50_000;
  const busyLimitMs = o.busyLimitMs ?? 1_000;
  const retryMaxMs = o.retryMaxMs ?? 1_000;
  const probeIntervalMs = o.probeIntervalMs ?? 2_000;
  const spillPath = o.spillPath ?? (db.filename && db.filename !== ":memory:" ? `${db.filename}.spill` : undefined);
  /** Disk held for the spill file (at start, and again after a spill while running gave it up). */
  function holdSpillRoom(atStart: boolean): void {
    if (!spillPath || (o.spillReserveBytes ?? 0) <= 0) return;
    // Less when the disk has not that much (a 2 MiB volume held none at all, and a disk that
    // filled then kept no spill): halves down to 64 KiB (~150 settlements).
    let firstError: unknown;
    for (let bytes = o.spillReserveBytes!; bytes >= Math.min(64 * 1024, o.spillReserveBytes!); bytes = Math.floor(bytes / 2)) {
      try {
        reserveSpillRoom(spillPath, bytes);
        if (atStart && firstError !== undefined) log("warn", "less room held for the spill file than asked: the disk has little", { path: spillPath, heldBytes: bytes, askedBytes: o.spillReserveBytes });
        return;
      } catch (err) {
        firstError ??= err;
      }
    }
    if (atStart) log("warn", "no room held for the spill file: on a full disk, settlements that cannot be written go to the log only", { path: spillPath, error: String(firstError) });
  }

  type BudgetRow = { spend_limit_micro: number | null; spend_limit_period: string | null; period_spent_micro: number; period_start: number };
  const accountOf = db.query<{ balance_micro: number } & BudgetRow, [string]>(
    "SELECT balance_micro, spend_limit_micro, spend_limit_period, period_spent_micro, period_start FROM accounts WHERE id = ?",
  );
  const keyBudget = db.query<BudgetRow, [string]>(
    "SELECT spend_limit_micro, spend_limit_period, period_spent_micro, period_start FROM api_keys WHERE id = ?",
  );
  // A charge counts in the window of the row's own period at the batch's time (?2 day, ?3 week,
  // ?4 month; lifetime 0): added to the window's count, or starting it when the period rolled over.
  const WINDOW = windowSql("", "?2", "?3", "?4");
  // As chargeBudget (billing/spend-period.ts): never backwards.
  const STALE = staleWindowSql("", WINDOW);
  const PERIOD_CHARGE = `period_spent_micro = CASE WHEN period_start = ${WINDOW} THEN period_spent_micro + ?1 WHEN ${STALE} THEN ?1 ELSE period_spent_micro END, period_start = CASE WHEN ${STALE} THEN ${WINDOW} ELSE period_start END`;
  const debitAccount = db.query(`UPDATE accounts SET balance_micro = balance_micro - ?1, ${PERIOD_CHARGE} WHERE id = ?5`);
  const debitKey = db.query(`UPDATE api_keys SET spent_micro = spent_micro + ?1, ${PERIOD_CHARGE} WHERE id = ?5`);
  const insertUsage = db.query(`${insertSql(true)} VALUES ${rowSql(true)}`);
  const countRejections = db.query(
    `INSERT INTO rejection_counts (key_id, minute, status, count) VALUES (?, ?, ?, ?)
     ON CONFLICT (key_id, minute, status) DO UPDATE SET count = count + excluded.count`,
  );
  const probe = db.query("INSERT OR REPLACE INTO ledger_probe (id, at) VALUES (1, ?)");
  const insertPrices = db.query("INSERT OR IGNORE INTO price_lists (id, prices, created_at) VALUES (?, ?, ?)");
  /** Price lists known to be in the file: each is written once, with the first record charged at it. */
  const pricesWritten = new Set<number>();
  const credit = creditWriter(db, now);
  // Holds live here, in memory: only this process can tell what a debit may take.
  const debitEntry = debitWriter(db, now, (accountId) => heldByAccount.get(accountId) ?? 0);
  // The usage rollups catch up with the records every so often, inside a batch's transaction.
  const rollups = createRollupFolder(db);

  // ── Cached balances and spend limits: what SQLite has, as of our last read plus our own commits since. ──
  const books = new Map<string, AccountBooks>();
  const budgets = new Map<string, SpendBudget>();
  changes.onChange(() => {
    books.clear();
    budgets.clear();
  });
  const budgetOf = (row: BudgetRow): SpendBudget => ({
    limitMicro: row.spend_limit_micro, period: storedPeriod(row.spend_limit_period), periodSpentMicro: row.period_spent_micro, periodStart: row.period_start,
  });
  const account = (accountId: string): AccountBooks | undefined => {
    let value = books.get(accountId);
    if (value === undefined) {
      const row = accountOf.get(accountId);
      if (!row) return undefined;
      books.set(accountId, (value = { balance: row.balance_micro, ...budgetOf(row) }));
    }
    return value;
  };
  const budget = (keyId: string) => {
    let value = budgets.get(keyId);
    if (value === undefined) {
      const row = keyBudget.get(keyId);
      if (!row) return undefined;
      budgets.set(keyId, (value = budgetOf(row)));
    }
    return value;
  };

  // ── Holds ──
  const holds = new Map<string, HeldAmount>();
  const heldByAccount = new Map<string, number>();
  const heldByKey = new Map<string, number>();
  const add = (map: Map<string, number>, id: string, delta: number) => {
    const value = (map.get(id) ?? 0) + delta;
    if (value === 0) map.delete(id);
    else map.set(id, value);
  };
  const lift = (requestId: string) => {
    const held = holds.get(requestId);
    if (!held) return;
    holds.delete(requestId);
    add(heldByAccount, held.accountId, -held.amount);
    add(heldByKey, held.keyId, -held.amount);
  };

  /**
   * Usage records go in as multi-row INSERTs of up to ROWS_PER_INSERT rows: one statement call
   * per chunk instead of one per settlement (measured: ~0.5 µs less per settlement, the binding
   * and call overhead of bun:sqlite). OR IGNORE keeps the request id's record idempotent; when a
   * chunk inserted fewer rows than it had, some were already recorded, and which ones decides
   * what is charged: the transaction is rolled back and the batch written row by row instead.
   */
  const insertMany = new Map<number, ReturnType<typeof db.query>>();
  const insertRows = (rows: number, full: boolean) => {
    const id = full ? -rows : rows;
    let statement = insertMany.get(id);
    if (!statement) {
      statement = db.query(`${insertSql(full)} VALUES ${Array.from({ length: rows }, () => rowSql(full)).join(", ")}`);
      insertMany.set(id, statement);
    }
    return statement;
  };
  /** Whether a record's class columns and hold keep their defaults (its savings are then 0 too). */
  const plainRecord = (s: Settlement, charge: number): boolean => {
    const c = s.classes;
    return (!c || (c.cacheRead === 0 && c.cacheWrite5m === 0 && c.cacheWrite1h === 0 && c.reasoning === 0 && c.images === 0)) && charge >= s.costMicro;
  };
  /**
   * Appends a settlement's usage record to `out` in insertSql(full)'s column order, and tells the
   * rollups of it (a caller whose insert turns out not to happen rolls the rollups back).
   */
  const pushRecord = (out: (string | number | null)[], s: Settlement, charge: number, held: number, at: number, full: boolean): void => {
    const c = s.classes;
    let priceId: number | null = null;
    if (s.prices) {
      priceId = priceListId(s.prices);
      if (!pricesWritten.has(priceId)) {
        insertPrices.run(priceId, priceListJson(s.prices), at);
        pricesWritten.add(priceId);
      }
    }
    const fresh = c ? c.freshInput : s.promptTokens;
    out.push(
      s.requestId, s.accountId, s.keyId, s.model, s.provider, s.promptTokens, s.completionTokens,
      s.estimated ? 1 : 0, charge, s.status, Math.round(s.latencyMs), at, s.clientRequestId ?? null, fresh, priceId,
    );
    let savings = 0;
    if (full) {
      savings = c && s.prices ? cacheSavingsMicro(c, s.prices) : 0;
      // The hold only where it capped the charge (audit: charge = min(price book's sum, hold)).
      out.push(c?.cacheRead ?? 0, c?.cacheWrite5m ?? 0, c?.cacheWrite1h ?? 0, c?.reasoning ?? 0, c?.images ?? 0, charge < s.costMicro ? held : null, savings);
    }
    rollups.added(at, s.accountId, s.keyId, s.model, s.promptTokens, s.completionTokens, fresh, c?.cacheRead ?? 0, c?.cacheWrite5m ?? 0, c?.cacheWrite1h ?? 0,
      c?.reasoning ?? 0, c?.images ?? 0, charge, savings, s.estimated === true);
  };
  /** A settlement posts at most its hold; without one (free models, a refused charge) it charges nothing. */
  const chargeOf = (q: Queued): { held: HeldAmount | undefined; charge: number } => {
    const held = q.charge === false ? undefined : holds.get(q.settlement.requestId);
    return { held, charge: held ? Math.min(q.settlement.costMicro, held.amount) : 0 };
  };

  /** Debits are summed per account and per key: one UPDATE each per batch, not per request. */
  const newDebits = () => ({ byAccount: new Map<string, number>(), byKey: new Map<string, number>() });
  type Debits = ReturnType<typeof newDebits>;
  const post = (debits: Debits, held: HeldAmount | undefined, charge: number) => {
    if (!held || charge <= 0) return;
    add(debits.byAccount, held.accountId, charge);
    add(debits.byKey, held.keyId, charge);
  };
  const debit = (debits: Debits, counters: RejectionCounter[], at: number): Debits => {
    const { day, week, month } = windowStarts(at);
    for (const [accountId, amount] of debits.byAccount) debitAccount.run(amount, day, week, month, accountId);
    for (const [keyId, amount] of debits.byKey) debitKey.run(amount, day, week, month, keyId);
    for (const c of counters) countRejections.run(c.keyId, c.minute, c.status, c.count);
    return debits;
  };

  /** The usual batch: every record is new, so every charge is posted. Throws ALREADY_RECORDED otherwise. */
  const writeChunked = db.transaction((batch: Queued[], counters: RejectionCounter[], at: number) => {
    const debits = newDebits();
    for (let from = 0; from < batch.length; from += ROWS_PER_INSERT) {
      const chunk = batch.slice(from, from + ROWS_PER_INSERT);
      const charges = chunk.map(chargeOf);
      let full = false;
      for (let i = 0; i < chunk.length && !full; i++) full = !plainRecord(chunk[i]!.settlement, charges[i]!.charge);
      const values: (string | number | null)[] = [];
      for (let i = 0; i < chunk.length; i++) {
        const { held, charge } = charges[i]!;
        pushRecord(values, chunk[i]!.settlement, charge, held?.amount ?? 0, at, full);
        post(debits, held, charge);
      }
      const result = insertRows(chunk.length, full).run(...values);
      if (result.changes !== chunk.length) throw ALREADY_RECORDED;
      // One statement's rows take consecutive ids (the largest plus one, one writer), its last one last.
      const lastId = Number(result.lastInsertRowid);
      rollups.inserted(lastId - chunk.length + 1, lastId);
    }
    rollups.foldIfDue(at);
    return debit(debits, counters, at);
  });

  /** Row by row: a record that already exists (a retry, a replay) was charged then, not again. */
  const writeOneByOne = db.transaction((batch: Queued[], counters: RejectionCounter[], at: number) => {
    const debits = newDebits();
    for (const q of batch) {
      const { held, charge } = chargeOf(q);
      const values: (string | number | null)[] = [];
      pushRecord(values, q.settlement, charge, held?.amount ?? 0, at, true);
      const result = insertUsage.run(...values);
      if (result.changes !== 1) {
        // Told the rollups of a record that was not written: they fold from the records next time.
        rollups.rolledBack();
        continue;
      }
      post(debits, held, charge);
      rollups.inserted(Number(result.lastInsertRowid), Number(result.lastInsertRowid));
    }
    rollups.foldIfDue(at);
    return debit(debits, counters, at);
  });

  /** An idle gateway's probe write; the rollups catch up with it, so an idle gateway's tail is short too. */
  const probeAndFold = db.transaction((at: number) => {
    probe.run(at);
    rollups.foldIfDue(at);
  });

  const writeBatch = (batch: Queued[], counters: RejectionCounter[], at: number): Debits => {
    try {
      return writeChunked.immediate(batch, counters, at);
    } catch (err) {
      if (err !== ALREADY_RECORDED) throw err;
      // Rolled back with the chunk: the price lists it wrote and the records it told the rollups.
      pricesWritten.clear();
      rollups.rolledBack();
      return writeOneByOne.immediate(batch, counters, at);
    }
  };

  // Group commit and everything that can go wrong with it: billing/settlement-queue.ts.
  const sameFiles = ledgerFiles(db, now);
  /**
   * Why the disk is not trusted to keep commits (storageFailed): a checkpoint, the only fsync in
   * `synchronous = NORMAL`, failed. A commit then still "succeeds" into the page cache whose
   * writeback fails, so a write is no proof the store works again: a checkpoint through this
   * connection that copies the log and syncs is. Until one has, every write and probe is refused.
   */
  let unsynced: string | undefined;
  const provenSynced = (): void => {
    if (unsynced === undefined) return;
    const pass = db.query<{ busy: number }, []>("PRAGMA wal_checkpoint(PASSIVE)").get();
    // Another checkpointer holds it (the thread, started again): try again on the next retry.
    if (pass && pass.busy !== 0) throw Object.assign(new Error(`the ledger's disk has not synced since: ${unsynced}`), { code: "SQLITE_BUSY" });
    log("debug", "a checkpoint synced the ledger again", { failure: unsynced });
    unsynced = undefined;
  };
  const settlements = createSettlementQueue<Queued>({
    write(batch, counters, at) {
      sameFiles();
      provenSynced();
      try {
        const { byAccount, byKey } = writeBatch(batch, counters, at);
        // Only now is the debit on disk: cached balances and period counts move with it.
        for (const [accountId, amount] of byAccount) {
          const cached = books.get(accountId);
          if (cached === undefined) continue;
          cached.balance -= amount;
          chargeBudget(cached, amount, at);
        }
        for (const [keyId, amount] of byKey) {
          const cached = budgets.get(keyId);
          if (cached) chargeBudget(cached, amount, at);
        }
      } catch (err) {
        rollbackQuietly(db);
        // An I/O error of our own commit: what the disk took before may not be on it either, so the
        // store comes back only with a checkpoint that syncs (provenSynced), not with a commit.
        if (/^SQLITE_IOERR/.test(String((err as { code?: unknown } | null)?.code ?? ""))) unsynced ??= describeWriteFailure(err);
        // A price list written in the rolled-back transaction is not in the file after all.
        pricesWritten.clear();
        rollups.rolledBack();
        throw err;
      }
    },
    probe(at) {
      sameFiles();
      provenSynced();
      try {
        probeAndFold.immediate(at);
      } catch (err) {
        rollbackQuietly(db);
        rollups.rolledBack();
        throw err;
      }
    },
    classify: classifyWriteFailure,
    // Replaced, removed, or not a database any more: no retry within this process can write it.
    hopeless: (err) => err instanceof LedgerFileGoneError || /^SQLITE_(CORRUPT|NOTADB)/.test(String((err as { code?: unknown })?.code ?? "")),
    describe: describeWriteFailure,
    committed(batch) {
      for (const q of batch) lift(q.settlement.requestId);
      o.onCommitted?.(batch.map((q) => q.settlement));
    },
    dropped(q) {
      lift(q.settlement.requestId);
    },
    spill: spillPath ? (queued) => keepInSpill(spillPath, queued.map((q) => ({ settlement: q.settlement, held: holds.get(q.settlement.requestId)?.amount ?? 0, ...(q.charge === false ? { charge: false as const } : {}) }))) : undefined,
    unspill: spillPath
      ? () => {
          removeSpill(spillPath);
          // The room a spill on a full disk gave up is held again once the disk takes writes.
          holdSpillRoom(false);
        }
      : undefined,
  }, { now, log, maxQueued, maxBatch: MAX_BATCH, busyLimitMs, retryMaxMs, probeIntervalMs, commitDelay: o.commitDelay });

  // Settlements a previous process could not write before it stopped: their holds are taken again
  // (so each charges what it would have, capped by what it held) and they are queued like new
  // ones. A usage record that already exists charges nothing, so a replay interrupted and run
  // again charges once. The file goes once the queue has written them all.
  const spilled = spillPath ? readSpill(spillPath, log) : [];
  if (spilled.length > 0) {
    const accountExists = db.query<{ one: number }, [string]>("SELECT 1 AS one FROM accounts WHERE id = ?");
    const unknown = unknownAccounts(spilled, (id) => accountExists.get(id) !== null);
    if (unknown.length > 0) throw new SpillMismatchError(spillPath!, spilled.length, unknown);
    log("warn", "writing settlements a previous process kept in its spill file", { settlements: spilled.length, path: spillPath });
    const written = spilled.map((s) => {
      const { requestId, accountId, keyId } = s.settlement;
      if (s.held > 0 && !holds.has(requestId)) {
        holds.set(requestId, { accountId, keyId, amount: s.held });
        add(heldByAccount, accountId, s.held);
        add(heldByKey, keyId, s.held);
      }
      return settlements.enqueue({ settlement: s.settlement, ...(s.charge === false ? { charge: false as const } : {}) });
    });
    void Promise.all(written).then(() => {
      if (settlements.health().queued > 0) return; // still failing: the next close keeps them again
      removeSpill(spillPath!);
      log("info", "settlements from the spill file are written", { settlements: spilled.length });
    });
  }

  // A process killed while writing its spill left its temporary file: gone before room is held.
  if (spillPath && removeSpillTemporaries(spillPath) > 0) log("warn", "removed the temporary spill file of a process killed while writing it (the spill file it was to replace is replayed as it is)", { path: spillPath });
  holdSpillRoom(true);

  return {
    async reserve(hold: Hold): Promise<ReserveResult> {
      if (!settlements.admits(true)) return { ok: false, reason: "unavailable", message: settlements.lastError ?? "the ledger's queue is full" };
      try {
        changes.sync();
        const books = account(hold.accountId);
        const heldOnAccount = heldByAccount.get(hold.accountId) ?? 0;
        const free = (books?.balance ?? 0) - heldOnAccount;
        if (free < hold.amountMicro) return { ok: false, reason: "balance", availableMicro: Math.max(0, free) };
        const at = now();
        const refused = budgetRefusal("account_spend_limit", books, heldOnAccount, hold.amountMicro, at)
          ?? budgetRefusal("key_spend_limit", budget(hold.keyId), heldByKey.get(hold.keyId) ?? 0, hold.amountMicro, at);
        if (refused) return refused;
      } catch (err) {
        // A store that cannot even be read: refuse rather than admit unmetered.
        log("error", "ledger cannot read balances", { error: describeWriteFailure(err) });
        return { ok: false, reason: "unavailable", message: describeWriteFailure(err) };
      }
      if (holds.has(hold.requestId)) return { ok: true };
      holds.set(hold.requestId, { accountId: hold.accountId, keyId: hold.keyId, amount: hold.amountMicro });
      add(heldByAccount, hold.accountId, hold.amountMicro);
      add(heldByKey, hold.keyId, hold.amountMicro);
      return { ok: true };
    },

    settle(settlement: Settlement): Promise<void> {
      return settlements.enqueue({ settlement: acceptableSettlement(settlement, log) });
    },

    async release(requestId: string): Promise<void> {
      lift(requestId);
    },

    async topUp(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean> {
      // Not into a file that is gone: a credit written there would be lost at the next start.
      sameFiles(true);
      const done = await retryWhileBusy(() => credit(accountId, amountMicro, idempotencyKey));
      books.delete(accountId);
      return done;
    },

    async debit(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean> {
      sameFiles(true);
      // The check (balance on disk less the holds) and the write are one synchronous step, so no
      // reservation can slip between them.
      const done = await retryWhileBusy(() => debitEntry(accountId, amountMicro, idempotencyKey));
      books.delete(accountId);
      return done;
    },

    async balance(accountId: string) {
      const value = account(accountId);
      return value === undefined ? null : { balanceMicro: value.balance, heldMicro: heldByAccount.get(accountId) ?? 0 };
    },

    flush: () => settlements.flush(),
    admits: (paid) => settlements.admits(paid),
    health: () => settlements.health(),
    openHolds: () => holds.size,
    close: (graceMs = 5_000) => settlements.close(graceMs),
    abandon: () => settlements.abandon(),
    countRejection: (keyId, status, at) => settlements.countRejection(keyId, status, at),

    storageFailed(err: unknown): void {
      unsynced = describeWriteFailure(err);
      settlements.failed("storage", err);
    },
  };
}

/** A failed COMMIT can leave the transaction open; a closed database throws on any call. */
function rollbackQuietly(db: Database): void {
  try {
    if (db.inTransaction) db.exec("ROLLBACK");
  } catch {}
}

