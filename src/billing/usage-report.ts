import { microToCredits } from "./money.ts";

/** A usage record's counts and money as its columns name them: one record's, or a report's sums of them. */
export interface RecordCounts {
  prompt_tokens: number;
  completion_tokens: number;
  /** The prompt by class (records older than the classes count their whole prompt as fresh input). */
  fresh_input_tokens: number;
  cache_read_tokens: number;
  cache_write_5m_tokens: number;
  cache_write_1h_tokens: number;
  /** The part of completion_tokens spent reasoning. */
  reasoning_tokens: number;
  images: number;
  cost_micro: number;
  /** What the cached tokens would have cost as fresh input, minus what they cost (negative when writes outweigh reads). */
  cache_savings_micro: number;
}

/** What every report sums over the records: tokens by price class, the charges, and the cache savings. */
export interface UsageSums extends RecordCounts {
  requests: number;
  /** Of `requests`, those whose counts the gateway estimated: the vendor sent none (`usage_records.estimated`). */
  estimated_requests: number;
}

export interface UsageRow extends UsageSums { model: string }

/**
 * 1 for a usage record whose counts the gateway estimated, else 0, summed into `estimated_requests`
 * (reports, the audit, SQLite's fold): SQLite keeps the flag as 0/1, PostgreSQL as a boolean.
 * Unqualified: every statement that sums it reads `usage_records` alone.
 */
export const ESTIMATED_ONE = "CASE WHEN estimated THEN 1 ELSE 0 END";

/** The SQL of those sums, over `usage_records u`; both stores run it. */
export const USAGE_SUMS_SQL = `COUNT(*) AS requests, SUM(u.prompt_tokens) AS prompt_tokens, SUM(u.completion_tokens) AS completion_tokens,
  SUM(COALESCE(u.fresh_input_tokens, u.prompt_tokens)) AS fresh_input_tokens, SUM(u.cache_read_tokens) AS cache_read_tokens,
  SUM(u.cache_write_5m_tokens) AS cache_write_5m_tokens, SUM(u.cache_write_1h_tokens) AS cache_write_1h_tokens,
  SUM(u.reasoning_tokens) AS reasoning_tokens, SUM(u.images) AS images, SUM(u.cost_micro) AS cost_micro, SUM(u.cache_savings_micro) AS cache_savings_micro,
  SUM(${ESTIMATED_ONE}) AS estimated_requests`;

/**
 * The same sums over a rollup (`usage_hourly u` or `usage_daily u`; PostgreSQL keeps them by a
 * trigger per statement, SQLite folds them behind a mark, store/sqlite/sqlite-rollups.ts): each of
 * its rows already sums an hour's or a day's records.
 */
export const HOURLY_SUMS_SQL = `SUM(u.requests) AS requests, SUM(u.prompt_tokens) AS prompt_tokens, SUM(u.completion_tokens) AS completion_tokens,
  SUM(u.fresh_input_tokens) AS fresh_input_tokens, SUM(u.cache_read_tokens) AS cache_read_tokens,
  SUM(u.cache_write_5m_tokens) AS cache_write_5m_tokens, SUM(u.cache_write_1h_tokens) AS cache_write_1h_tokens,
  SUM(u.reasoning_tokens) AS reasoning_tokens, SUM(u.images) AS images, SUM(u.cost_micro) AS cost_micro, SUM(u.cache_savings_micro) AS cache_savings_micro,
  SUM(u.estimated_requests) AS estimated_requests`;

const HOUR_MS = 3_600_000;

const DAY_MS = 86_400_000;

/**
 * Where a report's sums come from: a range of whole UTC days by day reads the daily rollup, one of
 * whole hours the hourly one (the same figures, far fewer rows); any other range, the records.
 */
export function usageSource(q: Pick<UsageQuery, "from" | "to" | "granularity">): "usage_daily" | "usage_hourly" | "usage_records" {
  if (q.granularity === "day" && q.from % DAY_MS === 0 && q.to % DAY_MS === 0) return "usage_daily";
  if (q.from % HOUR_MS === 0 && q.to % HOUR_MS === 0) return "usage_hourly";
  return "usage_records";
}

