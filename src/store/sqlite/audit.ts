import type { Database } from "bun:sqlite";
import { createRecordChecker, PRICED_RECORD_COLUMNS, pricedRecord, type Mispriced } from "../../billing/record-check.ts";

export interface AuditReport {
  accounts: number;
  usageRecords: number;
  /** Accounts whose balance is not their credits minus their charges. */
  accountDrift: { account_id: string; balance_micro: number; expected_micro: number; drift_micro: number }[];
  /** Keys whose spent total is not the sum of their charges. */
  keyDrift: { key_id: string; spent_micro: number; expected_micro: number }[];
  /** Records that cannot be right whatever the prices: negative numbers. */
  impossible: { request_id: string; cost_micro: number; prompt_tokens: number; completion_tokens: number }[];
  /** Completed answers of priced models that produced tokens and were charged nothing. */
  uncharged: { request_id: string; model: string; prompt_tokens: number; completion_tokens: number }[];
  /** Records whose charge is not what their token classes at their recorded prices come to (first 1,000). */
  mispriced: Mispriced[];
  /** Records checked that way: those that name their prices (older ones do not). */
  pricedRecords: number;
  clean: boolean;
}

/**
 * Checks the books: for every account, balance = credits put in − charges recorded; for every
 * key, spent = its charges; no record with negative numbers; no completed answer of a priced
 * model left uncharged (`pricedModels`: the ids the configuration prices, when known); every
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
    const impossible = db.query<AuditReport["impossible"][number], []>(
      "SELECT request_id, cost_micro, prompt_tokens, completion_tokens FROM usage_records WHERE cost_micro < 0 OR prompt_tokens < 0 OR completion_tokens < 0 LIMIT 1000",
    ).all();
    const candidates = pricedModels && pricedModels.size > 0
      ? db.query<AuditReport["uncharged"][number], []>(
          "SELECT request_id, model, prompt_tokens, completion_tokens FROM usage_records WHERE status = 'ok' AND cost_micro = 0 AND prompt_tokens + completion_tokens > 0 LIMIT 100000",
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
      impossible,
      uncharged,
      mispriced,
      pricedRecords,
      clean: accountDrift.length === 0 && keyDrift.length === 0 && impossible.length === 0 && uncharged.length === 0 && mispriced.length === 0,
    };
  }).deferred();
}
