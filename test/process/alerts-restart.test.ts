import { Database } from "bun:sqlite";
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess } from "../helpers/gateway-process.ts";
import { startAlertReceiver, waitFor } from "../helpers/alert-receiver.ts";

let upstream: FakeUpstream;
const receiver = startAlertReceiver();
const dir = mkdtempSync(join(tmpdir(), "switchyard-alerts-restart-"));
afterAll(async () => {
  await upstream?.stop();
  await receiver.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ADMIN = "alerts-restart-admin-0123456789abcdef0123456789abcdef";

function outbox(dbPath: string) {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db.query<{ event_id: string; attempts: number; delivered_at: number | null }, []>("SELECT event_id, attempts, delivered_at FROM alert_outbox ORDER BY id").all();
  } finally {
    db.close();
  }
}

test("events queued while the receiver refuses survive a gateway restart: the next process delivers each once", async () => {
  upstream = await startFakeUpstream();
  const config = join(dir, "switchyard.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    // Output only, 1000 credits per million tokens: a request's hold is exactly max_tokens' worth.
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 0, output_per_mtok: 1000 } }],
    alerts: { webhook_url: receiver.url, low_balance: 999.5, retry_initial_ms: 50, retry_max_ms: 200 },
  }));
  const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "ledger.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_ALERT_SECRET: "whsec-restart" };
  receiver.setRefusing(true);

  const first = await startGatewayProcess(env);
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  const accountId = db.query<{ id: string }, []>("SELECT id FROM accounts WHERE name = 'demo'").get()!.id;
  db.close();
  const patched = await fetch(`${first.url}/v1/admin/accounts/${accountId}`, {
    method: "PATCH",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify({ spend_limit: 1 }),
  });
  expect(patched.status).toBe(200);
  // Four requests of 0.25 credits: the account's limit reaches 50, 80 and 100 %, its balance (1,000 credits at first) falls below 999.5.
  for (let i = 0; i < 4; i++) {
    upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 250, total_tokens: 253 } } });
    const res = await fetch(`${first.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "test/paid", max_tokens: 250, messages: [{ role: "user", content: "Hi" }] }),
    });
    expect(res.status).toBe(200);
    await res.text();
  }
  await waitFor("four events queued and refused at least once each", () => outbox(env.SWITCHYARD_DB).filter((r) => r.attempts > 0).length === 4 && receiver.refusedCount() >= 4);
  first.child.kill("SIGTERM");
  expect(await first.child.exited).toBe(0);
  const queued = outbox(env.SWITCHYARD_DB);
  expect(queued.length).toBe(4);
  expect(queued.every((r) => r.delivered_at === null)).toBe(true);
  expect(receiver.accepted.length).toBe(0);
  expect(receiver.refusedCount()).toBeGreaterThanOrEqual(4);

  receiver.setRefusing(false);
  const second = await startGatewayProcess(env);
  try {
    await waitFor("the four events delivered", () => receiver.accepted.length >= 4);
    await Bun.sleep(300);
    expect(receiver.accepted.length).toBe(4);
    expect(receiver.accepted.map((a) => a.json.id).sort()).toEqual(queued.map((r) => r.event_id).sort());
    expect(receiver.types().sort()).toEqual(["balance.low", "spend_limit.threshold:account:100", "spend_limit.threshold:account:50", "spend_limit.threshold:account:80"]);
    await waitFor("the outbox marks them delivered", () => outbox(env.SWITCHYARD_DB).every((r) => r.delivered_at !== null));
  } finally {
    second.child.kill("SIGTERM");
    expect(await second.child.exited).toBe(0);
  }
}, 40_000);

test("a crash between a commit and the outbox insert loses nothing: the check at start queues what is due", async () => {
  receiver.accepted.length = 0;
  receiver.setRefusing(false);
  const models = [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 0, output_per_mtok: 1000 } }];
  const providers = [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }];
  // The first process charges without alerts configured: as if it died before its checks ran.
  const without = join(dir, "without-alerts.json");
  const withAlerts = join(dir, "with-alerts.json");
  writeFileSync(without, JSON.stringify({ providers, models }));
  writeFileSync(withAlerts, JSON.stringify({ providers, models, alerts: { webhook_url: receiver.url, retry_initial_ms: 50, retry_max_ms: 200 } }));
  const env = { SWITCHYARD_DB: join(dir, "crash.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN };

  const first = await startGatewayProcess({ ...env, SWITCHYARD_CONFIG: without });
  const db = new Database(env.SWITCHYARD_DB, { readonly: true });
  const accountId = db.query<{ id: string }, []>("SELECT id FROM accounts WHERE name = 'demo'").get()!.id;
  db.close();
  const created = await fetch(`${first.url}/v1/admin/accounts/${accountId}/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "limited", spend_limit: 1, spend_limit_period: "month" }),
  });
  expect(created.status).toBe(201);
  const key = (await created.json()) as { id: string; key: string };
  for (let i = 0; i < 2; i++) {
    upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 250, total_tokens: 253 } } });
    const res = await fetch(`${first.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "test/paid", max_tokens: 250, messages: [{ role: "user", content: "Hi" }] }),
    });
    expect(res.status).toBe(200);
    await res.text();
  }
  first.child.kill("SIGKILL");
  await first.child.exited;

  const second = await startGatewayProcess({ ...env, SWITCHYARD_CONFIG: withAlerts });
  try {
    await waitFor("the 50 % event", () => receiver.accepted.length >= 1);
    await Bun.sleep(300);
    expect(receiver.types()).toEqual(["spend_limit.threshold:key:50"]);
    expect(receiver.accepted[0]!.json.data).toMatchObject({ id: key.id, name: "limited", spent_in_period: 0.5, limit: 1, period: "month" });
  } finally {
    second.child.kill("SIGTERM");
    expect(await second.child.exited).toBe(0);
  }
}, 40_000);
