import { afterAll, beforeAll, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, OPENAI_PRICING, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { until } from "../helpers/until.ts";

/**
 * A stream whose upstream sent its head and then fails before its first frame (a close right
 * after the head, the idle limit): nothing has reached the client yet (a direct stream's head
 * leaves with its first write), so the attempt fails like an error status, retried or moved to the
 * next model, or a 502 that costs nothing (docs/api.md), not a 200 with an error frame. A raw-TCP
 * upstream, since a Bun.serve one sends no head before its first body bytes.
 */
const healthy = useFakeUpstream();
const RAW_MODEL = "test/raw-stream";
/** The same upstream under an idle limit shorter than keepalive_ms. */
const QUICK_MODEL = "test/raw-stream-quick";
const KEEPALIVE_MS = 600;
const frame = (content: string) =>
  `data: ${JSON.stringify({ id: "chatcmpl-raw", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
const END = `data: ${JSON.stringify({ id: "chatcmpl-raw", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } })}\n\ndata: [DONE]\n\n`;
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/** What the raw upstream does after writing the head (in its own write, so the gateway reads it alone). */
let afterHead: (socket: RawSocket) => void = () => {};
let raw: RawUpstream;
let gw: Gateway;

beforeAll(async () => {
  raw = rawUpstream((_request, socket) => {
    socket.write(HEAD);
    socket.flush();
    setTimeout(() => afterHead(socket), 30);
  });
  gw = await startGateway({
    upstreamUrl: healthy.url,
    credits: 100,
    retry: { max_retries: 0 },
    server: { keepalive_ms: KEEPALIVE_MS },
    extraProviders: [
      { id: "raw", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 } },
      { id: "raw-quick", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 300, total_ms: 60_000 } },
    ],
    extraModels: [
      { id: RAW_MODEL, provider: "raw", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: QUICK_MODEL, provider: "raw-quick", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
    ],
  });
});
afterAll(async () => {
  await gw?.stop();
  raw?.stop();
});

const ask = (models: string[], signal?: AbortSignal) =>
  post(gw, "/v1/chat/completions", { models, messages: [{ role: "user", content: "Hello" }], stream: true, stream_options: { include_usage: true } }, {}, signal);
const records = () => gw.db.query<{ model: string; status: string; cost_micro: number }, []>("SELECT model, status, cost_micro FROM usage_records ORDER BY id").all();

test("an upstream that closes right after its head: the next model answers, and alone it is a 502 that costs nothing", async () => {
  afterHead = (socket) => socket.end();
  const before = records().length;
  const fellBack = await ask([RAW_MODEL, OPENAI_MODEL]);
  expect(fellBack.status).toBe(200);
  const text = await fellBack.text();
  expect(text).toContain(`"model":"${OPENAI_MODEL}"`);
  expect(text).not.toContain("error");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[OPENAI_MODEL, "ok"]]);

  const balance = await gw.balanceMicro();
  const alone = await ask([RAW_MODEL]);
  expect(alone.status).toBe(502);
  expect(((await alone.json()) as any).error.type).toBe("upstream_error");
  expect(await gw.balanceMicro()).toBe(balance);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("an upstream silent after its head past an idle_ms shorter than keepalive_ms: a 502 timeout_error, not a 200 with a timeout frame", async () => {
  afterHead = () => {};
  const balance = await gw.balanceMicro();
  const started = performance.now();
  const res = await ask([QUICK_MODEL]);
  expect(res.status).toBe(502);
  expect(((await res.json()) as any).error.type).toBe("timeout_error");
  expect(performance.now() - started).toBeLessThan(KEEPALIVE_MS);
  expect(await gw.balanceMicro()).toBe(balance);
});

test("a first frame later than keepalive_ms: the client still gets its head and a keep-alive at keepalive_ms, then the answer, charged once", async () => {
  afterHead = (socket) => {
    setTimeout(() => {
      if (socket.data.closed) return;
      socket.write(frame("late"));
      socket.end(END);
    }, 2.5 * KEEPALIVE_MS);
  };
  const before = records().length;
  const started = performance.now();
  const res = await ask([RAW_MODEL]);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const first = await reader.read();
  const firstAt = performance.now() - started;
  expect(new TextDecoder().decode(first.value)).toStartWith(":");
  expect(firstAt).toBeGreaterThanOrEqual(KEEPALIVE_MS - 50);
  expect(firstAt).toBeLessThan(2 * KEEPALIVE_MS);
  let rest = "";
  for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
  expect(rest).toContain('"content":"late"');
  expect(rest).toContain("data: [DONE]");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "ok"]]);
});

test("a client that leaves while the first frame is awaited is let go at once, and pays its prompt (the upstream has it)", async () => {
  afterHead = () => {};
  const before = records().length;
  const balance = await gw.balanceMicro();
  const leave = new AbortController();
  const asked = ask([RAW_MODEL], leave.signal).catch(() => undefined);
  await until("the upstream has the request", 2_000, () => raw.requests.length > 0 && gw.app.services.inflight.count === 1);
  await Bun.sleep(100);
  const left = performance.now();
  leave.abort();
  await asked;
  await until("the request ended", 1_000, () => gw.app.services.inflight.count === 0);
  expect(performance.now() - left).toBeLessThan(KEEPALIVE_MS);
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "cancelled"]]);
  expect(balance - (await gw.balanceMicro())).toBeGreaterThan(0);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});
