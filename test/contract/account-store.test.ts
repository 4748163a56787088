import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CursorError, hashKey, KeyLimitError, MAX_ACTIVE_KEYS, type AccountStore } from "../../src/accounts/account-store.ts";
import { createAccountStore } from "../../src/store/sqlite/sqlite-accounts.ts";
import { createCachedKeyResolver } from "../../src/accounts/key-resolver.ts";
import { openDatabase } from "../../src/store/database.ts";
import { createPostgresAccounts } from "../../src/store/postgres/pg-accounts.ts";
import { connectPostgres, type Pg } from "../../src/store/postgres/pg-client.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";

/** A store with a clock of the test's choosing, and the raw access the period tests need. */
interface StoreFixture {
  store: AccountStore;
  /** Inserts a usage record as a settlement would (without moving balances). */
  charge(accountId: string, keyId: string, costMicro: number, at: number): Promise<void>;
  /** The stored period columns of a key or account. */
  period(table: "api_keys" | "accounts", id: string): Promise<{ period_spent_micro: number; period_start: number; spend_limit_period: string | null }>;
}

/** The AccountStore contract: SQLite and PostgreSQL answer the same. */
function accountStoreContract(name: string, make: () => Promise<AccountStore>, fixture: (now: () => number) => Promise<StoreFixture>): void {
  describe(`AccountStore contract: ${name}`, () => {
    test("accounts: create, get, describe, find by name; unknown ids are null", async () => {
      const store = await make();
      const name = `acme_${Math.random().toString(36).slice(2)}`;
      const created = await store.createAccount(name, 2_500_000);
      expect(created).toMatchObject({ name, balance: 2.5 });
      expect(await store.getAccount(created.id)).toEqual(created);
      expect(await store.findAccountByName(name)).toEqual(created);
      expect(await store.describeAccount(created.id, 500_000)).toEqual({ ...created, reserved: 0.5, spend_limit: null, spend_limit_period: null, spent_in_period: 0, period_resets_at: null, rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null, suspended_at: null, keys: [] });
      expect(await store.getAccount("acct_missing")).toBeNull();
      expect(await store.describeAccount("acct_missing")).toBeNull();
      expect(await store.findAccountByName(`${name}_nobody`)).toBeNull();
    });

    test("keys: created once in plain, found by hash, listed as summaries, revoked once", async () => {
      const store = await make();
      const account = await store.createAccount("keys", 1_000_000);
      const issued = (await store.createKey(account.id, { name: "ci", rateLimitPerMinute: 600, spendLimitMicro: 3_000_000 }))!;
      expect(issued.key).toMatch(/^svc-sk-[A-Za-z0-9_-]{43}$/);
      expect(await store.findActiveKey(hashKey(issued.key))).toEqual({ keyId: issued.id, accountId: account.id, rateLimitPerMinute: 600, expiresAt: null, models: null, maxConcurrentRequests: null, accountRateLimitPerMinute: null, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false });
      const [summary] = await store.listKeys(account.id);
      expect(summary).toMatchObject({ id: issued.id, name: "ci", last4: issued.key.slice(-4), revoked_at: null, rate_limit_per_minute: 600, spend_limit: 3, spent: 0, spend_limit_period: null, spent_in_period: 0, period_resets_at: null });
      expect(await store.getKey(issued.id)).toEqual(summary!);
      expect(JSON.stringify(await store.listKeys(account.id))).not.toContain(issued.key);
      expect(await store.revokeKey(issued.id)).toBe(true);
      expect(await store.revokeKey(issued.id)).toBe(false);
      expect(await store.findActiveKey(hashKey(issued.key))).toBeNull();
      expect(await store.createKey("acct_missing")).toBeNull();
    });

    test("listKeyLimits: the keys (revoked too) that carry a limit, and every key made since the time given; no spend, no other account's", async () => {
      let at = NOW;
      const { store } = await fixture(() => at);
      const account = await store.createAccount(`limits_${Math.random().toString(36).slice(2)}`, 1_000_000);
      const other = await store.createAccount(`limits_other_${Math.random().toString(36).slice(2)}`, 1_000_000);
      await store.createKey(other.id, { name: "theirs", rateLimitPerMinute: 9_999 });
      const plainOld = (await store.createKey(account.id, "plain, old"))!;
      const modelsOld = (await store.createKey(account.id, { name: "models", models: ["m/one", "m/two"], spendLimitMicro: 2_000_000 }))!;
      const rateOld = (await store.createKey(account.id, { name: "rate", rateLimitPerMinute: 60 }))!;
      at = NOW + 1_000;
      const capRevoked = (await store.createKey(account.id, { name: "cap", maxConcurrentRequests: 3 }))!;
      expect(await store.revokeKey(capRevoked.id)).toBe(true);
      at = NOW + 5_000;
      const plainNew = (await store.createKey(account.id, "plain, new"))!;
      const pick = (k: { created_at: string; models: string[] | null; rate_limit_per_minute: number | null; max_concurrent_requests: number | null }) =>
        ({ created_at: k.created_at, models: k.models, rate_limit_per_minute: k.rate_limit_per_minute, max_concurrent_requests: k.max_concurrent_requests });
      // Two keys may share a millisecond: ordered by everything they hold.
      const order = (x: object, y: object) => JSON.stringify(x).localeCompare(JSON.stringify(y));
      const summaries = new Map((await store.listKeys(account.id)).map((k) => [k.id, pick(k)]));
      const expected = (ids: string[]) => ids.map((id) => summaries.get(id)!).sort(order);
      // Since the newest key: the three with limits and the new one, as listKeys has them.
      expect([...(await store.listKeyLimits(account.id, NOW + 5_000))].sort(order)).toEqual(expected([modelsOld.id, rateOld.id, capRevoked.id, plainNew.id]));
      // Since the start: every key.
      expect([...(await store.listKeyLimits(account.id, NOW))].sort(order)).toEqual(expected([plainOld.id, modelsOld.id, rateOld.id, capRevoked.id, plainNew.id]));
      expect(await store.listKeyLimits(account.id, NOW + 5_000)).toContainEqual({ created_at: new Date(NOW).toISOString(), models: ["m/one", "m/two"], rate_limit_per_minute: null, max_concurrent_requests: null });
      expect(await store.listKeyLimits("acct_missing", 0)).toEqual([]);
    });

    test("accounts: suspended and resumed by updateAccount; the key lookup, the description and the list say so; suspended again it keeps its first time", async () => {
      let at = NOW;
      const { store } = await fixture(() => at);
      const account = await store.createAccount(`suspend_${Math.random().toString(36).slice(2)}`, 1_000_000);
      const issued = (await store.createKey(account.id, "k"))!;
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ accountSuspended: false });
      expect(await store.updateAccount(account.id, { suspended: true })).toBe(true);
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ keyId: issued.id, accountSuspended: true });
      expect(await store.describeAccount(account.id)).toMatchObject({ suspended_at: new Date(NOW).toISOString(), balance: 1, keys: [expect.objectContaining({ id: issued.id, revoked_at: null })] });
      at = NOW + 60_000;
      expect(await store.updateAccount(account.id, { suspended: true, name: account.name })).toBe(true);
      expect((await store.describeAccount(account.id))!.suspended_at).toBe(new Date(NOW).toISOString());
      expect((await store.listAccounts({ limit: 10, name: account.name })).data).toEqual([expect.objectContaining({ id: account.id, suspended_at: new Date(NOW).toISOString() })]);
      expect(await store.updateAccount(account.id, { suspended: false })).toBe(true);
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ accountSuspended: false });
      expect((await store.describeAccount(account.id))!.suspended_at).toBeNull();
      expect(await store.updateAccount("acct_missing", { suspended: true })).toBe(false);
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

    // Friday 27 November 2026, 10:00 UTC: the week began Monday the 23rd, the month on the 1st.
    const NOW = Date.UTC(2026, 10, 27, 10);
    const DAY = Date.UTC(2026, 10, 27), WEEK = Date.UTC(2026, 10, 23), MONTH = Date.UTC(2026, 10, 1);

    test("keys: updateKey changes only what is given; the key lookup sees the new limits; unknown keys are null", async () => {
      const { store } = await fixture(() => NOW);
      const account = await store.createAccount("patch", 1_000_000);
      const issued = (await store.createKey(account.id, { name: "old", rateLimitPerMinute: 60, spendLimitMicro: 5_000_000, spendLimitPeriod: "week" }))!;
      expect(await store.getKey(issued.id)).toMatchObject({ name: "old", spend_limit: 5, spend_limit_period: "week", spent_in_period: 0, period_resets_at: "2026-11-30T00:00:00.000Z" });
      const renamed = await store.updateKey(issued.id, { name: "new" });
      expect(renamed).toMatchObject({ name: "new", rate_limit_per_minute: 60, spend_limit: 5, spend_limit_period: "week", expires_at: null });
      const expiry = Date.UTC(2027, 0, 1);
      const changed = await store.updateKey(issued.id, { rateLimitPerMinute: 7, expiresAt: expiry, spendLimitMicro: 1_500_000 });
      expect(changed).toMatchObject({ name: "new", rate_limit_per_minute: 7, expires_at: "2027-01-01T00:00:00.000Z", spend_limit: 1.5, spend_limit_period: "week" });
      expect(await store.findActiveKey(hashKey(issued.key))).toEqual({ keyId: issued.id, accountId: account.id, rateLimitPerMinute: 7, expiresAt: expiry, models: null, maxConcurrentRequests: null, accountRateLimitPerMinute: null, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false });
      const cleared = await store.updateKey(issued.id, { name: null, rateLimitPerMinute: null, expiresAt: null, spendLimitMicro: null, spendLimitPeriod: null });
      expect(cleared).toMatchObject({ name: null, rate_limit_per_minute: null, expires_at: null, spend_limit: null, spend_limit_period: null, period_resets_at: null });
      expect(await store.updateKey(issued.id, {})).toEqual(cleared!);
      expect(await store.updateKey("key_missing", { name: "x" })).toBeNull();
      expect(await store.getKey("key_missing")).toBeNull();
    });

    test(`an expired key given a later end counts against the ${MAX_ACTIVE_KEYS} in use: refused while they are all taken (it made ${MAX_ACTIVE_KEYS + 1}), allowed once one is revoked`, async () => {
      let at = NOW;
      const { store } = await fixture(() => at);
      const account = await store.createAccount("revive", 1_000_000);
      const expiring = (await store.createKey(account.id, { name: "expiring", expiresAt: NOW + 1_000 }))!;
      for (let i = 0; i < MAX_ACTIVE_KEYS - 1; i++) await store.createKey(account.id, `k${i}`);
      at = NOW + 2_000;
      const tenth = (await store.createKey(account.id, "tenth"))!;
      // SQLite throws, PostgreSQL rejects: both as a rejection here.
      const update = (patch: { expiresAt: number | null }) => Promise.resolve().then(() => store.updateKey(expiring.id, patch));
      await expect(update({ expiresAt: null })).rejects.toBeInstanceOf(KeyLimitError);
      await expect(update({ expiresAt: NOW + 60_000 })).rejects.toThrow("Revoke one first, then give this expired key a later end.");
      // What leaves it expired, or changes something else, is no new key in use.
      expect(await store.updateKey(expiring.id, { expiresAt: NOW + 1_500, name: "still expired" })).toMatchObject({ name: "still expired" });
      expect((await store.listKeyPage(account.id, { offset: 0, limit: 20, state: "active" })).total).toBe(MAX_ACTIVE_KEYS);
      await store.revokeKey(tenth.id);
      expect(await store.updateKey(expiring.id, { expiresAt: null })).toMatchObject({ expires_at: null });
      expect((await store.listKeyPage(account.id, { offset: 0, limit: 20, state: "active" })).total).toBe(MAX_ACTIVE_KEYS);
    });

    test("a page of keys: in use first, then revoked and expired, newest first; by state; searched by name (any case), shown key or id; a total on every page", async () => {
      let at = NOW;
      const { store } = await fixture(() => at);
      const account = await store.createAccount("paged", 1_000_000);
      const made: { id: string; key: string }[] = [];
      // One a minute, so the order made is the order of created_at.
      for (const name of ["Old CI box", "laptop", "ci box runner", null, "expiring"]) {
        made.push((await store.createKey(account.id, { name, expiresAt: name === "expiring" ? NOW + 10 * 60_000 : null }))!);
        at += 60_000;
      }
      await store.revokeKey(made[0]!.id);
      await store.revokeKey(made[2]!.id);
      at = NOW + 20 * 60_000;
      // In use: laptop (1), the unnamed (3); expired: expiring (4); revoked: Old CI box (0), ci box runner (2).
      const ids = (page: { data: { id: string }[] }) => page.data.map((k) => made.findIndex((m) => m.id === k.id));
      const all = await store.listKeyPage(account.id, { offset: 0, limit: 10 });
      expect([ids(all), all.total]).toEqual([[3, 1, 4, 2, 0], 5]);
      const second = await store.listKeyPage(account.id, { offset: 2, limit: 2 });
      expect([ids(second), second.total]).toEqual([[4, 2], 5]);
      expect(ids(await store.listKeyPage(account.id, { offset: 0, limit: 10, state: "active" }))).toEqual([3, 1]);
      const inactive = await store.listKeyPage(account.id, { offset: 0, limit: 10, state: "inactive" });
      expect([ids(inactive), inactive.total]).toEqual([[4, 2, 0], 3]);
      // A name's letters in any case; the key as shown (svc-sk-abcd…wxyz) or part of it; the id.
      // The names' words have a space between them, which no key or id has: "ci" alone is also in
      // about one random key in fifty as shown (a CI run found it in the expired key's).
      expect(ids(await store.listKeyPage(account.id, { offset: 0, limit: 10, search: " CI BOX " }))).toEqual([2, 0]);
      expect(ids(await store.listKeyPage(account.id, { offset: 0, limit: 10, search: "ci box", state: "inactive" }))).toEqual([2, 0]);
      const shown = `${made[3]!.key.slice(0, 11)}…${made[3]!.key.slice(-4)}`;
      expect(ids(await store.listKeyPage(account.id, { offset: 0, limit: 10, search: shown }))).toEqual([3]);
      expect(ids(await store.listKeyPage(account.id, { offset: 0, limit: 10, search: made[1]!.id }))).toEqual([1]);
      const none = await store.listKeyPage(account.id, { offset: 0, limit: 10, search: "nobody" });
      expect([none.data, none.total]).toEqual([[], 0]);
      expect(await store.listKeyPage("acct_missing", { offset: 0, limit: 10 })).toEqual({ data: [], total: 0 });
      // The description without keys is the description less its keys.
      const { keys, ...facts } = (await store.describeAccount(account.id))!;
      expect(keys).toHaveLength(5);
      expect(await store.accountFacts(account.id)).toEqual(facts);
      expect(await store.accountFacts("acct_missing")).toBeNull();
    });

    test("keys limited to models and to requests at once: stored at creation, changed and cleared by updateKey, seen by the key lookup", async () => {
      const store = await make();
      const account = await store.createAccount("scoped", 1_000_000);
      const issued = (await store.createKey(account.id, { name: "scoped", models: ["anthropic/*", "openai/gpt-4.1-mini"], maxConcurrentRequests: 3 }))!;
      expect(await store.getKey(issued.id)).toMatchObject({ models: ["anthropic/*", "openai/gpt-4.1-mini"], max_concurrent_requests: 3 });
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ models: ["anthropic/*", "openai/gpt-4.1-mini"], maxConcurrentRequests: 3 });
      expect(await store.updateKey(issued.id, { models: ["openai/*"] })).toMatchObject({ models: ["openai/*"], max_concurrent_requests: 3 });
      expect(await store.updateKey(issued.id, { maxConcurrentRequests: 1 })).toMatchObject({ models: ["openai/*"], max_concurrent_requests: 1 });
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ models: ["openai/*"], maxConcurrentRequests: 1 });
      expect(await store.updateKey(issued.id, { models: null, maxConcurrentRequests: null })).toMatchObject({ models: null, max_concurrent_requests: null });
      expect(await store.findActiveKey(hashKey(issued.key))).toMatchObject({ models: null, maxConcurrentRequests: null, accountRateLimitPerMinute: null, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false });
      const plain = (await store.createKey(account.id, "plain"))!;
      expect(await store.getKey(plain.id)).toMatchObject({ models: null, max_concurrent_requests: null });
    });

    test("an account's own limits on all its keys: changed and cleared by updateAccount, shown, and seen by every key's lookup", async () => {
      const store = await make();
      const account = await store.createAccount(`limited_${Math.random().toString(36).slice(2)}`, 1_000_000);
      const a = (await store.createKey(account.id, { name: "a", rateLimitPerMinute: 600, maxConcurrentRequests: 9 }))!;
      const b = (await store.createKey(account.id, "b"))!;
      const other = await store.createAccount("other", 0);
      const c = (await store.createKey(other.id, "c"))!;
      expect(await store.updateAccount(account.id, { rateLimitPerMinute: 120, maxConcurrentRequests: 4, tokensPerMinute: 90_000 })).toBe(true);
      expect(await store.describeAccount(account.id)).toMatchObject({ rate_limit_per_minute: 120, max_concurrent_requests: 4, tokens_per_minute: 90_000, spend_limit: null });
      expect((await store.listAccounts({ limit: 1, name: account.name })).data[0]).toMatchObject({ id: account.id, rate_limit_per_minute: 120, max_concurrent_requests: 4, tokens_per_minute: 90_000 });
      // Each key keeps its own limits beside the account's.
      expect(await store.findActiveKey(hashKey(a.key))).toMatchObject({ rateLimitPerMinute: 600, maxConcurrentRequests: 9, accountRateLimitPerMinute: 120, accountMaxConcurrentRequests: 4 });
      expect(await store.findActiveKey(hashKey(b.key))).toMatchObject({ rateLimitPerMinute: null, maxConcurrentRequests: null, accountRateLimitPerMinute: 120, accountMaxConcurrentRequests: 4, accountTokensPerMinute: 90_000 });
      expect(await store.findActiveKey(hashKey(c.key))).toMatchObject({ accountRateLimitPerMinute: null, accountMaxConcurrentRequests: null, accountTokensPerMinute: null, accountSuspended: false });
      // Only what is given changes.
      expect(await store.updateAccount(account.id, { maxConcurrentRequests: null, name: account.name })).toBe(true);
      expect(await store.findActiveKey(hashKey(b.key))).toMatchObject({ accountRateLimitPerMinute: 120, accountMaxConcurrentRequests: null, accountTokensPerMinute: 90_000 });
      expect(await store.updateAccount(account.id, { rateLimitPerMinute: null, tokensPerMinute: null })).toBe(true);
      expect(await store.describeAccount(account.id)).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null });
      expect(await store.updateAccount("acct_missing", { rateLimitPerMinute: 5 })).toBe(false);
      // Made with its limits, in one write.
      const made = await store.createAccount(`made_${Math.random().toString(36).slice(2)}`, 0, { rateLimitPerMinute: 30, maxConcurrentRequests: 2, tokensPerMinute: 40_000 });
      expect(await store.describeAccount(made.id)).toMatchObject({ rate_limit_per_minute: 30, max_concurrent_requests: 2, tokens_per_minute: 40_000 });
    });

    test("a new period recounts what was spent in its window from the usage records, in one step", async () => {
      const f = await fixture(() => NOW);
      const account = await f.store.createAccount("periods", 100_000_000);
      const key = (await f.store.createKey(account.id, { name: "k", spendLimitMicro: 50_000_000 }))!;
      const other = (await f.store.createKey(account.id, { name: "other" }))!;
      // 1 today, 2 earlier this week, 4 earlier this month, 8 last month; another key's 16 today.
      await f.charge(account.id, key.id, 1_000_000, DAY + 3_600_000);
      await f.charge(account.id, key.id, 2_000_000, WEEK + 1);
      await f.charge(account.id, key.id, 4_000_000, MONTH);
      await f.charge(account.id, key.id, 8_000_000, MONTH - 1);
      await f.charge(account.id, other.id, 16_000_000, DAY);
      expect(await f.period("api_keys", key.id)).toEqual({ period_spent_micro: 0, period_start: 0, spend_limit_period: null });

      const expected = [["day", 1, DAY, "2026-11-28T00:00:00.000Z"], ["week", 3, WEEK, "2026-11-30T00:00:00.000Z"], ["month", 7, MONTH, "2026-12-01T00:00:00.000Z"]] as const;
      for (const [period, spent, start, resets] of expected) {
        const summary = await f.store.updateKey(key.id, { spendLimitPeriod: period });
        expect(summary).toMatchObject({ spend_limit: 50, spend_limit_period: period, spent_in_period: spent, period_resets_at: resets });
        expect(await f.period("api_keys", key.id)).toEqual({ period_spent_micro: spent * 1_000_000, period_start: start, spend_limit_period: period });
      }
      // Back to a lifetime limit: everything, counted from 0.
      await f.store.updateKey(key.id, { spendLimitPeriod: null });
      expect(await f.period("api_keys", key.id)).toEqual({ period_spent_micro: 15_000_000, period_start: 0, spend_limit_period: null });

      // The account counts all its keys.
      expect(await f.store.updateAccount(account.id, { spendLimitMicro: 30_000_000, spendLimitPeriod: "day" })).toBe(true);
      expect(await f.period("accounts", account.id)).toEqual({ period_spent_micro: 17_000_000, period_start: DAY, spend_limit_period: "day" });
      const described = (await f.store.describeAccount(account.id))!;
      expect(described).toMatchObject({ spend_limit: 30, spend_limit_period: "day", spent_in_period: 17, period_resets_at: "2026-11-28T00:00:00.000Z" });
      await f.store.updateAccount(account.id, { spendLimitPeriod: "month", name: "renamed" });
      expect(await f.period("accounts", account.id)).toEqual({ period_spent_micro: 23_000_000, period_start: MONTH, spend_limit_period: "month" });
      expect(await f.store.describeAccount(account.id)).toMatchObject({ name: "renamed", spend_limit: 30, spent_in_period: 23 });
      // The same period again recounts nothing (the ledger keeps the count from there).
      await f.store.updateAccount(account.id, { spendLimitPeriod: "month", spendLimitMicro: null });
      expect(await f.period("accounts", account.id)).toEqual({ period_spent_micro: 23_000_000, period_start: MONTH, spend_limit_period: "month" });
      expect(await f.store.updateAccount("acct_missing", { name: "x" })).toBe(false);
    });

    test("accounts are listed oldest first, paged by cursor, filtered by a name substring ignoring case", async () => {
      const { store } = await fixture(Date.now);
      const tag = `Tag${Math.random().toString(36).slice(2, 8)}`;
      const made: string[] = [];
      for (let i = 0; i < 5; i++) made.push((await store.createAccount(`${i % 2 ? "Even" : "odd"} ${tag} ${i}`, i * 1_000_000)).id);
      await store.updateAccount(made[0]!, { spendLimitMicro: 2_500_000, spendLimitPeriod: "month" });
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: Awaited<ReturnType<AccountStore["listAccounts"]>> = await store.listAccounts({ limit: 2, cursor, name: tag.toUpperCase() });
        expect(page.object).toBe("list");
        expect(page.data.length).toBeLessThanOrEqual(2);
        seen.push(...page.data.map((a) => a.id));
        cursor = page.next_cursor;
        pages++;
      } while (cursor);
      // Oldest first; accounts made in the same millisecond in id order.
      const created = new Map<string, string>();
      for (const id of made) created.set(id, (await store.getAccount(id))!.created_at);
      const ordered = [...made].sort((a, b) => created.get(a)!.localeCompare(created.get(b)!) || (a < b ? -1 : 1));
      expect(seen).toEqual(ordered);
      expect(pages).toBe(3);
      const first = await store.listAccounts({ limit: 1, name: `ODD ${tag.toLowerCase()} 0` });
      expect(first.data).toEqual([{ id: made[0]!, name: `odd ${tag} 0`, balance: 0, created_at: created.get(made[0]!)!, spend_limit: 2.5, spend_limit_period: "month", rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null, suspended_at: null }]);
      expect((await store.listAccounts({ limit: 10, name: `even ${tag}` })).data.map((a) => a.id).sort()).toEqual([made[1]!, made[3]!].sort());
      expect(await store.listAccounts({ limit: 10, name: `${tag}-nobody` })).toEqual({ object: "list", data: [], next_cursor: null });
      // Unfiltered, the list holds these among the rest.
      const all = await store.listAccounts({ limit: 500 });
      expect(all.data.map((a) => a.id)).toEqual(expect.arrayContaining(made));
      expect(() => store.listAccounts({ limit: 2, cursor: "not a cursor" })).toThrow(CursorError);
      expect(() => store.listAccounts({ limit: 2, cursor: Buffer.from("x").toString("base64url") })).toThrow(CursorError);
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), "switchyard-accounts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sqliteFixture = async (now: () => number): Promise<StoreFixture> => {
  const db = openDatabase(join(dir, `a-${Math.random()}.sqlite`), { busyTimeoutMs: 0 });
  return {
    store: createAccountStore(db, now),
    async charge(accountId, keyId, costMicro, at) {
      db.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
                VALUES (?, ?, ?, 'm', 'p', 1, 1, 0, ?, 'ok', 1, ?)`).run(`req_${crypto.randomUUID()}`, accountId, keyId, costMicro, at);
    },
    async period(table, id) {
      return db.query<{ period_spent_micro: number; period_start: number; spend_limit_period: string | null }, [string]>(
        `SELECT period_spent_micro, period_start, spend_limit_period FROM ${table} WHERE id = ?`).get(id)!;
    },
  };
};
accountStoreContract("SQLite", async () => createAccountStore(openDatabase(join(dir, `a-${Math.random()}.sqlite`), { busyTimeoutMs: 0 }), Date.now), sqliteFixture);

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
  const pgFixture = async (now: () => number): Promise<StoreFixture> => {
    const sql = await pg();
    return {
      store: createPostgresAccounts(sql, now),
      async charge(accountId, keyId, costMicro, at) {
        await sql`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
                  VALUES (${`req_${crypto.randomUUID()}`}, ${accountId}, ${keyId}, 'm', 'p', 1, 1, false, ${costMicro}, 'ok', 1, ${at})`;
      },
      async period(table, id) {
        const [row] = table === "api_keys"
          ? await sql`SELECT period_spent_micro, period_start, spend_limit_period FROM api_keys WHERE id = ${id}`
          : await sql`SELECT period_spent_micro, period_start, spend_limit_period FROM accounts WHERE id = ${id}`;
        return { period_spent_micro: Number(row.period_spent_micro), period_start: Number(row.period_start), spend_limit_period: row.spend_limit_period };
      },
    };
  };
  accountStoreContract("PostgreSQL", async () => createPostgresAccounts(await pg(), Date.now), pgFixture);

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
