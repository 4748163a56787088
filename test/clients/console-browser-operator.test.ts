import { afterAll, beforeAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, type Page } from "playwright-core";
import { launchChromiumProfile, openAccount } from "../helpers/chromium.ts";
import { ConsoleClient } from "../helpers/console-client.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";

/**
 * The operator's console at the size a gateway reaches after a while, in a real headless Chromium
 * in front of the real gateway process: a long accounts list, an account that made and revoked
 * hundreds of keys, and a pool of vendor keys one of which the vendor refuses (a loopback vendor
 * speaking OpenAI's wire format). What a fourth console probe found (docs/decisions.md).
 */
const ADMIN = "admin-operator-0123456789abcdef0123456789abcdef";
const MODEL = "pooled/gpt-4o-mini";
const SECRETS = { POOL_KEY_GOOD: "sk-pool-good-aaaaaaaaaaaaaaaa", POOL_KEY_REFUSED: "sk-pool-refused-bbbbbbbbbbbbbbbb" };

const dir = mkdtempSync(join(tmpdir(), "switchyard-console-operator-"));
let gateway: GatewayProcess;
let vendor: ReturnType<typeof Bun.serve>;
let context: BrowserContext;
let page: Page;
/** Whether the vendor takes POOL_KEY_REFUSED (its billing fixed, say). */
let refusedTakenBack = false;
/** The keys the vendor saw on chat requests, by env name. */
const seen: string[] = [];
/** Whether the vendor rate-limits gpt-4o-mini on POOL_KEY_GOOD (its limits are per model). */
let goodLimited = false;

/** OpenAI's answers, and its 401 for a key it does not take (the pool sets that key aside). */
function startVendor() {
  return Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const secret = req.headers.get("authorization")?.replace(/^Bearer /, "");
      const env = Object.entries(SECRETS).find(([, s]) => s === secret)?.[0] ?? "none";
      const url = new URL(req.url);
      if (req.method === "POST") seen.push(env);
      if (env === "POOL_KEY_REFUSED" && !refusedTakenBack) {
        return Response.json({ error: { message: "Incorrect API key provided: sk-pool-***bbbb.", type: "invalid_request_error", param: null, code: "invalid_api_key" } }, { status: 401 });
      }
      if (url.pathname === "/v1/models") return Response.json({ object: "list", data: [{ id: "gpt-4o-mini", object: "model", created: 1, owned_by: "openai" }] });
      await req.arrayBuffer();
      if (env === "POOL_KEY_GOOD" && goodLimited) {
        return Response.json({ error: { message: "Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.", type: "requests", param: null, code: "rate_limit_exceeded" } }, { status: 429, headers: { "retry-after": "600" } });
      }
      return Response.json({
        id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o-mini",
        choices: [{ index: 0, message: { role: "assistant", content: "Hello" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 },
      });
    },
  });
}

const admin = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
};

beforeAll(async () => {
  vendor = startVendor();
  const config = join(dir, "config.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "pooled", kind: "openai", base_url: `http://127.0.0.1:${vendor.port}/v1`, keys: [{ env: "POOL_KEY_GOOD" }, { env: "POOL_KEY_REFUSED" }] }],
    models: [{ id: MODEL, provider: "pooled", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } }],
    limits: { requests_per_minute: 100_000 },
  }));
  gateway = await startGatewayProcess({ ...SECRETS, SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_DEMO: "1", SWITCHYARD_CONFIG: config, OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" });
  context = await launchChromiumProfile(join(dir, "profile"), { width: 1280, height: 800 });
  page = context.pages()[0] ?? (await context.newPage());
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
}, 60_000);

