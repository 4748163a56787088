import type { Database } from "bun:sqlite";
import { ESTIMATED_ONE } from "../../billing/usage-report.ts";

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
 *
 * The ledger tells the folder each record it inserts (`added`), so a fold usually needs no scan:
 * the sums are kept in memory as the records go in, and the fold writes them. Reading the records
 * back (two GROUP BY scans of everything since the last fold) was ~2 % of the gateway's CPU at 32
 * connections. The sums in memory are used only when they are provably the records past the
 * mark: as many records as ids between the mark and the last record, the first and the last of
 * them the ones told. Anything else (a fresh process with records a previous one left, a
 * transaction rolled back, another connection that folded or wrote) folds from the records.
 */

/** How often the rollups catch up with the records: a fold's cost grows with what it folds. */
export const FOLD_INTERVAL_MS = 250;

/** One hour's or day's bucket of a record's time, as the rollups key it. */
const bucket = (size: number) => `(created_at / ${size}) * ${size}`;

const SUMS = `COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens),
  SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens), SUM(reasoning_tokens), SUM(images), SUM(cost_micro), SUM(cache_savings_micro),
  SUM(${ESTIMATED_ONE})`;

const ADD = `requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
  completion_tokens = completion_tokens + excluded.completion_tokens, fresh_input_tokens = fresh_input_tokens + excluded.fresh_input_tokens,
  cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, cache_write_5m_tokens = cache_write_5m_tokens + excluded.cache_write_5m_tokens,
  cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens, reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
  images = images + excluded.images, cost_micro = cost_micro + excluded.cost_micro, cache_savings_micro = cache_savings_micro + excluded.cache_savings_micro,
  estimated_requests = estimated_requests + excluded.estimated_requests`;

/** The records past the mark, up to ?1, added to a rollup (its WHERE lets SQLite parse the upsert after a SELECT). */
const foldInto = (table: "usage_hourly" | "usage_daily", size: number) =>
  `INSERT INTO ${table} SELECT ${bucket(size)}, account_id, key_id, model, ${SUMS}
     FROM usage_records WHERE id > (SELECT record_id FROM usage_rollup_mark) AND id <= ?1 GROUP BY 1, 2, 3, 4
     ON CONFLICT DO UPDATE SET ${ADD}`;

/** The condition that picks the records the rollups do not hold yet (usage_records as `u`). */
export const PAST_ROLLUP_MARK = "u.id > (SELECT record_id FROM usage_rollup_mark)";

export interface RollupFolder {
  /**
   * A usage record this transaction inserts, with what the rollups sum of it (`freshInput`: the
   * record's fresh input as the rollups count it, the prompt where the record has no classes).
   * `inserted` then says which ids the records told took.
   */
  added(at: number, accountId: string, keyId: string, model: string, promptTokens: number, completionTokens: number, freshInput: number,
    cacheRead: number, cacheWrite5m: number, cacheWrite1h: number, reasoning: number, images: number, costMicro: number, cacheSavingsMicro: number,
    estimated: boolean): void;
  /** The ids `firstId`..`lastId` went to records told by `added`, in the order told. */
  inserted(firstId: number, lastId: number): void;
  /** Folds what is past the mark, when the last fold is older than the interval; call inside a write transaction. Returns how far the mark moved. */
  foldIfDue(at: number): number;
  /** Folds now whatever is past the mark; call inside a write transaction. */
  fold(): number;
  /** The transaction was rolled back (the fold's, or one that told `added`): the next fold is due at once, from the records. */
  rolledBack(): void;
  /** Folds so far that wrote the sums kept in memory, and those that read the records. */
  readonly folds: { fromSums: number; fromRecords: number };
}

/** One group's sums: an hour's or a day's bucket (its start), an account, a key, a model. */
interface Sums {
  start: number;
  accountId: string;
  keyId: string;
  model: string;
  /** requests, prompt, completion, fresh input, cache read, 5m write, 1h write, reasoning, images, cost, cache savings, estimated requests */
  values: number[];
}

const SUM_COLUMNS = 12;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** The group of `groups` for a bucket, account, key and model, empty when first asked for. */
function groupIn(groups: Map<string, Sums>, start: number, accountId: string, keyId: string, model: string): Sums {
  const id = `${start}\u0000${accountId}\u0000${keyId}\u0000${model}`;
  let group = groups.get(id);
  if (!group) groups.set(id, (group = { start, accountId, keyId, model, values: new Array<number>(SUM_COLUMNS).fill(0) }));
  return group;
}
const upsertInto = (table: "usage_hourly" | "usage_daily") =>
  `INSERT INTO ${table} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) ON CONFLICT DO UPDATE SET ${ADD}`;

