import { describe, expect, test } from "bun:test";
import { createApp } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { silentLogger } from "../src/log/log.ts";

/**
 * The API routes are composed before the admin routes are added (src/app.ts): a global hook that
 * reads `headers` (as @elysiajs/bearer's derive did when the admin routes used it) makes a route
 * composed after it copy every request header into an object on each request, which none of the
 * API routes reads. The admin token is now checked on arrival (http/routes/admin.ts, adminGate).
 */
describe("route composition", () => {
  const settings = resolveSettings({
    providers: [{ id: "o", kind: "openai", base_url: "http://upstream.invalid/v1", api_key_env: "K" }],
    models: [{ id: "test/m", provider: "o", upstream_model: "m", category: "text", context_length: 8192, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }],
  }, { K: "sk-test" }, "test");
  const app = createApp({ db: openDatabase(":memory:"), settings, log: silentLogger, adminToken: "admin-token-for-compose-test-0123456789abcdef0123456789abcdef" });

  test("the API routes do not copy the request's headers into an object", () => {
    const api = app.routes.filter((r) => r.method === "POST" && ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"].includes(r.path));
    expect(api.map((r) => r.path).sort()).toEqual(["/v1/chat/completions", "/v1/embeddings", "/v1/messages", "/v1/responses"]);
    for (const route of api) expect(String(route.compile())).not.toContain("headers.toJSON");
  });

  test("the admin routes still read their bearer token", async () => {
    const account = await app.services.accounts.createAccount("compose", 1_000_000);
    const url = `http://localhost/v1/admin/accounts/${account.id}`;
    const denied = await app.handle(new Request(url, { headers: { authorization: "Bearer wrong" } }));
    expect(denied.status).toBe(401);
    const allowed = await app.handle(new Request(url, { headers: { authorization: "Bearer admin-token-for-compose-test-0123456789abcdef0123456789abcdef" } }));
    expect(allowed.status).toBe(200);
    expect(((await allowed.json()) as { id: string }).id).toBe(account.id);
  });
});
