import type { Database } from "bun:sqlite";
import { microToCredits } from "./money.ts";

/** Usage of one account over [from, to), totalled per model, from the usage records. */
export function createUsageReport(db: Database) {
  const perModel = db.query<{ model: string; requests: number; prompt_tokens: number; completion_tokens: number; cost_micro: number }, [string, number, number]>(
    `SELECT model, COUNT(*) AS requests, SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens, SUM(cost_micro) AS cost_micro
       FROM usage_records WHERE account_id = ? AND created_at >= ? AND created_at < ? GROUP BY model ORDER BY model`,
  );
  return (accountId: string, from: number, to: number) => {
    const rows = perModel.all(accountId, from, to);
    const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((n, r) => n + f(r), 0);
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
      models: rows.map((r) => ({ model: r.model, requests: r.requests, prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, cost: microToCredits(r.cost_micro) })),
    };
  };
}