export function createRollupFolder(db: Database): RollupFolder {
  const last = db.query<{ id: number | null }, []>("SELECT MAX(id) AS id FROM usage_records");
  const mark = db.query<{ record_id: number }, []>("SELECT record_id FROM usage_rollup_mark");
  const hourly = db.query(foldInto("usage_hourly", HOUR_MS));
  const daily = db.query(foldInto("usage_daily", DAY_MS));
  const upsertHourly = db.query(upsertInto("usage_hourly"));
  const upsertDaily = db.query(upsertInto("usage_daily"));
  const move = db.query("UPDATE usage_rollup_mark SET record_id = ?1");
  let foldedAt = Number.NEGATIVE_INFINITY;
  const folds = { fromSums: 0, fromRecords: 0 };

  // The records told since the last fold, summed per hour, account, key and model.
  let groups = new Map<string, Sums>();
  let told = 0;
  /** The ids the told records took, while they are one run of consecutive ids. */
  let firstId = 0;
  let lastId = 0;
  let gap = false;
  /** The group the previous record went to: records of one batch mostly share it. */
  let recent: Sums | undefined;
  const forget = () => {
    groups = new Map();
    told = 0;
    firstId = lastId = 0;
    gap = false;
    recent = undefined;
  };

  const writeSums = () => {
    const days = new Map<string, Sums>();
    for (const g of groups.values()) {
      upsertHourly.run(g.start, g.accountId, g.keyId, g.model, ...g.values);
      const d = groupIn(days, Math.floor(g.start / DAY_MS) * DAY_MS, g.accountId, g.keyId, g.model);
      for (let i = 0; i < SUM_COLUMNS; i++) d.values[i]! += g.values[i]!;
    }
    for (const d of days.values()) upsertDaily.run(d.start, d.accountId, d.keyId, d.model, ...d.values);
  };

  const fold = () => {
    const upTo = last.get()?.id ?? 0;
    const from = mark.get()?.record_id ?? 0;
    const exact = !gap && told > 0 && told === upTo - from && firstId === from + 1 && lastId === upTo;
    if (upTo > from) {
      if (exact) {
        writeSums();
        folds.fromSums++;
      } else {
        hourly.run(upTo);
        daily.run(upTo);
        folds.fromRecords++;
      }
      move.run(upTo);
    }
    forget();
    return Math.max(0, upTo - from);
  };

  return {
    added(at, accountId, keyId, model, promptTokens, completionTokens, freshInput, cacheRead, cacheWrite5m, cacheWrite1h, reasoning, images, costMicro, cacheSavingsMicro, estimated) {
      const hour = Math.floor(at / HOUR_MS) * HOUR_MS;
      let g = recent;
      if (!g || g.start !== hour || g.accountId !== accountId || g.keyId !== keyId || g.model !== model) recent = g = groupIn(groups, hour, accountId, keyId, model);
      const v = g.values;
      v[0]! += 1;
      v[1]! += promptTokens;
      v[2]! += completionTokens;
      v[3]! += freshInput;
      v[4]! += cacheRead;
      v[5]! += cacheWrite5m;
      v[6]! += cacheWrite1h;
      v[7]! += reasoning;
      v[8]! += images;
      v[9]! += costMicro;
      v[10]! += cacheSavingsMicro;
      if (estimated) v[11]! += 1;
      told++;
    },
    inserted(first, last) {
      if (lastId === 0) firstId = first;
      else if (first !== lastId + 1) gap = true;
      lastId = last;
    },
    foldIfDue(at) {
      if (at - foldedAt < FOLD_INTERVAL_MS) return 0;
      foldedAt = at;
      return fold();
    },
    fold,
    rolledBack() {
      foldedAt = Number.NEGATIVE_INFINITY;
      forget();
    },
    folds,
  };
}

/** Folds everything past the mark in a transaction of its own (for tools and tests; the ledger folds inside its batches). */
export function foldRollups(db: Database): number {
  const folder = createRollupFolder(db);
  return db.transaction(() => folder.fold()).immediate();
}
