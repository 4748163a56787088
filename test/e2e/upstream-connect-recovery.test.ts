import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { createHttp1Client } from "../../src/transport/http1/client.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_PRICING, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { stalledListener, type StalledListener } from "../helpers/stalled-listener.ts";

/**
 * An upstream whose connects stall for a while (its accept queue full, so the kernel drops SYNs)
 * and then comes back. The client's take-over of connects that calls gave up on (transport/http1/
 * client.ts, `connect`) must not keep calls waiting once it is back, and must not leave one socket
 * per call waiting on the kernel while it is down.
 */
const healthy = useFakeUpstream();
const RECOVERING_MODEL = "test/recovering";
const ANSWER = {
  id: "chatcmpl-recovered",
  object: "chat.completion",
  created: 1764540000,
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: "back again" }, logprobs: null, finish_reason: "stop" }],
  usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 },
};
let recovering: StalledListener;
let recoveringBusy: StalledListener;
let stalled: StalledListener;
let gw: Gateway;

beforeAll(async () => {
  recovering = await stalledListener({ answer: ANSWER });
  recoveringBusy = await stalledListener({ answer: ANSWER });
  stalled = await stalledListener();
  gw = await startGateway({
    upstreamUrl: healthy.url,
    retry: { max_retries: 0 },
    extraProviders: [
      { id: "recovering", kind: "openai", base_url: `${recovering.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 1_500, whole_answer_ms: 1_500, idle_ms: 60_000, total_ms: 600_000 } },
    ],
    extraModels: [{ id: RECOVERING_MODEL, provider: "recovering", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING }],
  });
});
afterAll(async () => {
  await gw?.stop();
  await recovering?.stop();
  await recoveringBusy?.stop();
  await stalled?.stop();
});

const question = [{ role: "user", content: "Hello" }];

test.skipIf(!existsSync("/proc/self/fd"))("during an outage, the sockets waiting on the kernel stay bounded: past the origin's limit, calls take over the youngest, and one new connect goes out per adoption age", async () => {
  const adoptAgeMs = 100;
  const client = createHttp1Client({ adoptConnectsYoungerThanMs: adoptAgeMs, maxPendingConnectsPerOrigin: 8 });
  const descriptors = () => readdirSync("/proc/self/fd").length;
  const call = () =>
    client.fetch(`${stalled.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}", signal: AbortSignal.timeout(60) }).catch((e) => e);
  try {
    // First in the file: later tests' connects, closed as their upstream comes back, would move the count.
    const before = descriptors();
    const started = performance.now();
    // Twenty callers at once, fifteen times: each round's connects are too old for the next, but
    // the origin has more under way than its limit, so they are taken over.
    for (let round = 0; round < 15; round++) {
      for (const error of await Promise.all(Array.from({ length: 20 }, call))) expect((error as Error).name).toBe("TimeoutError");
    }
    const periods = Math.ceil((performance.now() - started) / adoptAgeMs);
    const grown = descriptors() - before;
    // As many as the callers waiting at once, and one more per adoption age; without the limit, twenty a round.
    expect(grown).toBeGreaterThanOrEqual(20);
    expect(grown).toBeLessThanOrEqual(20 + periods + 2);
  } finally {
    client.close();
  }
});

// The two outages below run side by side (test.concurrent: after the test above, which counts
// descriptors alone): each must last past the kernel's first SYN retries, 7.5 s, and neither needs
// the other's to be over. They share nothing but the event loop: their own upstreams (each its own
// stalled process and port) and their own clients (the gateway's, and one made here).
test.concurrent("after an outage of several seconds, the first request once the upstream is back gets its answer within about a second, as a new client does", async () => {
  // Requests one after another for 7.5 s, each given up at first_byte_ms: the connect the first one
  // opened is then past the kernel's 1 s retransmissions (its next SYN is 3.5 s away).
  const outageStarted = performance.now();
  while (performance.now() - outageStarted < 7_500) {
    const res = await post(gw, "/v1/chat/completions", { model: RECOVERING_MODEL, messages: question });
    expect(res.status).toBe(502);
    await res.arrayBuffer();
  }
  await recovering.recover();
  const back = performance.now();
  const [fresh, res] = await Promise.all([
    fetch(`${recovering.url}/v1/chat/completions`, { method: "POST", body: "{}" }).then(async (r) => ({ status: r.status, ms: performance.now() - back, body: await r.text() })),
    post(gw, "/v1/chat/completions", { model: RECOVERING_MODEL, messages: question }),
  ]);
  const gatewayMs = performance.now() - back;
  expect(fresh.status).toBe(200);
  expect(fresh.ms).toBeLessThan(500);
  expect(res.status).toBe(200);
  expect(((await res.json()) as any).choices[0].message.content).toBe("back again");
  // A young connect's next SYN is at most a second away; the first one's, 3.5 s.
  expect(gatewayMs).toBeLessThan(2_000);
  await gw.app.services.settled();
  expect(gw.app.services.ledger.openHolds()).toBe(0);
}, 20_000);

test.concurrent("more callers at once than the origin's connect limit: once the upstream is back, every one of them gets its answer within about a second", async () => {
  const client = createHttp1Client({ maxPendingConnectsPerOrigin: 4 });
  const call = (timeoutMs: number) =>
    client.fetch(`${recoveringBusy.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}", signal: AbortSignal.timeout(timeoutMs) }).then(
      async (res) => res.status,
      (e: Error) => e.name,
    );
  try {
    // Eight callers at once, each giving up after a second, for 7.5 s: past the limit of 4, they
    // take over old connects, whose next SYN is seconds away by the time the upstream is back.
    const outageStarted = performance.now();
    while (performance.now() - outageStarted < 7_500) {
      for (const outcome of await Promise.all(Array.from({ length: 8 }, () => call(1_000)))) expect(outcome).toBe("TimeoutError");
    }
    await recoveringBusy.recover();
    const back = performance.now();
    expect(await Promise.all(Array.from({ length: 8 }, () => call(3_000)))).toEqual(Array(8).fill(200));
    expect(performance.now() - back).toBeLessThan(2_000);
  } finally {
    client.close();
  }
}, 20_000);
