import { breakdownParts, mergeUsageRows, perModelSql, rangePieces, rollupDriftSql, shapeUsageReport, sumPerModel, usageBreakdownSql, usageRows, type UsageBreakdown, type UsageReporter } from "../../billing/usage-report.ts";
import type { AuditReport } from "../sqlite/audit.ts";
import { int, withTimeout, type Pg } from "./pg-client.ts";
import { createRecordChecker, PRICED_RECORD_COLUMNS, pricedRecord, UNCHARGED_WHERE, type Mispriced } from "../../billing/record-check.ts";

/** The usage report (billing/usage-report.ts) from PostgreSQL's records and refusal counts. */
export function createPostgresUsageReport(sql: Pg, timeoutMs = 10_000): UsageReporter {
  return async (accountId, from, to) => {
    // Whole days and hours from the rollups (a trigger keeps them whole), the ends from the records: one snapshot.
    const pieces = rangePieces(from, to);
    const [parts, refused] = await withTimeout(Promise.all([
      sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => Promise.all(pieces.map((piece) => {
        const { text, params } = perModelSql(piece, accountId, "postgres");
        return tx.unsafe(text, params);
      }))),
      sql`SELECT r.status, SUM(r.count) AS n, MAX(r.minute) AS last FROM rejection_counts r JOIN api_keys k ON k.id = r.key_id
           WHERE k.account_id = ${accountId} AND r.minute * 60000 >= ${Math.floor(from / 60_000) * 60_000} AND r.minute * 60000 < ${to}
           GROUP BY r.status ORDER BY r.status`,
    ]), timeoutMs, "usage report");
    return shapeUsageReport(accountId, from, to,
      sumPerModel(parts as Record<string, unknown>[][]),
      refused.map((r: Record<string, unknown>) => ({ status: int(r.status), n: int(r.n), last: int(r.last) })));
  };
}

/**
 * The audit of store/sqlite/audit.ts on PostgreSQL, plus one check only a shared store needs:
 * every account's and key's `held_micro` equals the sum of its open holds. Reads one snapshot
 * (REPEATABLE READ, read only) while gateways keep writing.
 */
