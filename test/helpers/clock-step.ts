import { expect } from "bun:test";
import type { Ledger } from "../../src/billing/ledger.ts";

/**
 * A key with a daily spend limit of 1 credit charged 0.9 just after 00:00 UTC; the clock steps back
 * 60 s across midnight and returns: no second 0.9 may pass in either day's window (a fault probe
 * let 1.8 credits through one day). `clock` is the ledger's `now`, moved here.
 */
export async function clockStepBackAcrossMidnight(ledger: Ledger, clock: { now: number }, ids: { accountId: string; keyId: string }): Promise<void> {
  let n = 0;
  const charge = async () => {
    const requestId = `req_clock_${++n}_${ids.keyId}`;
    const r = await ledger.reserve({ requestId, ...ids, amountMicro: 900_000 });
    if (r.ok) await ledger.settle({ requestId, ...ids, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 900_000, status: "ok", latencyMs: 1 });
    return r.ok ? "charged" : (r as { reason: string }).reason;
  };
  expect(await charge()).toBe("charged");
  expect(await charge()).not.toBe("charged");
  clock.now -= 60_000; // 23:59:30 the day before
  expect(await charge()).not.toBe("charged");
  clock.now += 65_000; // 00:00:35, the same day as the first
  expect(await charge()).not.toBe("charged");
  // The next day the limit is whole again.
  clock.now += 86_400_000;
  expect(await charge()).toBe("charged");
}

/** 00:00:30 UTC on a day: where clockStepBackAcrossMidnight starts. */
export const JUST_AFTER_MIDNIGHT = Date.UTC(2026, 11, 1, 0, 0, 30);
