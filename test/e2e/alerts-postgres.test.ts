import { afterAll, expect, test } from "bun:test";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, startGateway } from "../helpers/gateway.ts";
import { startAlertReceiver, waitFor } from "../helpers/alert-receiver.ts";
import { openPostgresStores } from "../../src/store/stores.ts";
import { connectPostgres } from "../../src/store/postgres/pg-client.ts";
import { createPostgresAlertOutbox } from "../../src/store/postgres/pg-alert-outbox.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";

const missing = await postgresMissing();
const database = useTestDatabase();
const upstream = useFakeUpstream();
const receiver = startAlertReceiver();
afterAll(() => receiver.stop());

function answer(completion: number) {
  upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 0, completion_tokens: completion, total_tokens: completion } } });
}

if (missing) {
  test.skip(`spend alerts on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  test("PostgreSQL: the outbox queues once per crossing, survives a refusing receiver, and delivers", async () => {
    const url = await database();
    const stores = await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const gw = await startGateway({ upstreamUrl: upstream.url, stores, credits: 1, alerts: { webhook_url: receiver.url, low_balance: 0.5, retry_initial_ms: 50, retry_max_ms: 200 }, alertSecret: "whsec-pg" });
    try {
      receiver.setRefusing(true);
      // 0.15 credits a request (250 output tokens at 600 per million), each within its hold.
      for (let i = 0; i < 5; i++) {
        answer(250);
        const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 300, messages: [{ role: "user", content: "Hi" }] }) });
        expect(res.status).toBe(200);
        await res.text();
        await gw.app.services.settled();
        await gw.app.services.alerts!.checked();
      }
      // 0.25 left: one crossing (at 0.40), however many checks saw the balance below 0.5.
      await waitFor("refused twice", () => receiver.refusedCount() >= 2);
      receiver.setRefusing(false);
      await waitFor("delivered", () => receiver.accepted.length >= 1);
      await Bun.sleep(300);
      expect(receiver.accepted.length).toBe(1);
      expect(receiver.accepted[0]!.json).toMatchObject({ type: "balance.low", data: { account_id: gw.accountId, balance: 0.4, threshold: 0.5 } });
      const rows = await stores.sql`SELECT event_id, attempts, delivered_at FROM alert_outbox`;
      expect(rows.length).toBe(1);
      expect(rows[0].event_id).toBe(receiver.accepted[0]!.json.id);
      expect(rows[0].delivered_at).not.toBeNull();
      expect(Number(rows[0].attempts)).toBeGreaterThanOrEqual(3);
    } finally {
      await gw.stop();
      await stores.close(500);
    }
  }, 20_000);

  test("PostgreSQL: processes claiming at once never take the same row (FOR UPDATE SKIP LOCKED and a lease)", async () => {
    const url = await database();
    const pools = [connectPostgres(url), connectPostgres(url), connectPostgres(url)];
    try {
      await migratePostgres(pools[0]!);
      const outboxes = pools.map((sql) => createPostgresAlertOutbox(sql));
      const events = Array.from({ length: 60 }, (_, i) => ({ eventId: `evt_claim_${i}`, dedupeKey: `claim:${i}`, type: "test", body: `{"n":${i}}`, createdAt: 1 }));
      expect(await outboxes[0]!.add(events)).toBe(60);
      expect(await outboxes[1]!.add(events.slice(0, 10))).toBe(0);
      const claimed = (await Promise.all(outboxes.flatMap((o) => [o.claim(8, 60_000), o.claim(8, 60_000), o.claim(8, 60_000)]))).flat();
      const ids = claimed.map((r) => r.eventId).filter((id) => id.startsWith("evt_claim_"));
      expect(new Set(ids).size).toBe(ids.length);
      // Leased rows are not due again until the lease ends.
      const rest = (await Promise.all(outboxes.map((o) => o.claim(100, 60_000)))).flat().filter((r) => r.eventId.startsWith("evt_claim_"));
      expect(ids.length + rest.length).toBe(60);
      expect(new Set([...ids, ...rest.map((r) => r.eventId)]).size).toBe(60);
    } finally {
      await Promise.all(pools.map((sql) => sql.close({ timeout: 1 })));
    }
  });
}
