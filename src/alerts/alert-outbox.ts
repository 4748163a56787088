/**
 * The AlertOutbox port: spend alerts waiting to be delivered, in the ledger's own database
 * (store/sqlite/sqlite-alert-outbox.ts, store/postgres/pg-alert-outbox.ts), so they survive a
 * restart. An event is inserted once per crossing: its dedupe key is UNIQUE and a second insert
 * is ignored. Rows are leased while a process sends them (`claim`), so two processes never send
 * the same row at once; a process that dies mid-send leaves its lease to expire (at least once).
 */

export interface OutboxEvent {
  eventId: string;
  /** One crossing: `key:<id>:<window start>:<threshold>`, `balance:<account>:…` (alert-events.ts). */
  dedupeKey: string;
  type: string;
  /** The exact JSON sent, and signed, at every attempt. */
  body: string;
  createdAt: number;
}

export interface OutboxRow {
  id: number;
  eventId: string;
  type: string;
  body: string;
  /** Attempts so far, this one included. */
  attempts: number;
}

export interface AlertOutbox {
  /** Inserts the events whose dedupe key is new; resolves with how many were. */
  add(events: OutboxEvent[]): Promise<number>;
  /** Up to `limit` undelivered events that are due, oldest first, leased for `leaseMs`. */
  claim(limit: number, leaseMs: number): Promise<OutboxRow[]>;
  delivered(id: number): Promise<void>;
  /** Due again in `delayMs`; `error` is kept for an operator (never the body or a secret). */
  retryLater(id: number, delayMs: number, error: string): Promise<void>;
  /** Milliseconds until the next undelivered event is due (0: now), null when none waits. */
  nextDueInMs(): Promise<number | null>;
  /** The account's latest credit entry (a top-up re-arms `balance.low`); 0 without one. */
  creditMark(accountId: string): Promise<number>;
  /** What the start-up check reads: keys and accounts with a spend limit, accounts below `lowBalanceMicro`. */
  candidates(lowBalanceMicro: number | null): Promise<{ keys: string[]; accounts: string[] }>;
}
