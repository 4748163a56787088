import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { createHash } from "node:crypto";
import { ANTHROPIC_MODEL, FREE_MODEL, OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";

const ADMIN_TOKEN = "admin-test-token-0123456789abcdef";
const NO_UPSTREAM = "http://127.0.0.1:9";
const KEY_SHAPE = /^svc-sk-[A-Za-z0-9_-]{32,}$/;

let gw: Gateway;
let closed: Gateway;

beforeAll(async () => {
  // Its tests send more wrong tokens than the throttle lets through (10 a minute); the throttle has tests of its own.
  gw = await startGateway({ upstreamUrl: NO_UPSTREAM, adminToken: ADMIN_TOKEN, adminAuthFailures: { limit: 1_000 } });
  closed = await startGateway({ upstreamUrl: NO_UPSTREAM });
});
afterAll(async () => {
  await gw.stop();
  await closed.stop();
});

function admin(method: string, path: string, body?: unknown, token: string | null = ADMIN_TOKEN, base = gw): Promise<Response> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  return fetch(base.url + path, { method, headers, body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body) });
}

function models(headers: Record<string, string>): Promise<Response> {
  return fetch(gw.url + "/v1/models", { headers });
}

async function expectErrorBody(res: Response, status: number, type?: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toContain("application/json");
  const body = (await res.json()) as { error: { message: unknown; type: unknown } };
  expect(typeof body.error.message).toBe("string");
  expect((body.error.message as string).length).toBeGreaterThan(0);
  expect(typeof body.error.type).toBe("string");
  if (type) expect(body.error.type).toBe(type);
  return body;
}

async function createAccount(name = "acme", credits = 50): Promise<{ id: string; name: string; balance: number }> {
  const res = await admin("POST", "/v1/admin/accounts", { name, credits });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; name: string; balance: number };
}

async function createKey(accountId: string, body: unknown = { name: "ci" }) {
  const res = await admin("POST", `/v1/admin/accounts/${accountId}/keys`, body);
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; key: string; name: string | null; created_at: string };
}

function randomWellFormedKey(): string {
  return "svc-sk-" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

describe("admin API availability and authentication", () => {
  test("without an admin token configured, admin paths are 404", async () => {
    for (const token of [null, ADMIN_TOKEN, ""]) {
      const res = await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, token, closed);
      await expectErrorBody(res, 404);
    }
    const key = await admin("POST", `/v1/admin/accounts/${closed.accountId}/keys`, {}, ADMIN_TOKEN, closed);
    expect(key.status).toBe(404);
    const del = await admin("DELETE", `/v1/admin/keys/${closed.keyId}`, undefined, ADMIN_TOKEN, closed);
    expect(del.status).toBe(404);
    // Nothing was created or revoked: the helper's key still works.
    const ok = await fetch(closed.url + "/v1/models", { headers: { authorization: `Bearer ${closed.key}` } });
    expect(ok.status).toBe(200);
  });

  test("missing or wrong admin token → 401 with a JSON error body", async () => {
    const before = new Database(gw.dbPath, { readonly: true });
    const count = () => before.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts").get()!.n;
    const n0 = count();
    const attempts: Response[] = [
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, null),
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, "wrong-token"),
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, ADMIN_TOKEN + "x"),
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, ADMIN_TOKEN.slice(0, -1)),
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, ""),
      // A gateway key is not an admin token.
      await admin("POST", "/v1/admin/accounts", { name: "x", credits: 1 }, gw.key),
      // Header only: the token in the query string does not count.
      await fetch(`${gw.url}/v1/admin/accounts?access_token=${ADMIN_TOKEN}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "x", credits: 1 }) }),
      await fetch(`${gw.url}/v1/admin/accounts?=${ADMIN_TOKEN}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "x", credits: 1 }) }),
      // The scheme must be followed by a space.
      await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: { authorization: `Bearer${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "x", credits: 1 }) }),
      await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: { authorization: `BearerX${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "x", credits: 1 }) }),
      await admin("POST", `/v1/admin/accounts/${gw.accountId}/keys`, {}, "nope"),
      await admin("DELETE", `/v1/admin/keys/${gw.keyId}`, undefined, "nope"),
    ];
    for (const res of attempts) await expectErrorBody(res, 401, "authentication_error");
    expect(count()).toBe(n0);
    before.close();
    // The DELETE above did not revoke anything.
    expect((await models({ authorization: `Bearer ${gw.key}` })).status).toBe(200);
  });
});

