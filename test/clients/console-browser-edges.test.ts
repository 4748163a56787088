import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type Page } from "playwright-core";
import { launchChromium, openAccount } from "../helpers/chromium.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";

/**
 * The console with data it may not expect, in a real headless Chromium in front of the real
 * gateway process: an account that made and revoked hundreds of keys (a script rotating its key).
 * What a sixth console probe found (docs/decisions.md).
 */
const ADMIN = "admin-edges-0123456789abcdef0123456789abcdef";

const dir = mkdtempSync(join(tmpdir(), "switchyard-console-edges-"));
let gateway: GatewayProcess;
let browser: Browser;
let page: Page;

const admin = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
};

beforeAll(async () => {
  [gateway, browser] = await Promise.all([
    startGatewayProcess({ SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_DEMO: "1", OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" }),
    launchChromium(),
  ]);
  page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  // A missing element fails its test at 10 s, before bun's timeout would kill the run.
  page.setDefaultTimeout(10_000);
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
}, 30_000);

afterAll(async () => {
  await browser?.close();
  await stopGatewayProcess(gateway);
  rmSync(dir, { recursive: true, force: true });
});

/** An account that made and revoked `count` keys named `${prefix} N`, ten at a time (the gateway allows ten in use). */
async function accountWithRevokedKeys(name: string, count: number, prefix: string): Promise<{ id: string }> {
  const made = await admin("POST", "/v1/admin/accounts", { name, credits: 5 });
  for (let i = 0; i < count; i += 10) {
    const keys = await Promise.all(Array.from({ length: Math.min(10, count - i) }, (_, j) => admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: `${prefix} ${i + j}` })));
    await Promise.all(keys.map((k) => admin("DELETE", `/v1/admin/keys/${k.id}`)));
  }
  return made;
}

/** The console API requests the page makes while `run` runs: "METHOD /path?query". */
async function requestsDuring(run: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const listen = (r: { url(): string; method(): string }) => {
    const url = new URL(r.url());
    if (url.pathname.startsWith("/console/api/")) seen.push(`${r.method()} ${url.pathname.slice("/console/api".length)}${url.search}`);
  };
  page.on("request", listen);
  try {
    await run();
  } finally {
    page.off("request", listen);
  }
  return seen;
}

test("an account that made and revoked 120 keys reads its keys a page at a time: the newest 50 revoked, 'Show more', a search; a top-up reads nothing again, a revoke only the keys (10,000 keys were 3.5 MB on each view and after each change)", async () => {
  const made = await accountWithRevokedKeys("rotating co", 120, "rotated");
  const live = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "in use" });
  const listed = (await admin("GET", `/v1/admin/accounts/${made.id}/keys`)).data as { id: string; revoked_at: string | null }[];
  // Newest first: the admin API lists the order made (created_at, then id), so the reverse.
  const revoked = listed.filter((k) => k.revoked_at !== null).map((k) => k.id).reverse();
  expect(revoked).toHaveLength(120);

  const answer = page.waitForResponse((r) => new URL(r.url()).pathname === `/console/api/accounts/${made.id}`);
  await openAccount(page, gateway.url, made.id);
  expect(((await (await answer).json()) as { keys: unknown[] }).keys).toHaveLength(51);
  await page.locator("h1", { hasText: "rotating co" }).waitFor();
  const fold = page.getByTestId("keys-revoked");
  const drawn = () => fold.getByTestId("key-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key-id")));
  expect(await fold.locator("summary").textContent()).toBe("Revoked and expired keys (120)");
  expect(await drawn()).toEqual(revoked.slice(0, 50));
  await fold.locator("summary").click();
  expect(await fold.locator("caption").textContent()).toBe("Revoked and expired keys: 120, no longer accepted, newest first; the newest 50 shown");
  const more = fold.getByTestId("keys-more");
  expect(await more.textContent()).toBe("Show 50 more (70 not shown)");
  await more.click();
  await more.filter({ hasText: "Show 20 more (20 not shown)" }).waitFor();
  expect(await drawn()).toEqual(revoked.slice(0, 100));
  // By keyboard as by mouse; the rows drawn later name their columns too (a phone's cards).
  await more.focus();
  await page.keyboard.press("Enter");
  await fold.locator("caption").filter({ hasText: /^Revoked and expired keys: 120, no longer accepted, newest first$/ }).waitFor();
  expect(await drawn()).toEqual(revoked);
  expect(await more.isVisible()).toBe(false);
  expect(await fold.getByTestId("key-row").last().locator("td").first().getAttribute("data-label")).toBe("Name");
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("role"))).toBe("region");

  // A search by name: any case, over all of them.
  await fold.getByTestId("keys-search").fill("ROTATED 7");
  await fold.getByTestId("keys-search").press("Enter");
  await fold.locator("caption").filter({ hasText: "named like" }).waitFor();
  expect(await fold.locator("caption").textContent()).toBe("Revoked and expired keys named like “ROTATED 7”: 11");
  expect((await fold.getByTestId("key-row").allTextContents()).every((t) => t.includes("rotated 7"))).toBe(true);
  // Cleared: the list as read, no request.
  await fold.getByTestId("keys-search").fill("");
  expect(await requestsDuring(async () => {
    await fold.getByTestId("keys-search").press("Enter");
    await fold.locator("caption").filter({ hasText: "newest first" }).waitFor();
  })).toEqual([]);
  expect(await drawn()).toEqual(revoked);

  // A top-up's answer is the new balance: nothing is read again, and the keys read stay.
  const toppedUp = await requestsDuring(async () => {
    await page.getByTestId("topup-amount").fill("2");
    await page.getByTestId("topup-submit").click();
    await page.getByTestId("balance").filter({ hasText: /^7$/ }).waitFor();
  });
  expect(toppedUp).toEqual([`POST /accounts/${made.id}/credits`]);
  expect(await drawn()).toEqual(revoked);
  // A revoke reads the account's first pages of keys again, not its logins.
  const row = page.locator(`[data-key-id="${live.id}"]`);
  const revokedNow = await requestsDuring(async () => {
    await row.getByTestId("key-revoke").click();
    await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
    await row.getByTestId("key-revoke").click();
    await fold.locator("summary").filter({ hasText: "(121)" }).waitFor();
  });
  expect(revokedNow).toEqual([`DELETE /keys/${live.id}`, `GET /accounts/${made.id}`]);
  expect(await page.getByTestId("keys-none-in-use").textContent()).toBe("No keys in use: create one below.");
}, 60_000);