/** A part of a range and where its sums are read from. */
export interface RangePiece {
  source: "usage_daily" | "usage_hourly" | "usage_records";
  from: number;
  to: number;
}

/**
 * [from, to) cut where the rollups can take it: whole UTC days from the daily rollup, whole hours
 * from the hourly one, and only what is left at each end (under an hour) from the records. A
 * report over a range that cuts an hour, and the per-model account report over any range, read
 * every record of the range and held the request thread for seconds at 600,000 records (a
 * hostile-tenant probe, 2026-11-30: a holder reloading their own console view).
 */
export function rangePieces(from: number, to: number): RangePiece[] {
  const h0 = Math.ceil(from / HOUR_MS) * HOUR_MS;
  const h1 = Math.floor(to / HOUR_MS) * HOUR_MS;
  if (h0 >= h1) return from < to ? [{ source: "usage_records", from, to }] : [];
  const pieces: RangePiece[] = [];
  if (from < h0) pieces.push({ source: "usage_records", from, to: h0 });
  const d0 = Math.ceil(h0 / DAY_MS) * DAY_MS;
  const d1 = Math.floor(h1 / DAY_MS) * DAY_MS;
  if (d0 < d1) {
    if (h0 < d0) pieces.push({ source: "usage_hourly", from: h0, to: d0 });
    pieces.push({ source: "usage_daily", from: d0, to: d1 });
    if (d1 < h1) pieces.push({ source: "usage_hourly", from: d1, to: h1 });
  } else pieces.push({ source: "usage_hourly", from: h0, to: h1 });
  if (h1 < to) pieces.push({ source: "usage_records", from: h1, to });
  return pieces;
}

/**
 * A report's range as the stores read it: whole hours (whole days by day) from a rollup, and the
 * records only at each end (under an hour), each part its own statement, the rows merged
 * (mergeUsageRows). A range within one hour is the records alone.
 */
export function breakdownParts(q: UsageQuery): { rolled?: UsageQuery; records: UsageQuery[] } {
  if (usageSource(q) !== "usage_records") return { rolled: q, records: [] };
  const h0 = Math.ceil(q.from / HOUR_MS) * HOUR_MS;
  const h1 = Math.floor(q.to / HOUR_MS) * HOUR_MS;
  if (h0 >= h1) return { records: [q] };
  const records: UsageQuery[] = [];
  if (q.from < h0) records.push({ ...q, to: h0 });
  if (h1 < q.to) records.push({ ...q, from: h1 });
  return { rolled: { ...q, from: h0, to: h1 }, records };
}

/**
 * One account's sums per model over a piece (see rangePieces), for both stores; `tailAfter`: the
 * records past SQLite's rollup mark over a rollup's range instead (a condition on `u`).
 */
export function perModelSql(piece: RangePiece, accountId: string, dialect: "sqlite" | "postgres", tailAfter?: string): { text: string; params: (string | number)[] } {
  const records = tailAfter !== undefined || piece.source === "usage_records";
  const time = records ? "u.created_at" : piece.source === "usage_daily" ? "u.day" : "u.hour";
  const [a, b, c] = dialect === "sqlite" ? ["?", "?", "?"] : ["$1", "$2", "$3"];
  // The records past a mark are the newest few: read by id, not by the account's index (usageBreakdownSql).
  const from = records ? `usage_records u${tailAfter !== undefined && dialect === "sqlite" ? " NOT INDEXED" : ""}` : `${piece.source} u`;
  const where = [`u.account_id = ${a}`, `${time} >= ${b}`, `${time} < ${c}`];
  if (tailAfter !== undefined) where.unshift(tailAfter);
  return { text: `SELECT u.model, ${records ? USAGE_SUMS_SQL : HOURLY_SUMS_SQL} FROM ${from} WHERE ${where.join(" AND ")} GROUP BY u.model`, params: [accountId, piece.from, piece.to] };
}

