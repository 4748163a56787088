import type { RecordCounts } from "./usage-report.ts";
import { cacheSavingsMicro, classesCostMicro, type PriceList, type TokenClasses } from "./pricing.ts";

/**
 * The audit's recomputation of one usage record (issue 29): from its token classes and the price
 * list it names, its charge must come out again to the micro-credit. Pure; each store reads its
 * records (with the price list's stored JSON) and hands them here.
 */

/** A usage record as the audit reads it: classes, what was charged and held, and its price list's JSON. */
export interface PricedRecord extends RecordCounts {
  request_id: string;
  /** What the request held, where it capped the charge; null when the charge is the price book's sum. */
  held_micro: number | null;
  /** The price list's stored JSON; null when the record names one that is missing. */
  prices: string | null;
}

export interface Mispriced {
  request_id: string;
  problem: string;
  cost_micro: number;
  /** What the classes at the record's prices, capped by its hold, come to. */
  expected_micro: number;
}

/** The columns a store selects for PricedRecord, records joined with their price list (`u`, `p`). */
export const PRICED_RECORD_COLUMNS = `u.request_id, u.prompt_tokens, u.completion_tokens, u.fresh_input_tokens, u.cache_read_tokens, u.cache_write_5m_tokens,
  u.cache_write_1h_tokens, u.reasoning_tokens, u.images, u.cost_micro, u.held_micro, u.cache_savings_micro, p.prices`;

/**
 * A record of service given and not charged, for either store: a completed answer with tokens and
 * no charge, or a charge the store refused (it writes the record's hold as 0, where the hold capped
 * the charge to nothing; a record charged nothing by design has no hold written).
 */
export const UNCHARGED_WHERE = "(status = 'ok' OR held_micro = 0) AND cost_micro = 0 AND prompt_tokens + completion_tokens > 0";

/** Reads a record's numbers as numbers (PostgreSQL's bigints arrive as strings). */
export function pricedRecord(r: Record<string, unknown>): PricedRecord {
  const n = (v: unknown) => Number(v ?? 0);
  return {
    request_id: String(r.request_id), prompt_tokens: n(r.prompt_tokens), completion_tokens: n(r.completion_tokens), fresh_input_tokens: n(r.fresh_input_tokens),
    cache_read_tokens: n(r.cache_read_tokens), cache_write_5m_tokens: n(r.cache_write_5m_tokens), cache_write_1h_tokens: n(r.cache_write_1h_tokens),
    reasoning_tokens: n(r.reasoning_tokens), images: n(r.images), cost_micro: n(r.cost_micro), held_micro: r.held_micro === null || r.held_micro === undefined ? null : n(r.held_micro), cache_savings_micro: n(r.cache_savings_micro),
    prices: typeof r.prices === "string" ? r.prices : null,
  };
}

/**
 * A checker that keeps each price list parsed once. Answers what is wrong with a record, or
 * undefined when its classes add up to its totals and its charge is the price book's.
 */
export function createRecordChecker(): (r: PricedRecord) => Mispriced | undefined {
  const parsed = new Map<string, PriceList | undefined>();
  const priceList = (json: string): PriceList | undefined => {
    if (!parsed.has(json)) {
      let list: PriceList | undefined;
      try {
        const p = JSON.parse(json) as Record<string, unknown>;
        const fields = ["input", "output", "cacheRead", "cacheWrite5m", "cacheWrite1h", "perImage"] as const;
        if (fields.every((f) => typeof p[f] === "number" && Number.isFinite(p[f]) && (p[f] as number) >= 0)) list = p as unknown as PriceList;
      } catch {}
      parsed.set(json, list);
    }
    return parsed.get(json);
  };
  return (r) => {
    const bad = (problem: string, expected = r.cost_micro): Mispriced => ({ request_id: r.request_id, problem, cost_micro: r.cost_micro, expected_micro: expected });
    if (r.prices === null) return bad("the record names a price list the store does not have");
    const prices = priceList(r.prices);
    if (!prices) return bad("the record's price list cannot be read");
    const classes: TokenClasses = {
      freshInput: r.fresh_input_tokens, cacheRead: r.cache_read_tokens, cacheWrite5m: r.cache_write_5m_tokens, cacheWrite1h: r.cache_write_1h_tokens,
      output: r.completion_tokens, reasoning: r.reasoning_tokens, images: r.images,
    };
    if (Object.values(classes).some((n) => !Number.isSafeInteger(n) || n < 0)) return bad("a token class is negative or not a whole number");
    if (classes.freshInput + classes.cacheRead + classes.cacheWrite5m + classes.cacheWrite1h !== r.prompt_tokens) {
      return bad(`the prompt's classes add up to ${classes.freshInput + classes.cacheRead + classes.cacheWrite5m + classes.cacheWrite1h}, not prompt_tokens ${r.prompt_tokens}`);
    }
    if (classes.reasoning > r.completion_tokens) return bad(`reasoning_tokens ${classes.reasoning} exceed completion_tokens ${r.completion_tokens}`);
    const priced = classesCostMicro(classes, prices);
    const expected = r.held_micro === null ? priced : Math.min(priced, r.held_micro);
    if (r.cost_micro !== expected) return bad("the charge is not the price book's sum of its classes (capped by its hold)", expected);
    const savings = cacheSavingsMicro(classes, prices);
    if (r.cache_savings_micro !== savings) return bad(`cache_savings_micro ${r.cache_savings_micro} is not the recomputed ${savings}`);
    return undefined;
  };
}