afterAll(async () => {
  await context?.close();
  await stopGatewayProcess(gateway);
  vendor?.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

test("an account opened from the foot of a long accounts list shows its top (it kept the list's scroll: its name and balance out of sight); Back returns to the list's foot", async () => {
  for (let i = 0; i < 40; i++) await admin("POST", "/v1/admin/accounts", { name: `scroll co ${String(i).padStart(2, "0")}`, credits: i + 1 });
  await page.goto(`${gateway.url}/console/#accounts?name=scroll+co`);
  const last = page.getByTestId("account-row").filter({ hasText: "scroll co 39" }).locator("a");
  await last.scrollIntoViewIfNeeded();
  const listScroll = await page.evaluate(() => (globalThis as any).scrollY as number);
  expect(listScroll).toBeGreaterThan(500);
  await last.click();
  await page.getByTestId("balance").filter({ hasText: "40" }).waitFor();
  expect(await page.evaluate(() => (globalThis as any).scrollY)).toBe(0);
  // What the view is about is in sight, and focus is on the view (keyboard and screen readers follow).
  expect(await page.locator("h1").evaluate((el) => el.getBoundingClientRect().top)).toBeGreaterThanOrEqual(0);
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.id)).toBe("main");
  // A view shown again after a change in it still keeps its place: focus back on the control used.
  await page.getByTestId("topup-amount").fill("1");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: "41" }).waitFor();
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe("topup-amount");

  // Back returns to the list where it was left (its foot), not its top; Forward to the account's top.
  await page.goBack();
  await page.getByTestId("account-row").filter({ hasText: "scroll co 39" }).waitFor();
  expect(await page.evaluate(() => (globalThis as any).scrollY)).toBe(listScroll);
  await page.goForward();
  await page.getByTestId("balance").filter({ hasText: "41" }).waitFor();
  expect(await page.evaluate(() => (globalThis as any).scrollY)).toBe(0);
}, 60_000);

test("an account's revoked keys are folded under their count, the keys in use in view (228 revoked keys made the page 28,000 px tall)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "many keys co", credits: 5 });
  for (let i = 0; i < 230; i++) {
    const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: `key ${i}` });
    if (i < 228) await admin("DELETE", `/v1/admin/keys/${key.id}`);
  }
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("key-row").first().waitFor();
  const visibleRows = () => page.getByTestId("key-row").evaluateAll((rows) => rows.filter((r) => (r as any).checkVisibility()).length);
  expect(await visibleRows()).toBe(2);
  expect(await page.getByTestId("keys-revoked").locator("summary").textContent()).toBe("Revoked and expired keys (228)");
  // The page is a screenful or two, not 28,000 px of revoked rows.
  expect(await page.evaluate(() => (globalThis as any).document.documentElement.scrollHeight)).toBeLessThan(4_000);
  // Opened by keyboard, as any disclosure: the newest 50 are there, the rest a click away.
  await page.getByTestId("keys-revoked").locator("summary").focus();
  await page.keyboard.press("Enter");
  expect(await visibleRows()).toBe(52);
  expect(await page.getByTestId("keys-more").textContent()).toBe("Show 50 more (178 not shown)");
  expect(await page.getByTestId("keys-revoked").getByTestId("key-status").first().textContent()).toStartWith("revoked ");
}, 120_000);

test("an account's keys say where a key is used: this gateway's address for OpenAI's and Anthropic's clients", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "first key co", credits: 5 });
  await openAccount(page, gateway.url, made.id);
  const how = await page.getByTestId("keys-how").textContent();
  expect(how).toContain(`OpenAI's clients with the base URL ${gateway.url}/v1,`);
  expect(how).toContain(`Anthropic's with ${gateway.url} (no /v1)`);
  expect(how).toContain("GET /v1/models");
}, 60_000);

