import type { Database } from "bun:sqlite";

/**
 * The hourly and daily usage rollups on SQLite, folded from the records behind a mark instead of
 * by a trigger per record.
 *
 * A trigger made every settlement's commit upsert two rollup rows: about 6 µs of the gateway's
 * CPU per request at 32 connections (a quarter of what settling costs), and two more pages in the
 * write-ahead log of every commit of a lone request (bench/ledger-settle.ts measures both). Folding
 * runs once per `FOLD_INTERVAL_MS` inside a settlement batch's transaction (or the idle probe's):
 * the records past the mark, summed per hour / day, account, key and model, one upsert per group,
 * and the mark moved in the same transaction. A crash between two folds loses nothing: the
 * records past the mark are where they were, and the next fold takes them.
 *
 * Readers add the records past the mark to what the rollups say (sqlite-usage-report.ts), so a
 * report is exact at any moment, not only after a fold.
 */

/** How often the rollups catch up with the records: a fold's cost grows with what it folds. */
export const FOLD_INTERVAL_MS = 250;

/** One hour's or day's bucket of a record's time, as the rollups key it. */
const bucket = (size: number) => `(created_at / ${size}) * ${size}`;

const SUMS = `COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens),
  SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens), SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro)`;

const ADD = `requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
  completion_tokens = completion_tokens + excluded.completion_tokens, fresh_input_tokens = fresh_input_tokens + excluded.fresh_input_tokens,
  cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, cache_write_5m_tokens = cache_write_5m_tokens + excluded.cache_write_5m_tokens,
  cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens, reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
  images = images + excluded.images, cost_micro = cost_micro + excluded.cost_micro, cache_savings_micro = cache_savings_micro + excluded.cache_savings_micro`;

/** The records past the mark, up to ?1, added to a rollup (its WHERE lets SQLite parse the upsert after a SELECT). */
const foldInto = (table: "usage_hourly" | "usage_daily", size: number) =>
  `INSERT INTO ${table} SELECT ${bucket(size)}, account_id, key_id, model, ${SUMS}
     FROM usage_records WHERE id > (SELECT record_id FROM usage_rollup_mark) AND id <= ?1 GROUP BY 1, 2, 3, 4
     ON CONFLICT DO UPDATE SET ${ADD}`;

/** The condition that picks the records the rollups do not hold yet (usage_records as `u`). */
export const PAST_ROLLUP_MARK = "u.id > (SELECT record_id FROM usage_rollup_mark)";

export interface RollupFolder {
  /** Folds what is past the mark, when the last fold is older than the interval; call inside a write transaction. Returns how far the mark moved. */
  foldIfDue(at: number): number;
  /** Folds now whatever is past the mark; call inside a write transaction. */
  fold(): number;
  /** The fold's transaction was rolled back: the next one is due at once. */
  rolledBack(): void;
}

export function createRollupFolder(db: Database): RollupFolder {
  const last = db.query<{ id: number | null }, []>("SELECT MAX(id) AS id FROM usage_records");
  const mark = db.query<{ record_id: number }, []>("SELECT record_id FROM usage_rollup_mark");
  const hourly = db.query(foldInto("usage_hourly", 3_600_000));
  const daily = db.query(foldInto("usage_daily", 86_400_000));
  const move = db.query("UPDATE usage_rollup_mark SET record_id = ?1");
  let foldedAt = Number.NEGATIVE_INFINITY;
  const fold = () => {
    const upTo = last.get()?.id ?? 0;
    const from = mark.get()?.record_id ?? 0;
    if (upTo <= from) return 0;
    hourly.run(upTo);
    daily.run(upTo);
    move.run(upTo);
    return upTo - from;
  };
  return {
    foldIfDue(at) {
      if (at - foldedAt < FOLD_INTERVAL_MS) return 0;
      foldedAt = at;
      return fold();
    },
    fold,
    rolledBack() {
      foldedAt = Number.NEGATIVE_INFINITY;
    },
  };
}

/** Folds everything past the mark in a transaction of its own (for tools and tests; the ledger folds inside its batches). */
export function foldRollups(db: Database): number {
  const folder = createRollupFolder(db);
  return db.transaction(() => folder.fold()).immediate();
}
