import { Elysia, t } from "elysia";
import { bearer } from "@elysiajs/bearer";
import { timingSafeEqual } from "node:crypto";
import { KeyLimitError, type AccountStore, type KeyOptions } from "../accounts/account-store.ts";
import type { KeyResolver } from "../accounts/key-resolver.ts";
import type { Ledger } from "../billing/ledger.ts";
import { retryWhileBusy } from "../store/sqlite/sqlite-errors.ts";
import { creditsToMicro, MAX_CREDITS } from "../billing/money.ts";
import { breakdownCsv, parseUsageQuery, ReportTooLargeError, shapeBreakdown, type UsageBreakdown, type UsageQuery, type UsageReporter } from "../billing/usage-report.ts";
import { GatewayError } from "../pipeline/gateway-error.ts";

const Credits = t.Number({ minimum: 0, maximum: MAX_CREDITS });
/** Fields a body carries beyond these are ignored (a newer client's options), never refused. */
const open = { additionalProperties: true } as const;
const CreateAccount = t.Object({ name: t.String({ minLength: 1, maxLength: 200 }), credits: Credits }, open);
const CreateKey = t.Object({
  name: t.Optional(t.String({ maxLength: 200 })),
  rate_limit_per_minute: t.Optional(t.Integer({ minimum: 1, maximum: 1_000_000 })),
  /** ISO 8601 date-time after which the key stops working. */
  expires_at: t.Optional(t.String({ minLength: 10, maxLength: 40 })),
  /** Most this key may spend, in credits, over its life. */
  spend_limit: t.Optional(Credits),
}, open);
const TopUp = t.Object({ amount: t.Number({ exclusiveMinimum: 0, maximum: MAX_CREDITS }) }, open);
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

function micro(credits: number): number {
  try {
    return creditsToMicro(credits);
  } catch (err) {
    throw new GatewayError(400, "invalid_request", (err as Error).message);
  }
}

function instant(value: string | undefined, field: string, fallback: number): number {
  if (value === undefined || value === "") return fallback;
  const ms = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isFinite(ms)) throw new GatewayError(400, "invalid_request", `${field} must be an ISO 8601 date or epoch milliseconds.`);
  return ms;
}

export interface AdminDeps {
  accounts: AccountStore;
  keys: KeyResolver;
  ledger: Ledger;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
  adminToken: string | undefined;
  now: () => number;
}

/**
 * The admin API exists only when SWITCHYARD_ADMIN_TOKEN is set; without it every admin path
 * is a plain 404, so a gateway deployed without the token exposes nothing.
 */
export function adminRoutes(deps: AdminDeps) {
  const app = new Elysia({ name: "switchyard/admin", prefix: "/v1/admin" });
  const token = deps.adminToken;
  if (!token) return app;
  const expected = Buffer.from(token);

  const account = async (id: string) => {
    const found = await deps.accounts.describeAccount(id, (await deps.ledger.balance(id))?.heldMicro ?? 0);
    if (!found) throw new GatewayError(404, "not_found", "No such account.");
    return found;
  };

  return app
    // Header only: a token in a query string ends up in access logs.
    .use(bearer({ extract: { header: "Bearer", query: "", body: "" } }))
    .onBeforeHandle({ as: "local" }, ({ bearer: presented, request }) => {
      // The plugin also reads `?=<token>` (an empty query name) and "Bearer<token>" without the
      // space; only a real `Authorization: Bearer <token>` header counts.
      const fromHeader = request.headers.get("authorization")?.startsWith("Bearer ") ? presented : undefined;
      const given = Buffer.from(fromHeader ?? "");
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new GatewayError(401, "authentication", "Invalid admin token.");
      }
    })
    .post(
      "/accounts",
      async ({ body, set }) => {
        const credits = micro(body.credits);
        const created = await retryWhileBusy(() => deps.accounts.createAccount(body.name, credits));
        set.status = 201;
        return { id: created.id, name: created.name, balance: created.balance };
      },
      { body: CreateAccount },
    )
    .get("/accounts/:id", ({ params }) => account(params.id))
    .post(
      "/accounts/:id/credits",
      async ({ params, body }) => {
        const amount = micro(body.amount);
        if (!(await deps.ledger.topUp(params.id, amount))) throw new GatewayError(404, "not_found", "No such account.");
        const after = await account(params.id);
        return { id: after.id, balance: after.balance, reserved: after.reserved };
      },
      { body: TopUp },
    )
    .get("/accounts/:id/keys", async ({ params }) => ({ object: "list", data: (await account(params.id)).keys }))
    .post(
      "/accounts/:id/keys",
      async ({ body, params, set }) => {
        const options: KeyOptions = {
          name: body?.name ?? null,
          rateLimitPerMinute: body?.rate_limit_per_minute ?? null,
          expiresAt: body?.expires_at ? instant(body.expires_at, "expires_at", 0) : null,
          spendLimitMicro: body?.spend_limit === undefined ? null : micro(body.spend_limit),
        };
        let key;
        try {
          key = await retryWhileBusy(() => deps.accounts.createKey(params.id, options));
        } catch (err) {
          if (err instanceof KeyLimitError) throw new GatewayError(409, "invalid_request", err.message);
          throw err;
        }
        if (!key) throw new GatewayError(404, "not_found", "No such account.");
        set.status = 201;
        return key;
      },
      { body: t.Optional(CreateKey) },
    )
    .get("/accounts/:id/usage", async ({ params, query }) => {
      await account(params.id);
      const q = query as Record<string, string | undefined>;
      // Records are written in batches; a report asked for now includes the requests just finished.
      await deps.ledger.flush();
      return deps.usage(params.id, instant(q.from, "from", 0), instant(q.to, "to", deps.now() + 1));
    })
    .get("/usage", async ({ query }) => {
      let q: UsageQuery;
      try {
        q = parseUsageQuery(query, deps.now());
      } catch (err) {
        throw new GatewayError(400, "invalid_request", (err as Error).message);
      }
      await deps.ledger.flush();
      let rows;
      try {
        rows = await deps.breakdown(q);
      } catch (err) {
        if (err instanceof ReportTooLargeError) throw new GatewayError(400, "invalid_request", err.message);
        throw err;
      }
      if (query.format === "csv") {
        const name = `usage-${new Date(q.from).toISOString().slice(0, 10)}-${new Date(q.to).toISOString().slice(0, 10)}.csv`;
        return new Response(breakdownCsv(q, rows), { headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": `attachment; filename="${name}"` } });
      }
      return shapeBreakdown(q, rows);
    }, { query: UsageReportQuery })
    .delete("/keys/:id", async ({ params }) => {
      if (!(await retryWhileBusy(() => deps.accounts.revokeKey(params.id)))) throw new GatewayError(404, "not_found", "No such active key.");
      deps.keys.forget(params.id);
      return { id: params.id, revoked: true };
    });
}