describe("accounts", () => {
  test("POST /v1/admin/accounts → 201 {id, name, balance}", async () => {
    const res = await admin("POST", "/v1/admin/accounts", { name: "Acme Inc", credits: 12.5 });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(["balance", "id", "max_concurrent_requests", "name", "rate_limit_per_minute", "tokens_per_minute"]);
    expect(typeof body.id).toBe("string");
    expect((body.id as string).length).toBeGreaterThan(0);
    expect(body.name).toBe("Acme Inc");
    expect(body.balance).toBe(12.5);

    const db = new Database(gw.dbPath, { readonly: true });
    const row = db.query<{ name: string; balance_micro: number }, [string]>("SELECT name, balance_micro FROM accounts WHERE id = ?").get(body.id as string);
    db.close();
    expect(row).toEqual({ name: "Acme Inc", balance_micro: 12_500_000 });
  });

  test("fields the admin API does not know are ignored, not refused", async () => {
    const res = await admin("POST", "/v1/admin/accounts", { name: "Later Inc", credits: 3, currency: "EUR", notes: { tier: "gold" } });
    expect(res.status).toBe(201);
    const account = (await res.json()) as { id: string };
    expect(Object.keys(account).sort()).toEqual(["balance", "id", "max_concurrent_requests", "name", "rate_limit_per_minute", "tokens_per_minute"]);
    const key = await admin("POST", `/v1/admin/accounts/${account.id}/keys`, { name: "k", scopes: ["chat"] });
    expect(key.status).toBe(201);
    expect((await admin("POST", `/v1/admin/accounts/${account.id}/credits`, { amount: 1, reason: "promo" })).status).toBe(200);
  });

  test("a top-up that would take the balance past 8,000,000,000 credits → 400, nothing credited; the balance reads back exact to the micro-credit", async () => {
    const account = await createAccount("whale", 999_999_999.999999);
    for (let i = 0; i < 7; i++) expect((await admin("POST", `/v1/admin/accounts/${account.id}/credits`, { amount: 1_000_000_000 })).status).toBe(200);
    const refused = await admin("POST", `/v1/admin/accounts/${account.id}/credits`, { amount: 1_000_000_000 });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as any).error.message).toContain("above 8,000,000,000 credits");
    // The text itself, not a parsed double: a parsed 8,999,999,999.999998 equals 8_999_999_999.999999.
    const text = await (await admin("GET", `/v1/admin/accounts/${account.id}`)).text();
    expect(text).toContain('"balance":7999999999.999999');
  });

  test("six decimals are accepted exactly", async () => {
    const account = await createAccount("micro", 0.000001);
    expect(account.balance).toBe(0.000001);
  });

  test("invalid bodies → 400", async () => {
    const bad: unknown[] = [
      { credits: 10 },
      { name: "", credits: 10 },
      { name: "x" },
      { name: "x", credits: -1 },
      { name: "x", credits: 1.1234567 },
      { name: "x", credits: 0.0000001 },
      { name: "x", credits: "10" },
      { name: 42, credits: 10 },
      "{not json",
    ];
    const db = new Database(gw.dbPath, { readonly: true });
    const count = () => db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts").get()!.n;
    const n0 = count();
    for (const body of bad) {
      const res = await admin("POST", "/v1/admin/accounts", body);
      if (res.status !== 400) throw new Error(`expected 400 for ${JSON.stringify(body)}, got ${res.status}`);
      await expectErrorBody(res, 400, "invalid_request_error");
    }
    expect(count()).toBe(n0);
    db.close();
  });
});

