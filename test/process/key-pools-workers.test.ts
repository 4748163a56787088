import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream, type RecordedRequest } from "../helpers/fake-upstream.ts";
import { startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";
import { OPENAI_MODEL } from "../helpers/gateway.ts";

/**
 * Issue 33 with SWITCHYARD_WORKERS=2 on PostgreSQL and Redis, as users start it: a session's
 * requests, spread over both workers (each on a new connection), carry one vendor key; when that
 * key cools, the one worker that met the 429 tells the other through Redis, so the key is asked
 * exactly once and the session moves, whole, to one other key, where it stays once the first is
 * usable again (the affinity table is shared). A per-process state would ask the cooling key again
 * from the other worker, and send the session back to its first key.
 */

const SECRETS = { WK_KEY_A: "sk-wk-A-SECRET-aaaaaaaaaaaaaaaaaaaa", WK_KEY_B: "sk-wk-B-SECRET-bbbbbbbbbbbbbbbbbbbb", WK_KEY_C: "sk-wk-C-SECRET-cccccccccccccccccccc" };
const ENV_OF = new Map(Object.entries(SECRETS).map(([env, secret]) => [secret, env]));
const keyOf = (req: RecordedRequest) => ENV_OF.get(req.headers.authorization?.replace(/^Bearer /, "") ?? "") ?? "none";
const PROVIDER = "pooled-openai";
const REDIS = REDIS_URL;

const dir = mkdtempSync(join(tmpdir(), "switchyard-pools-"));
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
  rmSync(dir, { recursive: true, force: true });
});

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
// The pools' Redis keys under this file's own prefix (deleted after it), so runs never meet.
const prefix = useRedisPrefix();

if (missing) {
  test.skip(`Key pools across workers — skipped: ${missing}`, () => {});
} else {
  describe("key pools with 2 workers and Redis", () => {
    let upstream: FakeUpstream;
    let gw: GatewayProcess;
    let key: string;

    test("2 workers start with a pool of three keys", async () => {
      upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const url = await database();
      const config = join(dir, "config.json");
      writeFileSync(config, JSON.stringify({
        providers: [{ id: PROVIDER, kind: "openai", base_url: `${upstream.url}/v1`, keys: [{ env: "WK_KEY_A" }, { env: "WK_KEY_B" }, { env: "WK_KEY_C" }] }],
        models: [{ id: OPENAI_MODEL, provider: PROVIDER, upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } }],
        limits: { requests_per_minute: 1_000_000 },
      }));
      // The demo account's key (the helper turns it on) pays for the requests.
      gw = await startGatewayProcess({ ...SECRETS, SWITCHYARD_CONFIG: config, SWITCHYARD_WORKERS: "2", SWITCHYARD_DATABASE_URL: url, SWITCHYARD_REDIS_URL: REDIS, SWITCHYARD_REDIS_PREFIX: prefix, LOG_LEVEL: "debug" });
      key = gw.key;
      cleanups.push(async () => {
        gw.child.kill("SIGTERM");
        await gw.child.exited;
      });
    }, 30_000);

    /** One request of the session, on a new connection (the kernel spreads those over the workers). */
    const ask = async () => {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", connection: "close" },
        body: JSON.stringify({ model: OPENAI_MODEL, prompt_cache_key: "agent-run-1", messages: [{ role: "user", content: "next step" }] }),
      });
      await res.arrayBuffer();
      return res.status;
    };
    const tally = () => {
      const out: Record<string, number> = {};
      for (const r of upstream.requests.filter((x) => x.method === "POST")) out[keyOf(r)] = (out[keyOf(r)] ?? 0) + 1;
      return out;
    };

    test("one session's 50 requests carry one key; when it cools the session moves whole, and stays moved", async () => {
      upstream.reset();
      for (let i = 0; i < 50; i++) expect(await ask()).toBe(200);
      const first = tally();
      expect(Object.values(first)).toEqual([50]);
      const home = Object.keys(first)[0]!;

      upstream.reset();
      let cooling = true;
      upstream.rule((req) => (cooling && keyOf(req) === home ? { kind: "json", status: 429, headers: { "retry-after": "1" }, body: { error: { message: "Rate limit reached", type: "requests" } } } : undefined));
      for (let i = 0; i < 50; i++) expect(await ask()).toBe(200);
      const moved = tally();
      // The cooling key was asked once, by one worker; the other knew from Redis.
      expect(moved[home]).toBe(1);
      const others = Object.entries(moved).filter(([env]) => env !== home);
      expect(others).toHaveLength(1);
      expect(others[0]![1]).toBe(50);
      const next = others[0]![0];

      // The first key is usable again: the session stays where its cache now is, on both workers.
      cooling = false;
      await Bun.sleep(1_100);
      upstream.reset();
      for (let i = 0; i < 20; i++) expect(await ask()).toBe(200);
      expect(tally()).toEqual({ [next]: 20 });
      const ready = await fetch(`${gw.url}/ready`);
      expect(ready.status).toBe(200);
      const seen = [JSON.stringify(await ready.json()), await (await fetch(`${gw.url}/metrics`)).text(), gw.stderr()].join("\n");
      expect(seen).toContain("vendor key");
      expect(seen).toContain(`key="${next}"`);
      for (const secret of Object.values(SECRETS)) expect(seen).not.toContain(secret.slice(0, 12));
    }, 60_000);
  });
}
