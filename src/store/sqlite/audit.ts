import type { Database } from "bun:sqlite";
import { createRecordChecker, PRICED_RECORD_COLUMNS, pricedRecord, UNCHARGED_WHERE, type Mispriced } from "../../billing/record-check.ts";
import { rollupDriftSql } from "../../billing/usage-report.ts";


export interface AuditReport {
  accounts: number;
  usageRecords: number;
  /** Accounts whose balance is not their credits minus their charges. */
  accountDrift: { account_id: string; balance_micro: number; expected_micro: number; drift_micro: number }[];
  /** Keys whose spent total is not the sum of their charges. */
  keyDrift: { key_id: string; spent_micro: number; expected_micro: number }[];
  /**
   * Keys and accounts whose count for their spend limit's period is not the sum of their charges
   * since that period began (the count limits are enforced with; lifetime: since ever).
   */
  periodDrift: { scope: "key" | "account"; id: string; period_spent_micro: number; expected_micro: number }[];
  /**
   * Rollup rows (`usage_daily`, `usage_hourly`: what reports read for whole days and hours) that
   * are not the sums of their records, or records no rollup row holds (first 1,000).
   */
  rollupDrift: { rollup: "daily" | "hourly"; period_start: number; account_id: string; key_id: string; model: string; requests: number; expected_requests: number; cost_micro: number; expected_micro: number; estimated_requests: number; expected_estimated: number }[];
  /** Records that cannot be right whatever the prices: negative numbers. */
  impossible: { request_id: string; cost_micro: number; prompt_tokens: number; completion_tokens: number }[];
  /** Charged records whose account the ledger does not have: money posted to no balance (a spill replayed into another ledger, a row deleted by hand). */
  orphaned: { request_id: string; account_id: string; cost_micro: number }[];
  /**
   * Answers of priced models that produced tokens and were charged nothing: completed ones, and
   * any whose charge the store refused (recorded without it, `held_micro` 0: a balance or limit
   * that could no longer cover a late charge, as a fenced stream's after its holds were released).
   * Not answers charged nothing by design (a whole answer read after its client's reset): their
   * records have no hold written.
   */
  uncharged: { request_id: string; model: string; prompt_tokens: number; completion_tokens: number }[];
  /** Records whose charge is not what their token classes at their recorded prices come to (first 1,000). */
  mispriced: Mispriced[];
  /** Records checked that way: those that name their prices (older ones do not). */
  pricedRecords: number;
  clean: boolean;
}

/**
 * Checks the books: for every account, balance = credits put in − charges recorded; for every
 * key, spent = its charges; every spend-limit period count = the charges since its period began;
 * every rollup row = the sums of its records; no record with negative numbers; no completed answer of a priced
 * model left uncharged, and no charge the store refused (`pricedModels`: the ids the configuration prices, when known); every
 * record's charge recomputed from its token classes and the price list it names.
 * Reads only, in one read transaction, so it sees one consistent state while a gateway runs.
 */