test("an expired key frees its place among the ten: listed with the revoked (its last day still editable), and Create key works with nine in use (the page said it counted until revoked, and refused)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "expired key co", credits: 5 });
  const soon = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "short lived", expires_at: new Date(Date.now() + 1_000).toISOString() });
  for (let i = 0; i < 9; i++) await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: `worker ${i}` });
  await Bun.sleep(Math.max(0, Date.parse(soon.created_at) + 1_100 - Date.now()));
  await openAccount(page, gateway.url, made.id);
  await page.locator("h1", { hasText: "expired key co" }).waitFor();
  expect(await page.locator("table caption", { hasText: "Keys:" }).first().textContent()).toBe("Keys: 9 of 10 in use");
  const fold = page.getByTestId("keys-revoked");
  expect(await fold.locator("summary").textContent()).toBe("Revoked and expired keys (1)");
  expect(await fold.getByTestId("key-status").textContent()).toStartWith("expired ");
  expect(await fold.getByTestId("key-expires").count()).toBe(1);
  expect(await page.getByTestId("key-create").getAttribute("aria-disabled")).toBeNull();
  await page.getByTestId("key-name").fill("the tenth");
  await page.getByTestId("key-create").click();
  await page.getByTestId("key-secret").waitFor();
  await page.getByTestId("key-secret-done").click();
  await page.locator("table caption").filter({ hasText: "Keys: 10 of 10 in use" }).waitFor();

  // A later end for the expired key would make eleven in use: refused, in its row, saying what to do.
  await fold.locator("summary").click();
  const expired = page.locator(`[data-key-id="${soon.id}"]`);
  await expired.getByTestId("key-expires").fill("2099-12-31");
  await expired.getByTestId("key-expires").press("Enter");
  expect(await expired.getByTestId("key-error").textContent()).toBe("This account already has 10 active keys, the most allowed. Revoke one first, then give this expired key a later end.");
  // One revoked: the view is drawn again with the fold still open (its rows' buttons in reach), and the later end is taken.
  const worker = page.getByTestId("key-row").filter({ hasText: "worker 0" });
  await worker.getByTestId("key-revoke").click();
  await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
  await worker.getByTestId("key-revoke").click();
  await fold.locator("summary").filter({ hasText: "(2)" }).waitFor();
  expect(await fold.evaluate((el) => (el as any).open)).toBe(true);
  await expired.getByTestId("key-expires").fill("2099-12-31");
  await expired.getByTestId("key-expires").press("Enter");
  // Back in use: listed and counted there, and focus on its Save, where it was pressed.
  await page.locator("table caption").filter({ hasText: "Keys: 10 of 10 in use" }).waitFor();
  await fold.locator("summary").filter({ hasText: "(1)" }).waitFor();
  expect(await expired.getByTestId("key-status").textContent()).toBe("active until 2100-01-01 00:00:00 UTC");
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.closest("[data-key-id]")?.getAttribute("data-key-id"))).toBe(soon.id);
}, 30_000);

test("an account page's headings and tables: the forms inside Keys are h3 under its h2, and the console logins table has a caption", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "outline co", credits: 5 });
  await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "outline@example.com" });
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("login-row").waitFor();
  const outline = await page.locator("main").evaluate((main) => [...main.querySelectorAll("h1, h2, h3")].map((el) => `${el.tagName} ${el.textContent}`));
  expect(outline.slice(outline.indexOf("H2 Keys"))).toEqual(["H2 Keys", "H3 New key"]);
  expect(await page.getByTestId("login-row").locator("xpath=ancestor::table/caption").textContent()).toBe("Logins and invites not yet used");
}, 30_000);

