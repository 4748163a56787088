import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { CHROMIUM, launchChromiumProfile, launchChromium, openAccount } from "../helpers/chromium.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";
import { until } from "../helpers/until.ts";

/**
 * The console end to end in a real headless Chromium (Debian's, driven by playwright-core), in
 * front of the real gateway process (`bun src/index.ts`, simulated upstream). One story, in order:
 * the operator signs in, creates an account, tops it up and invites its holder; the holder accepts,
 * sets a password, signs in, makes a key that works and revokes it; the usage page's figures are
 * the usage API's; another account's data and a cross-site form post are refused; the session
 * survives a restart of the gateway. Each view's screenshot is taken (into docs/console/ with
 * SWITCHYARD_UPDATE_SCREENSHOTS=1).
 */
const ADMIN = "admin-browser-0123456789abcdef0123456789abcdef";
const PASSWORD = "a long enough password";
const MODEL = "switchyard/lorem";
const ROOT = join(import.meta.dir, "../..");
const SHOTS = process.env.SWITCHYARD_UPDATE_SCREENSHOTS === "1" ? join(ROOT, "docs", "console") : undefined;

const dir = mkdtempSync(join(tmpdir(), "switchyard-console-e2e-"));
let gateway: GatewayProcess;
let port: number;
let context: BrowserContext;
let page: Page;
const shots: string[] = [];

/** A port nothing listens on now, so the restarted gateway can take the same one (same origin, same cookie). */
function freePort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const p = server.port;
  server.stop(true);
  return p;
}

const env = () => ({
  PORT: String(port),
  SWITCHYARD_DB: join(dir, "gateway.sqlite"),
  SWITCHYARD_ADMIN_TOKEN: ADMIN,
  // The demo account is the "other" account whose data the holder must not see.
  SWITCHYARD_DEMO: "1",
  OPENAI_API_KEY: "",
  ANTHROPIC_API_KEY: "",
  SWITCHYARD_CONFIG: "",
});

function stopGateway(): Promise<void> {
  return stopGatewayProcess(gateway);
}

/**
 * What a screen-reader and low-vision user needs of a view: every control has a name (a label, an
 * aria-label or its text) and every piece of text contrasts with what is behind it at 4.5:1 or
 * more (WCAG AA). Returns what fails, to compare with [].
 */
function accessibilityProblems(): Promise<string[]> {
  return page.evaluate(() => {
    // Runs in the page (the test is type-checked without the DOM library).
    const w = globalThis as any;
    const document = w.document;
    const getComputedStyle = (el: any) => w.getComputedStyle(el);
    const problems: string[] = [];
    const rgb = (c: string) => (c.match(/[\d.]+/g) ?? []).map(Number);
    const lum = ([r, g, b]: number[]) => {
      const f = (v: number) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r!) + 0.7152 * f(g!) + 0.0722 * f(b!);
    };
    const background = (el: any): number[] => {
      for (; el; el = el.parentElement) {
        const c = rgb(getComputedStyle(el).backgroundColor);
        if (c.length === 3 || (c.length === 4 && c[3]! > 0)) return c.slice(0, 3);
      }
      return [255, 255, 255];
    };
    for (const el of document.querySelectorAll("input, select, button, a, textarea") as any[]) {
      if (el.offsetParent === null) continue;
      const named = el.labels?.length || el.getAttribute("aria-label") || el.textContent?.trim();
      if (!named) problems.push(`unnamed ${el.tagName.toLowerCase()} ${el.outerHTML.slice(0, 80)}`);
    }
    for (const el of document.querySelectorAll("body *") as any[]) {
      if (el.offsetParent === null || el.closest(".uplot")) continue;
      const own = [...el.childNodes].some((n: any) => n.nodeType === 3 && n.textContent!.trim() !== "");
      if (!own) continue;
      const fg = lum(rgb(getComputedStyle(el).color).slice(0, 3)), bg = lum(background(el));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      if (ratio < 4.5) problems.push(`contrast ${ratio.toFixed(2)} for "${el.textContent!.trim().slice(0, 30)}"`);
    }
    return problems;
  });
}

async function shot(name: string): Promise<void> {
  expect([name, await accessibilityProblems()]).toEqual([name, []]);
  const file = join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  shots.push(file);
  if (SHOTS) {
    mkdirSync(SHOTS, { recursive: true });
    copyFileSync(file, join(SHOTS, `${name}.png`));
  }
}

const admin = (path: string) => fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json() as Promise<any>);
const chat = (key: string) =>
  fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Hello from the console test" }] }),
  });
const text = async (testid: string) => (await page.getByTestId(testid).first().textContent())!.trim();
const number = (shown: string) => Number(shown.replaceAll(",", ""));

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (.ci/run does)`);
  port = freePort();
  gateway = await startGatewayProcess(env());
  context = await launchChromiumProfile(join(dir, "profile"), { width: 1280, height: 900 });
  // Every wait gives up well before its test's own time runs out: a test that times out in bun has
  // its child processes killed, Chromium among them, and every test after it would fail with
  // "Target page, context or browser has been closed" (one slow wait failed 26 tests on CI).
  context.setDefaultTimeout(20_000);
  page = context.pages()[0] ?? (await context.newPage());
}, 60_000);

/**
 * A second browser, for a holder or a stranger whose cookies must not be this story's operator
 * session: launched once, on first use, and each test takes a context of its own in it (a cookie
 * jar of its own, closed by the test), instead of launching and closing a Chromium per test.
 */
let otherBrowser: Browser | undefined;
async function anotherBrowser(): Promise<Browser> {
  otherBrowser ??= await launchChromium();
  return otherBrowser;
}

/** A promise of the test's own (not a Playwright wait) that gives up, as Playwright's do, before the test's time runs out. */
function within<T>(what: string, promise: Promise<T>, ms = 20_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

afterAll(async () => {
  await otherBrowser?.close();
  await context?.close();
  if (gateway) await stopGateway();
  rmSync(dir, { recursive: true, force: true });
});

let account: { id: string; name: string };
let invite: string;
let holderKey: { id: string; key: string };

test("the operator signs in with the admin token, creates an account, tops it up and issues an invite", async () => {
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").fill("not-the-token-0123456789abcdef0123456789");
  await page.getByTestId("sign-in-token-submit").click();
  await expect(text("sign-in-error")).resolves.toBe("Wrong admin token.");
  // Focus is back in the field to type again, not on the page's top (a console probe).
  await expect(page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).resolves.toBe("sign-in-token");
  await shot("sign-in");
  // By keyboard alone: Tab reaches the token field, Enter submits its form.
  await page.getByTestId("sign-in-token").fill("");
  await page.getByTestId("sign-in-password").focus();
  for (let i = 0; i < 5 && !(await page.getByTestId("sign-in-token").evaluate((el) => el === (globalThis as any).document.activeElement)); i++) await page.keyboard.press("Tab");
  await page.keyboard.type(ADMIN);
  await page.keyboard.press("Enter");
  await page.getByTestId("account-row").first().waitFor();

  await page.getByTestId("account-name").fill("acme-browser");
  await page.getByTestId("account-credits").fill("25");
  await page.getByTestId("account-create").click();
  await page.waitForURL(/#account\/acct_/);
  await expect(text("balance")).resolves.toBe("25");
  account = { id: page.url().split("#account/")[1]!, name: "acme-browser" };

  await page.getByTestId("topup-amount").fill("75.5");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("balance").filter({ hasText: "100.5" }).waitFor();
  expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBe(100.5);

  await page.getByTestId("invite-login").fill("holder@acme.example");
  await page.getByTestId("invite-submit").click();
  invite = await text("invite-url");
  expect(invite).toStartWith(`${gateway.url}/console/#invite=`);
  await shot("operator-account");

  // The link is shown once: leaving asks first, and told to leave, the page goes.
  const dialogs: string[] = [];
  const leave = (dialog: { message(): string; accept(): Promise<void> }) => {
    dialogs.push(dialog.message());
    void dialog.accept();
  };
  page.on("dialog", leave);
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-row").filter({ hasText: "acme-browser" }).waitFor();
  page.off("dialog", leave);
  expect(dialogs).toEqual(["Leave without your invite link? It is shown only once: after you leave, it cannot be shown again."]);

  // One request for the shell, one for the view's data.
  const asked: string[] = [];
  const listen = (r: { url(): string }) => asked.push(new URL(r.url()).pathname);
  page.on("request", listen);
  await page.reload();
  await page.getByTestId("account-row").filter({ hasText: "acme-browser" }).waitFor();
  expect(asked).toEqual(["/console/", "/console/api/overview"]);
  asked.length = 0;
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  expect(asked).toEqual(["/console/api/usage"]);
  page.off("request", listen);
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-row").filter({ hasText: "acme-browser" }).waitFor();
  await shot("operator-accounts");
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-submit").waitFor();
}, 60_000);

test("the account holder accepts the invite, sets a password, and signs in with it", async () => {
  await page.goto(invite);
  // The page says which login the holder will sign in with.
  await expect(text("invite-login-shown")).resolves.toBe("holder@acme.example");
  await page.getByTestId("invite-password").fill(PASSWORD);
  await page.getByTestId("invite-password-again").fill(PASSWORD);
  await shot("invite");
  await page.getByTestId("invite-accept").click();
  await expect(text("balance")).resolves.toBe("100.5");
  // The invite link is gone from the address bar, and it works once: opened again, it says so at once.
  expect(page.url()).not.toContain("invite=");
  const again = await context.newPage();
  await again.goto(invite);
  await expect(again.getByTestId("sign-in-error").textContent()).resolves.toContain("This invite link is not valid");
  expect(await again.getByTestId("invite-password").count()).toBe(0);
  await again.close();
  await page.getByTestId("sign-out").click();

  await page.getByTestId("sign-in-login").fill("holder@acme.example");
  await page.getByTestId("sign-in-password").fill("not the password at all");
  await page.getByTestId("sign-in-submit").click();
  await expect(text("sign-in-error")).resolves.toBe("Wrong login or password.");
  await expect(page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("data-testid"))).resolves.toBe("sign-in-password");
  await page.getByTestId("sign-in-password").fill(PASSWORD);
  await page.getByTestId("sign-in-submit").click();
  await expect(text("balance")).resolves.toBe("100.5");
  // Only their own account, and the models' prices: no operator sections in the navigation.
  expect(await page.locator("nav a").allTextContents()).toEqual(["Account", "Usage", "Models", "Requests"]);
}, 60_000);