describe("keys", () => {
  test("POST /v1/admin/accounts/:id/keys → 201 {id, key, name, created_at}; only the SHA-256 is stored", async () => {
    const account = await createAccount();
    const before = Date.now();
    const issued = await createKey(account.id, { name: "ci" });
    expect(Object.keys(issued).sort()).toEqual(["created_at", "id", "key", "name"]);
    expect(issued.key).toMatch(KEY_SHAPE);
    expect(issued.name).toBe("ci");
    expect(typeof issued.id).toBe("string");
    expect(issued.id).not.toBe(issued.key);
    const created = Date.parse(issued.created_at);
    expect(Number.isNaN(created)).toBe(false);
    expect(created).toBeGreaterThanOrEqual(before - 1000);
    expect(created).toBeLessThanOrEqual(Date.now() + 1000);

    const db = new Database(gw.dbPath, { readonly: true });
    try {
      const row = db.query<Record<string, unknown>, [string]>("SELECT * FROM api_keys WHERE id = ?").get(issued.id)!;
      expect(row).not.toBeNull();
      expect(row.account_id).toBe(account.id);
      expect(row.key_hash).toBe(createHash("sha256").update(issued.key).digest("hex"));
      for (const [column, value] of Object.entries(row)) {
        if (typeof value === "string") {
          if (value.includes(issued.key)) throw new Error(`column ${column} holds the plain key`);
          // No column holds the secret body either (prefix + last 4 are fine, the whole is not).
          expect(value.includes(issued.key.slice("svc-sk-".length))).toBe(false);
        }
      }
      // And nowhere else in the database.
      const tables = db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table'").all();
      for (const { name } of tables) {
        for (const r of db.query<Record<string, unknown>, []>(`SELECT * FROM "${name}"`).all()) {
          for (const v of Object.values(r)) if (typeof v === "string") expect(v.includes(issued.key)).toBe(false);
        }
      }
    } finally {
      db.close();
    }
  });

  test("each key is different; name is optional", async () => {
    const account = await createAccount();
    const a = await createKey(account.id, {});
    const b = await createKey(account.id, { name: "second" });
    expect(a.name).toBeNull();
    expect(a.key).toMatch(KEY_SHAPE);
    expect(b.key).toMatch(KEY_SHAPE);
    expect(a.key).not.toBe(b.key);
    expect(a.id).not.toBe(b.id);
  });

  test("unknown account → 404", async () => {
    const res = await admin("POST", "/v1/admin/accounts/acct_doesnotexist/keys", { name: "x" });
    await expectErrorBody(res, 404, "not_found_error");
  });

  test("the new key works via Bearer and x-api-key; revoke → 401 at once; revoking again → 404", async () => {
    const account = await createAccount();
    const issued = await createKey(account.id);

    expect((await models({ authorization: `Bearer ${issued.key}` })).status).toBe(200);
    expect((await models({ "x-api-key": issued.key })).status).toBe(200);
    // Warm the cache once more so the revoke has to invalidate it.
    expect((await models({ authorization: `Bearer ${issued.key}` })).status).toBe(200);

    const del = await admin("DELETE", `/v1/admin/keys/${issued.id}`);
    expect(del.status).toBe(200);
    expect(await del.json()).toEqual({ id: issued.id, revoked: true });

    await expectErrorBody(await models({ authorization: `Bearer ${issued.key}` }), 401, "authentication_error");
    await expectErrorBody(await models({ "x-api-key": issued.key }), 401, "authentication_error");

    const db = new Database(gw.dbPath, { readonly: true });
    const row = db.query<{ revoked_at: number | null }, [string]>("SELECT revoked_at FROM api_keys WHERE id = ?").get(issued.id)!;
    db.close();
    expect(typeof row.revoked_at).toBe("number");

    await expectErrorBody(await admin("DELETE", `/v1/admin/keys/${issued.id}`), 404, "not_found_error");
    await expectErrorBody(await admin("DELETE", "/v1/admin/keys/key_doesnotexist"), 404, "not_found_error");

    // Revoking one key leaves the account's other keys alone.
    const other = await createKey(account.id);
    expect((await models({ authorization: `Bearer ${other.key}` })).status).toBe(200);
  });

  test("401 bodies are identical for missing, malformed, unknown and revoked keys", async () => {
    const account = await createAccount();
    const revoked = await createKey(account.id);
    expect((await models({ authorization: `Bearer ${revoked.key}` })).status).toBe(200);
    expect((await admin("DELETE", `/v1/admin/keys/${revoked.id}`)).status).toBe(200);

    const cases: Record<string, Record<string, string>> = {
      missing: {},
      malformed: { authorization: "Bearer hello" },
      unknown: { authorization: `Bearer ${randomWellFormedKey()}` },
      unknownViaXApiKey: { "x-api-key": randomWellFormedKey() },
      revoked: { authorization: `Bearer ${revoked.key}` },
    };
    const bodies: Record<string, string> = {};
    for (const [name, headers] of Object.entries(cases)) {
      const res = await models(headers);
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toContain("application/json");
      bodies[name] = await res.text();
    }
    const first = bodies.missing!;
    const parsed = JSON.parse(first) as { error: { message: string; type: string } };
    expect(parsed.error.type).toBe("authentication_error");
    expect(typeof parsed.error.message).toBe("string");
    for (const [name, text] of Object.entries(bodies)) {
      if (text !== first) throw new Error(`401 body for ${name} differs: ${text} vs ${first}`);
    }
    // Nothing in the body echoes what was sent.
    expect(first).not.toContain(revoked.key);
    expect(first).not.toContain("hello");
  });
});

