import { afterAll, beforeAll, expect, test } from "bun:test";
import { auditLedger } from "../../src/store/sqlite/audit.ts";
import { startGateway, type Gateway } from "../helpers/gateway.ts";
import { seededMutations } from "../helpers/seeded-mutations.ts";

/**
 * Issue 32: a seeded fuzz of every admin route on SQLite. Random bodies, query strings, ids and
 * headers (dates, numbers, strings, nulls, huge values, wrong types): every answer is a 2xx or a
 * 4xx with a JSON error, never a 5xx, and afterwards the books balance. The seed is fixed, so a
 * failure replays; its message names the request.
 */
const SEED = 3_202_632;
const REQUESTS = 1_200;
const ADMIN_TOKEN = "admin-test-token-0123456789abcdef";
let gw: Gateway;
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: "http://127.0.0.1:9", adminToken: ADMIN_TOKEN });
});
afterAll(() => gw.stop());

const DATES = ["2027-01-31", "2027-01-31T12:00:00Z", "0000-01-01", "0000-02-29", "9999-12-31T23:59:59.999Z", "10000-01-01", "+275760-09-13T00:00:00Z",
  "99999999999999999", "9999999999999999", "253402300799999", "253402300800000", "0", "-1", "2026-02-30", "2026-13-01", "tomorrow", "", " ", "1e3", "NaN"];
const NUMBERS = [0, 1, -1, 0.5, 1.0000001, 5e-10, 1e-6, 1e9, 1e9 + 1, 1e15, 1e21, 9007199254740993, -0, 1.5, 1_000_000, 1_000_001, 1e308];
const STRINGS = ["", "x", "x".repeat(200), "x".repeat(201), "x".repeat(5_000), "day", "week", "month", "year", "none", "null", "acct_missing", "key_missing",
  "é", "\u0000", "../../etc", "'; DROP TABLE accounts; --", "%00", "account,key,model", "model", "hour", "csv", "json"];
const GARBAGE: unknown[] = [null, true, false, [], {}, [1, 2], { a: 1 }, ...NUMBERS, ...DATES, ...STRINGS];

test(`seeded fuzz of the admin API (seed ${SEED}, ${REQUESTS} requests): never a 5xx, and the audit is clean after`, async () => {
  const { random, pick, mutate } = seededMutations(SEED, GARBAGE, 2);
  const accounts: string[] = [gw.accountId];
  const keys: string[] = [gw.keyId];
  const scalar = () => pick([pick(DATES), pick(STRINGS), String(pick(NUMBERS))]);
  const id = (known: string[]) => (random() < 0.8 ? pick(known) : encodeURIComponent(pick(STRINGS) || "x"));
  const query = (fields: string[]) => {
    const q = new URLSearchParams();
    for (const f of fields) if (random() < 0.5) q.set(f, random() < 0.6 ? scalar() : pick(DATES));
    if (random() < 0.1) q.set(pick(STRINGS) || "k", scalar());
    return q.size ? `?${q}` : "";
  };
  const routes: (() => { method: string; path: string; body?: unknown; headers?: Record<string, string> })[] = [
    () => ({ method: "POST", path: "/v1/admin/accounts", body: mutate({ name: "fuzz", credits: 5 }) }),
    () => ({ method: "GET", path: `/v1/admin/accounts${query(["limit", "cursor", "name"])}` }),
    () => ({ method: "GET", path: `/v1/admin/accounts/${id(accounts)}` }),
    () => ({ method: "PATCH", path: `/v1/admin/accounts/${id(accounts)}`, body: mutate({ name: "renamed", spend_limit: 3, spend_limit_period: "week" }) }),
    () => ({
      method: "POST", path: `/v1/admin/accounts/${id(accounts)}/credits`, body: mutate({ amount: 1.25 }),
      headers: random() < 0.5 ? { "idempotency-key": random() < 0.7 ? `k${Math.floor(random() * 20)}` : pick(["", "a b", "x".repeat(300)]) } : {},
    }),
    () => ({
      method: "POST", path: `/v1/admin/accounts/${id(accounts)}/debits`, body: mutate({ amount: 0.75 }),
      headers: random() < 0.5 ? { "idempotency-key": random() < 0.7 ? `k${Math.floor(random() * 20)}` : pick(["", "a b", "x".repeat(300)]) } : {},
    }),
    () => ({ method: "GET", path: `/v1/admin/accounts/${id(accounts)}/keys` }),
    () => ({ method: "POST", path: `/v1/admin/accounts/${id(accounts)}/keys`, body: mutate({ name: "k", rate_limit_per_minute: 60, expires_at: "2030-01-01", spend_limit: 2, spend_limit_period: "day", models: ["test/*", "test/gpt"], max_concurrent_requests: 4 }) }),
    () => ({ method: "GET", path: `/v1/admin/accounts/${id(accounts)}/usage${query(["from", "to"])}` }),
    () => ({ method: "GET", path: `/v1/admin/usage${query(["from", "to", "group_by", "granularity", "format", "account_id", "key_id", "model"])}` }),
    () => ({ method: "PATCH", path: `/v1/admin/keys/${id(keys)}`, body: mutate({ name: "k2", spend_limit: null, spend_limit_period: "month", rate_limit_per_minute: 5, expires_at: "2031-01-01T00:00:00Z", models: ["test/claude"], max_concurrent_requests: null }) }),
    () => ({ method: "DELETE", path: `/v1/admin/keys/${id(keys)}` }),
  ];
  const started = Date.now();
  const statuses = new Map<number, number>();
  for (let i = 0; i < REQUESTS; i++) {
    const r = pick(routes)();
    // Sometimes the body is not JSON at all, or not an object.
    const raw = r.body === undefined ? undefined : random() < 0.05 ? pick(["{", "[]", "null", "\"x\"", "1e999", ""]) : JSON.stringify(r.body);
    const res = await fetch(gw.url + r.path, {
      method: r.method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(raw === undefined ? {} : { "content-type": "application/json" }), ...r.headers },
      body: raw,
    });
    const text = await res.text();
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    if (res.status >= 500 || res.status < 200) throw new Error(`request ${i}: ${r.method} ${r.path} ${raw?.slice(0, 300)} ${JSON.stringify(r.headers ?? {})} → ${res.status} ${text.slice(0, 300)}`);
    if (res.status >= 400 && !(res.headers.get("content-type") ?? "").includes("json")) throw new Error(`request ${i}: ${r.method} ${r.path} → ${res.status} without a JSON error`);
    if (res.status === 201 && r.path === "/v1/admin/accounts") accounts.push(JSON.parse(text).id);
    if (res.status === 201 && r.path.endsWith("/keys")) keys.push(JSON.parse(text).id);
  }
  expect(Date.now() - started).toBeLessThan(10_000);
  // The fuzz reached past the validators: accounts and keys were made, and refusals were had.
  expect(statuses.get(201) ?? 0).toBeGreaterThan(10);
  expect(statuses.get(200) ?? 0).toBeGreaterThan(100);
  expect(statuses.get(400) ?? 0).toBeGreaterThan(100);
  await gw.app.services.settled();
  const audit = auditLedger(gw.db);
  expect({ accountDrift: audit.accountDrift, keyDrift: audit.keyDrift, impossible: audit.impossible }).toEqual({ accountDrift: [], keyDrift: [], impossible: [] });
  expect(audit.clean).toBe(true);
});