test("usage split over 105 keys lists the 100 dearest and one row of the other 5, the total exact; 'Show all' lists every key (2,000 were 24,000 elements and 3.6-9.8 s to show)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "many keys used co", credits: 100 });
  const ask = (key: string, words: number) => fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "switchyard/lorem", max_tokens: words, messages: [{ role: "user", content: "hi" }] }),
  }).then((r) => r.text());
  for (let i = 0; i < 105; i += 10) {
    const keys = await Promise.all(Array.from({ length: Math.min(10, 105 - i) }, (_, j) => admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: `used ${i + j}` })));
    await Promise.all(keys.map((k) => ask(k.key, 20)));
    await Promise.all(keys.map((k) => admin("DELETE", `/v1/admin/keys/${k.id}`)));
  }
  await page.goto(`${gateway.url}/console/#usage/24h/key`);
  await page.getByTestId("usage-row").first().waitFor();
  const caption = page.locator("table caption").filter({ hasText: "By key" });
  expect(await caption.textContent()).toBe("By key, tokens by price class: the 100 dearest of 105, the others summed");
  expect(await page.getByTestId("usage-row").count()).toBe(100);
  expect(await page.getByTestId("usage-others").locator("th").textContent()).toBe("5 other keys");
  // The rows shown and the others add up to the total, to the micro-credit.
  const credits = (texts: string[]) => texts.reduce((sum, t) => sum + Math.round(Number(t.replaceAll(",", "")) * 1_000_000), 0);
  const column = (rows: ReturnType<typeof page.getByTestId>) => rows.evaluateAll((trs) => trs.map((tr) => (tr as any).cells[10].textContent as string));
  const total = Math.round(Number((await page.getByTestId("usage-total-credits").textContent())!.replaceAll(",", "")) * 1_000_000);
  expect(credits([...(await column(page.getByTestId("usage-row"))), ...(await column(page.getByTestId("usage-others")))])).toBe(total);
  await page.getByTestId("usage-show-all").click();
  await caption.filter({ hasText: /^By key, tokens by price class$/ }).waitFor();
  expect(await page.getByTestId("usage-row").count()).toBe(105);
  expect(await page.getByTestId("usage-others").count()).toBe(0);
  expect(credits(await column(page.getByTestId("usage-row")))).toBe(total);
}, 60_000);

test("a name in Hebrew or Arabic is typed right to left where it is given (the fields ran left to right: 'שלום!' read '!שלום'), as the tables show it", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "rtl fields co", credits: 5 });
  const NAME = "מפתח הייצור!";
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: NAME });
  await openAccount(page, gateway.url, made.id);
  const direction = (testid: string) => page.getByTestId(testid).first().evaluate((el) => (globalThis as any).getComputedStyle(el).direction as string);
  // The address changed only after its `#`: the last test's account stays until this one's view comes.
  await page.locator("h1", { hasText: "rtl fields co" }).waitFor();
  expect(await page.getByTestId("key-rename").inputValue()).toBe(NAME);
  expect(await direction("key-rename")).toBe("rtl");
  await page.getByTestId("key-name").fill("مفتاح التجربة");
  expect(await direction("key-name")).toBe("rtl");
  // A Latin name stays left to right.
  await page.getByTestId("key-name").fill("ci key");
  expect(await direction("key-name")).toBe("ltr");
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-name").fill("שלום עולם");
  await page.getByTestId("account-search").fill("עולם");
  expect([await direction("account-name"), await direction("account-search")]).toEqual(["rtl", "rtl"]);
}, 30_000);

test("a new account's usage chart draws its total at 0 on a credits axis (it was an empty box without one, its first time cut at the edge)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "no usage co", credits: 0 });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "no-usage@example.com" });
  // The holder in a context of their own: a sign-in here would replace the operator's session.
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    await acceptInvite(holder, invite.url);
    await holder.getByTestId("balance").waitFor();
    await holder.goto(`${gateway.url}/console/#usage/30d/model`);
    await holder.getByTestId("usage-chart").locator("canvas").waitFor();
    expect(await holder.getByTestId("usage-empty").textContent()).toBe("No charged requests in this period yet.");
    // uPlot's legend names each line drawn: the total, besides the time.
    const legend = await holder.getByTestId("usage-chart").locator(".u-legend .u-series th").allInnerTexts();
    expect(legend.map((t) => t.trim())).toEqual(["Time", "Total"]);
    expect(JSON.parse((await holder.getByTestId("usage-chart").getAttribute("data-period-costs"))!)).toEqual(Array(30).fill(0));
  } finally {
    await context.close();
  }
}, 30_000);

test("a slow view's 'Loading…' is said in the page's live region (a status element added with its text is not announced), and goes when the view comes", async () => {
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-row").first().waitFor();
  const status = () => page.locator("#status").textContent();
  await page.route("**/console/api/catalogue", async (route) => {
    await Bun.sleep(1_500);
    await route.continue();
  });
  try {
    await page.locator("nav a[href='#catalogue']").click();
    await page.getByTestId("loading").waitFor();
    expect(await status()).toBe("Loading…");
    await page.getByTestId("model-row").first().waitFor();
    expect(await status()).toBe("");
  } finally {
    await page.unroute("**/console/api/catalogue");
  }
}, 30_000);

test("a page of keys that comes after a top-up redrew the view is not counted in the new one: no key is listed twice after later changes", async () => {
  const made = await accountWithRevokedKeys("late page co", 110, "late");
  await openAccount(page, gateway.url, made.id);
  await page.locator("h1", { hasText: "late page co" }).waitFor();
  const fold = page.getByTestId("keys-revoked");
  if (!(await fold.evaluate((el) => (el as any).open))) await fold.locator("summary").click();
  // "Show more" on a slow link; a top-up meanwhile draws the view again.
  await page.route("**/console/api/accounts/*/keys?*", async (route) => {
    await Bun.sleep(1_000);
    await route.continue();
  });
  try {
    const slow = page.waitForResponse((r) => r.url().includes("/keys?"));
    await fold.getByTestId("keys-more").click();
    await page.getByTestId("topup-amount").fill("1");
    await page.getByTestId("topup-submit").click();
    await page.getByTestId("balance").filter({ hasText: /^6$/ }).waitFor();
    await slow;
    await Bun.sleep(100);
  } finally {
    await page.unroute("**/console/api/accounts/*/keys?*");
  }
  await fold.getByTestId("keys-more").click();
  await fold.locator("caption").filter({ hasText: "the newest 100 shown" }).waitFor();
  await page.getByTestId("topup-amount").fill("1");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: /^7$/ }).waitFor();
  const ids = await fold.getByTestId("key-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key-id")));
  expect([ids.length, new Set(ids).size]).toEqual([100, 100]);
}, 30_000);