test("the Models view shows each vendor key's state; a key the vendor took back is checked at once from there", async () => {
  const account = await admin("POST", "/v1/admin/accounts", { name: "pool user", credits: 100 });
  const key = (await admin("POST", `/v1/admin/accounts/${account.id}/keys`, { name: "k" })).key as string;
  const ask = () => fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }) });
  // Until the pool has tried the refused key once (it then sets it aside, and the request moves on).
  for (let i = 0; i < 50 && !seen.includes("POOL_KEY_REFUSED"); i++) expect((await ask()).status).toBe(200);
  expect(seen).toContain("POOL_KEY_REFUSED");

  await page.goto(`${gateway.url}/console/#catalogue`);
  const refused = page.getByTestId("vendor-key-row").filter({ hasText: "POOL_KEY_REFUSED" });
  await refused.waitFor();
  expect(await refused.getAttribute("data-state")).toBe("disabled");
  expect(await refused.textContent()).toContain("set aside (the vendor refused it) since ");
  expect(await page.getByTestId("vendor-key-row").filter({ hasText: "POOL_KEY_GOOD" }).textContent()).toContain("in use");
  expect(await page.getByTestId("vendor-keys-said").textContent()).toStartWith("1 of 2 not in use");
  // Never a key's value on the page.
  expect(await page.content()).not.toContain("sk-pool-");

  refusedTakenBack = true;
  await refused.getByTestId("vendor-key-check").click();
  await page.getByTestId("vendor-key-row").filter({ hasText: "POOL_KEY_REFUSED" }).filter({ hasText: "in use" }).waitFor();
  expect(await page.getByTestId("vendor-keys-said").textContent()).toBe("All 2 in use.");
  expect((await admin("GET", "/v1/admin/vendor-keys")).data.map((k: { state: string }) => k.state)).toEqual(["usable", "usable"]);

  // Operators only: a holder's session is refused, a key not pooled is a 404.
  const operator = new ConsoleClient(gateway.url);
  await operator.signIn({ token: ADMIN });
  expect((await operator.call("POST", "/console/api/vendor-keys/pooled/NOT_A_KEY/probe")).status).toBe(404);
  const invite = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "pool-holder@example.com" }, 201);
  const holder = new ConsoleClient(gateway.url);
  await holder.acceptInvite(invite.url, "a long enough password for the pool holder");
  expect((await holder.call("POST", "/console/api/vendor-keys/pooled/POOL_KEY_GOOD/probe")).status).toBe(403);
  // A holder's catalogue is the prices: no vendor keys.
  expect((await holder.json("GET", "/console/api/catalogue")).vendor_keys).toBeUndefined();
}, 60_000);

test("a balance of ten digits reads as one number on a phone (it broke after its third comma)", async () => {
  const rich = await admin("POST", "/v1/admin/accounts", { name: "rich co", credits: 1_000_000_000 });
  for (let i = 0; i < 7; i++) await admin("POST", `/v1/admin/accounts/${rich.id}/credits`, { amount: 999_999_999.999999 });
  await page.setViewportSize({ width: 375, height: 667 });
  try {
    await openAccount(page, gateway.url, rich.id);
    const balance = page.getByTestId("balance");
    await balance.filter({ hasText: "7,999,999,999.999993" }).waitFor();
    // One line box: the number is not broken; and the page does not scroll sideways for it.
    expect(await balance.evaluate((el) => el.getClientRects().length)).toBe(1);
    expect(await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)).toBe(375);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
}, 60_000);

test("a top-up answered 503 by the gateway (its database locked) keeps its idempotency key: the same amount again is added once", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "locked db co", credits: 10 });
  await openAccount(page, gateway.url, made.id);
  // This account's view, not the previous test's still on the page while this one loads: the
  // amount was typed into that one's field, then the new view came with its own, empty (a CI run:
  // 0 top-ups sent, the field "").
  await page.locator("h1", { hasText: "locked db co" }).waitFor();
  await page.getByTestId("topup-amount").waitFor();
  const keys: string[] = [];
  const listen = (r: { url(): string; method(): string; headers(): Record<string, string> }) => {
    if (r.method() === "POST" && r.url().endsWith(`/console/api/accounts/${made.id}/credits`)) keys.push(r.headers()["idempotency-key"] ?? "");
  };
  page.on("request", listen);
  // Another writer holds the ledger's file (the admin CLI, a backup): the gateway answers 503 once its wait runs out.
  const other = new Database(join(dir, "gateway.sqlite"));
  other.run("BEGIN IMMEDIATE");
  try {
    await page.getByTestId("topup-amount").fill("5");
    // What the page was answered, said if no error shows: this wait timed out in 2 of 3 full CI runs
    // of the twenty-fourth session; this report found why (the wait for this account's view above).
    const started = performance.now();
    const answered: string[] = [];
    const onResponse = (r: { url(): string; status(): number }) => {
      if (r.url().includes("/console/api/")) answered.push(`${r.status()} ${new URL(r.url()).pathname} at ${Math.round(performance.now() - started)} ms`);
    };
    page.on("response", onResponse);
    await page.getByTestId("topup-submit").click();
    const error = page.locator("form[aria-label='Top up'] .error");
    try {
      await error.waitFor({ timeout: 30_000 });
    } catch (err) {
      const amount = await page.getByTestId("topup-amount").inputValue().catch(() => "?");
      throw new Error(`no error shown in 30 s; the page's requests: ${keys.length} top-ups; answers: ${answered.join("; ") || "none"}; amount field: "${amount}"; ${(err as Error).message.split("\n")[0]}`);
    } finally {
      page.off("response", onResponse);
    }
    const said = await error.textContent();
    // Why (the gateway's first sentence), then what to do here: not the API's "same Idempotency-Key".
    expect(said).toStartWith("The gateway cannot use its database right now");
    expect(said).toContain("So the credits may or may not have been added. Add the same amount again in a moment: it is added once either way.");
    expect(said).not.toContain("Idempotency-Key");
  } finally {
    other.run("ROLLBACK");
    other.close();
  }
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: "15" }).waitFor();
  page.off("request", listen);
  expect(keys).toHaveLength(2);
  expect(keys[1]).toBe(keys[0]);
  expect((await admin("GET", `/v1/admin/accounts/${made.id}`)).balance).toBe(15);
}, 60_000);

