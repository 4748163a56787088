/**
 * Issue 32, item 1, as users run it: `SWITCHYARD_WORKERS=2` on PostgreSQL + Redis, and a second
 * gateway process on the same PostgreSQL and Redis (another host). Every follow-up by
 * `previous_response_id` goes over a new connection, so the kernel spreads them over the workers
 * (before the shared store, 8 of 20 landed on the worker that did not hold the answer); 20 of 20
 * must carry the earlier turns to the upstream, on either worker and on either gateway.
 */
import { RedisClient } from "bun";
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess, type GatewayProcess, killGatewayProcesses } from "../helpers/gateway-process.ts";
import { FREE_MODEL } from "../helpers/gateway.ts";

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();
const dir = mkdtempSync(join(tmpdir(), "switchyard-stored-responses-"));
const children: GatewayProcess[] = [];
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  await killGatewayProcesses(children);
  for (const fn of cleanups.reverse()) await fn();
  rmSync(dir, { recursive: true, force: true });
});

/** One Responses request over a connection of its own (so the next may reach the other worker). */
async function respond(url: string, key: string, body: Record<string, unknown>): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", connection: "close" },
    body: JSON.stringify({ model: FREE_MODEL, ...body }),
  });
  return { status: res.status, body: await res.json() };
}

if (missing) {
  test.skip(`stored responses across workers and gateways — skipped: ${missing}`, () => {});
} else {
  describe("stored responses shared through Redis, as real processes", () => {
    let upstream: FakeUpstream;
    let stores: SharedStores;
    let workers: GatewayProcess;
    let second: GatewayProcess;
    let key: string;

    test("2 workers and a second gateway start on one PostgreSQL and one Redis", async () => {
      upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const url = await database();
      stores = await openPostgresStores(url, { pool: { max: 2 } });
      cleanups.push(() => stores.close(500));
      const account = await stores.accounts.createAccount("conversations", 1_000_000_000);
      key = (await stores.accounts.createKey(account.id, { name: "test" }))!.key;
      const config = join(dir, "config.json");
      writeFileSync(config, JSON.stringify({
        providers: [{ id: "fake-openai", kind: "openai", base_url: `${upstream.url}/v1` }],
        models: [{ id: FREE_MODEL, provider: "fake-openai", upstream_model: "free-model", category: "free", context_length: 128_000 }],
        limits: { requests_per_minute: 1_000_000 },
      }));
      const common = { SWITCHYARD_CONFIG: config, SWITCHYARD_DATABASE_URL: url, SWITCHYARD_REDIS_URL: REDIS_URL, SWITCHYARD_REDIS_PREFIX: prefix };
      workers = await startGatewayProcess({ ...common, SWITCHYARD_WORKERS: "2", LOG_LEVEL: "info" });
      children.push(workers);
      second = await startGatewayProcess(common);
      children.push(second);
      // Both workers serve: the supervisor logged two pids.
      for (let i = 0; i < 100 && !workers.stderr().includes('"workers listening"'); i++) await Bun.sleep(50);
      const listening = workers.stderr().split("\n").find((l) => l.includes('"workers listening"'));
      expect(JSON.parse(listening!).pids).toHaveLength(2);
    }, 30_000);

    test("20 of 20 follow-ups by previous_response_id succeed across the 2 workers, each carrying every earlier turn", async () => {
      let previous = (await respond(workers.url, key, { input: "turn 0" })).body.id as string;
      const served = new Set<string>();
      for (let n = 1; n <= 20; n++) {
        const { status, body } = await respond(workers.url, key, { input: `turn ${n}`, previous_response_id: previous });
        expect({ n, status }).toEqual({ n, status: 200 });
        // Quoted: "turn 1" is not found inside "turn 12", nor inside the echo "Echo: turn 1".
        const sent = JSON.stringify(upstream.requests.at(-1)!.body);
        for (let earlier = 0; earlier <= n; earlier++) expect({ n, earlier, sent: sent.includes(`"turn ${earlier}"`) }).toEqual({ n, earlier, sent: true });
        previous = body.id;
        served.add(body.id);
      }
      expect(served.size).toBe(20);
    }, 60_000);

    test("20 of 20 follow-ups succeed alternating between the two gateways, and either reads back or deletes what the other stored", async () => {
      const gateways = [workers, second];
      let previous = (await respond(second.url, key, { input: "start" })).body.id as string;
      for (let n = 1; n <= 20; n++) {
        const { status, body } = await respond(gateways[n % 2]!.url, key, { input: `step ${n}`, previous_response_id: previous });
        expect({ n, status }).toEqual({ n, status: 200 });
        expect(JSON.stringify(upstream.requests.at(-1)!.body)).toContain("start");
        previous = body.id;
      }
      const read = await fetch(`${second.url}/v1/responses/${previous}`, { headers: { authorization: `Bearer ${key}` } });
      expect(read.status).toBe(200);
      expect(((await read.json()) as { id: string }).id).toBe(previous);
      const deleted = await fetch(`${second.url}/v1/responses/${previous}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
      expect(deleted.status).toBe(200);
      expect((await fetch(`${workers.url}/v1/responses/${previous}`, { headers: { authorization: `Bearer ${key}`, connection: "close" } })).status).toBe(404);
    }, 60_000);

    test("the answers are in Redis under SWITCHYARD_REDIS_PREFIX, and nowhere else in it", async () => {
      const client = new RedisClient(REDIS_URL);
      const keys = async (pattern: string) => {
        const found: string[] = [];
        let cursor = "0";
        do {
          const [next, batch] = (await client.send("SCAN", [cursor, "MATCH", pattern, "COUNT", "1000"])) as [string, string[]];
          found.push(...batch);
          cursor = next;
        } while (cursor !== "0");
        return found;
      };
      try {
        const ours = await keys(`${prefix}resp:a:*`);
        expect(ours.length).toBeGreaterThan(0);
        const unprefixed = await keys("switchyard:resp:a:*");
        const account = ours[0]!.slice(`${prefix}resp:a:`.length).split(":")[0]!;
        expect(unprefixed.filter((k) => k.includes(account))).toEqual([]);
      } finally {
        client.close();
      }
    });
  });
}