test("a key saved after another tab revoked it says it was revoked meanwhile and is listed with the revoked (the page said 'saved.')", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "revoked meanwhile co", credits: 5 });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "shared" });
  await openAccount(page, gateway.url, made.id);
  const row = page.locator(`[data-key-id="${key.id}"]`);
  await row.getByTestId("key-rename").fill("renamed");
  await admin("DELETE", `/v1/admin/keys/${key.id}`);
  await row.getByTestId("key-save").click();
  await page.getByTestId("keys-none-in-use").waitFor();
  expect(await page.locator("#status").textContent()).toBe(`shared (…${(key.key as string).slice(-4)}) was revoked meanwhile (another tab, operator or script): it is listed with the revoked keys now.`);
  expect(await page.getByTestId("keys-revoked").locator("summary").textContent()).toBe("Revoked and expired keys (1)");
}, 30_000);

test("a session that ended under an account page: 'Show more' of its keys goes to the sign-in and says so (the button did nothing), and signing in again comes back to the account", async () => {
  const made = await accountWithRevokedKeys("session ends co", 60, "old");
  await openAccount(page, gateway.url, made.id);
  await page.locator("h1", { hasText: "session ends co" }).waitFor();
  await page.getByTestId("keys-revoked").locator("summary").click();
  // The session's cookie is gone (it expired, or was ended elsewhere).
  await page.context().clearCookies();
  await page.getByTestId("keys-more").click();
  expect(await page.getByTestId("sign-in-error").textContent()).toBe("Your session ended: sign in again.");
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.locator("h1", { hasText: "session ends co" }).waitFor();
}, 30_000);

test("Back to an account page after 'Show more' shows as many revoked keys as before (it fell back to the newest 50)", async () => {
  const made = await accountWithRevokedKeys("back and forth co", 70, "gone");
  await openAccount(page, gateway.url, made.id);
  await page.locator("h1", { hasText: "back and forth co" }).waitFor();
  const fold = page.getByTestId("keys-revoked");
  await fold.locator("summary").click();
  await fold.getByTestId("keys-more").click();
  await fold.locator("caption").filter({ hasText: /^Revoked and expired keys: 70, no longer accepted, newest first$/ }).waitFor();
  expect(await fold.getByTestId("key-row").count()).toBe(70);
  await page.getByRole("link", { name: "Usage" }).click();
  await page.locator("h1", { hasText: "Usage" }).waitFor();
  await page.goBack();
  await page.locator("h1", { hasText: "back and forth co" }).waitFor();
  await fold.locator("caption").filter({ hasText: /^Revoked and expired keys: 70, no longer accepted, newest first$/ }).waitFor();
  expect(await fold.getByTestId("key-row").count()).toBe(70);
  expect(await fold.getByTestId("keys-more").isVisible()).toBe(false);

  // Not all shown: Back shows as many as before, not a page more at each Back (a console probe).
  const many = await accountWithRevokedKeys("back again co", 160, "old");
  await openAccount(page, gateway.url, many.id);
  await page.locator("h1", { hasText: "back again co" }).waitFor();
  await fold.locator("summary").click();
  await fold.getByTestId("keys-more").click();
  await fold.getByTestId("key-row").nth(99).waitFor();
  expect(await fold.getByTestId("key-row").count()).toBe(100);
  for (let i = 0; i < 2; i++) {
    await page.getByRole("link", { name: "Usage" }).click();
    await page.locator("h1", { hasText: "Usage" }).waitFor();
    await page.goBack();
    await page.locator("h1", { hasText: "back again co" }).waitFor();
    await fold.getByTestId("keys-more").waitFor();
    await fold.getByTestId("key-row").nth(99).waitFor();
    expect(await fold.getByTestId("key-row").count()).toBe(100);
  }
}, 60_000);

test("a double click (or Enter held down) on Revoke or Suspend only arms it: the confirming click must be one of its own (a double click revoked the key at once)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "double click co", credits: 5 });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "kept" });
  await openAccount(page, gateway.url, made.id);
  const revoke = page.locator(`[data-key-id="${key.id}"]`).getByTestId("key-revoke");
  const suspend = page.getByTestId("account-suspend-submit");
  await revoke.waitFor();
  const revoked = async () => (await admin("GET", `/v1/admin/accounts/${made.id}/keys`)).data.find((k: any) => k.id === key.id).revoked_at !== null;
  await revoke.dblclick();
  await Bun.sleep(300);
  expect(await revoked()).toBe(false);
  expect(await revoke.textContent()).toBe("Confirm revoke");
  await revoke.press("Escape");
  // Enter held down repeats its click many times a second.
  await revoke.focus();
  await page.keyboard.press("Enter");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Enter");
  await Bun.sleep(300);
  expect(await revoked()).toBe(false);
  await revoke.press("Escape");
  // Held for longer than that: its repeats (keydown with repeat set) are not clicks of their own.
  await revoke.focus();
  await page.keyboard.down("Enter");
  await Bun.sleep(600);
  await page.keyboard.down("Enter");
  await page.keyboard.down("Enter");
  await page.keyboard.up("Enter");
  await Bun.sleep(300);
  expect(await revoked()).toBe(false);
  expect(await revoke.textContent()).toBe("Confirm revoke");
  await revoke.press("Escape");
  await suspend.dblclick();
  await Bun.sleep(300);
  expect((await admin("GET", `/v1/admin/accounts/${made.id}`)).suspended_at ?? null).toBeNull();
  await suspend.press("Escape");
  // A click of its own, once armed, still does it.
  await revoke.click();
  await Bun.sleep(600);
  await revoke.click();
  await page.locator(`[data-key-id="${key.id}"]`).filter({ hasText: "revoked" }).first().waitFor({ state: "attached" });
  expect(await revoked()).toBe(true);
}, 30_000);

