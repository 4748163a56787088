import { describe, expect, test } from "bun:test";
import { BalanceCapError, DebitRefusedError, IdempotencyConflictError, type Ledger, type Settlement } from "../../src/billing/ledger.ts";
import { MAX_BALANCE_MICRO } from "../../src/billing/money.ts";

/** What a contract run needs from an implementation: a fresh ledger and a way to fund accounts. */
export interface LedgerFixture {
  ledger: Ledger;
  /** A new account with this balance and one key (with an optional spend limit), in micro-credits. */
  fund(balanceMicro: number, keySpendLimitMicro?: number): Promise<{ accountId: string; keyId: string }>;
  /** Usage records written for a request id (the implementation's own table). */
  records(requestId: string): Promise<{ cost_micro: number; status: string }[]>;
  close(): Promise<void>;
}

let sequence = 0;
const requestId = () => `req_contract_${Date.now().toString(36)}_${(sequence++).toString(36)}`;

export function settlement(who: { accountId: string; keyId: string }, id: string, costMicro: number, status = "ok"): Settlement {
  return { requestId: id, accountId: who.accountId, keyId: who.keyId, model: "test/model", provider: "test", promptTokens: 10, completionTokens: 20, estimated: false, costMicro, status, latencyMs: 5 };
}

/**
 * The Ledger contract: every implementation (SQLite now, PostgreSQL next, and the fault-injecting
 * wrapper with no fault armed) passes the same suite.
 */
