/**
 * Money queued during a store fault is never only a log line at shutdown (issue 32 item 13): the
 * ledger retries within its grace, keeps what it still cannot write in a spill file (fsynced), and
 * the next process on the same file writes it, once. Run many times over, with the stop right
 * after the fault clears (at random within a few milliseconds) and with the fault still on.
 */
import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../src/store/database.ts";
import { createSqliteLedger } from "../../src/store/sqlite/sqlite-ledger.ts";
import { auditLedger } from "../../src/store/sqlite/audit.ts";
import { fundedLedgerFile } from "../helpers/funded-ledger-file.ts";
import type { Settlement } from "../../src/billing/ledger.ts";
import { SQL } from "bun";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { createPostgresLedger } from "../../src/store/postgres/pg-ledger.ts";
import { createPostgresAccounts } from "../../src/store/postgres/pg-accounts.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A deterministic sequence (the test's "random" stop times are the same every run). */
function seeded(seed: number) {
  let x = seed >>> 0;
  return () => ((x = (x * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

const quiet = () => {};

/** A SQLite file of its own with one funded account and a key, closed again. */
function ledgerFile(): { path: string; accountId: string; keyId: string } {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-spill-"));
  dirs.push(dir);
  const path = join(dir, "ledger.sqlite");
  return { path, ...fundedLedgerFile(path) };
}

describe("settlements queued through a store fault survive the stop that follows", () => {
  test("40 stops right after the fault clears, or while it lasts: every answer charged exactly once, the books balanced", async () => {
    const random = seeded(29);
    for (let round = 0; round < 40; round++) {
      const { path, accountId, keyId } = ledgerFile();
      const account = { id: accountId };

      // A process: reserve 20 requests, the disk "fills", they settle into the queue, the fault
      // clears (or not), and the process stops with a short grace.
      const db = openDatabase(path, { busyTimeoutMs: 0 });
      const log: { level: string; message: string }[] = [];
      const ledger = createSqliteLedger(db, { now: Date.now, log: (level, message) => log.push({ level, message }), retryMaxMs: 5, probeIntervalMs: 5 });
      const settlements: Settlement[] = [];
      for (let i = 0; i < 20; i++) {
        const requestId = `req_${round}_${i}`;
        expect((await ledger.reserve({ requestId, accountId: account.id, keyId, amountMicro: 10_000 })).ok).toBe(true);
        settlements.push({ requestId, accountId: account.id, keyId, model: "m", provider: "p", promptTokens: 10, completionTokens: 5, estimated: false, costMicro: 1_000 + i, status: "ok", latencyMs: 1 });
      }
      db.exec(`PRAGMA max_page_count = ${(db.query("PRAGMA page_count").get() as { page_count: number }).page_count}`);
      const settled = settlements.map((s) => ledger.settle(s));
      await Bun.sleep(5);
      const faultStays = round % 4 === 3;
      if (!faultStays) db.exec("PRAGMA max_page_count = 1073741823");
      await Bun.sleep(Math.floor(random() * 4));
      await ledger.close(Math.floor(random() * 3));
      await Promise.all(settled);
      expect(log.filter((l) => l.message.includes("apply it by hand"))).toEqual([]);
      db.close();

      // The next process on the same file writes what the first one kept.
      const next = openDatabase(path, { busyTimeoutMs: 0 });
      const again = createSqliteLedger(next, { now: Date.now, log: quiet });
      await again.flush();
      for (let wait = 0; wait < 100 && existsSync(`${path}.spill`); wait++) await Bun.sleep(5);
      expect(existsSync(`${path}.spill`)).toBe(false);
      expect(again.openHolds()).toBe(0);
      await again.close(1_000);
      next.close();

      const check = new Database(path, { readonly: true });
      const records = check.query<{ request_id: string; cost_micro: number }, []>("SELECT request_id, cost_micro FROM usage_records ORDER BY request_id").all();
      const audit = auditLedger(check);
      check.close();
      const expected = settlements.map((s) => ({ request_id: s.requestId, cost_micro: s.costMicro })).sort((a, b) => (a.request_id < b.request_id ? -1 : 1));
      expect(records).toEqual(expected);
      expect(audit.clean).toBe(true);
    }
  }, 60_000);

  test("a spill file replayed twice (a start that stopped before removing it) charges once", async () => {
    const { path, accountId, keyId } = ledgerFile();
    const account = { id: accountId };
    const line = JSON.stringify({ settlement: { requestId: "req_twice", accountId: account.id, keyId, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 5_000, status: "ok", latencyMs: 1 }, held: 9_000 });
    for (let start = 0; start < 2; start++) {
      await Bun.write(`${path}.spill`, `${line}\n`);
      const db = openDatabase(path, { busyTimeoutMs: 0 });
      const ledger = createSqliteLedger(db, { now: Date.now, log: quiet });
      await ledger.flush();
      await ledger.close(1_000);
      db.close();
    }
    const check = new Database(path, { readonly: true });
    expect(check.query("SELECT cost_micro FROM usage_records").all()).toEqual([{ cost_micro: 5_000 }]);
    expect(check.query("SELECT balance_micro FROM accounts").get()).toEqual({ balance_micro: 1_000_000 - 5_000 });
    check.close();
  });

  test("a spill file beside a ledger that is not its own (the file lost and made anew) stops the start: nothing replayed, the file kept; the gateway exits 1 saying why", async () => {
    const { path, accountId, keyId } = ledgerFile();
    const line = JSON.stringify({ settlement: { requestId: "req_orphan", accountId, keyId, model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 5_000, status: "ok", latencyMs: 1 }, held: 9_000 });
    // The ledger file is gone (deleted under the gateway, a volume not mounted): the next start would make a new, empty one.
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${path}${suffix}`, { force: true });
    await Bun.write(`${path}.spill`, `${line}\n`);
    const db = openDatabase(path, { busyTimeoutMs: 0 });
    expect(() => createSqliteLedger(db, { now: Date.now, log: quiet })).toThrow(/holds 1 settlements of 1 account this ledger does not have/);
    expect(db.query("SELECT COUNT(*) AS n FROM usage_records").get()).toEqual({ n: 0 });
    db.close();
    expect(existsSync(`${path}.spill`)).toBe(true);

    // The gateway itself: one line, exit 1, the spill file still there for the restored ledger.
    const child = Bun.spawn(["bun", join(import.meta.dir, "../../src/index.ts")], {
      env: { ...process.env, PORT: "0", SWITCHYARD_DB: path, SWITCHYARD_DEMO: "0", SWITCHYARD_CONFIG: "", OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" },
      stdout: "pipe", stderr: "pipe",
    });
    const [code, err] = await Promise.all([child.exited, new Response(child.stderr).text()]);
    expect(code).toBe(1);
    expect(err).toContain("this ledger does not have");
    expect(err).not.toContain("    at ");
    expect(existsSync(`${path}.spill`)).toBe(true);

    // Written into the ledger anyway (a release before this check): the audit names the charge posted to no balance.
    const by = new Database(path);
    by.run("INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at) VALUES ('req_orphan', ?, ?, 'm', 'p', 1, 1, 0, 5000, 'ok', 1, 1)", [accountId, keyId]);
    by.close();
    const audited = auditLedger(openDatabase(path));
    expect(audited.orphaned).toEqual([{ request_id: "req_orphan", account_id: accountId, cost_micro: 5_000 }]);
    expect(audited.clean).toBe(false);
  });
});


const pgMissing = await postgresMissing();
const database = useTestDatabase();
if (pgMissing) {
  test.skip(`spill at shutdown on PostgreSQL — skipped: ${pgMissing}`, () => {});
} else {
  describe("on PostgreSQL", () => {
    test("settlements a stop cannot write (the accounts table locked through its grace) are spilled and written once by the next start", async () => {
      const url = await database();
      const admin = new SQL({ url, max: 2 });
      await migratePostgres(admin);
      const accounts = createPostgresAccounts(admin, Date.now);
      const account = await accounts.createAccount("spill", 1_000_000);
      const keyId = (await accounts.createKey(account.id, "k"))!.id;
      const dir = mkdtempSync(join(tmpdir(), "switchyard-pg-spill-"));
      dirs.push(dir);
      const spill = { dir, database: url };
      const sql = new SQL({ url, max: 4, connection: { lock_timeout: "200", statement_timeout: "2000" } });
      const ledger = await createPostgresLedger(sql, { now: Date.now, log: quiet, timeoutMs: 1_000, retryMaxMs: 20, busyLimitMs: 100, spill });
      const settlements: Settlement[] = [];
      for (let i = 0; i < 10; i++) {
        const requestId = `req_pgspill_${i}`;
        expect((await ledger.reserve({ requestId, accountId: account.id, keyId, amountMicro: 10_000 })).ok).toBe(true);
        settlements.push({ requestId, accountId: account.id, keyId, model: "m", provider: "p", promptTokens: 10, completionTokens: 5, estimated: false, costMicro: 2_000 + i, status: "ok", latencyMs: 1 });
      }
      // Another session holds the accounts table through the whole grace: every write waits and fails.
      const blocker = await admin.reserve();
      await blocker`BEGIN`;
      await blocker`LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE`;
      const settled = settlements.map((s) => ledger.settle(s));
      await Bun.sleep(300);
      await ledger.close(100);
      await Promise.all(settled);
      await blocker`ROLLBACK`;
      blocker.release();
      await sql.close({ timeout: 0 });
      const files = readdirSync(dir).filter((f) => f.endsWith(".spill"));
      expect(files.length).toBe(1);
      expect(Number((await admin`SELECT COUNT(*) AS n FROM usage_records`)[0].n)).toBeLessThan(10);

      // The next process on the same database writes them, once, and removes the file.
      const sql2 = new SQL({ url, max: 4 });
      const next = await createPostgresLedger(sql2, { now: Date.now, log: quiet, spill });
      await next.flush();
      for (let wait = 0; wait < 100 && readdirSync(dir).some((f) => f.endsWith(".spill")); wait++) await Bun.sleep(10);
      expect(readdirSync(dir).filter((f) => f.endsWith(".spill"))).toEqual([]);
      await next.close(1_000);
      await sql2.close({ timeout: 0 });
      const records = await admin`SELECT request_id, cost_micro FROM usage_records ORDER BY request_id`;
      expect(records.map((r: { request_id: string; cost_micro: string }) => [r.request_id, Number(r.cost_micro)])).toEqual(settlements.map((s) => [s.requestId, s.costMicro]));
      const [books] = await admin`SELECT balance_micro, held_micro FROM accounts WHERE id = ${account.id}`;
      expect(Number(books.balance_micro)).toBe(1_000_000 - settlements.reduce((n, s) => n + s.costMicro, 0));
      await admin.close({ timeout: 0 });
    }, 30_000);

    test("a spill file of accounts the database does not have (a database made anew) stops the start and is kept", async () => {
      const url = await database();
      const admin = new SQL({ url, max: 2 });
      await migratePostgres(admin);
      const dir = mkdtempSync(join(tmpdir(), "switchyard-pg-spill-"));
      dirs.push(dir);
      const file = join(dir, `switchyard-${(Bun.SHA256.hash(url, "hex") as string).slice(0, 12)}-gone.spill`);
      await Bun.write(file, JSON.stringify({ settlement: { requestId: "req_pg_orphan", accountId: "acct_gone", keyId: "key_gone", model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 5_000, status: "ok", latencyMs: 1 }, held: 9_000 }) + "\n");
      const sql = new SQL({ url, max: 2 });
      await expect(createPostgresLedger(sql, { now: Date.now, log: quiet, spill: { dir, database: url } })).rejects.toThrow(/this ledger does not have \(acct_gone\)/);
      expect(existsSync(file)).toBe(true);
      expect(Number((await admin`SELECT COUNT(*) AS n FROM usage_records WHERE request_id = 'req_pg_orphan'`)[0].n)).toBe(0);
      await sql.close({ timeout: 0 });
      await admin.close({ timeout: 0 });
    });
  });
}
