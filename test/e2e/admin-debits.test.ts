/**
 * Taking credits back (docs/api.md, "Taking credits back"): an operator corrects a top-up made by
 * mistake with POST /v1/admin/accounts/:id/debits (the console's operator view, the CLI's
 * `accounts debit`), never past the balance less what requests in flight hold.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAdmin } from "../../src/cli/admin.ts";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { startGatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { scripted } from "../helpers/scripted-answers.ts";
import { until } from "../helpers/until.ts";

const ADMIN = "admin-debits-0123456789abcdef0123456789abcdef";
const upstream = useFakeUpstream();
let gw: Gateway;
const dirs: string[] = [];
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, retry: { max_retries: 0 } });
});
afterAll(async () => {
  await gw?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function admin(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${gw.url}/v1/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
const debit = (id: string, amount: unknown, key?: string) => admin("POST", `/accounts/${id}/debits`, { amount }, key === undefined ? {} : { "idempotency-key": key });
const newAccount = async (credits: number) => (await admin("POST", "/accounts", { name: "debits", credits })).body.id as string;

describe("POST /v1/admin/accounts/:id/debits", () => {
  test("takes credits back, answers as a top-up does, writes a `debit` entry, and the audit stays clean", async () => {
    const id = await newAccount(10);
    expect((await admin("POST", `/accounts/${id}/credits`, { amount: 1000 })).body.balance).toBe(1010);
    const taken = await debit(id, 1000);
    expect(taken).toEqual({ status: 200, body: { id, balance: 10, reserved: 0 } });
    const entries = gw.db.query<{ kind: string; amount_micro: number }, [string]>("SELECT kind, amount_micro FROM credit_entries WHERE account_id = ? ORDER BY id").all(id);
    expect(entries.slice(-2)).toEqual([{ kind: "top_up", amount_micro: 1_000_000_000 }, { kind: "debit", amount_micro: -1_000_000_000 }]);
    const audit = await runAdmin(["audit"], { SWITCHYARD_DB: gw.dbPath });
    expect(audit.code).toBe(0);
    expect(JSON.parse(audit.out).clean).toBe(true);
  });

  test("bad amounts are a 400 naming the field, an unknown account a 404, no admin token a 401; nothing moves", async () => {
    const id = await newAccount(5);
    for (const amount of [0, -1, "1", null, 5e-7]) {
      const bad = await debit(id, amount);
      expect(bad.status).toBe(400);
      expect(bad.body.error.type).toBe("invalid_request_error");
      expect(bad.body.error.message).toContain("amount");
    }
    expect((await debit("acct_missing", 1)).status).toBe(404);
    const anonymous = await fetch(`${gw.url}/v1/admin/accounts/${id}/debits`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount: 1 }) });
    expect(anonymous.status).toBe(401);
    expect((await admin("GET", `/accounts/${id}`)).body.balance).toBe(5);
  });

  test("never past what requests in flight hold: a 409 that says what is available while a stream runs; the stream finishes charged, the balance never below zero", async () => {
    // The role chunk and the first text, then held open until finishHeld().
    const answer = scripted("openai", { text: "Hi there" }) as Extract<Reply, { kind: "sse" }>;
    upstream.reply({ ...answer, chunks: answer.chunks.slice(0, 2), holdOpen: true, afterHold: answer.chunks.slice(2) });
    const stream = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, max_tokens: 50, messages: [{ role: "user", content: "hello" }] });
    expect(stream.status).toBe(200);
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    const before = (await admin("GET", `/accounts/${gw.accountId}`)).body as { balance: number; reserved: number };
    expect(before.reserved).toBeGreaterThan(0);
    const available = before.balance - before.reserved;
    const refused = await debit(gw.accountId, before.balance);
    expect(refused.status).toBe(409);
    expect(refused.body.error.type).toBe("invalid_request_error");
    expect(refused.body.error.message).toContain(`has ${Number(available.toFixed(6))} credits available`);
    expect(refused.body.error.message).toContain("Nothing was debited");
    expect((await admin("GET", `/accounts/${gw.accountId}`)).body.balance).toBe(before.balance);
    // All that is available, to the micro-credit: the hold is still covered.
    const taken = await debit(gw.accountId, Number(available.toFixed(6)));
    expect(taken.status).toBe(200);
    upstream.finishHeld();
    expect(await stream.text()).toContain("data: [DONE]");
    await gw.app.services.settled();
    const after = (await admin("GET", `/accounts/${gw.accountId}`)).body as { balance: number; reserved: number };
    expect(after.reserved).toBe(0);
    expect(after.balance).toBeGreaterThanOrEqual(0);
    const charged = gw.db.query<{ cost_micro: number }, []>("SELECT cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!.cost_micro;
    expect(charged).toBeGreaterThan(0);
    expect(Math.round(after.balance * 1e6)).toBe(Math.round((before.balance - Number(available.toFixed(6))) * 1e6) - charged);
    await admin("POST", `/accounts/${gw.accountId}/credits`, { amount: 1000 });
  });

  test("with an Idempotency-Key a repeat is taken once and answered alike; a top-up's key is a 409", async () => {
    const id = await newAccount(10);
    const key = `debit-${crypto.randomUUID()}`;
    const first = await debit(id, 2, key);
    expect(first).toEqual({ status: 200, body: { id, balance: 8, reserved: 0 } });
    expect(await debit(id, 2, key)).toEqual(first);
    const topUpKey = `topup-${crypto.randomUUID()}`;
    expect((await admin("POST", `/accounts/${id}/credits`, { amount: 1 }, { "idempotency-key": topUpKey })).status).toBe(200);
    const conflict = await debit(id, 1, topUpKey);
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.message).toContain("already used for a top-up of 1 credits");
    expect((await admin("GET", `/accounts/${id}`)).body.balance).toBe(9);
  });
});

async function cliDebits(env: Record<string, string>) {
  const run = (...argv: string[]) => runAdmin(argv, env);
  const id = JSON.parse((await run("accounts", "create", "cli-debit", "5")).out).id as string;
  const taken = await run("accounts", "debit", id, "1.5");
  expect(taken.code).toBe(0);
  expect(JSON.parse(taken.out)).toEqual({ id, balance: 3.5, reserved: 0 });
  const key = `cli-debit-${crypto.randomUUID()}`;
  expect((await run("accounts", "debit", id, "0.5", "--idempotency-key", key)).code).toBe(0);
  expect(JSON.parse((await run("accounts", "debit", id, "0.5", "--idempotency-key", key)).out).balance).toBe(3);
  const past = await run("accounts", "debit", id, "3.000001");
  expect(past.code).toBe(1);
  expect(past.out).toContain("has 3 credits available");
  expect((await run("accounts", "debit", "acct_missing", "1")).code).toBe(1);
  expect((await run("accounts", "debit", id, "0")).code).toBe(2);
  expect(JSON.parse((await run("accounts", "show", id)).out).balance).toBe(3);
  expect(JSON.parse((await run("audit")).out).clean).toBe(true);
}

test("CLI on SQLite: accounts debit takes credits back while no gateway runs on the file; with one running it refuses and says where to debit", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-debit-"));
  dirs.push(dir);
  const db = join(dir, "ledger.sqlite");
  await cliDebits({ SWITCHYARD_DB: db });
  const id = JSON.parse((await runAdmin(["accounts", "create", "running", "5"], { SWITCHYARD_DB: db })).out).id as string;
  const running = await startGatewayProcess({ SWITCHYARD_DB: db });
  try {
    const refused = await runAdmin(["accounts", "debit", id, "1"], { SWITCHYARD_DB: db });
    expect(refused.code).toBe(1);
    expect(refused.out).toContain("a gateway is running on");
    expect(refused.out).toContain("POST /v1/admin/accounts/:id/debits");
    // A top-up only adds, so the CLI still makes one beside a running gateway.
    expect((await runAdmin(["accounts", "topup", id, "1"], { SWITCHYARD_DB: db })).code).toBe(0);
  } finally {
    await stopGatewayProcess(running);
  }
  const after = await runAdmin(["accounts", "debit", id, "1"], { SWITCHYARD_DB: db });
  expect(after.code).toBe(0);
  expect(JSON.parse(after.out).balance).toBe(5);
}, 30_000);

const pgMissing = await postgresMissing();
const pgDatabase = useTestDatabase();
if (pgMissing) {
  test.skip(`debits from the CLI on PostgreSQL — skipped: ${pgMissing}`, () => {});
} else {
  test("CLI on PostgreSQL: accounts debit takes credits back, never past what is held", async () => {
    await cliDebits({ SWITCHYARD_DATABASE_URL: await pgDatabase() });
  });
}
