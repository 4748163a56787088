/**
 * Spend limits by period (issue 29), on the real app in front of the fake upstream, once on
 * SQLite and once on PostgreSQL: a key's and an account's limit count what was charged in the
 * current UTC day, week or month plus what is held; past it the answer is a 402 that names the
 * limit, the period and when it resets; periods roll over at UTC boundaries (an injected clock);
 * 200 concurrent requests near a limit never pass it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { periodWindow, spentInPeriod, chargeBudget, type SpendBudget } from "../../src/billing/spend-period.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";

const ADMIN = "spend-limit-tests-admin-token-0123456789";

describe("UTC periods (pure)", () => {
  const at = (iso: string) => Date.parse(iso);
  test("days start at 00:00 UTC, weeks on Monday, months on the 1st", () => {
    expect(periodWindow("day", at("2026-03-02T23:59:59.999Z"))).toEqual({ start: at("2026-03-02T00:00:00Z"), resetsAt: at("2026-03-03T00:00:00Z") });
    // 2026-03-08 is a Sunday: its week began on Monday the 2nd.
    expect(periodWindow("week", at("2026-03-08T12:00:00Z"))).toEqual({ start: at("2026-03-02T00:00:00Z"), resetsAt: at("2026-03-09T00:00:00Z") });
    expect(periodWindow("week", at("2026-03-09T00:00:00Z")).start).toBe(at("2026-03-09T00:00:00Z"));
    expect(periodWindow("month", at("2028-02-29T23:00:00Z"))).toEqual({ start: at("2028-02-01T00:00:00Z"), resetsAt: at("2028-03-01T00:00:00Z") });
    expect(periodWindow("month", at("2026-12-31T23:59:59Z")).resetsAt).toBe(at("2027-01-01T00:00:00Z"));
  });
  test("a count belongs to its window: it stops counting when the period rolls over, and a charge then starts the new one", () => {
    const b: SpendBudget = { limitMicro: 10, period: "day", periodSpentMicro: 0, periodStart: 0 };
    chargeBudget(b, 4, at("2026-03-02T23:00:00Z"));
    chargeBudget(b, 3, at("2026-03-02T23:30:00Z"));
    expect(spentInPeriod(b, at("2026-03-02T23:59:00Z"))).toBe(7);
    expect(spentInPeriod(b, at("2026-03-03T00:00:00Z"))).toBe(0);
    chargeBudget(b, 2, at("2026-03-03T00:00:01Z"));
    expect(b).toMatchObject({ periodSpentMicro: 2, periodStart: at("2026-03-03T00:00:00Z") });
    const lifetime: SpendBudget = { limitMicro: 10, period: null, periodSpentMicro: 5, periodStart: 0 };
    chargeBudget(lifetime, 1, at("2030-01-01T00:00:00Z"));
    expect(spentInPeriod(lifetime, at("2031-01-01T00:00:00Z"))).toBe(6);
  });
});

interface Backend {
  gw: Gateway;
  stop(): Promise<void>;
}

function limitSuite(name: string, start: (upstreamUrl: string, now: () => number) => Promise<Backend>): void {
  describe(`spend limits by period: ${name}`, () => {
    let upstream: FakeUpstream;
    let backend: Backend;
    let gw: Gateway;
    let clock = Date.parse("2026-03-02T22:00:00Z");
    beforeAll(async () => {
      upstream = await startFakeUpstream();
      backend = await start(upstream.url, () => clock);
      gw = backend.gw;
    });
    afterAll(async () => {
      await backend?.stop();
      await upstream?.stop();
    });

    const admin = async (method: string, path: string, body?: unknown): Promise<any> => {
      const res = await fetch(gw.url + path, {
        method,
        headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
      return JSON.parse(text);
    };
    /** A small paid request: its hold (about 0.007 credits) and charge (about 0.005) are far below the limits used here. */
    const ask = (key: string) => fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hello there" }] }),
    });
    /** Asks one after another, each settled, until refused; answers how many passed and the refusal. */
    const spendDown = async (key: string) => {
      for (let passed = 0; passed < 500; passed++) {
        const res = await ask(key);
        const body = (await res.json()) as any;
        await gw.app.services.settled();
        if (res.status !== 200) {
          expect(res.status).toBe(402);
          return { passed, message: body.error.message as string, type: body.error.type as string };
        }
      }
      throw new Error("never refused");
    };
    const spentOnKey = async (accountId: string, keyId: string) =>
      ((await admin("GET", `/v1/admin/accounts/${accountId}/keys`)).data as any[]).find((k) => k.id === keyId).spent_in_period as number;

    test("a daily key limit: charges pass up to it, then 402 naming the limit, the period and the reset; at 00:00 UTC it rolls over", async () => {
      clock = Date.parse("2026-03-02T22:00:00Z");
      const acct = await admin("POST", "/v1/admin/accounts", { name: "daily", credits: 100 });
      const key = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { name: "k", spend_limit: 0.03, spend_limit_period: "day" });
      const first = await spendDown(key.key);
      expect(first.passed).toBeGreaterThan(0);
      expect(first.type).toBe("insufficient_quota");
      expect(first.message).toContain("this key's daily spend limit of 0.03 credits");
      expect(first.message).toContain("it resets at 2026-03-03T00:00:00.000Z");
      expect(await spentOnKey(acct.id, key.id)).toBeLessThanOrEqual(0.03);

      // Still the same day: refused. One millisecond into the next: a new period.
      clock = Date.parse("2026-03-02T23:59:59.999Z");
      expect((await ask(key.key)).status).toBe(402);
      clock = Date.parse("2026-03-03T00:00:00.000Z");
      const second = await spendDown(key.key);
      expect(second.passed).toBe(first.passed);
      expect(second.message).toContain("it resets at 2026-03-04T00:00:00.000Z");
      const info = await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${key.key}` } })).json() as any;
      expect(info.key).toMatchObject({ spend_limit: 0.03, spend_limit_period: "day", period_resets_at: "2026-03-04T00:00:00.000Z" });
      expect(info.key.spent_in_period).toBeLessThanOrEqual(0.03);
      // Refused only when what is left is less than the request's hold (the most it may cost, which the message names).
      const hold = Number(/may cost up to ([\d.]+) credits/.exec(second.message)![1]);
      expect(info.key.spent_in_period + hold).toBeGreaterThan(0.03);
    });

    test("an account's own monthly limit binds all its keys together, and rolls over on the 1st", async () => {
      clock = Date.parse("2026-03-31T20:00:00Z");
      const acct = await admin("POST", "/v1/admin/accounts", { name: "monthly", credits: 100 });
      await admin("PATCH", `/v1/admin/accounts/${acct.id}`, { spend_limit: 0.04, spend_limit_period: "month" });
      const a = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { name: "a" });
      const b = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { name: "b" });
      for (let i = 0; i < 3; i++) {
        expect((await ask(a.key)).status).toBe(200);
        await gw.app.services.settled();
      }
      const refused = await spendDown(b.key);
      expect(refused.message).toContain("the account's monthly spend limit of 0.04 credits");
      expect(refused.message).toContain("it resets at 2026-04-01T00:00:00.000Z");
      const shown = await admin("GET", `/v1/admin/accounts/${acct.id}`);
      expect(shown.spent_in_period).toBeLessThanOrEqual(0.04);
      clock = Date.parse("2026-04-01T00:00:00.000Z");
      expect((await ask(a.key)).status).toBe(200);
      await gw.app.services.settled();
    });

    test("200 concurrent requests near a key's limit and an account's limit never pass either", async () => {
      clock = Date.parse("2026-05-05T12:00:00Z");
      const acct = await admin("POST", "/v1/admin/accounts", { name: "burst", credits: 100 });
      const key = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { name: "k", spend_limit: 0.1, spend_limit_period: "week" });
      const answers = await Promise.all(Array.from({ length: 200 }, async () => {
        const res = await ask(key.key);
        await res.arrayBuffer();
        return res.status;
      }));
      await gw.app.services.settled();
      expect(answers.filter((s) => s === 200).length).toBeGreaterThan(0);
      expect(answers.filter((s) => s !== 200 && s !== 402)).toEqual([]);
      expect(answers.filter((s) => s === 402).length).toBeGreaterThan(0);
      expect(await spentOnKey(acct.id, key.id)).toBeLessThanOrEqual(0.1);

      const other = await admin("POST", "/v1/admin/accounts", { name: "burst-account", credits: 100 });
      await admin("PATCH", `/v1/admin/accounts/${other.id}`, { spend_limit: 0.1, spend_limit_period: "day" });
      const keys = await Promise.all(["x", "y", "z"].map((n) => admin("POST", `/v1/admin/accounts/${other.id}/keys`, { name: n })));
      const statuses = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
        const res = await ask(keys[i % 3].key);
        await res.arrayBuffer();
        return res.status;
      }));
      await gw.app.services.settled();
      expect(statuses.filter((s) => s !== 200 && s !== 402)).toEqual([]);
      expect(statuses.filter((s) => s === 402).length).toBeGreaterThan(0);
      const shown = await admin("GET", `/v1/admin/accounts/${other.id}`);
      expect(shown.spent_in_period).toBeLessThanOrEqual(0.1);
      expect(shown.spent_in_period).toBeGreaterThan(0);
    });
  });
}

limitSuite("SQLite", async (upstreamUrl, now) => {
  const gw = await startGateway({ upstreamUrl, adminToken: ADMIN, now });
  return { gw, stop: () => gw.stop() };
});

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`spend limits by period on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  limitSuite("PostgreSQL", async (upstreamUrl, now) => {
    // The default statement bound (2 s), not a shorter one: 200 reservations on one key's row queue
    // behind each other, and on a loaded CI machine some waited past 1 s and were answered 503.
    const stores: SharedStores = await openPostgresStores(await database(), { now, ledger: { retryMaxMs: 40 } });
    const gw = await startGateway({ upstreamUrl, adminToken: ADMIN, stores, now });
    return {
      gw,
      async stop() {
        await gw.stop();
        await stores.close(500);
      },
    };
  });
}
