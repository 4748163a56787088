/**
 * Spill files of PostgreSQL processes that are gone (store/postgres/pg-spill.ts): replayed by a
 * start or by a process already running once it finds them, each settlement charged once however
 * many files hold it, the files and their lock files removed after. The live-owner side and the
 * kill -9 are in test/process/pg-spill-ownership.test.ts.
 */
import { afterAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Settlement } from "../../src/billing/ledger.ts";
import { createPostgresAccounts } from "../../src/store/postgres/pg-accounts.ts";
import { createPostgresLedger } from "../../src/store/postgres/pg-ledger.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";
import { databaseIdentity, spillOwnership } from "../../src/store/postgres/pg-spill.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { until } from "../helpers/until.ts";

const missing = await postgresMissing();
const database = useTestDatabase();
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A database with one funded account and key, a spill folder, and `prefix` the file names of that database. */
async function setUp() {
  const url = await database();
  const sql = new SQL({ url, max: 4 });
  await migratePostgres(sql);
  const accounts = createPostgresAccounts(sql, Date.now);
  const account = await accounts.createAccount(`replay-${Math.random().toString(36).slice(2, 8)}`, 1_000_000);
  const keyId = (await accounts.createKey(account.id, "k"))!.id;
  const dir = mkdtempSync(join(tmpdir(), "switchyard-pg-replay-"));
  dirs.push(dir);
  const prefix = spillOwnership({ dir, database: await databaseIdentity(sql), instanceId: "probe" }).prefix;
  /** The names versions before the database's identity gave: after the URL's text. */
  const formerPrefix = spillOwnership({ dir, database: url, instanceId: "probe" }).prefix;
  const settlement = (n: number): Settlement => ({ requestId: `req_${account.id}_${n}`, accountId: account.id, keyId, model: "m", provider: "p", promptTokens: 10, completionTokens: 5, estimated: false, costMicro: 1_000 + n, status: "ok", latencyMs: 1 });
  /** A file as a process that is gone left it (no lock file: as an older version wrote them, or after a clean stop). */
  const leave = (owner: string, settlements: Settlement[], named = prefix) =>
    writeFileSync(join(dir, `${named}${owner}.spill`), settlements.map((s) => JSON.stringify({ settlement: s, held: 5_000 })).join("\n") + "\n");
  const books = async () => {
    const records = (await sql`SELECT request_id FROM usage_records WHERE account_id = ${account.id} ORDER BY request_id`).map((r: { request_id: string }) => r.request_id);
    const [row] = await sql`SELECT balance_micro, held_micro FROM accounts WHERE id = ${account.id}`;
    return { records, balance: Number(row.balance_micro), held: Number(row.held_micro) };
  };
  return { url, sql, dir, prefix, formerPrefix, settlement, leave, books };
}