test("the focus outline stands out 3:1 from what is around it, on the page, in a card and in the top bar (amber on white was 2.0:1, on a card 1.9:1)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "focus co", credits: 5 });
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "k" });
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("balance").waitFor();
  // Tab through the page; each stop's outline colour against the background it is drawn on (outside the element).
  await page.locator("body").click({ position: { x: 1, y: 300 } });
  const seen: { what: string; ratio: number }[] = [];
  for (let i = 0; i < 45; i++) {
    await page.keyboard.press("Tab");
    const stop = await page.evaluate(() => {
      const doc = (globalThis as any).document;
      const el = doc.activeElement;
      if (!el || el === doc.body) return null;
      const style = (e: any) => (globalThis as any).getComputedStyle(e);
      const rgb = (s: string) => s.match(/[\d.]+/g)!.map(Number);
      const lin = (c: number) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
      const lum = ([r, g, b]: number[]) => 0.2126 * lin(r!) + 0.7152 * lin(g!) + 0.0722 * lin(b!);
      // The outline is drawn outside the element: its background is the nearest ancestor's.
      let bg = [255, 255, 255];
      for (let e = el.parentElement; e; e = e.parentElement) {
        const c = rgb(style(e).backgroundColor);
        if (c.length < 4 || c[3]! > 0.5) { bg = c; break; }
      }
      const a = lum(rgb(style(el).outlineColor)), b = lum(bg);
      return { what: `${el.tagName} ${el.getAttribute("aria-label") ?? el.textContent?.trim().slice(0, 20)}`, ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05), outline: style(el).outlineStyle };
    });
    if (!stop) break;
    expect(stop.outline).not.toBe("none");
    seen.push({ what: stop.what, ratio: Math.round(stop.ratio * 100) / 100 });
  }
  expect(seen.length).toBeGreaterThan(20);
  expect(seen.filter((s) => s.ratio < 3)).toEqual([]);
}, 30_000);

test("usage's last 24 hours and 30 days end at the gateway's clock, not the browser's: a browser a minute behind, just before the hour or the day, showed 0 requests for what Requests listed", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "slow clock co", credits: 5 });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "k" });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "slow-clock@example.com" });
  const answer = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST", headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "switchyard/lorem", max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
  });
  expect(answer.status).toBe(200);
  await answer.text();
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    // The holder's clock: a minute before the hour the request was made in (the browser's clock runs on from there).
    const now = Date.now();
    await holder.clock.install({ time: Math.floor(now / HOUR) * HOUR - 60_000 });
    await acceptInvite(holder, invite.url);
    await holder.getByTestId("balance").waitFor();
    const chart = holder.getByTestId("usage-chart");
    await holder.goto(`${gateway.url}/console/#usage/24h/model`);
    await chart.locator("canvas").waitFor();
    expect(await holder.getByTestId("usage-row").count()).toBe(1);
    expect(Date.parse((await chart.getAttribute("data-to"))!)).toBe(Math.ceil((now + 1) / HOUR) * HOUR);
    // The 30 days, with the browser a minute before the day the request was made in.
    await holder.clock.setSystemTime(Math.floor(now / DAY) * DAY - 60_000);
    await holder.getByTestId("usage-range").selectOption("30d");
    await chart.and(holder.locator("[data-granularity=day]")).locator("canvas").waitFor();
    expect(await holder.getByTestId("usage-row").count()).toBe(1);
    expect(Date.parse((await chart.getAttribute("data-to"))!)).toBe(Math.ceil((now + 1) / DAY) * DAY);
    // The CSV asks for the same period the view shows.
    const csv = await holder.getByRole("link", { name: "Download CSV" }).getAttribute("href");
    expect(new URL(csv!, gateway.url).searchParams.get("to")).toBe(String(Math.ceil((now + 1) / DAY) * DAY));
  } finally {
    await context.close();
  }
}, 30_000);

test("a key's last day that is already over is refused in its row, not saved (a holder west of UTC picking their own today stopped the key at once, and the page said 'saved.')", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "last day co", credits: 5 });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "prod" });
  await openAccount(page, gateway.url, made.id);
  const row = page.locator(`[data-key-id="${key.id}"]`);
  const today = new Date().toISOString().slice(0, 10);
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  // The picker offers no day before today (UTC).
  expect(await row.getByTestId("key-expires").getAttribute("min")).toBe(today);
  await row.getByTestId("key-expires").fill(yesterday);
  await row.getByTestId("key-save").click();
  await row.getByTestId("key-error").waitFor();
  expect(await row.getByTestId("key-error").textContent()).toBe(`The last day ${yesterday} (UTC) is already over: the key would stop at once. Choose ${today} or later, or revoke the key.`);
  expect((await admin("GET", `/v1/admin/accounts/${made.id}/keys`)).data[0].expires_at).toBeNull();
  // Today (UTC) is still a day of use: saved.
  await row.getByTestId("key-expires").fill(today);
  await row.getByTestId("key-save").click();
  await page.locator("#status").filter({ hasText: "saved." }).waitFor();
  expect((await admin("GET", `/v1/admin/accounts/${made.id}/keys`)).data[0].expires_at).toBe(new Date(Date.parse(`${today}T00:00:00Z`) + 86_400_000).toISOString());
}, 30_000);

