import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { Counter, Dimension, Gauge, Histogram, Registry } from "../../src/ops/metrics.ts";
import { OpsConfigError, opsSettings } from "../../src/config/ops-settings.ts";
import { createGatewayMetrics } from "../../src/ops/gateway-metrics.ts";
import { readFileSync } from "node:fs";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { openRedisLimiter } from "../../src/store/stores.ts";

/** `name{labels}` → value, from Prometheus' text format (comments skipped). */
function parseExposition(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    samples.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return samples;
}

async function scrape(gw: Gateway, headers: Record<string, string> = {}): Promise<Map<string, number>> {
  const res = await fetch(`${gw.url}/metrics`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain; version=0.0.4");
  return parseExposition(await res.text());
}

describe("the registry (pure)", () => {
  test("counters, gauges and histograms in the text format; labels escaped; unknown values count as other", () => {
    const registry = new Registry();
    const model = new Dimension("model", ["a/b", 'we"ird\\', "other"]);
    const status = new Dimension("status", ["200", "500"]);
    const c = registry.add(new Counter("x_total", "Things.", [model, status]));
    c.inc(1, model.indexOf("a/b"), 0);
    c.inc(2, model.indexOf("a/b"), 0);
    c.inc(1, model.indexOf('we"ird\\'), 1);
    c.inc(5, model.indexOf("client-chosen-name"), 1);
    registry.add(new Gauge("g", "A gauge.", () => 7));
    const h = registry.add(new Histogram("h_seconds", "Durations.", [0.1, 1], [status]));
    for (const v of [0.05, 0.1, 0.5, 3]) h.observe(v, 1);
    expect(registry.expose()).toBe([
      "# HELP x_total Things.",
      "# TYPE x_total counter",
      'x_total{model="a/b",status="200"} 3',
      'x_total{model="we\\"ird\\\\",status="500"} 1',
      'x_total{model="other",status="500"} 5',
      "# HELP g A gauge.",
      "# TYPE g gauge",
      "g 7",
      "# HELP h_seconds Durations.",
      "# TYPE h_seconds histogram",
      'h_seconds_bucket{status="500",le="0.1"} 2',
      'h_seconds_bucket{status="500",le="1"} 3',
      'h_seconds_bucket{status="500",le="+Inf"} 4',
      'h_seconds_sum{status="500"} 3.65',
      'h_seconds_count{status="500"} 4',
      "",
    ].join("\n"));
  });

  test("settings from the environment", () => {
    expect(opsSettings({})).toEqual({ metrics: true, metricsToken: undefined, accessLog: { enabled: true, sample: 1, level: "info", logLevel: "info" }, console: true });
    expect(opsSettings({ SWITCHYARD_METRICS: "off", SWITCHYARD_METRICS_TOKEN: "t-0123456789abcdef0123456789abcdef", SWITCHYARD_ACCESS_LOG: "off", SWITCHYARD_ACCESS_LOG_SAMPLE: "0.25", SWITCHYARD_ACCESS_LOG_LEVEL: "debug", LOG_LEVEL: "warn", SWITCHYARD_CONSOLE: "off" }))
      .toEqual({ metrics: false, metricsToken: "t-0123456789abcdef0123456789abcdef", accessLog: { enabled: false, sample: 0.25, level: "debug", logLevel: "warn" }, console: false });
    expect(() => opsSettings({ SWITCHYARD_CONSOLE: "maybe" })).toThrow(OpsConfigError);
    expect(() => opsSettings({ SWITCHYARD_ACCESS_LOG_SAMPLE: "2" })).toThrow(OpsConfigError);
    expect(() => opsSettings({ SWITCHYARD_METRICS: "maybe" })).toThrow(OpsConfigError);
    expect(() => opsSettings({ SWITCHYARD_ACCESS_LOG_LEVEL: "loud" })).toThrow(OpsConfigError);
  });
});

test("the Grafana dashboard (deploy/grafana/switchyard.json) only uses metrics the gateway exposes", () => {
  const dashboard = JSON.parse(readFileSync(new URL("../../deploy/grafana/switchyard.json", import.meta.url), "utf8"));
  const exprs: string[] = dashboard.panels.flatMap((p: { targets?: { expr: string }[] }) => (p.targets ?? []).map((t) => t.expr));
  expect(exprs.length).toBeGreaterThan(15);
  const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:switchyard|process)_[a-z_]+)/g)].map((m) => m[1]!.replace(/_(bucket|sum|count)$/, ""))));
  const metrics = createGatewayMetrics({ routes: [], models: [], providers: [], ledger: { health: () => ({ writable: true, queued: 0, maxQueued: 1 }) }, limiter: { health: () => ({ reachable: true }) }, inflight: { count: 0 }, now: Date.now });
  const exposed = new Set([...metrics.expose().matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]!));
  for (const name of used) expect([name, exposed.has(name)]).toEqual([name, true]);
  // Every family has a panel.
  for (const name of exposed) expect([name, used.has(name)]).toEqual([name, true]);
});

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: "admin-secret-0123456789abcdef0123456789abcdef", retry: { max_retries: 1, max_wait_ms: 1_000 } }));
const hi = [{ role: "user", content: "Hello metrics" }];