test("the holder creates a key that works on /v1/chat/completions; revoked in the console, its next request is 401", async () => {
  await page.getByTestId("key-name").fill("laptop");
  await page.getByTestId("key-create").click();
  const key = await text("key-secret");
  expect(key).toMatch(/^svc-sk-[A-Za-z0-9_-]{43}$/);
  await shot("holder-new-key");
  for (let i = 0; i < 3; i++) expect((await chat(key)).status).toBe(200);
  // Leaving by the menu while the secret is shown asks first; staying keeps the page, its address and the secret.
  const asked: string[] = [];
  const answer = (accept: boolean) => (dialog: { message(): string; accept(): Promise<void>; dismiss(): Promise<void> }) => {
    asked.push(dialog.message());
    void (accept ? dialog.accept() : dialog.dismiss());
  };
  const stay = answer(false);
  page.on("dialog", stay);
  const before = page.url();
  await page.locator("nav a", { hasText: "Usage" }).click();
  await page.getByTestId("sign-out").click();
  expect(asked).toEqual(Array(2).fill("Leave without your new key? It is shown only once: after you leave, it cannot be shown again."));
  expect(page.url()).toBe(before);
  expect(await text("key-secret")).toBe(key);
  expect(await page.locator("nav a[aria-current=page]").textContent()).toBe("Account");
  page.off("dialog", stay);
  await page.getByTestId("key-secret-done").click();
  const row = page.getByTestId("key-row").filter({ hasText: "laptop" });
  await row.waitFor();
  // Shown once: after the page reloads its data, the key itself is nowhere on it.
  expect(await page.content()).not.toContain(key);
  holderKey = { id: (await row.getAttribute("data-key-id"))!, key };
  // Put away with Done, the secret holds nothing back: the menu leaves without asking.
  const leave = answer(true);
  page.on("dialog", leave);
  await page.locator("nav a", { hasText: "Usage" }).click();
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  await page.locator("nav a", { hasText: "Account" }).click();
  await row.waitFor();
  page.off("dialog", leave);
  expect(asked).toHaveLength(2);
  await shot("holder-account");

  // Revoking cannot be undone: the first click only asks to confirm.
  const deletes: string[] = [];
  const listen = (r: { method(): string; url(): string }) => void (r.method() === "DELETE" && deletes.push(r.url()));
  page.on("request", listen);
  await row.getByTestId("key-revoke").click();
  await expect(row.getByTestId("key-revoke").textContent()).resolves.toBe("Confirm revoke");
  await Bun.sleep(300);
  expect(deletes).toEqual([]);
  page.off("request", listen);
  const revoked = page.waitForResponse((r) => r.request().method() === "DELETE" && r.url().endsWith(`/console/api/keys/${holderKey.id}`));
  await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
  await row.getByTestId("key-revoke").click();
  expect((await revoked).status()).toBe(200);
  // The very next request, sent as soon as the console has its answer, is refused.
  expect((await chat(key)).status).toBe(401);
  // Among the revoked keys, folded under their count (console-browser-operator.test.ts).
  await page.getByTestId("key-row").filter({ hasText: "revoked" }).waitFor({ state: "attached" });
}, 60_000);

test("the usage page's chart and totals equal the usage API's figures for the same period", async () => {
  await page.goto(`${gateway.url}/console/#usage`);
  const chart = page.getByTestId("usage-chart");
  await chart.locator("canvas").waitFor();
  const from = (await chart.getAttribute("data-from"))!;
  const to = (await chart.getAttribute("data-to"))!;
  const q = `from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=hour&account_id=${account.id}`;
  const byModel = await admin(`/v1/admin/usage?${q}&group_by=model`);
  const byHour = await admin(`/v1/admin/usage?${q}&group_by=`);
  expect(byModel.total.requests).toBe(3);
  expect(byModel.total.cost).toBeGreaterThan(0);
  expect(number(await text("usage-total-credits"))).toBe(byModel.total.cost);
  expect(number(await text("usage-cache-savings"))).toBe(byModel.total.cache_savings);
  // The chart's points: one per hour of the range, each the API's figure for that hour.
  const points: number[] = JSON.parse((await chart.getAttribute("data-period-costs"))!);
  expect(points.length).toBe(24);
  const expected = new Array(24).fill(0);
  for (const row of byHour.data) expected[(Date.parse(row.period_start) - Date.parse(from)) / 3_600_000] = row.cost;
  expect(points).toEqual(expected);
  const modelRow = page.getByTestId("usage-row").filter({ hasText: MODEL });
  expect(await modelRow.locator("td").nth(9).textContent()).toBe(byModel.data[0].cost.toLocaleString("en-US", { maximumFractionDigits: 6 }));
  await shot("holder-usage");

  await page.goto(`${gateway.url}/console/#requests`);
  await page.getByTestId("request-row").first().waitFor();
  expect(await page.getByTestId("request-row").count()).toBe(3);
  expect(await page.content()).not.toContain("Hello from the console test");
  await shot("holder-requests");
}, 60_000);

test("one account cannot read another's data, by console URL or API (404 / 401)", async () => {
  const demo = (await admin("/v1/admin/accounts?name=demo")).data[0];
  expect(demo).toBeDefined();
  const statuses = await page.evaluate(async (other) => {
    const get = async (path: string) => (await fetch(path)).status;
    return [
      await get(`/console/api/accounts/${other}`),
      await get(`/console/api/usage?account_id=${other}`),
      await get(`/console/api/requests?account_id=${other}`),
      await get("/console/api/accounts"),
      await get(`/v1/admin/accounts/${other}`),
    ];
  }, demo.id);
  expect(statuses).toEqual([404, 404, 404, 403, 401]);
  // Its console address is no page here, not the holder's own account under the other's id.
  await page.goto(`${gateway.url}/console/#account/${demo.id}`);
  await page.locator("h1", { hasText: "Not found" }).waitFor();
  expect(await page.getByTestId("balance").count()).toBe(0);
  // So is its requests' address (it showed the holder's own requests under the other's id; a review).
  await page.goto(`${gateway.url}/console/#requests/${demo.id}`);
  await page.locator("h1", { hasText: "Not found" }).waitFor();
  await page.goto(`${gateway.url}/console/#account`);
  await page.getByTestId("balance").waitFor();
}, 30_000);

test("a cross-site form post is refused and changes nothing", async () => {
  // A page on another site (localhost is not 127.0.0.1) that posts a form to the console's API.
  const evil = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: () => new Response(`<form method="post" action="${gateway.url}/console/api/accounts/${account.id}/keys"><input name="name" value="stolen"></form><script>document.forms[0].submit()</script>`, { headers: { "content-type": "text/html" } }),
  });
  try {
    const before = (await admin(`/v1/admin/accounts/${account.id}/keys`)).data.length;
    const answered = page.waitForResponse((r) => r.url().includes(`/console/api/accounts/${account.id}/keys`));
    await page.goto(`http://localhost:${evil.port}/`);
    const response = await answered;
    expect(response.status()).toBe(403);
    expect((await admin(`/v1/admin/accounts/${account.id}/keys`)).data.length).toBe(before);
  } finally {
    evil.stop(true);
  }
}, 30_000);

test("a session survives a gateway restart", async () => {
  await page.goto(`${gateway.url}/console/#account`);
  // What is left after the three requests' charges.
  const balance = (await admin(`/v1/admin/accounts/${account.id}`)).balance;
  expect(balance).toBeLessThan(100.5);
  await expect(text("balance")).resolves.toBe(balance.toLocaleString("en-US", { maximumFractionDigits: 6 }));
  await stopGateway();
  gateway = await startGatewayProcess(env());
  await page.reload();
  // Still signed in: the page shows the account, not the sign-in form.
  await expect(text("balance")).resolves.toBe(balance.toLocaleString("en-US", { maximumFractionDigits: 6 }));
  expect(await page.getByTestId("sign-in-submit").count()).toBe(0);
}, 60_000);

test("the operator's usage across accounts and the model catalogue render; every view's screenshot was taken", async () => {
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  const shown = number(await text("usage-total-credits"));
  const chart = page.getByTestId("usage-chart");
  const api = await admin(`/v1/admin/usage?from=${encodeURIComponent((await chart.getAttribute("data-from"))!)}&to=${encodeURIComponent((await chart.getAttribute("data-to"))!)}&granularity=hour&group_by=model`);
  expect(shown).toBe(api.total.cost);
  await shot("operator-usage");
  // Health counts this process's answers (it was restarted): two requests on the demo account's key.
  for (let i = 0; i < 2; i++) expect((await chat(gateway.key)).status).toBe(200);
  await page.goto(`${gateway.url}/console/#catalogue`);
  const model = page.getByTestId("model-row").filter({ hasText: MODEL });
  await model.waitFor();
  const cells = await model.locator("td").allTextContents();
  // Provider, kind, input, output, cache read, cache writes (5 min, 1 h), per image, requests, errors, p50, p99.
  expect(cells.slice(4, 10)).toEqual([expect.any(String), expect.any(String), expect.any(String), "—", "2", "0.0 %"]);
  // Fast answers fall in the latency histogram's first bucket: said as under its bound, not as an interpolated figure.
  expect(cells[10]).toMatch(/^(under 25 ms|\d[\d,]* ms)$/);
  await shot("operator-catalogue");
  await page.goto(`${gateway.url}/console/#requests`);
  await page.getByTestId("request-row").first().waitFor();
  await shot("operator-requests");
  expect(shots.map((f) => f.split("/").pop())).toEqual(["sign-in.png", "operator-account.png", "operator-accounts.png", "invite.png", "holder-new-key.png", "holder-account.png", "holder-usage.png", "holder-requests.png", "operator-usage.png", "operator-catalogue.png", "operator-requests.png"]);
  for (const f of shots) expect(readFileSync(f).subarray(1, 4).toString()).toBe("PNG");
}, 60_000);

