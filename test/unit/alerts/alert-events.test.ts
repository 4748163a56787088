import { expect, test } from "bun:test";
import { eventIdFor, lowBalanceEvent, thresholdEvents } from "../../../src/alerts/alert-events.ts";
import { retryDelay } from "../../../src/alerts/alert-dispatcher.ts";
import type { SpendStatus } from "../../../src/accounts/account-store.ts";

const NOW = Date.UTC(2026, 10, 27, 15);
const status = (o: Partial<SpendStatus>): SpendStatus => ({ id: "key_a", name: "a", accountId: "acct_a", balanceMicro: null, limitMicro: 10_000_000, period: null, windowStart: 0, spentInPeriodMicro: 0, ...o });

test("thresholds: each reached one is due, keyed by scope, id, window start and threshold", () => {
  expect(thresholdEvents("key", status({ spentInPeriodMicro: 4_999_999 }), NOW)).toEqual([]);
  const lifetime = thresholdEvents("key", status({ spentInPeriodMicro: 8_000_000 }), NOW);
  expect(lifetime.map((e) => e.dedupeKey)).toEqual(["key:key_a:0:50", "key:key_a:0:80"]);
  expect(JSON.parse(lifetime[1]!.body)).toMatchObject({ id: eventIdFor("key:key_a:0:80"), type: "spend_limit.threshold", data: { threshold: 80, limit: 10, spent_in_period: 8, period: null, period_start: null, period_resets_at: null } });
  const monday = Date.UTC(2026, 10, 23);
  const weekly = thresholdEvents("account", status({ id: "acct_a", period: "week", windowStart: monday, spentInPeriodMicro: 12_000_000 }), NOW);
  expect(weekly.map((e) => e.dedupeKey)).toEqual([`account:acct_a:${monday}:50`, `account:acct_a:${monday}:80`, `account:acct_a:${monday}:100`]);
  expect(JSON.parse(weekly[2]!.body).data).toMatchObject({ period_start: "2026-11-23T00:00:00.000Z", period_resets_at: "2026-11-30T00:00:00.000Z" });
  // No limit, or a zero limit (nothing may be spent): nothing to cross.
  expect(thresholdEvents("key", status({ limitMicro: null, spentInPeriodMicro: 5 }), NOW)).toEqual([]);
  expect(thresholdEvents("key", status({ limitMicro: 0 }), NOW)).toEqual([]);
});

test("balance.low: below the threshold only, keyed by the latest credit entry; ids follow the dedupe key", () => {
  const account = status({ id: "acct_a", balanceMicro: 4_000_000 });
  expect(lowBalanceEvent(account, 4_000_000, 7, NOW)).toBeUndefined();
  const event = lowBalanceEvent({ ...account, balanceMicro: 3_999_999 }, 4_000_000, 7, NOW)!;
  expect(event.dedupeKey).toBe("balance:acct_a:4000000:7");
  expect(event.eventId).toBe(eventIdFor(event.dedupeKey));
  expect(lowBalanceEvent({ ...account, balanceMicro: 1 }, 4_000_000, 7, NOW)!.eventId).toBe(event.eventId);
  expect(lowBalanceEvent({ ...account, balanceMicro: 1 }, 4_000_000, 8, NOW)!.eventId).not.toBe(event.eventId);
});

test("backoff: from the initial delay, doubling, capped", () => {
  expect([1, 2, 3, 4, 5, 6, 7, 8, 100].map((n) => retryDelay(n, 1_000, 60_000))).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
});
