/**
 * Issue 32 item 4 as operators run it: `SWITCHYARD_WORKERS=2` on PostgreSQL and Redis (the real
 * entry point, `bun src/index.ts`), `limits.max_concurrent_requests: 2` in the config file. The
 * key's cap is one count for both workers: with two streams open, new connections — which the
 * kernel spreads over the workers — are all refused, and once the streams end the key is served
 * again.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();
const dir = mkdtempSync(join(tmpdir(), "switchyard-conc-workers-"));
let gateway: GatewayProcess | undefined;
let upstream: FakeUpstream | undefined;
afterAll(async () => {
  // The supervisor killed, its workers drain and exit on their own (as in workers.test.ts).
  if (gateway && gateway.child.exitCode === null) gateway.child.kill("SIGKILL");
  await gateway?.child.exited;
  await upstream?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const HELD_CHUNK = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"free-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`;

/** The rest of a normal answer, sent when the test lets the held streams go on. */
const FINAL_CHUNKS = [`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"free-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"free-model","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n`, "data: [DONE]\n\n"];

function ask(url: string, key: string, stream: boolean): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    // A new connection each time: the kernel spreads them over the workers.
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", connection: "close" },
    body: JSON.stringify({ model: "fake/free", stream, messages: [{ role: "user", content: "hello" }] }),
  });
}

if (missing) {
  test.skip(`max_concurrent_requests across workers — skipped: ${missing}`, () => {});
} else {
  test("two workers on one Redis hold one cap per key: with two streams open every new request is a 429, after them a 200", async () => {
    upstream = await startFakeUpstream();
    const config = join(dir, "switchyard.json");
    writeFileSync(config, JSON.stringify({
      providers: [{ id: "fake", kind: "openai", base_url: `${upstream.url}/v1` }],
      models: [{ id: "fake/free", provider: "fake", upstream_model: "free-model", category: "free", context_length: 8192 }],
      limits: { requests_per_minute: 100_000, max_concurrent_requests: 2 },
    }));
    gateway = await startGatewayProcess({
      SWITCHYARD_CONFIG: config, SWITCHYARD_WORKERS: "2", SWITCHYARD_DATABASE_URL: await database(),
      SWITCHYARD_REDIS_URL: REDIS_URL, SWITCHYARD_REDIS_PREFIX: prefix.replace(/:$/, "").slice(0, 64), SWITCHYARD_DEMO: "1",
    });
    const { url, key } = gateway;
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [HELD_CHUNK], afterHold: FINAL_CHUNKS });
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [HELD_CHUNK], afterHold: FINAL_CHUNKS });
    const held = [await ask(url, key, true), await ask(url, key, true)];
    expect(held.map((r) => r.status)).toEqual([200, 200]);
    for (let i = 0; i < 2_000 && upstream.openStreams() !== 2; i++) await Bun.sleep(5);
    expect(upstream.openStreams()).toBe(2);

    const refused = await Promise.all(Array.from({ length: 12 }, () => ask(url, key, false)));
    const statuses = await Promise.all(refused.map(async (r) => ({ status: r.status, message: ((await r.json()) as any).error?.message })));
    expect(statuses).toEqual(Array.from({ length: 12 }, () => ({
      status: 429,
      message: "Too many requests at once for this key: at most 2 may be under way (max_concurrent_requests), streams included until they end. Retry when one of them has finished.",
    })));

    upstream.finishHeld();
    // A stream gives its place back as it is settled, before its last frame: read to the end, both are free.
    for (const text of await Promise.all(held.map((r) => r.text()))) expect(text).toEndWith("data: [DONE]\n\n");
    const again = await Promise.all(Array.from({ length: 2 }, () => ask(url, key, false)));
    expect(again.map((r) => r.status)).toEqual([200, 200]);
    await Promise.all(again.map((r) => r.text()));
  });
}