test("after the page's first view every view reads fresh figures, and a refused key action is shown in its row", async () => {
  const errors: string[] = [];
  const onError = (err: Error) => errors.push(err.message);
  page.on("pageerror", onError);
  try {
    // Last, so the figures the tests above read stay as they were: the holder signs in again.
    await page.getByTestId("sign-out").click();
    await page.getByTestId("sign-in-login").fill("holder@acme.example");
    await page.getByTestId("sign-in-password").fill(PASSWORD);
    await page.getByTestId("sign-in-submit").click();
    await page.getByTestId("balance").waitFor();
    // The page loads on #usage: what it preloaded (the account) must not serve the Account view later.
    await page.goto(`${gateway.url}/console/#usage`);
    await page.reload();
    await page.getByTestId("usage-chart").waitFor();
    const topUp = await fetch(`${gateway.url}/v1/admin/accounts/${account.id}/credits`, {
      method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ amount: 1000 }),
    });
    const { balance } = (await topUp.json()) as { balance: number };
    await page.locator("nav a", { hasText: "Account" }).click();
    await expect(text("balance").then(number)).resolves.toBe(balance);

    // A limit the API refuses, on a key row (no form to hold the field to its min): said in the row.
    await page.getByTestId("key-name").fill("desk");
    await page.getByTestId("key-create").click();
    await page.getByTestId("key-secret-done").click();
    const row = page.getByTestId("key-row").filter({ hasText: "desk" });
    await row.waitFor();
    await row.getByLabel("Spend limit of desk").fill("-5");
    await row.getByTestId("key-save").click();
    await expect(row.getByTestId("key-error").textContent()).resolves.toContain("0 or more");
    expect(errors).toEqual([]);
  } finally {
    page.off("pageerror", onError);
  }
}, 60_000);

test("the skip link focuses the view without leaving it; a key's limit shows its period's spend and reset; an expired key is not active", async () => {
  await page.locator("nav a", { hasText: "Account" }).click();
  await page.getByTestId("balance").waitFor();
  const before = page.url();
  await page.keyboard.press("Tab");
  await page.locator("a.skip").press("Enter");
  expect(page.url()).toBe(before);
  await expect(page.locator("main h1").first().textContent()).resolves.not.toBe("Not found");
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.id)).toBe("main");

  // A key with a daily limit, and one that has expired, made through the admin API.
  const make = (body: unknown) => fetch(`${gateway.url}/v1/admin/accounts/${account.id}/keys`, {
    method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body),
  }).then((r) => r.json() as Promise<{ id: string }>);
  const daily = await make({ name: "daily", spend_limit: 5, spend_limit_period: "day" });
  // Made while it has a moment left, read once that moment has passed (on the gateway's clock, this machine's).
  const expiresAt = Date.now() + 300;
  const gone = await make({ name: "gone", expires_at: new Date(expiresAt).toISOString() });
  await Bun.sleep(Math.max(0, expiresAt + 100 - Date.now()));
  await page.reload();
  const limit = page.locator(`[data-key-id="${daily.id}"]`).getByTestId("key-limit");
  await expect(limit.textContent()).resolves.toMatch(/^5 credits per day \(0 spent; resets \d{4}-\d\d-\d\d 00:00:00 UTC\)$/);
  await expect(page.locator(`[data-key-id="${gone.id}"]`).getByTestId("key-status").textContent()).resolves.toMatch(/^expired /);
}, 60_000);

/** Another tab of the same browser signs out whoever is signed in and signs in as the operator: this page's session is replaced. */
async function operatorSignsInInAnotherTab(): Promise<void> {
  const other = await context.newPage();
  try {
    await other.goto(`${gateway.url}/console/`);
    await other.getByTestId("sign-out").click();
    await other.getByTestId("sign-in-token").fill(ADMIN);
    await other.getByTestId("sign-in-token-submit").click();
    await other.getByTestId("account-row").first().waitFor();
  } finally {
    await other.close();
  }
}

test("a tab whose session another sign-in replaced says so and shows the new one; its Sign out signs the browser out", async () => {
  // This tab shows the holder; another tab of the same browser signs in as the operator.
  await operatorSignsInInAnotherTab();
  // The holder's tab asks for its usage: the gateway says the session changed, and the tab follows.
  await page.locator("nav a", { hasText: "Usage" }).click();
  await page.getByTestId("account-row").first().waitFor();
  await expect(page.locator("#who").textContent()).resolves.toContain("Operator");
  await expect(page.locator("#status").textContent()).resolves.toContain("replaced this page's session");

  // A stale tab's Sign out: the browser is signed out, which a reload confirms.
  const stale = await context.newPage();
  try {
    await stale.goto(`${gateway.url}/console/`);
    await stale.getByTestId("account-row").first().waitFor();
    await page.getByTestId("sign-out").click();
    await page.getByTestId("sign-in-token").waitFor();
    await stale.getByTestId("sign-out").click();
    await stale.getByTestId("sign-in-token").waitFor();
    await stale.reload();
    await stale.getByTestId("sign-in-token").waitFor();
  } finally {
    await stale.close();
  }
}, 60_000);

test("a change made after another sign-in took the browser over is refused and the tab follows: it says the change was not made and shows who is signed in (a console probe)", async () => {
  // The tests before signed this browser out.
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await openAccount(page, gateway.url, account.id);
  await page.getByTestId("topup-amount").waitFor();
  const before = (await admin(`/v1/admin/accounts/${account.id}`)).balance;
  await operatorSignsInInAnotherTab();
  await page.getByTestId("topup-amount").fill("3");
  await page.getByTestId("topup-submit").click();
  await page.locator("#status", { hasText: "your change was not made" }).waitFor();
  await page.getByTestId("account-row").first().waitFor();
  expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBe(before);
  // Said on screen, not to screen readers alone (a console probe: nothing visible said the top-up failed).
  await expect(page.locator("#status").isVisible()).resolves.toBe(true);
  const notice = (await page.locator("#status").boundingBox())!;
  expect(notice.height).toBeGreaterThan(20);
  expect(notice.y + notice.height).toBeLessThanOrEqual(page.viewportSize()!.height);
  // It never takes a click meant for the page under it (it covered a form's button on a CI run).
  expect(await page.locator("#status").evaluate((el) => (globalThis as any).getComputedStyle(el).pointerEvents)).toBe("none");
  // Its session ended instead (signed out elsewhere): the tab goes to the sign-in and says so.
  await openAccount(page, gateway.url, account.id);
  await page.getByTestId("topup-amount").waitFor();
  const out = await context.newPage();
  try {
    await out.goto(`${gateway.url}/console/`);
    await out.getByTestId("sign-out").click();
    await out.getByTestId("sign-in-token").waitFor();
  } finally {
    await out.close();
  }
  await page.getByTestId("topup-amount").fill("3");
  await page.getByTestId("topup-submit").click();
  await page.getByTestId("sign-in-error").filter({ hasText: "your change was not made" }).waitFor();
  expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBe(before);
  // Left as the tests after expect it: signed out, on the console's first page.
  await page.goto(`${gateway.url}/console/`);
  await page.getByTestId("sign-in-token").waitFor();
}, 60_000);

test("the operator pages through the accounts and finds one by name", async () => {
  const create = (name: string) => fetch(`${gateway.url}/v1/admin/accounts`, {
    method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ name, credits: 1 }),
  });
  // Past the first page of 100.
  for (let i = 0; i < 101; i++) expect((await create(`bulk-${String(i).padStart(3, "0")}`)).status).toBe(201);
  await page.getByTestId("sign-in-token").fill(ADMIN);
  await page.getByTestId("sign-in-token-submit").click();
  await page.getByTestId("account-row").first().waitFor();
  await expect(page.getByTestId("accounts-caption").textContent()).resolves.toContain("(first page)");
  const firstPage = await page.getByTestId("account-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-account-id")!));
  expect(firstPage.length).toBe(100);
  await page.getByTestId("accounts-next").click();
  await page.getByTestId("accounts-first").waitFor();
  // Waited for, not read at once: on a loaded machine the rows may land a moment after the buttons.
  await page.getByTestId("accounts-caption").filter({ hasText: "(a later page)" }).waitFor();
  const secondPage = await page.getByTestId("account-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-account-id")!));
  // Together the two pages hold every account once. Which bulk account comes last is not asked:
  // accounts made in the same millisecond are in their ids' order (a test that waited for
  // "bulk-100" on the second page failed once on CI).
  const all = (await admin("/v1/admin/accounts?limit=500")).data as { id: string }[];
  expect(secondPage.length).toBe(all.length - 100);
  expect(new Set([...firstPage, ...secondPage])).toEqual(new Set(all.map((a) => a.id)));
  await page.getByTestId("account-search").fill("bulk-05");
  await page.getByRole("button", { name: "Find" }).click();
  await page.getByTestId("accounts-caption").filter({ hasText: "named like" }).waitFor();
  await page.getByTestId("account-row").filter({ hasText: "bulk-059" }).waitFor();
  await expect(page.getByTestId("account-row").count()).resolves.toBe(10);
}, 120_000);

test("a view read slowly never replaces one asked for after it: a slow search, then Models, stays on Models", async () => {
  // The search's answer is held back until the operator has opened the models, then let through.
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let asked!: () => void;
  const searching = new Promise<void>((resolve) => (asked = resolve));
  let answeredOrDropped!: () => void;
  const answered = new Promise<void>((resolve) => (answeredOrDropped = resolve));
  const done = (r: { url(): string }) => void (r.url().includes("name=slow") && answeredOrDropped());
  page.on("requestfinished", done);
  page.on("requestfailed", done);
  await page.route("**/console/api/accounts?*name=slow*", async (route) => {
    asked();
    await held;
    await route.continue();
  });
  try {
    await page.goto(`${gateway.url}/console/#accounts`);
    // Typed and sent again until the search is asked: the accounts read the address change started
    // may land after the text was typed and show the view anew, without it (CI, once).
    for (let tries = 1, sent = false; !sent; tries++) {
      await page.getByTestId("account-search").fill("slow");
      await page.getByRole("button", { name: "Find" }).click();
      sent = await within("the slow search asked", searching.then(() => true), 2_000).catch(() => false);
      if (!sent && tries === 5) throw new Error("the slow search was not asked after 5 tries");
    }
    await page.locator("nav a", { hasText: "Models" }).click();
    await page.locator("#catalogue-title").waitFor();
    // The search's answer comes now, after the models are shown. Once the page has it (read, or
    // dropped by the page), and a moment more for its handler, it still shows the models.
    release();
    await within("the slow search answered or dropped", answered);
    await page.evaluate(() => new Promise((resolve) => (globalThis as any).setTimeout(resolve, 300)));
    expect(await page.locator("#catalogue-title").count()).toBe(1);
    expect(await page.locator("#accounts-title").count()).toBe(0);
  } finally {
    release();
    page.off("requestfinished", done);
    page.off("requestfailed", done);
    await page.unroute("**/console/api/accounts?*name=slow*");
  }
}, 60_000);

