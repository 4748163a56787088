import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway, type GatewayOptions } from "../helpers/gateway.ts";
import { startAlertReceiver, waitFor } from "../helpers/alert-receiver.ts";
import { until } from "../helpers/until.ts";
import { verifySignature } from "../../src/alerts/alert-signature.ts";
import { periodWindow } from "../../src/billing/spend-period.ts";

const upstream = useFakeUpstream();
const receiver = startAlertReceiver();
afterAll(() => receiver.stop());

const ADMIN = "alerts-admin-0123456789abcdef0123456789abcdef";
const SECRET = "whsec-test-0123456789";
/** Short backoff: a failed delivery is retried after 50 ms, doubling up to 200 ms. */
const ALERTS = { webhook_url: receiver.url, retry_initial_ms: 50, retry_max_ms: 200 };
const question = [{ role: "user", content: "How much?" }];

function gateway(o: Partial<GatewayOptions> & { alerts?: Record<string, unknown> } = {}): Promise<Gateway> {
  return startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, alerts: ALERTS, alertSecret: SECRET, ...o });
}

async function admin(gw: Gateway, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${gw.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(res.status).toBeLessThan(300);
  return res.json();
}

/** An answer whose reported usage costs `prompt` input tokens (150 credits per million) and `completion` output tokens (600). */
function replyCosting(prompt: number, completion: number) {
  upstream.reply({
    kind: "json",
    body: {
      id: "chatcmpl-alerts", object: "chat.completion", created: 1, model: "gpt-4o-mini",
      choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
      usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
    },
  });
}

/**
 * One paid request with `key`, settled and its alerts checked. By default a prompt reported far
 * past the hold: the charge is the hold (output past max_tokens would be counted at max_tokens).
 */
async function charge(gw: Gateway, key: string, o: { completion?: number; maxTokens?: number } = {}): Promise<number> {
  if (o.completion === undefined) replyCosting(10_000_000, 0);
  else replyCosting(0, o.completion);
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: o.maxTokens ?? 100, messages: question }),
  });
  await res.text();
  await gw.app.services.settled();
  await gw.app.services.alerts!.checked();
  return res.status;
}

/** What one capped request costs: its hold (the same body holds the same amount). */
async function holdOfOneRequest(gw: Gateway): Promise<number> {
  expect(await charge(gw, gw.key)).toBe(200);
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    const row = db.query<{ held_micro: number; cost_micro: number }, []>("SELECT held_micro, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(row.cost_micro).toBe(row.held_micro);
    return row.held_micro;
  } finally {
    db.close();
  }
}

/** Waits until the receiver has accepted `n` events in all, then gives stragglers a moment to show up. */
async function received(n: number) {
  await waitFor(`${n} alerts delivered`, () => receiver.accepted.length >= n);
  await Bun.sleep(150);
  expect(receiver.accepted.length).toBe(n);
}

