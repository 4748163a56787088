import { Elysia } from "elysia";
import type { Database } from "bun:sqlite";
import { providersWithoutKeys, type Settings } from "./config/load-config.ts";
import { type AccountStore } from "./accounts/account-store.ts";
import { createAccountStore } from "./store/sqlite/sqlite-accounts.ts";
import { createKeyResolver, type KeyResolver } from "./accounts/key-resolver.ts";
import type { Ledger, RejectionLog } from "./billing/ledger.ts";
import { createSqliteLedger, type SqliteLedgerOptions } from "./store/sqlite/sqlite-ledger.ts";
import { type UsageBreakdown, type UsageReporter } from "./billing/usage-report.ts";
import { createUsageBreakdown, createUsageReport } from "./store/sqlite/sqlite-usage-report.ts";
import { createCatalogue } from "./catalogue/catalogue.ts";
import { withoutSecrets, type Logger } from "./log/log.ts";
import { createScrubber } from "./log/scrub.ts";
import type { Transport } from "./transport/transport.ts";
import { admissionPlugin, COUNT_PATHS, createPrincipals, pathOf } from "./http/plugins/admission.ts";
import { createRateLimiter, type RateLimitStore } from "./limits/rate-limiter.ts";
import { createConcurrencyLimiter, type ConcurrencyStore } from "./limits/concurrency-limiter.ts";
import { errorsPlugin } from "./http/plugins/errors.ts";
import { jsonBodyPlugin, type BodyServer } from "./http/plugins/json-body.ts";
import { createParseTurns } from "./limits/parse-turns.ts";
import type { TSchema } from "@sinclair/typebox";
import { ChatRequest } from "./formats/openai-chat/schema.ts";
import { CountTokensRequest, MessagesRequest } from "./formats/anthropic-messages/schema.ts";
import { InputTokensRequest, ResponsesRequest } from "./formats/openai-responses/schema.ts";
import { EmbeddingsRequest } from "./formats/openai-embeddings/schema.ts";
import { createBodyBudget, type BodyShare } from "./limits/body-budget.ts";
import { createUnreadAnswers } from "./limits/unread-answers.ts";
/** Bun's own body cap where the server listens (none: see the module). */
export { SERVER_BODY_LIMIT } from "./http/plugins/json-body.ts";
import { adminGate, adminRoutes } from "./http/routes/admin.ts";
import { chatCompletionsRoute } from "./http/routes/chat-completions.ts";
import { messagesRoute } from "./http/routes/messages.ts";
import { responsesRoute } from "./http/routes/responses.ts";
import { embeddingsRoute } from "./http/routes/embeddings.ts";
import { modelsRoute } from "./http/routes/models.ts";
import { keyRoute } from "./http/routes/key.ts";
import { healthRoutes } from "./http/routes/health.ts";
import { withSimulatedUpstream } from "./providers/simulated/simulated-upstream.ts";
import { createTokenizer, type Tokenizer } from "./billing/token-estimate.ts";
import { createEmbeddingsThread, type EmbeddingsThread } from "./formats/openai-embeddings/embeddings-thread.ts";
import { createCountQueue } from "./limits/count-queue.ts";
import { createSliceCountMemory } from "./billing/slice-count-memory.ts";
import { createInflight, LedgerLostCut } from "./gateway/inflight.ts";
import { createChangeWatch } from "./store/sqlite/change-watch.ts";
import { retryWhileBusy } from "./store/sqlite/sqlite-errors.ts";
import { createHttp1Client } from "./transport/http1/client.ts";
import { createEndOfTurn } from "./gateway/end-of-turn.ts";
import { createTicker } from "./streaming/ticker.ts";
import { isStoreUnavailable, type SharedStores } from "./store/stores.ts";
import { DEFAULT_OPS, type OpsSettings } from "./config/ops-settings.ts";
import { Tracker } from "./ops/request-trace.ts";
import { createGatewayMetrics } from "./ops/gateway-metrics.ts";
import { assignRequestId, closeTracesHook } from "./http/plugins/request-id.ts";
import { metricsRoute } from "./http/routes/metrics.ts";
import { openApiRoute } from "./http/routes/openapi.ts";
import type { ResponseStore } from "./formats/openai-responses/response-store.ts";
import { createMemoryResponseStore } from "./store/memory/memory-response-store.ts";
import { createAlerts, type Alerts } from "./alerts/alerts.ts";
import { createAuthFailures, type AuthFailureOptions } from "./limits/auth-failures.ts";
import { createSqliteAlertOutbox } from "./store/sqlite/sqlite-alert-outbox.ts";
import type { KeyStateStore } from "./providers/key-pool.ts";
import { createKeyPools } from "./providers/key-pools.ts";
import { createMemoryKeyState } from "./store/memory/memory-key-state.ts";
import type { ConsoleStore } from "./console/console-store.ts";
import { createSqliteConsoleStore } from "./store/sqlite/sqlite-console-store.ts";
import { createSignInAttempts, type SignInAttemptOptions } from "./limits/sign-in-attempts.ts";
import { passwordHasher, type PasswordCost } from "./console/console-auth.ts";
import { consoleApiRoutes, consoleGate, createSessionChecks } from "./http/console/console-api.ts";
import { consolePageRoutes } from "./http/console/console-page.ts";
import { adminOperations } from "./http/routes/admin-operations.ts";
import { createModelHealth } from "./ops/model-health.ts";
import { corsPolicy } from "./config/cors-origins.ts";
import { createPromptMemory } from "./billing/prompt-memory.ts";
import { addressBlock } from "./limits/address-block.ts";
import { createCountBytes } from "./limits/count-bytes.ts";
import { createConnectionGuard } from "./limits/connection-guard.ts";
import { readOpenFilesLimit, watchOpenFiles } from "./ops/open-files.ts";

