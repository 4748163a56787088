import type { KeyPools } from "../../providers/key-pools.ts";
import { addressBlock } from "../../limits/address-block.ts";
import { Elysia, t } from "elysia";
import { timingSafeEqual } from "node:crypto";
import { MAX_ACCOUNT_PAGE, type AccountStore } from "../../accounts/account-store.ts";
import { MAX_CONCURRENT_REQUESTS, MAX_KEY_MODELS, MAX_TOKENS_PER_MINUTE } from "../../accounts/admin-input.ts";
import type { KeyResolver } from "../../accounts/key-resolver.ts";
import type { KnownModels } from "../../accounts/model-access.ts";
import type { Ledger } from "../../billing/ledger.ts";
import { MAX_CREDITS } from "../../billing/money.ts";
import type { UsageBreakdown, UsageReporter } from "../../billing/usage-report.ts";
import { GatewayError } from "../../streaming/gateway-error.ts";
import { createAuthFailures, type AuthFailures } from "../../limits/auth-failures.ts";
import type { Logger } from "../../log/log.ts";
import type { ConsoleStore } from "../../console/console-store.ts";
import { issueInvite, publicOrigin } from "../../console/console-auth.ts";
import { errorResponse } from "../plugins/errors.ts";
import { unreadBodyHeaders } from "../plugins/json-body.ts";
import type { AdminServer } from "../plugins/admission.ts";
import { Login } from "../console/console-schemas.ts";
import { adminOperations } from "./admin-operations.ts";

