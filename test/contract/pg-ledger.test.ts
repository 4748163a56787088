import { clockAheadThenPutRight, clockStepBackAcrossMidnight, JUST_AFTER_MIDNIGHT } from "../helpers/clock-step.ts";
import { afterAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import type { Ledger, RejectionLog } from "../../src/billing/ledger.ts";
import type { Logger } from "../../src/log/log.ts";
import { createPostgresAccounts } from "../../src/store/postgres/pg-accounts.ts";
import { connectPostgres, type Pg } from "../../src/store/postgres/pg-client.ts";
import { createPostgresLedger, type PgLedgerOptions } from "../../src/store/postgres/pg-ledger.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";
import { auditPostgres, createPostgresUsageReport } from "../../src/store/postgres/pg-reports.ts";
import { openPostgresStores } from "../../src/store/stores.ts";
import { closedPort, postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { ledgerContract, settlement, type LedgerFixture } from "../helpers/ledger-contract.ts";
import { tcpProxy } from "../helpers/tcp-proxy.ts";
import { until } from "../helpers/until.ts";

const missing = await postgresMissing();
const database = useTestDatabase();
const migrationsDatabase = useTestDatabase();
/** The clock tests' own database: a clock put right leaves records stamped ahead, which the whole-database audit of other tests would name. */
const clockDatabase = useTestDatabase();
const clockPool = async () => {
  const sql = connectPostgres(await clockDatabase(), { max: 4 });
  pools.push(sql);
  await migratePostgres(sql);
  return sql;
};
const pools: Pg[] = [];
afterAll(async () => {
  for (const pool of pools) await pool.close({ timeout: 0 }).catch(() => {});
});

let shared: Promise<Pg> | undefined;
/** One pool for the file, on its own migrated database. */
const pool = () => (shared ??= (async () => {
  const sql = connectPostgres(await database(), { max: 8 });
  pools.push(sql);
  await migratePostgres(sql);
  return sql;
})());

interface PgFixture extends LedgerFixture {
  ledger: Ledger & RejectionLog & { sweep(): Promise<number>; instanceId: string };
  sql: Pg;
  logs: { level: string; message: string; fields?: Record<string, unknown> }[];
}

async function pgFixture(options: Partial<PgLedgerOptions> = {}, via?: Pg): Promise<PgFixture> {
  const sql = await pool();
  const logs: PgFixture["logs"] = [];
  const log: Logger = (level, message, fields) => logs.push({ level, message, fields });
  const ledger = await createPostgresLedger(via ?? sql, { now: Date.now, log, ...options });
  const accounts = createPostgresAccounts(sql, Date.now);
  return {
    ledger,
    sql,
    logs,
    async fund(balanceMicro, spendLimitMicro) {
      const account = await accounts.createAccount("contract", balanceMicro);
      const key = await accounts.createKey(account.id, { name: "k", spendLimitMicro: spendLimitMicro ?? null });
      return { accountId: account.id, keyId: key!.id };
    },
    async records(requestId) {
      const rows = await sql`SELECT cost_micro, status FROM usage_records WHERE request_id = ${requestId}`;
      return rows.map((r: { cost_micro: string; status: string }) => ({ cost_micro: Number(r.cost_micro), status: r.status }));
    },
    async close() {
      await ledger.close(1_000);
    },
  };
}

/** The pool as the ledger sees it, counting what it sends: transactions, and settlement statements. */
const counting = (sql: Pg) => {
  const seen = { transactions: 0, settleStatements: 0, reserveStatements: 0, deadlocks: 0 };
  const via = new Proxy(sql, {
    get(target, property) {
      const value = Reflect.get(target, property);
      if (property === "begin") return (...args: unknown[]) => (seen.transactions++, (value as (...a: unknown[]) => unknown).apply(target, args));
      if (property === "unsafe") return (query: string, params?: unknown[]) => {
        if (query.includes("INSERT INTO usage_records")) seen.settleStatements++;
        if (query.includes("INSERT INTO holds")) seen.reserveStatements++;
        const sent = target.unsafe(query, params as never);
        sent.catch((err: unknown) => {
          if ((err as { errno?: string }).errno === "40P01") seen.deadlocks++;
        });
        return sent;
      };
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { seen, via };
};

const fast = { timeoutMs: 500, retryMaxMs: 40, heartbeatMs: 50, busyLimitMs: 300 };

if (missing) {
  test.skip(`PostgreSQL ledger contract and faults — skipped: ${missing}`, () => {});
} else {
  ledgerContract("PostgreSQL", () => pgFixture());

  describe("PostgreSQL ledger: several processes on one database", () => {
    test("100 requests through two gateways on a balance that covers 37: exactly 37 holds, never below zero", async () => {
      const a = await pgFixture();
      const b = await pgFixture();
      try {
        const who = await a.fund(37 * 1_000);
        const ids = Array.from({ length: 100 }, (_, i) => `req_two_${Date.now()}_${i}`);
        const results = await Promise.all(ids.map((id, i) => (i % 2 ? a : b).ledger.reserve({ requestId: id, ...who, amountMicro: 1_000 })));
        const granted = ids.filter((_, i) => results[i]!.ok);
        expect(granted).toHaveLength(37);
        await Promise.all(granted.map((id) => (ids.indexOf(id) % 2 ? a : b).ledger.settle(settlement(who, id, 1_000))));
        expect(await a.ledger.balance(who.accountId)).toEqual({ balanceMicro: 0, heldMicro: 0 });
      } finally {
        await a.close();
        await b.close();
      }
    });

    test("a reservation refused while a settlement elsewhere freed the room is asked again, not refused in a balance's words the balance does not bear out (a scale-out probe)", async () => {
      const sql = await pool();
      const other = await pgFixture();
      // The reservation statement's answer is held until the other process has released its hold:
      // when the refusal's reason is read, the room is there.
      let releaseFirst: (() => Promise<void>) | undefined;
      const via = new Proxy(sql, {
        get(target, property) {
          const value = Reflect.get(target, property);
          if (property === "unsafe") return async (query: string, params?: unknown[]) => {
            const answer = await target.unsafe(query, params as never);
            if (query.includes("INSERT INTO holds") && releaseFirst) {
              const release = releaseFirst;
              releaseFirst = undefined;
              await release();
            }
            return answer;
          };
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      const f = await pgFixture({}, via);
      try {
        const who = await f.fund(5_000);
        const taken = `req_room_a_${Date.now()}`;
        expect(await other.ledger.reserve({ requestId: taken, ...who, amountMicro: 4_000 })).toEqual({ ok: true });
        releaseFirst = () => other.ledger.release(taken);
        expect(await f.ledger.reserve({ requestId: `req_room_b_${Date.now()}`, ...who, amountMicro: 3_000 })).toEqual({ ok: true });
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 5_000, heldMicro: 3_000 });
      } finally {
        await f.close();
        await other.close();
      }
    });

    test("the same settlement sent by two processes charges once", async () => {
      const a = await pgFixture();
      const b = await pgFixture();
      try {
        const who = await a.fund(10_000);
        const id = `req_dup_${Date.now()}`;
        await a.ledger.reserve({ requestId: id, ...who, amountMicro: 5_000 });
        await Promise.all([a.ledger.settle(settlement(who, id, 3_000)), b.ledger.settle(settlement(who, id, 3_000))]);
        expect(await a.ledger.balance(who.accountId)).toEqual({ balanceMicro: 7_000, heldMicro: 0 });
        expect(await a.records(id)).toEqual([{ cost_micro: 3_000, status: "ok" }]);
      } finally {
        await a.close();
        await b.close();
      }
    });

    test("a reservation that waits past the timeout behind another account's locked row is refused, but does not mark the ledger failing", async () => {
      // One connection, so the second account's reservation waits behind the first's, which waits for its row.
      const via = connectPostgres(await database(), { max: 1, statementTimeoutMs: 5_000 });
      pools.push(via);
      const f = await pgFixture({ timeoutMs: 400, busyLimitMs: 5_000 }, via);
      const locker = new SQL({ url: await database(), max: 1 });
      try {
        const x = await f.fund(1_000_000);
        const y = await f.fund(1_000_000);
        let release!: () => void;
        const held = new Promise<void>((resolve) => (release = resolve));
        const lock = locker.begin(async (tx) => {
          await tx`SELECT id FROM accounts WHERE id = ${x.accountId} FOR UPDATE`;
          await held;
        });
        await Bun.sleep(50);
        const stamp = Date.now();
        const [onX, onY] = await Promise.all([
          f.ledger.reserve({ requestId: `req_wait_x_${stamp}`, ...x, amountMicro: 1_000 }),
          f.ledger.reserve({ requestId: `req_wait_y_${stamp}`, ...y, amountMicro: 1_000 }),
        ]);
        expect([onX.ok, onY.ok]).toEqual([false, false]);
        // No answer in time says nothing of the store: the heartbeat, a write of its own, does.
        expect(f.ledger.health().writable).toBe(true);
        release();
        await lock;
        await until("y's reservations go through again", 5_000, async () => (await f.ledger.reserve({ requestId: `req_wait_y2_${Date.now()}`, ...y, amountMicro: 1_000 })).ok);
      } finally {
        await locker.close({ timeout: 0 });
        await f.close();
      }
    }, 20_000);

    test("a process long silent that holds nothing has its instance row deleted by a sweep; one that holds something keeps it until its holds go", async () => {
      const dead = await pgFixture({ heartbeatMs: 60_000, staleAfterMs: 200, sweepIntervalMs: 60_000 });
      const holding = await pgFixture({ heartbeatMs: 60_000, staleAfterMs: 200, sweepIntervalMs: 60_000 });
      let liveClock = Date.now();
      const live = await pgFixture({ heartbeatMs: 50, staleAfterMs: 200, sweepIntervalMs: 60_000, timeoutMs: 400, forgetAfterMs: 300, now: () => liveClock });
      try {
        const who = await holding.fund(10_000);
        expect((await holding.ledger.reserve({ requestId: `req_forget_${Date.now()}`, ...who, amountMicro: 1_000 })).ok).toBe(true);
        const rows = async () => new Set(((await live.sql`SELECT id FROM gateway_instances`) as { id: string }[]).map((r) => r.id));
        expect(await rows()).toContain(dead.ledger.instanceId);
        await Bun.sleep(400);
        liveClock += 10_000;
        // The first sweep forgets the silent process with nothing held, releases the other's holds…
        expect(await live.ledger.sweep()).toBe(1);
        let left = await rows();
        expect(left.has(dead.ledger.instanceId)).toBe(false);
        expect(left.has(holding.ledger.instanceId)).toBe(true);
        expect(left.has(live.ledger.instanceId)).toBe(true);
        // …and the next forgets that one too.
        await live.ledger.sweep();
        left = await rows();
        expect(left.has(holding.ledger.instanceId)).toBe(false);
        expect(left.has(live.ledger.instanceId)).toBe(true);
      } finally {
        await dead.close();
        await holding.close();
        await live.close();
      }
    });

    test("a process that stops heartbeating has its holds released by another; its late settlement still charges what it held, once", async () => {
      // `dead` never heartbeats again after it starts (a minute between beats); `live` does, every 50 ms.
      // Staleness is judged on the database's clock; how long `live` has been healthy, on its own
      // clock, which the test moves by hand.
      let liveClock = Date.now();
      const dead = await pgFixture({ heartbeatMs: 60_000, staleAfterMs: 400, sweepIntervalMs: 60_000 });
      const live = await pgFixture({ heartbeatMs: 50, staleAfterMs: 400, sweepIntervalMs: 60_000, timeoutMs: 400, now: () => liveClock });
      try {
        const who = await dead.fund(10_000);
        const ids = [1, 2, 3].map((i) => `req_dead_${Date.now()}_${i}`);
        for (const id of ids) expect((await dead.ledger.reserve({ requestId: id, ...who, amountMicro: 1_000 })).ok).toBe(true);
        expect((await live.ledger.reserve({ requestId: `${ids[0]}_live`, ...who, amountMicro: 1_000 })).ok).toBe(true);
        expect((await live.ledger.balance(who.accountId))!.heldMicro).toBe(4_000);
        // Too early: the silent process is not stale yet.
        expect(await live.ledger.sweep()).toBe(0);
        // Stale by the database's clock after 500 ms…
        await Bun.sleep(500);
        // …but `live` has not been writing its own heartbeats for longer than a living process
        // takes to come back (staleAfterMs + timeoutMs = 800 ms by its clock): it judges nobody yet.
        liveClock += 799;
        expect(await live.ledger.sweep()).toBe(0);
        liveClock += 1;
        expect(await live.ledger.sweep()).toBe(3);
        expect(await live.ledger.balance(who.accountId)).toEqual({ balanceMicro: 10_000, heldMicro: 1_000 });
        // The process was only slow: its answer still finishes and is charged (within what it held).
        await dead.ledger.settle(settlement(who, ids[0]!, 800));
        await dead.ledger.flush();
        expect(await live.ledger.balance(who.accountId)).toEqual({ balanceMicro: 9_200, heldMicro: 1_000 });
        expect(await dead.records(ids[0]!)).toEqual([{ cost_micro: 800, status: "ok" }]);
      } finally {
        await dead.close();
        await live.close();
      }
      expect((await auditPostgres(dead.sql)).heldDrift).toEqual([]);
    });

    test("a flush of refusal counts that finds them already written leaves the writer free: later settlements are written", async () => {
      // The counts' own flush (a second after the first refusal) comes after a settlement's batch
      // wrote them; the writer it starts has nothing to do, and must not stay marked as running.
      const f = await pgFixture({ heartbeatMs: 60_000 });
      try {
        const who = await f.fund(10_000);
        f.ledger.countRejection(who.keyId, 402, Date.now());
        const first = `req_flush_${Date.now()}_1`;
        expect((await f.ledger.reserve({ requestId: first, ...who, amountMicro: 1_000 })).ok).toBe(true);
        await f.ledger.settle(settlement(who, first, 500));
        await Bun.sleep(1_200);
        const second = `req_flush_${Date.now()}_2`;
        expect((await f.ledger.reserve({ requestId: second, ...who, amountMicro: 1_000 })).ok).toBe(true);
        const written = await Promise.race([f.ledger.settle(settlement(who, second, 500)).then(() => true), Bun.sleep(2_000).then(() => false)]);
        expect(written).toBe(true);
        expect(await f.records(second)).toEqual([{ cost_micro: 500, status: "ok" }]);
      } finally {
        await f.close();
      }
    });

    test("an account's usage report says when each status's latest refusal was (the minute it started), beside the counts", async () => {
      const f = await pgFixture({ heartbeatMs: 60_000 });
      try {
        const who = await f.fund(10_000);
        const minute = Math.floor(Date.now() / 60_000) * 60_000;
        f.ledger.countRejection(who.keyId, 402, minute - 120_000 + 5_000);
        f.ledger.countRejection(who.keyId, 402, minute + 1_000);
        f.ledger.countRejection(who.keyId, 429, minute - 60_000 + 30_000);
        // The counts are written a second after the first.
        const report = createPostgresUsageReport(f.sql);
        await until("the refusal counts written", 5_000, async () => (await report(who.accountId, minute - 3_600_000, minute + 60_000)).rejected["402"] === 2);
        const shown = await report(who.accountId, minute - 3_600_000, minute + 60_000);
        expect(shown.rejected).toEqual({ "402": 2, "429": 1 });
        expect(shown.rejected_latest).toEqual({ "402": new Date(minute).toISOString(), "429": new Date(minute - 60_000).toISOString() });
      } finally {
        await f.close();
      }
    });

    test("a living process keeps its open holds from expiring while their requests run (fallbacks and retries make several attempts under one hold); another process's sweep leaves them, and the settlement charges (a scale-out probe)", async () => {
      // A hold is extended once less than half its TTL is left: a 1 s TTL leaves four sweeps (every
      // 100 ms) to do it before it lapses (400 ms left one late sweep from a lapse on a loaded run).
      const f = await pgFixture({ holdTtlMs: 1_000, sweepIntervalMs: 100 });
      const other = await pgFixture({ holdTtlMs: 1_000, sweepIntervalMs: 60_000 });
      try {
        const who = await f.fund(5_000);
        const requestId = `req_long_${Date.now()}`;
        expect(await f.ledger.reserve({ requestId, ...who, amountMicro: 2_000 })).toEqual({ ok: true });
        // Three TTLs later, swept by itself (every 100 ms) and by another process.
        await Bun.sleep(3_000);
        expect(await other.ledger.sweep()).toBe(0);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 5_000, heldMicro: 2_000 });
        await f.ledger.settle({ requestId, ...who, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 1_500, status: "ok", latencyMs: 1 });
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 3_500, heldMicro: 0 });
        expect(await f.records(requestId)).toEqual([{ cost_micro: 1_500, status: "ok" }]);
      } finally {
        await f.close();
        await other.close();
      }
    }, 20_000);

    test("a host whose clock runs behind the database's still extends its open holds in time: extensions are on the database's clock, as holds are made and swept (a review)", async () => {
      // A TTL of 1 s and three of them waited, as the test above: a hold extended on the host's
      // clock, 3 s behind, is past its expiry at every extension, and swept well before the end.
      // (With 400 ms a loaded run was one late sweep from a lapse: seen once in CI's full suite.)
      const f = await pgFixture({ holdTtlMs: 1_000, sweepIntervalMs: 100, now: () => Date.now() - 3_000 });
      const other = await pgFixture({ holdTtlMs: 1_000, sweepIntervalMs: 60_000 });
      try {
        const who = await f.fund(5_000);
        const requestId = `req_behind_${Date.now()}`;
        expect(await f.ledger.reserve({ requestId, ...who, amountMicro: 2_000 })).toEqual({ ok: true });
        await Bun.sleep(3_000);
        expect(await other.ledger.sweep()).toBe(0);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 5_000, heldMicro: 2_000 });
        expect((await other.ledger.reserve({ requestId: `${requestId}_2`, ...who, amountMicro: 4_000 })).ok).toBe(false);
      } finally {
        await f.close();
        await other.close();
      }
    }, 20_000);

    test("holds past their expiry are released even while their process lives (when it does not extend them: a hold it no longer knows of)", async () => {
      const f = await pgFixture({ holdTtlMs: 1, sweepIntervalMs: 60_000 });
      try {
        const who = await f.fund(5_000);
        await f.ledger.reserve({ requestId: `req_expired_${Date.now()}`, ...who, amountMicro: 2_000 });
        await Bun.sleep(5);
        expect(await f.ledger.sweep()).toBe(1);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 5_000, heldMicro: 0 });
      } finally {
        await f.close();
      }
    });
  });

  describe("PostgreSQL ledger: a settlement batch is one statement", () => {
    test("50 settlements, a release and refusal counts settled in one turn: one statement, no transaction", async () => {
      const sql = await pool();
      const { seen, via } = counting(sql);
      const f = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 }, via);
      try {
        const who = await f.fund(1_000_000);
        const ids = Array.from({ length: 51 }, (_, i) => `req_one_${Date.now()}_${i}`);
        for (const id of ids) expect((await f.ledger.reserve({ requestId: id, ...who, amountMicro: 2_000 })).ok).toBe(true);
        const before = { ...seen };
        f.ledger.countRejection(who.keyId, 429, Date.now());
        await Promise.all([...ids.slice(0, 50).map((id) => f.ledger.settle(settlement(who, id, 1_500))), f.ledger.release(ids[50]!)]);
        expect(seen.transactions - before.transactions).toBe(0);
        expect(seen.settleStatements - before.settleStatements).toBe(1);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000_000 - 50 * 1_500, heldMicro: 0 });
        const [counted] = await sql`SELECT SUM(count)::int AS n FROM rejection_counts WHERE key_id = ${who.keyId} AND status = 429`;
        expect(counted.n).toBe(1);
        expect(await f.records(ids[50]!)).toEqual([]);
      } finally {
        await f.close();
      }
    });

    test("one batch mixing a duplicate, a charge the balance cannot cover and normal settlements: the refused one is recorded without its charge, the rest charged once", async () => {
      const sql = await pool();
      const { seen, via } = counting(sql);
      const f = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 }, via);
      const other = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 });
      try {
        const who = await f.fund(10_000);
        const [a, b, x, y] = ["a", "b", "x", "y"].map((n) => `req_mixed_${Date.now()}_${n}`) as [string, string, string, string];
        for (const [id, amount] of [[a, 3_000], [b, 3_000], [x, 4_000]] as const) expect((await f.ledger.reserve({ requestId: id, ...who, amountMicro: amount })).ok).toBe(true);
        // x's hold is released behind this process's back (a sweeper thought it dead), and another
        // process takes what it freed: x's charge can no longer be covered.
        await sql`UPDATE holds SET expires_at = 0 WHERE request_id = ${x}`;
        expect(await other.ledger.sweep()).toBe(1);
        expect((await other.ledger.reserve({ requestId: y, ...who, amountMicro: 4_000 })).ok).toBe(true);
        const before = { ...seen };
        await Promise.all([
          f.ledger.settle(settlement(who, a, 1_000)),
          f.ledger.settle(settlement(who, a, 1_000)),
          f.ledger.settle(settlement(who, b, 2_000)),
          f.ledger.settle(settlement(who, x, 4_000)),
        ]);
        await f.ledger.flush();
        // The batch failed on the CHECK as a whole (one statement), then was split: a, b, x alone.
        expect(seen.settleStatements - before.settleStatements).toBeGreaterThanOrEqual(2);
        expect(seen.transactions - before.transactions).toBe(0);
        expect(await f.records(a)).toEqual([{ cost_micro: 1_000, status: "ok" }]);
        expect(await f.records(b)).toEqual([{ cost_micro: 2_000, status: "ok" }]);
        expect(await f.records(x)).toEqual([{ cost_micro: 0, status: "ok" }]);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 7_000, heldMicro: 4_000 });
        expect(f.logs.some((l) => l.message.startsWith("settlement's charge refused") && (l.fields?.settlement as { requestId?: string })?.requestId === x)).toBe(true);
        expect(f.ledger.openHolds()).toBe(0);
        await other.ledger.settle(settlement(who, y, 4_000));
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 3_000, heldMicro: 0 });
        const audit = await auditPostgres(sql);
        expect(audit.accountDrift.filter((d) => d.account_id === who.accountId)).toEqual([]);
        expect(audit.heldDrift).toEqual([]);
      } finally {
        await f.close();
        await other.close();
      }
    });

    test("the audit lists a charge refused on a stream cut short (its hold released by another process, the credit spent); an answer charged nothing by design is not listed", async () => {
      const sql = await pool();
      const f = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 });
      const other = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 });
      try {
        const who = await f.fund(5_000);
        const [x, y, free] = ["x", "y", "free"].map((n) => `req_fenced_${Date.now()}_${n}`) as [string, string, string];
        expect((await f.ledger.reserve({ requestId: x, ...who, amountMicro: 4_000 })).ok).toBe(true);
        // x's gateway fell silent: another process releases its hold and spends what it freed.
        await sql`UPDATE holds SET expires_at = 0 WHERE request_id = ${x}`;
        expect(await other.ledger.sweep()).toBe(1);
        expect((await other.ledger.reserve({ requestId: y, ...who, amountMicro: 4_000 })).ok).toBe(true);
        await other.ledger.settle(settlement(who, y, 4_000));
        // x's stream was cut (the fence): what it sent is charged late, and refused.
        await f.ledger.settle(settlement(who, x, 3_000, "cancelled"));
        await f.ledger.settle(settlement(who, free, 0, "cancelled"));
        await f.ledger.flush();
        expect(await f.records(x)).toEqual([{ cost_micro: 0, status: "cancelled" }]);
        expect(await f.records(free)).toEqual([{ cost_micro: 0, status: "cancelled" }]);
        const audit = await auditPostgres(sql, new Set(["test/model"]));
        expect(audit.uncharged.filter((u) => u.request_id.startsWith("req_fenced_"))).toEqual([{ request_id: x, model: "test/model", prompt_tokens: 10, completion_tokens: 20 }]);
        expect(audit.accountDrift.filter((d) => d.account_id === who.accountId)).toEqual([]);
      } finally {
        await f.close();
        await other.close();
      }
    });

    test("a period's count never goes back: a batch stamped before midnight and committed after another process began the new day counts in its own day", async () => {
      const sql = await pool();
      const midnight = Date.UTC(2031, 0, 2);
      const f = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000, now: () => midnight - 1 });
      const other = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000, now: () => midnight + 1 });
      try {
        const who = await f.fund(1_000_000);
        await sql`UPDATE api_keys SET spend_limit_micro = 100000, spend_limit_period = 'day' WHERE id = ${who.keyId}`;
        const [late, early] = [`req_mid_${Date.now()}_late`, `req_mid_${Date.now()}_early`];
        expect((await f.ledger.reserve({ requestId: late, ...who, amountMicro: 3_000 })).ok).toBe(true);
        expect((await other.ledger.reserve({ requestId: early, ...who, amountMicro: 2_000 })).ok).toBe(true);
        // The new day's charge commits first; the old day's after it.
        await other.ledger.settle(settlement(who, early, 2_000));
        await f.ledger.settle(settlement(who, late, 3_000));
        const [key] = await sql`SELECT period_start, period_spent_micro, spent_micro FROM api_keys WHERE id = ${who.keyId}`;
        expect([Number(key.period_start), Number(key.period_spent_micro), Number(key.spent_micro)]).toEqual([midnight, 2_000, 5_000]);
        expect((await auditPostgres(sql)).periodDrift.filter((d) => d.id === who.keyId)).toEqual([]);
      } finally {
        await f.close();
        await other.close();
      }
    });

    test("a charge whose hold was swept still keeps the key's spend limit: past its room it is recorded without its charge, as a balance that cannot cover it", async () => {
      const sql = await pool();
      const f = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 });
      const other = await pgFixture({ heartbeatMs: 60_000, sweepIntervalMs: 60_000 });
      try {
        // A key with a lifetime limit of 10,000 on an account that could pay far more.
        const who = await f.fund(1_000_000, 10_000);
        const [a, x, y] = ["a", "x", "y"].map((n) => `req_limit_${Date.now()}_${n}`) as [string, string, string];
        expect((await f.ledger.reserve({ requestId: a, ...who, amountMicro: 3_000 })).ok).toBe(true);
        expect((await f.ledger.reserve({ requestId: x, ...who, amountMicro: 6_000 })).ok).toBe(true);
        // x's hold is swept (this process looked dead), and another process takes the room it freed.
        await sql`UPDATE holds SET expires_at = 0 WHERE request_id = ${x}`;
        expect(await other.ledger.sweep()).toBe(1);
        expect((await other.ledger.reserve({ requestId: y, ...who, amountMicro: 6_000 })).ok).toBe(true);
        await Promise.all([f.ledger.settle(settlement(who, a, 2_000)), f.ledger.settle(settlement(who, x, 5_000))]);
        await f.ledger.flush();
        await other.ledger.settle(settlement(who, y, 6_000));
        // a within its hold; x's late charge would have made 13,000 of 10,000.
        expect(await f.records(a)).toEqual([{ cost_micro: 2_000, status: "ok" }]);
        expect(await f.records(x)).toEqual([{ cost_micro: 0, status: "ok" }]);
        expect(f.logs.some((l) => l.message.startsWith("settlement's charge refused") && (l.fields?.settlement as { requestId?: string })?.requestId === x)).toBe(true);
        const [key] = await sql`SELECT spent_micro, period_spent_micro, held_micro FROM api_keys WHERE id = ${who.keyId}`;
        expect([Number(key.spent_micro), Number(key.period_spent_micro), Number(key.held_micro)]).toEqual([8_000, 8_000, 0]);
        // A swept hold whose charge fits the room is still charged.
        const z = `req_limit_${Date.now()}_z`;
        expect((await f.ledger.reserve({ requestId: z, ...who, amountMicro: 1_500 })).ok).toBe(true);
        await sql`UPDATE holds SET expires_at = 0 WHERE request_id = ${z}`;
        expect(await other.ledger.sweep()).toBe(1);
        await f.ledger.settle(settlement(who, z, 1_500));
        await f.ledger.flush();
        expect(await f.records(z)).toEqual([{ cost_micro: 1_500, status: "ok" }]);
      } finally {
        await f.close();
        await other.close();
      }
    });

    test("two processes settling batches over the same 20 accounts, listed in opposite orders, while reserving: no deadlock, every charge once", async () => {
      const sql = await pool();
      const first = counting(sql);
      const second = counting(connectPostgres(await database(), { max: 8 }));
      pools.push(second.via);
      const a = await pgFixture({}, first.via);
      const b = await pgFixture({}, second.via);
      try {
        const whos = [];
        for (let i = 0; i < 20; i++) whos.push(await a.fund(1_000_000));
        type Pair = { who: { accountId: string; keyId: string }; a: string; b: string };
        let previous: Pair[] = [];
        // Each round reserves the next requests while the last round's settle: a's batch lists the
        // accounts in order, b's in reverse, and reservations lock account then key meanwhile.
        for (let round = 0; round <= 15; round++) {
          const ids: Pair[] = round === 15 ? [] : whos.map((who, i) => ({ who, a: `req_order_${Date.now()}_${round}_${i}_a`, b: `req_order_${Date.now()}_${round}_${i}_b` }));
          await Promise.all([
            ...ids.flatMap(({ who, a: ia, b: ib }) => [
              a.ledger.reserve({ requestId: ia, ...who, amountMicro: 2_000 }).then((r) => expect(r.ok).toBe(true)),
              b.ledger.reserve({ requestId: ib, ...who, amountMicro: 2_000 }).then((r) => expect(r.ok).toBe(true)),
            ]),
            ...previous.map(({ who, a: id }) => a.ledger.settle(settlement(who, id, 1_000))),
            ...previous.toReversed().map(({ who, b: id }) => b.ledger.settle(settlement(who, id, 1_000))),
          ]);
          previous = ids;
        }
        expect(first.seen.deadlocks + second.seen.deadlocks).toBe(0);
        for (const who of whos) expect(await a.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000_000 - 30 * 1_000, heldMicro: 0 });
      } finally {
        await a.close();
        await b.close();
      }
    });

    test("two processes churning on one hot account until it runs dry: Σ charges = balance decrease, never below zero, nothing left held", async () => {
      const sql = await pool();
      const second = connectPostgres(await database(), { max: 8 });
      pools.push(second);
      const a = await pgFixture();
      const b = await pgFixture({}, second);
      try {
        const start = 300_000;
        const who = await a.fund(start);
        const granted = new Map<string, number>();
        let released = 0;
        let refused = 0;
        let lowest = start;
        let seq = 0;
        const client = async (c: number) => {
          const ledger = (c % 2 ? a : b).ledger;
          for (let i = 0; i < 12; i++) {
            const id = `req_churn_${Date.now()}_${c}_${seq++}`;
            const amount = 1_000 + ((c * 7 + i * 13) % 5) * 500;
            const r = await ledger.reserve({ requestId: id, ...who, amountMicro: amount });
            if (!r.ok) {
              expect(r.reason).toBe("balance");
              refused++;
              continue;
            }
            if ((c + i) % 10 === 0) {
              await ledger.release(id);
              released++;
              continue;
            }
            // Some answers cost more than their hold: at most the hold is charged.
            const cost = (c + i) % 4 === 0 ? amount + 700 : amount - 300;
            granted.set(id, Math.min(cost, amount));
            await ledger.settle(settlement(who, id, cost));
            if (i % 3 === 0) {
              const now = (await a.ledger.balance(who.accountId))!;
              lowest = Math.min(lowest, now.balanceMicro - now.heldMicro);
            }
          }
        };
        await Promise.all(Array.from({ length: 64 }, (_, c) => client(c)));
        await a.ledger.flush();
        await b.ledger.flush();
        expect(refused).toBeGreaterThan(0);
        expect(lowest).toBeGreaterThanOrEqual(0);
        const charged = [...granted.values()].reduce((x, y) => x + y, 0);
        const [written] = await sql`SELECT COUNT(*)::int AS n, COALESCE(SUM(cost_micro), 0)::int AS cost FROM usage_records WHERE account_id = ${who.accountId}`;
        expect(written).toEqual({ n: granted.size, cost: charged });
        const after = (await a.ledger.balance(who.accountId))!;
        expect(after).toEqual({ balanceMicro: start - charged, heldMicro: 0 });
        expect(after.balanceMicro).toBeGreaterThanOrEqual(0);
        expect(released).toBeGreaterThan(0);
        const audit = await auditPostgres(sql);
        expect(audit.accountDrift.filter((d) => d.account_id === who.accountId)).toEqual([]);
        expect(audit.heldDrift).toEqual([]);
      } finally {
        await a.close();
        await b.close();
      }
    });
  });

  describe("PostgreSQL ledger: reservations of one account that wait go together", () => {
    test("100 reservations at once on one account: the first goes alone, the 99 that waited in one statement; all held", async () => {
      const { seen, via } = counting(await pool());
      const f = await pgFixture({}, via);
      try {
        const who = await f.fund(1_000_000);
        const ids = Array.from({ length: 100 }, (_, i) => `req_group_${Date.now()}_${i}`);
        const results = await Promise.all(ids.map((id) => f.ledger.reserve({ requestId: id, ...who, amountMicro: 1_000 })));
        expect(results.every((r) => r.ok)).toBe(true);
        expect(seen.reserveStatements).toBe(2);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000_000, heldMicro: 100_000 });
        expect(f.ledger.openHolds()).toBe(100);
      } finally {
        await f.close();
      }
    });

    test("a hold that does not fit does not keep smaller ones behind it in the group from being granted; what is refused says what is free", async () => {
      const f = await pgFixture();
      try {
        const who = await f.fund(5_000);
        const id = (n: string) => `req_fit_${Date.now()}_${n}`;
        const asked = [["first", 1_000], ["big", 4_500], ["s1", 1_000], ["s2", 1_000], ["s3", 1_500], ["s4", 1_000]] as const;
        const results = await Promise.all(asked.map(([n, amount]) => f.ledger.reserve({ requestId: id(n), ...who, amountMicro: amount })));
        const granted = asked.filter((_, i) => results[i]!.ok);
        // 1,000 went alone; the group of five could hold 4,000 more: never the 4,500, and smaller ones up to what is free.
        expect(granted.map(([n]) => n)).not.toContain("big");
        expect(granted.map(([n]) => n)).toContain("first");
        const held = granted.reduce((sum, [, amount]) => sum + amount, 0);
        expect(held).toBeLessThanOrEqual(5_000);
        // No refusal that was not needed: nothing was released, so what is free now is at most
        // what was free when each was refused, and none of them fits even now.
        for (const [i, r] of results.entries()) {
          if (r.ok) continue;
          expect(r).toMatchObject({ reason: "balance" });
          expect(asked[i]![1]).toBeGreaterThan(5_000 - held);
        }
        expect(granted.length).toBeGreaterThanOrEqual(4);
        const refusedBig = results[1]!;
        expect(refusedBig.ok).toBe(false);
        if (!refusedBig.ok && refusedBig.reason === "balance") expect(refusedBig.availableMicro).toBeLessThan(4_500);
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 5_000, heldMicro: held });
      } finally {
        await f.close();
      }
    });

    test("a key's spend limit holds within a group: exactly what the limit covers, the rest refused for the key", async () => {
      const f = await pgFixture();
      try {
        const who = await f.fund(1_000_000, 20_000);
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => f.ledger.reserve({ requestId: `req_keygroup_${Date.now()}_${i}`, ...who, amountMicro: 1_000 })));
        expect(results.filter((r) => r.ok)).toHaveLength(20);
        for (const r of results) if (!r.ok) expect(r).toEqual({ ok: false, reason: "key_spend_limit", availableMicro: 0, limitMicro: 20_000, period: null, resetsAt: null });
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000_000, heldMicro: 20_000 });
      } finally {
        await f.close();
      }
    });

    test("the same request reserved twice while it waits in a group is held once; other accounts do not wait for a busy one", async () => {
      const { seen, via } = counting(await pool());
      const f = await pgFixture({}, via);
      try {
        const hot = await f.fund(100_000);
        const cold = await f.fund(100_000);
        const dup = `req_dupgroup_${Date.now()}`;
        const results = await Promise.all([
          f.ledger.reserve({ requestId: `${dup}_first`, ...hot, amountMicro: 1_000 }),
          f.ledger.reserve({ requestId: dup, ...hot, amountMicro: 2_000 }),
          f.ledger.reserve({ requestId: dup, ...hot, amountMicro: 2_000 }),
          f.ledger.reserve({ requestId: `${dup}_cold`, ...cold, amountMicro: 3_000 }),
        ]);
        expect(results.every((r) => r.ok)).toBe(true);
        // hot: alone, then the group; cold: alone, at once (no third statement for hot).
        expect(seen.reserveStatements).toBe(3);
        expect(await f.ledger.balance(hot.accountId)).toEqual({ balanceMicro: 100_000, heldMicro: 3_000 });
        expect(await f.ledger.balance(cold.accountId)).toEqual({ balanceMicro: 100_000, heldMicro: 3_000 });
        await f.ledger.settle(settlement(hot, dup, 1_500));
        expect(await f.ledger.balance(hot.accountId)).toEqual({ balanceMicro: 98_500, heldMicro: 1_000 });
        expect((await auditPostgres(f.sql)).heldDrift).toEqual([]);
      } finally {
        await f.close();
      }
    });
  });

  test("PostgreSQL: a clock that steps back across midnight (UTC) lets no more than the daily limit through", async () => {
    const clock = { now: JUST_AFTER_MIDNIGHT };
    const sql = await clockPool();
    const ledger = await createPostgresLedger(sql, { now: () => clock.now, log: () => {} });
    const accounts = createPostgresAccounts(sql, () => clock.now);
    const account = await accounts.createAccount("clock", 100_000_000);
    const key = (await accounts.createKey(account.id, { name: "daily", spendLimitMicro: 1_000_000, spendLimitPeriod: "day" }))!;
    try {
      expect(await clockStepBackAcrossMidnight(ledger, clock, { accountId: account.id, keyId: key.id })).toBe(4);
    } finally {
      await ledger.close(1_000);
    }
  });

  test("PostgreSQL: a clock that ran a month ahead and was put right does not lock a daily limit until that day", async () => {
    const clock = { now: JUST_AFTER_MIDNIGHT };
    const sql = await clockPool();
    const ledger = await createPostgresLedger(sql, { now: () => clock.now, log: () => {} });
    const accounts = createPostgresAccounts(sql, () => clock.now);
    const account = await accounts.createAccount("ahead", 100_000_000);
    const key = (await accounts.createKey(account.id, { name: "daily", spendLimitMicro: 1_000_000, spendLimitPeriod: "day" }))!;
    try {
      await clockAheadThenPutRight(ledger, clock, { accountId: account.id, keyId: key.id });
    } finally {
      await ledger.close(1_000);
    }
  });

  describe("PostgreSQL ledger under faults", () => {
    test("unreachable at start: the ledger and the stores fail promptly instead of hanging", async () => {
      const url = `postgres://postgres@127.0.0.1:${closedPort()}/nowhere`;
      const started = performance.now();
      const sql = connectPostgres(url, { connectTimeoutMs: 1_000 });
      pools.push(sql);
      await expect(createPostgresLedger(sql, { now: Date.now, timeoutMs: 1_000 })).rejects.toThrow();
      await expect(openPostgresStores(url, { pool: { connectTimeoutMs: 1_000 } })).rejects.toThrow();
      expect(performance.now() - started).toBeLessThan(3_000);
    });

    test("PostgreSQL goes away: reserve answers unavailable promptly, settlements wait, health says so; back: each written once", async () => {
      const target = new URL(await database());
      const proxy = tcpProxy(Number(target.port || 5432));
      target.port = String(proxy.port);
      const via = connectPostgres(target.toString(), { max: 4, connectTimeoutMs: 500, statementTimeoutMs: 1_000 });
      pools.push(via);
      const f = await pgFixture(fast, via);
      try {
        const who = await f.fund(1_000_000);
        const ids = Array.from({ length: 20 }, (_, i) => `req_gone_${Date.now()}_${i}`);
        for (const id of ids) expect((await f.ledger.reserve({ requestId: id, ...who, amountMicro: 2_000 })).ok).toBe(true);

        proxy.cut();
        const started = performance.now();
        expect(await f.ledger.reserve({ requestId: "req_during_outage", ...who, amountMicro: 1 })).toMatchObject({ ok: false, reason: "unavailable" });
        expect(performance.now() - started).toBeLessThan(1_500);
        // Nobody hangs on a dead database: the settle promises resolve while nothing is written.
        await Promise.all(ids.map((id) => f.ledger.settle(settlement(who, id, 1_500))));
        expect(f.ledger.health().writable).toBe(false);
        expect(f.ledger.health().queued).toBeGreaterThanOrEqual(20);
        expect(f.ledger.admits(true)).toBe(false);
        expect(f.ledger.admits(false)).toBe(true);
        expect((await f.ledger.reserve({ requestId: "req_refused", ...who, amountMicro: 1 })).ok).toBe(false);
        expect(f.logs.some((l) => l.level === "error" && l.message.startsWith("ledger cannot write"))).toBe(true);

        proxy.restore();
        await until("the ledger writable with nothing queued", 5_000, () => f.ledger.health().writable && f.ledger.health().queued === 0);
        expect(f.ledger.admits(true)).toBe(true);
        const [written] = await f.sql`SELECT COUNT(*)::int AS n, SUM(cost_micro)::int AS cost FROM usage_records WHERE request_id LIKE ${"req_gone_%"} AND account_id = ${who.accountId}`;
        expect(written).toEqual({ n: 20, cost: 20 * 1_500 });
        expect(await f.ledger.balance(who.accountId)).toEqual({ balanceMicro: 1_000_000 - 20 * 1_500, heldMicro: 0 });
      } finally {
        proxy.restore();
        await f.close();
        proxy.stop();
      }
    });

    test("backends terminated mid-load (pg_terminate_backend): every granted request is charged exactly once, nothing stays held", async () => {
      const f = await pgFixture(fast);
      const killer = connectPostgres(await database(), { max: 1, applicationName: "switchyard-test-killer" });
      pools.push(killer);
      try {
        const who = await f.fund(10_000_000);
        const granted: string[] = [];
        let kills = 0;
        const killing = (async () => {
          for (let i = 0; i < 6; i++) {
            await Bun.sleep(40);
            const [row] = await killer`SELECT COUNT(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
                                       WHERE datname = current_database() AND application_name = 'switchyard' AND pid <> pg_backend_pid()`;
            kills += row.n;
          }
        })();
        await Promise.all(Array.from({ length: 300 }, async (_, i) => {
          const id = `req_killed_${Date.now()}_${i}`;
          await Bun.sleep(i);
          const reserved = await f.ledger.reserve({ requestId: id, ...who, amountMicro: 2_000 });
          if (!reserved.ok) return;
          granted.push(id);
          await f.ledger.settle(settlement(who, id, 1_000));
        }));
        await killing;
        expect(kills).toBeGreaterThan(0);
        expect(granted.length).toBeGreaterThan(0);
        await until("the ledger writable with nothing queued", 5_000, async () => {
          await f.ledger.flush();
          return f.ledger.health().writable && f.ledger.health().queued === 0;
        });
        // Read through the killer's connection, which is never terminated: a connection of the
        // gateway's pool killed in the last round may still be handed to a statement once, and the
        // ledger retries its own statements but a test's read would not.
        const [written] = await killer`SELECT COUNT(*)::int AS n FROM usage_records WHERE account_id = ${who.accountId}`;
        expect(written.n).toBe(granted.length);
        const [account] = await killer`SELECT balance_micro::int AS balance, held_micro::int AS held FROM accounts WHERE id = ${who.accountId}`;
        expect(account).toEqual({ balance: 10_000_000 - granted.length * 1_000, held: 0 });
        expect((await auditPostgres(killer)).clean).toBe(true);
      } finally {
        await f.close();
      }
    });
  });

  test("migrations: four processes starting at once on an empty database all succeed, and apply each version once", async () => {
    const url = await migrationsDatabase();
    const starters = Array.from({ length: 4 }, () => connectPostgres(url, { max: 1 }));
    pools.push(...starters);
    const versions = await Promise.all(starters.map((sql) => migratePostgres(sql)));
    expect(new Set(versions).size).toBe(1);
    const [row] = await starters[0]!`SELECT COUNT(*)::int AS n, COUNT(DISTINCT version)::int AS d FROM schema_migrations`;
    expect(row.n).toBe(versions[0]!);
    expect(row.d).toBe(versions[0]!);
    // And again: nothing to do.
    expect(await migratePostgres(starters[1]!)).toBe(versions[0]!);
  });
}