test("a holder whose requests were all refused for credits (402) is told so on the account page, and on Requests that refusals are counted on Usage (it said only 'No requests yet')", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "out of credits co", credits: 0 });
  const key = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "k" });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "out-of-credits@example.com" });
  for (let i = 0; i < 3; i++) {
    const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST", headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "switchyard/lorem", max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(refused.status).toBe(402);
    await refused.text();
  }
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    await acceptInvite(holder, invite.url);
    await holder.getByTestId("balance").waitFor();
    // The account page, the holder's first look, says why their requests fail (it showed a balance and nothing else).
    // With the minute of the latest, so it can be told whether they go on.
    expect(await holder.getByTestId("refused-for-credits").textContent()).toMatch(/^3 requests in the last 24 hours were refused \(402\), the latest at \d{4}-\d\d-\d\d \d\d:\d\d UTC: the balance, less what requests in flight hold, could not cover what each may cost \(its prompt and max_tokens at the model's prices\), or a spend limit was used up\. A key's limit you can raise in its row below; for the balance or the account's limit, ask the gateway's operator\.$/);
    // The operator's page of the account says it too.
    await openAccount(page, gateway.url, made.id);
    await page.locator("h1", { hasText: "out of credits co" }).waitFor();
    expect(await page.getByTestId("refused-for-credits").textContent()).toStartWith("3 requests in the last 24 hours were refused (402), the latest at ");
    expect(await page.getByTestId("refused-for-credits").textContent()).toEndWith("Top up below, or raise the limit.");
    await holder.goto(`${gateway.url}/console/#requests`);
    await holder.getByTestId("requests-empty").waitFor();
    expect(await holder.getByTestId("requests-refusals").textContent()).toBe("Requests refused before reaching a model (402 out of credits or over a spend limit, 429 too many, …) are not listed here: Usage counts them by status.");
    await holder.getByTestId("requests-refusals").getByRole("link", { name: "Usage" }).click();
    await holder.getByTestId("usage-refused").waitFor();
    expect(await holder.getByTestId("usage-refused").textContent()).toContain("3 × 402");
  } finally {
    await context.close();
  }
}, 30_000);

test("the menu's link to the view shown reads it again in place: Back then leaves the view (it added an entry of the same view, and Back stayed on it)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "menu again co", credits: 5 });
  await openAccount(page, gateway.url, made.id);
  await page.locator("h1", { hasText: "menu again co" }).waitFor();
  const usage = page.locator("nav").getByRole("link", { name: "Usage" });
  await usage.click();
  await page.waitForURL(/#usage\/24h\/model$/);
  await page.getByTestId("usage-chart").waitFor();
  const before = await page.evaluate(() => (globalThis as any).history.length);
  // Again, as to see the latest figures: read again, no new entry.
  const again = page.waitForResponse((r) => new URL(r.url()).pathname === "/console/api/usage");
  await usage.click();
  await again;
  expect(await page.evaluate(() => (globalThis as any).history.length)).toBe(before);
  expect(page.url()).toEndWith("#usage/24h/model");
  await page.goBack();
  await page.locator("h1", { hasText: "menu again co" }).waitFor();
  expect(page.url()).toEndWith(`#account/${made.id}`);
}, 30_000);

test("the usage chart's lines are switched on and off from the keyboard: each name in its legend is a switch that Enter and Space turn, as a click does", async () => {
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  const row = page.getByTestId("usage-chart").locator(".u-legend tr.u-series").nth(1);
  const name = row.locator("th");
  expect(await name.getAttribute("role")).toBe("switch");
  expect(await name.getAttribute("tabindex")).toBe("0");
  expect(await name.getAttribute("aria-checked")).toBe("true");
  // Reached by Tab from the control before it (the CSV link), no mouse.
  await page.getByRole("link", { name: "Download CSV" }).focus();
  await page.keyboard.press("Tab");
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("role"))).toBe("switch");
  await page.keyboard.press("Space");
  expect(await name.getAttribute("aria-checked")).toBe("false");
  expect(await row.getAttribute("class")).toContain("u-off");
  await page.keyboard.press("Enter");
  expect(await name.getAttribute("aria-checked")).toBe("true");
  expect(await row.getAttribute("class")).not.toContain("u-off");
  // A click keeps the switch's state in step too.
  await name.click();
  expect(await name.getAttribute("aria-checked")).toBe("false");
  await name.click();
  // The time row and the hovered values are for the eye; the plot is the image, named by the total.
  expect(await page.getByTestId("usage-chart").locator(".u-legend tr.u-series").first().getAttribute("aria-hidden")).toBe("true");
  expect(await page.getByTestId("usage-chart").locator(".u-wrap").getAttribute("role")).toBe("img");
  expect(await page.getByTestId("usage-chart").locator(".u-wrap").getAttribute("aria-label")).toContain("in all");
}, 30_000);

test("the usage chart's legend is not a nameless table to screen readers (the chart is an image named by its total; the table below has the figures)", async () => {
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  const cdp = await page.context().newCDPSession(page);
  try {
    const { nodes } = (await cdp.send("Accessibility.getFullAXTree")) as { nodes: { ignored: boolean; role?: { value: string }; name?: { value: string } }[] };
    const tables = nodes.filter((n) => !n.ignored && n.role?.value === "table").map((n) => n.name?.value ?? "");
    expect(tables.length).toBeGreaterThan(0);
    expect(tables.filter((name) => name.trim() === "")).toEqual([]);
  } finally {
    await cdp.detach();
  }
}, 30_000);