/** Per-model rows of several pieces as one list, summed per model, in the report's order (model ids as UTF-8 bytes). */
export function sumPerModel(parts: Record<string, unknown>[][]): UsageRow[] {
  const byModel = new Map<string, UsageRow>();
  for (const rows of parts) {
    for (const r of rows) {
      const model = String(r.model);
      const sums = usageSums(r);
      const seen = byModel.get(model);
      if (!seen) byModel.set(model, { model, ...sums });
      else for (const f of SUM_FIELDS) seen[f] += sums[f];
    }
  }
  return [...byModel.values()].sort((x, y) => byteOrder(x.model, y.model));
}

const SUM_FIELDS = ["requests", "prompt_tokens", "completion_tokens", "fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens",
  "cache_write_1h_tokens", "reasoning_tokens", "images", "cost_micro", "cache_savings_micro", "estimated_requests"] as const satisfies readonly (keyof UsageSums)[];

/** A store's row of those sums as numbers (PostgreSQL's bigints arrive as strings, an empty SUM as null). */
export function usageSums(r: Record<string, unknown>): UsageSums {
  const sums = {} as UsageSums;
  for (const f of SUM_FIELDS) sums[f] = r[f] === null || r[f] === undefined ? 0 : Number(r[f]);
  return sums;
}

/** Sums as reports show them: token counts as they are, money in credits. */
export function shownSums(r: UsageSums) {
  return {
    requests: r.requests,
    prompt_tokens: r.prompt_tokens,
    completion_tokens: r.completion_tokens,
    fresh_input_tokens: r.fresh_input_tokens,
    cache_read_tokens: r.cache_read_tokens,
    cache_write_5m_tokens: r.cache_write_5m_tokens,
    cache_write_1h_tokens: r.cache_write_1h_tokens,
    reasoning_tokens: r.reasoning_tokens,
    images: r.images,
    cost: microToCredits(r.cost_micro),
    cache_savings: microToCredits(r.cache_savings_micro),
    // Last, so a CSV read by position before it was added reads the same columns.
    estimated_requests: r.estimated_requests,
  };
}

export function totalOf(rows: UsageSums[]): UsageSums {
  const total = usageSums({});
  for (const r of rows) for (const f of SUM_FIELDS) total[f] += r[f];
  return total;
}

/** What an account's usage report says; each store supplies the rows (`usage(accountId, from, to)`). */
export type UsageReporter = (accountId: string, from: number, to: number) => UsageReport | Promise<UsageReport>;
export type UsageReport = ReturnType<typeof shapeUsageReport>;

/** The report as the admin API and CLI show it, from per-model rows and refusal counts by status. */
export function shapeUsageReport(accountId: string, from: number, to: number, rows: UsageRow[], refused: { status: number; n: number; last: number }[]) {
  const rejected = Object.fromEntries(refused.map((r) => [String(r.status), r.n]));
  // The minute of each status's latest refusal: a count alone over 24 hours told no one whether
  // refusals had stopped once a limit was raised (a console probe, thirty-sixth session).
  const latest = Object.fromEntries(refused.map((r) => [String(r.status), new Date(r.last * 60_000).toISOString()]));
  return {
    account_id: accountId,
    from: new Date(from).toISOString(),
    to: new Date(to).toISOString(),
    total: shownSums(totalOf(rows)),
    /** Requests refused before any upstream call, by status (none of them cost anything). */
    rejected,
    /** When each status's latest refusal was (the start of its minute). */
    rejected_latest: latest,
    models: rows.map((r) => ({ model: r.model, ...shownSums(r) })),
  };
}

// ── Usage over time, per account, key and model: what a team bills its own users from. ──

export const USAGE_GROUPS = ["account", "key", "model"] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];
export type Granularity = "hour" | "day";

export interface UsageQuery {
  from: number;
  to: number;
  /** The columns rows are split by, besides the period; none: one row per period. */
  groupBy: UsageGroup[];
  granularity: Granularity;
  accountId?: string;
  keyId?: string;
  model?: string;
}