test("a top-up made by mistake is taken back from the account's page; more than is available is refused there, saying how much is", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "mistaken co", credits: 10 });
  await admin("POST", `/v1/admin/accounts/${made.id}/credits`, { amount: 1000 });
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("balance").filter({ hasText: "1,010" }).waitFor();
  await page.getByTestId("debit-amount").fill("2000");
  await page.getByTestId("debit-submit").click();
  const error = page.locator("form[aria-label='Take credits back'] .error");
  await error.waitFor();
  expect(await error.textContent()).toContain("The account has 1,010 credits available");
  // The gateway's refusal leaves focus on the button pressed, not the page's top (a console probe).
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe("debit-submit");
  await page.getByTestId("debit-amount").fill("1000");
  await page.getByTestId("debit-submit").click();
  await page.getByTestId("balance").filter({ hasText: /^10(\.0+)?( credits)?$/ }).waitFor();
  // Back on the control used, as after a top-up.
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe("debit-amount");
  expect((await admin("GET", `/v1/admin/accounts/${made.id}`)).balance).toBe(10);
}, 60_000);

/** An account of `credits` with one key, its page open: the account, the key, and the key's row. */
async function accountPageWithKey(name: string, credits: number, keyName: string) {
  const made = await admin("POST", "/v1/admin/accounts", { name, credits });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: keyName });
  await openAccount(page, gateway.url, made.id);
  const row = page.locator(`[data-key-id="${key.id}"]`);
  await row.getByTestId("key-revoke").waitFor();
  return { made, key, row };
}

/** Revoke in a key's row: armed, then confirmed by a click of its own (dom.ts, CONFIRM_AFTER_MS). */
async function revokeInRow(row: ReturnType<Page["locator"]>) {
  await row.getByTestId("key-revoke").click();
  await Bun.sleep(550);
  await row.getByTestId("key-revoke").click();
}

test("a key revoked elsewhere while its page was open: Revoke there shows it revoked (the row said 'No such active key.' and stayed active)", async () => {
  const { key, row } = await accountPageWithKey("two tabs co", 10, "shared laptop");
  // Another tab, operator or script revokes it meanwhile.
  await admin("DELETE", `/v1/admin/keys/${key.id}`);
  await revokeInRow(row);
  await page.getByTestId("keys-revoked").locator("summary").filter({ hasText: "Revoked and expired keys (1)" }).waitFor();
  expect(await row.getByTestId("key-status").textContent()).toStartWith("revoked ");
  expect(await page.getByTestId("key-error").count()).toBe(0);
  expect(await page.locator("#status").textContent()).toBe(`shared laptop (…${(key.key as string).slice(-4)}) was already revoked.`);
}, 60_000);

test("a change's notice stays on screen while the view reloads slowly (its 'Loading…' took the notice's place; a review)", async () => {
  const { made, row } = await accountPageWithKey("slow reload co", 5, "to revoke");
  // A revoke reads the account again: slowly here, past the view's "Loading…" mark.
  await page.route(`**/console/api/accounts/${made.id}`, async (route) => {
    if (route.request().method() === "GET") await Bun.sleep(800);
    await route.continue();
  });
  try {
    await revokeInRow(row);
    await page.getByTestId("loading").waitFor();
    await page.getByTestId("loading").waitFor({ state: "detached" });
    await expect(page.locator("#status").textContent()).resolves.toContain("revoked");
    expect(await page.locator("#status").evaluate((el) => el.classList.contains("shown"))).toBe(true);
    // Escape puts it away before its 10 s; still said to screen readers (its words stay in the live region).
    await page.keyboard.press("Escape");
    expect(await page.locator("#status").evaluate((el) => el.classList.contains("shown"))).toBe(false);
    await expect(page.locator("#status").textContent()).resolves.toContain("revoked");
  } finally {
    await page.unroute(`**/console/api/accounts/${made.id}`);
  }
}, 60_000);

