import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { runAdmin } from "../../src/cli/admin.ts";
import { startGateway, type Gateway } from "../helpers/gateway.ts";

/**
 * Issue 32, items 5 and 6: every date and number the admin API and CLI take is in range or
 * refused (400 naming the field; exit 2 with one line), both check the same, and rows an older
 * version wrote with out-of-range dates are read without a crash (clamped to year 0 or 9999).
 */
const ADMIN_TOKEN = "admin-test-token-0123456789abcdef";
const LATEST = "9999-12-31T23:59:59.999Z";
let gw: Gateway;
const dirs: string[] = [];
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: "http://127.0.0.1:9", adminToken: ADMIN_TOKEN });
});
afterAll(async () => {
  await gw.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(gw.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function account(name = "hardening", credits = 10): Promise<string> {
  const res = await admin("POST", "/v1/admin/accounts", { name, credits });
  expect(res.status).toBe(201);
  return res.body.id;
}

function expect400(res: { status: number; body: any }, field: string, what: string) {
  if (res.status !== 400 || !String(res.body?.error?.message).includes(field)) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)} (wanted a 400 naming ${field})`);
  expect(res.body.error.type).toBe("invalid_request_error");
}

const balanceMicro = (id: string) => gw.db.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?").get(id)!.b;

describe("admin API: dates and numbers in range or a 400", () => {
  test("expiry dates past 9999 or off the calendar are refused; year 0 (a leap year) is a date", async () => {
    const id = await account();
    for (const expires_at of ["99999999999999999", "9999999999999999", "10000-01-01", "+010000-01-01T00:00:00Z", "2027-02-29"]) {
      expect400(await admin("POST", `/v1/admin/accounts/${id}/keys`, { expires_at }), "expires_at", expires_at);
    }
    const leap = await admin("POST", `/v1/admin/accounts/${id}/keys`, { expires_at: "0000-02-29" });
    expect(leap.status).toBe(201);
    const keys = await admin("GET", `/v1/admin/accounts/${id}/keys`);
    expect(keys.body.data.map((k: any) => k.expires_at)).toEqual(["0000-02-29T00:00:00.000Z"]);
  });

  test("usage reports: a from or to past 9999 is a 400, not a 500", async () => {
    const id = await account();
    for (const q of ["to=99999999999999999", "to=9999999999999999", "from=10000-01-01", "to=2026-02-30"]) {
      expect400(await admin("GET", `/v1/admin/usage?${q}`), q.split("=")[0]!, `/usage?${q}`);
      expect400(await admin("GET", `/v1/admin/accounts/${id}/usage?${q}`), q.split("=")[0]!, `/accounts/:id/usage?${q}`);
    }
    expect((await admin("GET", `/v1/admin/usage?from=0&to=253402300799999`)).status).toBe(200);
  });

  test("amounts below one micro-credit are refused, never recorded as zero", async () => {
    const id = await account();
    const before = balanceMicro(id);
    const entries = () => gw.db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM credit_entries WHERE account_id = ?").get(id)!.n;
    const n = entries();
    for (const amount of [5e-10, 1e-7, 0, -1, 1.0000001]) expect400(await admin("POST", `/v1/admin/accounts/${id}/credits`, { amount }), "amount", `amount ${amount}`);
    expect(balanceMicro(id)).toBe(before);
    expect(entries()).toBe(n);
    expect400(await admin("POST", "/v1/admin/accounts", { name: "tiny", credits: 5e-10 }), "credits", "credits 5e-10");
    expect400(await admin("POST", `/v1/admin/accounts/${id}/keys`, { spend_limit: 5e-10 }), "spend_limit", "key spend_limit 5e-10");
    expect400(await admin("PATCH", `/v1/admin/accounts/${id}`, { spend_limit: 5e-10 }), "spend_limit", "account spend_limit 5e-10");
    const ok = await admin("POST", `/v1/admin/accounts/${id}/credits`, { amount: 0.000001 });
    expect(ok.status).toBe(200);
    expect(balanceMicro(id)).toBe(before + 1);
  });

  test("names are 1 to 200 characters; rate limits whole numbers from 1", async () => {
    const id = await account();
    expect400(await admin("POST", "/v1/admin/accounts", { name: "x".repeat(5_000), credits: 1 }), "name", "5,000-character name");
    expect400(await admin("POST", "/v1/admin/accounts", { name: "", credits: 1 }), "name", "empty name");
    expect400(await admin("POST", `/v1/admin/accounts/${id}/keys`, { name: "" }), "name", "empty key name");
    expect400(await admin("POST", `/v1/admin/accounts/${id}/keys`, { name: "k".repeat(201) }), "name", "long key name");
    for (const rate_limit_per_minute of [0, -5, 1.5, "5"]) {
      expect400(await admin("POST", `/v1/admin/accounts/${id}/keys`, { rate_limit_per_minute }), "rate_limit_per_minute", `rpm ${rate_limit_per_minute}`);
    }
    const key = await admin("POST", `/v1/admin/accounts/${id}/keys`, { name: "k".repeat(200) });
    expect(key.status).toBe(201);
    expect400(await admin("PATCH", `/v1/admin/keys/${key.body.id}`, { name: "" }), "name", "PATCH key name ''");
    expect((await admin("PATCH", `/v1/admin/keys/${key.body.id}`, { name: null })).body.name).toBeNull();
  });

  test("a key row with out-of-range dates (an older version's) is read, clamped; a top-up beside it answers 200 and credits once", async () => {
    const id = await account();
    const key = await admin("POST", `/v1/admin/accounts/${id}/keys`, { name: "old" });
    gw.db.query("UPDATE api_keys SET expires_at = 99999999999999999, revoked_at = -99999999999999999 WHERE id = ?").run(key.body.id);
    const shown = await admin("GET", `/v1/admin/accounts/${id}`);
    expect(shown.status).toBe(200);
    expect(shown.body.keys[0]).toMatchObject({ id: key.body.id, expires_at: LATEST, revoked_at: "0000-01-01T00:00:00.000Z" });
    const listed = await admin("GET", `/v1/admin/accounts/${id}/keys`);
    expect(listed.status).toBe(200);
    expect(listed.body.data[0].expires_at).toBe(LATEST);
    const before = balanceMicro(id);
    const topUp = await admin("POST", `/v1/admin/accounts/${id}/credits`, { amount: 1 });
    expect(topUp.status).toBe(200);
    expect(balanceMicro(id)).toBe(before + 1_000_000);
  });
});

describe("admin CLI: the same checks as the API", () => {
  const fresh = () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-hardening-"));
    dirs.push(dir);
    return { SWITCHYARD_DB: join(dir, "admin.sqlite") };
  };
  const refused = (r: { code: number; out: string }, field: string, what: string) => {
    if (r.code !== 2 || !r.out.includes(field) || r.out.includes("\n")) throw new Error(`${what}: exit ${r.code} ${JSON.stringify(r.out)} (wanted exit 2, one line naming ${field})`);
  };

  test("names, credits, top-ups, rate limits and dates", async () => {
    const env = fresh();
    const run = (...argv: string[]) => runAdmin(argv, env);
    refused(await run("accounts", "create", "x".repeat(5_000), "1"), "name", "5,000-character name");
    refused(await run("accounts", "create", "x".repeat(5_000), ""), "name", "the issue's case");
    refused(await run("accounts", "create", "acme", ""), "credits", "no credits");
    refused(await run("accounts", "create", "", "1"), "name", "empty name");
    for (const bad of ["0x10", "Infinity", " ", "5e-10", "-1"]) refused(await run("accounts", "create", "acme", bad), "credits", `credits ${bad}`);
    const db = new Database(env.SWITCHYARD_DB, { readonly: true });
    expect(db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts").get()!.n).toBe(0);
    const id = JSON.parse((await run("accounts", "create", "acme", "5")).out).id as string;
    for (const bad of ["0", "5e-10", "0.0000001", "-1", ""]) refused(await run("accounts", "topup", id, bad), "credits", `topup ${bad}`);
    for (const bad of ["-5", "0", "", "1.5"]) refused(await run("keys", "create", id, "--rpm", bad), "--rpm", `--rpm ${JSON.stringify(bad)}`);
    refused(await run("keys", "create", id, ""), "name", "empty key name");
    refused(await run("keys", "create", id, "--expires", "99999999999999999"), "--expires", "--expires past 9999");
    refused(await run("keys", "create", id, "--spend-limit", "5e-10"), "--spend-limit", "--spend-limit 5e-10");
    refused(await run("usage", id, "99999999999999999"), "from", "usage from past 9999");
    refused(await run("report", "--to", "99999999999999999"), "to", "report --to past 9999");
    refused(await run("accounts", "update", id, "--name", "y".repeat(201)), "--name", "update --name 201");
    expect(db.query<{ b: number; n: number }, [string]>("SELECT balance_micro AS b, (SELECT COUNT(*) FROM api_keys) AS n FROM accounts WHERE id = ?").get(id)).toEqual({ b: 5_000_000, n: 0 });
    db.close();
    expect(JSON.parse((await run("accounts", "topup", id, "0.000001")).out).balance).toBe(5.000001);
  });

  test("accounts show and keys list read a key with out-of-range dates", async () => {
    const env = fresh();
    const run = (...argv: string[]) => runAdmin(argv, env);
    const id = JSON.parse((await run("accounts", "create", "acme", "5")).out).id as string;
    const key = JSON.parse((await run("keys", "create", id, "old")).out).id as string;
    const db = new Database(env.SWITCHYARD_DB);
    db.query("UPDATE api_keys SET expires_at = 99999999999999999 WHERE id = ?").run(key);
    db.close();
    const shown = await run("accounts", "show", id);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.out).keys[0].expires_at).toBe(LATEST);
    const listed = await run("keys", "list", id);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.out).data[0].expires_at).toBe(LATEST);
  });
});

test("admin writes the ledger file cannot take now (read-only, full) are 503 with Retry-After, not 500; the same top-up and debit retried after it recovers are made once", async () => {
  const id = await account("read-only disk", 3);
  // What a full or read-only disk answers every write with (SQLITE_READONLY, SQLITE_FULL): the gateway's own connection refuses writes.
  gw.db.exec("PRAGMA query_only = 1");
  try {
    const send = (path: string, body: unknown, key?: string) =>
      fetch(gw.url + path, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) }, body: JSON.stringify(body) });
    const keys: Record<string, string> = { credits: "topup-disk-1", debits: "debit-disk-1" };
    for (const [path, body] of [[`/v1/admin/accounts/${id}/credits`, { amount: 5 }], [`/v1/admin/accounts/${id}/debits`, { amount: 2 }], ["/v1/admin/accounts", { name: "not now", credits: 1 }], [`/v1/admin/accounts/${id}/keys`, { name: "not now" }]] as const) {
      const keyed = /\/(credits|debits)$/.exec(path)?.[1];
      const res = await send(path, body, keyed && keys[keyed]);
      expect([path, res.status, res.headers.get("retry-after")]).toEqual([path, 503, "5"]);
      const error = ((await res.json()) as any).error;
      expect(error.message).toContain("cannot use its database right now");
      expect(error.message).not.toContain("    at ");
      // What to do: a top-up or a debit is sent again with its key (made once); anything else is read back first.
      expect([path, error.message.includes("retry with the same Idempotency-Key")]).toEqual([path, keyed !== undefined]);
    }
  } finally {
    gw.db.exec("PRAGMA query_only = 0");
  }
  const retried = await fetch(gw.url + `/v1/admin/accounts/${id}/credits`, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", "idempotency-key": "topup-disk-1" }, body: JSON.stringify({ amount: 5 }) });
  expect(retried.status).toBe(200);
  for (let i = 0; i < 2; i++) {
    const debited = await fetch(gw.url + `/v1/admin/accounts/${id}/debits`, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", "idempotency-key": "debit-disk-1" }, body: JSON.stringify({ amount: 2 }) });
    expect(debited.status).toBe(200);
  }
  expect((await admin("GET", `/v1/admin/accounts/${id}`)).body.balance).toBe(6);
});
