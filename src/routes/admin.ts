import { Elysia, t } from "elysia";
import { bearer } from "@elysiajs/bearer";
import { timingSafeEqual } from "node:crypto";
import type { AccountStore } from "../accounts/account-store.ts";
import type { KeyResolver } from "../accounts/key-resolver.ts";
import { creditsToMicro, MAX_CREDITS } from "../billing/money.ts";
import { GatewayError } from "../pipeline/gateway-error.ts";

const CreateAccount = t.Object({ name: t.String({ minLength: 1, maxLength: 200 }), credits: t.Number({ minimum: 0, maximum: MAX_CREDITS }) });
const CreateKey = t.Object({ name: t.Optional(t.String({ maxLength: 200 })) });

/**
 * The admin API exists only when SWITCHYARD_ADMIN_TOKEN is set; without it every admin path
 * is a plain 404, so a gateway deployed without the token exposes nothing.
 */
export function adminRoutes(deps: { accounts: AccountStore; keys: KeyResolver; adminToken: string | undefined }) {
  const app = new Elysia({ name: "switchyard/admin", prefix: "/v1/admin" });
  const token = deps.adminToken;
  if (!token) return app;
  const expected = Buffer.from(token);

  return app
    // Header only: a token in a query string ends up in access logs.
    .use(bearer({ extract: { header: "Bearer", query: "", body: "" } }))
    .onBeforeHandle({ as: "local" }, ({ bearer: presented }) => {
      const given = Buffer.from(presented ?? "");
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new GatewayError(401, "authentication", "Invalid admin token.");
      }
    })
    .post(
      "/accounts",
      ({ body, set }) => {
        let micro: number;
        try {
          micro = creditsToMicro(body.credits);
        } catch (err) {
          throw new GatewayError(400, "invalid_request", (err as Error).message);
        }
        const account = deps.accounts.createAccount(body.name, micro);
        set.status = 201;
        return { id: account.id, name: account.name, balance: account.balance };
      },
      { body: CreateAccount },
    )
    .post(
      "/accounts/:id/keys",
      ({ body, params, set }) => {
        const key = deps.accounts.createKey(params.id, body?.name ?? null);
        if (!key) throw new GatewayError(404, "not_found", "No such account.");
        set.status = 201;
        return key;
      },
      { body: t.Optional(CreateKey) },
    )
    .delete("/keys/:id", ({ params }) => {
      if (!deps.accounts.revokeKey(params.id)) throw new GatewayError(404, "not_found", "No such active key.");
      deps.keys.forget(params.id);
      return { id: params.id, revoked: true };
    });
}