const Credits = t.Number({ minimum: 0, maximum: MAX_CREDITS });
/** Fields a body carries beyond these are ignored (a newer client's options), never refused. */
const open = { additionalProperties: true } as const;
const Period = t.Union([t.Literal("day"), t.Literal("week"), t.Literal("month"), t.Null()], {
  error: "must be day, week, month, or null for a lifetime limit",
  description: "What the spend limit counts: charges since the start of the current UTC day, week (from Monday) or month; null: over the whole life.",
});
// Not t.Integer: Elysia's accepts numeric strings ("5") and turns them into numbers.
const RateLimit = t.Number({ minimum: 1, maximum: 1_000_000, multipleOf: 1 });
const ExpiresAt = t.String({ minLength: 10, maxLength: 40, description: "ISO 8601 date or date-time (UTC when no zone is given)." });
/** Checked in full by parseModelPatterns (accounts/admin-input.ts), as the CLI's --models is. */
const Models = t.Array(t.String({ maxLength: 201 }), {
  maxItems: MAX_KEY_MODELS,
  description: `The only models the key may use: exact model ids or \`prefix*\` patterns (\`["anthropic/*", "openai/gpt-4.1-mini"]\`), checked after aliases resolve; 1 to ${MAX_KEY_MODELS}. Absent or null: every model.`,
});
const MaxConcurrent = t.Number({ minimum: 1, maximum: MAX_CONCURRENT_REQUESTS, multipleOf: 1, description: "Most requests the key may have under way at once (streams until they end); more get 429. Absent or null: limits.max_concurrent_requests." });
/** What PATCH /v1/admin/keys/:id may change; absent fields stay as they are, null clears. */
export const PatchKey = t.Object({
  name: t.Optional(t.Union([t.String({ maxLength: 200 }), t.Null()], { error: "must be a string of at most 200 characters, or null" })),
  spend_limit: t.Optional(t.Union([Credits, t.Null()], { error: `must be a number of credits from 0 to ${MAX_CREDITS} (at most 6 decimals), or null for none` })),
  spend_limit_period: t.Optional(Period),
  rate_limit_per_minute: t.Optional(t.Union([RateLimit, t.Null()], { error: "must be a whole number from 1 to 1000000, or null for the gateway's default" })),
  expires_at: t.Optional(t.Union([ExpiresAt, t.Null()], { error: "must be an ISO 8601 date, or null for never" })),
  models: t.Optional(t.Union([Models, t.Null()], { error: `must be a list of 1 to ${MAX_KEY_MODELS} model ids or prefix* patterns, or null for every model` })),
  max_concurrent_requests: t.Optional(t.Union([MaxConcurrent, t.Null()], { error: `must be a whole number from 1 to ${MAX_CONCURRENT_REQUESTS}, or null for the gateway's default` })),
}, open);
const AccountRateLimit = t.Optional(t.Union([RateLimit, t.Null()], {
  error: "must be a whole number from 1 to 1000000, or null for the gateway's default",
  description: "Requests a minute for all the account's keys together, beside each key's own limit; more get 429. Null: limits.account_requests_per_minute (unset: none).",
}));
const AccountMaxConcurrent = t.Optional(t.Union([MaxConcurrent, t.Null()], {
  error: `must be a whole number from 1 to ${MAX_CONCURRENT_REQUESTS}, or null for the gateway's default`,
  description: "Requests under way at once for all the account's keys together (streams until they end); more get 429. Null: limits.account_max_concurrent_requests (unset: none).",
}));
const AccountTokens = t.Optional(t.Union([t.Number({ minimum: 1, maximum: MAX_TOKENS_PER_MINUTE, multipleOf: 1 }), t.Null()], {
  error: `must be a whole number from 1 to ${MAX_TOKENS_PER_MINUTE}, or null for the gateway's default`,
  description: "Prompt and answer tokens a minute for all the account's keys together, as the vendors count them; a request is refused (429) while the minute's tokens are spent. Null: limits.account_tokens_per_minute (unset: none).",
}));
/** What PATCH /v1/admin/accounts/:id may change. */
export const PatchAccount = t.Object({
  name: t.Optional(t.String({ minLength: 1, maxLength: 200 })),
  spend_limit: t.Optional(t.Union([Credits, t.Null()], { error: `must be a number of credits from 0 to ${MAX_CREDITS} (at most 6 decimals), or null for none` })),
  spend_limit_period: t.Optional(Period),
  rate_limit_per_minute: AccountRateLimit,
  max_concurrent_requests: AccountMaxConcurrent,
  tokens_per_minute: AccountTokens,
  suspended: t.Optional(t.Boolean({
    error: "must be true (refuse every request of the account's keys with a 403 until it is resumed) or false (resume)",
    description: "true: every request of the account's keys is refused (403 permission_error) until it is resumed; answers under way finish. false: resume.",
  })),
}, open);
export const AccountListQuery = t.Object({
  limit: t.Optional(t.String({ maxLength: 10, description: `Page size, 1 to ${MAX_ACCOUNT_PAGE} (default 50).` })),
  cursor: t.Optional(t.String({ maxLength: 400, description: "The `next_cursor` of the page before." })),
  name: t.Optional(t.String({ maxLength: 200, description: "Only accounts whose name contains this (ASCII letters in any case)." })),
}, open);
export const CreateAccount = t.Object({
  name: t.String({ minLength: 1, maxLength: 200 }), credits: Credits, rate_limit_per_minute: AccountRateLimit, max_concurrent_requests: AccountMaxConcurrent,
  tokens_per_minute: AccountTokens,
}, open);
export const CreateKey = t.Object({
  name: t.Optional(t.String({ maxLength: 200 })),
  rate_limit_per_minute: t.Optional(RateLimit),
  /** ISO 8601 date-time after which the key stops working. */
  expires_at: t.Optional(t.String({ minLength: 10, maxLength: 40 })),
  /** Most this key may spend, in credits, over its life or per `spend_limit_period`. */
  spend_limit: t.Optional(Credits),
  spend_limit_period: t.Optional(Period),
  models: t.Optional(t.Union([Models, t.Null()])),
  max_concurrent_requests: t.Optional(t.Union([MaxConcurrent, t.Null()])),
}, open);
/** Refusal of an invite for a login another account holds. */
export const LOGIN_TAKEN = "That login is another account's, or another account has an open invite for it (cancel that invite first): pick another. (A login of this account is sent a new link to set a new password.)";

/** `POST /v1/admin/accounts/:id/invites`: the login the account holder will sign in with. */
export const CreateInvite = t.Object({ login: Login }, open);
export const TopUp = t.Object({ amount: t.Number({ exclusiveMinimum: 0, maximum: MAX_CREDITS }) }, open);
const Instant = (description: string) => t.Optional(t.String({ maxLength: 40, description }));
export const UsageReportQuery = t.Object({
  from: Instant("Start of the range (inclusive): ISO 8601 or epoch ms. Default: 30 days before `to`, at the start of a period."),
  to: Instant("End of the range (exclusive): ISO 8601 or epoch ms. Default: now."),
  group_by: t.Optional(t.String({ maxLength: 40, description: "Comma-separated: account, key, model (default all three). Rows are split by these and the period." })),
  granularity: t.Optional(t.Union([t.Literal("day"), t.Literal("hour")], { description: "Period of each row, in UTC. Default day." })),
  format: t.Optional(t.Union([t.Literal("json"), t.Literal("csv")], { description: "Default json." })),
  account_id: t.Optional(t.String({ maxLength: 100, description: "Only this account." })),
  key_id: t.Optional(t.String({ maxLength: 100, description: "Only this key." })),
  model: t.Optional(t.String({ maxLength: 200, description: "Only this model id." })),
}, open);