/**
 * Failed API key checks an address may make in a minute before they are answered 429: far more
 * than a team behind one address mistypes or a test suite of bad credentials sends (each of which
 * is to get its 401), a sixteenth of a second of a flood (one address sent 4,800 a second).
 */
const KEY_FAILURES_PER_MINUTE = 300;
/** Console API requests a minute of one account's holders together (bursts of as many); a page's view takes a few. */
const HOLDER_CONSOLE_REQUESTS_PER_MINUTE = 300;

export interface AppDeps {
  /** The SQLite file's connection: accounts, keys and the ledger, unless `stores` are given. */
  db?: Database;
  /** Shared stores (PostgreSQL, store/stores.ts) instead of SQLite; the caller closes them. */
  stores?: SharedStores;
  /** Rate limits shared by several processes (Redis); in-process buckets otherwise. */
  limiter?: RateLimitStore;
  /** Requests under way per key, shared by several processes (Redis); counted in this process otherwise. */
  concurrency?: ConcurrencyStore;
  settings: Settings;
  /** How upstreams are reached; `simulated://` URLs are answered in-process whatever is passed. */
  fetch?: Transport;
  /** An HTTP(S) proxy is configured (config/env.ts): every upstream call goes through `fetch`, which honours it. */
  upstreamViaProxy?: boolean;
  now?: () => number;
  log: Logger;
  adminToken?: string;
  /** Throttle of failed admin authentications (default 10 per address and minute, then 429). */
  adminAuthFailures?: AuthFailureOptions;
  /** Failed API key checks per client address (http/plugins/admission.ts, keyFailures): 300 a minute unless a test says otherwise. */
  keyAuthFailures?: AuthFailureOptions;
  /** Tuning of the SQLite ledger (tests shorten its timers). */
  ledgerOptions?: Omit<SqliteLedgerOptions, "now" | "changes" | "log" | "onCommitted">;
  /** Wraps the ledger the app builds (tests inject faults with it). */
  wrapLedger?: (ledger: Ledger & RejectionLog) => Ledger & RejectionLog;
  /** Metrics and access log switches (config/env.ts); all on by default. */
  ops?: OpsSettings;
  /** The Responses API's stored answers; in this process's memory, bounded by `settings.responses`, unless given. */
  responseStore?: ResponseStore;
  /** How often the spend alert dispatcher looks at its outbox when idle (tests shorten it). */
  alertPollMs?: number;
  /**
   * The tokenizer (a worker thread holding ~90 MB of tables, a second of CPU to load); the app
   * creates its own unless given one. Tests that start many gateways in one process share one.
   */
  tokenizer?: Tokenizer;
  /**
   * Where large embeddings answers are parsed and written (a worker thread, started with the
   * first one); the app creates its own unless given one (tests pass another threshold).
   */
  embeddingsThread?: EmbeddingsThread;
  /** Vendor key pools' shared state (Redis, for several processes); this process's memory otherwise. */
  keyState?: KeyStateStore;
  /** [0, 1): the key pools' weighted choice (tests pass a seeded source). */
  keyRandom?: () => number;
  /** How often disabled vendor keys are looked at for a due probe (default 1 s). */
  keyProbeEveryMs?: number;
  /** Console sign-in throttling (default 20 failures per address, 5 per login, in 15 minutes). */
  consoleSignIns?: SignInAttemptOptions;
  /** argon2id's cost for console passwords (default: Bun's, 64 MiB and 2 passes); tests pass a cheap one. */
  consolePasswordCost?: PasswordCost;
  /** The longest a parse turn is held before it is ended for its holder (limits/parse-turns.ts, default 250 ms); tests hold one longer. */
  parseTurnMaxHoldMs?: number;
  /**
   * A worker among several (SWITCHYARD_WORKERS): `/metrics` answers with every worker's samples,
   * gathered through the supervisor (ops/worker-metrics.ts); given this worker's own exposition.
   */
  gatherMetrics?: (own: string) => Promise<string>;
}

