/**
 * Console session cookies that name no session, per client address (http/console/console-api.ts,
 * createSessionChecks). Each token a console request carries (up to 16) was a read of the shared
 * store with nothing to throttle it: a hostile-tenant probe's 64 connections of 16 made-up tokens
 * each, against one of two replicas on PostgreSQL, took the pool from another tenant's paid
 * requests on both (p50 48 → 144 ms, p99 119 → 649 ms). Past 300 tokens read in vain in a minute,
 * the address's unknown sessions are refused before any read; a session found before still works.
 */
import { afterAll, expect, test } from "bun:test";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import type { ConsoleStore } from "../../src/console/console-store.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { ConsoleClient } from "../helpers/console-client.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway, type Gateway } from "../helpers/gateway.ts";

const ADMIN = "console-session-flood-admin-token-0123456789";
const upstream = useFakeUpstream();
const missing = await postgresMissing();
const database = useTestDatabase();
let gw: Gateway | undefined;
let stores: SharedStores | undefined;
afterAll(async () => {
  await gw?.stop();
  await stores?.close(500);
});
const madeUp = () => Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");

if (missing) {
  test.skip(`console session floods on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  test("made-up session cookies from one address: 401 until 300 were read in vain, then 429 with no read; a session found before, and a sign-in, still work", async () => {
    const opened = await openPostgresStores(await database(), { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const reads = { count: 0 };
    const console = new Proxy(opened.console!, {
      get(target, name, receiver) {
        if (name !== "findSession") return Reflect.get(target, name, receiver);
        return (hash: string, now: number) => (reads.count++, target.findSession(hash, now));
      },
    }) as ConsoleStore;
    stores = { ...opened, console };
    gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, stores });
    const operator = new ConsoleClient(gw.url);
    await operator.signIn({ token: ADMIN });
    expect((await operator.call("GET", "/console/api/session")).status).toBe(200);

    reads.count = 0;
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++) {
      const cookie = Array.from({ length: 16 }, () => `switchyard_console=${madeUp()}`).join("; ");
      const res = await fetch(gw.url + "/console/api/session", { headers: { cookie } });
      statuses.push(res.status);
      if (res.status === 429) expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      await res.arrayBuffer();
    }
    // 300 tokens read in vain: the 19th request (tokens 289–304) passes the limit.
    expect(statuses.slice(0, 19).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(19).every((s) => s === 429)).toBe(true);
    expect(reads.count).toBe(19 * 16);

    // The operator's session, found before, works from the same address; made-up tokens beside it are not read.
    reads.count = 0;
    const planted = await fetch(gw.url + "/console/api/session", { headers: { cookie: `switchyard_console=${madeUp()}; ${operator.cookie}` } });
    expect(planted.status).toBe(200);
    await planted.arrayBuffer();
    expect(reads.count).toBe(1);
    // A browser with an ended session still signs in (its old cookie sent along), and its new session works.
    const again = new ConsoleClient(gw.url);
    again.cookie = `switchyard_console=${madeUp()}`;
    await again.signIn({ token: ADMIN });
    expect((await again.call("GET", "/console/api/session")).status).toBe(200);
  }, 30_000);
}
