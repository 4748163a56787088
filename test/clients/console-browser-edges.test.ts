import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.ts";
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

test("an account that made and revoked 600 keys draws the last 250 revoked, and the earlier ones a batch a click (10,000 were 140,000 elements and 5-17 s to show)", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "rotating co", credits: 5 });
  // Ten at a time, as the gateway allows ten in use: made, then revoked.
  for (let i = 0; i < 600; i += 10) {
    const keys = await Promise.all(Array.from({ length: 10 }, (_, j) => admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: `rotated ${i + j}` })));
    await Promise.all(keys.map((k) => admin("DELETE", `/v1/admin/keys/${k.id}`)));
  }
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: "in use" });
  const listed = (await admin("GET", `/v1/admin/accounts/${made.id}/keys`)).data as { id: string; revoked_at: string | null }[];
  const revoked = listed.filter((k) => k.revoked_at !== null).map((k) => k.id);
  expect(revoked).toHaveLength(600);

  await page.goto(`${gateway.url}/console/#account/${made.id}`);
  await page.getByTestId("key-row").first().waitFor();
  const fold = page.getByTestId("keys-revoked");
  const drawn = () => fold.getByTestId("key-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key-id")));
  expect(await fold.locator("summary").textContent()).toBe("Revoked keys (600)");
  // The last 250 made, in the order made, and no more in the page.
  expect(await drawn()).toEqual(revoked.slice(350));
  expect(await page.getByTestId("key-row").count()).toBe(251);
  await fold.locator("summary").click();
  expect(await fold.locator("caption").textContent()).toBe("Revoked keys: 600, no longer accepted; the last 250 made shown");
  const earlier = fold.getByTestId("keys-revoked-earlier");
  expect(await earlier.textContent()).toBe("Show 250 made earlier (350 not shown)");
  await earlier.click();
  expect(await drawn()).toEqual(revoked.slice(100));
  expect(await earlier.textContent()).toBe("Show 100 made earlier (100 not shown)");
  // By keyboard as by mouse; the rows drawn later name their columns too (a phone's cards).
  await earlier.focus();
  await page.keyboard.press("Enter");
  expect(await drawn()).toEqual(revoked);
  expect(await earlier.isVisible()).toBe(false);
  expect(await fold.locator("caption").textContent()).toBe("Revoked keys: 600, no longer accepted");
  expect(await fold.getByTestId("key-row").first().locator("td").first().getAttribute("data-label")).toBe("Name");
  expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("role"))).toBe("region");
}, 60_000);

test("a name in Hebrew or Arabic is typed right to left where it is given (the fields ran left to right: 'שלום!' read '!שלום'), as the tables show it", async () => {
  const made = await admin("POST", "/v1/admin/accounts", { name: "rtl fields co", credits: 5 });
  const NAME = "מפתח הייצור!";
  await admin("POST", `/v1/admin/accounts/${made.id}/keys`, { name: NAME });
  await page.goto(`${gateway.url}/console/#account/${made.id}`);
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
    await holder.goto(invite.url);
    await holder.getByTestId("invite-password").fill("a long enough password");
    await holder.getByTestId("invite-password-again").fill("a long enough password");
    await holder.getByTestId("invite-accept").click();
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
