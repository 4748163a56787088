import type { Database } from "bun:sqlite";
import type { AlertOutbox, OutboxEvent, OutboxRow } from "../../alerts/alert-outbox.ts";
import { retryWhileBusy } from "./sqlite-errors.ts";

/**
 * The alert outbox in the gateway's SQLite file (one process: the lease only matters across a
 * crash). Writes retry while the admin CLI holds the write lock, as top-ups do; `clock` is the
 * wall clock of due times, whatever clock the gateway charges by.
 */
export function createSqliteAlertOutbox(db: Database, clock: () => number = Date.now): AlertOutbox {
  const insert = db.query("INSERT OR IGNORE INTO alert_outbox (event_id, dedupe_key, type, body, created_at, next_attempt_at) VALUES (?, ?, ?, ?, ?, 0)");
  const insertAll = db.transaction((events: OutboxEvent[]) => {
    let added = 0;
    for (const e of events) added += insert.run(e.eventId, e.dedupeKey, e.type, e.body, e.createdAt).changes;
    return added;
  });
  const claim = db.query<{ id: number; event_id: string; type: string; body: string; attempts: number }, [number, number, number]>(
    `UPDATE alert_outbox SET next_attempt_at = ?1, attempts = attempts + 1
      WHERE id IN (SELECT id FROM alert_outbox WHERE delivered_at IS NULL AND next_attempt_at <= ?2 ORDER BY id LIMIT ?3)
      RETURNING id, event_id, type, body, attempts`,
  );
  const delivered = db.query("UPDATE alert_outbox SET delivered_at = ?, last_error = NULL WHERE id = ?");
  const retry = db.query("UPDATE alert_outbox SET next_attempt_at = ?, last_error = ? WHERE id = ? AND delivered_at IS NULL");
  const nextDue = db.query<{ at: number | null }, []>("SELECT MIN(next_attempt_at) AS at FROM alert_outbox WHERE delivered_at IS NULL");
  const creditMark = db.query<{ id: number | null }, [string]>("SELECT MAX(id) AS id FROM credit_entries WHERE account_id = ?");
  const limitedKeys = db.query<{ id: string }, []>("SELECT id FROM api_keys WHERE spend_limit_micro IS NOT NULL AND revoked_at IS NULL");
  const accountsDue = db.query<{ id: string }, [number]>("SELECT id FROM accounts WHERE spend_limit_micro IS NOT NULL OR balance_micro < ?");

  return {
    async add(events) {
      return events.length === 0 ? 0 : retryWhileBusy(() => insertAll.immediate(events));
    },
    async claim(limit, leaseMs) {
      const at = clock();
      const rows = await retryWhileBusy(() => claim.all(at + leaseMs, at, limit));
      return rows.sort((a, b) => a.id - b.id).map((r): OutboxRow => ({ id: r.id, eventId: r.event_id, type: r.type, body: r.body, attempts: r.attempts }));
    },
    async delivered(id) {
      await retryWhileBusy(() => delivered.run(clock(), id));
    },
    async retryLater(id, delayMs, error) {
      await retryWhileBusy(() => retry.run(clock() + delayMs, error, id));
    },
    async nextDueInMs() {
      const at = nextDue.get()?.at;
      return at === null || at === undefined ? null : Math.max(0, at - clock());
    },
    async creditMark(accountId) {
      return creditMark.get(accountId)?.id ?? 0;
    },
    async candidates(lowBalanceMicro) {
      return {
        keys: limitedKeys.all().map((r) => r.id),
        // Without a low-balance threshold, only accounts with a limit (no balance is below -1).
        accounts: accountsDue.all(lowBalanceMicro ?? -1).map((r) => r.id),
      };
    },
  };
}
