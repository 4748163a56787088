/**
 * The Ledger port: the only way money moves. The pipeline (the billing session in forward.ts)
 * and the admin surfaces call it; implementations live in src/store/ (SQLite now, PostgreSQL
 * next) and all pass one contract suite (test/helpers/ledger-contract.ts, run by
 * test/contract/ledger.test.ts and test/contract/pg-ledger.test.ts).
 *
 * Two-phase, as TigerBeetle's pending/post/void transfers: `reserve` holds the worst case of a
 * request under its id, `settle` posts at most what was held and writes the usage record in the
 * same transaction, `release` voids a hold that nothing will settle. Every call is keyed by the
 * request's id, so a settlement written twice (a retry after an ambiguous failure, a replay)
 * charges once.
 */

/** What one request may cost at most, held until it is settled or released. */
export interface Hold {
  requestId: string;
  accountId: string;
  keyId: string;
  amountMicro: number;
}

export type ReserveResult =
  | { ok: true }
  | { ok: false; reason: "balance"; availableMicro: number }
  /** A key's or an account's spend limit: what it is, its period, and when it resets (null: a lifetime limit). */
  | { ok: false; reason: "key_spend_limit" | "account_spend_limit"; availableMicro: number; limitMicro: number; period: SpendPeriod | null; resetsAt: number | null }
  /** The store cannot record charges right now: the request must not run (503). */
  | { ok: false; reason: "unavailable"; message: string };

import type { PriceList, TokenClasses } from "./pricing.ts";
import { MAX_BALANCE_MICRO, microToCredits } from "./money.ts";
import { periodWindow, spentInPeriod, type SpendBudget, type SpendPeriod } from "./spend-period.ts";

/** A finished request: what it cost and its usage record. */
export interface Settlement {
  requestId: string;
  accountId: string;
  keyId: string;
  model: string;
  provider: string;
  promptTokens: number;
  completionTokens: number;
  /** True when any count came from our tokenizer rather than the upstream. */
  estimated: boolean;
  /** What the answer cost; the ledger charges at most what the request's hold covers. */
  costMicro: number;
  /**
   * The tokens by price class and the prices charged, kept with the record so that its cost can
   * be recomputed (`admin audit`) and a later price change rewrites nothing. Without them (a
   * release, a caller that knows only totals) the record reads as fresh input at unknown prices.
   */
  classes?: TokenClasses;
  prices?: PriceList;
  status: string;
  latencyMs: number;
  /** The request's x-request-id (the client's, or the one the gateway made), kept with the record. */
  clientRequestId?: string;
}

/** Whether the store writes, and what waits for it. `/ready` reports this. */
export interface LedgerHealth {
  /** False while writes fail (disk full, read-only, a lock held too long). */
  writable: boolean;
  /** Settlements accepted but not yet written. */
  queued: number;
  /** The most queued before free requests are refused too. */
  maxQueued: number;
  /** Epoch ms of the first failed write of the current outage. */
  failingSince?: number;
  /** Epoch ms at which the oldest settlement still queued was accepted (the settlement lag's start). */
  oldestQueuedAt?: number;
  lastError?: string;
}