/** One period (UTC hour or day) of one account / key / model, as the store sums it. */
export interface UsageBucketRow extends UsageSums {
  period: number;
  account_id?: string;
  account_name?: string | null;
  key_id?: string;
  key_name?: string | null;
  model?: string;
}

/** Each store runs the same statement (`usageBreakdownSql`) and returns its rows. */
export type UsageBreakdown = (q: UsageQuery) => UsageBucketRow[] | Promise<UsageBucketRow[]>;

/** Most rows one report may have; a larger one asks for a narrower range or a coarser split. */
export const MAX_REPORT_ROWS = 50_000;

export class ReportTooLargeError extends Error {}

export const PERIOD_MS: Record<Granularity, number> = { hour: 3_600_000, day: 86_400_000 };

/** The rollup tables' bucket sizes and the column each keys its bucket by (the audit compares them with the records). */
const ROLLUP_SIZE = { daily: PERIOD_MS.day, hourly: PERIOD_MS.hour } as const;
const ROLLUP_COLUMN = { daily: "day", hourly: "hour" } as const;

/**
 * The audit's statement, for both stores: rows of `usage_<rollup>` that are not the sums of their
 * records, or records no rollup row holds (first 1,000). `recordsWhere` limits the records to
 * those the rollup should already hold (SQLite's rollups run behind a mark; PostgreSQL's trigger
 * holds them all).
 */
export function rollupDriftSql(rollup: "daily" | "hourly", recordsWhere = ""): string {
  const size = ROLLUP_SIZE[rollup];
  const column = ROLLUP_COLUMN[rollup];
  return `WITH r AS (
      SELECT (created_at / ${size}) * ${size} AS period_start, account_id, key_id, model, COUNT(*) AS requests, SUM(cost_micro) AS cost,
             SUM(${ESTIMATED_ONE}) AS estimated
        FROM usage_records ${recordsWhere ? `WHERE ${recordsWhere}` : ""} GROUP BY 1, 2, 3, 4
    )
    SELECT '${rollup}' AS rollup, COALESCE(r.period_start, t.${column}) AS period_start, COALESCE(r.account_id, t.account_id) AS account_id,
           COALESCE(r.key_id, t.key_id) AS key_id, COALESCE(r.model, t.model) AS model,
           COALESCE(t.requests, 0) AS requests, COALESCE(r.requests, 0) AS expected_requests, COALESCE(t.cost_micro, 0) AS cost_micro, COALESCE(r.cost, 0) AS expected_micro,
           COALESCE(t.estimated_requests, 0) AS estimated_requests, COALESCE(r.estimated, 0) AS expected_estimated
      FROM r FULL OUTER JOIN usage_${rollup} t
        ON t.${column} = r.period_start AND t.account_id = r.account_id AND t.key_id = r.key_id AND t.model = r.model
     WHERE COALESCE(t.requests, 0) != COALESCE(r.requests, 0) OR COALESCE(t.cost_micro, 0) != COALESCE(r.cost, 0)
        OR COALESCE(t.estimated_requests, 0) != COALESCE(r.estimated, 0)
     LIMIT 1000`;
}

/**
 * The statement both stores run: periods are `created_at` (epoch ms) cut to whole UTC hours or
 * days by integer division, which SQLite and PostgreSQL both do for integers. Grouped columns come
 * from a fixed list, never from input; values are parameters (`?` for SQLite, `$n` for PostgreSQL).
 */
