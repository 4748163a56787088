import type { Database } from "bun:sqlite";
import { microToCredits } from "./money.ts";

export interface UsageRow { model: string; requests: number; prompt_tokens: number; completion_tokens: number; cost_micro: number }

/** What an account's usage report says; each store supplies the rows (`usage(accountId, from, to)`). */
export type UsageReporter = (accountId: string, from: number, to: number) => UsageReport | Promise<UsageReport>;
export type UsageReport = ReturnType<typeof shapeUsageReport>;

/** The report as the admin API and CLI show it, from per-model rows and refusal counts by status. */
export function shapeUsageReport(accountId: string, from: number, to: number, rows: UsageRow[], refused: { status: number; n: number }[]) {
  const rejected = Object.fromEntries(refused.map((r) => [String(r.status), r.n]));
  const sum = (f: (r: UsageRow) => number) => rows.reduce((n, r) => n + f(r), 0);
  return {
    account_id: accountId,
    from: new Date(from).toISOString(),
    to: new Date(to).toISOString(),
    total: {
      requests: sum((r) => r.requests),
      prompt_tokens: sum((r) => r.prompt_tokens),
      completion_tokens: sum((r) => r.completion_tokens),
      cost: microToCredits(sum((r) => r.cost_micro)),
    },
    /** Requests refused before any upstream call, by status (none of them cost anything). */
    rejected,
    models: rows.map((r) => ({ model: r.model, requests: r.requests, prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, cost: microToCredits(r.cost_micro) })),
  };
}

/** Usage of one account over [from, to), totalled per model, from the usage records, and its refusals. */
export function createUsageReport(db: Database) {
  const perModel = db.query<{ model: string; requests: number; prompt_tokens: number; completion_tokens: number; cost_micro: number }, [string, number, number]>(
    `SELECT model, COUNT(*) AS requests, SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens, SUM(cost_micro) AS cost_micro
       FROM usage_records WHERE account_id = ? AND created_at >= ? AND created_at < ? GROUP BY model ORDER BY model`,
  );
  // Refusals are counted per key and minute (see billing/ledger.ts); a minute counts when it starts in the range.
  const refusals = db.query<{ status: number; n: number }, [string, number, number]>(
    `SELECT r.status, SUM(r.count) AS n FROM rejection_counts r JOIN api_keys k ON k.id = r.key_id
      WHERE k.account_id = ? AND r.minute * 60000 >= ? AND r.minute * 60000 < ? GROUP BY r.status ORDER BY r.status`,
  );
  return (accountId: string, from: number, to: number) =>
    shapeUsageReport(accountId, from, to, perModel.all(accountId, from, to), refusals.all(accountId, Math.floor(from / 60_000) * 60_000, to));
}