test("an operator at #account without an id is shown the accounts (it was 'Not found' under the Accounts menu item; a console probe)", async () => {
  await page.goto(`${gateway.url}/console/#account`);
  await page.getByTestId("account-row").first().waitFor();
  // The accounts list as it was last left (its search kept).
  expect(await page.evaluate(() => (globalThis as any).location.hash)).toStartWith("#accounts");
}, 30_000);

test("an account's page leads to its own recent requests, not the latest of every account (a console probe: a quiet account's were out of reach)", async () => {
  const quiet = await admin("POST", "/v1/admin/accounts", { name: "quiet co", credits: 5 });
  const busy = await admin("POST", "/v1/admin/accounts", { name: "busy co", credits: 5 });
  const ask = async (accountId: string, times: number) => {
    const key = await admin("POST", `/v1/admin/accounts/${accountId}/keys`, { name: "k" });
    for (let i = 0; i < times; i++) {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }) });
      await res.arrayBuffer();
    }
  };
  await ask(quiet.id, 2);
  await ask(busy.id, 3);
  await openAccount(page, gateway.url, quiet.id);
  await page.getByTestId("account-requests-link").click();
  await page.locator("h1", { hasText: "Recent requests of quiet co" }).waitFor();
  const rows = page.getByTestId("request-row");
  await expect(rows.count()).resolves.toBe(2);
  for (const row of await rows.all()) await expect(row.textContent()).resolves.toContain("quiet co");
  // Back to every account's.
  await page.getByTestId("requests-all").click();
  await page.locator("h1", { hasText: /^Recent requests$/ }).waitFor();
  await expect(page.getByTestId("request-row").filter({ hasText: "busy co" }).count()).resolves.toBe(3);
  // An account without requests is named, not shown by its id; an id that is no account is said so.
  const silent = await admin("POST", "/v1/admin/accounts", { name: "silent co", credits: 5 });
  await page.goto(`${gateway.url}/console/#requests/${silent.id}`);
  await page.locator("h1", { hasText: "Recent requests of silent co" }).waitFor();
  await page.getByTestId("requests-empty").waitFor();
  await page.goto(`${gateway.url}/console/#requests/acct_doesnotexist`);
  await page.locator(".error", { hasText: "No such account." }).waitFor();
  expect(await page.getByTestId("requests-empty").count()).toBe(0);
}, 60_000);

// Last: the holder's sign-in replaces this browser's operator session.
test("a new key's secret outlives another change on its page, and a refused leave keeps the tab's history as it was (a console probe: a top-up erased it; Back then left the console)", async () => {
  const active = () => page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"));
  const hash = () => page.evaluate(() => (globalThis as any).location.hash as string);
  const made = await admin("POST", "/v1/admin/accounts", { name: "kept secret co", credits: 10 });
  await page.goto(`${gateway.url}/console/#accounts?name=kept+secret`);
  await page.getByTestId("account-row").filter({ hasText: "kept secret co" }).locator("a").click();
  await page.getByTestId("balance").waitFor();
  const address = `#account/${made.id}`;
  expect(await hash()).toBe(address);

  // A model list the gateway refuses: its words, and focus back on the button.
  await page.getByTestId("key-models").fill("pooled/gpt-4o-mnii");
  await page.getByTestId("key-create").click();
  await page.locator("form[aria-label='New key'] .error").filter({ hasText: "matches no configured model" }).waitFor();
  expect(await active()).toBe("key-create");

  await page.getByTestId("key-models").fill("");
  await page.getByTestId("key-name").fill("kept");
  await page.getByTestId("key-create").click();
  const secret = await page.getByTestId("key-secret").textContent();
  expect(secret).toMatch(/^svc-sk-/);
  // Another change on the page draws it again: the secret stays, its form still held.
  await page.getByTestId("topup-amount").fill("1");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: "11" }).waitFor();
  expect(await page.getByTestId("key-secret").textContent()).toBe(secret);
  expect(await page.getByTestId("key-create").isDisabled()).toBe(true);

  // Told to stay, by the menu and by Back: the address and the history are as they were.
  const asked: string[] = [];
  const stay = (dialog: { message(): string; dismiss(): Promise<void> }) => {
    asked.push(dialog.message());
    void dialog.dismiss();
  };
  page.on("dialog", stay);
  await page.getByRole("link", { name: "Usage" }).click();
  await page.waitForFunction((a) => (globalThis as any).location.hash === a, address);
  await page.goBack();
  await page.waitForFunction((a) => (globalThis as any).location.hash === a, address);
  await Bun.sleep(200);
  page.off("dialog", stay);
  expect(asked).toHaveLength(2);
  expect(await hash()).toBe(address);
  expect(await page.getByTestId("key-secret").textContent()).toBe(secret);
  // Put away, the key is listed; Back then goes to the accounts list, the entry before the account's.
  await page.getByTestId("key-secret-done").click();
  await page.getByTestId("key-row").filter({ hasText: "kept" }).waitFor();
  await page.goBack();
  await page.getByTestId("account-row").first().waitFor();
  expect(await hash()).toStartWith("#accounts");
}, 60_000);