export function usageBreakdownSql(q: UsageQuery, dialect: "sqlite" | "postgres", o: { tailAfter?: string } = {}): { text: string; params: (string | number)[] } {
  const params: (string | number)[] = [];
  const p = (value: string | number) => {
    params.push(value);
    return dialect === "sqlite" ? "?" : `$${params.length}`;
  };
  const size = PERIOD_MS[q.granularity];
  const groups = new Set(q.groupBy);
  // Whole days by day, or whole hours (the console's ranges, and any report asked for them), read
  // a rollup; a range that cuts an hour reads the records themselves: every range is exact.
  // `tailAfter`: the same sums over the records a rollup does not hold yet (a condition on `u`),
  // which the store adds to the rollup's rows (mergeUsageRows).
  const source = o.tailAfter ? "usage_records" : usageSource(q);
  const time = source === "usage_daily" ? "u.day" : source === "usage_hourly" ? "u.hour" : "u.created_at";
  // A rollup read at its own period needs no rounding: the bare column lets the store group in
  // its primary key's order (period first) instead of sorting every row.
  const native = (source === "usage_daily" && q.granularity === "day") || (source === "usage_hourly" && q.granularity === "hour");
  const columns = [native ? `${time} AS period` : `(${time} / ${size}) * ${size} AS period`];
  const grouped = ["period"];
  for (const g of ["account", "key", "model"] as const) {
    if (!groups.has(g)) continue;
    const column = g === "account" ? "account_id" : g === "key" ? "key_id" : "model";
    columns.push(`u.${column}`);
    grouped.push(`u.${column}`);
  }
  if (native) grouped[0] = time;
  const order = ["period", ...grouped.slice(1)];
  // A key belongs to one account: grouping by account too makes the same groups, in the rollup's
  // key order (period, account, key, model), so keys are summed without a sort.
  if (native && groups.has("key") && !groups.has("account")) grouped.splice(1, 0, "u.account_id");
  columns.push(source === "usage_records" ? USAGE_SUMS_SQL : HOURLY_SUMS_SQL);
  const where = [`${time} >= ${p(q.from)}`, `${time} < ${p(q.to)}`];
  if (q.accountId) where.push(`u.account_id = ${p(q.accountId)}`);
  if (q.keyId) where.push(`u.key_id = ${p(q.keyId)}`);
  if (q.model) where.push(`u.model = ${p(q.model)}`);
  if (o.tailAfter) where.unshift(o.tailAfter);
  // Names are joined to the sums, not to every row summed: one lookup per row of the report.
  const names: string[] = [];
  const joins: string[] = [];
  if (groups.has("account")) {
    names.push("a.name AS account_name");
    joins.push("LEFT JOIN accounts a ON a.id = r.account_id");
  }
  if (groups.has("key")) {
    names.push("k.name AS key_name");
    joins.push("LEFT JOIN api_keys k ON k.id = r.key_id");
  }
  // The records past a mark are the newest few: read by id. With an account in the query SQLite
  // would take the account's index and read every record of the range (46 ms instead of 0.07 at
  // 500,000 records, by a review's measurement), which the rollup was there to avoid.
  const tailOnly = o.tailAfter && dialect === "sqlite" ? " NOT INDEXED" : "";
  // Ids sort byte by byte in both stores (PostgreSQL's default collation would not).
  const sorted = order.map((c) => c.replace("u.", "r.")).map((c) => (c === "period" || dialect === "sqlite" ? c : `${c} COLLATE "C"`));
  const text = `SELECT r.*${names.map((n) => `, ${n}`).join("")} FROM (
      SELECT ${columns.join(", ")} FROM ${source} u${tailOnly} WHERE ${where.join(" AND ")} GROUP BY ${grouped.join(", ")}
    ) r ${joins.join(" ")} ORDER BY ${sorted.map((c) => (c === "period" ? "r.period" : c)).join(", ")} LIMIT ${MAX_REPORT_ROWS + 1}`;
  return { text, params };
}

const tooLarge = () => new ReportTooLargeError(`The report would have more than ${MAX_REPORT_ROWS} rows: narrow the range, filter, or use granularity=day.`);

/**
 * A rollup's rows plus the same report over the records it does not hold yet. Both come sorted
 * as the report is (period, then the split's ids byte by byte, as SQLite's BINARY collation
 * compares them), so one pass merges them: rows of the same period and split are summed, the
 * others keep their order. The merged report has the same cap.
 */
