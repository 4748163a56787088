import type { Database } from "bun:sqlite";
import { breakdownParts, mergeUsageRows, perModelSql, rangePieces, shapeUsageReport, sumPerModel, usageBreakdownSql, usageRows, type UsageBreakdown, type UsageQuery } from "../../billing/usage-report.ts";
import { PAST_ROLLUP_MARK } from "./sqlite-rollups.ts";

/**
 * Usage of one account over [from, to), totalled per model, and its refusals. Read from the
 * rollups over whole days and hours (rangePieces), the records only at the range's ends and past
 * the rollups' mark, in one read transaction (a fold between the statements would count twice).
 */
export function createUsageReport(db: Database) {
  const all = statementRunner(db);
  // Refusals are counted per key and minute (see billing/ledger.ts); a minute counts when it starts in the range.
  const refusals = db.query<{ status: number; n: number; last: number }, [string, number, number]>(
    `SELECT r.status, SUM(r.count) AS n, MAX(r.minute) AS last FROM rejection_counts r JOIN api_keys k ON k.id = r.key_id
      WHERE k.account_id = ? AND r.minute * 60000 >= ? AND r.minute * 60000 < ? GROUP BY r.status ORDER BY r.status`,
  );
  const perModel = db.transaction((accountId: string, from: number, to: number) => {
    const pieces = rangePieces(from, to);
    const parts = pieces.map((piece) => all(perModelSql(piece, accountId, "sqlite")));
    const rolled = pieces.filter((piece) => piece.source !== "usage_records");
    // What the rollups do not hold yet, over the whole of their part of the range.
    if (rolled.length > 0) parts.push(all(perModelSql({ source: "usage_records", from: rolled[0]!.from, to: rolled[rolled.length - 1]!.to }, accountId, "sqlite", PAST_ROLLUP_MARK)));
    return sumPerModel(parts);
  });
  return (accountId: string, from: number, to: number) =>
    shapeUsageReport(accountId, from, to, perModel(accountId, from, to), refusals.all(accountId, Math.floor(from / 60_000) * 60_000, to));
}

/**
 * The SQLite store's breakdown. A report read from a rollup adds the records past the rollups'
 * mark (the last fold's, a fraction of a second behind: sqlite-rollups.ts), so it is exact.
 */
export function createUsageBreakdown(db: Database): UsageBreakdown {
  const all = statementRunner(db);
  const run = (statement: { text: string; params: (string | number)[] }) => usageRows(all(statement));
  // One read transaction: both statements see the same mark (another process may fold between them).
  const rolledUp = db.transaction((q: UsageQuery) => mergeUsageRows(run(usageBreakdownSql(q, "sqlite")), run(usageBreakdownSql(q, "sqlite", { tailAfter: PAST_ROLLUP_MARK }))));
  // A range that cuts an hour: its whole hours from the rollups, only its ends from the records.
  return (q) => {
    const { rolled, records } = breakdownParts(q);
    let rows = rolled ? rolledUp(rolled) : [];
    for (const part of records) rows = mergeUsageRows(rows, run(usageBreakdownSql(part, "sqlite")));
    return rows;
  };
}

/** Runs a built statement's text with its parameters, each text prepared once (the reports' statements vary only by range shape). */
function statementRunner(db: Database): (statement: { text: string; params: (string | number)[] }) => Record<string, unknown>[] {
  const statements = new Map<string, ReturnType<Database["query"]>>();
  return ({ text, params }) => {
    let statement = statements.get(text);
    if (!statement) statements.set(text, (statement = db.query(text)));
    return statement.all(...params) as Record<string, unknown>[];
  };
}
