/**
 * What request ids, counting and access-log lines cost per request, in isolation: the calls a
 * streamed answer makes on its trace (arrival, plan, attempt, charge, first bytes, end), timed
 * over many requests with metrics and the access log on and off. The in-process bench
 * (bench/in-process.ts) measures the same inside the whole app, where a shared machine's noise
 * is larger than these costs.
 *
 *   bun bench/ops-cost.ts [--requests N]
 */
import { createGatewayMetrics } from "../src/ops/gateway-metrics.ts";
import { Tracker } from "../src/ops/request-trace.ts";
import { NO_TOKENS } from "../src/billing/pricing.ts";
import { silentLogger, withoutSecrets } from "../src/log/log.ts";
import { parseArgs } from "./child-process.ts";

const args = parseArgs();
const N = Number(args.get("requests") ?? 200_000);
const routes = ["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/health", "/ready", "/metrics", "/openapi.json"];
const models = Array.from({ length: 12 }, (_, i) => `vendor/model-${i}`);
const ledger = { health: () => ({ writable: true, queued: 0, maxQueued: 50_000 }) };
const requests = Array.from({ length: 1024 }, (_, i) => new Request("http://localhost/v1/chat/completions", { method: "POST", headers: i % 2 ? { "x-request-id": `client-${i}` } : {} }));

/** A turn with part of its prompt read from the cache, as agent traffic has. */
const CLASSES = { ...NO_TOKENS, freshInput: 8, cacheRead: 12, output: 20 };

function run(metrics: boolean, accessLog: boolean, n: number): number {
  const tracker = new Tracker({ log: withoutSecrets(silentLogger), accessLog: { enabled: accessLog, sample: 1, level: "info" } });
  if (metrics) tracker.metrics = createGatewayMetrics({ routes, models, providers: ["openai", "anthropic"], ledger, inflight: { count: 0 }, now: Date.now });
  const principal = { accountId: "acct_x", keyId: "key_y" };
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const trace = tracker.begin(requests[i & 1023]!, "/v1/chat/completions");
    trace.modelAsked = models[i % 12]!;
    trace.planned("req_0001", models[i % 12]!, principal);
    trace.attemptStarted(models[i % 12]!, "openai");
    trace.attemptEnded(undefined, true);
    trace.streamStarted();
    trace.firstBytes();
    trace.charged(20, 20, 15_000, CLASSES);
    trace.streamEnded("completed");
  }
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / n;
}

for (const [metrics, accessLog] of [[false, false], [true, false], [false, true], [true, true]] as const) {
  run(metrics, accessLog, 20_000); // warm-up
  const rounds = [run(metrics, accessLog, N), run(metrics, accessLog, N), run(metrics, accessLog, N)];
  console.log(`metrics ${metrics ? "on " : "off"}  access log ${accessLog ? "on " : "off"}  ${Math.min(...rounds).toFixed(0)} ns CPU per request (rounds ${rounds.map((r) => r.toFixed(0)).join(", ")})`);
}