/** The README's verification sample, as a receiver would paste it. */
function readmeSample(): (secret: string, body: string, header: string) => boolean {
  const readme = readFileSync(join(import.meta.dir, "..", "..", "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("### Spend alerts"));
  const code = /```ts\n([\s\S]*?)```/.exec(section)![1]!.replace(/^import .*$/m, "");
  const js = new Bun.Transpiler({ loader: "ts" }).transformSync(code);
  return new Function("createHmac", "timingSafeEqual", `${js}; return verify;`)(createHmac, timingSafeEqual);
}
const readmeVerify = readmeSample();

function resetReceiver() {
  receiver.accepted.length = 0;
  receiver.setRefusing(false);
}

describe("spend_limit.threshold", () => {
  test("a key with a daily limit: 50, then 80 and 100 in one charge, each once, signed", async () => {
    resetReceiver();
    const gw = await gateway();
    try {
      const hold = await holdOfOneRequest(gw);
      const limit = (4 * hold) / 1e6;
      const key = await admin(gw, "POST", `/accounts/${gw.accountId}/keys`, { name: "ci", spend_limit: limit, spend_limit_period: "day" });
      expect(await charge(gw, key.key)).toBe(200); // 25 %
      await Bun.sleep(100);
      expect(receiver.accepted.length).toBe(0);
      expect(await charge(gw, key.key)).toBe(200); // 50 %
      await received(1);
      expect(await charge(gw, key.key)).toBe(200); // 75 %: nothing new
      await Bun.sleep(150);
      expect(receiver.accepted.length).toBe(1);
      expect(await charge(gw, key.key)).toBe(200); // 100 %: 80 and 100 at once
      await received(3);
      expect(receiver.types()).toEqual(["spend_limit.threshold:key:50", "spend_limit.threshold:key:80", "spend_limit.threshold:key:100"]);

      const window = periodWindow("day", Date.now());
      const last = receiver.accepted[2]!;
      expect(last.json).toEqual({
        id: expect.stringMatching(/^evt_[0-9a-f]{32}$/),
        type: "spend_limit.threshold",
        created_at: expect.any(String),
        data: {
          scope: "key", id: key.id, name: "ci", account_id: gw.accountId, threshold: 100, limit,
          spent_in_period: limit, period: "day",
          period_start: new Date(window.start).toISOString(), period_resets_at: new Date(window.resetsAt).toISOString(),
        },
      });
      expect(receiver.accepted[0]!.json.data.spent_in_period).toBe((2 * hold) / 1e6);
      expect(new Set(receiver.accepted.map((a) => a.json.id)).size).toBe(3);

      for (const a of receiver.accepted) {
        expect(a.headers.get("content-type")).toBe("application/json");
        expect(a.headers.get("x-switchyard-event-id")).toBe(a.json.id);
        // The receiver's side: recompute the HMAC of "<t>.<exact body>" with the shared secret.
        const signature = a.headers.get("x-switchyard-signature")!;
        const { t, v1 } = Object.fromEntries(signature.split(",").map((p) => p.split("="))) as { t: string; v1: string };
        expect(Math.abs(Date.now() / 1000 - Number(t))).toBeLessThan(60);
        expect(v1).toBe(createHmac("sha256", SECRET).update(`${t}.${a.body}`).digest("hex"));
        expect(verifySignature(SECRET, a.body, signature, Math.floor(Date.now() / 1000))).toBe(true);
        expect(readmeVerify(SECRET, a.body, signature)).toBe(true);
        expect(readmeVerify(SECRET, a.body + " ", signature)).toBe(false);
        expect(verifySignature("another-secret", a.body, signature, Math.floor(Date.now() / 1000))).toBe(false);
        expect(verifySignature(SECRET, a.body.replace("threshold", "thresholt"), signature, Math.floor(Date.now() / 1000))).toBe(false);
      }

      // Checking everything again (as a start does) queues nothing new.
      await gw.app.services.alerts!.stop();
      gw.app.services.alerts!.start();
      await gw.app.services.alerts!.checked();
      await Bun.sleep(150);
      expect(receiver.accepted.length).toBe(3);
    } finally {
      await gw.stop();
    }
  });

  test("an account with its own daily limit fires each threshold once per day; the next day fires again", async () => {
    resetReceiver();
    let clock = Date.UTC(2026, 10, 27, 15, 0, 0);
    const gw = await gateway({ now: () => clock });
    try {
      const hold = await holdOfOneRequest(gw);
      // The day's spending so far (one request) counts: 5 holds make 100 %.
      await admin(gw, "PATCH", `/accounts/${gw.accountId}`, { spend_limit: (5 * hold) / 1e6, spend_limit_period: "day" });
      await charge(gw, gw.key); // 40 %
      await Bun.sleep(100);
      expect(receiver.accepted.length).toBe(0);
      await charge(gw, gw.key); // 60 %
      await received(1);
      await charge(gw, gw.key); // 80 %
      await received(2);
      await charge(gw, gw.key); // 100 %
      await received(3);
      expect(receiver.types()).toEqual(["spend_limit.threshold:account:50", "spend_limit.threshold:account:80", "spend_limit.threshold:account:100"]);
      expect(receiver.accepted[2]!.json.data).toMatchObject({ scope: "account", id: gw.accountId, name: "test", period: "day", period_start: "2026-11-27T00:00:00.000Z", period_resets_at: "2026-11-28T00:00:00.000Z" });

      // The next day: nothing spent yet, the thresholds are armed again.
      clock += 86_400_000;
      await charge(gw, gw.key); // 20 %
      await Bun.sleep(100);
      expect(receiver.accepted.length).toBe(3);
      await charge(gw, gw.key);
      await charge(gw, gw.key); // 60 %
      await received(4);
      expect(receiver.accepted[3]!.json.data).toMatchObject({ threshold: 50, period_start: "2026-11-28T00:00:00.000Z", period_resets_at: "2026-11-29T00:00:00.000Z" });
      expect(new Set(receiver.accepted.map((a) => a.json.id)).size).toBe(4);
    } finally {
      await gw.stop();
    }
  });
});

describe("balance.low", () => {
  test("once per crossing: a top-up above the threshold re-arms it", async () => {
    resetReceiver();
    const gw = await gateway({ credits: 1, alerts: { ...ALERTS, low_balance: 0.5 } });
    try {
      // Each request costs exactly 0.15 credits (250 output tokens, within its hold).
      const spend = () => charge(gw, gw.key, { completion: 250, maxTokens: 300 });
      for (let i = 0; i < 3; i++) expect(await spend()).toBe(200); // 0.55 left
      await Bun.sleep(100);
      expect(receiver.accepted.length).toBe(0);
      await spend(); // 0.40
      await received(1);
      expect(receiver.accepted[0]!.json).toMatchObject({ type: "balance.low", data: { account_id: gw.accountId, name: "test", balance: 0.4, threshold: 0.5 } });
      await spend(); // 0.25: still the same crossing
      await Bun.sleep(150);
      expect(receiver.accepted.length).toBe(1);

      await admin(gw, "POST", `/accounts/${gw.accountId}/credits`, { amount: 0.5 }); // 0.75
      await spend(); // 0.60
      await Bun.sleep(100);
      expect(receiver.accepted.length).toBe(1);
      await spend(); // 0.45: a new crossing
      await received(2);
      expect(receiver.accepted[1]!.json.data.balance).toBe(0.45);
      expect(receiver.accepted[1]!.json.id).not.toBe(receiver.accepted[0]!.json.id);
    } finally {
      await gw.stop();
    }
  });
});

describe("delivery", () => {
  test("a receiver that answers 503, then is down, gets every event once it is back", async () => {
    resetReceiver();
    // 0.7 credits: two capped requests (~0.06 each) and one of 0.15 take it below 0.5.
    const gw = await gateway({ credits: 0.7, alerts: { ...ALERTS, low_balance: 0.5 } });
    try {
      const hold = await holdOfOneRequest(gw);
      await admin(gw, "PATCH", `/accounts/${gw.accountId}`, { spend_limit: (2 * hold) / 1e6 });
      receiver.setRefusing(true);
      await charge(gw, gw.key); // account at 100 %: 50, 80, 100
      // 1.5 s of refusals and then of refused connections, several retries each (50 ms doubling to 200 ms).
      // Three tries of each of the three events within 700 ms, as soon as they are in (not a fixed 700 ms).
      const refusals = await until("three refused tries of each event", 700, () => receiver.refusedCount() >= 3 * 3 && receiver.refusedCount()).catch(() => receiver.refusedCount());
      expect(refusals).toBeGreaterThanOrEqual(3 * 3);
      await receiver.down();
      // The account's limit is spent: lifted, so the next charge is admitted.
      await admin(gw, "PATCH", `/accounts/${gw.accountId}`, { spend_limit: null });
      await charge(gw, gw.key, { completion: 250, maxTokens: 300 }); // the balance crosses 0.5 (and nothing else is new)
      await Bun.sleep(800);
      expect(receiver.accepted.length).toBe(0);
      receiver.setRefusing(false);
      receiver.up();
      await received(4);
      expect(receiver.types().sort()).toEqual(["balance.low", "spend_limit.threshold:account:100", "spend_limit.threshold:account:50", "spend_limit.threshold:account:80"]);
      expect(new Set(receiver.accepted.map((a) => a.json.id)).size).toBe(4);
      const metrics = await (await fetch(`${gw.url}/metrics`)).text();
      expect(metrics).toContain("switchyard_alerts_queued_total 4");
      expect(metrics).toContain("switchyard_alerts_delivered_total 4");
      expect(Number(/switchyard_alerts_failed_total (\d+)/.exec(metrics)![1])).toBeGreaterThanOrEqual(refusals);
    } finally {
      await gw.stop();
    }
  }, 15_000);
});