export interface Ledger {
  reserve(hold: Hold): Promise<ReserveResult>;
  /**
   * Resolves once the settlement is durable (committed), or once the store is known to be
   * failing and the settlement waits in the queue; never rejects. The pipeline awaits it
   * before a paid answer's final byte, so a client that got a whole answer was billed.
   */
  settle(settlement: Settlement): Promise<void>;
  /** Voids a hold that will not be settled (nothing charged, no usage record). */
  release(requestId: string): Promise<void>;
  /**
   * Adds credits; false when the account does not exist. With an idempotency key, a repeat (same
   * key, account and amount) credits nothing more and returns true; the same key for another
   * account or amount throws IdempotencyConflictError. Keys are kept with their credit entries.
   */
  topUp(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean>;
  /**
   * Takes credits back (an operator's correction: a top-up made by mistake, a refund paid out
   * elsewhere); false when the account does not exist. Never past what is available: the balance
   * less what requests in flight hold, so no hold is left uncovered and no balance goes below
   * zero (throws DebitRefusedError, nothing taken). Idempotency keys as topUp's, from the same
   * set: a key used for a top-up is a conflict for a debit, and the reverse.
   */
  debit(accountId: string, amountMicro: number, idempotencyKey?: string): Promise<boolean>;
  /** Balance as written, and what open requests hold; null for an unknown account. */
  balance(accountId: string): Promise<{ balanceMicro: number; heldMicro: number } | null>;
  /** Writes everything queued; resolves when written or when the store refuses. */
  flush(): Promise<void>;
  /**
   * Whether a request may start: paid ones need a writable store, free ones only room in the
   * queue. Cheap and synchronous, asked before any upstream call.
   */
  admits(paid: boolean): boolean;
  health(): LedgerHealth;
  openHolds(): number;
  /** Writes what is queued (within `graceMs`) and stops; later calls are refused. */
  close(graceMs?: number): Promise<void>;
  /** Stops at once (the process is about to exit): what is queued is kept in the spill file, or logged; nothing more is written. */
  abandon?(): void;
  /**
   * Told `true` when other processes may soon take this one for dead and release its holds (a
   * shared database it has not reached for nearly their staleness limit), `false` once it reaches
   * it again. The app cuts the answers under way at `true` (gateway/inflight.ts, `fence`): an
   * answer delivered against a hold released behind its back, its credit spent meanwhile on
   * another process, could no longer be charged. Absent where no other process releases holds.
   */
  onHoldsAtRisk?(listener: (atRisk: boolean) => void): void;
  /**
   * A failure of the store seen outside the ledger's own writes (SQLite: the checkpoint thread's
   * sync failed): the ledger counts as failing (paid requests refused) until its store shows it
   * writes durably again.
   */
  storageFailed?(err: unknown): void;
}

/** A top-up that would take a balance past MAX_BALANCE_MICRO; nothing was credited. */
export class BalanceCapError extends Error {
  /** `balanceMicro`: the account's balance, when known, so the message says how much it can still take. */
  constructor(readonly accountId: string, balanceMicro?: number) {
    const room = balanceMicro === undefined ? "" : ` This account can take at most ${creditsSaid(Math.max(0, MAX_BALANCE_MICRO - balanceMicro))} more.`;
    super(`A top-up may not bring a balance above ${creditsSaid(MAX_BALANCE_MICRO)} credits (the most a balance holds exactly); nothing was credited.${room}`);
  }
}

/**
 * Credits as a refusal states them, grouped (`8,000,000,000`, `24.396`): the console shows these
 * messages as they are, and an account's id and 10-digit figures in them were hard to read (a
 * console probe).
 */
function creditsSaid(micro: number): string {
  return microToCredits(micro).toLocaleString("en-US", { maximumFractionDigits: 6 });
}

/**
 * An idempotency key already used for another top-up or debit: says which, so the client can
 * tell. `amountMicro` is the entry's signed amount (a debit's is below zero).
 */
export class IdempotencyConflictError extends Error {
  constructor(readonly idempotencyKey: string, readonly accountId: string, readonly amountMicro: number) {
    const what = amountMicro < 0 ? `a debit of ${microToCredits(-amountMicro)}` : `a top-up of ${microToCredits(amountMicro)}`;
    super(`This Idempotency-Key was already used for ${what} credits to account ${accountId}; a different top-up or debit needs a new key.`);
  }
}

/** A debit larger than what the account has available (its balance less its holds); nothing was taken. */
export class DebitRefusedError extends Error {
  constructor(readonly accountId: string, readonly availableMicro: number, readonly amountMicro: number) {
    super(
      `The account has ${creditsSaid(Math.max(0, availableMicro))} credits available (its balance less what its requests in flight hold); ` +
        `a debit of ${creditsSaid(amountMicro)} would take it below that. Nothing was debited.`,
    );
  }
}

/**
 * The usage log's other half: requests refused before they reached an upstream (401, 402, 429,
 * 4xx) are counted per key, minute and status, never written one row each, so a flood of
 * refusals costs O(keys × minutes) rows.
 */
export interface RejectionLog {
  countRejection(keyId: string, status: number, at: number): void;
}

/**
 * A settlement as a store writes it: one with impossible numbers (the pipeline validates upstream
 * counts first; this is the last line) is logged and written as zeros, never a crash, never a
 * negative or fractional charge. Shared by every Ledger implementation.
 */
export function acceptableSettlement(s: Settlement, log: (level: "error", message: string, fields: Record<string, unknown>) => void): Settlement {
  const problem = checkSettlement(s);
  if (!problem) return s;
  log("error", "settlement with impossible numbers: charged nothing, recorded as zero", { requestId: s.requestId, problem });
  return { ...s, costMicro: 0, classes: undefined, promptTokens: Math.max(0, Math.trunc(s.promptTokens) || 0), completionTokens: Math.max(0, Math.trunc(s.completionTokens) || 0), latencyMs: 0 };
}

const count = (n: number) => Number.isSafeInteger(n) && n >= 0;

/** A settlement's numbers as the store will accept them, whatever produced them. */
export function checkSettlement(s: Settlement): string | undefined {
  if (!Number.isSafeInteger(s.costMicro) || s.costMicro < 0) return `costMicro ${s.costMicro}`;
  if (!Number.isSafeInteger(s.promptTokens) || s.promptTokens < 0) return `promptTokens ${s.promptTokens}`;
  if (!Number.isSafeInteger(s.completionTokens) || s.completionTokens < 0) return `completionTokens ${s.completionTokens}`;
  if (!Number.isFinite(s.latencyMs)) return `latencyMs ${s.latencyMs}`;
  const c = s.classes;
  // Field by field, not Object.entries: this runs for every settlement.
  if (c && !(count(c.freshInput) && count(c.cacheRead) && count(c.cacheWrite5m) && count(c.cacheWrite1h) && count(c.output) && count(c.reasoning) && count(c.images))) {
    return `classes ${JSON.stringify(c)}`;
  }
  return undefined;
}

/**
 * Whether a hold of `amount` fits a spend limit at `now`, counting what was spent in the period
 * and what is held; the refusal names the limit, its period and when it resets. Shared by the
 * stores that check in memory (SQLite); PostgreSQL does the same arithmetic in SQL.
 */
export function budgetRefusal(
  reason: "key_spend_limit" | "account_spend_limit", b: SpendBudget | undefined, heldMicro: number, amount: number, now: number,
): ReserveResult | undefined {
  if (!b || b.limitMicro === null) return undefined;
  const room = b.limitMicro - spentInPeriod(b, now) - heldMicro;
  if (room >= amount) return undefined;
  return { ok: false, reason, availableMicro: Math.max(0, room), limitMicro: b.limitMicro, period: b.period, resetsAt: b.period === null ? null : periodWindow(b.period, now).resetsAt };
}
