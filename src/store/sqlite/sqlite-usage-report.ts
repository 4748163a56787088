import type { Database } from "bun:sqlite";
import { mergeUsageRows, shapeUsageReport, USAGE_SUMS_SQL, usageBreakdownSql, usageRows, usageSource, usageSums, type UsageBreakdown, type UsageQuery } from "../../billing/usage-report.ts";
import { PAST_ROLLUP_MARK } from "./sqlite-rollups.ts";

/** Usage of one account over [from, to), totalled per model, from the usage records, and its refusals. */
export function createUsageReport(db: Database) {
  const perModel = db.query<Record<string, unknown>, [string, number, number]>(
    `SELECT u.model, ${USAGE_SUMS_SQL}
       FROM usage_records u WHERE u.account_id = ? AND u.created_at >= ? AND u.created_at < ? GROUP BY u.model ORDER BY u.model`,
  );
  // Refusals are counted per key and minute (see billing/ledger.ts); a minute counts when it starts in the range.
  const refusals = db.query<{ status: number; n: number }, [string, number, number]>(
    `SELECT r.status, SUM(r.count) AS n FROM rejection_counts r JOIN api_keys k ON k.id = r.key_id
      WHERE k.account_id = ? AND r.minute * 60000 >= ? AND r.minute * 60000 < ? GROUP BY r.status ORDER BY r.status`,
  );
  return (accountId: string, from: number, to: number) =>
    shapeUsageReport(accountId, from, to, perModel.all(accountId, from, to).map((r) => ({ model: String(r.model), ...usageSums(r) })), refusals.all(accountId, Math.floor(from / 60_000) * 60_000, to));
}

/**
 * The SQLite store's breakdown. A report read from a rollup adds the records past the rollups'
 * mark (the last fold's, a fraction of a second behind: sqlite-rollups.ts), so it is exact.
 */
export function createUsageBreakdown(db: Database): UsageBreakdown {
  const statements = new Map<string, ReturnType<Database["query"]>>();
  const run = ({ text, params }: { text: string; params: (string | number)[] }) => {
    let statement = statements.get(text);
    if (!statement) statements.set(text, (statement = db.query(text)));
    return usageRows(statement.all(...params) as Record<string, unknown>[]);
  };
  // One read transaction: both statements see the same mark (another process may fold between them).
  const rolledUp = db.transaction((q: UsageQuery) => mergeUsageRows(run(usageBreakdownSql(q, "sqlite")), run(usageBreakdownSql(q, "sqlite", { tailAfter: PAST_ROLLUP_MARK }))));
  return (q) => (usageSource(q) === "usage_records" ? run(usageBreakdownSql(q, "sqlite")) : rolledUp(q));
}