test("a holder sees what each model costs (the Models view was the operator's alone)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "prices co", credits: 5 });
  const link = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "prices@example.com" });
  await page.goto(link.url);
  await page.getByTestId("invite-password").fill("a long enough password for prices");
  await page.getByTestId("invite-password-again").fill("a long enough password for prices");
  await page.getByTestId("invite-accept").click();
  await page.getByTestId("balance").waitFor();
  await page.getByRole("link", { name: "Models" }).click();
  const row = page.getByTestId("model-row").filter({ hasText: MODEL });
  await row.waitFor();
  expect(await page.locator("h1").textContent()).toBe("Models and prices");
  // Context, then input, output and the cache classes (OpenAI's multipliers: reads at half, writes at the input price).
  expect(await row.locator("td").allTextContents()).toEqual(["text", "128,000", "150", "600", "75", "150", "150", "—"]);
  // Not the gateway's health, providers or vendor keys.
  expect(await page.locator("thead th").allTextContents()).not.toContain("Errors");
  expect(await page.locator("thead th").allTextContents()).not.toContain("Provider");
  expect(await page.locator("#vendor-keys-title").count()).toBe(0);
}, 60_000);

test("a key the vendor rate-limits for one model is shown in use, cooling for that model, until when (vendors limit per model)", async () => {
  const account = await admin("POST", "/v1/admin/accounts", { name: "limited user", credits: 100 });
  const key = (await admin("POST", `/v1/admin/accounts/${account.id}/keys`, { name: "k" })).key as string;
  const ask = () => fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }) });
  goodLimited = true;
  refusedTakenBack = true;
  seen.length = 0;
  for (let i = 0; i < 50 && !seen.includes("POOL_KEY_GOOD"); i++) expect((await ask()).status).toBe(200);
  expect(seen).toContain("POOL_KEY_GOOD");
  await page.goto(`${gateway.url}/console/`);
  if (await page.getByTestId("sign-out").count()) await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await page.goto(`${gateway.url}/console/#catalogue`);
  const good = page.getByTestId("vendor-key-row").filter({ hasText: "POOL_KEY_GOOD" });
  await good.waitFor();
  expect(await good.getAttribute("data-state")).toBe("usable");
  expect(await good.textContent()).toContain("in use; cooling for gpt-4o-mini (the vendor limited its rate): back ");
  expect(await page.getByTestId("vendor-keys-said").textContent()).toBe("All 2 in use.");
  goodLimited = false;
}, 60_000);

test("the vendor keys stack as cards on a phone, each state under its column's name (a key's state ran one word a line in a 60-pixel column)", async () => {
  // The story's last test left a holder signed in here: the operator again.
  await page.goto(`${gateway.url}/console/#account`);
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await page.setViewportSize({ width: 375, height: 667 });
  try {
    await page.goto(`${gateway.url}/console/#catalogue`);
    const row = page.getByTestId("vendor-key-row").filter({ hasText: "POOL_KEY_GOOD" });
    await row.waitFor();
    const cells = await row.locator("td").evaluateAll((tds) => tds.map((td) => [td.getAttribute("data-label"), (globalThis as any).getComputedStyle(td).display]));
    expect(cells).toEqual([["Provider", "block"], ["Key (variable)", "block"], ["State", "block"], ["Actions", "block"]]);
    expect(await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)).toBe(375);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
}, 60_000);