test("a Ctrl-click on one line's name in the chart's legend (uPlot isolates it) leaves every switch's aria-checked as its line is drawn", async () => {
  // Two lines: an account's requests to two models.
  const made = await admin("POST", "/v1/admin/accounts", { name: "two models co", credits: 50 });
  const key = (await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "k" })).key as string;
  for (const model of ["switchyard/lorem", "switchyard/echo"]) {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hello there" }] }) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }
  // Loaded afresh (an earlier test left the page on this address).
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.reload();
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  const rows = page.getByTestId("usage-chart").locator(".u-legend tr.u-series");
  const n = await rows.count();
  expect(n).toBeGreaterThanOrEqual(3); // the time row and at least two lines
  await rows.nth(1).locator("th").click({ modifiers: ["Control"] });
  const state: { line: number; drawn: boolean; checked: string | null }[] = [];
  for (let i = 1; i < n; i++) state.push({ line: i, drawn: !(await rows.nth(i).getAttribute("class"))!.includes("u-off"), checked: await rows.nth(i).locator("th").getAttribute("aria-checked") });
  // Isolated: the first line drawn, the others not, and each switch says so.
  expect(state.filter((s) => s.drawn).map((s) => s.line)).toEqual([1]);
  for (const s of state) expect(s.checked).toBe(String(s.drawn));
}, 30_000);

test("an invite link opened in the operator's own browser says it would sign that browser in as the login; in the holder's it says nothing; a mismatch puts focus on the second password (a console probe)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "invite warning co", credits: 0 });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "warned@example.com" });
  // A tab of the operator's browser (its session cookie): told, before the link is used.
  const tab = await page.context().newPage();
  try {
    tab.setDefaultTimeout(10_000);
    await tab.goto(invite.url);
    const warning = tab.getByTestId("invite-signed-in");
    await warning.waitFor();
    expect(await warning.textContent()).toContain("This browser is signed in to the console as its operator. Setting the password signs it in as warned@example.com instead");
    // The rule is said beside the field, and the field takes no more than the gateway does.
    expect(await tab.getByTestId("invite-password").getAttribute("maxlength")).toBe("256");
    await tab.getByTestId("invite-password").fill("a long enough password");
    await tab.getByTestId("invite-password-again").fill("a long enough passwort");
    await tab.getByTestId("invite-accept").click();
    await tab.getByTestId("sign-in-error").waitFor();
    expect(await tab.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe("invite-password-again");
  } finally {
    await tab.close();
  }
  // A browser signed in to nothing: no warning.
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    await holder.goto(invite.url);
    await holder.getByTestId("invite-password").waitFor();
    expect(await holder.getByTestId("invite-signed-in").count()).toBe(0);
  } finally {
    await context.close();
  }
}, 30_000);

test("a holder's New key form says what a key they make may reach, as the operator limited the account's keys (a console probe: only the made key's row said so)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "narrow keys co", credits: 5 });
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "lorem only", models: ["switchyard/lorem"], rate_limit_per_minute: 9 });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "narrow@example.com" });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    await acceptInvite(holder, invite.url);
    const said = holder.getByTestId("key-ceiling");
    await said.waitFor();
    expect(await said.textContent()).toBe("As the operator limited this account's keys, a key you make may use only switchyard/lorem; takes at most 9 requests a minute.");
  } finally {
    await context.close();
  }
  // The operator's own form sets the limits itself: no such line.
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("key-create").waitFor();
  expect(await page.getByTestId("key-ceiling").count()).toBe(0);
}, 30_000);

/** A holder sets the password of their invite link in their own browser, and is signed in by it. */
async function acceptInvite(holder: Page, url: string): Promise<void> {
  await holder.goto(url);
  await holder.getByTestId("invite-password").fill("a long enough password");
  await holder.getByTestId("invite-password-again").fill("a long enough password");
  await holder.getByTestId("invite-accept").click();
}

test("an API key typed at the sign-in is said to be one and is not sent (it was 'Wrong login or password' and a try counted against the login; a console probe)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "key at sign-in co", credits: 1 });
  const { key } = await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "the key they have" });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const tab = await context.newPage();
    tab.setDefaultTimeout(10_000);
    const signIns: string[] = [];
    tab.on("request", (r) => new URL(r.url()).pathname === "/console/api/sign-in" && signIns.push(r.method()));
    await tab.goto(`${gateway.url}/console/`);
    // Where holders' logins come from, before anything is typed.
    expect(await tab.getByTestId("sign-in-holder-note").textContent()).toContain("invite link");
    for (const [field, button] of [["sign-in-password", "sign-in-submit"], ["sign-in-token", "sign-in-token-submit"]] as const) {
      await tab.getByTestId("sign-in-login").fill("holder@example.com");
      await tab.getByTestId(field).fill(key);
      await tab.getByTestId(button).click();
      const said = tab.getByTestId("sign-in-error");
      await said.waitFor();
      expect(await said.textContent()).toStartWith("That is an API key (svc-sk-…): it calls the API, it does not sign in here.");
      expect(await tab.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).toBe(field);
      await tab.getByTestId(field).fill("");
    }
    expect(signIns).toEqual([]);
  } finally {
    await context.close();
  }
}, 30_000);

