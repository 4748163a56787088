import { Elysia } from "elysia";
import type { Database } from "bun:sqlite";
import type { Settings } from "./config/load-config.ts";
import { createAccountStore } from "./accounts/account-store.ts";
import { createKeyResolver } from "./accounts/key-resolver.ts";
import { createLedger } from "./billing/ledger.ts";
import { createUsageReport } from "./billing/usage-report.ts";
import { createCatalogue } from "./catalogue/catalogue.ts";
import type { Logger } from "./log.ts";
import type { UpstreamFetch } from "./pipeline/forward.ts";
import { admissionPlugin, maybePrincipalOf, pathOf } from "./plugins/admission.ts";
import { createRateLimiter } from "./limits/rate-limiter.ts";
import { errorsPlugin } from "./plugins/errors.ts";
import { jsonBodyPlugin } from "./plugins/json-body.ts";
import { adminRoutes } from "./routes/admin.ts";
import { chatCompletionsRoute } from "./routes/chat-completions.ts";
import { messagesRoute } from "./routes/messages.ts";
import { modelsRoute } from "./routes/models.ts";
import { withSimulatedUpstream } from "./providers/simulated/simulated-upstream.ts";
import { loadTokenizer } from "./billing/token-estimate.ts";
import { createInflight } from "./pipeline/inflight.ts";
import { createChangeWatch } from "./store/change-watch.ts";
import { createHttp1Client } from "./transport/http1/client.ts";
import { atEndOfTurn } from "./pipeline/end-of-turn.ts";

export interface AppDeps {
  db: Database;
  settings: Settings;
  /** How upstreams are reached; `simulated://` URLs are answered in-process whatever is passed. */
  fetch?: UpstreamFetch;
  now?: () => number;
  log: Logger;
  adminToken?: string;
}

/** Builds the gateway from its dependencies; never listens, so tests drive it on any server. */
export function createApp(deps: AppDeps) {
  const now = deps.now ?? Date.now;
  const accounts = createAccountStore(deps.db, now);
  // One watch for both caches, so a request reads data_version at most once.
  const changes = createChangeWatch(deps.db);
  const keys = createKeyResolver(accounts, now, changes);
  const ledger = createLedger(deps.db, now, changes);
  const catalogue = createCatalogue(deps.settings.models);
  // Only answers without reported usage need it; loading now keeps them from waiting.
  loadTokenizer();
  const inflight = createInflight();
  // API calls go over our own keep-alive connections; other requests (image downloads) use fetch.
  // While other requests are in flight, a call's write waits for the end of the loop's turn.
  const upstream = createHttp1Client({
    fallback: deps.fetch,
    coalesce: () => inflight.count > 1,
    atEndOfTurn,
    maxResponseBytes: deps.settings.limits.max_response_bytes,
  });
  const forwardDeps = {
    settings: deps.settings,
    ledger,
    inflight,
    catalogue,
    fetch: withSimulatedUpstream(deps.fetch ?? upstream.fetch),
    log: deps.log,
    now,
  };

  /**
   * Refused chat requests leave a usage record too (zero tokens, zero cost), so an operator
   * sees every request a key made. Answers that reached the pipeline are recorded by it.
   */
  const recordRejection = (request: Request, status: number) => {
    const key = maybePrincipalOf(request);
    if (!key || status >= 500) return;
    const path = pathOf(request.url);
    if (path !== "/v1/chat/completions" && path !== "/v1/messages") return;
    ledger.settle(null, 0, {
      requestId: `req_${Bun.randomUUIDv7("hex")}`, accountId: key.accountId, keyId: key.keyId, model: "", provider: "",
      promptTokens: 0, completionTokens: 0, estimated: false, status: `rejected_${status}`, latencyMs: 0,
    });
  };

  // Normalising copies every body to drop fields its schema does not list (25 µs for a
  // 200-message conversation). Our schemas say `additionalProperties: true` instead, so the copy
  // changed nothing. It is the app's setting that applies to every route.
  const app = new Elysia({ name: "switchyard", normalize: false })
    .use(errorsPlugin(deps.log, recordRejection))
    .use(admissionPlugin({
      keys,
      limiter: createRateLimiter(now),
      defaultPerMinute: deps.settings.limits.requests_per_minute,
      maxBodyBytes: deps.settings.limits.max_body_bytes,
      onRejected: recordRejection,
    }))
    .use(jsonBodyPlugin(deps.settings.limits.max_body_bytes))
    .use(modelsRoute(catalogue))
    .use(chatCompletionsRoute(forwardDeps))
    .use(messagesRoute(forwardDeps))
    .use(adminRoutes({ accounts, keys, ledger, usage: createUsageReport(deps.db), adminToken: deps.adminToken, now }));
  const services = {
    accounts,
    keys,
    ledger,
    catalogue,
    inflight,
    upstream,
    /** Resolves once every started request is settled and its settlement written. */
    async settled(): Promise<void> {
      await inflight.idle();
      ledger.flush();
    },
  };
  return Object.assign(app, { services });
}

export type App = ReturnType<typeof createApp>;