describe("GET /v1/models", () => {
  test("exactly the spec fields per model", async () => {
    const res = await models({ authorization: `Bearer ${gw.key}` });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const body = (await res.json()) as { object: string; data: Record<string, unknown>[] };
    expect(Object.keys(body).sort()).toEqual(["data", "object"]);
    expect(body.object).toBe("list");
    expect(Array.isArray(body.data)).toBe(true);
    const ids = body.data.map((m) => m.id);
    for (const id of [OPENAI_MODEL, ANTHROPIC_MODEL, FREE_MODEL]) expect(ids).toContain(id);
    expect(new Set(ids).size).toBe(ids.length);

    // The spec's fields, and OpenAI's `created` (its SDK's Model type has it).
    const fields = ["category", "context_length", "created", "credits_per_msg", "id", "modalities", "model_id", "object", "owned_by"];
    for (const m of body.data) {
      expect(Object.keys(m).sort()).toEqual(fields);
      expect(typeof m.id).toBe("string");
      expect(m.object).toBe("model");
      expect(m.created).toBe(Date.parse("2025-01-01T00:00:00Z") / 1000);
      expect(typeof m.owned_by).toBe("string");
      expect(Number.isInteger(m.credits_per_msg)).toBe(true);
      expect(m.credits_per_msg as number).toBeGreaterThanOrEqual(0);
      expect(m.model_id).toBe(m.id);
      expect(["text", "image", "free"]).toContain(m.category as string);
      expect(Number.isInteger(m.context_length)).toBe(true);
      const mod = m.modalities as { input: unknown; output: unknown };
      expect(Object.keys(mod).sort()).toEqual(["input", "output"]);
      expect(Array.isArray(mod.input)).toBe(true);
      expect(Array.isArray(mod.output)).toBe(true);
      expect((mod.input as unknown[]).length).toBeGreaterThan(0);
      for (const v of [...(mod.input as unknown[]), ...(mod.output as unknown[])]) expect(typeof v).toBe("string");
    }

    const byId = new Map(body.data.map((m) => [m.id as string, m]));
    const gpt = byId.get(OPENAI_MODEL)!;
    // ceil((1000 × 150 + 500 × 600) / 1e6) = ceil(0.45) = 1
    expect(gpt.credits_per_msg).toBe(1);
    expect(gpt).toMatchObject({ owned_by: "openai", category: "text", context_length: 128_000 });
    // ceil((1000 × 3000 + 500 × 15000) / 1e6) = ceil(10.5) = 11
    expect(byId.get(ANTHROPIC_MODEL)!.credits_per_msg).toBe(11);
    const free = byId.get(FREE_MODEL)!;
    expect(free.credits_per_msg).toBe(0);
    expect(free).toMatchObject({ category: "free", context_length: 8192, modalities: { input: ["text"], output: ["text"] } });
    // Without owned_by in the config, the id's namespace is the owner.
    expect(free.owned_by).toBe("test");
  });

  test("requires a key", async () => {
    await expectErrorBody(await models({}), 401, "authentication_error");
  });
});

describe("failed admin authentication", () => {
  test("is logged at warn with the address and path, never what was presented; past 10 a minute from one address → 429 with Retry-After; the right token always works", async () => {
    const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
    const own = await startGateway({ upstreamUrl: NO_UPSTREAM, adminToken: ADMIN_TOKEN, log: (level, message, fields) => lines.push({ level, message, fields: fields ?? {} }) });
    try {
      const wrong = "wrong-admin-token-guess-0123456789abcdef";
      for (let i = 0; i < 10; i++) await expectErrorBody(await admin("GET", "/v1/admin/accounts", undefined, wrong, own), 401, "authentication_error");
      const throttled = await admin("GET", "/v1/admin/accounts", undefined, wrong, own);
      await expectErrorBody(throttled, 429, "rate_limit_error");
      const retryAfter = Number(throttled.headers.get("retry-after"));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      // No token at all is a failure too.
      expect((await admin("GET", "/v1/admin/accounts", undefined, null, own)).status).toBe(429);
      // The operator is not locked out by someone else's guesses from the same address.
      expect((await admin("GET", "/v1/admin/accounts", undefined, ADMIN_TOKEN, own)).status).toBe(200);
      expect((await admin("GET", "/v1/admin/accounts", undefined, wrong, own)).status).toBe(429);

      const failures = lines.filter((l) => l.message === "admin authentication failed");
      expect(failures).toHaveLength(13);
      for (const f of failures) {
        expect(f.level).toBe("warn");
        expect(f.fields.address).toBe("127.0.0.1");
        expect(f.fields.path).toBe("/v1/admin/accounts");
      }
      expect(JSON.stringify(lines)).not.toContain(wrong);
      expect(JSON.stringify(lines)).not.toContain(ADMIN_TOKEN);
    } finally {
      await own.stop();
    }
  });
});
