import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { createHttp1Client } from "../../src/transport/http1/client.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, OPENAI_PRICING, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { stalledListener, type StalledListener } from "../helpers/stalled-listener.ts";
import { until } from "../helpers/until.ts";

/**
 * An upstream whose connects never complete (a firewall dropping SYNs, a host gone from the
 * network): the attempt's limits, the client's leaving and the gateway's stop end the call at
 * once, not when the kernel gives up on the connect two minutes later.
 */
const healthy = useFakeUpstream();
let stalled: StalledListener;
let gw: Gateway;
const STALLED_MODEL = "test/stalled";
/** The same upstream under a first-byte limit of a minute: only the client's leaving ends its calls. */
const PATIENT_MODEL = "test/stalled-patient";

beforeAll(async () => {
  stalled = await stalledListener();
  gw = await startGateway({
    upstreamUrl: healthy.url,
    retry: { max_retries: 0 },
    extraProviders: [
      { id: "stalled", kind: "openai", base_url: `${stalled.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 300, whole_answer_ms: 300, idle_ms: 60_000, total_ms: 600_000 } },
      { id: "stalled-patient", kind: "openai", base_url: `${stalled.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 60_000, whole_answer_ms: 60_000, idle_ms: 60_000, total_ms: 600_000 } },
    ],
    extraModels: [
      { id: STALLED_MODEL, provider: "stalled", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: PATIENT_MODEL, provider: "stalled-patient", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
    ],
  });
});
afterAll(async () => {
  await gw?.stop();
  await stalled?.stop();
});

const question = [{ role: "user", content: "Hello" }];

test("first_byte_ms ends a connect that never completes, and the next model in `models` answers", async () => {
  for (const stream of [false, true]) {
    const started = performance.now();
    const res = await post(gw, "/v1/chat/completions", { models: [STALLED_MODEL, OPENAI_MODEL], messages: question, stream });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain(OPENAI_MODEL);
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(5_000);
  }
  await gw.app.services.settled();
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("alone, it is a 502 timeout at first_byte_ms; nothing is charged", async () => {
  const before = await gw.balanceMicro();
  const res = await post(gw, "/v1/chat/completions", { model: STALLED_MODEL, messages: question });
  expect(res.status).toBe(502);
  expect(((await res.json()) as any).error.type).toBe("timeout_error");
  expect(await gw.balanceMicro()).toBe(before);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
  expect(gw.app.services.inflight.count).toBe(0);
});

test("a client that leaves while the connect waits frees its hold and its place at once, and pays nothing", async () => {
  const before = await gw.balanceMicro();
  const controller = new AbortController();
  const pending = post(gw, "/v1/chat/completions", { model: PATIENT_MODEL, messages: question, stream: true }, {}, controller.signal).catch(() => undefined);
  await until("the request under way", 1_000, () => gw.app.services.inflight.count === 1);
  await Bun.sleep(100);
  controller.abort();
  await pending;
  await until("the request ended", 1_000, () => gw.app.services.inflight.count === 0);
  await gw.app.services.settled();
  expect(gw.app.services.ledger.openHolds()).toBe(0);
  expect(await gw.balanceMicro()).toBe(before);
});

test("the transport: a call's abort and the client's cut end a connect that never completes", async () => {
  const client = createHttp1Client();
  try {
    const send = (signal?: AbortSignal) => client.fetch(`${stalled.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}", signal });
    const controller = new AbortController();
    const aborted = send(controller.signal);
    const waiting = send();
    await Bun.sleep(50);
    const reason = new DOMException("client disconnected", "AbortError");
    controller.abort(reason);
    expect(await Promise.race([aborted.catch((e) => e), Bun.sleep(1_000).then(() => "still connecting")])).toBe(reason);
    const cut = new Error("the gateway is shutting down");
    client.cut(cut);
    expect(await Promise.race([waiting.catch((e) => e), Bun.sleep(1_000).then(() => "still connecting")])).toBe(cut);
    await until("no connection left open", 1_000, () => client.openConnections() === 0);
  } finally {
    client.close();
  }
});

test.skipIf(!existsSync("/proc/self/fd"))("calls that give up leave their connects to the next calls: the sockets waiting on the kernel are as many as the calls waiting at once, not one per call", async () => {
  const client = createHttp1Client();
  const descriptors = () => readdirSync("/proc/self/fd").length;
  try {
    const round = () => Promise.all(Array.from({ length: 20 }, () =>
      client.fetch(`${stalled.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}", signal: AbortSignal.timeout(100) }).catch((e) => e)));
    for (const error of await round()) expect((error as Error).name).toBe("TimeoutError");
    const after = descriptors();
    // Four more rounds: one call a connect before each took them over, so no more sockets wait.
    for (let i = 0; i < 4; i++) await round();
    expect(descriptors() - after).toBeLessThan(10);
  } finally {
    client.close();
  }
});
