import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAdmin } from "../../src/cli/admin.ts";
import { startGateway, type Gateway } from "../helpers/gateway.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { connectPostgres } from "../../src/store/postgres/pg-client.ts";

/** Issue 32, item 5: a top-up repeated with the same Idempotency-Key credits once (API and CLI, SQLite and PostgreSQL). */
const ADMIN_TOKEN = "admin-test-token-0123456789abcdef";
let gw: Gateway;
const dirs: string[] = [];
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: "http://127.0.0.1:9", adminToken: ADMIN_TOKEN });
});
afterAll(async () => {
  await gw.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function admin(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(gw.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
const newAccount = async () => (await admin("POST", "/v1/admin/accounts", { name: "idem", credits: 10 })).body.id as string;
const balanceMicro = (id: string) => gw.db.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?").get(id)!.b;
const topUp = (id: string, amount: number, key?: string) => admin("POST", `/v1/admin/accounts/${id}/credits`, { amount }, key === undefined ? {} : { "idempotency-key": key });

describe("POST /v1/admin/accounts/:id/credits with an Idempotency-Key", () => {
  test("a repeat credits once and answers the same body; another amount or account is a 409 naming the first", async () => {
    const id = await newAccount();
    const other = await newAccount();
    const key = `topup-${crypto.randomUUID()}`;
    const first = await topUp(id, 2.5, key);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ id, balance: 12.5, reserved: 0 });
    const again = await topUp(id, 2.5, key);
    expect(again).toEqual(first);
    expect(balanceMicro(id)).toBe(12_500_000);
    const rows = gw.db.query<{ amount_micro: number; idempotency_key: string }, [string]>("SELECT amount_micro, idempotency_key FROM credit_entries WHERE account_id = ? AND kind = 'top_up'").all(id);
    expect(rows).toEqual([{ amount_micro: 2_500_000, idempotency_key: key }]);

    for (const [account, amount] of [[id, 3], [other, 2.5]] as const) {
      const conflict = await topUp(account, amount, key);
      expect(conflict.status).toBe(409);
      expect(conflict.body.error.type).toBe("invalid_request_error");
      expect(conflict.body.error.message).toContain("Idempotency-Key");
      expect(conflict.body.error.message).toContain(id);
      expect(conflict.body.error.message).toContain("2.5");
    }
    expect(balanceMicro(id)).toBe(12_500_000);
    expect(balanceMicro(other)).toBe(10_000_000);
    // Without a key every top-up counts, as before.
    await topUp(id, 1);
    await topUp(id, 1);
    expect(balanceMicro(id)).toBe(14_500_000);
  });

  test("twenty repeats at once credit once", async () => {
    const id = await newAccount();
    const key = `burst-${crypto.randomUUID()}`;
    const answers = await Promise.all(Array.from({ length: 20 }, () => topUp(id, 1, key)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(balanceMicro(id)).toBe(11_000_000);
  });

  test("a malformed key is a 400 naming the header; an unknown account a 404 that keeps the key free", async () => {
    const id = await newAccount();
    for (const bad of ["has space", "x".repeat(201), "é"]) {
      const res = await fetch(`${gw.url}/v1/admin/accounts/${id}/credits`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json", "idempotency-key": bad },
        body: JSON.stringify({ amount: 1 }),
      }).catch(() => undefined);
      if (!res) continue; // fetch refuses some header values itself
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.message).toContain("Idempotency-Key");
    }
    expect(balanceMicro(id)).toBe(10_000_000);
    const key = `free-${crypto.randomUUID()}`;
    expect((await topUp("acct_missing", 1, key)).status).toBe(404);
    expect((await topUp(id, 1, key)).status).toBe(200);
    expect(balanceMicro(id)).toBe(11_000_000);
  });
});

async function cliCase(env: Record<string, string>) {
  const run = (...argv: string[]) => runAdmin(argv, env);
  const id = JSON.parse((await run("accounts", "create", "cli-idem", "5")).out).id as string;
  const other = JSON.parse((await run("accounts", "create", "cli-other", "5")).out).id as string;
  const key = `cli-${crypto.randomUUID()}`;
  const first = await run("accounts", "topup", id, "1.5", "--idempotency-key", key);
  expect(first.code).toBe(0);
  expect(JSON.parse(first.out)).toEqual({ id, balance: 6.5, reserved: 0 });
  expect(await run("accounts", "topup", id, "1.5", "--idempotency-key", key)).toEqual(first);
  const conflicts = [await run("accounts", "topup", id, "2", "--idempotency-key", key), await run("accounts", "topup", other, "1.5", "--idempotency-key", key)];
  for (const c of conflicts) {
    expect(c.code).toBe(1);
    expect(c.out).toContain("Idempotency-Key");
  }
  const bad = await run("accounts", "topup", id, "1", "--idempotency-key", "");
  expect(bad.code).toBe(2);
  expect(bad.out).toContain("--idempotency-key");
  // Concurrent repeats: one credit.
  const burst = `cli-burst-${crypto.randomUUID()}`;
  await Promise.all(Array.from({ length: 8 }, () => run("accounts", "topup", other, "1", "--idempotency-key", burst)));
  expect(JSON.parse((await run("accounts", "show", id)).out).balance).toBe(6.5);
  expect(JSON.parse((await run("accounts", "show", other)).out).balance).toBe(6);
  const audit = await run("audit");
  expect(JSON.parse(audit.out).clean).toBe(true);
}

test("CLI on SQLite: accounts topup --idempotency-key credits once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-idem-"));
  dirs.push(dir);
  await cliCase({ SWITCHYARD_DB: join(dir, "admin.sqlite") });
});

const pgMissing = await postgresMissing();
const pgDatabase = useTestDatabase();
if (pgMissing) {
  test.skip(`idempotent top-ups on PostgreSQL — skipped: ${pgMissing}`, () => {});
} else {
  test("CLI on PostgreSQL: accounts topup --idempotency-key credits once, also when repeats race", async () => {
    await cliCase({ SWITCHYARD_DATABASE_URL: await pgDatabase() });
  });

  test("on PostgreSQL too, a key row with an out-of-range expiry (an older version's) is read, clamped to 9999", async () => {
    const env = { SWITCHYARD_DATABASE_URL: await pgDatabase() };
    const run = (...argv: string[]) => runAdmin(argv, env);
    const id = JSON.parse((await run("accounts", "create", "pg-old", "5")).out).id as string;
    const key = JSON.parse((await run("keys", "create", id, "old")).out).id as string;
    const sql = connectPostgres(env.SWITCHYARD_DATABASE_URL, { max: 1 });
    await sql`UPDATE api_keys SET expires_at = 99999999999999999 WHERE id = ${key}`;
    await sql.close({ timeout: 0 });
    const shown = await run("accounts", "show", id);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.out).keys[0].expires_at).toBe("9999-12-31T23:59:59.999Z");
    expect(JSON.parse((await run("keys", "list", id)).out).data[0].expires_at).toBe("9999-12-31T23:59:59.999Z");
  });
}
