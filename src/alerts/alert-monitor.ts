import type { AccountStore } from "../accounts/account-store.ts";
import type { Settlement } from "../billing/ledger.ts";
import { creditsToMicro } from "../billing/money.ts";
import type { Logger } from "../log/log.ts";
import { lowBalanceEvent, thresholdEvents } from "./alert-events.ts";
import type { AlertOutbox, OutboxEvent } from "./alert-outbox.ts";

export interface AlertMonitorDeps {
  accounts: Pick<AccountStore, "spendStatus">;
  outbox: AlertOutbox;
  /** Credits; null: no `balance.low`. */
  lowBalance: number | null;
  now: () => number;
  log: Logger;
  /** New events are in the outbox (the dispatcher sends them now rather than at its next poll). */
  onQueued?: (count: number) => void;
}

export type AlertMonitor = ReturnType<typeof createAlertMonitor>;

/**
 * Detects spend alerts after settlements commit, never on a request's path: `committed` (the
 * ledger's hook, called right after its commit) only notes which keys and accounts were charged;
 * they are read and the events due inserted into the outbox on a later turn, one check at a time.
 * A crash between a commit and that insert loses nothing: `checkAll` at start reads every row
 * that could be due, and the outbox's dedupe keys drop what was already queued.
 */
export function createAlertMonitor(d: AlertMonitorDeps) {
  const lowBalanceMicro = d.lowBalance === null ? null : creditsToMicro(d.lowBalance);
  let keys = new Set<string>();
  let accounts = new Set<string>();
  let scheduled = false;
  let running: Promise<void> = Promise.resolve();
  /**
   * Dedupe keys this process knows are in the outbox: a key past 80 % of its limit would otherwise
   * re-insert (and have ignored) its 50 and 80 % events after every charge, a write each on SQLite.
   */
  let known = new Set<string>();

  async function check(keyIds: Iterable<string>, accountIds: Iterable<string>): Promise<void> {
    const now = d.now();
    const events: OutboxEvent[] = [];
    for (const id of keyIds) {
      const status = await d.accounts.spendStatus("key", id);
      if (status) events.push(...thresholdEvents("key", status, now));
    }
    for (const id of accountIds) {
      const status = await d.accounts.spendStatus("account", id);
      if (!status) continue;
      events.push(...thresholdEvents("account", status, now));
      if (lowBalanceMicro !== null && status.balanceMicro !== null && status.balanceMicro < lowBalanceMicro) {
        const event = lowBalanceEvent(status, lowBalanceMicro, await d.outbox.creditMark(id), now);
        if (event) events.push(event);
      }
    }
    const fresh = events.filter((e) => !known.has(e.dedupeKey));
    if (fresh.length === 0) return;
    const added = await d.outbox.add(fresh);
    // Bounded: forgetting costs one ignored insert, never a second event.
    if (known.size > 50_000) known = new Set();
    for (const e of fresh) known.add(e.dedupeKey);
    if (added > 0) d.onQueued?.(added);
  }

  /** One check at a time; a failed one is logged (the next start's check catches up). */
  const enqueueCheck = (work: () => Promise<void>): Promise<void> => {
    running = running.then(work).catch((err) => d.log("warn", "spend alert check failed; the next check (or start) catches up", { error: err instanceof Error ? err.message : String(err) }));
    return running;
  };

  const flushTouched = () => {
    scheduled = false;
    const k = keys;
    const a = accounts;
    keys = new Set();
    accounts = new Set();
    return enqueueCheck(() => check(k, a));
  };

  return {
    /** The ledger's hook: cheap and synchronous, never throws. */
    committed(settlements: Settlement[]): void {
      let touched = false;
      for (const s of settlements) {
        if (!(s.costMicro > 0)) continue;
        keys.add(s.keyId);
        accounts.add(s.accountId);
        touched = true;
      }
      if (touched && !scheduled) {
        scheduled = true;
        setTimeout(flushTouched, 0).unref?.();
      }
    },
    /** Every key and account that could have an alert due (at start). */
    checkAll(): Promise<void> {
      return enqueueCheck(async () => {
        const c = await d.outbox.candidates(lowBalanceMicro);
        await check(c.keys, c.accounts);
      });
    },
    /** Resolves once every check noted so far has run (tests). */
    async idle(): Promise<void> {
      if (scheduled) await flushTouched();
      await running;
    },
  };
}