export function mergeUsageRows(rolled: UsageBucketRow[], tail: UsageBucketRow[]): UsageBucketRow[] {
  if (tail.length === 0) return rolled;
  const merged: UsageBucketRow[] = [];
  let i = 0;
  let j = 0;
  while (i < rolled.length || j < tail.length) {
    const order = i === rolled.length ? 1 : j === tail.length ? -1 : reportOrder(rolled[i]!, tail[j]!);
    if (order < 0) merged.push(rolled[i++]!);
    else if (order > 0) merged.push(tail[j++]!);
    else {
      const r = rolled[i++]!;
      const t = tail[j++]!;
      for (const f of SUM_FIELDS) r[f] += t[f];
      merged.push(r);
    }
    if (merged.length > MAX_REPORT_ROWS) throw tooLarge();
  }
  return merged;
}

/** Two rows in the report's order: period, then account, key and model ids as UTF-8 bytes. */
function reportOrder(a: UsageBucketRow, b: UsageBucketRow): number {
  return a.period - b.period || byteOrder(a.account_id, b.account_id) || byteOrder(a.key_id, b.key_id) || byteOrder(a.model, b.model);
}

function byteOrder(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  return Buffer.compare(Buffer.from(a ?? ""), Buffer.from(b ?? ""));
}

/** Rows as the store returned them (PostgreSQL's bigints arrive as strings), checked against the cap. */
export function usageRows(raw: Record<string, unknown>[]): UsageBucketRow[] {
  if (raw.length > MAX_REPORT_ROWS) throw tooLarge();
  const n = (v: unknown) => (v === null || v === undefined ? 0 : Number(v));
  return raw.map((r) => ({
    period: n(r.period),
    ...("account_id" in r ? { account_id: String(r.account_id), account_name: (r.account_name as string | null) ?? null } : {}),
    ...("key_id" in r ? { key_id: String(r.key_id), key_name: (r.key_name as string | null) ?? null } : {}),
    ...("model" in r ? { model: String(r.model) } : {}),
    ...usageSums(r),
  }));
}

const SHOWN_SUMS = Object.keys(shownSums(usageSums({})));

/** The columns of a report, in order: the period, what it is split by, then the sums. */
function reportColumns(q: UsageQuery): string[] {
  const groups = new Set(q.groupBy);
  return [
    "period_start",
    ...(groups.has("account") ? ["account_id", "account_name"] : []),
    ...(groups.has("key") ? ["key_id", "key_name"] : []),
    ...(groups.has("model") ? ["model"] : []),
    ...SHOWN_SUMS,
  ];
}

function reportRecord(r: UsageBucketRow): Record<string, string | number | null> {
  return {
    period_start: new Date(r.period).toISOString(),
    ...(r.account_id !== undefined ? { account_id: r.account_id, account_name: r.account_name ?? null } : {}),
    ...(r.key_id !== undefined ? { key_id: r.key_id, key_name: r.key_name ?? null } : {}),
    ...(r.model !== undefined ? { model: r.model } : {}),
    ...shownSums(r),
  };
}

/** The report as JSON: one entry per period and group, and the totals. */
export function shapeBreakdown(q: UsageQuery, rows: UsageBucketRow[]) {
  return {
    object: "usage_report",
    from: new Date(q.from).toISOString(),
    to: new Date(q.to).toISOString(),
    granularity: q.granularity,
    group_by: USAGE_GROUPS.filter((g) => q.groupBy.includes(g)),
    columns: reportColumns(q),
    data: rows.map(reportRecord),
    total: shownSums(totalOf(rows)),
  };
}

/** The report as CSV (RFC 4180: CRLF line ends, fields quoted when they need it), with a header row. */
export function breakdownCsv(q: UsageQuery, rows: UsageBucketRow[]): string {
  const columns = reportColumns(q);
  const field = (value: string | number | null | undefined) => {
    if (value === null || value === undefined) return "";
    const text = String(value);
    // A leading = + - @ would be a formula to a spreadsheet; names come from whoever made the account.
    const safe = /^[=+\-@\t\r]/.test(text) && typeof value === "string" ? `'${text}` : text;
    return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
  };
  const lines = [columns.join(",")];
  for (const r of rows) {
    const record = reportRecord(r);
    lines.push(columns.map((c) => field(record[c])).join(","));
  }
  return lines.join("\r\n") + "\r\n";
}