if (missing) {
  test.skip(`Spill replay on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  test("a settlement in two files of processes that are gone is charged once; the files and stray lock files go", async () => {
    const { url, sql, dir, prefix, settlement, leave, books } = await setUp();
    // One process's file, and another's that holds one of the same settlements (a file replayed
    // meanwhile into a process that then kept it in its own, and died too).
    leave("gone1", [settlement(1), settlement(2)]);
    leave("gone2", [settlement(2), settlement(3)]);
    // A lock file whose process died with nothing kept.
    writeFileSync(join(dir, `${prefix}gone3.spill.lock`), "");
    const ledger = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url } });
    try {
      await until("both files written and removed", 5_000, () => !readdirSync(dir).some((f) => f.endsWith(".spill")));
      const after = await books();
      expect(after.records).toEqual([1, 2, 3].map((n) => settlement(n).requestId));
      expect(after.balance).toBe(1_000_000 - (1_001 + 1_002 + 1_003));
      expect(after.held).toBe(0);
      // Only this process's own lock file is left.
      expect(readdirSync(dir)).toEqual([`${prefix}${ledger.instanceId}.spill.lock`]);
    } finally {
      await ledger.close(100);
    }
    expect(readdirSync(dir)).toEqual([]);
  }, 15_000);

  test("temporary files of spills their processes were killed in the middle of writing go with the files they were to replace; a living owner's stays", async () => {
    const { url, sql, dir, prefix, settlement, leave, books } = await setUp();
    // A process killed while rewriting its file (the file it was to replace is whole), and one
    // killed while writing its first (its lock file made at its start, no spill file yet).
    leave("cut1", [settlement(1)]);
    writeFileSync(join(dir, `${prefix}cut1.spill.4242.tmp`), JSON.stringify({ settlement: settlement(1), held: 5_000 }) + "\n{\"settl");
    writeFileSync(join(dir, `${prefix}cut2.spill.lock`), "");
    writeFileSync(join(dir, `${prefix}cut2.spill.4243.tmp`), "{\"settl");
    // A process that lives (this test holds its lock), in the middle of a write.
    const living = spillOwnership({ dir, database: url, instanceId: "living" });
    living.claim();
    writeFileSync(join(dir, `${prefix}living.spill.4244.tmp`), "{\"settl");
    const ledger = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url } });
    try {
      await until("the file written and removed", 5_000, async () => (await books()).records.length === 1 && !readdirSync(dir).some((f) => f.endsWith("cut1.spill")));
      expect(readdirSync(dir).filter((f) => f.endsWith(".tmp"))).toEqual([`${prefix}living.spill.4244.tmp`]);
      expect(readdirSync(dir).filter((f) => f.includes("cut"))).toEqual([]);
      expect((await books()).balance).toBe(1_000_000 - 1_001);
    } finally {
      await ledger.close(100);
      living.release();
    }
  }, 15_000);

  test("a file is found by every process of the database whatever its URL says, and an older version's file named after the URL is replayed too (a scale-out probe: a URL spelled otherwise never replayed it)", async () => {
    const { url, sql, dir, prefix, formerPrefix, settlement, leave, books } = await setUp();
    expect(formerPrefix).not.toBe(prefix);
    leave("elsewhere", [settlement(1)]);
    // Started with the same database under another name (a host name for the address, a pooler, a rotated password).
    const other = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: "postgres://switchyard:rotated@db.internal:6432/other-spelling" } });
    try {
      await until("the file written and removed", 5_000, async () => (await books()).records.length === 1 && !readdirSync(dir).some((f) => f.endsWith(".spill")));
    } finally {
      await other.close(100);
    }
    // A file an older version left, named after the URL's text, replayed by a start with that URL.
    leave("older-version", [settlement(2)], formerPrefix);
    const same = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url } });
    try {
      await until("the older file written and removed", 5_000, async () => (await books()).records.length === 2 && !readdirSync(dir).some((f) => f.endsWith(".spill")));
      expect((await books()).balance).toBe(1_000_000 - 1_001 - 1_002);
    } finally {
      await same.close(100);
    }
  }, 15_000);

  test("a process already running takes the file of one that died, once the sweep finds it", async () => {
    const { url, sql, dir, settlement, leave, books } = await setUp();
    const ledger = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url }, sweepIntervalMs: 50 });
    try {
      leave("died-later", [settlement(7)]);
      await until("the file written and removed", 5_000, async () => (await books()).records.length === 1 && !readdirSync(dir).some((f) => f.endsWith(".spill")));
      expect((await books()).balance).toBe(1_000_000 - 1_007);
    } finally {
      await ledger.close(100);
    }
    expect(existsSync(dir) && readdirSync(dir)).toEqual([]);
  }, 15_000);
}

if (!missing) {
  /**
   * The sweeper's timer is set before the start's first heartbeat returns. A start whose heartbeat
   * waits (here: behind a lock another session holds on the table it writes) longer than a sweep
   * interval used to run the sweep's look for spill files first: it read a variable not yet
   * declared and logged a ReferenceError at every such start. The start's own look comes first.
   */
  async function startBehindALock(sql: SQL, start: () => Promise<unknown>): Promise<void> {
    let locked!: () => void;
    const held = new Promise<void>((resolve) => (locked = resolve));
    const lock = sql.begin(async (tx) => {
      await tx`LOCK TABLE gateway_instances IN SHARE MODE`;
      locked();
      await Bun.sleep(300);
    });
    await held;
    try {
      await start();
    } finally {
      await lock;
    }
  }

  test("a start whose first heartbeat outlasts a sweep interval: no failed look for spill files, a dead process's file written once", async () => {
    const { url, sql, dir, settlement, leave, books } = await setUp();
    leave("gone-before", [settlement(4)]);
    const lines: string[] = [];
    let ledger: Awaited<ReturnType<typeof createPostgresLedger>> | undefined;
    await startBehindALock(sql, async () => {
      ledger = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url }, sweepIntervalMs: 20, log: (level, message, fields) => lines.push(`${level} ${message} ${JSON.stringify(fields ?? {})}`) });
    });
    try {
      await until("the file written and removed", 5_000, async () => (await books()).records.length === 1 && !readdirSync(dir).some((f) => f.endsWith(".spill")));
      expect(lines.filter((l) => /failed|Error/.test(l))).toEqual([]);
      expect((await books()).balance).toBe(1_000_000 - 1_004);
    } finally {
      await ledger!.close(100);
    }
  }, 15_000);

  test("a start whose first heartbeat outlasts a sweep interval still stops on a spill file of accounts the database does not have", async () => {
    const { url, sql, dir, prefix } = await setUp();
    const stranger: Settlement = { requestId: "req_stranger", accountId: "acct_not_here", keyId: "key_not_here", model: "m", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 10, status: "ok", latencyMs: 1 };
    writeFileSync(join(dir, `${prefix}elsewhere.spill`), JSON.stringify({ settlement: stranger, held: 10 }) + "\n");
    let outcome: unknown;
    await startBehindALock(sql, async () => {
      outcome = await createPostgresLedger(sql, { now: Date.now, spill: { dir, database: url }, sweepIntervalMs: 20 }).then((ledger) => ledger.close(100).then(() => "started"), (err: unknown) => err);
    });
    expect(outcome).toBeInstanceOf(Error);
    expect(String(outcome)).toContain("acct_not_here");
    // The file stays for an operator.
    expect(readdirSync(dir).filter((f) => f.endsWith(".spill"))).toEqual([`${prefix}elsewhere.spill`]);
  }, 15_000);
}
