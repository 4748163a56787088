import { afterAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { runAdmin } from "../../src/cli/admin.ts";
import { createRedisRateLimiter } from "../../src/store/redis/redis-rate-limiter.ts";
import { openPostgresStores } from "../../src/store/stores.ts";
import { closedPort, postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, startGateway } from "../helpers/gateway.ts";
import { DAY1, expectedReport, RAW_RECORDS_SQL, rawRecord, runUsageScenario, type RawRecord } from "../helpers/usage-scenario.ts";

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});
const DAY = 86_400_000;

if (missing) {
  test.skip(`Request ids, usage reports and /ready on PostgreSQL and Redis — skipped: ${missing}`, () => {});
} else {
  describe("on PostgreSQL and Redis", () => {
    test("the request id is stored with the PostgreSQL usage record; the usage report and the CLI's agree with the records", async () => {
      const url = await database();
      let clock = DAY1;
      const stores = await openPostgresStores(url, { now: () => clock, ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      const upstream = await startFakeUpstream();
      const gw = await startGateway({ upstreamUrl: upstream.url, stores, adminToken: "admin-secret-0123456789abcdef0123456789abcdef", now: () => clock });
      cleanups.push(async () => {
        await gw.stop();
        await stores.close(500);
        await upstream.stop();
      });

      await runUsageScenario(gw, upstream, (ms) => (clock = ms), "admin-secret-0123456789abcdef0123456789abcdef");
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "pg id" }] }, { "x-request-id": "pg-req-7" });
      const answer = (await res.json()) as { id: string };
      expect(res.headers.get("x-request-id")).toBe("pg-req-7");
      await gw.app.services.settled();

      const sql = new SQL({ url, max: 1 });
      cleanups.push(() => sql.close({ timeout: 0 }));
      const [record] = await sql`SELECT request_id, client_request_id FROM usage_records WHERE request_id = ${`req_${answer.id.slice("chatcmpl-".length)}`}`;
      expect(record).toEqual({ request_id: `req_${answer.id.slice("chatcmpl-".length)}`, client_request_id: "pg-req-7" });

      const raw: RawRecord[] = (await sql.unsafe(RAW_RECORDS_SQL)).map(rawRecord);
      const names: Record<string, string | null> = {};
      for (const r of await sql`SELECT id, name FROM accounts UNION ALL SELECT id, name FROM api_keys`) names[r.id] = r.name;

      const from = DAY1, to = DAY1 + 2 * DAY;
      for (const [groupBy, granularity] of [[["account", "key", "model"], "day"], [["model"], "hour"], [[], "day"]] as const) {
        const report = await fetch(`${gw.url}/v1/admin/usage?from=${from}&to=${to}&group_by=${groupBy.join(",")}&granularity=${granularity}`, { headers: { authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef" } });
        expect(report.status).toBe(200);
        const expected = expectedReport(raw, { from, to, groupBy: [...groupBy], granularity }, names);
        expect(expected.length).toBeGreaterThan(1);
        expect(((await report.json()) as { data: unknown[] }).data).toEqual(expected);
      }
      const csv = await fetch(`${gw.url}/v1/admin/usage?from=${from}&to=${to}&format=csv`, { headers: { authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef" } });
      const cli = await runAdmin(["report", "--from", String(from), "--to", String(to), "--format", "csv"], { SWITCHYARD_DATABASE_URL: url });
      expect(cli.code).toBe(0);
      expect(cli.out).toBe(await csv.text());
      expect(cli.out.split("\r\n")).toHaveLength(2 + expectedReport(raw, { from, to, groupBy: ["account", "key", "model"], granularity: "day" }, names).length);
    });

    test("/ready and the metrics say whether Redis answers; the gateway is not ready without it", async () => {
      const upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const check = async (redisUrl: string, ready: boolean) => {
        const limiter = createRedisRateLimiter(redisUrl, { prefix, connectTimeoutMs: 300 });
        await limiter.ready();
        const gw = await startGateway({ upstreamUrl: upstream.url, limiter });
        try {
          const res = await fetch(`${gw.url}/ready`);
          expect(res.status).toBe(ready ? 200 : 503);
          expect(await res.json()).toMatchObject({ status: ready ? "ready" : "not_ready", rate_limiter: { reachable: ready } });
          const metrics = await (await fetch(`${gw.url}/metrics`)).text();
          expect(metrics).toContain(`\nswitchyard_rate_limiter_reachable ${ready ? 1 : 0}\n`);
        } finally {
          await gw.stop();
          limiter.close();
        }
      };
      await check(REDIS_URL, true);
      await check(`redis://127.0.0.1:${closedPort()}`, false);
    });
  });
}

test("/ready without a shared limiter says nothing about one", async () => {
  const upstream = await startFakeUpstream();
  const gw = await startGateway({ upstreamUrl: upstream.url });
  try {
    const res = await fetch(`${gw.url}/ready`);
    expect(res.status).toBe(200);
    expect(Object.keys((await res.json()) as object)).toEqual(["status", "draining", "ledger"]);
  } finally {
    await gw.stop();
    await upstream.stop();
  }
});