export interface AdminDeps {
  accounts: AccountStore;
  keys: KeyResolver;
  ledger: Ledger;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
  adminToken: string | undefined;
  now: () => number;
  /**
   * Runs an account or key write, retrying while another connection holds the store's write lock
   * (store/sqlite/sqlite-errors.ts, `retryWhileBusy`): the store is app.ts's to know, not a route's.
   */
  retryWhileBusy: <T>(write: () => T) => Promise<T>;
  /**
   * Tells this process's caches that an admin write changed rows they copied (a key's limits, an
   * account's): on SQLite the change watch sees only other connections' commits, not ours.
   */
  changed?: () => void;
  /** Told of each failed admin authentication (address and path, never what was presented). */
  log?: Logger;
  /** Failed authentications per address (default: 10 a minute, then 429). */
  authFailures?: AuthFailures;
  /** The console's store, for invites; without it (SWITCHYARD_CONSOLE=off) the invite route is a 404. */
  console?: ConsoleStore;
  /** Vendor key pools: their keys' conditions, and a probe an operator asks for. */
  vendorKeys?: Pick<KeyPools, "list" | "probeNow" | "enable">;
  /** The configured models, which a key's model list is checked against (admin-operations.ts). */
  knownModels?: KnownModels;
}

/** Requests the admin gate let through: the routes refuse any other (a gate left unwired). */
const admitted = new WeakSet<Request>();

/**
 * The admin token check, run by the admission plugin when a `/v1/admin/` request arrives, before
 * its body is read: a client without the token is answered 401 (429 past 10 failures a minute from
 * its address) whatever it sends, and a large body still arriving is not received.
 */
/** The idle timeout of a connection that carried an admitted admin request, in seconds. */
export const ADMIN_IDLE_SECONDS = 60;

export function adminGate(deps: Pick<AdminDeps, "adminToken" | "now" | "log" | "authFailures">): (request: Request, server: AdminServer) => Response | undefined {
  const expected = Buffer.from(deps.adminToken ?? "");
  const failures = deps.authFailures ?? createAuthFailures({ now: deps.now });
  return (request, server) => {
    // Only a real `Authorization: Bearer <token>` header counts: a token in a query string ends up in access logs.
    const header = request.headers.get("authorization");
    const given = Buffer.from(header?.startsWith("Bearer ") ? header.slice(7) : "");
    if (expected.length > 0 && given.length === expected.length && timingSafeEqual(given, expected)) {
      admitted.add(request);
      // An operator's report may run long (PostgreSQL's statement timeout for reports is 30 s): its
      // connection gets more than the short idle timeout of connections with nothing under way,
      // which cuts a GET still being answered. Only once the token is good.
      server?.timeout?.(request, ADMIN_IDLE_SECONDS);
      return undefined;
    }
    // The socket's address, not X-Forwarded-For: a header a scanner writes would let it pick a new address per try.
    const address = server?.requestIP(request)?.address ?? "unknown";
    const path = new URL(request.url).pathname;
    // Counted by block: an IPv6 host holds a whole /64 (limits/address-block.ts).
    const verdict = failures.failed(addressBlock(address));
    deps.log?.("warn", "admin authentication failed", { address, path, throttled: verdict.throttled });
    if (verdict.throttled) {
      return errorResponse(false, 429, "rate_limit", `Too many failed admin authentications from this address. Retry after ${verdict.retryAfterSeconds} s.`,
        { "retry-after": String(verdict.retryAfterSeconds), ...unreadBodyHeaders(request) });
    }
    return errorResponse(false, 401, "authentication", "Invalid admin token.", unreadBodyHeaders(request));
  };
}

/**
 * The admin API exists only when SWITCHYARD_ADMIN_TOKEN is set; without it every admin path
 * is a plain 404, so a gateway deployed without the token exposes nothing. The token is checked
 * by adminGate (wired into the admission plugin), before any body is read.
 */