export async function auditPostgres(sql: Pg, pricedModels?: ReadonlySet<string>): Promise<AuditReport & { heldDrift: { id: string; held_micro: number; expected_micro: number }[] }> {
  return sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
    const accountDrift = (await tx`
      SELECT a.id AS account_id, a.balance_micro, COALESCE(c.total, 0) - COALESCE(u.total, 0) AS expected_micro,
             a.balance_micro - (COALESCE(c.total, 0) - COALESCE(u.total, 0)) AS drift_micro
        FROM accounts a
        LEFT JOIN (SELECT account_id, SUM(amount_micro) AS total FROM credit_entries GROUP BY account_id) c ON c.account_id = a.id
        LEFT JOIN (SELECT account_id, SUM(cost_micro) AS total FROM usage_records GROUP BY account_id) u ON u.account_id = a.id
       WHERE a.balance_micro != COALESCE(c.total, 0) - COALESCE(u.total, 0)
       ORDER BY a.id`).map((r: Record<string, unknown>) => ({ account_id: r.account_id as string, balance_micro: int(r.balance_micro), expected_micro: int(r.expected_micro), drift_micro: int(r.drift_micro) }));
    const keyDrift = (await tx`
      SELECT k.id AS key_id, k.spent_micro, COALESCE(u.total, 0) AS expected_micro
        FROM api_keys k LEFT JOIN (SELECT key_id, SUM(cost_micro) AS total FROM usage_records GROUP BY key_id) u ON u.key_id = k.id
       WHERE k.spent_micro != COALESCE(u.total, 0)
       ORDER BY k.id`).map((r: Record<string, unknown>) => ({ key_id: r.key_id as string, spent_micro: int(r.spent_micro), expected_micro: int(r.expected_micro) }));
    const heldDrift = (await tx`
      SELECT id, held_micro, expected_micro FROM (
        SELECT a.id, a.held_micro, COALESCE((SELECT SUM(amount_micro) FROM holds h WHERE h.account_id = a.id), 0) AS expected_micro FROM accounts a
        UNION ALL
        SELECT k.id, k.held_micro, COALESCE((SELECT SUM(amount_micro) FROM holds h WHERE h.key_id = k.id), 0) FROM api_keys k
      ) t WHERE held_micro != expected_micro ORDER BY id`).map((r: Record<string, unknown>) => ({ id: r.id as string, held_micro: int(r.held_micro), expected_micro: int(r.expected_micro) }));
    const periodDrift = (await tx`
      SELECT 'account' AS scope, a.id, a.period_spent_micro, COALESCE(SUM(u.cost_micro) FILTER (WHERE u.created_at >= a.period_start), 0) AS expected_micro
        FROM accounts a LEFT JOIN usage_records u ON u.account_id = a.id
       GROUP BY a.id HAVING a.period_spent_micro != COALESCE(SUM(u.cost_micro) FILTER (WHERE u.created_at >= a.period_start), 0)
      UNION ALL
      SELECT 'key', k.id, k.period_spent_micro, COALESCE(SUM(u.cost_micro) FILTER (WHERE u.created_at >= k.period_start), 0)
        FROM api_keys k LEFT JOIN usage_records u ON u.key_id = k.id
       GROUP BY k.id HAVING k.period_spent_micro != COALESCE(SUM(u.cost_micro) FILTER (WHERE u.created_at >= k.period_start), 0)
       ORDER BY 1, 2`).map((r: Record<string, unknown>) => ({ scope: r.scope as "key" | "account", id: r.id as string, period_spent_micro: int(r.period_spent_micro), expected_micro: int(r.expected_micro) }));
    // The rollups are kept by a trigger on every insert: all records are in them.
    const rollupDrift: AuditReport["rollupDrift"] = [];
    for (const rollup of ["daily", "hourly"] as const) {
      const rows = await tx.unsafe(rollupDriftSql(rollup));
      for (const r of rows) {
        rollupDrift.push({ rollup, period_start: int(r.period_start), account_id: r.account_id, key_id: r.key_id, model: r.model, requests: int(r.requests), expected_requests: int(r.expected_requests), cost_micro: int(r.cost_micro), expected_micro: int(r.expected_micro), estimated_requests: int(r.estimated_requests), expected_estimated: int(r.expected_estimated) });
      }
    }
    const impossible = (await tx`
      SELECT request_id, cost_micro, prompt_tokens, completion_tokens FROM usage_records
       WHERE cost_micro < 0 OR prompt_tokens < 0 OR completion_tokens < 0 LIMIT 1000`).map((r: Record<string, unknown>) => ({ request_id: r.request_id as string, cost_micro: int(r.cost_micro), prompt_tokens: int(r.prompt_tokens), completion_tokens: int(r.completion_tokens) }));
    const orphaned = (await tx`
      SELECT u.request_id, u.account_id, u.cost_micro FROM usage_records u
       WHERE u.cost_micro > 0 AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = u.account_id) LIMIT 1000`).map((r: Record<string, unknown>) => ({ request_id: r.request_id as string, account_id: r.account_id as string, cost_micro: int(r.cost_micro) }));
    const priced = pricedModels ? [...pricedModels] : [];
    const uncharged = priced.length === 0 ? [] : (await tx.unsafe(
      `SELECT request_id, model, prompt_tokens, completion_tokens FROM usage_records
        WHERE ${UNCHARGED_WHERE} AND model IN (SELECT jsonb_array_elements_text($1::text::jsonb)) LIMIT 1000`, [JSON.stringify(priced)])).map((r: Record<string, unknown>) => ({ request_id: r.request_id as string, model: r.model as string, prompt_tokens: int(r.prompt_tokens), completion_tokens: int(r.completion_tokens) }));
    // Every record that names its prices, recomputed, in pages by id (one snapshot: the transaction's).
    const check = createRecordChecker();
    const mispriced: Mispriced[] = [];
    let pricedRecords = 0;
    for (let after = 0; ;) {
      const page = await tx.unsafe(
        `SELECT u.id, ${PRICED_RECORD_COLUMNS} FROM usage_records u LEFT JOIN price_lists p ON p.id = u.price_id
          WHERE u.price_id IS NOT NULL AND u.id > $1 ORDER BY u.id LIMIT 10000`, [after]);
      for (const row of page) {
        pricedRecords++;
        const wrong = check(pricedRecord(row));
        if (wrong && mispriced.length < 1000) mispriced.push(wrong);
      }
      if (page.length < 10000) break;
      after = int(page[page.length - 1].id);
    }
    const [counts] = await tx`SELECT (SELECT COUNT(*) FROM accounts) AS accounts, (SELECT COUNT(*) FROM usage_records) AS records`;
    return {
      accounts: int(counts.accounts),
      usageRecords: int(counts.records),
      accountDrift,
      keyDrift,
      periodDrift,
      rollupDrift,
      heldDrift,
      impossible,
      orphaned,
      uncharged,
      mispriced,
      pricedRecords,
      clean: accountDrift.length === 0 && keyDrift.length === 0 && periodDrift.length === 0 && rollupDrift.length === 0 && heldDrift.length === 0 && impossible.length === 0 && orphaned.length === 0 && uncharged.length === 0 && mispriced.length === 0,
    };
  });
}

/** The usage breakdown (billing/usage-report.ts) on PostgreSQL: the same statement as SQLite's. */
export function createPostgresUsageBreakdown(sql: Pg, timeoutMs = 30_000): UsageBreakdown {
  return async (q) => {
    // A range that cuts an hour: its whole hours from the rollups, only its ends from the records.
    const { rolled, records } = breakdownParts(q);
    const statements = [...(rolled ? [rolled] : []), ...records].map((part) => usageBreakdownSql(part, "postgres"));
    // A month of rollup rows across every account is sorted for grouping; the default work_mem
    // (4 MB) sends that sort to disk. More memory for this read only (SET LOCAL ends with it).
    const read = sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
      await tx.unsafe("SET LOCAL work_mem = '64MB'");
      const out = [];
      for (const { text, params } of statements) out.push(await tx.unsafe(text, params));
      return out;
    });
    const [first = [], ...rest] = (await withTimeout(read, timeoutMs, "usage breakdown")).map((rows) => usageRows(rows as Record<string, unknown>[]));
    return rest.reduce((rows, more) => mergeUsageRows(rows, more), first);
  };
}
