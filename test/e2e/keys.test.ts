import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, OPENAI_MODEL, FREE_MODEL, spendUntilRefused } from "../helpers/gateway.ts";

const ADMIN = "admin-token-for-tests-0123456789abcdef0123456789abcdef";
let now = 1_800_000_000_000;
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: ADMIN, requestsPerMinute: 60, now: () => now }));

function admin(method: string, path: string, body?: unknown) {
  return fetch(`${gw.url}/v1/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function newAccount(credits: number): Promise<string> {
  const res = await admin("POST", "/accounts", { name: "acme", credits });
  expect(res.status).toBe(201);
  return ((await res.json()) as any).id;
}

async function newKey(accountId: string, body: Record<string, unknown> = {}) {
  return admin("POST", `/accounts/${accountId}/keys`, body);
}

const ask = (key: string, model = OPENAI_MODEL, extra: Record<string, unknown> = {}) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 50, messages: [{ role: "user", content: "hi" }], ...extra }),
  });

describe("keys per account", () => {
  test("at most 10 active keys: the 11th is refused with 409; revoked keys do not count", async () => {
    const account = await newAccount(10);
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await newKey(account, { name: `k${i}` });
      expect(res.status).toBe(201);
      ids.push(((await res.json()) as any).id);
    }
    const eleventh = await newKey(account);
    expect(eleventh.status).toBe(409);
    expect(((await eleventh.json()) as any).error.message).toMatch(/10 active keys/);
    expect((await admin("DELETE", `/keys/${ids[0]}`)).status).toBe(200);
    expect((await newKey(account)).status).toBe(201);
  });

  test("listing shows prefix and last 4 only, never the key", async () => {
    const account = await newAccount(1);
    const issued = (await (await newKey(account, { name: "ci" })).json()) as any;
    const list = (await (await admin("GET", `/accounts/${account}/keys`)).json()) as any;
    const text = JSON.stringify(list);
    expect(text).not.toContain(issued.key);
    expect(list.data).toEqual([expect.objectContaining({ id: issued.id, name: "ci", prefix: issued.key.slice(0, 11), last4: issued.key.slice(-4), revoked_at: null })]);
    const detail = (await (await admin("GET", `/accounts/${account}`)).json()) as any;
    expect(detail).toMatchObject({ id: account, balance: 1, reserved: 0 });
    expect(JSON.stringify(detail)).not.toContain(issued.key);
  });

  test("revoked key → 401 on the very next request", async () => {
    const account = await newAccount(10);
    const issued = (await (await newKey(account)).json()) as any;
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(200);
    expect((await admin("DELETE", `/keys/${issued.id}`)).status).toBe(200);
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(401);
  });
});

describe("per-key overrides", () => {
  test("rate_limit_per_minute overrides the default", async () => {
    const account = await newAccount(10);
    const issued = (await (await newKey(account, { rate_limit_per_minute: 2 })).json()) as any;
    const first = await ask(issued.key, FREE_MODEL);
    expect(first.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(200);
    const third = await ask(issued.key, FREE_MODEL);
    expect(third.status).toBe(429);
    expect(third.headers.get("retry-after")).toBe("30");
  });

  test("an expired key is refused like any invalid key", async () => {
    const account = await newAccount(10);
    const issued = (await (await newKey(account, { expires_at: new Date(now + 60_000).toISOString() })).json()) as any;
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(200);
    now += 120_000;
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(401);
  });

  test("a spend limit caps what one key may spend", async () => {
    const account = await newAccount(100);
    const issued = (await (await newKey(account, { spend_limit: 0.05 })).json()) as any;
    const res = await ask(issued.key, OPENAI_MODEL, { max_tokens: 1000 });
    expect(res.status).toBe(402);
    expect(((await res.json()) as any).error.message).toMatch(/spend limit/);
    expect((await ask(issued.key, OPENAI_MODEL, { max_tokens: 5 })).status).toBe(200);
  });

  test("a spend limit counts what the key has already spent: refused once the settled charges use it up", async () => {
    const account = await newAccount(100);
    const issued = (await (await newKey(account, { spend_limit: 0.05 })).json()) as any;
    const { answered: ok, refusal } = await spendUntilRefused(gw, () => ask(issued.key, OPENAI_MODEL, { max_tokens: 5 }));
    expect(ok).toBeGreaterThan(1);
    expect(refusal.error.message).toMatch(/spend limit/);
    const keys = ((await (await admin("GET", `/accounts/${account}/keys`)).json()) as any).data as any[];
    const spent = keys.find((k) => k.id === issued.id).spent;
    expect(spent).toBeLessThanOrEqual(0.05);
    expect(spent).toBeGreaterThan(0);
  });
});

describe("credits and usage", () => {
  test("top up, then usage totals per model with from/to", async () => {
    const account = await newAccount(0);
    const issued = (await (await newKey(account)).json()) as any;
    expect((await ask(issued.key)).status).toBe(402);
    const topped = await admin("POST", `/accounts/${account}/credits`, { amount: 5.5 });
    expect(topped.status).toBe(200);
    expect(((await topped.json()) as any).balance).toBe(5.5);
    expect((await admin("POST", `/accounts/${account}/credits`, { amount: -1 })).status).toBe(400);

    // Refusals are counted per minute: the range starts at the next one.
    now = (Math.floor(now / 60_000) + 1) * 60_000;
    const from = new Date(now).toISOString();
    for (let i = 0; i < 3; i++) expect((await ask(issued.key)).status).toBe(200);
    expect((await ask(issued.key, FREE_MODEL)).status).toBe(200);
    await gw.app.services.settled();
    const usage = (await (await admin("GET", `/accounts/${account}/usage?from=${encodeURIComponent(from)}`)).json()) as any;
    const paid = usage.models.find((m: any) => m.model === OPENAI_MODEL);
    expect(paid.requests).toBe(3);
    expect(paid.cost).toBeGreaterThan(0);
    expect(usage.models.find((m: any) => m.model === FREE_MODEL)).toMatchObject({ requests: 1, cost: 0 });
    const detail = (await (await admin("GET", `/accounts/${account}`)).json()) as any;
    expect(Math.round((5.5 - detail.balance) * 1e6)).toBe(Math.round(usage.total.cost * 1e6));
    const before = (await (await admin("GET", `/accounts/${account}/usage?to=${encodeURIComponent(from)}`)).json()) as any;
    // The 402 before the top-up is counted, at no cost and without a usage record of its own.
    expect(before.total).toMatchObject({ requests: 0, cost: 0 });
    expect(before.rejected).toEqual({ "402": 1 });
    expect(usage.rejected).toEqual({});
  });
});
