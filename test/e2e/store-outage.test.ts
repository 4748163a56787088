/**
 * PostgreSQL unreachable under a running gateway: the admin API and GET /v1/key answer 503 with
 * Retry-After, as the model routes do, not 500 "failed to process" (a top-up during a database
 * stall was a 500 though it had committed; a scale-out probe, 2026-11-30); back, they answer again.
 */
import { afterAll, expect, test } from "bun:test";
import { openPostgresStores } from "../../src/store/stores.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway } from "../helpers/gateway.ts";
import { tcpProxy } from "../helpers/tcp-proxy.ts";
import { until } from "../helpers/until.ts";
import { openApiChecker } from "../helpers/openapi-check.ts";

const ADMIN = "admin-outage-0123456789abcdef0123456789abcdef";
const missing = await postgresMissing();
const database = useTestDatabase();
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

test.skipIf(missing !== undefined)(`with PostgreSQL cut, the admin API and GET /v1/key are 503s to retry, not 500s${missing ? ` (${missing})` : ""}`, async () => {
  const target = new URL(await database());
  const proxy = tcpProxy(Number(target.port || 5432));
  target.port = String(proxy.port);
  const stores = await openPostgresStores(target.toString(), { pool: { max: 2, connectTimeoutMs: 300, statementTimeoutMs: 500 }, ledger: { timeoutMs: 500, retryMaxMs: 50 } });
  const upstream = await startFakeUpstream();
  const gw = await startGateway({ upstreamUrl: upstream.url, stores, adminToken: ADMIN });
  cleanups.push(async () => {
    proxy.restore();
    await gw.stop();
    await stores.close(200);
    await upstream.stop();
    proxy.stop();
  });
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${gw.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json", "idempotency-key": "outage-top-up-1" }, body: body === undefined ? undefined : JSON.stringify(body) });
  const keyInfo = () => fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${gw.key}` } });
  expect((await admin("GET", "/accounts")).status).toBe(200);
  expect((await keyInfo()).status).toBe(200);

  // Each 503 is one /openapi.json describes for its route.
  const check = openApiChecker(await (await fetch(`${gw.url}/openapi.json`)).json());
  proxy.cut();
  for (const [what, call] of [
    ["list", () => admin("GET", "/accounts")],
    ["top-up", () => admin("POST", `/accounts/${gw.accountId}/credits`, { amount: 5 })],
    ["new account", () => admin("POST", "/accounts", { name: "during the outage", credits: 1 })],
    ["key", keyInfo],
  ] as const) {
    const res = await call();
    const text = await res.text();
    const body = JSON.parse(text) as { error: { message: string; type: string } };
    const { pathname, search } = new URL(res.url);
    const method = what === "list" || what === "key" ? "GET" : "POST";
    expect([what, check({ method, path: pathname + search, status: res.status, contentType: res.headers.get("content-type") ?? "", body: text })]).toEqual([what, undefined]);
    expect([what, res.status, res.headers.get("retry-after")]).toEqual([what, 503, "5"]);
    expect(body.error.message).toContain("cannot use its database right now");
    // Only a top-up takes an Idempotency-Key; another change is read back before it is sent again.
    expect([what, body.error.message.includes("Idempotency-Key")]).toEqual([what, what === "top-up"]);
    if (what === "new account") expect(body.error.message).toContain("read it back");
  }

  proxy.restore();
  await until("the admin API answers again", 10_000, async () => (await admin("GET", "/accounts")).status === 200);
}, 30_000);
