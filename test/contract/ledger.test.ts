import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAccountStore } from "../../src/store/sqlite/sqlite-accounts.ts";
import type { Ledger, RejectionLog } from "../../src/billing/ledger.ts";
import { openDatabase } from "../../src/store/database.ts";
import { createSqliteLedger, type SqliteLedgerOptions } from "../../src/store/sqlite/sqlite-ledger.ts";
import { auditLedger } from "../../src/store/sqlite/audit.ts";
import type { Logger } from "../../src/log/log.ts";
import { ledgerContract, settlement, type LedgerFixture } from "../helpers/ledger-contract.ts";
import { faultyLedger } from "../helpers/faulty-ledger.ts";
import { until } from "../helpers/until.ts";
import { clockAheadThenPutRight, clockStepBackAcrossMidnight, JUST_AFTER_MIDNIGHT } from "../helpers/clock-step.ts";

const dir = mkdtempSync(join(tmpdir(), "switchyard-ledger-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

interface SqliteFixture extends LedgerFixture {
  ledger: Ledger & RejectionLog;
  db: Database;
  path: string;
  logs: { level: string; message: string; fields?: Record<string, unknown> }[];
}

async function sqliteFixture(options: Partial<SqliteLedgerOptions> = {}): Promise<SqliteFixture> {
  const path = join(dir, `ledger-${files++}.sqlite`);
  const db = openDatabase(path, { busyTimeoutMs: 0 });
  const logs: SqliteFixture["logs"] = [];
  const log: Logger = (level, message, fields) => logs.push({ level, message, fields });
  const ledger = createSqliteLedger(db, { now: Date.now, log, ...options });
  const accounts = createAccountStore(db, Date.now);
  const records = db.query<{ cost_micro: number; status: string }, [string]>("SELECT cost_micro, status FROM usage_records WHERE request_id = ?");
  return {
    ledger,
    db,
    path,
    logs,
    async fund(balanceMicro, spendLimitMicro) {
      const account = accounts.createAccount("contract", balanceMicro);
      const key = accounts.createKey(account.id, { name: "k", spendLimitMicro: spendLimitMicro ?? null })!;
      return { accountId: account.id, keyId: key.id };
    },
    async records(requestId) {
      return records.all(requestId);
    },
    async close() {
      await ledger.close(1_000);
      db.close();
    },
  };
}

ledgerContract("SQLite", () => sqliteFixture());
ledgerContract("fault-injecting wrapper, nothing armed", async () => {
  const f = await sqliteFixture();
  return { ...f, ledger: faultyLedger(f.ledger).ledger };
});

const ledgerOptions = { busyLimitMs: 150, retryMaxMs: 40, probeIntervalMs: 50 };

describe("SQLite ledger under store faults", () => {
  for (const fault of [
    { name: "disk full", arm: (db: Database) => db.exec(`PRAGMA max_page_count = ${(db.query("PRAGMA page_count").get() as { page_count: number }).page_count}`), disarm: (db: Database) => db.exec("PRAGMA max_page_count = 1073741823") },
    { name: "read-only database", arm: (db: Database) => db.exec("PRAGMA query_only = 1"), disarm: (db: Database) => db.exec("PRAGMA query_only = 0") },
  ]) {
    test(`${fault.name}: settlements wait in the queue, paid requests are refused, everything is written once on recovery`, async () => {
      const f = await sqliteFixture(ledgerOptions);
      try {
        const who = await f.fund(1_000_000);
        // Enough records that the file must grow: a full disk refuses them.
        const ids = Array.from({ length: 400 }, (_, i) => `req_fault_${fault.name.length}_${i}`);
        fault.arm(f.db);
        for (const id of ids.slice(0, 200)) expect((await f.ledger.reserve({ requestId: id, ...who, amountMicro: 1_000 })).ok).toBe(true);
        // The settle promises resolve (nobody hangs on a dead store) while nothing is written.
        await Promise.all(ids.slice(0, 200).map((id) => f.ledger.settle({ ...settlement(who, id, 700), model: "x".repeat(2_000) })));
        expect(f.ledger.health()).toMatchObject({ writable: false, queued: 200 });
        expect(f.ledger.admits(true)).toBe(false);
        expect(f.ledger.admits(false)).toBe(true);
        expect(await f.ledger.reserve({ requestId: "req_refused", ...who, amountMicro: 1 })).toMatchObject({ ok: false, reason: "unavailable" });
        // Free requests keep going meanwhile.
        await Promise.all(ids.slice(200).map((id) => f.ledger.settle(settlement(who, id, 0))));
        expect(f.ledger.health().queued).toBe(400);
        expect(f.logs.some((l) => l.level === "error" && l.message.startsWith("ledger cannot write"))).toBe(true);

        fault.disarm(f.db);
        await until("the ledger writable with nothing queued", 3_000, () => f.ledger.health().writable && f.ledger.health().queued === 0);
        expect(f.ledger.admits(true)).toBe(true);
        const written = f.db.query<{ n: number; cost: number }, []>("SELECT COUNT(*) AS n, SUM(cost_micro) AS cost FROM usage_records").get()!;
        expect(written).toEqual({ n: 400, cost: 200 * 700 });
        expect((await f.ledger.balance(who.accountId))!).toEqual({ balanceMicro: 1_000_000 - 200 * 700, heldMicro: 0 });
        expect(auditLedger(f.db).clean).toBe(true);
      } finally {
        await f.close();
      }
    });
  }

  test("another connection holds the write lock: nothing waits synchronously, the store counts as failing after busyLimitMs, and recovers", async () => {
    const f = await sqliteFixture(ledgerOptions);
    const other = new Database(f.path);
    try {
      const who = await f.fund(100_000);
      other.exec("BEGIN IMMEDIATE");
      await f.ledger.reserve({ requestId: "req_locked", ...who, amountMicro: 5_000 });
      const started = performance.now();
      const settled = f.ledger.settle(settlement(who, "req_locked", 4_000));
      // The event loop keeps turning while the lock is held.
      let ticks = 0;
      const ticker = setInterval(() => ticks++, 5);
      await settled;
      clearInterval(ticker);
      const waited = performance.now() - started;
      expect(waited).toBeGreaterThanOrEqual(ledgerOptions.busyLimitMs - 10);
      expect(ticks).toBeGreaterThan(5);
      expect(f.ledger.health().writable).toBe(false);
      expect(f.ledger.health().lastError).toContain("locked");
      other.exec("COMMIT");
      await until("the ledger writable with nothing queued", 3_000, () => f.ledger.health().writable && f.ledger.health().queued === 0);
      expect(await f.records("req_locked")).toEqual([{ cost_micro: 4_000, status: "ok" }]);
    } finally {
      other.close();
      await f.close();
    }
  });

  test("a charge the database refuses for good is logged and its record kept without it; the others in its batch are written", async () => {
    const f = await sqliteFixture(ledgerOptions);
    try {
      const poor = await f.fund(10_000);
      const rich = await f.fund(10_000);
      await f.ledger.reserve({ requestId: "req_poison", ...poor, amountMicro: 5_000 });
      await f.ledger.reserve({ requestId: "req_bystander", ...rich, amountMicro: 5_000 });
      // Someone emptied the account behind the ledger's back: the debit breaks the balance CHECK.
      f.db.exec(`UPDATE accounts SET balance_micro = 0 WHERE id = '${poor.accountId}'`);
      await Promise.all([f.ledger.settle(settlement(poor, "req_poison", 5_000)), f.ledger.settle(settlement(rich, "req_bystander", 3_000))]);
      await f.ledger.flush();
      expect(await f.records("req_bystander")).toEqual([{ cost_micro: 3_000, status: "ok" }]);
      expect(await f.records("req_poison")).toEqual([{ cost_micro: 0, status: "ok" }]);
      expect(f.ledger.health()).toMatchObject({ writable: true, queued: 0 });
      expect(f.logs.find((l) => l.message.startsWith("settlement's charge refused"))?.fields?.settlement).toMatchObject({ requestId: "req_poison", costMicro: 5_000 });
      expect(f.ledger.openHolds()).toBe(0);
    } finally {
      await f.close();
    }
  });

  test("the audit lists a charge the database refused, on an answer cut short too; an answer charged nothing by design is not listed", async () => {
    const f = await sqliteFixture(ledgerOptions);
    try {
      const poor = await f.fund(10_000);
      await f.ledger.reserve({ requestId: "req_cut_refused", ...poor, amountMicro: 5_000 });
      // The balance can no longer cover the late charge of a stream cut short (a fenced gateway's,
      // whose hold another process released and the account spent): recorded `cancelled` without it.
      f.db.exec(`UPDATE accounts SET balance_micro = 0 WHERE id = '${poor.accountId}'`);
      await f.ledger.settle(settlement(poor, "req_cut_refused", 5_000, "cancelled"));
      // Charged nothing by design (a whole answer read after its client's reset): tokens, no hold, no charge.
      await f.ledger.settle(settlement(poor, "req_reset_free", 0, "cancelled"));
      await f.ledger.flush();
      expect(await f.records("req_cut_refused")).toEqual([{ cost_micro: 0, status: "cancelled" }]);
      expect(await f.records("req_reset_free")).toEqual([{ cost_micro: 0, status: "cancelled" }]);
      const report = auditLedger(f.db, new Set(["test/model"]));
      expect(report.uncharged).toEqual([{ request_id: "req_cut_refused", model: "test/model", prompt_tokens: 10, completion_tokens: 20 }]);
      expect(report.clean).toBe(false);
    } finally {
      await f.close();
    }
  });

  test("an idle ledger notices a dead store by itself (probe writes), and notices it come back", async () => {
    const f = await sqliteFixture(ledgerOptions);
    try {
      expect(f.ledger.health().writable).toBe(true);
      f.db.exec("PRAGMA query_only = 1");
      await until("the ledger not writable", 3_000, () => !f.ledger.health().writable);
      f.db.exec("PRAGMA query_only = 0");
      await until("the ledger writable again", 3_000, () => f.ledger.health().writable);
    } finally {
      await f.close();
    }
  });

  // A kill -9 and disk-fault probe: ext4 on a disk whose writes failed (writeback EIO) kept taking
  // commits into the page cache; the checkpoint thread's fsync said "disk I/O error", and the
  // gateway served paid answers and top-ups for 4 s more, all lost (3,456 answers, 73 top-ups).
  test("a checkpoint whose sync failed: paid requests are refused until a checkpoint through the ledger's connection syncs; a commit that succeeds is no proof", async () => {
    const path = join(dir, `ledger-${files++}.sqlite`);
    const real = openDatabase(path, { busyTimeoutMs: 0 });
    let syncFails = true;
    const checkpoints: string[] = [];
    // The ledger's own connection, whose checkpoints fail while `syncFails` (the disk still losing writes).
    const db = new Proxy(real, {
      get(target, prop) {
        if (prop === "query") {
          return (sql: string) => {
            if (!/^PRAGMA wal_checkpoint/.test(sql)) return target.query(sql);
            checkpoints.push(sql);
            if (!syncFails) return target.query(sql);
            return { get: () => { throw Object.assign(new Error("disk I/O error"), { code: "SQLITE_IOERR_FSYNC" }); } };
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const ledger = createSqliteLedger(db, { now: Date.now, log: () => {}, ...ledgerOptions });
    const accounts = createAccountStore(real, Date.now);
    try {
      const account = accounts.createAccount("sync", 1_000_000);
      const who = { accountId: account.id, keyId: accounts.createKey(account.id, { name: "k" })!.id };
      expect((await ledger.reserve({ requestId: "req_before", ...who, amountMicro: 1_000 })).ok).toBe(true);
      ledger.storageFailed!(Object.assign(new Error("a WAL checkpoint failed: SQLiteError: disk I/O error"), { code: "SQLITE_IOERR_FSYNC" }));
      // At once: no paid request is admitted, /ready says so.
      expect(ledger.admits(true)).toBe(false);
      expect(ledger.health().writable).toBe(false);
      expect((await ledger.reserve({ requestId: "req_during", ...who, amountMicro: 1_000 })).ok).toBe(false);
      // A settlement waits; the file would take its commit, but a commit is no proof.
      await ledger.settle(settlement(who, "req_before", 700));
      await Bun.sleep(300);
      expect(checkpoints.length).toBeGreaterThan(1);
      expect(ledger.health()).toMatchObject({ writable: false, queued: 1 });
      expect(real.query("SELECT COUNT(*) AS n FROM usage_records").get()).toEqual({ n: 0 });
      // The disk syncs again: the next retry's checkpoint proves it, and the settlement is written once.
      syncFails = false;
      await until("the ledger writable again", 3_000, () => ledger.health().writable && ledger.health().queued === 0);
      expect(ledger.admits(true)).toBe(true);
      expect(real.query("SELECT cost_micro FROM usage_records WHERE request_id = 'req_before'").all()).toEqual([{ cost_micro: 700 }]);
    } finally {
      await ledger.close(1_000);
      real.close();
    }
  });

  test("a flood of refusals is counted per key, minute and status: a handful of rows", async () => {
    const f = await sqliteFixture(ledgerOptions);
    try {
      const minute = 29_000_000 * 60_000;
      for (let i = 0; i < 5_000; i++) f.ledger.countRejection(`key_${i % 3}`, i % 2 ? 429 : 402, minute + (i % 50) * 1_000);
      await f.ledger.flush();
      const rows = f.db.query<{ key_id: string; status: number; count: number }, []>("SELECT key_id, status, count FROM rejection_counts ORDER BY key_id, status").all();
      expect(rows.length).toBe(6);
      expect(rows.reduce((n, r) => n + r.count, 0)).toBe(5_000);
    } finally {
      await f.close();
    }
  });
});

test("a clock that steps back across midnight (UTC) lets no more than the daily limit through: the count of the later window holds", async () => {
  const clock = { now: JUST_AFTER_MIDNIGHT };
  const path = join(dir, `ledger-${files++}.sqlite`);
  const db = openDatabase(path, { busyTimeoutMs: 0 });
  const ledger = createSqliteLedger(db, { now: () => clock.now, log: () => {} });
  const accounts = createAccountStore(db, () => clock.now);
  const account = accounts.createAccount("clock", 100_000_000);
  const key = accounts.createKey(account.id, { name: "daily", spendLimitMicro: 1_000_000, spendLimitPeriod: "day" })!;
  try {
    expect(await clockStepBackAcrossMidnight(ledger, clock, { accountId: account.id, keyId: key.id })).toBe(4);
    await ledger.flush();
    // The books agree with the count: no period drift, nothing else.
    const audit = auditLedger(db);
    expect(audit.periodDrift).toEqual([]);
    expect(audit.clean).toBe(true);
  } finally {
    await ledger.close(1_000);
    db.close();
  }
});

test("a clock that ran a month ahead and was put right does not lock a daily limit until that day, nor stamp records a month ahead", async () => {
  const clock = { now: JUST_AFTER_MIDNIGHT };
  const path = join(dir, `ledger-${files++}.sqlite`);
  const db = openDatabase(path, { busyTimeoutMs: 0 });
  const ledger = createSqliteLedger(db, { now: () => clock.now, log: () => {} });
  const accounts = createAccountStore(db, () => clock.now);
  const account = accounts.createAccount("ahead", 100_000_000);
  const key = accounts.createKey(account.id, { name: "daily", spendLimitMicro: 1_000_000, spendLimitPeriod: "day" })!;
  try {
    await clockAheadThenPutRight(ledger, clock, { accountId: account.id, keyId: key.id });
    await ledger.flush();
    const last = db.query<{ created_at: number }, []>("SELECT created_at FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(last.created_at).toBeLessThan(clock.now + 60_000);


  } finally {
    await ledger.close(1_000);
    db.close();
  }
});