test("a key's row renames it and sets its last day (UTC); the key stops at the start of the next day", async () => {
  // The operator from the test before opens the account and edits its first active key.
  await openAccount(page, gateway.url, account.id);
  const row = page.getByTestId("key-row").filter({ has: page.getByTestId("key-rename") }).first();
  await row.waitFor();
  const id = (await row.getAttribute("data-key-id"))!;
  await row.getByTestId("key-rename").fill("renamed in the console");
  await row.getByTestId("key-expires").fill("2099-12-31");
  await row.getByTestId("key-save").click();
  const saved = page.locator(`[data-key-id="${id}"]`);
  await saved.getByTestId("key-status").filter({ hasText: "active until 2100-01-01 00:00:00 UTC" }).waitFor();
  const keys = (await admin(`/v1/admin/accounts/${account.id}/keys`)).data as { id: string; name: string; expires_at: string }[];
  expect(keys.find((k) => k.id === id)).toMatchObject({ name: "renamed in the console", expires_at: "2100-01-01T00:00:00.000Z" });
  // Saved again unchanged, the day stays the same.
  await saved.getByTestId("key-save").click();
  await page.locator(`[data-key-id="${id}"]`).getByTestId("key-status").filter({ hasText: "2100-01-01" }).waitFor();
  expect((await admin(`/v1/admin/accounts/${account.id}/keys`)).data.find((k: { id: string }) => k.id === id).expires_at).toBe("2100-01-01T00:00:00.000Z");
}, 60_000);

// ── What a console probe found (2026-11-29): each test below failed before its fix. ──

const activeElement = () => page.evaluate(() => {
  const el = (globalThis as any).document.activeElement;
  return { tag: el?.tagName as string, id: el?.id as string, testid: el?.getAttribute("data-testid") as string | null, label: el?.getAttribute("aria-label") as string | null };
});

test("a key row refuses a mistyped limit, a date typed in part and a period without a limit, and keeps what was saved", async () => {
  await openAccount(page, gateway.url, account.id);
  const row = page.getByTestId("key-row").filter({ has: page.getByTestId("key-save") }).first();
  await row.waitFor();
  const id = (await row.getAttribute("data-key-id"))!;
  const saved = () => page.locator(`[data-key-id="${id}"]`);
  const limit = saved().getByTestId("key-spend-limit");
  await limit.fill("10");
  await saved().locator("select").selectOption("day");
  await saved().getByTestId("key-save").click();
  await saved().getByTestId("key-limit").filter({ hasText: "10 credits per day" }).waitFor();
  // Focus is back on the row's Save, not at the top of the page.
  expect(await activeElement()).toMatchObject({ testid: "key-save" });
  expect((await activeElement()).label).toContain("Save ");

  // "15-" as typed: the browser reads the field as empty, which would have cleared the limit.
  await saved().getByTestId("key-spend-limit").click({ clickCount: 3 });
  await page.keyboard.press("Backspace");
  await page.keyboard.type("15-");
  await saved().getByTestId("key-save").click();
  await expect(saved().getByTestId("key-error").textContent()).resolves.toBe("The spend limit is not a number.");
  // A date typed in part: the day only.
  await saved().getByTestId("key-spend-limit").fill("12");
  await saved().getByTestId("key-expires").fill("");
  await saved().getByTestId("key-expires").click();
  await page.keyboard.press("Home");
  await page.keyboard.type("12");
  await saved().getByTestId("key-save").click();
  await expect(saved().getByTestId("key-error").textContent()).resolves.toBe("The last day is not a whole date.");
  // A period with no limit.
  await openAccount(page, gateway.url, account.id);
  await saved().getByTestId("key-spend-limit").fill("");
  await saved().getByTestId("key-save").click();
  await expect(saved().getByTestId("key-error").textContent()).resolves.toBe("A period needs a limit: enter one, or choose lifetime for none.");
  const key = (await admin(`/v1/admin/accounts/${account.id}/keys`)).data.find((k: { id: string }) => k.id === id);
  expect(key).toMatchObject({ spend_limit: 10, spend_limit_period: "day" });
  // Each field shows its name, not only a screen reader's label.
  expect(await saved().locator("label.mini span").allTextContents()).toEqual(["Name", "Last day (UTC)", "Limit (credits)", "Period", "Requests/min", "At once", "Models"]);
  // The operator sets the key's pace and models here too; its holder sees them.
  await saved().getByTestId("key-spend-limit").fill("10");
  await saved().getByTestId("key-expires").fill("2099-12-31");
  await saved().getByTestId("key-rpm").fill("120");
  await saved().getByTestId("key-at-once").fill("3");
  await saved().getByTestId("key-models-edit").fill("switchyard/*");
  await saved().getByTestId("key-save").click();
  await saved().getByTestId("key-pace").filter({ hasText: "120 requests a minute, 3 at once" }).waitFor();
  expect((await admin(`/v1/admin/accounts/${account.id}/keys`)).data.find((k: { id: string }) => k.id === id)).toMatchObject({ rate_limit_per_minute: 120, max_concurrent_requests: 3, models: ["switchyard/*"] });
  // Emptied, each goes back to the gateway's default (every model).
  await saved().getByTestId("key-rpm").fill("");
  await saved().getByTestId("key-at-once").fill("");
  await saved().getByTestId("key-models-edit").fill("");
  await saved().getByTestId("key-save").click();
  // Shown as the gateway's numbers (its default config: 60 a minute, no cap at once), not as a word.
  await saved().getByTestId("key-pace").filter({ hasText: "60 requests a minute (the gateway's)" }).waitFor();
  await expect(saved().getByTestId("key-pace").textContent()).resolves.toBe("60 requests a minute (the gateway's)");
  expect((await admin(`/v1/admin/accounts/${account.id}/keys`)).data.find((k: { id: string }) => k.id === id)).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: null, models: null });
  // The key's id, which request lists and downloads name it by, is on the row.
  await expect(saved().getByTestId("key-id").textContent()).resolves.toBe(id);
}, 60_000);

test("a made key's form holds until Done (no second key by a second click); without a clipboard the key is selected to copy", async () => {
  await page.addInitScript(() => {
    // A page on plain HTTP away from localhost has no clipboard API.
    Object.defineProperty((globalThis as any).navigator, "clipboard", { value: undefined, configurable: true });
  });
  await openAccount(page, gateway.url, account.id);
  // Only a new document runs the script (a fragment change does not make one).
  await page.reload();
  await page.getByTestId("key-name").waitFor();
  expect(await page.evaluate(() => (globalThis as any).navigator.clipboard)).toBeUndefined();
  const before = (await admin(`/v1/admin/accounts/${account.id}/keys`)).data.length;
  await page.getByTestId("key-name").fill("made once");
  await page.getByTestId("key-create").click();
  const secret = await text("key-secret");
  expect(await page.getByTestId("key-create").isDisabled()).toBe(true);
  expect(await page.getByTestId("key-name").isDisabled()).toBe(true);
  await page.getByTestId("key-create").click({ force: true });
  await Bun.sleep(300);
  expect((await admin(`/v1/admin/accounts/${account.id}/keys`)).data.length).toBe(before + 1);
  expect(await text("key-secret")).toBe(secret);

  await page.getByTestId("key-copy").click();
  await page.getByTestId("key-copy-note").filter({ hasText: /Copied\.|Selected: copy it/ }).waitFor();
  expect(await page.evaluate(() => String((globalThis as any).getSelection()))).toBe(secret);

  await page.getByTestId("key-secret-done").click();
  await page.getByTestId("key-row").filter({ hasText: "made once" }).waitFor();
  expect(await page.getByTestId("key-create").isDisabled()).toBe(false);
  expect(await page.getByTestId("key-name").inputValue()).toBe("");
  // Revoked, so the ten keys' limit is not reached by the tests after this one.
  await page.getByTestId("key-row").filter({ hasText: "made once" }).getByTestId("key-revoke").click();
  await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
  await page.getByTestId("key-row").filter({ hasText: "made once" }).getByTestId("key-revoke").click();
  await page.getByTestId("key-row").filter({ hasText: "made once" }).filter({ hasText: "revoked" }).waitFor({ state: "attached" });
  expect(await activeElement()).toMatchObject({ id: "keys-title" });
}, 60_000);

test("a top-up carries an idempotency key, the same on a retry of the same amount", async () => {
  await openAccount(page, gateway.url, account.id);
  const keys: string[] = [];
  let failNext = true;
  // The first answer is lost on the way back (the credits were added): the user clicks again.
  await page.route("**/console/api/accounts/*/credits", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    const response = await route.fetch();
    if (failNext) {
      failNext = false;
      return route.abort("connectionreset");
    }
    return route.fulfill({ response });
  });
  const balance = (await admin(`/v1/admin/accounts/${account.id}`)).balance;
  await page.getByTestId("topup-amount").fill("2");
  await page.getByTestId("topup-submit").click();
  await page.locator("form[aria-label='Top up'] .error").waitFor();
  // It says what the operator cannot see: whether the credits were added, and what to do.
  expect(await page.locator("form[aria-label='Top up'] .error").textContent()).toContain("may or may not have been added. Add the same amount again");
  await page.getByTestId("topup-submit").click();
  for (let i = 0; i < 100 && Math.abs(number(await text("balance")) - (balance + 2)) > 1e-6; i++) await Bun.sleep(100);
  expect(number(await text("balance"))).toBeCloseTo(balance + 2, 6);
  await page.unroute("**/console/api/accounts/*/credits");
  expect(keys.length).toBe(2);
  expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
  expect(keys[1]).toBe(keys[0]);
  expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBeCloseTo(balance + 2, 6);
}, 60_000);

test("the usage selects keep focus as the arrow keys step through them; a holder sees what was refused", async () => {
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-split").waitFor();
  await page.getByTestId("usage-split").focus();
  const first = await page.getByTestId("usage-split").inputValue();
  await page.keyboard.press("ArrowDown");
  await page.waitForFunction((was) => (globalThis as any).document.querySelector("[data-testid=usage-split]")?.value !== was, first);
  expect(await activeElement()).toMatchObject({ testid: "usage-split" });
  const second = await page.getByTestId("usage-split").inputValue();
  await page.keyboard.press("ArrowDown");
  await page.waitForFunction((was) => (globalThis as any).document.querySelector("[data-testid=usage-split]")?.value !== was, second);
  expect(await activeElement()).toMatchObject({ testid: "usage-split" });

  // The holder: a request refused for its model (404) shows, uncharged, on their usage view.
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-login").fill("holder@acme.example");
  await page.getByTestId("sign-in-password").fill(PASSWORD);
  await page.getByTestId("sign-in-submit").click();
  await page.getByTestId("balance").waitFor();
  const key = await (await fetch(`${gateway.url}/v1/admin/accounts/${account.id}/keys`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "refusals" }) })).json() as { key: string };
  const unknown = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST", headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "no/such-model", messages: [{ role: "user", content: "x" }] }),
  });
  expect(unknown.status).toBe(404);
  await page.goto(`${gateway.url}/console/#usage`);
  const line = page.getByTestId("usage-refused");
  await line.waitFor();
  const report = await admin(`/v1/admin/accounts/${account.id}/usage`);
  expect(report.rejected["404"]).toBeGreaterThanOrEqual(1);
  await expect(line.textContent()).resolves.toContain(`${report.rejected["404"]} × 404 (no such model)`);
}, 60_000);