export function auditLedger(db: Database, pricedModels?: ReadonlySet<string>): AuditReport {
  return db.transaction(() => {
    const accountDrift = db.query<AuditReport["accountDrift"][number], []>(
      `SELECT a.id AS account_id, a.balance_micro,
              COALESCE(c.total, 0) - COALESCE(u.total, 0) AS expected_micro,
              a.balance_micro - (COALESCE(c.total, 0) - COALESCE(u.total, 0)) AS drift_micro
         FROM accounts a
         LEFT JOIN (SELECT account_id, SUM(amount_micro) AS total FROM credit_entries GROUP BY account_id) c ON c.account_id = a.id
         LEFT JOIN (SELECT account_id, SUM(cost_micro) AS total FROM usage_records GROUP BY account_id) u ON u.account_id = a.id
        WHERE a.balance_micro != COALESCE(c.total, 0) - COALESCE(u.total, 0)
        ORDER BY a.id`,
    ).all();
    const keyDrift = db.query<AuditReport["keyDrift"][number], []>(
      `SELECT k.id AS key_id, k.spent_micro, COALESCE(u.total, 0) AS expected_micro
         FROM api_keys k
         LEFT JOIN (SELECT key_id, SUM(cost_micro) AS total FROM usage_records GROUP BY key_id) u ON u.key_id = k.id
        WHERE k.spent_micro != COALESCE(u.total, 0)
        ORDER BY k.id`,
    ).all();
    const periodDrift = db.query<AuditReport["periodDrift"][number], []>(
      `SELECT 'account' AS scope, a.id, a.period_spent_micro,
              COALESCE((SELECT SUM(u.cost_micro) FROM usage_records u WHERE u.account_id = a.id AND u.created_at >= a.period_start), 0) AS expected_micro
         FROM accounts a
        WHERE a.period_spent_micro != COALESCE((SELECT SUM(u.cost_micro) FROM usage_records u WHERE u.account_id = a.id AND u.created_at >= a.period_start), 0)
       UNION ALL
       SELECT 'key', k.id, k.period_spent_micro, COALESCE(SUM(CASE WHEN u.created_at >= k.period_start THEN u.cost_micro END), 0)
         FROM api_keys k LEFT JOIN usage_records u ON u.key_id = k.id
        GROUP BY k.id HAVING k.period_spent_micro != COALESCE(SUM(CASE WHEN u.created_at >= k.period_start THEN u.cost_micro END), 0)
        ORDER BY 1, 2`,
    ).all();
    // The rollups hold the records up to their mark (sqlite-rollups.ts); readers add the rest.
    const rollupDrift = (["daily", "hourly"] as const).flatMap((rollup) =>
      db.query<AuditReport["rollupDrift"][number], []>(rollupDriftSql(rollup, "id <= (SELECT record_id FROM usage_rollup_mark)")).all(),
    );
    const impossible = db.query<AuditReport["impossible"][number], []>(
      "SELECT request_id, cost_micro, prompt_tokens, completion_tokens FROM usage_records WHERE cost_micro < 0 OR prompt_tokens < 0 OR completion_tokens < 0 LIMIT 1000",
    ).all();
    const orphaned = db.query<AuditReport["orphaned"][number], []>(
      "SELECT u.request_id, u.account_id, u.cost_micro FROM usage_records u WHERE u.cost_micro > 0 AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = u.account_id) LIMIT 1000",
    ).all();
    const candidates = pricedModels && pricedModels.size > 0
      ? db.query<AuditReport["uncharged"][number], []>(
          `SELECT request_id, model, prompt_tokens, completion_tokens FROM usage_records
            WHERE ${UNCHARGED_WHERE} LIMIT 100000`,
        ).all()
      : [];
    const uncharged = candidates.filter((r) => pricedModels!.has(r.model)).slice(0, 1000);
    const check = createRecordChecker();
    const mispriced: Mispriced[] = [];
    let pricedRecords = 0;
    const records = db.query<Record<string, unknown>, []>(
      `SELECT ${PRICED_RECORD_COLUMNS} FROM usage_records u LEFT JOIN price_lists p ON p.id = u.price_id WHERE u.price_id IS NOT NULL`,
    );
    for (const row of records.iterate()) {
      pricedRecords++;
      const wrong = check(pricedRecord(row));
      if (wrong && mispriced.length < 1000) mispriced.push(wrong);
    }
    const accounts = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts").get()!.n;
    const usageRecords = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage_records").get()!.n;
    return {
      accounts,
      usageRecords,
      accountDrift,
      keyDrift,
      periodDrift,
      rollupDrift,
      impossible,
      orphaned,
      uncharged,
      mispriced,
      pricedRecords,
      clean: accountDrift.length === 0 && keyDrift.length === 0 && periodDrift.length === 0 && rollupDrift.length === 0 && impossible.length === 0 && orphaned.length === 0 && uncharged.length === 0 && mispriced.length === 0,
    };
  }).deferred();
}
