import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { periodWindow } from "../../src/billing/spend-period.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";

/**
 * Changing keys and accounts through the admin API, listing accounts, and GET /v1/key, on the
 * real app in front of the fake upstream: once on SQLite, once on PostgreSQL, the same tests.
 */
const ADMIN = "admin-patch-token-0123456789abcdef0123456789abcdef";
const DEFAULT_RPM = 1_000_000;

interface Backend {
  gw: Gateway;
  stop(): Promise<void>;
}

function adminSuite(name: string, start: (upstreamUrl: string) => Promise<Backend>): void {
  describe(`admin changes and GET /v1/key: ${name}`, () => {
    let upstream: FakeUpstream;
    let backend: Backend;
    let gw: Gateway;
    beforeAll(async () => {
      upstream = await startFakeUpstream();
      backend = await start(upstream.url);
      gw = backend.gw;
    });
    afterAll(async () => {
      await backend?.stop();
      await upstream?.stop();
    });

    const admin = async (method: string, path: string, body?: unknown): Promise<Response> =>
      fetch(gw.url + path, {
        method,
        headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      });
    const json = async (res: Response, status = 200): Promise<any> => {
      const text = await res.text();
      if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${text}`);
      return JSON.parse(text);
    };
    const account = async (credits = 100, name = "acme") => json(await admin("POST", "/v1/admin/accounts", { name, credits }), 201) as Promise<{ id: string }>;
    const key = async (accountId: string, body: unknown = { name: "ci" }) => json(await admin("POST", `/v1/admin/accounts/${accountId}/keys`, body), 201) as Promise<{ id: string; key: string }>;
    const models = (k: string) => fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${k}` } });
    const keyInfo = (headers: Record<string, string>) => fetch(`${gw.url}/v1/key`, { headers });
    const chat = async (k: string) => {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${k}`, "content-type": "application/json" },
        body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello there" }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
      await gw.app.services.settled();
    };
    const usageRequests = async (accountId: string) => (await json(await admin("GET", `/v1/admin/accounts/${accountId}/usage`))).total.requests as number;

    test("a PATCHed key: the new name is listed, a lower rate limit refuses sooner, a past expiry refuses, clearing restores", async () => {
      const acct = await account();
      const issued = await key(acct.id, { name: "before", rate_limit_per_minute: 500 });
      for (let i = 0; i < 3; i++) expect((await models(issued.key)).status).toBe(200);

      const renamed = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { name: "after" }));
      expect(renamed).toMatchObject({ id: issued.id, name: "after", rate_limit_per_minute: 500, spend_limit: null, spend_limit_period: null, spent_in_period: 0, period_resets_at: null });
      const listed = await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`));
      expect(listed.data).toEqual([renamed]);
      expect(Object.keys(renamed).sort()).toEqual(["created_at", "expires_at", "id", "last4", "max_concurrent_requests", "models", "name", "period_resets_at", "prefix", "rate_limit_per_minute", "revoked_at", "spend_limit", "spend_limit_period", "spent", "spent_in_period"]);

      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { rate_limit_per_minute: 2 }))).toMatchObject({ name: "after", rate_limit_per_minute: 2 });
      const first = await models(issued.key);
      expect(first.status).toBe(200);
      expect(first.headers.get("x-ratelimit-limit-requests")).toBe("2");
      expect((await models(issued.key)).status).toBe(200);
      expect((await models(issued.key)).status).toBe(429);
      // The bucket is empty; the key's own limits are still answered.
      for (let i = 0; i < 5; i++) {
        const info = await keyInfo({ authorization: `Bearer ${issued.key}` });
        expect(info.status).toBe(200);
        expect(((await info.json()) as any).key.rate_limit_per_minute).toBe(2);
      }

      await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { expires_at: "2020-01-01T00:00:00Z" }));
      expect((await models(issued.key)).status).toBe(401);
      expect((await keyInfo({ authorization: `Bearer ${issued.key}` })).status).toBe(401);

      const cleared = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { expires_at: null, rate_limit_per_minute: null }));
      expect(cleared).toMatchObject({ expires_at: null, rate_limit_per_minute: null, name: "after" });
      expect((await models(issued.key)).status).toBe(200);
      const info = await json(await keyInfo({ "x-api-key": issued.key }));
      expect(info.key.rate_limit_per_minute).toBe(DEFAULT_RPM);

      const future = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { expires_at: "2031-06-30" }));
      expect(future.expires_at).toBe("2031-06-30T00:00:00.000Z");
      expect((await models(issued.key)).status).toBe(200);
    });

    test("bad PATCH bodies are 400s naming the field and change nothing; unknown keys and accounts are 404s", async () => {
      const acct = await account();
      const issued = await key(acct.id, { name: "stay", spend_limit: 4 });
      const before = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, {}));
      const bad: [unknown, string][] = [
        [{ rate_limit_per_minute: 0 }, "rate_limit_per_minute"],
        [{ rate_limit_per_minute: 1.5 }, "rate_limit_per_minute"],
        [{ rate_limit_per_minute: 1_000_001 }, "rate_limit_per_minute"],
        [{ rate_limit_per_minute: "5" }, "rate_limit_per_minute"],
        [{ expires_at: "2026-02-30" }, "expires_at"],
        [{ expires_at: "2026-13-01T00:00:00Z" }, "expires_at"],
        [{ expires_at: "tomorrow morning" }, "expires_at"],
        [{ expires_at: "+010000-01-01T00:00:00Z" }, "expires_at"],
        [{ expires_at: "2026-01-01T24:00:00Z" }, "expires_at"],
        [{ expires_at: 1700000000000 }, "expires_at"],
        [{ spend_limit: -1 }, "spend_limit"],
        [{ spend_limit: 1.1234567 }, "spend_limit"],
        [{ spend_limit: 1_000_000_001 }, "spend_limit"],
        [{ spend_limit: "3" }, "spend_limit"],
        [{ spend_limit_period: "year" }, "spend_limit_period"],
        [{ spend_limit_period: "Day" }, "spend_limit_period"],
        [{ spend_limit_period: 7 }, "spend_limit_period"],
        [{ name: "x".repeat(201) }, "name"],
        [{ name: 42 }, "name"],
      ];
      for (const [body, field] of bad) {
        const res = await admin("PATCH", `/v1/admin/keys/${issued.id}`, body);
        const err = await json(res, 400);
        expect(err.error.type).toBe("invalid_request_error");
        if (!err.error.message.includes(field)) throw new Error(`${JSON.stringify(body)}: ${err.error.message} does not name ${field}`);
      }
      expect((await admin("PATCH", `/v1/admin/keys/${issued.id}`, "{not json")).status).toBe(400);
      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, {}))).toEqual(before);

      const badAccount: [unknown, string][] = [
        [{ name: "" }, "name"],
        [{ name: null }, "name"],
        [{ spend_limit: 0.0000001 }, "spend_limit"],
        [{ spend_limit_period: "fortnight" }, "spend_limit_period"],
      ];
      for (const [body, field] of badAccount) {
        const err = await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, body), 400);
        if (!err.error.message.includes(field)) throw new Error(`${JSON.stringify(body)}: ${err.error.message} does not name ${field}`);
      }
      const keyCreate = await json(await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { spend_limit: 1, spend_limit_period: "year" }), 400);
      expect(keyCreate.error.message).toContain("spend_limit_period");

      const noKey = await json(await admin("PATCH", "/v1/admin/keys/key_doesnotexist", { name: "x" }), 404);
      expect(noKey.error.type).toBe("not_found_error");
      const noAccount = await json(await admin("PATCH", "/v1/admin/accounts/acct_doesnotexist", { name: "x" }), 404);
      expect(noAccount.error.type).toBe("not_found_error");
      // Authentication comes first.
      const anonymous = await fetch(`${gw.url}/v1/admin/keys/${issued.id}`, { method: "PATCH", headers: { "content-type": "application/json" }, body: "{}" });
      expect(anonymous.status).toBe(401);
    });

    test("periods: spent_in_period over real charges; a new period recounts; the account's limit and its description", async () => {
      const acct = await account(100, "periodic");
      const issued = await key(acct.id, { name: "p", spend_limit: 50, spend_limit_period: "week" });
      const created = await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`));
      const week = periodWindow("week", Date.now());
      expect(created.data[0]).toMatchObject({ spend_limit: 50, spend_limit_period: "week", spent_in_period: 0, period_resets_at: new Date(week.resetsAt).toISOString() });

      for (let i = 0; i < 3; i++) await chat(issued.key);
      const listed = (await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`))).data[0];
      expect(listed.spent).toBeGreaterThan(0);
      // Every charge was made this week, so the period has all of them.
      expect(listed.spent_in_period).toBe(listed.spent);

      const day = periodWindow("day", Date.now());
      const daily = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit_period: "day", spend_limit: 10 }));
      expect(daily).toMatchObject({ spend_limit: 10, spend_limit_period: "day", spent_in_period: listed.spent, period_resets_at: new Date(day.resetsAt).toISOString() });
      const lifetime = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit_period: null }));
      expect(lifetime).toMatchObject({ spend_limit: 10, spend_limit_period: null, spent_in_period: listed.spent, period_resets_at: null });

      const described = await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { name: "renamed", spend_limit: 25.5, spend_limit_period: "month" }));
      const month = periodWindow("month", Date.now());
      expect(described).toMatchObject({ id: acct.id, name: "renamed", spend_limit: 25.5, spend_limit_period: "month", spent_in_period: listed.spent, period_resets_at: new Date(month.resetsAt).toISOString(), reserved: 0 });
      expect(described.keys).toHaveLength(1);
      expect(await json(await admin("GET", `/v1/admin/accounts/${acct.id}`))).toEqual(described);
      expect(Object.keys(described).sort()).toEqual(["balance", "created_at", "id", "keys", "max_concurrent_requests", "name", "period_resets_at", "rate_limit_per_minute", "reserved", "spend_limit", "spend_limit_period", "spent_in_period", "suspended_at", "tokens_per_minute"]);
      // The limit removed, its period kept: nothing resets.
      const removed = await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { spend_limit: null }));
      expect(removed).toMatchObject({ spend_limit: null, spend_limit_period: "month", period_resets_at: null });
      const keyRemoved = await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit: null, spend_limit_period: "week" }));
      expect(keyRemoved).toMatchObject({ spend_limit: null, spend_limit_period: "week", period_resets_at: null });
      const unlimited = await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { spend_limit: null, spend_limit_period: null }));
      expect(unlimited).toMatchObject({ name: "renamed", spend_limit: null, spend_limit_period: null, spent_in_period: listed.spent, period_resets_at: null });
    });

    test("a suspended account's keys are refused (403) at once by the gateway that suspended it; resumed, they answer", async () => {
      const acct = await account(10, "suspended");
      const issued = await key(acct.id, { name: "s" });
      await chat(issued.key);
      expect(await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { suspended: true }))).toMatchObject({ suspended_at: expect.any(String) });
      const ask = () => fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${issued.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello there" }] }),
      });
      const refused = await ask();
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as any).error.type).toBe("permission_error");
      expect((await json(await admin("GET", `/v1/admin/accounts?name=suspended`))).data.find((a: { id: string }) => a.id === acct.id).suspended_at).toBeString();
      expect(await json(await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { suspended: false }))).toMatchObject({ suspended_at: null });
      const resumed = await ask();
      expect(resumed.status).toBe(200);
      await resumed.text();
    });

    test("a lowered spend limit refuses the next paid request (402); raised again, it answers", async () => {
      const acct = await account(100, "limited");
      const issued = await key(acct.id, { name: "l", spend_limit: 100 });
      await chat(issued.key);
      const spent = (await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`))).data[0].spent as number;
      // One micro-credit left: less than any request's worst case.
      const tight = Number((spent + 0.000001).toFixed(6));
      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit: tight }))).toMatchObject({ spend_limit: tight, spent });
      const refused = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${issued.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello there" }] }),
      });
      expect(refused.status).toBe(402);
      await refused.text();
      await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit: 100 }));
      await chat(issued.key);
      // Below what was already spent: kept, on both stores, and the key is refused from then on.
      const below = await admin("PATCH", `/v1/admin/keys/${issued.id}`, { spend_limit: 0 });
      expect((await json(below)).spend_limit).toBe(0);
      const after = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${issued.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello there" }] }),
      });
      expect(after.status).toBe(402);
      expect(((await after.json()) as any).error.message).toContain("this key's lifetime spend limit of 0 credits");
    });

    test("a key limited to models (create and PATCH): 403 for the others, only its models listed, shown in key views and GET /v1/key", async () => {
      const acct = await account(50, "scoped");
      const issued = await key(acct.id, { name: "anthropic-only", models: ["test/claude*", "test/free"], max_concurrent_requests: 4 });
      const auth = { authorization: `Bearer ${issued.key}` };
      const keys = await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`));
      expect(keys.data[0]).toMatchObject({ id: issued.id, models: ["test/claude*", "test/free"], max_concurrent_requests: 4 });
      expect((await json(await keyInfo(auth))).key).toMatchObject({ models: ["test/claude*", "test/free"], max_concurrent_requests: 4 });
      const listed = await json(await models(issued.key));
      expect(listed.data.map((m: any) => m.id)).toEqual(["test/claude", "test/free"]);
      const refused = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello there" }] }),
      });
      expect(refused.status).toBe(403);
      expect(await refused.json()).toEqual({ error: {
        message: `This API key may not use model: ${OPENAI_MODEL} (it is limited to test/claude*, test/free). GET /v1/models lists the models it may use.`,
        type: "permission_error", param: null, code: null,
      } });
      // PATCH widens it: the next request is answered; null gives every model back.
      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { models: ["test/*"] }))).toMatchObject({ models: ["test/*"], max_concurrent_requests: 4 });
      await chat(issued.key);
      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { models: ["test/claude"] }))).toMatchObject({ models: ["test/claude"] });
      expect((await json(await models(issued.key))).data.map((m: any) => m.id)).toEqual(["test/claude"]);
      expect(await json(await admin("PATCH", `/v1/admin/keys/${issued.id}`, { models: null, max_concurrent_requests: null }))).toMatchObject({ models: null, max_concurrent_requests: null });
      await chat(issued.key);
      // Bad lists are 400s naming the field, and change nothing.
      for (const bad of [[], ["a b"], ["gpt-*-mini"], [1], "test/*"]) {
        const res = await admin("PATCH", `/v1/admin/keys/${issued.id}`, { models: bad });
        expect(res.status).toBe(400);
        expect((await res.json() as any).error.message).toContain("models");
      }
      for (const bad of [0, -1, 1.5, "3"]) {
        const res = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { max_concurrent_requests: bad });
        expect(res.status).toBe(400);
        expect((await res.json() as any).error.message).toContain("max_concurrent_requests");
      }
      expect((await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`))).data[0]).toMatchObject({ models: null, max_concurrent_requests: null });
    });

    test("GET /v1/key: its shape, in credits; it charges nothing and records nothing", async () => {
      const acct = await account(20, "info");
      const issued = await key(acct.id, { name: "mine", spend_limit: 5, spend_limit_period: "month", expires_at: "2030-01-01T00:00:00Z", rate_limit_per_minute: 1 });
      // One request empties the bucket of 1.
      expect((await models(issued.key)).status).toBe(200);
      expect((await models(issued.key)).status).toBe(429);
      const before = await json(await admin("GET", `/v1/admin/accounts/${acct.id}`));
      const requestsBefore = await usageRequests(acct.id);
      let body: any;
      for (let i = 0; i < 10; i++) {
        const res = await keyInfo(i % 2 ? { "x-api-key": issued.key } : { authorization: `Bearer ${issued.key}` });
        expect(res.status).toBe(200);
        expect(res.headers.get("content-type")).toContain("application/json");
        body = await res.json();
      }
      expect(body).toEqual({
        account: { balance: 20, reserved: 0, rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null, suspended: false },
        key: {
          name: "mine", spend_limit: 5, spend_limit_period: "month", spent_in_period: 0,
          period_resets_at: new Date(periodWindow("month", Date.now()).resetsAt).toISOString(),
          rate_limit_per_minute: 1, expires_at: "2030-01-01T00:00:00.000Z", models: null, max_concurrent_requests: null,
        },
      });
      await gw.app.services.settled();
      expect(await json(await admin("GET", `/v1/admin/accounts/${acct.id}`))).toEqual(before);
      expect(await usageRequests(acct.id)).toBe(requestsBefore);
      // Still the key's bucket refuses the other routes.
      expect((await models(issued.key)).status).toBe(429);

      // After charges, the balance and spend move; a lifetime key reports its lifetime spend.
      const spender = await key(acct.id, { name: "spender" });
      await chat(spender.key);
      const after = await json(await keyInfo({ authorization: `Bearer ${spender.key}` }));
      const summary = (await json(await admin("GET", `/v1/admin/accounts/${acct.id}/keys`))).data.find((k: { id: string }) => k.id === spender.id);
      expect(summary.spent).toBeGreaterThan(0);
      expect(after).toEqual({
        account: { balance: Number((20 - summary.spent).toFixed(6)), reserved: 0, rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null, suspended: false },
        key: { name: "spender", spend_limit: null, spend_limit_period: null, spent_in_period: summary.spent, period_resets_at: null, rate_limit_per_minute: DEFAULT_RPM, expires_at: null, models: null, max_concurrent_requests: null },
      });

      // Without a valid key: 401, as everywhere.
      expect((await keyInfo({})).status).toBe(401);
      expect((await keyInfo({ authorization: "Bearer svc-sk-" + "A".repeat(43) })).status).toBe(401);
      expect((await admin("DELETE", `/v1/admin/keys/${spender.id}`)).status).toBe(200);
      expect((await keyInfo({ authorization: `Bearer ${spender.key}` })).status).toBe(401);
    });

    test("GET /v1/admin/accounts: pages by cursor, filters by name, refuses bad paging", async () => {
      const tag = `Lst${Math.random().toString(36).slice(2, 8)}`;
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push((await account(i, `${tag}-${i}`)).id);
      await json(await admin("PATCH", `/v1/admin/accounts/${ids[2]}`, { spend_limit: 3, spend_limit_period: "day" }));
      const seen: any[] = [];
      let cursor: string | null = null;
      do {
        const page: any = await json(await admin("GET", `/v1/admin/accounts?limit=2&name=${tag.toUpperCase()}${cursor ? `&cursor=${cursor}` : ""}`));
        expect(page.object).toBe("list");
        seen.push(...page.data);
        cursor = page.next_cursor;
      } while (cursor);
      expect(seen.map((a) => a.id).sort()).toEqual([...ids].sort());
      expect(seen.map((a) => a.created_at)).toEqual([...seen.map((a) => a.created_at)].sort());
      const entry = seen.find((a) => a.id === ids[2]);
      expect(entry).toEqual({ id: ids[2], name: `${tag}-2`, balance: 2, created_at: expect.any(String), spend_limit: 3, spend_limit_period: "day", rate_limit_per_minute: null, max_concurrent_requests: null, tokens_per_minute: null, suspended_at: null });
      // Defaults: 50 a page, every account, the gateway's own among them.
      const all = await json(await admin("GET", "/v1/admin/accounts"));
      expect(all.data.length).toBeLessThanOrEqual(50);
      expect(all.data.map((a: { id: string }) => a.id)).toContain(gw.accountId);
      expect(await json(await admin("GET", `/v1/admin/accounts?name=${tag}-nobody`))).toEqual({ object: "list", data: [], next_cursor: null });
      for (const query of ["limit=0", "limit=501", "limit=abc", "limit=1.5", "cursor=garbage!", `cursor=${Buffer.from("nope").toString("base64url")}`]) {
        const err = await json(await admin("GET", `/v1/admin/accounts?${query}`), 400);
        expect(err.error.message).toContain(query.split("=")[0]!);
      }
      expect((await fetch(`${gw.url}/v1/admin/accounts`)).status).toBe(401);
    });
  });
}

adminSuite("SQLite", async (upstreamUrl) => {
  const gw = await startGateway({ upstreamUrl, adminToken: ADMIN, requestsPerMinute: DEFAULT_RPM });
  return { gw, stop: () => gw.stop() };
});

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`admin changes and GET /v1/key on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  adminSuite("PostgreSQL", async (upstreamUrl) => {
    const stores: SharedStores = await openPostgresStores(await database(), { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const gw = await startGateway({ upstreamUrl, adminToken: ADMIN, requestsPerMinute: DEFAULT_RPM, stores });
    return {
      gw,
      async stop() {
        await gw.stop();
        await stores.close(500);
      },
    };
  });
}