test("a link opened before signing in is where sign-in leads; at 375 px nothing scrolls sideways and the navigation keeps whole words", async () => {
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in-submit").waitFor();
  await page.goto(`${gateway.url}/console/#requests`);
  await page.getByTestId("sign-in-login").fill("holder@acme.example");
  await page.getByTestId("sign-in-password").fill(PASSWORD);
  await page.getByTestId("sign-in-submit").click();
  await page.locator("#requests-title").waitFor();
  expect(page.url()).toEndWith("#requests");

  await page.setViewportSize({ width: 375, height: 800 });
  try {
    for (const view of ["#account", "#usage", "#requests"]) {
      await page.goto(`${gateway.url}/console/${view}`);
      await page.locator("main h1").waitFor();
      const widths = await page.evaluate(() => ({ page: (globalThis as any).document.documentElement.scrollWidth, view: (globalThis as any).innerWidth }));
      expect([view, widths.page]).toEqual([view, widths.view]);
      // Each navigation link on one line: as tall as the line, not a letter per line.
      const heights = await page.locator("nav a").evaluateAll((links) => links.map((a: any) => a.getBoundingClientRect().height));
      for (const height of heights) expect(height).toBeLessThan(30);
    }
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }
}, 60_000);

test("the operator sees who can sign in to an account and removes a login: that holder is signed out and cannot sign in", async () => {
  const holderContext = await (await anotherBrowser()).newContext();
  try {
    // The holder, signed in in another browser.
    const holderPage = await holderContext.newPage();
    await holderPage.goto(`${gateway.url}/console/`);
    await holderPage.getByTestId("sign-in-login").fill("holder@acme.example");
    await holderPage.getByTestId("sign-in-password").fill(PASSWORD);
    await holderPage.getByTestId("sign-in-submit").click();
    await holderPage.getByTestId("balance").waitFor();

    await page.getByTestId("sign-out").click();
    await page.getByTestId("sign-in-token").fill(ADMIN);
    await page.getByTestId("sign-in-token-submit").click();
    await page.getByTestId("account-row").first().waitFor();
    await openAccount(page, gateway.url, account.id);
    const rows = page.getByTestId("login-row");
    await rows.first().waitFor();
    expect(await rows.allTextContents()).toEqual([expect.stringContaining("holder@acme.example")]);
    await shot("operator-logins");
    await page.getByRole("button", { name: "Remove login holder@acme.example" }).click();
    await Bun.sleep(550); // a confirming click is one of its own (dom.ts, CONFIRM_AFTER_MS)
    await page.getByRole("button", { name: "Confirm: Remove login holder@acme.example. This cannot be undone." }).click();
    await page.getByText("No one can sign in to this account yet").waitFor();
    expect(await activeElement()).toMatchObject({ id: "logins-title" });
    expect(await admin(`/v1/admin/accounts/${account.id}/logins`)).toEqual({ logins: [], invites: [] });

    // The holder's next step finds the session ended, and the password no longer signs in.
    await holderPage.reload();
    await holderPage.getByTestId("sign-in-login").fill("holder@acme.example");
    await holderPage.getByTestId("sign-in-password").fill(PASSWORD);
    await holderPage.getByTestId("sign-in-submit").click();
    await expect(holderPage.getByTestId("sign-in-error").first().textContent()).resolves.toBe("Wrong login or password.");
  } finally {
    await holderContext.close();
  }
}, 60_000);

test("what a console probe found, fixed: one account per double click, an old error goes once a field changes, the last day a date can name saves, the title and the menu name the view, key rows stack on a phone, the chart follows the window, a used invite leads on", async () => {
  // Signed in as the operator (the test before). A double click makes one account.
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-name").fill("double-click-co");
  await page.getByTestId("account-credits").fill("3");
  await page.getByTestId("account-create").dblclick();
  await page.waitForURL(/#account\/acct_/);
  await page.locator("#account-title").waitFor();
  const made = (await admin("/v1/admin/accounts?name=double-click-co")).data;
  expect(made).toHaveLength(1);
  const id = page.url().split("#account/")[1]!;
  expect(await page.title()).toBe("Account double-click-co · Switchyard console");
  expect(await page.locator('nav a[aria-current="page"]').textContent()).toBe("Accounts");

  // A refused top-up's message goes once the amount is typed again.
  await page.getByTestId("topup-amount").fill("1.0000001");
  await page.getByTestId("topup-submit").click();
  const refusal = page.locator("form[aria-label='Top up'] .error");
  await refusal.waitFor();
  await page.getByTestId("topup-amount").fill("2");
  await refusal.waitFor({ state: "detached" });

  // 9999-12-31 as a key's last day: saved as the last instant a date can name (the day after has no four-digit year).
  const key = await fetch(`${gateway.url}/v1/admin/accounts/${id}/keys`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "forever" }) }).then((r) => r.json() as Promise<any>);
  await page.reload();
  const row = page.locator(`[data-key-id="${key.id}"]`);
  await row.getByTestId("key-expires").fill("9999-12-31");
  await row.getByTestId("key-save").click();
  await until("the key's last day saved", 10_000, async () => (await admin(`/v1/admin/accounts/${id}/keys`)).data.find((k: any) => k.id === key.id).expires_at === "9999-12-31T23:59:59.999Z");

  await page.setViewportSize({ width: 375, height: 800 });
  try {
    // The keys table's rows stack: nothing scrolls sideways, and each cell says its column.
    await page.reload();
    await page.locator(`[data-key-id="${key.id}"]`).waitFor();
    const widths = await page.evaluate(() => ({ page: (globalThis as any).document.documentElement.scrollWidth, view: (globalThis as any).innerWidth }));
    expect(widths.page).toBe(widths.view);
    const cell = page.locator(`[data-key-id="${key.id}"] td`).first();
    expect(await cell.getAttribute("data-label")).toBe("Name");
    expect(await cell.evaluate((td: any) => (globalThis as any).getComputedStyle(td).display)).toBe("block");
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  // The usage chart drawn at 1280 px follows the window down to 400.
  await page.goto(`${gateway.url}/console/#usage`);
  await page.locator(".uplot canvas").waitFor();
  await page.setViewportSize({ width: 400, height: 800 });
  try {
    await until("the page as narrow as the window", 10_000, async () => (await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)) <= 400);
    expect(await page.locator(".uplot").evaluate((el: any) => el.getBoundingClientRect().width)).toBeLessThanOrEqual(400);
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  // Recent requests name their account and key, the ids under the names.
  await page.goto(`${gateway.url}/console/#requests`);
  await page.getByTestId("request-row").first().waitFor();
  const rows = await page.getByTestId("request-row").allTextContents();
  expect(rows.some((r) => r.includes("acme-browser") && r.includes(account.id))).toBe(true);

  // The holder's invite was used long ago: the page says so and leads to the console.
  await page.goto(invite);
  await page.getByText("This invite link does not work").waitFor();
  await page.getByTestId("invite-to-sign-in").click();
  await page.getByTestId("account-row").first().waitFor();
}, 60_000);

test("a top-up answered by a proxy's 504 says the credits may have been added; after a reload the same amount is still added once", async () => {
  await openAccount(page, gateway.url, account.id);
  await page.getByTestId("topup-amount").waitFor();
  const keys: string[] = [];
  let proxyAnswers = true;
  // The gateway adds the credits; a proxy in front answers 504 in its own words.
  await page.route("**/console/api/accounts/*/credits", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    const response = await route.fetch();
    // A request the page let go of meanwhile (Playwright: "Route is already handled") needs no answer.
    if (proxyAnswers) {
      proxyAnswers = false;
      return route.fulfill({ status: 504, contentType: "text/html", body: "<html>504 Gateway Time-out</html>" }).catch(() => {});
    }
    return route.fulfill({ response }).catch(() => {});
  });
  try {
    const balance = (await admin(`/v1/admin/accounts/${account.id}`)).balance;
    await page.getByTestId("topup-amount").fill("3");
    await page.getByTestId("topup-submit").click();
    const error = page.locator("form[aria-label='Top up'] .error");
    await error.waitFor();
    expect(await error.textContent()).toContain("may or may not have been added");
    await page.reload();
    // The page says so where the operator types, and the same amount again is this top-up.
    // Waited for: the note is written once the page has read its account (a loaded machine failed a read made at once).
    await until("the pending top-up's note", 10_000, async () => (await page.getByTestId("topup-pending").textContent())?.includes("A top-up of 3 credits got no answer"));
    await page.getByTestId("topup-amount").fill("3");
    await page.getByTestId("topup-submit").click();
    await until("the balance shown", 10_000, async () => Math.abs(number(await text("balance")) - (balance + 3)) < 1e-6);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBeCloseTo(balance + 3, 6);
  } finally {
    await page.unroute("**/console/api/accounts/*/credits");
  }
}, 60_000);

