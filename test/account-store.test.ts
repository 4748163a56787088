import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAccountStore, hashKey, KeyLimitError, MAX_ACTIVE_KEYS, type AccountStore } from "../src/accounts/account-store.ts";
import { createCachedKeyResolver } from "../src/accounts/key-resolver.ts";
import { openDatabase } from "../src/store/database.ts";
import { createPostgresAccounts } from "../src/store/postgres/pg-accounts.ts";
import { connectPostgres, type Pg } from "../src/store/postgres/pg-client.ts";
import { migratePostgres } from "../src/store/postgres/pg-migrations.ts";
import { postgresMissing, useTestDatabase } from "./helpers/backends.ts";

/** The AccountStore contract: SQLite and PostgreSQL answer the same. */
function accountStoreContract(name: string, make: () => Promise<AccountStore>): void {
  describe(`AccountStore contract: ${name}`, () => {
    test("accounts: create, get, describe, find by name; unknown ids are null", async () => {
      const store = await make();
      const name = `acme_${Math.random().toString(36).slice(2)}`;
      const created = await store.createAccount(name, 2_500_000);
      expect(created).toMatchObject({ name, balance: 2.5 });
      expect(await store.getAccount(created.id)).toEqual(created);
      expect(await store.findAccountByName(name)).toEqual(created);
      expect(await store.describeAccount(created.id, 500_000)).toEqual({ ...created, reserved: 0.5, keys: [] });
      expect(await store.getAccount("acct_missing")).toBeNull();
      expect(await store.describeAccount("acct_missing")).toBeNull();
      expect(await store.findAccountByName(`${name}_nobody`)).toBeNull();
    });

    test("keys: created once in plain, found by hash, listed as summaries, revoked once", async () => {
      const store = await make();
      const account = await store.createAccount("keys", 1_000_000);
      const issued = (await store.createKey(account.id, { name: "ci", rateLimitPerMinute: 600, spendLimitMicro: 3_000_000 }))!;
      expect(issued.key).toMatch(/^svc-sk-[A-Za-z0-9_-]{43}$/);
      expect(await store.findActiveKey(hashKey(issued.key))).toEqual({ keyId: issued.id, accountId: account.id, rateLimitPerMinute: 600, expiresAt: null });
      const [summary] = await store.listKeys(account.id);
      expect(summary).toMatchObject({ id: issued.id, name: "ci", last4: issued.key.slice(-4), revoked_at: null, rate_limit_per_minute: 600, spend_limit: 3, spent: 0 });
      expect(JSON.stringify(await store.listKeys(account.id))).not.toContain(issued.key);
      expect(await store.revokeKey(issued.id)).toBe(true);
      expect(await store.revokeKey(issued.id)).toBe(false);
      expect(await store.findActiveKey(hashKey(issued.key))).toBeNull();
      expect(await store.createKey("acct_missing")).toBeNull();
    });

    test(`at most ${MAX_ACTIVE_KEYS} active keys, even when 15 are asked for at once; revoked keys free a place`, async () => {
      const store = await make();
      const account = await store.createAccount("cap", 0);
      const results = await Promise.allSettled(Array.from({ length: 15 }, (_, i) => Promise.resolve().then(() => store.createKey(account.id, `k${i}`))));
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(MAX_ACTIVE_KEYS);
      const refused = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      expect(refused).toHaveLength(5);
      for (const r of refused) expect(r.reason).toBeInstanceOf(KeyLimitError);
      const [first] = await store.listKeys(account.id);
      await store.revokeKey(first!.id);
      expect(await store.createKey(account.id, "again")).not.toBeNull();
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), "switchyard-accounts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
accountStoreContract("SQLite", async () => createAccountStore(openDatabase(join(dir, `a-${Math.random()}.sqlite`), { busyTimeoutMs: 0 }), Date.now));

const missing = await postgresMissing();
const database = useTestDatabase();
let pool: Promise<Pg> | undefined;
afterAll(async () => (await pool)?.close({ timeout: 0 }));
const pg = () => (pool ??= (async () => {
  const sql = connectPostgres(await database(), { max: 8 });
  await migratePostgres(sql);
  return sql;
})());

if (missing) {
  test.skip(`AccountStore contract on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  accountStoreContract("PostgreSQL", async () => createPostgresAccounts(await pg(), Date.now));

  test("key lookups from a shared store are cached for the TTL: a revoke by another process takes effect within it", async () => {
    const other = createPostgresAccounts(await pg(), Date.now);
    const here = createPostgresAccounts(await pg(), Date.now);
    const keys = createCachedKeyResolver(here, Date.now, { ttlMs: 150 });
    const account = await other.createAccount("ttl", 0);
    const issued = (await other.createKey(account.id, "k"))!;
    expect(await keys.resolve(issued.key)).toMatchObject({ keyId: issued.id });
    // A hit is answered from memory, synchronously.
    expect(keys.resolve(issued.key)).toMatchObject({ keyId: issued.id });
    await other.revokeKey(issued.id);
    expect(keys.resolve(issued.key)).toMatchObject({ keyId: issued.id });
    await Bun.sleep(200);
    expect(await keys.resolve(issued.key)).toBeNull();
    // Unknown keys resolve to null (and are remembered for the TTL, so a flood of them costs one read each).
    expect(await keys.resolve("svc-sk-" + "x".repeat(43))).toBeNull();
  });
}