describe("GET /metrics after a scripted set of requests", () => {
  test("requests, latencies, tokens, credits, retries, fallbacks, upstream errors, rejections and the ledger, counted exactly", async () => {
    const chat = "/v1/chat/completions";
    // 2 answers, 1 stream (OpenAI), 1 stream (Anthropic format, translated from nothing: same format).
    for (let i = 0; i < 2; i++) expect((await post(gw, chat, { model: OPENAI_MODEL, messages: hi })).status).toBe(200);
    const stream = await post(gw, chat, { model: OPENAI_MODEL, messages: hi, stream: true, stream_options: { include_usage: true } });
    await stream.text();
    const messages = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: hi, stream: true });
    await messages.text();
    // A retry (429, then an answer) and a fallback (500 on the first model, the second answers).
    upstream.reply({ kind: "json", status: 429, headers: { "retry-after-ms": "5" }, body: { error: { message: "slow down", type: "rate_limit" } } });
    expect((await post(gw, chat, { model: OPENAI_MODEL, messages: hi })).status).toBe(200);
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
    expect((await post(gw, chat, { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: hi })).status).toBe(200);
    // Refusals: an unknown model, no key, a rate limit, no credits.
    expect((await post(gw, chat, { model: "nobody/knows-this", messages: hi })).status).toBe(404);
    expect((await fetch(`${gw.url}${chat}`, { method: "POST", body: "{}" })).status).toBe(401);
    const admin = { authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef", "content-type": "application/json" };
    const limited = await (await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/keys`, { method: "POST", headers: admin, body: JSON.stringify({ rate_limit_per_minute: 1 }) })).json() as { key: string };
    expect((await post(gw, chat, { model: OPENAI_MODEL, messages: hi }, { authorization: `Bearer ${limited.key}` })).status).toBe(200);
    expect((await post(gw, chat, { model: OPENAI_MODEL, messages: hi }, { authorization: `Bearer ${limited.key}` })).status).toBe(429);
    const poor = await (await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: admin, body: JSON.stringify({ name: "poor", credits: 0 }) })).json() as { id: string };
    const poorKey = await (await fetch(`${gw.url}/v1/admin/accounts/${poor.id}/keys`, { method: "POST", headers: admin, body: "{}" })).json() as { key: string };
    expect((await post(gw, chat, { model: OPENAI_MODEL, messages: hi }, { authorization: `Bearer ${poorKey.key}` })).status).toBe(402);
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
    // Routes on both sides of the app's after-response hook: a token count closes its own trace.
    expect((await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: hi })).status).toBe(200);
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).status).toBe(200);
    await gw.app.services.settled();

    const m = await scrape(gw);
    const req = (route: string, model: string, provider: string, status: number) => m.get(`switchyard_requests_total{route="${route}",model="${model}",provider="${provider}",status="${status}"}`);
    expect(req(chat, OPENAI_MODEL, "fake-openai", 200)).toBe(5); // 2 + stream + retried + the limited key's
    expect(req("/v1/messages", ANTHROPIC_MODEL, "fake-anthropic", 200)).toBe(1);
    expect(req(chat, ANTHROPIC_MODEL, "fake-anthropic", 200)).toBe(1); // the fallback's answer
    expect(req(chat, "other", "none", 404)).toBe(1);
    expect(req(chat, "none", "none", 401)).toBe(1);
    expect(req(chat, "none", "none", 429)).toBe(1);
    expect(req(chat, OPENAI_MODEL, "none", 402)).toBe(1);
    expect(req("/health", "none", "none", 200)).toBe(1);
    expect(req("/v1/messages/count_tokens", "none", "none", 200)).toBe(1);
    expect(req("/v1/models", "none", "none", 200)).toBe(1);
    expect(req("/v1/admin", "none", "none", 201)).toBe(3);

    expect(m.get(`switchyard_retries_total{model="${OPENAI_MODEL}"}`)).toBe(1);
    expect(m.get(`switchyard_fallbacks_total{model="${OPENAI_MODEL}"}`)).toBe(1);
    expect(m.get(`switchyard_upstream_errors_total{provider="fake-openai",class="status_429"}`)).toBe(1);
    expect(m.get(`switchyard_upstream_errors_total{provider="fake-openai",class="status_5xx"}`)).toBe(1);
    for (const reason of ["auth", "rate_limit", "credits"]) expect(m.get(`switchyard_rejections_total{reason="${reason}"}`)).toBe(1);
    expect(m.get('switchyard_rejections_total{reason="too_large"}')).toBeUndefined();

    // Every upstream attempt is timed: 5 answered + 2 refused on fake-openai, 2 on fake-anthropic.
    expect(m.get('switchyard_upstream_seconds_count{provider="fake-openai"}')).toBe(7);
    expect(m.get('switchyard_upstream_seconds_count{provider="fake-anthropic"}')).toBe(2);
    // Added time and time to first token: one observation per answered request.
    expect(m.get(`switchyard_gateway_added_seconds_count{route="${chat}"}`)).toBe(6);
    expect(m.get('switchyard_gateway_added_seconds_count{route="/v1/messages"}')).toBe(1);
    expect(m.get(`switchyard_time_to_first_token_seconds_count{route="${chat}",model="${OPENAI_MODEL}"}`)).toBe(5);
    expect(m.get(`switchyard_time_to_first_token_seconds_count{route="/v1/messages",model="${ANTHROPIC_MODEL}"}`)).toBe(1);
    const added = m.get(`switchyard_gateway_added_seconds_sum{route="${chat}"}`)!;
    expect(added).toBeGreaterThan(0);
    expect(added).toBeLessThan(m.get(`switchyard_time_to_first_token_seconds_sum{route="${chat}",model="${OPENAI_MODEL}"}`)! + m.get(`switchyard_time_to_first_token_seconds_sum{route="${chat}",model="${ANTHROPIC_MODEL}"}`)!);

    // Tokens and credits: what the usage records say, per model.
    const db = new Database(gw.dbPath, { readonly: true });
    const sums = db.query<{ model: string; p: number; c: number; cost: number }, []>("SELECT model, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS c, SUM(cost_micro) AS cost FROM usage_records GROUP BY model").all();
    db.close();
    expect(sums.length).toBe(2);
    for (const s of sums) {
      expect(s.p).toBeGreaterThan(0);
      expect(m.get(`switchyard_tokens_total{model="${s.model}",direction="input"}`)).toBe(s.p);
      expect(m.get(`switchyard_tokens_total{model="${s.model}",direction="output"}`)).toBe(s.c);
      expect(m.get(`switchyard_credits_charged_total{model="${s.model}"}`)).toBeCloseTo(s.cost / 1e6, 9);
    }

    expect(m.get("switchyard_active_streams")).toBe(0);
    expect(m.get("switchyard_ledger_queue_depth")).toBe(0);
    expect(m.get("switchyard_ledger_settlement_lag_seconds")).toBe(0);
    expect(m.get("switchyard_ledger_writable")).toBe(1);
    expect(m.get("process_resident_memory_bytes")).toBeGreaterThan(0);
    // Nothing a client chose became a label; no key or account ids anywhere.
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    expect(text).not.toContain("nobody/knows-this");
    expect(text).not.toContain(gw.keyId);
    expect(text).not.toContain(gw.accountId);
  });

  test("an open stream is counted while it runs", async () => {
    upstream.reply({ kind: "fixture", name: "openai-text.sse", split: "frames", delayMs: 25 });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi, stream: true });
    const reader = res.body!.getReader();
    await reader.read();
    expect((await scrape(gw)).get("switchyard_active_streams")).toBe(1);
    while (!(await reader.read()).done) {}
    await gw.app.services.settled();
    expect((await scrape(gw)).get("switchyard_active_streams")).toBe(0);
  });
});

describe("rejections are requests turned away", () => {
  test("/ready's 503 (a store down) is a status report, not a rejection; a model route's 503 then is one", async () => {
    const limiter = openRedisLimiter("redis://127.0.0.1:1");
    const own = await startGateway({ upstreamUrl: upstream.url, limiter });
    try {
      for (let i = 0; i < 3; i++) expect((await fetch(`${own.url}/ready`)).status).toBe(503);
      expect((await fetch(`${own.url}/health`)).status).toBe(200);
      let m = await scrape(own);
      expect(m.get('switchyard_requests_total{route="/ready",model="none",provider="none",status="503"}')).toBe(3);
      expect(m.get('switchyard_rejections_total{reason="unavailable"}')).toBeUndefined();
      expect((await fetch(`${own.url}/v1/models`, { headers: { authorization: `Bearer ${own.key}` } })).status).toBe(503);
      m = await scrape(own);
      expect(m.get('switchyard_rejections_total{reason="unavailable"}')).toBe(1);
    } finally {
      await own.stop();
      limiter.close();
    }
  });
});

describe("who may scrape", () => {
  test("SWITCHYARD_METRICS_TOKEN: only its bearer token is accepted", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, ops: { metrics: true, metricsToken: "scrape-me-0123456789abcdef0123456789abcdef", accessLog: { enabled: false, sample: 1, level: "info" } } });
    try {
      for (const authorization of [undefined, "Bearer wrong", "scrape-me-0123456789abcdef0123456789abcdef", `Bearer ${own.key}`]) {
        const res = await fetch(`${own.url}/metrics`, { headers: authorization ? { authorization } : {} });
        expect(res.status).toBe(401);
        expect(((await res.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
      }
      expect((await scrape(own, { authorization: "Bearer scrape-me-0123456789abcdef0123456789abcdef" })).get("switchyard_active_streams")).toBe(0);
    } finally {
      await own.stop();
    }
  });

  test("an upstream that reports more than the hold could cover: the credits counted and logged are what the ledger charged", async () => {
    const lines: { message: string; fields: Record<string, unknown> }[] = [];
    const own = await startGateway({ upstreamUrl: upstream.url, log: (_level, message, fields) => lines.push({ message, fields: fields ?? {} }) });
    try {
      // 100,000 prompt tokens claimed for one word: far past the hold for this request.
      upstream.reply({ kind: "json", body: {
        id: "chatcmpl-big", object: "chat.completion", created: 1, model: "gpt-4o-mini",
        choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 100_000, completion_tokens: 1, total_tokens: 100_001 },
      } });
      const res = await post(own, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: hi }, { "x-request-id": "over-the-hold" });
      expect(res.status).toBe(200);
      await res.text();
      await own.app.services.settled();
      const db = new Database(own.dbPath, { readonly: true });
      const record = db.query<{ cost: number; held: number | null }, []>("SELECT cost_micro AS cost, held_micro AS held FROM usage_records").get()!;
      db.close();
      // The ledger charged the hold, less than the price book's sum for what was claimed.
      expect(record.held).toBe(record.cost);
      expect(record.cost).toBeLessThan(100_000 * 150 + 600);
      const m = await scrape(own);
      expect(m.get(`switchyard_credits_charged_total{model="${OPENAI_MODEL}"}`)).toBeCloseTo(record.cost / 1e6, 9);
      const line = lines.find((l) => l.message === "request" && l.fields.clientRequestId === "over-the-hold")!;
      expect(line.fields.credits).toBeCloseTo(record.cost / 1e6, 9);
    } finally {
      await own.stop();
    }
  });

  test("SWITCHYARD_METRICS=off: nothing counted, /metrics is a 404", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, ops: { metrics: false, accessLog: { enabled: false, sample: 1, level: "info" } } });
    try {
      expect((await post(own, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi })).status).toBe(200);
      expect(own.app.services.tracker.metrics).toBeUndefined();
      const res = await fetch(`${own.url}/metrics`);
      expect(res.status).toBe(404);
      expect(res.headers.get("x-request-id")).toBeTruthy();
    } finally {
      await own.stop();
    }
  });
});