test("the operator sets an account's request limits for all its keys; the view shows them, a value out of range or a fraction is not sent, empty fields clear them", async () => {
  await openAccount(page, gateway.url, account.id);
  await page.getByTestId("account-rpm").waitFor();
  await expect(text("account-requests")).resolves.toBe("no limit beyond each key's own");
  await page.getByTestId("account-rpm").fill("5");
  await page.getByTestId("account-concurrent").fill("2");
  await page.getByTestId("account-requests-submit").click();
  await page.getByTestId("account-requests").filter({ hasText: "5 a minute; 2 at once" }).waitFor();
  expect(await admin(`/v1/admin/accounts/${account.id}`)).toMatchObject({ rate_limit_per_minute: 5, max_concurrent_requests: 2 });
  // Requests the account's rate refused (429) are said beside its limits, as 402s are under the
  // balance (the operator saw 402s only; a console probe).
  const made = await (await fetch(`${gateway.url}/v1/admin/accounts/${account.id}/keys`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "rate probe" }) })).json() as { id: string; key: string };
  const statuses: number[] = [];
  for (let i = 0; i < 7; i++) statuses.push((await chat(made.key)).status);
  expect(statuses.filter((s) => s === 429)).toHaveLength(2);
  for (let tries = 0; ; tries++) {
    await page.reload();
    await page.getByTestId("account-rpm").waitFor();
    if ((await page.getByTestId("refused-for-rate").count()) > 0 || tries === 20) break;
    await Bun.sleep(250);
  }
  await expect(text("refused-for-rate")).resolves.toStartWith("2 requests in the last 24 hours were refused (429)");
  await fetch(`${gateway.url}/v1/admin/keys/${made.id}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN}` } });
  // Out of range: the browser's own check stops the form (the field says why), nothing is sent.
  const sent: string[] = [];
  const listen = (r: { method(): string; url(): string }) => void (r.method() === "PATCH" && sent.push(r.url()));
  page.on("request", listen);
  await page.getByTestId("account-concurrent").fill("0");
  await page.getByTestId("account-requests-submit").click();
  expect(await page.getByTestId("account-concurrent").evaluate((el) => (el as any).validity.rangeUnderflow)).toBe(true);
  // So is a fraction.
  await page.getByTestId("account-concurrent").fill("1.5");
  await page.getByTestId("account-requests-submit").click();
  expect(await page.getByTestId("account-concurrent").evaluate((el) => (el as any).validity.stepMismatch)).toBe(true);
  page.off("request", listen);
  expect(sent).toEqual([]);
  expect(await admin(`/v1/admin/accounts/${account.id}`)).toMatchObject({ rate_limit_per_minute: 5, max_concurrent_requests: 2 });
  await page.getByTestId("account-rpm").fill("");
  await page.getByTestId("account-concurrent").fill("");
  await page.getByTestId("account-requests-submit").click();
  await page.getByTestId("account-requests").filter({ hasText: "no limit beyond each key's own" }).waitFor();
  expect(await admin(`/v1/admin/accounts/${account.id}`)).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: null });
}, 60_000);

test("on a slow link a second click makes nothing twice (a top-up, an account), and a save from a page shown before another change keeps that change", async () => {
  const send = (method: string, path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const clickNow = (testid: string) => page.evaluate((id) => (globalThis as any).document.querySelector(`[data-testid=${id}]`).click(), testid);
  const posts: string[] = [];
  const countPosts = (r: { method(): string; url(): string }) => void (r.method() === "POST" && posts.push(new URL(r.url()).pathname));
  // While `holding`, every read of one account waits: the view is shown again only after the test's
  // second click (it used to answer 800 ms late and click at 100 ms, which only assumed the order).
  const slowReads = "**/console/api/accounts/*";
  let holding = false;
  await page.route(slowReads, async (route) => {
    if (route.request().method() === "GET") await until("the second click made", 20_000, () => !holding);
    await route.continue();
  });
  page.on("request", countPosts);
  try {
    await openAccount(page, gateway.url, account.id);
    await page.getByTestId("topup-amount").waitFor();
    const balance = (await admin(`/v1/admin/accounts/${account.id}`)).balance;
    await page.getByTestId("topup-amount").fill("1");
    const answered = page.waitForResponse((r) => r.url().endsWith("/credits") && r.request().method() === "POST");
    holding = true;
    await page.getByTestId("topup-submit").click();
    await answered;
    await Bun.sleep(100);
    // The second click, while the view is read again: the button holds, nothing is sent.
    await clickNow("topup-submit");
    holding = false;
    await until("the view shown again", 10_000, async () => Math.abs(number(await text("balance")) - (balance + 1)) < 1e-6, 100);
    expect(posts.filter((p) => p.endsWith("/credits"))).toHaveLength(1);
    expect((await admin(`/v1/admin/accounts/${account.id}`)).balance).toBeCloseTo(balance + 1, 6);

    // A new account, clicked twice while the new account's page loads: one account.
    await page.goto(`${gateway.url}/console/#accounts`);
    await page.getByTestId("account-name").waitFor();
    await page.getByTestId("account-name").fill("slow-link-account");
    const made = page.waitForResponse((r) => new URL(r.url()).pathname === "/console/api/accounts" && r.request().method() === "POST");
    holding = true;
    await page.getByTestId("account-create").click();
    await made;
    await Bun.sleep(100);
    await clickNow("account-create").catch(() => {}); // the view may have moved on already: nothing to click
    holding = false;
    await page.getByTestId("balance").waitFor({ timeout: 10_000 });
    const found = await admin("/v1/admin/accounts?name=slow-link-account");
    expect(found.data.map((a: any) => a.name)).toEqual(["slow-link-account"]);
  } finally {
    holding = false;
    page.off("request", countPosts);
    await page.unroute(slowReads);
  }

  // A key's spend limit and the account's rate set elsewhere after the page was shown (another
  // operator, the API): saving the key's new name, or the account's other request limit, keeps them.
  const key = await send("POST", `/v1/admin/accounts/${account.id}/keys`, { name: "stale-page" });
  await openAccount(page, gateway.url, account.id);
  const row = page.locator(`[data-key-id="${key.id}"]`);
  await row.getByTestId("key-rename").waitFor();
  await send("PATCH", `/v1/admin/keys/${key.id}`, { spend_limit: 7, spend_limit_period: "day" });
  await send("PATCH", `/v1/admin/accounts/${account.id}`, { rate_limit_per_minute: 9 });
  const sent: unknown[] = [];
  const listen = (r: { method(): string; postDataJSON(): unknown }) => void (r.method() === "PATCH" && sent.push(r.postDataJSON()));
  page.on("request", listen);
  await row.getByTestId("key-rename").fill("renamed on a stale page");
  await row.getByTestId("key-save").click();
  await page.locator(`[data-key-id="${key.id}"] [data-testid=key-rename][value="renamed on a stale page"]`).waitFor();
  await page.getByTestId("account-concurrent").fill("3");
  await page.getByTestId("account-requests-submit").click();
  await page.getByTestId("account-requests").filter({ hasText: "3 at once" }).waitFor();
  page.off("request", listen);
  expect(sent).toEqual([{ name: "renamed on a stale page" }, { max_concurrent_requests: 3 }]);
  const keys = (await admin(`/v1/admin/accounts/${account.id}/keys`)).data;
  expect(keys.find((k: any) => k.id === key.id)).toMatchObject({ name: "renamed on a stale page", spend_limit: 7, spend_limit_period: "day" });
  expect(await admin(`/v1/admin/accounts/${account.id}`)).toMatchObject({ rate_limit_per_minute: 9, max_concurrent_requests: 3 });
  await send("PATCH", `/v1/admin/accounts/${account.id}`, { rate_limit_per_minute: null, max_concurrent_requests: null });
}, 90_000);

test("usage by key tells apart two accounts' keys of one name; its table scrolls by keyboard, named by its caption; on a phone its total row says what each figure is", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const keys: string[] = [];
  for (const name of ["team one", "team two"]) {
    const made = await send("/v1/admin/accounts", { name, credits: 100 });
    const key = await send(`/v1/admin/accounts/${made.id}/keys`, { name: "ci" });
    keys.push(key.id);
    expect((await chat(key.key)).status).toBe(200);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-split").waitFor();
  await page.getByTestId("usage-split").selectOption("key");
  await page.getByTestId("usage-row").filter({ hasText: "ci (…" }).first().waitFor();
  const labels = (await page.getByTestId("usage-row").locator("th").allTextContents()).filter((t) => t.startsWith("ci"));
  expect(labels.sort()).toEqual(keys.map((id) => `ci (…${id.slice(-6)})`).sort());
  // The wide table's box: a keyboard stop, a region named by the table's caption.
  const box = page.locator("div.scroll").last();
  expect(await box.getAttribute("tabindex")).toBe("0");
  expect(await box.getAttribute("role")).toBe("region");
  expect(await box.getAttribute("aria-label")).toBe("By key, tokens by price class");
  // At 375 px the rows stack as cards, the total's cells named like the others'.
  await page.setViewportSize({ width: 375, height: 800 });
  const totals = await page.locator("table.wide tfoot td").evaluateAll((cells) => cells.map((c) => (c as any).getAttribute("data-label")));
  expect(totals[0]).toBe("Requests");
  expect(totals.every((l) => typeof l === "string" && l.length > 0)).toBe(true);
  await page.setViewportSize({ width: 1280, height: 900 });
}, 60_000);

test("an account at ten keys says why no key can be made (the button stays focusable); Escape takes back an armed revoke; on a phone its logins stack; the chart's legend tells time as the ticks do", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const full = await send("/v1/admin/accounts", { name: "ten keys", credits: 100 });
  for (let i = 0; i < 10; i++) await send(`/v1/admin/accounts/${full.id}/keys`, { name: `k${i}` });
  await send(`/v1/admin/accounts/${full.id}/invites`, { login: `a.very.long.login.name.of.someone.at.a.companyxx@example.com` });
  await page.setViewportSize({ width: 1280, height: 900 });
  await openAccount(page, gateway.url, full.id);
  await page.getByTestId("keys-full").waitFor();
  // Not `disabled` (which takes it out of the tab order), only marked so for assistive technology.
  expect(await page.getByTestId("key-create").evaluate((b) => (b as any).disabled)).toBe(false);
  expect(await page.getByTestId("key-create").getAttribute("aria-disabled")).toBe("true");
  expect(await page.getByTestId("key-create").getAttribute("aria-describedby")).toBe("keys-full");
  await page.getByTestId("key-create").click({ force: true });
  await page.locator(".form-out", { hasText: "10 keys in use" }).waitFor();
  expect((await admin(`/v1/admin/accounts/${full.id}/keys`)).data.length).toBe(10);

  // The API's other 409s (a login another account holds) are the form's to say: the page stays (a
  // review: every 409 had been read as "another sign-in replaced this page's session").
  await send(`/v1/admin/accounts/${account.id}/invites`, { login: "held.elsewhere@example.com" });
  await page.getByTestId("invite-login").fill("held.elsewhere@example.com");
  await page.getByTestId("invite-submit").click();
  await page.locator(".form-out", { hasText: "another account" }).waitFor();
  await Bun.sleep(200);
  expect(page.url()).toEndWith(`#account/${full.id}`);
  expect(await page.locator("#status").textContent()).not.toContain("replaced");

  // Enter in a key row's field saves the row.
  const firstRow = page.getByTestId("key-row").first();
  await firstRow.getByTestId("key-rename").fill("renamed by Enter");
  await firstRow.getByTestId("key-rename").press("Enter");
  await page.getByTestId("key-row").filter({ hasText: "renamed by Enter" }).first().waitFor();
  expect((await admin(`/v1/admin/accounts/${full.id}/keys`)).data.some((k: any) => k.name === "renamed by Enter")).toBe(true);

  // Escape: an armed revoke is taken back at once, and nothing is revoked.
  const revoke = page.getByTestId("key-row").first().getByTestId("key-revoke");
  await revoke.click();
  expect(await revoke.getAttribute("data-armed")).toBe("");
  await revoke.press("Escape");
  expect(await revoke.getAttribute("data-armed")).toBeNull();
  expect((await admin(`/v1/admin/accounts/${full.id}/keys`)).data.every((k: any) => k.revoked_at === null)).toBe(true);

  // A phone: the logins table stacks as cards; nothing scrolls sideways, a long login included.
  await page.setViewportSize({ width: 375, height: 800 });
  try {
    await page.reload();
    await page.getByTestId("login-row").first().waitFor();
    const widths = await page.evaluate(() => ({ page: (globalThis as any).document.documentElement.scrollWidth, view: (globalThis as any).innerWidth }));
    expect(widths.page).toBe(widths.view);
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  // The usage chart's legend, hovered: the time in UTC and 24 h, as the ticks and tables write it.
  await page.goto(`${gateway.url}/console/#usage`);
  const chart = page.getByTestId("usage-chart");
  await chart.locator("canvas").waitFor();
  const box = (await chart.locator(".u-over").boundingBox())!;
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  const shown = (await chart.locator(".u-legend .u-series").first().locator(".u-value").textContent())!.trim();
  expect(shown).toMatch(/^\d{2}-\d{2} \d{2}:\d{2} UTC$/);
}, 60_000);

test("the usage view's period and split are in the address (a reload and a bookmark keep them); a slow view says it is loading; after a top-up or a saved limit focus is back in its form", async () => {
  const hash = () => page.evaluate(() => (globalThis as any).location.hash as string);
  await page.goto(`${gateway.url}/console/#usage`);
  await page.getByTestId("usage-chart").waitFor();
  expect(await hash()).toBe("#usage/24h/model");
  await page.getByTestId("usage-range").selectOption("30d");
  await page.waitForFunction(() => (globalThis as any).location.hash === "#usage/30d/model");
  await page.getByTestId("usage-split").selectOption("account");
  await page.waitForFunction(() => (globalThis as any).location.hash === "#usage/30d/account");
  await page.reload();
  await page.getByTestId("usage-chart").waitFor();
  expect([await page.getByTestId("usage-range").inputValue(), await page.getByTestId("usage-split").inputValue()]).toEqual(["30d", "account"]);
  expect([await page.getByTestId("usage-chart").getAttribute("data-granularity"), await page.getByTestId("usage-chart").getAttribute("data-group-by")]).toEqual(["day", "account"]);

  // A slow answer: the page says it is loading (and is marked busy) until the view comes.
  const usageApi = (url: URL) => url.pathname === "/console/api/usage";
  // Held until the page has been seen loading, then let through: the answer provably comes after.
  let letThrough!: () => void;
  const held = new Promise<void>((resolve) => (letThrough = resolve));
  await page.route(usageApi, async (route) => {
    await within("the held usage answer let through", held);
    await route.continue();
  });
  try {
    await page.goto(`${gateway.url}/console/#usage/24h/key`);
    await page.getByTestId("loading").waitFor();
    expect(await page.locator("#main").getAttribute("aria-busy")).toBe("true");
    letThrough();
    await page.waitForFunction(() => (globalThis as any).document.querySelector("[data-testid=usage-chart]")?.getAttribute("data-group-by") === "key");
    expect(await page.getByTestId("loading").count()).toBe(0);
    expect(await page.locator("#main").getAttribute("aria-busy")).toBeNull();
    expect([await page.getByTestId("usage-range").inputValue(), await page.getByTestId("usage-split").inputValue()]).toEqual(["24h", "key"]);
  } finally {
    letThrough();
    await page.unroute(usageApi);
  }

  // A top-up: the view shows the new balance, and focus is back on the amount, not the page's top.
  await openAccount(page, gateway.url, account.id);
  const before = number(await text("balance"));
  // Each change draws the view again: the old one's control leaves the page, then focus is read.
  const redrawn = async (testid: string, act: () => Promise<void>) => {
    const old = await page.getByTestId(testid).elementHandle();
    await act();
    await page.waitForFunction((el) => !(el as any).isConnected, old);
    await page.getByTestId(testid).waitFor();
    return (await activeElement()).testid;
  };
  await page.getByTestId("topup-amount").fill("1");
  expect(await redrawn("topup-amount", () => page.getByTestId("topup-submit").click())).toBe("topup-amount");
  expect(number(await text("balance"))).toBeCloseTo(before + 1, 6);
  expect(await redrawn("account-limit-submit", () => page.getByTestId("account-limit-submit").click())).toBe("account-limit-submit");
  expect(await redrawn("account-requests-submit", () => page.getByTestId("account-requests-submit").click())).toBe("account-requests-submit");
}, 60_000);

test("names of 200 characters without a space keep every figure in view and the page its width; a column's hidden heading stays in its box (a phone held sideways)", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  // Names as long as the API takes them, without a space (a holder names their own keys).
  const long = await send("/v1/admin/accounts", { name: "N".repeat(200), credits: 100 });
  const key = await send(`/v1/admin/accounts/${long.id}/keys`, { name: "K".repeat(200) });
  expect((await chat(key.key)).status).toBe(200);
  // The page as wide as the window, and each table as wide as its box: every column in view.
  const widths = () => page.evaluate(() => {
    const d = (globalThis as any).document;
    return { page: d.documentElement.scrollWidth, boxes: [...d.querySelectorAll(".scroll")].map((s: any) => s.scrollWidth - s.clientWidth) };
  });
  await page.setViewportSize({ width: 1280, height: 900 });
  try {
    for (const [hash, ready] of [["#accounts", "account-row"], [`#account/${long.id}`, "key-row"], ["#usage/24h/key", "usage-row"], ["#requests", "request-row"]] as const) {
      await page.goto(`${gateway.url}/console/${hash}`);
      if (hash === "#accounts") {
        await page.getByTestId("account-search").fill("NNNNNNNN");
        await page.getByTestId("account-search").press("Enter");
      }
      await page.getByTestId(ready).filter({ hasText: "NNNNNNNN" }).or(page.getByTestId(ready).filter({ hasText: "KKKKKKKK" })).first().waitFor();
      if (hash.startsWith("#usage")) await page.locator(".uplot canvas").waitFor();
      const shown = await widths();
      expect([hash, shown.page, shown.boxes.every((over) => over <= 0)]).toEqual([hash, 1280, true]);
    }
    // The chart's legend cuts the name (the table under it has it whole).
    const legend = (await page.goto(`${gateway.url}/console/#usage/24h/key`), await page.locator(".u-legend .u-series").filter({ hasText: "KKKK" }).locator(".u-label").textContent())!;
    expect(legend).toBe(`${"K".repeat(39)}…`);
    // Held sideways (667 px, above the phone layout), the keys table scrolls in its box; the page does not.
    await page.setViewportSize({ width: 667, height: 375 });
    await openAccount(page, gateway.url, long.id);
    await page.getByTestId("key-row").first().waitFor();
    expect((await widths()).page).toBe(667);
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }
}, 60_000);

