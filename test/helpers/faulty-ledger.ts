import type { Ledger, RejectionLog } from "../../src/billing/ledger.ts";

/** Faults a test can arm; each applies to every call until disarmed. */
export interface LedgerFaults {
  /** reserve() rejects with this error. */
  reserveThrows?: Error;
  /** settle() rejects with this error (a broken implementation: the real ones never reject). */
  settleThrows?: Error;
  /** settle() resolves only when this promise does (a store that is slow to commit). */
  settleWaits?: Promise<void>;
  /** admits() says no, as a failing store does. */
  refuse?: boolean;
}

/**
 * Wraps a Ledger and injects faults on demand, so the pipeline's handling of a broken ledger
 * can be tested without breaking a real store. With nothing armed it is the ledger it wraps
 * (the contract suite runs on it too).
 */
export function faultyLedger(inner: Ledger & RejectionLog): { ledger: Ledger & RejectionLog; faults: LedgerFaults } {
  const faults: LedgerFaults = {};
  const ledger: Ledger & RejectionLog = {
    ...inner,
    async reserve(hold) {
      if (faults.reserveThrows) throw faults.reserveThrows;
      return inner.reserve(hold);
    },
    async settle(s) {
      if (faults.settleThrows) throw faults.settleThrows;
      const done = inner.settle(s);
      if (faults.settleWaits) await faults.settleWaits;
      return done;
    },
    admits: (paid) => !faults.refuse && inner.admits(paid),
    health: () => (faults.refuse ? { ...inner.health(), writable: false } : inner.health()),
  };
  return { ledger, faults };
}
