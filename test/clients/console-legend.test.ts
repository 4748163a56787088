/**
 * The usage chart's legend as switches (console/client/usage-view.ts): uPlot isolates a line on a
 * Ctrl- or Cmd-click, turning every other line off; each switch's aria-checked follows its line.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.ts";
import { startGatewayProcess, type GatewayProcess, stopGatewayProcess } from "../helpers/gateway-process.ts";

const ADMIN = "admin-edges-0123456789abcdef0123456789abcdef";
const dir = mkdtempSync(join(tmpdir(), "switchyard-console-legend-"));
let gateway: GatewayProcess;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  [gateway, browser] = await Promise.all([
    startGatewayProcess({ SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_DEMO: "1", OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" }),
    launchChromium(),
  ]);
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<any>;
  };
  const acct = await admin("POST", "/v1/admin/accounts", { name: "two models", credits: 50 });
  const key = await admin("POST", `/v1/admin/accounts/${acct.id}/keys`, { name: "k" });
  const secret = key.key as string;
  for (const model of ["switchyard/lorem", "switchyard/echo"]) {
    const r = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hello there" }] }) });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
  }
  page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
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

test("a Ctrl-click on one line's name (uPlot isolates it) leaves every switch's aria-checked as its line is drawn", async () => {
  await page.goto(`${gateway.url}/console/#usage/24h/model`);
  await page.getByTestId("usage-chart").locator("canvas").waitFor();
  const rows = page.getByTestId("usage-chart").locator(".u-legend tr.u-series");
  const n = await rows.count();
  expect(n).toBeGreaterThanOrEqual(3); // the time row and at least two lines
  await rows.nth(1).locator("th").click({ modifiers: ["Control"] });
  const state: { line: number; drawn: boolean; ariaChecked: string | null }[] = [];
  for (let i = 1; i < n; i++) {
    state.push({ line: i, drawn: !(await rows.nth(i).getAttribute("class"))!.includes("u-off"), ariaChecked: await rows.nth(i).locator("th").getAttribute("aria-checked") });
  }
  for (const s of state) expect(s.ariaChecked).toBe(String(s.drawn));
}, 30_000);