test("an invite link's form carries its login, so a password manager saves the new password under it", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const made = await send("/v1/admin/accounts", { name: "password manager co", credits: 1 });
  const link = await send(`/v1/admin/accounts/${made.id}/invites`, { login: "pm.user@example.com" });
  const said: string[] = [];
  const listen = (message: { text(): string }) => said.push(message.text());
  page.on("console", listen);
  try {
    await page.goto("about:blank");
    await page.goto(link.url);
    await page.getByTestId("invite-password").waitFor();
    const username = page.locator("form:has([data-testid=invite-password]) input[autocomplete=username]");
    expect(await username.inputValue()).toBe("pm.user@example.com");
    // Chromium's own check ("Password forms should have (optionally hidden) username fields").
    await Bun.sleep(200);
    expect(said.filter((text) => text.includes("username field"))).toEqual([]);
  } finally {
    page.off("console", listen);
  }
}, 60_000);

test("no keys and no requests yet are said in words; a change whose answer is lost says it may or may not have been made and what to do; a gateway's 500 at load is its words, not 'did not answer'", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const fresh = await send("/v1/admin/accounts", { name: "no keys yet", credits: 1 });
  await page.goto("about:blank");
  await openAccount(page, gateway.url, fresh.id);
  await expect(text("keys-empty")).resolves.toBe("No keys yet: create one below.");
  // No requests (an account holder's first day): words, not "The last 0 requests" over an empty table.
  const requestsApi = (url: URL) => url.pathname === "/console/api/requests";
  await page.route(requestsApi, (route) => route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ data: [] }) }));
  try {
    await page.goto(`${gateway.url}/console/#requests`);
    await page.getByTestId("requests-empty").waitFor();
    await expect(text("requests-empty")).resolves.toStartWith("No requests yet");
    expect(await page.locator("main table").count()).toBe(0);
  } finally {
    await page.unroute(requestsApi);
  }

  // The connection drops as a key is made: the key may exist with its secret lost, and the form says what to do.
  await openAccount(page, gateway.url, fresh.id);
  const keysApi = (url: URL) => url.pathname === `/console/api/accounts/${fresh.id}/keys`;
  await page.route(keysApi, (route) => route.abort("connectionreset"));
  try {
    await page.getByTestId("key-name").fill("lost");
    await page.getByTestId("key-create").click();
    await expect(page.locator("form[aria-label='New key'] .error").textContent()).resolves.toBe(
      "The gateway did not answer, so the key may or may not have been made, and if it was, its secret is lost: reload, revoke a key you did not get, and create another.",
    );
  } finally {
    await page.unroute(keysApi);
  }
  // A proxy's 502 as an account is made: its fate is not known either.
  await page.goto(`${gateway.url}/console/#accounts`);
  const accountsApi = (url: URL) => url.pathname === "/console/api/accounts";
  await page.route(accountsApi, (route) => (route.request().method() === "POST" ? route.fulfill({ status: 502, contentType: "text/html", body: "<h1>Bad gateway</h1>" }) : route.continue()));
  try {
    await page.getByTestId("account-name").fill("maybe made");
    await page.getByTestId("account-create").click();
    await expect(page.locator("form[aria-label='New account'] .error").textContent()).resolves.toBe(
      "The gateway did not answer (502), so the account may or may not have been made: reload and look for it before creating it again.",
    );
  } finally {
    await page.unroute(accountsApi);
  }

  // The gateway answers the first read with a 500 in its own words: those are shown, under a heading.
  const overviewApi = (url: URL) => url.pathname === "/console/api/overview";
  await page.route(overviewApi, (route) => route.fulfill({ status: 500, contentType: "application/json", body: JSON.stringify({ error: { message: "Internal error (request id r-1).", type: "server_error" } }) }));
  try {
    await page.goto("about:blank");
    await page.goto(`${gateway.url}/console/#accounts`);
    await page.locator("main h1", { hasText: "Could not load the console" }).waitFor();
    await expect(page.locator("main .error").textContent()).resolves.toBe("Internal error (request id r-1). Reload to try again.");
  } finally {
    await page.unroute(overviewApi);
  }
  await page.reload();
  await page.getByTestId("account-row").first().waitFor();
}, 60_000);

