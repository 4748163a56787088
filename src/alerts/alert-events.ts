import type { SpendStatus } from "../accounts/account-store.ts";
import { microToCredits } from "../billing/money.ts";
import { periodWindow } from "../billing/spend-period.ts";
import type { OutboxEvent } from "./alert-outbox.ts";

/**
 * Which spend alerts a key's or an account's state calls for (pure: the state and the clock are
 * arguments). Every crossing has a dedupe key, and the event id is derived from it, so however
 * often a crossing is detected (after each commit, at every start, by several processes) the
 * outbox holds it once and the receiver never sees two ids for it.
 */

/** Percentages of a spend limit that send `spend_limit.threshold`. */
export const THRESHOLDS = [50, 80, 100] as const;

export type AlertEvent =
  | { id: string; type: "spend_limit.threshold"; created_at: string; data: ThresholdData }
  | { id: string; type: "balance.low"; created_at: string; data: LowBalanceData };

export interface ThresholdData {
  scope: "key" | "account";
  id: string;
  name: string | null;
  account_id: string;
  threshold: (typeof THRESHOLDS)[number];
  /** Credits. */
  limit: number;
  spent_in_period: number;
  period: "day" | "week" | "month" | null;
  /** ISO times of the window; null for a lifetime limit. */
  period_start: string | null;
  period_resets_at: string | null;
}

export interface LowBalanceData {
  account_id: string;
  name: string | null;
  balance: number;
  threshold: number;
}

/** `evt_` and 32 hex digits of the dedupe key's SHA-256: the same crossing, the same id. */
export function eventIdFor(dedupeKey: string): string {
  return `evt_${(Bun.SHA256.hash(dedupeKey, "hex") as string).slice(0, 32)}`;
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Thresholds crossed in the current window, each keyed by the window's start (0 for a lifetime
 * limit): the next period fires again. A limit changed within a period does not re-send a
 * threshold already sent in it.
 */
export function thresholdEvents(scope: "key" | "account", s: SpendStatus, now: number): OutboxEvent[] {
  const limit = s.limitMicro;
  if (limit === null || limit <= 0) return [];
  const window = s.period === null ? null : periodWindow(s.period, s.windowStart);
  const events: OutboxEvent[] = [];
  for (const threshold of THRESHOLDS) {
    // Integers: micro-credits times 100 stay far below 2^53.
    if (s.spentInPeriodMicro * 100 < limit * threshold) break;
    const dedupeKey = `${scope}:${s.id}:${s.windowStart}:${threshold}`;
    const id = eventIdFor(dedupeKey);
    const event: AlertEvent = {
      id,
      type: "spend_limit.threshold",
      created_at: iso(now),
      data: {
        scope,
        id: s.id,
        name: s.name,
        account_id: s.accountId,
        threshold,
        limit: microToCredits(limit),
        spent_in_period: microToCredits(s.spentInPeriodMicro),
        period: s.period,
        period_start: window ? iso(window.start) : null,
        period_resets_at: window ? iso(window.resetsAt) : null,
      },
    };
    events.push({ eventId: id, dedupeKey, type: event.type, body: JSON.stringify(event), createdAt: now });
  }
  return events;
}

/**
 * `balance.low` once per crossing: keyed by the account's latest credit entry, so it fires once
 * until the account is credited again, and the next fall below fires anew.
 */
export function lowBalanceEvent(s: SpendStatus, thresholdMicro: number, creditMark: number, now: number): OutboxEvent | undefined {
  if (s.balanceMicro === null || s.balanceMicro >= thresholdMicro) return undefined;
  const dedupeKey = `balance:${s.id}:${thresholdMicro}:${creditMark}`;
  const id = eventIdFor(dedupeKey);
  const event: AlertEvent = {
    id,
    type: "balance.low",
    created_at: iso(now),
    data: { account_id: s.id, name: s.name, balance: microToCredits(s.balanceMicro), threshold: microToCredits(thresholdMicro) },
  };
  return { eventId: id, dedupeKey, type: event.type, body: JSON.stringify(event), createdAt: now };
}