export function ledgerContract(name: string, make: () => Promise<LedgerFixture>): void {
  describe(`Ledger contract: ${name}`, () => {
    const withLedger = (fn: (f: LedgerFixture) => Promise<void>) => async () => {
      const f = await make();
      try {
        await fn(f);
      } finally {
        await f.close();
      }
    };

    test("a hold within the balance is granted; one beyond what is free is refused with what is free", withLedger(async (f) => {
      const who = await f.fund(1_000);
      expect(await f.ledger.reserve({ requestId: requestId(), ...who, amountMicro: 600 })).toEqual({ ok: true });
      expect(await f.ledger.reserve({ requestId: requestId(), ...who, amountMicro: 600 })).toEqual({ ok: false, reason: "balance", availableMicro: 400 });
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000, heldMicro: 600 });
    }));

    test("a key's spend limit is a second ceiling", withLedger(async (f) => {
      const who = await f.fund(10_000, 500);
      expect(await f.ledger.reserve({ requestId: requestId(), ...who, amountMicro: 501 })).toEqual({ ok: false, reason: "key_spend_limit", availableMicro: 500, limitMicro: 500, period: null, resetsAt: null });
      expect((await f.ledger.reserve({ requestId: requestId(), ...who, amountMicro: 500 })).ok).toBe(true);
    }));

    test("settle charges what was used, at most the hold, writes one record and lifts the hold", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const [a, b] = [requestId(), requestId()];
      await f.ledger.reserve({ requestId: a, ...who, amountMicro: 300 });
      await f.ledger.reserve({ requestId: b, ...who, amountMicro: 300 });
      await f.ledger.settle(settlement(who, a, 120));
      await f.ledger.settle(settlement(who, b, 999)); // more than held: the hold is the ceiling
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000 - 120 - 300, heldMicro: 0 });
      expect(await f.records(a)).toEqual([{ cost_micro: 120, status: "ok" }]);
      expect(await f.records(b)).toEqual([{ cost_micro: 300, status: "ok" }]);
      expect(f.ledger.openHolds()).toBe(0);
    }));

    test("settling the same request twice charges once (in one batch, and after the first is written)", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const id = requestId();
      await f.ledger.reserve({ requestId: id, ...who, amountMicro: 500 });
      await Promise.all([f.ledger.settle(settlement(who, id, 200)), f.ledger.settle(settlement(who, id, 200))]);
      await f.ledger.settle(settlement(who, id, 200));
      await f.ledger.flush();
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(800);
      expect(await f.records(id)).toHaveLength(1);
    }));

    test("a batch of many settlements (several INSERT chunks) charges each new record once, and nothing for one already recorded", withLedger(async (f) => {
      const who = await f.fund(1_000_000);
      const again = requestId();
      await f.ledger.reserve({ requestId: again, ...who, amountMicro: 100 });
      await f.ledger.settle(settlement(who, again, 100));
      // Held again under the same id (a replay): its record exists, so it is not charged a second time.
      await f.ledger.reserve({ requestId: again, ...who, amountMicro: 100 });
      const ids = Array.from({ length: 150 }, () => requestId());
      for (const id of ids) await f.ledger.reserve({ requestId: id, ...who, amountMicro: 10 });
      await Promise.all([
        ...ids.map((id) => f.ledger.settle(settlement(who, id, 7))),
        f.ledger.settle(settlement(who, again, 100)),
        f.ledger.settle(settlement(who, ids[70]!, 7)),
      ]);
      await f.ledger.flush();
      expect((await f.ledger.balance(who.accountId))!).toEqual({ balanceMicro: 1_000_000 - 100 - 150 * 7, heldMicro: 0 });
      expect(await f.records(again)).toHaveLength(1);
      expect(await f.records(ids[70]!)).toHaveLength(1);
      expect(await f.records(ids[0]!)).toEqual([{ cost_micro: 7, status: "ok" }]);
      expect(await f.records(ids[149]!)).toEqual([{ cost_micro: 7, status: "ok" }]);
      expect(f.ledger.openHolds()).toBe(0);
    }));

    test("reserving the same request twice holds once", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const id = requestId();
      await f.ledger.reserve({ requestId: id, ...who, amountMicro: 400 });
      await f.ledger.reserve({ requestId: id, ...who, amountMicro: 400 });
      expect((await f.ledger.balance(who.accountId))!.heldMicro).toBe(400);
    }));

    test("a settlement without a hold (a free model) is recorded and charges nothing", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const id = requestId();
      await f.ledger.settle(settlement(who, id, 250));
      await f.ledger.flush();
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(1_000);
      expect(await f.records(id)).toEqual([{ cost_micro: 0, status: "ok" }]);
    }));

    test("release voids a hold: nothing charged, nothing recorded", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const id = requestId();
      await f.ledger.reserve({ requestId: id, ...who, amountMicro: 700 });
      await f.ledger.release(id);
      await f.ledger.flush();
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000, heldMicro: 0 });
      expect(await f.records(id)).toHaveLength(0);
    }));

    test("top-ups add to the balance; unknown accounts are reported, not created", withLedger(async (f) => {
      const who = await f.fund(1_000);
      expect(await f.ledger.topUp(who.accountId, 2_500)).toBe(true);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(3_500);
      expect(await f.ledger.topUp("acct_missing", 1)).toBe(false);
      expect(await f.ledger.balance("acct_missing")).toBeNull();
    }));

    test("a top-up that would take a balance past MAX_BALANCE_MICRO is refused whole (with or without an idempotency key); up to it is credited", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const room = MAX_BALANCE_MICRO - 1_000;
      const refused = await f.ledger.topUp(who.accountId, room + 1).catch((e) => e);
      expect(refused).toBeInstanceOf(BalanceCapError);
      // Said in grouped figures, with what the account can still take (a console probe: raw digits, no room said).
      const roomSaid = (room / 1_000_000).toLocaleString("en-US", { maximumFractionDigits: 6 });
      expect((refused as Error).message).toContain(`above 8,000,000,000 credits`);
      expect((refused as Error).message).toContain(`This account can take at most ${roomSaid} more.`);
      await expect(f.ledger.topUp(who.accountId, room + 1, `cap-${requestId()}`)).rejects.toBeInstanceOf(BalanceCapError);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(1_000);
      expect(await f.ledger.topUp(who.accountId, room, `cap-${requestId()}`)).toBe(true);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(MAX_BALANCE_MICRO);
      await expect(f.ledger.topUp(who.accountId, 1)).rejects.toBeInstanceOf(BalanceCapError);
      expect(await f.ledger.topUp("acct_missing", 1)).toBe(false);
    }));

    test("keyed top-ups at once that would pass the cap together: one is credited, the others refused", withLedger(async (f) => {
      const who = await f.fund(MAX_BALANCE_MICRO - 3_000);
      const outcomes = await Promise.allSettled(Array.from({ length: 6 }, () => f.ledger.topUp(who.accountId, 2_000, `race-${requestId()}`)));
      expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
      expect(outcomes.filter((o) => o.status === "rejected" && o.reason instanceof BalanceCapError)).toHaveLength(5);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(MAX_BALANCE_MICRO - 1_000);
    }));

    test("a debit takes credits back, never past the balance less its holds: a larger one is refused whole, saying what is available", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const held = requestId();
      await f.ledger.reserve({ requestId: held, ...who, amountMicro: 300 });
      expect(await f.ledger.debit(who.accountId, 200)).toBe(true);
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 800, heldMicro: 300 });
      // 500 is available (800 − 300 held): 501 would leave the hold uncovered.
      const refused = await f.ledger.debit(who.accountId, 501).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(DebitRefusedError);
      expect((refused as DebitRefusedError).availableMicro).toBe(500);
      expect((refused as Error).message).toContain("The account has 0.0005 credits available");
      expect((refused as Error).message).not.toContain(who.accountId);
      await expect(f.ledger.debit(who.accountId, 501, `debit-${requestId()}`)).rejects.toBeInstanceOf(DebitRefusedError);
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 800, heldMicro: 300 });
      expect(await f.ledger.debit(who.accountId, 500)).toBe(true);
      // The hold is still covered: the request settles in full and the balance ends at zero.
      await f.ledger.settle(settlement(who, held, 300));
      await f.ledger.flush();
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 0, heldMicro: 0 });
      expect(await f.ledger.debit("acct_missing", 1)).toBe(false);
      await expect(f.ledger.debit(who.accountId, 1)).rejects.toBeInstanceOf(DebitRefusedError);
    }));

    test("a keyed debit repeated is taken once; a top-up's key is a conflict for a debit and the reverse", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const key = `debit-${requestId()}`;
      expect(await f.ledger.debit(who.accountId, 100, key)).toBe(true);
      expect(await f.ledger.debit(who.accountId, 100, key)).toBe(true);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(900);
      const asTopUp = await f.ledger.topUp(who.accountId, 100, key).catch((err: unknown) => err);
      expect(asTopUp).toBeInstanceOf(IdempotencyConflictError);
      expect((asTopUp as Error).message).toContain("already used for a debit of 0.0001 credits");
      const topUpKey = `topup-${requestId()}`;
      expect(await f.ledger.topUp(who.accountId, 100, topUpKey)).toBe(true);
      await expect(f.ledger.debit(who.accountId, 100, topUpKey)).rejects.toBeInstanceOf(IdempotencyConflictError);
      await expect(f.ledger.debit(who.accountId, 50, key)).rejects.toBeInstanceOf(IdempotencyConflictError);
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBe(1_000);
    }));

    test("debits and reservations at once never take the balance below its holds", withLedger(async (f) => {
      const who = await f.fund(10_000);
      const ids = Array.from({ length: 20 }, requestId);
      const outcomes = await Promise.allSettled([
        ...ids.map((id) => f.ledger.reserve({ requestId: id, ...who, amountMicro: 400 })),
        ...Array.from({ length: 10 }, (_, i) => f.ledger.debit(who.accountId, 700, i % 2 ? `race-${requestId()}` : undefined)),
      ]);
      const granted = ids.filter((_, i) => outcomes[i]!.status === "fulfilled" && (outcomes[i] as PromiseFulfilledResult<{ ok: boolean }>).value.ok);
      const debited = outcomes.slice(ids.length).filter((o) => o.status === "fulfilled").length;
      expect(outcomes.slice(ids.length).every((o) => o.status === "fulfilled" || o.reason instanceof DebitRefusedError)).toBe(true);
      const after = (await f.ledger.balance(who.accountId))!;
      expect(after.balanceMicro).toBe(10_000 - debited * 700);
      expect(after.heldMicro).toBe(granted.length * 400);
      expect(after.balanceMicro).toBeGreaterThanOrEqual(after.heldMicro);
      await Promise.all(granted.map((id) => f.ledger.settle(settlement(who, id, 400))));
      await f.ledger.flush();
      expect((await f.ledger.balance(who.accountId))!.balanceMicro).toBeGreaterThanOrEqual(0);
    }));

    test("100 requests at once on a balance that covers 37: exactly 37 holds, and the balance never goes below zero", withLedger(async (f) => {
      const who = await f.fund(37 * 1_000);
      const ids = Array.from({ length: 100 }, requestId);
      const results = await Promise.all(ids.map((id) => f.ledger.reserve({ requestId: id, ...who, amountMicro: 1_000 })));
      const granted = ids.filter((_, i) => results[i]!.ok);
      expect(granted).toHaveLength(37);
      await Promise.all(granted.map((id) => f.ledger.settle(settlement(who, id, 1_000))));
      expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 0, heldMicro: 0 });
    }));

    test("impossible numbers never crash the ledger and never charge a negative", withLedger(async (f) => {
      const who = await f.fund(1_000);
      const id = requestId();
      await f.ledger.reserve({ requestId: id, ...who, amountMicro: 500 });
      await f.ledger.settle({ ...settlement(who, id, Number.NaN), promptTokens: -5, completionTokens: 1.5 });
      await f.ledger.flush();
      const after = (await f.ledger.balance(who.accountId))!;
      expect(after.balanceMicro).toBeLessThanOrEqual(1_000);
      expect(after.balanceMicro).toBeGreaterThanOrEqual(500);
      expect(after.heldMicro).toBe(0);
      expect(await f.records(id)).toHaveLength(1);
    }));

    test("healthy: writable, nothing queued after a flush, admits paid and free requests", withLedger(async (f) => {
      const who = await f.fund(1_000);
      await f.ledger.settle(settlement(who, requestId(), 0));
      await f.ledger.flush();
      expect(f.ledger.health()).toMatchObject({ writable: true, queued: 0 });
      expect(f.ledger.admits(true)).toBe(true);
      expect(f.ledger.admits(false)).toBe(true);
    }));

    test("settlement lag: health says since when the oldest queued settlement waits, until it is written", withLedger(async (f) => {
      const who = await f.fund(1_000);
      expect(f.ledger.health().oldestQueuedAt).toBeUndefined();
      const before = Date.now();
      const first = f.ledger.settle(settlement(who, requestId(), 0));
      const second = f.ledger.settle(settlement(who, requestId(), 0));
      const queued = f.ledger.health();
      expect(queued.queued).toBe(2);
      expect(queued.oldestQueuedAt).toBeGreaterThanOrEqual(before);
      expect(queued.oldestQueuedAt).toBeLessThanOrEqual(Date.now());
      await Promise.all([first, second]);
      await f.ledger.flush();
      expect(f.ledger.health()).toMatchObject({ queued: 0, oldestQueuedAt: undefined });
    }));
  });
}