test("a used invite link opened on its own (from an e-mail, a new tab) leads to the console: to the sign-in, or to whoever is signed in", async () => {
  for (const signedIn of [true, false]) {
    const context2 = signedIn ? context : await (await anotherBrowser()).newContext();
    const tab = await context2.newPage();
    try {
      await tab.goto(`${gateway.url}/console/#invite=used-or-unknown-0123456789abcdef`);
      await tab.getByText("This invite link does not work").waitFor();
      await tab.getByTestId("invite-to-sign-in").click();
      // The operator's session in this browser shows the accounts; a browser signed in as no one, the sign-in.
      await tab.getByTestId(signedIn ? "account-row" : "sign-in-submit").first().waitFor({ timeout: 10_000 });
    } finally {
      await tab.close();
      if (!signedIn) await context2.close();
    }
  }
}, 60_000);

test("an invite link that a mail client ended with a full stop or a '>' still opens its form", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const made = await send("/v1/admin/accounts", { name: "mail client co", credits: 1 });
  const link = await send(`/v1/admin/accounts/${made.id}/invites`, { login: "mailed@example.com" });
  for (const end of [".", ">", ")."]) {
    await page.goto("about:blank");
    await page.goto(`${link.url}${end}`);
    await expect(text("invite-login-shown")).resolves.toBe("mailed@example.com");
  }
  await page.goto("about:blank");
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-row").first().waitFor();
}, 60_000);

test("after a key or an invite link is made, focus is on its Copy button (it fell to the page's top); the link copies as a key does", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const made = await send("/v1/admin/accounts", { name: "focus co", credits: 1 });
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("key-name").fill("focused");
  await page.getByTestId("key-create").click();
  await page.getByTestId("key-secret").waitFor();
  expect((await activeElement()).testid).toBe("key-copy");
  await page.getByTestId("key-secret-done").click();
  await page.getByTestId("key-row").first().waitFor();

  await page.getByTestId("invite-login").fill("focus.holder@example.com");
  await page.getByTestId("invite-submit").click();
  const url = await text("invite-url");
  expect((await activeElement()).testid).toBe("invite-copy");
  await page.keyboard.press("Enter");
  // This page has no clipboard API (an earlier test took it away): the link is selected to copy.
  await page.getByTestId("invite-copy-note").filter({ hasText: /Copied\.|Selected: copy it/ }).waitFor();
  expect(await page.evaluate(() => String((globalThis as any).getSelection()))).toBe(url);
  await page.getByTestId("invite-done").click();
}, 60_000);

test("the accounts list's search and page are in the address: a reload, or Back from an account, shows the same ones", async () => {
  const hash = () => page.evaluate(() => (globalThis as any).location.hash as string);
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-search").fill("bulk-05");
  await page.getByTestId("account-search").press("Enter");
  await page.getByTestId("accounts-caption").filter({ hasText: "named like" }).waitFor();
  expect(await hash()).toBe("#accounts?name=bulk-05");
  await page.reload();
  await page.getByTestId("accounts-caption").filter({ hasText: "named like “bulk-05”" }).waitFor();
  expect(await page.getByTestId("account-row").count()).toBe(10);
  expect(await page.getByTestId("account-search").inputValue()).toBe("bulk-05");

  // The second page (more than 100 accounts by now), kept by a reload and by Back from one of its accounts.
  await page.getByTestId("account-search").fill("");
  await page.getByTestId("account-search").press("Enter");
  await page.getByTestId("accounts-next").click();
  await page.getByTestId("accounts-caption").filter({ hasText: "(a later page)" }).waitFor();
  expect(await hash()).toMatch(/^#accounts\?cursor=/);
  const second = await page.getByTestId("account-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-account-id")));
  await page.reload();
  await page.getByTestId("accounts-caption").filter({ hasText: "(a later page)" }).waitFor();
  expect(await page.getByTestId("account-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-account-id")))).toEqual(second);
  await page.getByTestId("account-row").first().locator("a").click();
  await page.locator("#account-title").waitFor();
  await page.goBack();
  await page.getByTestId("accounts-caption").filter({ hasText: "(a later page)" }).waitFor();
  expect(await page.locator('nav a[aria-current="page"]').textContent()).toBe("Accounts");
  // The menu's Accounts is the list as last asked, as before.
  await page.locator("nav a", { hasText: "Models" }).click();
  await page.locator("#catalogue-title").waitFor();
  await page.locator("nav a", { hasText: "Accounts" }).click();
  await page.getByTestId("accounts-caption").filter({ hasText: "(a later page)" }).waitFor();
}, 60_000);

test("every Tab stop of an account's page shows where focus is, a date field's calendar button included", async () => {
  await openAccount(page, gateway.url, account.id);
  await page.getByTestId("key-expires").first().waitFor();
  await page.locator("#main").focus();
  const unseen: string[] = [];
  let dateStops = 0;
  for (let i = 0; i < 150; i++) {
    await page.keyboard.press("Tab");
    const stop = await page.evaluate(() => {
      const w = globalThis as any;
      const el = w.document.activeElement;
      if (!el || el === w.document.body) return null;
      return { what: `${el.tagName.toLowerCase()} ${el.getAttribute("data-testid") ?? el.getAttribute("aria-label") ?? el.textContent?.trim().slice(0, 30)}`, outline: w.getComputedStyle(el).outlineStyle as string, date: el.type === "date" };
    });
    if (stop === null) break;
    if (stop.date) dateStops++;
    if (stop.outline === "none") unseen.push(stop.what);
  }
  // The date fields were passed (each of their parts a stop), and no stop was without its outline.
  expect(dateStops).toBeGreaterThan(3);
  expect(unseen).toEqual([]);
}, 60_000);

test("a view that could not be read has a Try again button (the menu's link to it changed nothing)", async () => {
  const catalogueApi = (url: URL) => url.pathname === "/console/api/catalogue";
  await page.goto(`${gateway.url}/console/#accounts`);
  await page.getByTestId("account-row").first().waitFor();
  await page.route(catalogueApi, (route) => route.abort("internetdisconnected"));
  try {
    await page.locator("nav a", { hasText: "Models" }).click();
    await page.locator("main h1", { hasText: "Could not load this page" }).waitFor();
  } finally {
    await page.unroute(catalogueApi);
  }
  await page.getByTestId("view-retry").click();
  await page.getByTestId("model-row").first().waitFor();
}, 60_000);

test("the keys in use come first in an account's keys, the revoked ones after, newest first", async () => {
  const send = (method: string, path: string, body?: unknown) =>
    fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const made = await send("POST", "/v1/admin/accounts", { name: "key order co", credits: 1 });
  const keys: string[] = [];
  for (const name of ["first, revoked", "second, in use", "third, revoked", "fourth, in use"]) {
    keys.push((await send("POST", `/v1/admin/accounts/${made.id}/keys`, { name })).id);
    // Made in different milliseconds, so the gateway lists them in this order.
    await Bun.sleep(5);
  }
  await send("DELETE", `/v1/admin/keys/${keys[0]}`);
  await send("DELETE", `/v1/admin/keys/${keys[2]}`);
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("key-row").first().waitFor();
  // Those in use first, then the revoked ones, newest first in each.
  const expected = [keys[3], keys[1], keys[2], keys[0]];
  expect(await page.getByTestId("key-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key-id")))).toEqual(expected);
}, 60_000);

test("a login of 64 characters fits a phone: on its invite link's page and in the bar once signed in", async () => {
  const send = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const login = "a.login.as.long.as.the.gateway.takes.them@subdomain.company.exam";
  expect(login.length).toBe(64);
  const made = await send("/v1/admin/accounts", { name: "long login co", credits: 1 });
  const link = await send(`/v1/admin/accounts/${made.id}/invites`, { login });
  // A cookie jar of its own: the holder's sign-in would replace this story's operator session.
  const phoneContext = await (await anotherBrowser()).newContext({ viewport: { width: 375, height: 667 } });
  try {
    const phone = await phoneContext.newPage();
    const width = () => phone.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number);
    await phone.goto(link.url);
    await phone.getByTestId("invite-password").fill(PASSWORD);
    expect(await width()).toBe(375);
    await phone.getByTestId("invite-password-again").fill(PASSWORD);
    await phone.getByTestId("invite-accept").click();
    await phone.getByTestId("balance").waitFor();
    expect(await phone.locator("#who").textContent()).toContain(login);
    expect(await width()).toBe(375);
  } finally {
    await phoneContext.close();
  }
}, 60_000);

test("the operator sets an account's tokens a minute beside its request limits; the view says what applies, and an empty field clears it", async () => {
  const made = await (await fetch(`${gateway.url}/v1/admin/accounts`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ name: "token budget co", credits: 1 }) })).json() as { id: string };
  await openAccount(page, gateway.url, made.id);
  await page.getByTestId("account-tpm").waitFor();
  await expect(text("account-tokens")).resolves.toBe("no limit");
  await page.getByTestId("account-tpm").fill("90000");
  await page.getByTestId("account-requests-submit").click();
  await page.getByTestId("account-tokens").filter({ hasText: "90,000: prompts and answers together" }).waitFor();
  expect(await admin(`/v1/admin/accounts/${made.id}`)).toMatchObject({ tokens_per_minute: 90_000, rate_limit_per_minute: null, max_concurrent_requests: null });
  await page.getByTestId("account-tpm").fill("");
  await page.getByTestId("account-requests-submit").click();
  await page.getByTestId("account-tokens").filter({ hasText: "no limit" }).waitFor();
  expect(await admin(`/v1/admin/accounts/${made.id}`)).toMatchObject({ tokens_per_minute: null });
}, 60_000);
