import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { runAdmin } from "../../src/cli/admin.ts";
import type { Logger } from "../../src/log/log.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { ConsoleClient } from "../helpers/console-client.ts";

const ADMIN = "admin-console-0123456789abcdef0123456789abcdef";
const PASSWORD = "correct horse battery staple";
const HOUR = 3_600_000;
const upstream = useFakeUpstream();

/** Everything the gateway logged, as text, to look for secrets in. */
function recordingLogger(): { log: Logger; text: () => string } {
  const lines: string[] = [];
  return { log: (level, message, fields) => lines.push(JSON.stringify({ level, message, fields })), text: () => lines.join("\n") };
}

const chat = (gw: Gateway, key: string, requestId: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-request-id": requestId },
    body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "the secret prompt text" }] }),
  });

/** A POST sent from `from` (a loopback address of its own: the gateway counts sign-ins per address); its status. */
function rawPost(base: string, path: string, body: string, from: string): Promise<number> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    let received = "";
    const socket = net.connect({ host: hostname, port: Number(port), localAddress: from }, () => {
      socket.write(`POST ${path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    });
    socket.on("data", (d) => (received += d.toString("latin1")));
    socket.on("close", () => resolve(Number(received.split(" ")[1] ?? 0)));
    socket.on("error", reject);
  });
}

/** An operator signed in, an account made and topped up, its holder invited, accepted and signed in. */
async function holderSetup(gw: Gateway, name: string, login: string) {
  const operator = new ConsoleClient(gw.url);
  await operator.signIn({ token: ADMIN });
  const account = await operator.json("POST", "/console/api/accounts", { name, credits: 10 }, 201);
  await operator.json("POST", `/console/api/accounts/${account.id}/credits`, { amount: 90 });
  const invite = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login }, 201);
  const holder = new ConsoleClient(gw.url);
  await holder.acceptInvite(invite.url, PASSWORD);
  return { operator, holder, account, invite };
}

type Setup = {
  gw: Gateway; clock: { now: number }; logs: () => string; stop(): Promise<void>;
  /** Writes a holder's login straight into the store, as a release before logins were lower-cased kept it (capitals and all). */
  legacyLogin(login: string, accountId: string, password: string): Promise<void>;
  /** Deletes a login's row only, its sessions left: what a removal looks like to a sign-in whose password check was under way. */
  dropUserRow(login: string): Promise<void>;
};

function consoleSuite(name: string, start: () => Promise<Setup>) {
  describe(`console API on ${name}`, () => {
    test("operator: sign-in with the admin token sets an HttpOnly SameSite=Strict cookie (Secure behind HTTPS), a wrong token is 401", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        const session = await operator.signIn({ token: ADMIN });
        expect(session).toMatchObject({ kind: "operator", account_id: null });
        expect(operator.setCookies[0]).toMatch(/^switchyard_console=[A-Za-z0-9_-]{43}; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=43200$/);
        const behindTls = new ConsoleClient(s.gw.url);
        const res = await behindTls.call("POST", "/console/api/sign-in", { token: ADMIN }, { "x-forwarded-proto": "https", origin: s.gw.url.replace("http:", "https:") });
        expect(res.status).toBe(200);
        // Over HTTPS, `__Host-`: no sibling subdomain or plain-HTTP port of this host can set one beside it.
        expect(behindTls.setCookies[0]).toMatch(/^__Host-switchyard_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=43200; Secure$/);
        const overTls = (cookie: string) => fetch(`${s.gw.url}/console/api/session`, { headers: { cookie, "x-forwarded-proto": "https" } }).then((r) => r.status);
        const token = behindTls.cookie.split("=")[1]!;
        expect(await overTls(`__Host-switchyard_console=${token}`)).toBe(200);
        // The plain name is not read over HTTPS: anyone on this host could have set it.
        expect(await overTls(`switchyard_console=${token}`)).toBe(401);
        const wrong = await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { token: ADMIN.replace("a", "b") });
        expect(wrong.status).toBe(401);
        expect(((await wrong.json()) as any).error.type).toBe("authentication_error");
        // Signed in: the operator's overview lists accounts.
        const overview = await operator.json("GET", "/console/api/overview");
        expect(overview.session.kind).toBe("operator");
        expect(overview.accounts.data.map((a: { id: string }) => a.id)).toContain(s.gw.accountId);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("invites: one-time, 7 days; the holder sets a password, signs in with it, and the invite cannot be used again", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        // The admin API makes invites too.
        const res = await fetch(`${s.gw.url}/v1/admin/accounts/${s.gw.accountId}/invites`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ login: "holder.one" }) });
        expect(res.status).toBe(201);
        const replaced = (await res.json()) as any;
        expect(replaced.url).toStartWith(`${s.gw.url}/console/#invite=`);
        expect(Date.parse(replaced.expires_at)).toBe(s.clock.now + 7 * 86_400_000);
        // The same login again is a new link that replaces the first; an unknown account is a 404.
        const invite = await operator.json("POST", `/console/api/accounts/${s.gw.accountId}/invites`, { login: "holder.one" }, 201);
        expect((await operator.call("POST", "/console/api/invites/check", { token: new URL(replaced.url).hash.slice(8) })).status).toBe(404);
        expect((await operator.call("POST", `/console/api/accounts/acct_nope/invites`, { login: "holder.two" })).status).toBe(404);

        const holder = new ConsoleClient(s.gw.url);
        const token = new URL(invite.url).hash.replace("#invite=", "");
        // Its page first asks what the link is for: the login to sign in with, until when.
        expect(await holder.json("POST", "/console/api/invites/check", { token })).toEqual({ login: "holder.one", expires_at: invite.expires_at, reset: false });
        expect((await holder.call("POST", "/console/api/invites/accept", { token, password: "short" })).status).toBe(400);
        const session = await holder.acceptInvite(invite.url, PASSWORD);
        expect(session).toMatchObject({ kind: "holder", login: "holder.one", account_id: s.gw.accountId });
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/accept", { token, password: PASSWORD })).status).toBe(404);
        // Used: its page says so before a password is typed.
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/check", { token })).status).toBe(404);
        // A login now taken cannot be invited to another account (for its own, an invite is a reset: see "logins").
        const elsewhere = await operator.json("POST", "/console/api/accounts", { name: "elsewhere", credits: 1 }, 201);
        expect((await operator.call("POST", `/console/api/accounts/${elsewhere.id}/invites`, { login: "holder.one" })).status).toBe(409);

        const again = new ConsoleClient(s.gw.url);
        expect((await again.call("POST", "/console/api/sign-in", { login: "holder.one", password: PASSWORD + "x" })).status).toBe(401);
        expect((await again.signIn({ login: "holder.one", password: PASSWORD })).account_id).toBe(s.gw.accountId);
        const overview = await again.json("GET", "/console/api/overview");
        expect(overview.account.id).toBe(s.gw.accountId);
        // The gateway's limits come with the account, so its view shows numbers where it and its keys set none.
        const defaults = { key_requests_per_minute: 1_000_000, key_max_concurrent_requests: null, account_requests_per_minute: null, account_max_concurrent_requests: null, account_tokens_per_minute: null };
        expect(overview.account.default_limits).toEqual(defaults);
        expect((await again.json("GET", `/console/api/accounts/${s.gw.accountId}`)).default_limits).toEqual(defaults);

        // A made-up or used link is refused before its password is hashed (argon2id, 64 MiB each: a
        // flood of them took the gateway's CPU); only a real one costs a hash.
        const hash = Bun.password.hash;
        let hashes = 0;
        Bun.password.hash = ((...args: Parameters<typeof hash>) => (hashes++, hash(...args))) as typeof hash;
        try {
          for (const made of ["made-up-link-0123456789", token]) {
            expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/accept", { token: made, password: PASSWORD })).status).toBe(404);
          }
          expect(hashes).toBe(0);
          const fresh = await operator.json("POST", `/console/api/accounts/${s.gw.accountId}/invites`, { login: "holder.hashed" }, 201);
          await new ConsoleClient(s.gw.url).acceptInvite(fresh.url, PASSWORD);
          expect(hashes).toBe(1);
        } finally {
          Bun.password.hash = hash;
        }

        // An invite older than 7 days no longer works.
        const late = await operator.json("POST", `/console/api/accounts/${s.gw.accountId}/invites`, { login: "holder.late" }, 201);
        s.clock.now += 7 * 86_400_000 + 1;
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/accept", { token: new URL(late.url).hash.slice(8), password: PASSWORD })).status).toBe(404);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("an account's page lists its credits opened with, added and taken back, newest first, to its holder and the operator; never another account's (a console probe: a top-up showed as a jump with nothing saying why)", async () => {
      const s = await start();
      try {
        const { operator, holder, account } = await holderSetup(s.gw, "credits co", "credits@example.com");
        await operator.json("POST", `/console/api/accounts/${account.id}/debits`, { amount: 2.5 });
        const expected = [{ kind: "debit", credits: -2.5 }, { kind: "top_up", credits: 90 }, { kind: "opening", credits: 10 }];
        const own = (await holder.json("GET", "/console/api/overview")).account;
        expect(own.credit_history.map((e: { kind: string; credits: number }) => ({ kind: e.kind, credits: e.credits }))).toEqual(expected);
        for (const e of own.credit_history) expect(e.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
        expect(own.balance).toBe(97.5);
        const seen = await operator.json("GET", `/console/api/accounts/${account.id}`);
        expect(seen.credit_history).toEqual(own.credit_history);
        const other = await operator.json("POST", "/console/api/accounts", { name: "other co", credits: 3 }, 201);
        expect((await operator.json("GET", `/console/api/accounts/${other.id}`)).credit_history.map((e: { kind: string; credits: number }) => [e.kind, e.credits])).toEqual([["opening", 3]]);
        expect((await holder.call("GET", `/console/api/accounts/${other.id}`)).status).toBe(404);
      } finally {
        await s.stop();
      }
    });

    test("an account holder sees only their own account: another's id is 404 by every console route, operator routes are 403", async () => {
      const s = await start();
      try {
        const { holder, operator, account } = await holderSetup(s.gw, "alice", "alice");
        const other = s.gw.accountId;
        const otherKey = s.gw.keyId;
        const status = async (method: string, path: string, body?: unknown) => (await holder.call(method, path, body)).status;
        expect(await status("GET", `/console/api/accounts/${account.id}`)).toBe(200);
        expect(await status("GET", `/console/api/accounts/${other}`)).toBe(404);
        expect(await status("POST", `/console/api/accounts/${other}/keys`, { name: "x" })).toBe(404);
        expect(await status("PATCH", `/console/api/keys/${otherKey}`, { spend_limit: 1 })).toBe(404);
        expect(await status("DELETE", `/console/api/keys/${otherKey}`)).toBe(404);
        expect(await status("GET", `/console/api/usage?account_id=${other}`)).toBe(404);
        expect(await status("GET", `/console/api/usage?key_id=${otherKey}`)).toBe(404);
        expect(await status("GET", `/console/api/requests?account_id=${other}`)).toBe(404);
        expect(await status("GET", "/console/api/accounts")).toBe(403);
        expect(await status("POST", "/console/api/accounts", { name: "mine", credits: 5 })).toBe(403);
        expect(await status("POST", `/console/api/accounts/${account.id}/credits`, { amount: 5 })).toBe(403);
        expect(await status("PATCH", `/console/api/accounts/${account.id}`, { spend_limit: 1 })).toBe(403);
        expect(await status("POST", `/console/api/accounts/${account.id}/invites`, { login: "mallory" })).toBe(403);
        // The prices, not the gateway's health, providers or vendor keys (the operator's).
        const prices = await holder.json("GET", "/console/api/catalogue");
        expect(prices.vendor_keys).toBeUndefined();
        expect(prices.data.length).toBeGreaterThan(0);
        for (const m of prices.data) expect(Object.keys(m).sort()).toEqual(["category", "context_length", "id", "pricing"]);
        // A holder sets names and spend limits on their keys, not the operator's rate limit.
        expect(await status("POST", `/console/api/accounts/${account.id}/keys`, { name: "fast", rate_limit_per_minute: 100000 })).toBe(403);
        expect(await status("POST", `/console/api/accounts/${account.id}/keys`, { name: "wide", models: ["*"] })).toBe(403);
        // A list naming a model the gateway does not have is refused, the operator told which.
        const typo = await operator.call("POST", `/console/api/accounts/${account.id}/keys`, { name: "typo", models: ["test/*", "test/gtp"] });
        expect(typo.status).toBe(400);
        expect(((await typo.json()) as any).error.message).toContain(`"test/gtp" matches no configured model`);
        // The operator limits a key to models; the holder sees the list on their key.
        const limited = await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "narrow", models: ["test/*"] }, 201);
        const mine = await holder.json("GET", `/console/api/accounts/${account.id}`);
        expect(mine.keys.find((k: { id: string }) => k.id === limited.id).models).toEqual(["test/*"]);
        expect(await status("PATCH", `/console/api/keys/${limited.id}`, { models: null })).toBe(403);
        // The admin API does not take a console session.
        expect((await fetch(`${s.gw.url}/v1/admin/accounts/${other}`, { headers: { cookie: holder.cookie } })).status).toBe(401);
        // The other account's requests never show in the holder's lists.
        await post(s.gw, "/v1/chat/completions", { model: FREE_MODEL, messages: [{ role: "user", content: "hi" }] });
        await s.gw.app.services.settled();
        const recent = await holder.json("GET", "/console/api/requests");
        expect(recent.data).toEqual([]);
        const usage = await holder.json("GET", `/console/api/usage?from=0&to=${Math.ceil((s.clock.now + 1) / HOUR) * HOUR}`);
        expect(usage.total.requests).toBe(0);
        // An hourly chart over millennia is refused, not built (it was 350 MB and seconds of a stalled gateway).
        const huge = await holder.call("GET", "/console/api/usage?from=0000-01-01&to=9999-12-31&granularity=hour");
        expect(huge.status).toBe(400);
        expect(((await huge.json()) as { error: { message: string } }).error.message).toContain("the console charts at most 50000");
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a key a holder makes is no wider than what the operator set on the account's keys, revoked ones included; where nothing is set, the defaults", async () => {
      const s = await start();
      try {
        const { holder, operator, account } = await holderSetup(s.gw, "hana", "hana");
        const summary = async (keyId: string) => (await holder.json("GET", `/console/api/accounts/${account.id}`)).keys.find((k: { id: string }) => k.id === keyId);
        const make = async () => summary((await holder.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "mine" }, 201)).id);
        const limits = (k: any) => [k.models === null ? null : [...k.models].sort(), k.rate_limit_per_minute, k.max_concurrent_requests];
        // Nothing set on any key yet: the holder's first key has the defaults, and the page says no limit.
        expect((await holder.json("GET", `/console/api/accounts/${account.id}`)).new_key).toEqual({});
        expect(limits(await make())).toEqual([null, null, null]);
        // The operator's keys: two models between them, 5 and 7 a minute, 1 and 2 at once. The
        // holder's earlier unrestricted key does not widen what a new one gets.
        const narrow = await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "narrow", models: ["test/gpt"], rate_limit_per_minute: 5, max_concurrent_requests: 1 }, 201);
        const wide = await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "other", models: ["test/claude", "test/gpt"], rate_limit_per_minute: 7, max_concurrent_requests: 2 }, 201);
        // The holder's page says so before the key is made (a console probe: only its row did, after), and the operator's page does not carry it.
        const said = (await holder.json("GET", `/console/api/accounts/${account.id}`)).new_key;
        expect({ ...said, models: [...said.models].sort() }).toEqual({ models: ["test/claude", "test/gpt"], rate_limit_per_minute: 7, max_concurrent_requests: 2 });
        expect((await holder.json("GET", "/console/api/overview")).account.new_key.rate_limit_per_minute).toBe(7);
        expect((await operator.json("GET", `/console/api/accounts/${account.id}`)).new_key).toBeUndefined();
        const made = await make();
        expect(limits(made)).toEqual([["test/claude", "test/gpt"], 7, 2]);
        // Revoking the operator's keys widens nothing.
        await holder.json("DELETE", `/console/api/keys/${narrow.id}`);
        await holder.json("DELETE", `/console/api/keys/${wide.id}`);
        expect(limits(await make())).toEqual([["test/claude", "test/gpt"], 7, 2]);
        // And the key is held to them: a model outside its list is a 403.
        const key = (await holder.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "used" }, 201)).key;
        const refused = await fetch(`${s.gw.url}/v1/chat/completions`, {
          method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: FREE_MODEL, messages: [{ role: "user", content: "hi" }] }),
        });
        expect(refused.status).toBe(403);
        await refused.arrayBuffer();
        // The operator's own keys are not held to it.
        const operators = await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "ops" }, 201);
        expect(limits(await summary(operators.id))).toEqual([null, null, null]);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("an account's view reads its keys a page at a time (in use, then the newest 50 revoked or expired), the rest by offset or search; a limit's change answers without keys; the admin API still lists all", async () => {
      const s = await start();
      try {
        const { operator, holder, account } = await holderSetup(s.gw, "paged keys co", "paged.holder");
        const made: string[] = [];
        for (let i = 0; i < 60; i += 10) {
          const keys = await Promise.all(Array.from({ length: 10 }, (_, j) => operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: `rotated ${i + j}` }, 201)));
          s.clock.now += 1_000;
          made.push(...keys.map((k: { id: string }) => k.id));
          await Promise.all(keys.map((k: { id: string }) => operator.json("DELETE", `/console/api/keys/${k.id}`)));
        }
        const live = await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "live" }, 201);
        const viewed = await operator.json("GET", `/console/api/accounts/${account.id}`);
        expect(viewed.keys).toHaveLength(51);
        expect(viewed.keys[0].id).toBe(live.id);
        expect(viewed.keys_page).toEqual({ active: 1, inactive: 60, next_offset: 50 });
        // Newest first: the last batch made leads the revoked ones.
        expect(new Set(viewed.keys.slice(1, 11).map((k: { id: string }) => k.id))).toEqual(new Set(made.slice(50)));
        // The holder's first view (the overview) is the same answer.
        expect((await holder.json("GET", "/console/api/overview")).account.keys_page).toEqual(viewed.keys_page);
        const rest = await operator.json("GET", `/console/api/accounts/${account.id}/keys?state=inactive&offset=50`);
        expect([rest.data.length, rest.total, rest.offset, rest.next_offset]).toEqual([10, 60, 50, null]);
        expect(new Set(rest.data.map((k: { id: string }) => k.id))).toEqual(new Set(made.slice(0, 10)));
        const found = await holder.json("GET", `/console/api/accounts/${account.id}/keys?search=ROTATED%2042`);
        expect(found.data.map((k: { name: string }) => k.name)).toEqual(["rotated 42"]);
        // Another account's keys are no holder's; nonsense is a 400 that says what is taken.
        expect((await holder.call("GET", `/console/api/accounts/${s.gw.accountId}/keys`)).status).toBe(404);
        expect((await operator.call("GET", "/console/api/accounts/acct_nope/keys")).status).toBe(404);
        for (const bad of ["limit=0", "limit=501", "offset=-1", "offset=1.5", "state=revoked"]) {
          const res = await operator.call("GET", `/console/api/accounts/${account.id}/keys?${bad}`);
          expect([bad, res.status]).toEqual([bad, 400]);
        }
        const patched = await operator.json("PATCH", `/console/api/accounts/${account.id}`, { spend_limit: 5 });
        expect(patched).toMatchObject({ id: account.id, spend_limit: 5, balance: 100 });
        expect(patched.keys).toBeUndefined();
        // The admin API's account, which scripts read, is unchanged: every key.
        const whole = await fetch(`${s.gw.url}/v1/admin/accounts/${account.id}`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json() as Promise<any>);
        expect(whole.keys).toHaveLength(61);
        expect((await operator.call("GET", `/console/api/usage?groups=some`)).status).toBe(400);
      } finally {
        await s.stop();
      }
    }, 60_000);

    test("a holder makes at most 20 keys a day (revoking them gives none back); the next is a 429 with when; the operator is not limited", async () => {
      const s = await start();
      try {
        const { holder, operator, account } = await holderSetup(s.gw, "churn", "churn");
        // Made and revoked in a loop, each new key would start with a full rate-limit bucket and no
        // requests under way: the churn that escaped both.
        for (let i = 0; i < 20; i++) {
          const made = await holder.json("POST", `/console/api/accounts/${account.id}/keys`, { name: `k${i}` }, 201);
          await holder.json("DELETE", `/console/api/keys/${made.id}`);
        }
        s.clock.now += 60 * 60_000;
        const refused = await holder.call("POST", `/console/api/accounts/${account.id}/keys`, { name: "k20" });
        expect(refused.status).toBe(429);
        // The first of the day's keys leaves the window in 23 hours.
        expect(Number(refused.headers.get("retry-after"))).toBe(23 * 3600);
        expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("20 keys of this account were made in the last 24 hours, by its holders and its operator (revoked ones included); its holders may make a key while fewer than 20 were: the next one in 1380 min.");
        // The operator still makes keys for the account.
        await operator.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "ops" }, 201);
        // A day after the first ones (a new sign-in: sessions last 12 hours), the holder may make keys again.
        s.clock.now += 23 * 3600_000 + 1;
        const later = new ConsoleClient(s.gw.url);
        await later.signIn({ login: "churn", password: PASSWORD });
        await later.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "next day" }, 201);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("usage's last=24h and last=30d end at the gateway's clock (a browser's clock minutes off lost the last minute's requests); anything else, or with from, to or granularity, is a 400", async () => {
      const s = await start();
      try {
        // Just after midnight UTC on the gateway's clock.
        s.clock.now = Math.ceil(s.clock.now / (24 * HOUR)) * 24 * HOUR + 30_000;
        const { holder, account } = await holderSetup(s.gw, "clock", "clock@example.com");
        const key = await holder.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "k" }, 201);
        expect((await chat(s.gw, key.key, "clock-req")).status).toBe(200);
        await s.gw.app.services.settled();
        const hourly = await holder.json("GET", "/console/api/usage?last=24h&group_by=model");
        expect([hourly.from, hourly.to, hourly.granularity, hourly.total.requests]).toEqual([new Date(s.clock.now - 30_000 - 23 * HOUR).toISOString(), new Date(s.clock.now - 30_000 + HOUR).toISOString(), "hour", 1]);
        const daily = await holder.json("GET", "/console/api/usage?last=30d&group_by=model");
        expect([daily.from, daily.to, daily.granularity, daily.total.requests]).toEqual([new Date(s.clock.now - 30_000 - 29 * 24 * HOUR).toISOString(), new Date(s.clock.now - 30_000 + 24 * HOUR).toISOString(), "day", 1]);
        for (const bad of ["last=7d", "last=24h&from=0", "last=30d&to=1", "last=24h&granularity=day"]) expect([bad, (await holder.call("GET", `/console/api/usage?${bad}`)).status]).toEqual([bad, 400]);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a holder's key works, its usage and requests match the usage API, and revoked in the console it gets 401 within a second", async () => {
      const s = await start();
      try {
        const { holder, account } = await holderSetup(s.gw, "bob", "bob@example.com");
        const key = await holder.json("POST", `/console/api/accounts/${account.id}/keys`, { name: "laptop", spend_limit: 50, spend_limit_period: "day" }, 201);
        expect(key.key).toMatch(/^svc-sk-/);
        for (let i = 0; i < 3; i++) expect((await chat(s.gw, key.key, `console-req-${i}`)).status).toBe(200);
        await s.gw.app.services.settled();
        const to = Math.ceil((s.clock.now + 1) / HOUR) * HOUR;
        const from = to - 24 * HOUR;
        const mine = await holder.json("GET", `/console/api/usage?from=${from}&to=${to}&granularity=hour&group_by=model`);
        const report = async (query: string): Promise<any> => (await fetch(`${s.gw.url}/v1/admin/usage?${query}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
        const api = await report(`from=${from}&to=${to}&granularity=hour&group_by=model&account_id=${account.id}`);
        const perHour = await report(`from=${from}&to=${to}&granularity=hour&group_by=&account_id=${account.id}`);
        expect(mine.total.requests).toBe(3);
        expect(mine.total.cost).toBeGreaterThan(0);
        expect(mine.total).toEqual(api.total);
        // The chart's figures: every hour of the range, each the report's own for that hour.
        const hourly = new Array(24).fill(0);
        for (const row of perHour.data) hourly[(Date.parse(row.period_start) - from) / HOUR] = row.cost;
        expect(mine.period_costs).toEqual(hourly);
        expect(mine.lines).toEqual([{ id: OPENAI_MODEL, name: null, costs: hourly }]);
        // The table's figures: the report's rows summed per model (here one model).
        expect(mine.groups).toEqual([{ id: OPENAI_MODEL, name: null, ...api.total }]);
        // The hourly rollup (whole hours) and the records (a range that cuts an hour) say the same.
        const raw: any = await (await fetch(`${s.gw.url}/v1/admin/usage?from=${from + 1}&to=${to - 1}&granularity=hour&group_by=model&account_id=${account.id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
        expect(raw.total).toEqual(api.total);
        // CSV of the same report.
        const csv = await holder.call("GET", `/console/api/usage?from=${from}&to=${to}&granularity=hour&group_by=model&format=csv`);
        expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
        expect((await csv.text()).split("\r\n")[0]).toStartWith("period_start,model,requests");

        const recent = await holder.json("GET", "/console/api/requests");
        expect(recent.data.map((r: { request_id: string }) => r.request_id)).toEqual(["console-req-2", "console-req-1", "console-req-0"]);
        // Names as people know them beside the ids (the console showed ids alone).
        expect(recent.data[0]).toMatchObject({ account_id: account.id, account_name: "bob", key_id: key.id, key_name: "laptop", model: OPENAI_MODEL, status: "ok" });
        expect(Object.keys(recent.data[0]).sort()).toEqual(["account_id", "account_name", "cache_read_tokens", "cache_write_1h_tokens", "cache_write_5m_tokens", "completion_tokens", "cost", "created_at", "estimated", "fresh_input_tokens", "key_id", "key_name", "latency_ms", "model", "prompt_tokens", "request_id", "status"]);
        expect(JSON.stringify(recent)).not.toContain("secret prompt");
        const recentCsv = (await (await holder.call("GET", "/console/api/requests?format=csv")).text()).split("\r\n");
        expect(recentCsv[0]).toBe("created_at,request_id,account_id,account_name,key_id,key_name,model,status,latency_ms,prompt_tokens,fresh_input_tokens,cache_read_tokens,cache_write_5m_tokens,cache_write_1h_tokens,completion_tokens,estimated,cost");
        expect(recentCsv[1]).toContain(`console-req-2,${account.id},bob,${key.id},laptop,`);

        // Per-key limit set by the holder.
        const patched = await holder.json("PATCH", `/console/api/keys/${key.id}`, { spend_limit: 20, spend_limit_period: "week" });
        expect(patched).toMatchObject({ spend_limit: 20, spend_limit_period: "week" });

        // The very next request after the revoke's answer is refused: no cache keeps the key alive.
        expect((await holder.call("DELETE", `/console/api/keys/${key.id}`)).status).toBe(200);
        const after = await chat(s.gw, key.key, "after-revoke");
        expect(after.status).toBe(401);
        const overview = await holder.json("GET", "/console/api/overview");
        expect(overview.account.keys.find((k: { id: string }) => k.id === key.id).revoked_at).not.toBeNull();
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a read that names another session than the browser's (the page's token is stale) is a 409 the page acts on; reads without a token are answered", async () => {
      const s = await start();
      try {
        const tab = new ConsoleClient(s.gw.url);
        await tab.signIn({ token: ADMIN });
        const stale = tab.csrf;
        // Another sign-in in the same browser replaces the cookie.
        await tab.signIn({ token: ADMIN });
        const res = await tab.call("GET", `/console/api/accounts/${s.gw.accountId}`, undefined, { "x-csrf-token": stale });
        expect(res.status).toBe(409);
        expect(((await res.json()) as { error: { message: string } }).error.message).toContain("replaced this page's session");
        expect((await tab.call("GET", `/console/api/accounts/${s.gw.accountId}`, undefined, { "x-csrf-token": tab.csrf })).status).toBe(200);
        expect((await tab.call("GET", "/console/api/overview")).status).toBe(200);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("CSRF: a change without the session's token, from another Origin, or as a cross-site form post is refused (403) and changes nothing", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        const balance = async () => (await operator.json("GET", `/console/api/accounts/${s.gw.accountId}`)).balance;
        const before = await balance();
        const path = `/console/api/accounts/${s.gw.accountId}/credits`;
        expect((await operator.call("POST", path, { amount: 5 }, { "x-csrf-token": "" })).status).toBe(403);
        // A token that is not the session's: refused too, as a page whose session another sign-in
        // replaced is (409, which the page acts on: it shows who is signed in now).
        const wrong = await operator.call("POST", path, { amount: 5 }, { "x-csrf-token": "wrong" });
        expect(wrong.status).toBe(409);
        const said = ((await wrong.json()) as any).error;
        expect(said.message).toContain("replaced this page's session");
        // Its code tells it from the API's other 409s, which the page does not follow.
        expect(said.code).toBe("session_replaced");
        expect((await operator.call("POST", path, { amount: 5 }, { origin: "https://evil.example" })).status).toBe(403);
        expect((await operator.call("POST", path, { amount: 5 }, { "sec-fetch-site": "cross-site" })).status).toBe(403);
        // What a form on another site makes a browser send: its Origin, form encoding, the cookie, no token.
        const form = await fetch(s.gw.url + path, { method: "POST", headers: { cookie: operator.cookie, origin: "https://evil.example", "content-type": "application/x-www-form-urlencoded" }, body: "amount=5" });
        expect(form.status).toBe(403);
        const formNoOrigin = await fetch(s.gw.url + path, { method: "POST", headers: { cookie: operator.cookie, "content-type": "application/x-www-form-urlencoded" }, body: "amount=5" });
        expect(formNoOrigin.status).toBe(415);
        // Sign-in from another site (login CSRF) is refused too.
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { token: ADMIN }, { origin: "https://evil.example" })).status).toBe(403);
        // What a browser on the console behind a proxy that drops its Host sends: the refusal says
        // what to fix, naming the Origin it got and not the address the gateway sees.
        const proxied = await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { token: ADMIN }, { origin: "https://gw.example.com", "sec-fetch-site": "same-origin" });
        expect(proxied.status).toBe(403);
        const told = ((await proxied.json()) as any).error.message as string;
        expect(told).toContain('"https://gw.example.com"');
        expect(told).toContain("proxy_set_header Host");
        expect(told).not.toContain(new URL(s.gw.url).host);
        expect(await balance()).toBe(before);
        expect((await operator.call("POST", path, { amount: 5 })).status).toBe(200);
        expect(await balance()).toBe(before + 5);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("sessions expire after 12 hours, and sign-out ends them (the old cookie no longer works)", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        expect((await operator.call("GET", "/console/api/session")).status).toBe(200);
        s.clock.now += 12 * HOUR + 1;
        expect((await operator.call("GET", "/console/api/session")).status).toBe(401);

        const again = new ConsoleClient(s.gw.url);
        await again.signIn({ token: ADMIN });
        const cookie = again.cookie;
        expect((await again.call("POST", "/console/api/sign-out")).status).toBe(200);
        expect(again.setCookies.at(-1)).toContain("Max-Age=0");
        again.cookie = cookie;
        expect((await again.call("GET", "/console/api/session")).status).toBe(401);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("logins: listed with open invites; a second invite resets the password and ends the old sessions; removed, a login's session ends at once; another account's login is a 409", async () => {
      const s = await start();
      try {
        const { operator, holder, account } = await holderSetup(s.gw, "erin", "erin@team.example");
        const admin = (method: string, path: string, body?: unknown) => fetch(`${s.gw.url}/v1/admin${path}`, {
          method, headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) }, body: body ? JSON.stringify(body) : undefined,
        });
        const listed = await (await admin("GET", `/accounts/${account.id}/logins`)).json() as any;
        expect(listed.logins.map((l: any) => l.login)).toEqual(["erin@team.example"]);
        expect(listed.invites).toEqual([]);
        expect(await operator.json("GET", `/console/api/accounts/${account.id}/logins`)).toEqual(listed);
        // A holder manages no logins, not even their own account's.
        expect((await holder.call("GET", `/console/api/accounts/${account.id}/logins`)).status).toBe(403);
        expect((await holder.call("DELETE", `/console/api/accounts/${account.id}/logins/erin@team.example`)).status).toBe(403);

        // Forgot the password: a second invite for the same login is a reset.
        const reset = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "erin@team.example" }, 201);
        expect((await new ConsoleClient(s.gw.url).json("POST", "/console/api/invites/check", { token: new URL(reset.url).hash.slice(8) })).reset).toBe(true);
        expect((await (await admin("GET", `/accounts/${account.id}/logins`)).json() as any).invites.map((i: any) => i.login)).toEqual(["erin@team.example"]);
        const renewed = new ConsoleClient(s.gw.url);
        await renewed.acceptInvite(reset.url, "a brand new password here");
        expect((await holder.call("GET", "/console/api/session")).status).toBe(401);
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "erin@team.example", password: PASSWORD })).status).toBe(401);
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "erin@team.example", password: "a brand new password here" })).status).toBe(200);

        // Another account cannot take the login.
        const other = await operator.json("POST", "/console/api/accounts", { name: "other team", credits: 1 }, 201);
        const taken = await admin("POST", `/accounts/${other.id}/invites`, { login: "erin@team.example" });
        expect(taken.status).toBe(409);
        expect(((await taken.json()) as any).error.message).toContain("another account's");

        // Removed (someone left): the session in use ends at once, and the password no longer works.
        const removed = await operator.json("DELETE", `/console/api/accounts/${account.id}/logins/erin@team.example`);
        expect(removed).toEqual({ account_id: account.id, login: "erin@team.example", removed: true });
        expect((await renewed.call("GET", "/console/api/session")).status).toBe(401);
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "erin@team.example", password: "a brand new password here" })).status).toBe(401);
        expect((await admin("DELETE", `/accounts/${account.id}/logins/erin@team.example`)).status).toBe(404);
        // An invite alone is cancelled the same way: its link no longer works.
        const pending = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "frank" }, 201);
        expect((await admin("DELETE", `/accounts/${account.id}/logins/frank`)).status).toBe(200);
        const late = await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/accept", { token: new URL(pending.url).hash.slice(8), password: PASSWORD });
        expect(late.status).toBe(404);
        expect(await (await admin("GET", `/accounts/${account.id}/logins`)).json()).toEqual({ logins: [], invites: [] });
        // The login is free again, for any account.
        expect((await admin("POST", `/accounts/${other.id}/invites`, { login: "erin@team.example" })).status).toBe(201);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("one link a login at a time: a new link cancels the earlier ones, a used link cancels the rest, another account's open link speaks for the login, and cancelling an invite leaves the login", async () => {
      const s = await start();
      try {
        const { operator, account } = await holderSetup(s.gw, "erin", "erin@long.test");
        const admin = (method: string, path: string, body?: unknown) => fetch(`${s.gw.url}/v1/admin${path}`, {
          method, headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) }, body: body ? JSON.stringify(body) : undefined,
        });
        const tokenOf = (invite: { url: string }) => new URL(invite.url).hash.slice(8);
        const check = async (invite: { url: string }) => (await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/check", { token: tokenOf(invite) })).status;
        const accept = async (invite: { url: string }, password: string) => (await new ConsoleClient(s.gw.url).call("POST", "/console/api/invites/accept", { token: tokenOf(invite), password })).status;
        const signIn = async (password: string) => (await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "erin@long.test", password })).status;

        // Two reset links made in turn (the first mistyped, leaked, or a double click): only the last works.
        const first = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "erin@long.test" }, 201);
        const second = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "erin@long.test" }, 201);
        expect(await check(first)).toBe(404);
        expect(await accept(first, "the first link's password")).toBe(404);
        expect(await signIn(PASSWORD)).toBe(200);
        expect((await operator.json("GET", `/console/api/accounts/${account.id}/logins`)).invites.length).toBe(1);

        // Links made at once for a new login (two tabs): the one used cancels the other, which can
        // no longer set the password just set.
        const a = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "gil.link" }, 201);
        const b = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "gil.link" }, 201);
        expect(await check(a)).toBe(404);
        expect(await accept(b, "gil's own password")).toBe(200);
        expect(await accept(a, "someone else's")).toBe(404);

        // Another account's open link speaks for the login: a second account cannot invite it
        // until that link is cancelled, so no account shows a link that can only fail.
        const other = await operator.json("POST", "/console/api/accounts", { name: "other", credits: 1 }, 201);
        const pending = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "hana.link" }, 201);
        const refused = await admin("POST", `/accounts/${other.id}/invites`, { login: "HANA.LINK" });
        expect(refused.status).toBe(409);
        expect(((await refused.json()) as any).error.message).toContain("open invite");

        // Cancelling an invite cancels the link only: a login of the account sent a reset link keeps
        // its password and its sessions.
        const signedIn = new ConsoleClient(s.gw.url);
        await signedIn.signIn({ login: "erin@long.test", password: PASSWORD });
        expect(await operator.json("DELETE", `/console/api/accounts/${account.id}/invites/erin@long.test`)).toEqual({ account_id: account.id, login: "erin@long.test", cancelled: true });
        expect(await check(second)).toBe(404);
        expect((await signedIn.call("GET", "/console/api/session")).status).toBe(200);
        expect(await signIn(PASSWORD)).toBe(200);
        expect((await operator.call("DELETE", `/console/api/accounts/${account.id}/invites/erin@long.test`)).status).toBe(404);
        // The admin API cancels the same way, and then the login is free for the other account.
        expect(await (await admin("DELETE", `/accounts/${account.id}/invites/hana.link`)).json()).toEqual({ account_id: account.id, login: "hana.link", cancelled: true });
        expect(await check(pending)).toBe(404);
        expect((await admin("POST", `/accounts/${other.id}/invites`, { login: "hana.link" })).status).toBe(201);
        // A holder cancels nothing (an operator route: 403 whichever account it names).
        const { holder } = await holderSetup(s.gw, "third", "ivo.link");
        expect((await holder.call("DELETE", `/console/api/accounts/${other.id}/invites/hana.link`)).status).toBe(403);
        expect((await holder.call("DELETE", `/console/api/accounts/${(await holder.json("GET", "/console/api/session")).account_id}/invites/ivo.link`)).status).toBe(403);
        const logins = await operator.json("GET", `/console/api/accounts/${account.id}/logins`);
        expect(logins.logins.map((l: any) => l.login)).toEqual(["erin@long.test", "gil.link"]);
        expect(logins.invites).toEqual([]);
        // An invite past its 7 days is not open: cancelling it is a 404, as the list never shows it.
        await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "jo.link" }, 201);
        s.clock.now += 7 * 86_400_000 + 1;
        expect((await admin("DELETE", `/accounts/${account.id}/invites/jo.link`)).status).toBe(404);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("logins are one whatever their capitals: invited as Gus@Team.Example, kept lower-case, signed in as typed on a phone; another account cannot take GUS@team.example", async () => {
      const s = await start();
      try {
        const { operator, account } = await holderSetup(s.gw, "gus", "Gus@Team.Example");
        const listed = await operator.json("GET", `/console/api/accounts/${account.id}/logins`);
        expect(listed.logins.map((l: { login: string }) => l.login)).toEqual(["gus@team.example"]);
        for (const typed of ["Gus@team.example", "GUS@TEAM.EXAMPLE", "gus@team.example"]) {
          expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: typed, password: PASSWORD })).status).toBe(200);
        }
        const other = await operator.json("POST", "/console/api/accounts", { name: "other", credits: 1 }, 201);
        expect((await operator.call("POST", `/console/api/accounts/${other.id}/invites`, { login: "GUS@team.example" })).status).toBe(409);
        // Failures count against the one login, however it is written.
        const client = new ConsoleClient(s.gw.url);
        for (const typed of ["Gus@team.example", "GUS@team.example", "gus@TEAM.example", "gUs@team.example", "guS@team.example"]) {
          expect((await client.call("POST", "/console/api/sign-in", { login: typed, password: "wrong password here" })).status).toBe(401);
        }
        expect((await client.call("POST", "/console/api/sign-in", { login: "gus@team.example", password: PASSWORD })).status).toBe(429);
        // Removed as it was invited (capitals and all).
        expect((await operator.call("DELETE", `/console/api/accounts/${account.id}/logins/Gus@Team.Example`)).status).toBe(200);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a login spelt with letters outside ASCII that a database folds to it (`İ`) names no one: 401 with the right password, no throttle of its own to spend", async () => {
      const s = await start();
      try {
        await holderSetup(s.gw, "iris", "alice.smith@inbox.io");
        for (const typed of ["alİce.smİth@İnbox.İo", "alİce.smith@inbox.io", "ALİCE.SMITH@INBOX.IO"]) {
          const res = await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: typed, password: PASSWORD });
          expect([typed, res.status]).toEqual([typed, 401]);
        }
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "alice.smith@inbox.io", password: PASSWORD })).status).toBe(200);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a login kept with capitals by an earlier release is the same login: another account cannot take it, a reset replaces its password (no second user), and removal finds it", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        const mine = await operator.json("POST", "/console/api/accounts", { name: "legacy", credits: 1 }, 201);
        const other = await operator.json("POST", "/console/api/accounts", { name: "other", credits: 1 }, 201);
        await s.legacyLogin("Hana@Old.Example", mine.id, PASSWORD);
        const holder = new ConsoleClient(s.gw.url);
        await holder.signIn({ login: "hana@old.example", password: PASSWORD });
        expect((await operator.call("POST", `/console/api/accounts/${other.id}/invites`, { login: "hana@old.example" })).status).toBe(409);
        // The operator resets it as listed.
        const reset = await operator.json("POST", `/console/api/accounts/${mine.id}/invites`, { login: "Hana@Old.Example" }, 201);
        expect((await new ConsoleClient(s.gw.url).json("POST", "/console/api/invites/check", { token: new URL(reset.url).hash.slice(8) })).reset).toBe(true);
        await new ConsoleClient(s.gw.url).acceptInvite(reset.url, "the new password for hana");
        expect((await operator.json("GET", `/console/api/accounts/${mine.id}/logins`)).logins.map((l: { login: string }) => l.login)).toEqual(["Hana@Old.Example"]);
        expect((await holder.call("GET", "/console/api/session")).status).toBe(401);
        for (const typed of ["Hana@Old.Example", "hana@old.example"]) {
          expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: typed, password: PASSWORD })).status).toBe(401);
          expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: typed, password: "the new password for hana" })).status).toBe(200);
        }
        expect((await operator.call("DELETE", `/console/api/accounts/${mine.id}/logins/hana@old.example`)).status).toBe(200);
        expect((await operator.json("GET", `/console/api/accounts/${mine.id}/logins`)).logins).toEqual([]);
        // A session whose login is gone is over, even if it was written after the login's sessions
        // were ended (a sign-in whose password check was under way during the removal).
        const late = await holderSetup(s.gw, "late", "late.holder");
        await s.dropUserRow("late.holder");
        expect((await late.holder.call("GET", "/console/api/session")).status).toBe(401);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("sign-in is throttled per login and per address, even with the right password; no password or token reaches the log", async () => {
      const s = await start();
      try {
        const { invite } = await holderSetup(s.gw, "carol", "carol");
        const client = new ConsoleClient(s.gw.url);
        // Per login: 5 failures, then even the right password waits.
        for (let i = 0; i < 5; i++) expect((await client.call("POST", "/console/api/sign-in", { login: "carol", password: `wrong-password-${i}` })).status).toBe(401);
        const blocked = await client.call("POST", "/console/api/sign-in", { login: "carol", password: PASSWORD });
        expect(blocked.status).toBe(429);
        expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThan(0);
        s.clock.now += 15 * 60_000 + 1;
        expect((await client.call("POST", "/console/api/sign-in", { login: "carol", password: PASSWORD })).status).toBe(200);
        // Another holder of the same place (one proxy's address) who has not signed in from it yet
        // (an invite accepted here would make it hers: written in as a login of long ago instead).
        await s.legacyLogin("cara", s.gw.accountId, PASSWORD);
        // Per address: 20 failures over any logins, then every sign-in from it waits — but a login
        // that signed in from this address before (carol, just now) is held only by its own count:
        // behind a proxy, made-up logins would otherwise lock every holder out.
        for (let i = 0; i < 20; i++) expect((await client.call("POST", "/console/api/sign-in", { login: `nobody${i}`, password: "wrong-password-x" })).status).toBe(401);
        expect((await client.call("POST", "/console/api/sign-in", { login: "cara", password: PASSWORD })).status).toBe(429);
        expect((await client.call("POST", "/console/api/sign-in", { login: "nobody99", password: "wrong-password-x" })).status).toBe(429);
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "carol", password: PASSWORD })).status).toBe(200);
        // Its own count still holds it: 5 wrong ones, then the right one waits too.
        for (let i = 0; i < 5; i++) expect((await client.call("POST", "/console/api/sign-in", { login: "carol", password: `wrong-again-${i}` })).status).toBe(401);
        expect((await client.call("POST", "/console/api/sign-in", { login: "carol", password: PASSWORD })).status).toBe(429);
        // Wrong admin tokens are refused the same way; the right one never is (the operator can act for the holders).
        expect((await client.call("POST", "/console/api/sign-in", { token: ADMIN.replace("a", "b") })).status).toBe(429);
        expect((await client.call("POST", "/console/api/sign-in", { token: ADMIN })).status).toBe(200);
        const logs = s.logs();
        expect(logs).toContain("console sign-in failed");
        for (const secret of [PASSWORD, "wrong-password-0", ADMIN, new URL(invite.url).hash.slice(8), client.cookie.split("=")[1]!]) expect(logs).not.toContain(secret);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a cookie of ours planted by another site on this host (another port): a junk one is passed over and ended, two live sessions are refused, and the next sign-in ends the planted one (a security probe)", async () => {
      const s = await start();
      try {
        const url = s.gw.url;
        const operator = new ConsoleClient(url);
        await operator.signIn({ token: ADMIN });
        const { holder } = await holderSetup(s.gw, "mallory", "mallory");
        const theirs = holder.cookie.split("=")[1]!;
        // Sent first, as a browser sends a cookie of a longer path.
        const junk = await fetch(`${url}/console/api/session`, { headers: { cookie: `switchyard_console=junk-value; ${operator.cookie}` } });
        expect(junk.status).toBe(200);
        expect(((await junk.json()) as any).kind).toBe("operator");
        const ended = junk.headers.getSetCookie();
        expect(ended).toContain("switchyard_console=; Path=/console/api; Max-Age=0");
        expect(ended).toContain("switchyard_console=; Path=/console/api/session; Max-Age=0");
        expect(ended.filter((c) => /; Path=\/console;/.test(c))).toEqual([]);
        // Two live sessions: neither is guessed to be the browser's own.
        const both = await fetch(`${url}/console/api/overview`, { headers: { cookie: `switchyard_console=${theirs}; ${operator.cookie}` } });
        expect(both.status).toBe(401);
        expect(((await both.json()) as any).error.message).toContain("two console sessions");
        // The sign-in that follows sets the new session and ends the planted cookie.
        const again = await fetch(`${url}/console/api/sign-in`, { method: "POST", headers: { cookie: `switchyard_console=${theirs}; ${operator.cookie}`, origin: url, "content-type": "application/json" }, body: JSON.stringify({ token: ADMIN }) });
        expect(again.status).toBe(200);
        const set = again.headers.getSetCookie();
        expect(set[0]).toMatch(/^switchyard_console=[A-Za-z0-9_-]{43}; Path=\/console; HttpOnly/);
        expect(set).toContain("switchyard_console=; Path=/console/api; Max-Age=0");
        // Many planted ones (well-formed or not) sent before ours still leave ours read (a review: four had kept it out).
        const tokenLike = (i: number) => `switchyard_console=${"x".repeat(42)}${i}`;
        const many = [1, 2, 3, 4, 5, 6].map(tokenLike).join("; ");
        const read = await fetch(`${url}/console/api/session`, { headers: { cookie: `${many}; switchyard_console=junk; ${operator.cookie}` } });
        expect(read.status).toBe(200);
        // Refused for want of a live session, the answer still ends the planted ones.
        const none = await fetch(`${url}/console/api/session`, { headers: { cookie: `${many}; switchyard_console=junk` } });
        expect(none.status).toBe(401);
        expect(none.headers.getSetCookie()).toContain("switchyard_console=; Path=/console/api; Max-Age=0");
        // However long the Host (a DNS name has at most 253 characters), a few dozen clearings at most:
        // a Host of thousands of labels made a 16 KB request a 431 MiB answer (a hostile-tenant probe).
        const longHost = `${"a.".repeat(4_000)}example.com`;
        const bounded = await fetch(`${url}/console/api/session`, { headers: { host: longHost, cookie: `switchyard_console=junk; ${operator.cookie}` } });
        const clears = bounded.headers.getSetCookie();
        expect(clears.length).toBeGreaterThan(0);
        expect(clears.length).toBeLessThanOrEqual(50);
        expect(clears.join("").length).toBeLessThan(20_000);
        // One cookie, as a browser holds ours: nothing to end.
        expect((await fetch(`${url}/console/api/session`, { headers: { cookie: operator.cookie } })).headers.getSetCookie()).toEqual([]);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("an invite accepted from a place makes it the holder's: five wrong passwords from elsewhere do not lock them out there (a security probe)", async () => {
      const s = await start();
      try {
        await holderSetup(s.gw, "erin", "erin.holder");
        const wrong = JSON.stringify({ login: "erin.holder", password: "not erin's password" });
        for (let i = 0; i < 5; i++) expect(await rawPost(s.gw.url, "/console/api/sign-in", wrong, "127.0.0.66")).toBe(401);
        expect(await rawPost(s.gw.url, "/console/api/sign-in", wrong, "127.0.0.66")).toBe(429);
        // From where the invite was accepted (loopback), the right password still signs in.
        expect((await new ConsoleClient(s.gw.url).call("POST", "/console/api/sign-in", { login: "erin.holder", password: PASSWORD })).status).toBe(200);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("a password of the right length that guessers try first is refused (blank, one character, the login, a common one); the invite still works after", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        const account = await operator.json("POST", "/console/api/accounts", { name: "weak", credits: 1 }, 201);
        const invite = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "frank.weak@example.com" }, 201);
        const token = new URL(invite.url).hash.replace(/^#invite=/, "");
        const client = new ConsoleClient(s.gw.url);
        for (const password of [" ".repeat(12), "a".repeat(12), "abababababab", "frank.weak@example.com", "Frank.Weak-2026!", "password1234"]) {
          const res = await client.call("POST", "/console/api/invites/accept", { token, password });
          const body = (await res.json()) as any;
          expect([password, res.status, body.error.param]).toEqual([password, 400, "password"]);
          expect(body.error.message).toStartWith("Choose another password: ");
        }
        expect((await client.call("POST", "/console/api/invites/accept", { token, password: PASSWORD })).status).toBe(200);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("guesses sent all at once are checked no further than the limit: 40 in parallel (the right password last), 5 checked, 35 refused", async () => {
      const s = await start();
      try {
        await holderSetup(s.gw, "dave", "dave");
        const client = new ConsoleClient(s.gw.url);
        const guesses = Array.from({ length: 40 }, (_, i) => (i === 39 ? PASSWORD : `wrong-password-${i}`));
        const statuses = await Promise.all(guesses.map((password) => client.call("POST", "/console/api/sign-in", { login: "dave", password }).then((r) => r.status)));
        // Five are checked (the right one passes only if it arrived among them); the rest wait.
        expect(statuses.filter((st) => st === 401 || st === 200).length).toBe(5);
        expect(statuses.filter((st) => st === 429).length).toBe(35);
        expect(statuses.filter((st) => st === 200).length).toBeLessThanOrEqual(1);
        // The login is blocked now, right password or not.
        expect((await client.call("POST", "/console/api/sign-in", { login: "dave", password: PASSWORD })).status).toBe(429);
        // A malformed sign-in is not a guess, and does not clear the count either.
        s.clock.now += 15 * 60_000 + 1;
        for (let i = 0; i < 4; i++) expect((await client.call("POST", "/console/api/sign-in", { login: "dave", password: `wrong-again-${i}` })).status).toBe(401);
        expect((await client.call("POST", "/console/api/sign-in", { login: "dave" })).status).toBe(400);
        expect((await client.call("POST", "/console/api/sign-in", { login: "dave", password: "wrong-again-x" })).status).toBe(401);
        expect((await client.call("POST", "/console/api/sign-in", { login: "dave", password: PASSWORD })).status).toBe(429);
      } finally {
        await s.stop();
      }
    }, 30_000);

    test("catalogue: prices and each model's recent error rate and latency, from the gateway's own counters", async () => {
      const s = await start();
      try {
        const operator = new ConsoleClient(s.gw.url);
        await operator.signIn({ token: ADMIN });
        for (let i = 0; i < 2; i++) expect((await chat(s.gw, s.gw.key, `cat-${i}`)).status).toBe(200);
        // Requests the gateway refused before the model was asked (here 402s of an empty account) are not the model's.
        const poor = await operator.json("POST", "/console/api/accounts", { name: "poor", credits: 0.000001 }, 201);
        const poorKey = await operator.json("POST", `/console/api/accounts/${poor.id}/keys`, { name: "k" }, 201);
        for (let i = 0; i < 3; i++) expect((await chat(s.gw, poorKey.key, `cat-poor-${i}`)).status).toBe(402);
        const body = await operator.json("GET", "/console/api/catalogue");
        const model = body.data.find((m: { id: string }) => m.id === OPENAI_MODEL);
        expect(model.pricing).toMatchObject({ input_per_mtok: 150, output_per_mtok: 600 });
        expect(model.health).toMatchObject({ requests: 2, error_rate: 0 });
        expect(model.health.latency_p50_ms).toBeGreaterThan(0);
        expect(model.health.latency_p99_ms).toBeGreaterThanOrEqual(model.health.latency_p50_ms);
        // The histogram's first bound: figures at or under it say only "under 25 ms".
        expect(model.health.latency_floor_ms).toBe(25);
        expect(body.data.find((m: { id: string }) => m.id === FREE_MODEL).pricing).toBeNull();
        // Read again moments later (a reload to confirm what it showed): the figures still count
        // since the start, not since the first look seconds ago.
        for (let i = 0; i < 2; i++) expect((await chat(s.gw, s.gw.key, `cat-again-${i}`)).status).toBe(200);
        const again = (await operator.json("GET", "/console/api/catalogue")).data.find((m: { id: string }) => m.id === OPENAI_MODEL);
        expect(again.health).toMatchObject({ requests: 4, since: model.health.since });
        // Five minutes on, the first look is the base: what came since it.
        s.clock.now += 5 * 60_000;
        const later = (await operator.json("GET", "/console/api/catalogue")).data.find((m: { id: string }) => m.id === OPENAI_MODEL);
        expect(later.health.requests).toBe(2);
        // Looks twenty minutes apart: the last look is still the base (dropping it for its age left
        // no base at all, and the figures counted since the start).
        s.clock.now += 20 * 60_000;
        expect((await chat(s.gw, s.gw.key, "cat-sparse")).status).toBe(200);
        const sparse = (await operator.json("GET", "/console/api/catalogue")).data.find((m: { id: string }) => m.id === OPENAI_MODEL);
        expect(sparse.health.requests).toBe(1);
      } finally {
        await s.stop();
      }
    }, 30_000);
  });
}

/** A gateway on the SQLite file, with a clock the test moves. */
async function sqliteSetup(): Promise<Setup> {
  const clock = { now: Date.now() };
  const rec = recordingLogger();
  const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, now: () => clock.now, log: rec.log });
  return {
    gw, clock, logs: rec.text, stop: () => gw.stop(),
    async legacyLogin(login, accountId, password) {
      gw.db.query("INSERT INTO console_users (login, account_id, password_hash, created_at) VALUES (?, ?, ?, ?)").run(login, accountId, await Bun.password.hash(password), Date.now());
    },
    async dropUserRow(login) {
      gw.db.query("DELETE FROM console_users WHERE login = ?").run(login);
    },
  };
}
consoleSuite("SQLite", sqliteSetup);

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`console API on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  consoleSuite("PostgreSQL", async () => {
    const clock = { now: Date.now() };
    const rec = recordingLogger();
    const stores = await openPostgresStores(await database(), { now: () => clock.now, keyCacheMs: 2_000, ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, now: () => clock.now, log: rec.log, stores });
    return {
      gw, clock, logs: rec.text,
      async stop() {
        await gw.stop();
        await stores.close(500);
      },
      async legacyLogin(login, accountId, password) {
        await stores.sql`INSERT INTO console_users (login, account_id, password_hash, created_at) VALUES (${login}, ${accountId}, ${await Bun.password.hash(password)}, ${Date.now()})`;
      },
      async dropUserRow(login) {
        await stores.sql`DELETE FROM console_users WHERE login = ${login}`;
      },
    };
  });
}

if (!missing) {
  test("PostgreSQL: a session made on one gateway works on another on the same database (workers, replicas), and sign-out there ends it everywhere", async () => {
    const url = await database();
    const first = await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const second = await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
    const a = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, stores: first });
    const b = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, stores: second });
    try {
      const onA = new ConsoleClient(a.url);
      await onA.signIn({ token: ADMIN });
      const onB = new ConsoleClient(b.url);
      onB.cookie = onA.cookie;
      onB.csrf = onA.csrf;
      expect((await onB.json("GET", "/console/api/session")).kind).toBe("operator");
      expect((await onB.call("POST", "/console/api/sign-out")).status).toBe(200);
      expect((await onA.call("GET", "/console/api/session")).status).toBe(401);
    } finally {
      await a.stop();
      await b.stop();
      await first.close(500);
      await second.close(500);
    }
  }, 30_000);
}

describe("the console page", () => {
  test("one request for the shell: script and styles inline, a CSP that allows only them, ETag; no session needed", async () => {
    const s = await sqliteSetup();
    try {
      expect((await fetch(`${s.gw.url}/console`)).status).toBe(200);
      const res = await fetch(`${s.gw.url}/console/`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      const html = await res.text();
      expect(html).toContain("<script>");
      expect(html).toContain(".uplot");
      expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+stylesheet|https?:\/\/(?!www\.w3\.org)/);
      const csp = res.headers.get("content-security-policy")!;
      expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
      expect(csp).toContain("frame-ancestors 'none'");
      const again = await fetch(`${s.gw.url}/console/`, { headers: { "if-none-match": res.headers.get("etag")! } });
      expect(again.status).toBe(304);
      // Signed out (no session cookie) is no error: 200, no session (a 401 logged an error in the
      // browser's console at every signed-out load). A session cookie that no longer holds is a 401.
      const signedOut = await fetch(`${s.gw.url}/console/api/overview`);
      expect(signedOut.status).toBe(200);
      expect(await signedOut.json()).toEqual({ session: null });
      expect((await fetch(`${s.gw.url}/console/api/overview`, { headers: { cookie: `switchyard_console=${"A".repeat(43)}` } })).status).toBe(401);
      expect((await fetch(`${s.gw.url}/console/api/session`)).status).toBe(401);
      // Its icon is in the page (no request for /favicon.ico, which would be a 404).
      expect(html).toMatch(/<link rel="icon" href="data:image\/svg\+xml,/);
      // A mistyped or shared path under /console opens the console; the API's unknown paths stay JSON 404s.
      const typo = await fetch(`${s.gw.url}/console/accounts`);
      expect(typo.status).toBe(200);
      expect(typo.headers.get("content-type")).toBe("text/html; charset=utf-8");
      const unknown = await fetch(`${s.gw.url}/console/api/no-such-route`);
      expect(unknown.status).toBe(404);
      expect(((await unknown.json()) as any).error.type).toBe("not_found_error");
    } finally {
      await s.stop();
    }
  });

  test("SWITCHYARD_CONSOLE=off: no /console, no console API, no invites", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, ops: { metrics: true, accessLog: { enabled: false, sample: 1, level: "info" }, console: false } });
    try {
      expect((await fetch(`${gw.url}/console/`)).status).toBe(404);
      expect((await fetch(`${gw.url}/console/api/sign-in`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: ADMIN }) })).status).toBe(404);
      const invite = await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/invites`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ login: "someone" }) });
      expect(invite.status).toBe(404);
    } finally {
      await gw.stop();
    }
  });

  test("the CLI makes invites too (bun run admin invite), on the file a running gateway uses; the link works there", async () => {
    const s = await sqliteSetup();
    try {
      const made = await runAdmin(["invite", s.gw.accountId, "cli.holder", "--url", s.gw.url], { SWITCHYARD_DB: s.gw.dbPath });
      expect(made.code).toBe(0);
      const invite = JSON.parse(made.out);
      expect(invite.url).toStartWith(`${s.gw.url}/console/#invite=`);
      expect(invite.login).toBe("cli.holder");
      const holder = new ConsoleClient(s.gw.url);
      expect((await holder.acceptInvite(invite.url, PASSWORD)).account_id).toBe(s.gw.accountId);
      // Again for the same account: a link to set a new password. For another account: taken.
      expect((await runAdmin(["invite", s.gw.accountId, "cli.holder"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(0);
      const other = await s.gw.app.services.accounts.createAccount("other", 0);
      expect((await runAdmin(["invite", other.id, "cli.holder"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(1);
      // The logins, and removing one: its session ends at once.
      const listed = await runAdmin(["logins", s.gw.accountId], { SWITCHYARD_DB: s.gw.dbPath });
      expect(JSON.parse(listed.out).logins.map((l: { login: string }) => l.login)).toEqual(["cli.holder"]);
      expect(JSON.parse(listed.out).invites.map((i: { login: string }) => i.login)).toEqual(["cli.holder"]);
      expect((await runAdmin(["logins", "remove", s.gw.accountId, "cli.holder"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(0);
      expect((await holder.call("GET", "/console/api/session")).status).toBe(401);
      expect((await runAdmin(["logins", "remove", s.gw.accountId, "cli.holder"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(1);
      expect(JSON.parse((await runAdmin(["logins", s.gw.accountId], { SWITCHYARD_DB: s.gw.dbPath })).out)).toEqual({ logins: [], invites: [] });
      expect((await runAdmin(["invite", s.gw.accountId, "x"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(2);
      expect((await runAdmin(["invite", "acct_nope", "someone"], { SWITCHYARD_DB: s.gw.dbPath })).code).toBe(1);
    } finally {
      await s.stop();
    }
  });

  test("sign-in, invites and sign-out wait out another connection's write lock (the checkpoint's restart, the admin CLI) instead of failing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-console-"));
    try {
      const path = join(dir, "gateway.sqlite");
      const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, dbPath: path });
      const other = new Database(path);
      try {
        // The other connection holds the write lock for 40 ms at a time, as the admin CLI's write
        // or the checkpoint thread's restart does; the gateway's connection never waits for it
        // synchronously (busy_timeout 0).
        const holdLock = () => {
          other.exec("BEGIN IMMEDIATE");
          return Bun.sleep(40).then(() => other.exec("COMMIT"));
        };
        const operator = new ConsoleClient(gw.url);
        let held = holdLock();
        await operator.signIn({ token: ADMIN });
        await held;
        const account = await operator.json("POST", "/console/api/accounts", { name: "locked-out", credits: 1 }, 201);
        held = holdLock();
        const invite = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "locked@example.com" }, 201);
        await held;
        const holder = new ConsoleClient(gw.url);
        held = holdLock();
        await holder.acceptInvite(invite.url, PASSWORD);
        await held;
        held = holdLock();
        expect((await operator.call("POST", "/console/api/sign-out", {})).status).toBeLessThan(300);
        await held;
        expect((await operator.call("GET", "/console/api/session")).status).toBe(401);
        expect((await holder.json("GET", "/console/api/session")).kind).toBe("holder");
      } finally {
        other.close();
        await gw.stop();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("an operator session ends when the admin token changes or is removed; a holder's does not", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-console-"));
    const dbPath = join(dir, "gateway.sqlite");
    try {
      const first = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, dbPath });
      const sessions: ConsoleClient[] = [];
      let holder: ConsoleClient;
      try {
        for (let i = 0; i < 2; i++) {
          const operator = new ConsoleClient(first.url);
          await operator.signIn({ token: ADMIN });
          sessions.push(operator);
        }
        ({ holder } = await holderSetup(first, "kept", "kept.holder"));
      } finally {
        await first.stop();
      }
      for (const token of ["admin-console-rotated-0123456789abcdef0123456789", undefined]) {
        const next = await startGateway({ upstreamUrl: upstream.url, adminToken: token, dbPath });
        try {
          const old = new ConsoleClient(next.url);
          old.cookie = sessions[0]!.cookie;
          old.csrf = sessions[0]!.csrf;
          const refused = await old.call("POST", "/console/api/accounts", { name: "with-an-old-token", credits: 1 });
          expect([token === undefined ? "removed" : "rotated", refused.status]).toEqual([token === undefined ? "removed" : "rotated", 401]);
          expect(((await refused.json()) as any).error.message).toContain("admin token changed");
          const moved = new ConsoleClient(next.url);
          moved.cookie = holder.cookie;
          moved.csrf = holder.csrf;
          expect((await moved.json("GET", "/console/api/session")).kind).toBe("holder");
          if (token) {
            const fresh = new ConsoleClient(next.url);
            expect((await fresh.signIn({ token })).login).toBeNull();
            expect((await fresh.call("POST", "/console/api/accounts", { name: "new-token", credits: 1 })).status).toBe(201);
          }
        } finally {
          await next.stop();
        }
        sessions.shift();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a session survives a restart: the next gateway on the same SQLite file accepts the cookie", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-console-"));
    try {
      const first = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, dbPath: join(dir, "gateway.sqlite") });
      const operator = new ConsoleClient(first.url);
      await operator.signIn({ token: ADMIN });
      await first.stop();
      const second = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, dbPath: join(dir, "gateway.sqlite") });
      try {
        const moved = new ConsoleClient(second.url);
        moved.cookie = operator.cookie;
        moved.csrf = operator.csrf;
        expect((await moved.json("GET", "/console/api/session")).kind).toBe("operator");
        expect((await moved.call("POST", "/console/api/accounts", { name: "after-restart", credits: 1 })).status).toBe(201);
      } finally {
        await second.stop();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