export function adminRoutes(deps: AdminDeps) {
  const app = new Elysia({ name: "switchyard/admin", prefix: "/v1/admin" });
  if (!deps.adminToken) return app;

  const ops = adminOperations(deps);

  return app
    // Runs after the body was parsed, so it is not the check itself: it keeps the routes shut if
    // they were ever mounted without the gate.
    .onBeforeHandle({ as: "local" }, ({ request }) => {
      if (!admitted.has(request)) throw new GatewayError(401, "authentication", "Invalid admin token.");
    })
    .post("/accounts", async ({ body, set }) => {
      const created = await ops.createAccount(body);
      set.status = 201;
      return created;
    }, { body: CreateAccount })
    .get("/accounts", ({ query }) => ops.listAccounts(query), { query: AccountListQuery })
    .get("/accounts/:id", ({ params }) => ops.account(params.id))
    .patch("/accounts/:id", ({ params, body }) => ops.patchAccount(params.id, body), { body: PatchAccount })
    .post("/accounts/:id/credits", ({ params, body, headers }) => ops.topUp(params.id, body.amount, headers["idempotency-key"]), { body: TopUp })
    .post("/accounts/:id/debits", ({ params, body, headers }) => ops.debit(params.id, body.amount, headers["idempotency-key"]), { body: TopUp })
    .get("/accounts/:id/keys", async ({ params }) => ({ object: "list", data: (await ops.account(params.id)).keys }))
    .post("/accounts/:id/keys", async ({ body, params, set }) => {
      const key = await ops.createKey(params.id, body ?? undefined);
      set.status = 201;
      return key;
    }, { body: t.Optional(CreateKey) })
    .post("/accounts/:id/invites", async ({ params, body, request, set }) => {
      if (!deps.console) throw new GatewayError(404, "not_found", "The console is off (SWITCHYARD_CONSOLE=off): there is nothing to invite to.");
      await ops.accountFacts(params.id);
      const invite = await issueInvite(deps.console, { accountId: params.id, login: body.login, now: deps.now(), origin: publicOrigin(request) });
      if (!invite) throw new GatewayError(409, "invalid_request", LOGIN_TAKEN);
      set.status = 201;
      return invite;
    }, { body: CreateInvite })
    .get("/accounts/:id/logins", async ({ params }) => {
      if (!deps.console) throw new GatewayError(404, "not_found", "The console is off (SWITCHYARD_CONSOLE=off): there are no logins.");
      await ops.accountFacts(params.id);
      return deps.console.listLogins(params.id, deps.now());
    })
    .delete("/accounts/:id/logins/:login", async ({ params }) => {
      if (!deps.console) throw new GatewayError(404, "not_found", "The console is off (SWITCHYARD_CONSOLE=off): there are no logins.");
      await ops.accountFacts(params.id);
      if (!(await deps.console.removeLogin(params.id, params.login))) throw new GatewayError(404, "not_found", "The account has no such login or invite.");
      return { account_id: params.id, login: params.login, removed: true };
    })
    .delete("/accounts/:id/invites/:login", async ({ params }) => {
      if (!deps.console) throw new GatewayError(404, "not_found", "The console is off (SWITCHYARD_CONSOLE=off): there are no invites.");
      await ops.accountFacts(params.id);
      if (!(await deps.console.cancelInvites(params.id, params.login, deps.now()))) throw new GatewayError(404, "not_found", "The account has no open invite for that login.");
      return { account_id: params.id, login: params.login, cancelled: true };
    })
    .get("/accounts/:id/usage", ({ params, query }) => ops.accountUsage(params.id, query as Record<string, string | undefined>))
    .get("/usage", ({ query }) => ops.usageReport(query), { query: UsageReportQuery })
    .patch("/keys/:id", ({ params, body }) => ops.patchKey(params.id, body), { body: PatchKey })
    .delete("/keys/:id", ({ params }) => ops.revokeKey(params.id))
    // Vendor keys by env name (never a value): what each is doing, and "try it now" once the
    // vendor took a refused key back, instead of waiting up to 5 minutes for its scheduled probe.
    .get("/vendor-keys", async () => ({ object: "list", data: (await deps.vendorKeys?.list()) ?? [] }))
    .post("/vendor-keys/:provider/:key/probe", async ({ params }) => {
      const probed = await deps.vendorKeys?.probeNow(params.provider, params.key);
      if (!probed) throw new GatewayError(404, "not_found", "No such pooled vendor key: GET /v1/admin/vendor-keys lists them (provider id and the key's env name).");
      if (probed === "busy") throw new GatewayError(409, "invalid_request", "A probe of this key is under way: its outcome is the key's state in a few seconds (GET /v1/admin/vendor-keys).");
      return probed;
    }, { params: t.Object({ provider: t.String({ maxLength: 200 }), key: t.String({ maxLength: 200 }) }) })
    // Usable at once, without a probe: a key whose probe cannot pass (it may not list models).
    .post("/vendor-keys/:provider/:key/enable", async ({ params }) => {
      const enabled = await deps.vendorKeys?.enable(params.provider, params.key);
      if (!enabled) throw new GatewayError(404, "not_found", "No such pooled vendor key: GET /v1/admin/vendor-keys lists them (provider id and the key's env name).");
      return enabled;
    }, { params: t.Object({ provider: t.String({ maxLength: 200 }), key: t.String({ maxLength: 200 }) }) });
}