/** Bodies without a key (the console's) still arriving: per client address, and all of them. */
const ANONYMOUS_BODY_BYTES_PER_ADDRESS = 256 * 1024;
const ANONYMOUS_BODY_BYTES = 16 * 1024 * 1024;
/**
 * Bodies without a key small enough to be a sign-in (an invite's acceptance, a sign-out) have a
 * lane of their own: 16 addresses each holding 1 MiB of slow bodies filled the pool above and every
 * console sign-in, the operator's too, was a 503 for as long as they held them (a security probe).
 * A body this small is bounded by the connection it holds, so its lane is generous.
 */
const SMALL_ANONYMOUS_BODY = 4 * 1024;
const SMALL_ANONYMOUS_BYTES_PER_ADDRESS = 64 * 1024;
const SMALL_ANONYMOUS_BYTES = 64 * 1024 * 1024;

/** How long a SQLite settlement may wait for others under load (see billing/settlement-queue.ts). */
const SQLITE_COMMIT_DELAY_MS = 1;

/** Builds the gateway from its dependencies; never listens, so tests drive it on any server. */
/** The longest a chat prompt's own count may take (its 503): far past any window's count. */
const ADMISSION_COUNT_TIMEOUT_MS = 60_000;

/** The model routes' body schemas: a large body that fails one is refused by the body plugin, cheaply (plugins/first-body-error.ts). */
const LARGE_BODY_SCHEMAS: Record<string, TSchema | undefined> = {
  "/v1/chat/completions": ChatRequest,
  "/v1/messages": MessagesRequest,
  "/v1/messages/count_tokens": CountTokensRequest,
  "/v1/responses": ResponsesRequest,
  "/v1/responses/input_tokens": InputTokensRequest,
  "/v1/embeddings": EmbeddingsRequest,
};

