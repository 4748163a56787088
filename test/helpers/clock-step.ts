import { expect } from "bun:test";
import type { Ledger } from "../../src/billing/ledger.ts";

/**
 * A key with a daily spend limit of 1 credit charged 0.3 at a time from just after 00:00 UTC; the
 * clock steps back 60 s across midnight and returns: no more than the limit may pass in either
 * day's window (a fault probe let 1.8 credits through one day with 0.9 charges, and a reviewer 6
 * with 0.3 ones once the count stopped going backwards but charges stamped behind it moved
 * nothing). `clock` is the ledger's `now`, moved here. Returns the charges that passed.
 */
export async function clockStepBackAcrossMidnight(ledger: Ledger, clock: { now: number }, ids: { accountId: string; keyId: string }): Promise<number> {
  let n = 0;
  let passed = 0;
  const charge = async () => {
    const requestId = `req_clock_${++n}_${ids.keyId}`;
    const r = await ledger.reserve({ requestId, ...ids, amountMicro: 300_000 });
    if (!r.ok) return false;
    await ledger.settle({ requestId, ...ids, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 300_000, status: "ok", latencyMs: 1 });
    passed++;
    return true;
  };
  expect(await charge()).toBe(true);
  clock.now -= 60_000; // 23:59:30 the day before
  // Behind the clock, the day's room is what is left of the limit: two more, then no more.
  const behind: boolean[] = [];
  for (let i = 0; i < 10; i++) behind.push(await charge());
  expect(behind).toEqual([true, true, ...new Array(8).fill(false)]);
  clock.now += 65_000; // 00:00:35, the same day as the first
  expect(await charge()).toBe(false);
  // The next day the limit is whole again.
  clock.now += 86_400_000;
  expect(await charge()).toBe(true);
  return passed;
}

/** 00:00:30 UTC on a day: where clockStepBackAcrossMidnight starts. */
export const JUST_AFTER_MIDNIGHT = Date.UTC(2026, 11, 1, 0, 0, 30);

/**
 * The clock runs 30 days ahead, a key spends its daily limit there, the clock is put right: the
 * next real day the limit is whole again (not locked until the day the clock had reached), and
 * the ledger stamps what it writes at the right time again, not a month ahead.
 */
export async function clockAheadThenPutRight(ledger: Ledger, clock: { now: number }, ids: { accountId: string; keyId: string }): Promise<void> {
  let n = 0;
  const charge = async () => {
    const requestId = `req_ahead_${++n}_${ids.keyId}`;
    const r = await ledger.reserve({ requestId, ...ids, amountMicro: 500_000 });
    if (!r.ok) return false;
    await ledger.settle({ requestId, ...ids, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 500_000, status: "ok", latencyMs: 1 });
    return true;
  };
  const real = clock.now;
  clock.now = real + 30 * 86_400_000;
  expect([await charge(), await charge(), await charge()]).toEqual([true, true, false]);
  clock.now = real + 86_400_000; // put right, and a day on
  // The day's limit, whole and counted again: two charges, then no more (the far window's count
  // read 0 and never moved, so every charge passed; a reviewer's finding).
  expect([await charge(), await charge(), await charge()]).toEqual([true, true, false]);
}
