import type { LedgerHealth } from "../billing/ledger.ts";
import { LOG_LOSSES } from "../log/log.ts";
import type { KeyPools } from "../providers/key-pools.ts";
import type { ConnectionGuardCounts } from "../limits/connection-guard.ts";
import { CollectedCounter, CollectedSeries, Counter, Dimension, Gauge, Histogram, Registry, StatusDimension } from "./metrics.ts";

/** Why an upstream attempt (or an answer under way) failed, as the metrics count it. */
export const UPSTREAM_ERROR_CLASSES = ["connect", "timeout", "status_429", "status_4xx", "status_5xx", "bad_answer", "too_large", "image", "stream_broken", "other"] as const;
export type UpstreamErrorClass = (typeof UPSTREAM_ERROR_CLASSES)[number];

/** The prompt's price classes, as the usage records' columns name them (their `_tokens` left off). */
export const PROMPT_CLASSES = ["fresh_input", "cache_read", "cache_write_5m", "cache_write_1h"] as const;

/** Why a request was refused before any upstream call. */
export const REJECTION_REASONS = ["auth", "permission", "rate_limit", "credits", "too_large", "body_timeout", "unavailable", "other"] as const;
export type RejectionReason = (typeof REJECTION_REASONS)[number];

export interface GatewayMetricsDeps {
  /** The paths the app serves (static ones become route labels; the rest count as "other"). */
  routes: readonly string[];
  models: readonly string[];
  providers: readonly string[];
  ledger: { health(): LedgerHealth };
  /** A shared rate-limit store that can be unreachable (Redis). */
  limiter?: { health?(): { reachable: boolean } };
  inflight: { readonly count: number };
  now: () => number;
  /** Spend alerts' counts, when alerts are configured. */
  alerts?: { readonly counts: { readonly queued: number; readonly delivered: number; readonly failed: number } };
  /** Vendor key pools: per key counts, labelled by the key's env name (never its secret). */
  keyPools?: Pick<KeyPools, "counts" | "moves">;
  /** The connection guard's counts and its last reading of open descriptors (limits/connection-guard.ts). */
  connections?: ConnectionGuardCounts;
}

const ADMIN_PREFIX = "/v1/admin/";
const ADMIN_ROUTE = "/v1/admin";
/** Latencies the gateway adds: tens of microseconds to a few milliseconds. */
const ADDED_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
/** Upstream latencies: from a cached answer to a long reasoning stream. */
const UPSTREAM_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;

/**
 * The gateway's metrics: what the request path counts (through request-trace.ts) and what is
 * read when /metrics is scraped (ledger queue, open streams, process). Label values come from
 * configuration only: client input (an unknown model name, a path) counts as "other".
 */