export function createApp(deps: AppDeps) {
  // Whatever logger is passed in, no secret reaches it (see log/log.ts).
  const log = withoutSecrets(deps.log);
  // A vendor that echoes our key is scrubbed by the key's value too, whatever its shape.
  const scrubber = createScrubber();
  for (const provider of deps.settings.providers.values()) {
    scrubber.remember(provider.apiKey);
    for (const key of provider.keys ?? []) scrubber.remember(key.secret);
  }
  const now = deps.now ?? Date.now;
  // A provider whose key variable is unset would call its vendor with no key and fail on every
  // request: said once here (variable names only), and in `/ready` for as long as it lasts.
  const keyless = providersWithoutKeys(deps.settings);
  // A pool that still has keys serves with them: only its unset ones are left out, and it says so.
  const none = keyless.filter((p) => (deps.settings.providers.get(p.provider)?.keys?.length ?? 0) === 0);
  const partial = keyless.filter((p) => (deps.settings.providers.get(p.provider)?.keys?.length ?? 0) > 0);
  if (none.length > 0) {
    log("warn", "providers without a vendor key: their key variables are unset or empty, so their upstream calls carry no key", {
      providers: none.map((p) => `${p.provider} (${p.env.join(", ")})`),
    });
  }
  if (partial.length > 0) {
    log("warn", "vendor keys left out of their pools: their variables are unset or empty; the pools serve with their other keys", {
      providers: partial.map((p) => `${p.provider} (${p.env.join(", ")})`),
    });
  }
  const inflight = createInflight();
  let accounts: AccountStore, keys: KeyResolver, baseLedger: Ledger & RejectionLog, usage: UsageReporter, breakdown: UsageBreakdown;
  /** The console's sessions, logins and invites, in the ledger's database; none when SWITCHYARD_CONSOLE=off. */
  let consoleStore: ConsoleStore | undefined;
  const consoleOn = (deps.ops ?? DEFAULT_OPS).console !== false;
  /** Admin writes tell the in-process caches (SQLite's; PostgreSQL's ledger keeps no copies). */
  let changed: (() => void) | undefined;
  // Spend alerts (alerts/): only with `alerts.webhook_url`; otherwise the ledgers' hook is unset
  // and nothing runs. Detection follows commits, delivery has its own timers: off the request path.
  const alertSettings = deps.settings.alerts;
  if (alertSettings?.secret) scrubber.remember(alertSettings.secret);
  let alerts: Alerts | undefined;
  if (deps.stores) {
    ({ accounts, keys, ledger: baseLedger, usage, breakdown } = deps.stores);
    if (consoleOn) consoleStore = deps.stores.console;
    if (alertSettings && deps.stores.alertOutbox) {
      const shared = createAlerts({ settings: alertSettings, accounts, outbox: deps.stores.alertOutbox, now, log, pollMs: deps.alertPollMs });
      deps.stores.onCommitted?.(shared.committed);
      alerts = shared;
    }
  } else {
    if (!deps.db) throw new Error("createApp needs a SQLite database or shared stores");
    const sqliteAccounts = createAccountStore(deps.db, now);
    // One watch for both caches, so a request reads data_version at most once.
    const changes = createChangeWatch(deps.db);
    changed = () => changes.notify();
    accounts = sqliteAccounts;
    keys = createKeyResolver(sqliteAccounts, now, changes);
    // A commit costs ~45 µs of write and lock calls whatever it holds: while other answers are
    // on their way, it waits a little for them (never for a lone request, nor once all have come).
    const commitDelay = { ms: SQLITE_COMMIT_DELAY_MS, inFlight: () => inflight.count };
    if (alertSettings) alerts = createAlerts({ settings: alertSettings, accounts: sqliteAccounts, outbox: createSqliteAlertOutbox(deps.db), now, log, pollMs: deps.alertPollMs });
    const onCommitted = alerts?.committed;
    baseLedger = createSqliteLedger(deps.db, { now, changes, log, commitDelay, ...deps.ledgerOptions, onCommitted });
    usage = createUsageReport(deps.db);
    breakdown = createUsageBreakdown(deps.db);
    if (consoleOn) consoleStore = createSqliteConsoleStore(deps.db);
  }
  const ledger = deps.wrapLedger ? deps.wrapLedger(baseLedger) : baseLedger;
  const catalogue = createCatalogue(deps.settings.models);
  // Key model lists written through the admin API or the console name models this catalogue has.
  const knownModels = { ids: deps.settings.models.map((m) => m.id), resolve: (name: string) => catalogue.get(name)?.id };
  // Only answers without reported usage need it; loading now keeps them from waiting.
  const tokenizer = deps.tokenizer ?? createTokenizer();
  tokenizer.load();
  const embeddingsThread = deps.embeddingsThread ?? createEmbeddingsThread({ onFailure: (error) => log("warn", "embeddings thread failed", { error }) });
  // API calls go over our own keep-alive connections; other requests (image downloads) use fetch.
  // While other requests are in flight, a call's write waits for the end of the loop's turn.
  // Which key each request came with: admission attaches it, the routes read it.
  const principals = createPrincipals();
  // One queue per gateway: upstream writes and answers wait for the same end of turn.
  const turn = createEndOfTurn();
  const upstream = createHttp1Client({
    fallback: deps.fetch,
    viaProxy: deps.upstreamViaProxy,
    coalesce: () => inflight.count > 1,
    atEndOfTurn: turn.atEndOfTurn,
    maxResponseBytes: deps.settings.limits.max_response_bytes,
  });
  // The stop's cut (index.ts) ends the calls still waiting for their upstream: their requests get a 503 to retry.
  inflight.onCut((reason) => upstream.cut(reason, !(reason instanceof LedgerLostCut)));
  // A shared ledger out of reach for nearly as long as other processes wait before releasing this
  // one's holds: what runs is cut before it is delivered against a hold released behind its back.
  ledger.onHoldsAtRisk?.((atRisk) => inflight.fence(atRisk));
  const ops = deps.ops ?? DEFAULT_OPS;
  // Answers kept for item_reference and previous_response_id: memory only, never disk or logs.
  const stored = deps.settings.responses;
  const responseStore =
    deps.responseStore ??
    createMemoryResponseStore({ maxBytes: stored.store_max_bytes, accountMaxBytes: stored.account_max_bytes, answerMaxBytes: stored.answer_max_bytes, ttlMs: stored.store_ttl_ms, now });
  // Free token counts take turns per key on the tokenizer's low-priority lane (limits/count-queue.ts).
  const limits = deps.settings.limits;
  // An account's keys together get one key's share: more keys buy a tenant no more of the queue.
  // Slices an account had counted lately are not counted again, by either queue: an agent's next turn
  // (or its next `/context`) starts as its last one did (billing/slice-count-memory.ts).
  const remembered = createSliceCountMemory();
  const counts = createCountQueue({ perKeyBytes: limits.count_tokens_per_key_bytes, perAccountBytes: limits.count_tokens_per_key_bytes, capacityBytes: limits.count_tokens_queue_bytes, timeoutMs: limits.count_tokens_timeout_ms, count: tokenizer.countWhenIdle, remembered });
  // A chat prompt near a model's window is counted to see whether it fits: in turns per key too (a
  // tenant's 10 MB prompt must not hold the others'), but on the tokenizer's own lane, apart from
  // the free counts, so their queue's bounds never refuse a paid request. A key's share is what it
  // may have of bodies in flight anyway (limits.body_per_key_bytes); the counts stop past the
  // largest window, so none runs long.
  // Free counts' bytes a minute per account (limits/count-bytes.ts): what counts forwarded to an
  // upstream (never queued) cost the request thread is bounded too.
  const countBytesPerMinute = Math.max(limits.count_tokens_account_bytes_per_minute, limits.max_body_bytes);
  const countBytes = createCountBytes({ perMinute: countBytesPerMinute, unsizedBytes: limits.max_body_bytes, now });
  const admissionCounts = createCountQueue({ perKeyBytes: Math.max(limits.body_per_key_bytes, limits.max_body_bytes), capacityBytes: Number.POSITIVE_INFINITY, timeoutMs: ADMISSION_COUNT_TIMEOUT_MS, count: tokenizer.count, remembered });
  // Request ids, metrics and access-log lines (ops/request-trace.ts).
  const tracker = new Tracker({ log, accessLog: ops.accessLog });
  const upstreamFetch = withSimulatedUpstream(deps.fetch ?? upstream.fetch);
  // Vendor key pools (providers/key-pools.ts): choice, cooldowns, probes; shared through Redis when given.
  const keyPools = createKeyPools({
    providers: deps.settings.providers,
    store: deps.keyState ?? createMemoryKeyState({ now }),
    fetch: upstreamFetch,
    now,
    random: deps.keyRandom,
    log,
    probeEveryMs: deps.keyProbeEveryMs,
  });
  // Requests a minute (admission), an account's tokens a minute (gateway/token-hold.ts), the console's holders.
  const limiter = deps.limiter ?? createRateLimiter(now);
  const forwardDeps = {
    tracker,
    keyPools,
    settings: deps.settings,
    ledger,
    inflight,
    catalogue,
    fetch: upstreamFetch,
    log,
    now,
    turn,
    ticker: createTicker(),
    tokenizer,
    // Counts of prompts near a context window take turns per key.
    fitCounts: admissionCounts,
    // What each conversation's last answer reported of its prompt, for a cancelled one's estimate.
    prompts: createPromptMemory(),
    embeddingsThread,
    scrubber,
    principals,
    concurrency: deps.concurrency ?? createConcurrencyLimiter(),
    limiter,
    keys,
    // Whole answers each account's requests hold until their clients read them.
    unread: createUnreadAnswers({ perAccountBytes: deps.settings.limits.answer_per_account_bytes }),
  };

  /**
   * Requests refused before they reached an upstream (401, 402, 429, a bad body) are counted per
   * key, minute and status: an operator sees every refusal, and a flood of them costs a counter,
   * not a row each. Requests that reached the pipeline are recorded by it.
   */
  const recordRejection = (request: Request, status: number) => {
    if (status >= 500) return;
    const path = pathOf(request.url);
    if (!path.startsWith("/v1/") || path.startsWith("/v1/admin/")) return;
    ledger.countRejection(principals.maybeOf(request)?.keyId ?? "", status, now());
  };
  let draining = false;
  const authFailures = createAuthFailures({ now, ...deps.adminAuthFailures });
  const keyFailureWindowMs = deps.keyAuthFailures?.windowMs ?? 60_000;
  const sessionChecks = createSessionChecks(now);
  const keyFailures = { failures: createAuthFailures({ now, limit: KEY_FAILURES_PER_MINUTE, ...deps.keyAuthFailures, windowMs: keyFailureWindowMs }), windowMs: keyFailureWindowMs };

  // The OpenAPI document describes what was built (read on its first request). Without an admin
  // token the admin routes are 404s, but the document still describes them.
  const documented = () => (deps.adminToken ? app.routes : [...app.routes, ...adminRoutes({ accounts, keys, ledger, usage, breakdown, adminToken: "-", now, retryWhileBusy }).routes]);
  // Normalising copies every body to drop fields its schema does not list (25 µs for a
  // 200-message conversation). Our schemas say `additionalProperties: true` instead, so the copy
  // changed nothing. It is the app's setting that applies to every route.
  // Bodies still arriving (limits/body-budget.ts). One body of the largest size always fits a key's
  // share, a key's share fits its account's, and an account's fits everyone's. Requests without a
  // key (the console's, before its session is read) count per address in a small pool of their
  // own: the console's bodies are a few hundred bytes, and an anonymous sender must not be able to
  // fill the tenants' total. The admin token's requests are not counted.
  const bodyPerKey = Math.max(limits.body_per_key_bytes, limits.max_body_bytes);
  const bodyPerAccount = Math.max(limits.body_per_account_bytes, bodyPerKey);
  const keyShares = createBodyBudget({ perHolderBytes: bodyPerKey, totalBytes: Number.POSITIVE_INFINITY });
  const accountShares = createBodyBudget({ perHolderBytes: bodyPerAccount, totalBytes: Math.max(limits.body_total_bytes, bodyPerAccount) });
  const addressShares = createBodyBudget({ perHolderBytes: ANONYMOUS_BODY_BYTES_PER_ADDRESS, totalBytes: ANONYMOUS_BODY_BYTES });
  const smallAddressShares = createBodyBudget({ perHolderBytes: SMALL_ANONYMOUS_BYTES_PER_ADDRESS, totalBytes: SMALL_ANONYMOUS_BYTES });
  const bodySharesOf = (request: Request, server: BodyServer): BodyShare[] | undefined => {
    const key = principals.maybeOf(request);
    if (key) return [{ budget: keyShares, holder: key.keyId, level: "key" }, { budget: accountShares, holder: key.accountId, level: "account" }];
    // Only an admitted admin request reaches here on an admin path (the gate answers the others).
    if (pathOf(request.url).startsWith("/v1/admin/")) return undefined;
    const declared = request.headers.get("content-length");
    const small = declared !== null && Number(declared) <= SMALL_ANONYMOUS_BODY;
    return [{ budget: small ? smallAddressShares : addressShares, holder: addressBlock(server?.requestIP(request)?.address ?? "unknown"), level: "address" }];
  };
  const parseTurns = createParseTurns({ maxHoldMs: deps.parseTurnMaxHoldMs });
  // Connections per client address while descriptors run short, and idle ones closed near the
  // limit (limits/connection-guard.ts); its watchdog runs while the server listens. A connection
  // idle past connection_idle_ms is closed at Bun's next timer check (every 4 s).
  const connectionGuard = createConnectionGuard({
    perAddress: deps.settings.server.max_connections_per_address,
    windowMs: deps.settings.server.connection_idle_ms + 4_000,
    limit: readOpenFilesLimit(),
  });
  const front = new Elysia({ name: "switchyard", normalize: false })
    .use(errorsPlugin(log, recordRejection, (request, status, error) => tracker.responded(request, status, error), isStoreUnavailable))
    .use(admissionPlugin({
      keys,
      principals,
      limiter,
      defaultPerMinute: deps.settings.limits.requests_per_minute,
      defaultAccountPerMinute: deps.settings.limits.account_requests_per_minute,
      maxBodyBytes: deps.settings.limits.max_body_bytes,
      onRejected: recordRejection,
      onAnswered: (request, status) => tracker.responded(request, status),
      onArrival: assignRequestId(tracker),
      // The admin token is checked on arrival too, before an admin body is read.
      admin: deps.adminToken ? adminGate({ adminToken: deps.adminToken, now, log, authFailures }) : undefined,
      // Changes to the console's API from another site are refused on arrival, before their bodies are read.
      console: consoleStore ? (request, server) => sessionChecks.gate(request, server) ?? consoleGate(request) : undefined,
      // A key whose token counts fill its share is refused before its next count's body is read.
      countsBusy: (keyId, bodyBytes, accountId) => counts.busy(keyId, bodyBytes, accountId),
      // A count its rate buckets let in takes its body's bytes from its account's minute.
      countBytes: (accountId, bodyBytes) => {
        const waitMs = countBytes.take(accountId, bodyBytes);
        if (waitMs === undefined) return undefined;
        const retryAfterS = Math.max(1, Math.ceil(waitMs / 1000));
        return { message: `Token counts are limited to ${countBytesPerMinute} bytes of request body a minute for this account (all its keys together). Retry after ${retryAfterS} s.`, retryAfterS };
      },
      cors: corsPolicy(deps.settings.server.cors_origins),
      connections: { guard: connectionGuard, now },
      keyFailures,
    }))
    .use(jsonBodyPlugin({
      maxBytes: limits.max_body_bytes,
      sharesOf: bodySharesOf,
      timeoutMs: limits.body_timeout_ms,
      schemaOf: (path) => LARGE_BODY_SCHEMAS[path],
      // A tenant's large bodies wait their turn rather than hold the thread (limits/parse-turns.ts).
      turns: parseTurns,
      // Token counts take none: their bodies already take bytes from their account's minute
      // (count_tokens_account_bytes_per_minute), and their counting takes turns in the count queue.
      turnOf: (request) => {
        const key = principals.maybeOf(request);
        return key && !COUNT_PATHS.has(pathOf(request.url)) ? { key: key.keyId, account: key.accountId } : undefined;
      },
    }))
    // The answering routes close their own request traces (see closeTracesHook): before the hook.
    .use(chatCompletionsRoute(forwardDeps))
    .use(messagesRoute({ ...forwardDeps, counts }))
    .use(responsesRoute({ ...forwardDeps, responseStore, counts, turns: parseTurns }))
    .use(embeddingsRoute(forwardDeps));
  if (ops.metrics || ops.accessLog.enabled) front.onAfterResponse(closeTracesHook(tracker));
  const app = front
    .use(healthRoutes({ ledger, draining: () => draining, limiter: deps.limiter, keyless, keyPools }))
    .use(ops.metrics ? metricsRoute({ expose: () => exposeMetrics(), token: ops.metricsToken }) : new Elysia({ name: "switchyard/no-metrics" }))
    .use(modelsRoute(catalogue, principals))
    .use(keyRoute({ accounts, ledger, defaultPerMinute: deps.settings.limits.requests_per_minute, defaultMaxConcurrent: deps.settings.limits.max_concurrent_requests ?? null,
      defaultAccountPerMinute: deps.settings.limits.account_requests_per_minute ?? null, defaultAccountMaxConcurrent: deps.settings.limits.account_max_concurrent_requests ?? null,
      defaultAccountTokensPerMinute: deps.settings.limits.account_tokens_per_minute ?? null, principals }))
    .use(openApiRoute(documented));
  // The web console (http/console/): its own paths under /console, nothing on the /v1 path.
  // Before the admin routes, for the bearer plugin's reason above.
  if (consoleStore) {
    const modelHealth = createModelHealth({ metrics: () => tracker.metrics, models: deps.settings.models.map((m) => m.id), now, startedAt: now() });
    app.use(consolePageRoutes()).use(consoleApiRoutes({
      ops: adminOperations({ accounts, keys, ledger, usage, breakdown, now, retryWhileBusy, changed, knownModels }),
      store: consoleStore,
      adminToken: deps.adminToken,
      models: deps.settings.models,
      health: modelHealth,
      vendorKeys: () => keyPools.list(),
      probeVendorKey: (provider, key) => keyPools.probeNow(provider, key),
      signIns: createSignInAttempts({ now, ...deps.consoleSignIns }),
      passwords: passwordHasher(deps.consolePasswordCost),
      now,
      log,
      keyAccount: async (keyId) => (await accounts.spendStatus("key", keyId))?.accountId ?? null,
      sessionChecks,
      // Shared through Redis with the API's buckets: every process and replica counts one.
      holderRate: (accountId) => limiter.take(`console:${accountId}`, HOLDER_CONSOLE_REQUESTS_PER_MINUTE),
      defaultLimits: {
        key_requests_per_minute: deps.settings.limits.requests_per_minute,
        key_max_concurrent_requests: deps.settings.limits.max_concurrent_requests ?? null,
        account_requests_per_minute: deps.settings.limits.account_requests_per_minute ?? null,
        account_max_concurrent_requests: deps.settings.limits.account_max_concurrent_requests ?? null,
        account_tokens_per_minute: deps.settings.limits.account_tokens_per_minute ?? null,
      },
    }));
  }
  // Composed now, before the admin routes: Elysia composes a route on its first request with what
  // the app's hooks read by then, and a global hook that reads `headers` (as @elysiajs/bearer's
  // derive did when the admin routes used it) makes every route copy all request headers into an
  // object per request (`headers.toJSON()`, 1.2 % of a non-stream request's CPU in a profile).
  for (const route of app.routes) route.compile();
  app.use(adminRoutes({ accounts, keys, ledger, usage, breakdown, adminToken: deps.adminToken, now, retryWhileBusy, changed, log, console: consoleStore, vendorKeys: keyPools, knownModels }));
  // Route labels are the paths served, known once every route is registered.
  if (ops.metrics) {
    tracker.metrics = createGatewayMetrics({
      routes: app.routes.map((r) => r.path),
      models: deps.settings.models.map((m) => m.id),
      providers: [...deps.settings.providers.keys()],
      ledger,
      limiter: deps.limiter,
      inflight,
      now,
      alerts,
      keyPools,
      connections: connectionGuard.counts,
    });
  }
  app.onStart(() => keyPools.start());
  app.onStop(() => keyPools.stop());
  let stopWatchingFiles: (() => void) | undefined;
  app.onStart(() => {
    if (app.server) stopWatchingFiles = watchOpenFiles({ guard: connectionGuard, server: app.server, log, now });
  });
  app.onStop(() => stopWatchingFiles?.());
  // A thread the app made is the app's to end; one handed in is its giver's.
  if (!deps.embeddingsThread) app.onStop(() => embeddingsThread.stop());
  // Delivery starts with the server (after a start-up check) and stops with it.
  if (alerts) {
    const started = alerts;
    app.onStart(() => started.start());
    app.onStop(() => void started.stop());
  }
  function exposeMetrics(): string | undefined | Promise<string> {
    const own = tracker.metrics?.expose();
    return own !== undefined && deps.gatherMetrics ? deps.gatherMetrics(own) : own;
  }
  const services = {
    /** This process's own exposition (a worker's part of `/metrics` across workers). */
    ownMetrics: () => tracker.metrics?.expose() ?? "",
    /** Spend alerts, when configured: `checked()` waits for detection, `stop()` ends delivery. */
    alerts,
    accounts,
    keys,
    ledger,
    catalogue,
    inflight,
    upstream,
    tracker,
    keyPools,
    /** Free token counts waiting for or in the tokenizer. */
    counts,
    /** Large bodies' turns, and requests that bring in stored answers (limits/parse-turns.ts). */
    parseTurns,
    /** The tokenizer; a stop past its grace makes it answer by the rule of thumb (`hurry`). */
    tokenizer,
    /** Where large embeddings answers are read. */
    embeddingsThread,
    /** Resolves once every started request is settled and its settlement written. */
    async settled(): Promise<void> {
      await inflight.idle();
      await ledger.flush();
    },
    /** `/ready` answers 503 from now on, so load balancers stop sending requests. */
    drain(): void {
      draining = true;
    },
  };
  return Object.assign(app, { services });
}

export type App = ReturnType<typeof createApp>;
