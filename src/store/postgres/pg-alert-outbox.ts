import type { AlertOutbox, OutboxRow } from "../../alerts/alert-outbox.ts";
import { int, withTimeout, type Pg } from "./pg-client.ts";
import { DB_NOW_MS } from "./pg-migrations.ts";

/**
 * The alert outbox on PostgreSQL, shared by every gateway process. Due times are on the
 * database's clock (DB_NOW_MS), as hold expiries are, so hosts with skewed clocks agree on
 * leases. A claim locks the rows it takes with FOR UPDATE SKIP LOCKED and leases them in the same
 * statement: two processes never take the same row, and neither waits for the other.
 */
export function createPostgresAlertOutbox(sql: Pg, timeoutMs = 2_000): AlertOutbox {
  const bounded = <T>(promise: Promise<T>, what: string) => withTimeout(promise, timeoutMs, what);
  return {
    async add(events) {
      if (events.length === 0) return 0;
      const rows = await bounded(sql`
        INSERT INTO alert_outbox (event_id, dedupe_key, type, body, created_at, next_attempt_at)
        SELECT e.event_id, e.dedupe_key, e.type, e.body, e.created_at, 0
          FROM jsonb_to_recordset(${JSON.stringify(events.map((e) => ({ event_id: e.eventId, dedupe_key: e.dedupeKey, type: e.type, body: e.body, created_at: e.createdAt })))}::text::jsonb)
               AS e(event_id text, dedupe_key text, type text, body text, created_at bigint)
        ON CONFLICT DO NOTHING RETURNING id`, "alert outbox insert");
      return rows.length;
    },
    async claim(limit, leaseMs) {
      const rows = await bounded(sql.unsafe(
        `UPDATE alert_outbox SET next_attempt_at = ${DB_NOW_MS} + $1, attempts = attempts + 1
          WHERE id IN (SELECT id FROM alert_outbox WHERE delivered_at IS NULL AND next_attempt_at <= ${DB_NOW_MS}
                        ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
          RETURNING id, event_id, type, body, attempts`,
        [leaseMs, limit],
      ), "alert outbox claim");
      return rows
        .map((r: Record<string, unknown>): OutboxRow => ({ id: int(r.id), eventId: r.event_id as string, type: r.type as string, body: r.body as string, attempts: int(r.attempts) }))
        .sort((a: OutboxRow, b: OutboxRow) => a.id - b.id);
    },
    async delivered(id) {
      await bounded(sql.unsafe(`UPDATE alert_outbox SET delivered_at = ${DB_NOW_MS}, last_error = NULL WHERE id = $1`, [id]), "alert delivered");
    },
    async retryLater(id, delayMs, error) {
      await bounded(sql.unsafe(`UPDATE alert_outbox SET next_attempt_at = ${DB_NOW_MS} + $1, last_error = $2 WHERE id = $3 AND delivered_at IS NULL`, [delayMs, error, id]), "alert retry");
    },
    async nextDueInMs() {
      const [row] = await bounded(sql.unsafe(`SELECT GREATEST(0, MIN(next_attempt_at) - ${DB_NOW_MS}) AS ms FROM alert_outbox WHERE delivered_at IS NULL`), "alert outbox");
      return row?.ms === null || row?.ms === undefined ? null : int(row.ms);
    },
    async creditMark(accountId) {
      const [row] = await bounded(sql`SELECT MAX(id) AS id FROM credit_entries WHERE account_id = ${accountId}`, "credit mark");
      return row?.id === null || row?.id === undefined ? 0 : int(row.id);
    },
    async candidates(lowBalanceMicro) {
      const keys = await bounded(sql`SELECT id FROM api_keys WHERE spend_limit_micro IS NOT NULL AND revoked_at IS NULL`, "alert candidates");
      const accounts = await bounded(sql`SELECT id FROM accounts WHERE spend_limit_micro IS NOT NULL OR balance_micro < ${lowBalanceMicro ?? -1}`, "alert candidates");
      return { keys: keys.map((r: { id: string }) => r.id), accounts: accounts.map((r: { id: string }) => r.id) };
    },
  };
}