test("the console's page comes gzipped to a browser: under 60 KB on the wire, not 125 KB (a console probe)", async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const tab = await context.newPage();
    const answer = (await tab.goto(`${gateway.url}/console/`))!;
    expect(answer.headers()["content-encoding"]).toBe("gzip");
    expect(answer.headers()["vary"]).toBe("accept-encoding");
    await tab.getByTestId("sign-in-login").waitFor();
    const sizes = await tab.evaluate(() => {
      const nav = (globalThis as any).performance.getEntriesByType("navigation")[0];
      return { encoded: nav.encodedBodySize as number, decoded: nav.decodedBodySize as number };
    });
    expect(sizes.decoded).toBeGreaterThan(100_000);
    expect(sizes.encoded).toBeLessThan(60_000);
  } finally {
    await context.close();
  }
  // A client that takes no gzip (or refuses it) gets the page as it is, under its own ETag.
  const plain = await fetch(`${gateway.url}/console/`, { headers: { "accept-encoding": "gzip;q=0" }, decompress: false } as RequestInit);
  expect(plain.headers.get("content-encoding")).toBeNull();
  expect(await plain.text()).toStartWith("<!doctype html>");
  const again = await fetch(`${gateway.url}/console/`, { headers: { "accept-encoding": "identity", "if-none-match": plain.headers.get("etag")! } });
  expect(again.status).toBe(304);
}, 30_000);

test("a refusal names a field as its form does, not as the API's JSON does ('Invalid request: spend_limit: … or null for none.'; a console probe)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "refused words co", credits: 1 });
  await openAccount(page, gateway.url, made.id);
  const form = page.locator("form[aria-label='Account spend limit']");
  const said = form.locator(".error");
  // Above the API's bound the browser refuses it where it is typed (the field's max), before any request.
  await form.locator("input").fill("1e15");
  expect(await form.locator("input").evaluate((input: any) => input.validity.rangeOverflow)).toBe(true);
  await form.locator("input").fill("0.0000001");
  await page.getByTestId("account-limit-submit").click();
  await said.filter({ hasText: "Spend limit: credits may have at most 6 decimal places" }).waitFor();
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-name").fill("   ");
  await page.getByTestId("account-create").click();
  await page.locator("form[aria-label='New account'] .error").filter({ hasText: "Name must hold more than spaces." }).waitFor();
  expect(await page.locator("main").textContent()).not.toMatch(/spend_limit|null for|Invalid request/);
}, 30_000);

test("the account page lists the credits opened with, added and taken back: the holder sees why the balance moved, the operator's top-up shows at once (a console probe)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "credits history co", credits: 5 });
  await admin("POST", `/v1/admin/accounts/${made.id}/credits`, { amount: 7 });
  // The operator adds 3 more from the console: its entry leads the list without a reload.
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("topup-amount").fill("3");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: "15" }).waitFor();
  const rows = () => page.getByTestId("credit-entry").evaluateAll((trs) => trs.map((tr) => [tr.getAttribute("data-kind"), tr.children[1]!.textContent, tr.children[2]!.textContent]));
  expect(await rows()).toEqual([["top_up", "Added by the operator", "+3"], ["top_up", "Added by the operator", "+7"], ["opening", "Opening balance", "5"]]);
  await admin("POST", `/v1/admin/accounts/${made.id}/debits`, { amount: 1.5 });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "credits-history@example.com" });
  const context = await browser.newContext({ viewport: { width: 375, height: 667 } });
  try {
    const holder = await context.newPage();
    holder.setDefaultTimeout(10_000);
    await acceptInvite(holder, invite.url);
    await holder.getByTestId("balance").filter({ hasText: "13.5" }).waitFor();
    expect(await holder.locator("#credit-history-title").textContent()).toBe("Credits added and taken back");
    const seen = await holder.getByTestId("credit-entry").evaluateAll((trs) => trs.map((tr) => [tr.getAttribute("data-kind"), tr.children[2]!.textContent, tr.children[0]!.getAttribute("data-label")]));
    expect(seen).toEqual([["debit", "-1.5", "When"], ["top_up", "+3", "When"], ["top_up", "+7", "When"], ["opening", "5", "When"]]);
    // On a phone it stacks as the other tables do: no sideways scroll.
    expect(await holder.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)).toBe(375);
  } finally {
    await context.close();
  }
}, 30_000);

test("a signed-out load of the console and of an invite link logs no error in the browser's console (each logged 'Failed to load resource: 401'; a console probe)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "quiet console co", credits: 1 });
  const invite = await admin("POST", `/v1/admin/accounts/${made.id}/invites`, { login: "quiet@example.com" });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const tab = await context.newPage();
    const errors: string[] = [];
    tab.on("console", (message) => {
      if (message.type() === "error") errors.push(message.text());
    });
    tab.on("response", (response) => {
      if (response.status() >= 400) errors.push(`${response.status()} ${response.url()}`);
    });
    await tab.goto(`${gateway.url}/console/`);
    await tab.getByTestId("sign-in-token").waitFor();
    await tab.goto(invite.url);
    await tab.getByTestId("invite-password").waitFor();
    expect(errors).toEqual([]);
  } finally {
    await context.close();
  }
}, 30_000);

test("spend-limit fields take what the API takes: above 1,000,000,000 credits the browser says so where it is typed (a console probe: the top-up field did, the limits did not)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "limit bound co", credits: 1 });
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "bounded" });
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("key-spend-limit").first().waitFor();
  const overflows = await page.locator("[data-testid=account-spend-limit], [data-testid=new-key-spend-limit], [data-testid=key-spend-limit]").evaluateAll((inputs) => inputs.map((input: any) => {
    input.value = "2000000000";
    const over = input.validity.rangeOverflow;
    input.value = "1000000000";
    return [over, input.validity.rangeOverflow];
  }));
  expect(overflows.length).toBeGreaterThanOrEqual(3);
  for (const o of overflows) expect(o).toEqual([true, false]);
}, 30_000);