export function createGatewayMetrics(deps: GatewayMetricsDeps) {
  const registry = new Registry();
  const staticRoutes = deps.routes.filter((p) => !p.includes(":") && !p.includes("*") && !p.startsWith(ADMIN_PREFIX));
  const route = new Dimension("route", [...new Set([...staticRoutes, ADMIN_ROUTE])].concat("other"));
  const model = new Dimension("model", [...deps.models, "none", "other"]);
  const provider = new Dimension("provider", [...deps.providers, "none", "other"]);
  const status = new StatusDimension();
  const direction = new Dimension("direction", ["input", "output"]);
  // The usage records' prompt columns, in request-trace.ts's order (fresh, read, 5-minute, long-lived writes).
  const promptClass = new Dimension("class", PROMPT_CLASSES);
  const errorClass = new Dimension("class", UPSTREAM_ERROR_CLASSES);
  const reason = new Dimension("reason", REJECTION_REASONS);
  const noModel = model.indexOf("none");
  const noProvider = provider.indexOf("none");

  const requests = registry.add(new Counter("switchyard_requests_total", "Finished requests by route, model (the one that answered, else the one asked for), provider and HTTP status.", [route, model, provider, status]));
  const added = registry.add(new Histogram("switchyard_gateway_added_seconds", "Time the gateway itself added before the answer's head: arrival to head, less the time spent waiting for upstreams and retry back-off.", ADDED_BUCKETS, [route]));
  const ttft = registry.add(new Histogram("switchyard_time_to_first_token_seconds", "Arrival to the first answer bytes handed to the client (the first frame of a stream, the body of a whole answer).", UPSTREAM_BUCKETS, [route, model]));
  const upstream = registry.add(new Histogram("switchyard_upstream_seconds", "Duration of each upstream attempt: request sent to the answer's last byte (or its failure).", UPSTREAM_BUCKETS, [provider]));
  const tokens = registry.add(new Counter("switchyard_tokens_total", "Tokens charged for, by model and direction (input: prompt, output: completion).", [model, direction]));
  const promptTokens = registry.add(new Counter("switchyard_prompt_tokens_total", "Prompt tokens charged for, by model and price class (fresh_input, cache_read, cache_write_5m, cache_write_1h: Anthropic's 1-hour and OpenAI's 12-hour writes); they add up to switchyard_tokens_total's input.", [model, promptClass]));
  const credits = registry.add(new Counter("switchyard_credits_charged_total", "Credits charged, by model.", [model], 1_000_000));
  let streams = 0;
  registry.add(new Gauge("switchyard_active_streams", "Streamed answers being sent right now.", () => streams));
  registry.add(new Gauge("switchyard_inflight_requests", "Requests between reservation and settlement.", () => deps.inflight.count));
  const retries = registry.add(new Counter("switchyard_retries_total", "Upstream calls repeated on the same model (429/503/529), by model.", [model]));
  const fallbacks = registry.add(new Counter("switchyard_fallbacks_total", "Requests that moved on from a model to the next in their list, by the model given up.", [model]));
  const upstreamErrors = registry.add(new Counter("switchyard_upstream_errors_total", "Failed upstream attempts and broken answers, by provider and class.", [provider, errorClass]));
  const rejections = registry.add(new Counter("switchyard_rejections_total", "Requests refused before any upstream call: auth (401), permission (403: a model the key may not use), rate_limit (429: the key's rate or its requests at once), credits (402: balance or key spend limit), too_large (413), body_timeout (408: a body that did not arrive within limits.body_timeout_ms), unavailable (503: ledger, rate limiter, key store, or too many bodies arriving at once).", [reason]));
  registry.add(new Gauge("switchyard_ledger_queue_depth", "Settlements accepted but not yet written to the store.", () => deps.ledger.health().queued));
  registry.add(new Gauge("switchyard_ledger_settlement_lag_seconds", "Age of the oldest settlement not yet written (0 when none waits).", () => {
    const oldest = deps.ledger.health().oldestQueuedAt;
    return oldest === undefined ? 0 : Math.max(0, deps.now() - oldest) / 1000;
  }));
  registry.add(new CollectedCounter("switchyard_log_lines_dropped_total", "Log lines (access log included) this process dropped because their destination fell behind by more than 16 MiB.", () => LOG_LOSSES.dropped));
  registry.add(new CollectedCounter("switchyard_log_write_errors_total", "Writes of log lines their destination refused (a full disk, a closed pipe): their lines are lost.", () => LOG_LOSSES.failedWrites));
  registry.add(new Gauge("switchyard_ledger_writable", "1 while the ledger's store accepts writes, 0 while it fails.", () => (deps.ledger.health().writable ? 1 : 0)));
  if (deps.limiter?.health) {
    const health = deps.limiter.health.bind(deps.limiter);
    registry.add(new Gauge("switchyard_rate_limiter_reachable", "1 while the shared rate-limit store (Redis) answers.", () => (health().reachable ? 1 : 0)));
  }
  if (deps.alerts) {
    const counts = deps.alerts.counts;
    registry.add(new CollectedCounter("switchyard_alerts_queued_total", "Spend alerts this process put in the outbox (each crossing once).", () => counts.queued));
    registry.add(new CollectedCounter("switchyard_alerts_delivered_total", "Spend alerts this process delivered (the receiver answered 2xx).", () => counts.delivered));
    registry.add(new CollectedCounter("switchyard_alerts_failed_total", "Spend alert deliveries that failed (error status, refused connection, timeout); each is retried.", () => counts.failed));
  }
  if (deps.keyPools) {
    const pools = deps.keyPools;
    const perKey = (value: (c: ReturnType<KeyPools["counts"]>[number]) => number) => () => pools.counts().map((c) => ({ labels: { provider: c.provider, key: c.env }, value: value(c) }));
    registry.add(new CollectedSeries("switchyard_vendor_key_requests_total", "Upstream attempts this process sent with each vendor key (labelled by its env name).", "counter", perKey((c) => c.requests)));
    registry.add(new CollectedSeries("switchyard_vendor_key_errors_total", "Attempts on each vendor key that did not get an answer (any error status, or none).", "counter", perKey((c) => c.errors)));
    registry.add(new CollectedSeries("switchyard_vendor_key_cooldowns_total", "Cooldowns of each vendor key this process started (the vendor answered 429, 503 or 529).", "counter", perKey((c) => c.cooldowns)));
    registry.add(new CollectedSeries("switchyard_vendor_key_disabled_seconds_total", "Time each vendor key has spent disabled (the vendor refused it: 401, 403) while this process was running.", "counter", perKey((c) => c.disabledMs / 1000)));
    registry.add(new CollectedSeries("switchyard_vendor_key_usable", "1 while a vendor key is usable, 0 while it is cooling or disabled (as this process last saw it).", "gauge", perKey((c) => (c.condition === "usable" ? 1 : 0))));
    registry.add(new CollectedSeries("switchyard_session_key_moves_total", "Sessions moved off their vendor key because it was cooling or disabled (their prompt cache starts again on the new key).", "counter", () => [...pools.moves()].map(([p, n]) => ({ labels: { provider: p }, value: n }))));
  }
  if (deps.connections) {
    const c = deps.connections;
    registry.add(new CollectedSeries("switchyard_connections_closed_total", "Connections the gateway closed to keep descriptors for its tenants: answers that closed theirs (one connection too many from their address while descriptors ran short, or under pressure) and idle ones closed at once near the limit.", "counter", () => [
      { labels: { reason: "address_cap" }, value: c.closedOverAddressCap },
      { labels: { reason: "pressure" }, value: c.closedUnderPressure },
      { labels: { reason: "idle_near_limit" }, value: c.closedIdle },
    ]));
    registry.add(new CollectedCounter("switchyard_open_files_pressure_total", "Times this process reached 80 % of its open-file limit (idle connections closed, answers closing theirs until below 60 %).", () => c.pressureEpisodes));
    registry.add(new Gauge("process_open_fds", "Number of open file descriptors (as last read, twice a second).", () => c.open));
    registry.add(new Gauge("process_max_fds", "Maximum number of open file descriptors.", () => c.limit));
  }
  const startedAt = Date.now() / 1000;
  registry.add(new CollectedCounter("process_cpu_seconds_total", "User and system CPU time spent, in seconds.", () => {
    const used = process.cpuUsage();
    return (used.user + used.system) / 1e6;
  }));
  registry.add(new Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", () => process.memoryUsage.rss()));
  registry.add(new Gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.", () => startedAt));

  const routeIndexes = new Map<string, number>();
  for (const r of staticRoutes) routeIndexes.set(r, route.indexOf(r));
  const otherRoute = route.indexOf("other");
  const adminRoute = route.indexOf(ADMIN_ROUTE);

  return {
    registry,
    dims: { route, model, provider, status, errorClass, reason },
    families: { requests, added, ttft, upstream, tokens, promptTokens, credits, retries, fallbacks, upstreamErrors, rejections },
    /** The route label of a request path (no query string). */
    routeOf(path: string): number {
      return routeIndexes.get(path) ?? (path.startsWith(ADMIN_PREFIX) ? adminRoute : otherRoute);
    },
    modelOf: (id: string) => (id === "" ? noModel : model.indexOf(id)),
    providerOf: (id: string) => (id === "" ? noProvider : provider.indexOf(id)),
    streamStarted(): void {
      streams++;
    },
    streamEnded(): void {
      streams--;
    },
    expose: () => registry.expose(),
  };
}
